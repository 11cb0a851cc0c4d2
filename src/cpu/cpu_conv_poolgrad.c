/* cpu_conv_poolgrad.c: a 3x3 convolution's backward from the gradient of
 * the ReLU and 2x2 stride-2 max pool after it, without making the
 * convolution's output gradient.
 *
 * A 2x2 max pool passes each window's gradient to one of its four pixels,
 * per channel, and the ReLU before it to none where that pixel was not
 * positive: at least 3 of every 4 of the convolution's output gradients
 * are zero. oneDNN's backward passes multiply all of them (the seed CNN's
 * 32 -> 64 convolution: 2 x 236 MFLOP a batch of 64, 4.5 ms a step on a Zen
 * 4 core, half the step), after the pool's backward has written them out
 * (1.6 MB). Here both passes read the pool's gradient and the places its
 * forward kept, and do only the products of the gradients that can be
 * nonzero, a quarter of the multiply-adds:
 *   weights: dW[t][c][k] = sum over samples, windows of g(k) x(place + t, c)
 *   data:    dX[place + t][c] += g(k) W[t][c][k]
 * each vectorized over 16 input channels, over the live gradients only
 * (listed 16 at a time: the ReLU kills many more). The data pass keeps a
 * window's 4x4 input pixels (the 3x3 taps of its four places) in 16
 * registers and visits its channels grouped by which of the four places
 * each chose, so no branch depends on the data; the weights pass keeps one
 * output channel's 9 x 32 weight gradients in 18.
 *
 * The one design decision: these are exact in arithmetic (the products left
 * out are of exact zeros) but not oneDNN's order of summing, so a run's
 * results are not the unfused run's bits: tests/check_poolgrad.c holds the
 * gradients to double sums within 1e-5 of their terms' magnitude (1e-7
 * seen); losses part in the last digits after some steps. Each sum's order
 * is fixed: the same bits at any thread count (threads share output
 * channels in the weights pass, samples in the data pass). Taken on CPUs
 * with AVX-512 (F, BW, VL) for float32, and for bf16 activations where
 * the CPU has AVX512-BF16 (read as floats; the weights rounded to bf16 as
 * the bf16 convolutions read them; each sample's input gradient summed in
 * float and rounded once), input channels a multiple of 16, 3x3 'valid'
 * stride 1; DTRAIN_NO_FUSION or DTRAIN_NO_FAST_KERNELS keeps the pool's
 * backward and oneDNN's. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "runtime/half.h"
#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline))

int cpu_conv_poolgrad_fits(const struct dt_conv_shape *s, const struct dt_conv_shape *ps)
{
    /* float32, or bf16 activations under --precision bf16 (read as floats,
     * the input gradient rounded once) */
    const int types = cpu_precision == DT_PREC_FP32 ? !cpu_act_bf16 : cpu_act_bf16 && cpu_avx512_bf16();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_fast_kernels() == CPU_FAST_ALL && types && s->kh == 3 && s->kw == 3 && s->stride == 1 &&
           s->pad == 0 && s->c % 16 == 0 && ps->kh == 2 && ps->kw == 2 && ps->stride == 2 && ps->h == s->oh &&
           ps->w == s->ow && ps->c == s->k && 2 * ps->oh <= s->oh && 2 * ps->ow <= s->ow;
}

/* The pool's gradients as the passes read them, [n][window][k]: g (0 where
 * the ReLU stopped it: the pool's output, its window's maximum, not
 * positive), and which pixel of its window each chose (q = 2 dy + dx, from
 * the place its forward kept). */
struct picks {
    float *g;
    uint8_t *q;
};

/* 16 activations (masked) as floats: float32, or bf16 widened */
T512 INLINE __m512 ld16(__mmask16 m, const void *p, size_t at, const int bf)
{
    if (!bf) return _mm512_maskz_loadu_ps(m, (const float *)p + at);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + at);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

T512 static void pick(struct picks *pk, const struct dt_conv_shape *ps, int n, const int32_t *am, const void *dout,
                      const void *pooled, const int bf)
{
    const int K = ps->c, W = ps->w;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i wk = _mm512_set1_epi32(W * K), one = _mm512_set1_epi32(1);
    size_t row = 0; /* (sample, window) */
    for (int i = 0; i < n; i++)
        for (int py = 0; py < ps->oh; py++)
            for (int px = 0; px < ps->ow; px++, row++) {
                const int32_t base = (2 * py * W + 2 * px) * K;
                for (int k = 0; k < K; k += 16) {
                    const size_t at = row * (size_t)K + (size_t)k;
                    const __mmask16 m = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1u);
                    /* the place less the window's first pixel: 0, K, W K or W K + K */
                    const __m512i d = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, am + at),
                                                       _mm512_add_epi32(_mm512_set1_epi32(base + k), lane));
                    const __mmask16 dy = _mm512_cmpge_epi32_mask(d, wk);
                    const __mmask16 dx = _mm512_cmpneq_epi32_mask(_mm512_mask_sub_epi32(d, dy, d, wk), _mm512_setzero_si512());
                    const __m512i q = _mm512_add_epi32(_mm512_maskz_add_epi32(dy, one, one), _mm512_maskz_mov_epi32(dx, one));
                    _mm512_mask_cvtepi32_storeu_epi8(pk->q + at, m, q);
                    const __mmask16 live =
                        _mm512_mask_cmp_ps_mask(m, ld16(m, pooled, at, bf), _mm512_setzero_ps(), _CMP_GT_OQ);
                    _mm512_mask_storeu_ps(pk->g + at, m, ld16(live, dout, at, bf));
                }
            }
}

/* ---- weights: one output channel k's 9 x (16 CC) sums over a sample ----- */

/* Over the cnt windows where k's gradient lives: gs their gradients, at the
 * offsets in x of the patches their places chose. */
T512 INLINE void wgrad_k(const int CC, int cnt, const int32_t *at, const float *gs, const float *x, size_t C,
                         size_t wc, float *dwt, int c0)
{
    __m512 acc[9 * 2];
    for (int t = 0; t < 9; t++)
        for (int cc = 0; cc < CC; cc++) acc[t * CC + cc] = _mm512_loadu_ps(dwt + t * C + c0 + 16 * cc);
    for (int j = 0; j < cnt; j++) {
        const __m512 g = _mm512_set1_ps(gs[j]);
        /* the place's 3x3 patch: three rows of three pixels, C apart */
        const float *r0 = x + at[j] + c0;
        const float *row[3] = {r0, r0 + wc, r0 + 2 * wc};
        for (int ty = 0; ty < 3; ty++)
            for (int tx = 0; tx < 3; tx++)
                for (int cc = 0; cc < CC; cc++)
                    acc[(ty * 3 + tx) * CC + cc] = _mm512_fmadd_ps(g, _mm512_loadu_ps(row[ty] + tx * C + 16 * cc),
                                                                   acc[(ty * 3 + tx) * CC + cc]);
    }
    for (int t = 0; t < 9; t++)
        for (int cc = 0; cc < CC; cc++) _mm512_storeu_ps(dwt + t * C + c0 + 16 * cc, acc[t * CC + cc]);
}

/* dwt [K][9][C] and db [K] summed over the samples, sample by sample, each
 * over the windows where the channel's gradient lives. Threads take
 * contiguous ranges of output channels: the same sums at any count. */
T512 static void weights(const struct dt_conv_shape *s, const struct dt_conv_shape *ps, int n, const struct picks *all,
                         const void *inp, int bf, float *dwt, float *db)
{
    const int K = s->k, C = s->c, P = ps->oh * ps->ow;
    const size_t in_n = (size_t)s->h * s->w * C, g_n = (size_t)P * K, wc = (size_t)s->w * C;
    int32_t *base = dt_xmalloc(sizeof(int32_t) * ((size_t)P + 16)); /* each window's first pixel in x */
    for (int py = 0; py < ps->oh; py++)
        for (int px = 0; px < ps->ow; px++)
            base[py * ps->ow + px] = (int32_t)((size_t)(2 * py) * wc + (size_t)(2 * px) * C);
    /* a place's offset from its window's first pixel, by q = 2 dy + dx */
    const __m512i qoff = _mm512_setr_epi32(0, C, (int)wc, (int)wc + C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), me = omp_get_thread_num();
        const int k0 = (int)((long)K * me / nt), k1 = (int)((long)K * (me + 1) / nt);
        int32_t *at = dt_xmalloc(sizeof(int32_t) * ((size_t)P + 16));
        float *gs = dt_xmalloc(sizeof(float) * ((size_t)P + 16));
        float *wide = bf ? dt_xmalloc(sizeof(float) * in_n) : NULL; /* a bf16 sample as floats */
        for (int i = 0; i < n; i++) {
            const float *g = all->g + (size_t)i * g_n, *x = (const float *)inp + (size_t)i * in_n;
            if (bf) {
                const uint16_t *h = (const uint16_t *)inp + (size_t)i * in_n;
                for (size_t j = 0; j < in_n; j += 16) {
                    const __mmask16 m = in_n - j >= 16 ? 0xffff : (__mmask16)((1u << (in_n - j)) - 1u);
                    _mm512_mask_storeu_ps(wide + j, m, ld16(m, h, j, 1));
                }
                x = wide;
            }
            const uint8_t *q = all->q + (size_t)i * g_n;
            for (int k = k0; k < k1; k++) {
                int cnt = 0;
                for (int p0 = 0; p0 < P; p0 += 16) { /* the live windows, 16 at a time, packed */
                    const __mmask16 m = P - p0 >= 16 ? 0xffff : (__mmask16)((1u << (P - p0)) - 1u);
                    const __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(p0)),
                                                                            _mm512_set1_epi32(K)),
                                                         _mm512_set1_epi32(k));
                    const __m512 gv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, g, 4);
                    const __m512i qv = _mm512_and_si512(
                        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, (const void *)q, 1),
                        _mm512_set1_epi32(0xff));
                    const __m512i a = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, base + p0),
                                                       _mm512_permutexvar_epi32(qv, qoff));
                    const __mmask16 live = _mm512_mask_cmp_ps_mask(m, gv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
                    _mm512_storeu_si512(at + cnt, _mm512_maskz_compress_epi32(live, a));
                    _mm512_storeu_ps(gs + cnt, _mm512_maskz_compress_ps(live, gv));
                    cnt += __builtin_popcount(live);
                }
                float sum = db[k]; /* window by window (the dead ones add zero) */
                for (int j = 0; j < cnt; j++) sum += gs[j];
                db[k] = sum;
                float *dwk = dwt + (size_t)k * 9 * C;
                int c0 = 0;
                for (; c0 + 32 <= C; c0 += 32) wgrad_k(2, cnt, at, gs, x, (size_t)C, wc, dwk, c0);
                if (c0 < C) wgrad_k(1, cnt, at, gs, x, (size_t)C, wc, dwk, c0);
            }
        }
        free(at), free(gs), free(wide);
    }
    free(base);
}

/* ---- data: a window's 4x4 input pixels over its channels' picks ---------- */

/* The channels whose gradient chose place (dy, dx): their taps land on
 * region rows dy..dy+2, columns dx..dx+2. */
T512 INLINE void scatter_q(const int dy, const int dx, __m512 reg[16], int cnt, const int *list, const float *g,
                           const float *wt, size_t kstride)
{
    for (int i = 0; i < cnt; i++) {
        const int k = list[i];
        const __m512 gk = _mm512_set1_ps(g[k]);
        const float *w = wt + (size_t)k * kstride; /* its 9 taps' 16 channels, one after another */
        for (int ty = 0; ty < 3; ty++)
            for (int tx = 0; tx < 3; tx++)
                reg[(dy + ty) * 4 + dx + tx] =
                    _mm512_fmadd_ps(gk, _mm512_loadu_ps(w + (ty * 3 + tx) * 16), reg[(dy + ty) * 4 + dx + tx]);
    }
}

enum { KB_D = 32 }; /* output channels per pass over a sample's windows in the data pass */

T512 static void data_sample(const struct dt_conv_shape *s, const struct dt_conv_shape *ps, const struct picks *pk,
                             const float *wt, float *dx)
{
    const int K = s->k, C = s->c;
    int list[4][KB_D + 16];
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int c0 = 0; c0 < C; c0 += 16)
        for (int k0 = 0; k0 < K; k0 += KB_D) {
            const int k1 = k0 + KB_D < K ? k0 + KB_D : K;
            for (int py = 0; py < ps->oh; py++)
                for (int px = 0; px < ps->ow; px++) {
                    const size_t p = (size_t)py * ps->ow + px;
                    const float *g = pk->g + p * K;
                    const uint8_t *q = pk->q + p * K;
                    int cnt[4] = {0, 0, 0, 0};
                    for (int k = k0; k < k1; k += 16) { /* the live channels by place, 16 at a time, packed */
                        const __mmask16 m = k1 - k >= 16 ? 0xffff : (__mmask16)((1u << (k1 - k)) - 1u);
                        const __m512i kv = _mm512_add_epi32(lane, _mm512_set1_epi32(k));
                        const __m512i qv = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, q + k));
                        const __mmask16 live =
                            _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, g + k), _mm512_setzero_ps(), _CMP_NEQ_UQ);
                        for (int v = 0; v < 4; v++) {
                            const __mmask16 mv = _mm512_mask_cmpeq_epi32_mask(live, qv, _mm512_set1_epi32(v));
                            _mm512_storeu_si512(list[v] + cnt[v], _mm512_maskz_compress_epi32(mv, kv));
                            cnt[v] += __builtin_popcount(mv);
                        }
                    }
                    __m512 reg[16];
                    for (int r = 0; r < 16; r++) reg[r] = _mm512_setzero_ps();
                    const float *w = wt + (size_t)c0 * 9; /* wt: [k][C / 16][tap][16] */
                    scatter_q(0, 0, reg, cnt[0], list[0], g, w, (size_t)9 * C);
                    scatter_q(0, 1, reg, cnt[1], list[1], g, w, (size_t)9 * C);
                    scatter_q(1, 0, reg, cnt[2], list[2], g, w, (size_t)9 * C);
                    scatter_q(1, 1, reg, cnt[3], list[3], g, w, (size_t)9 * C);
                    for (int ry = 0; ry < 4; ry++)
                        for (int rx = 0; rx < 4; rx++) {
                            float *at = dx + ((size_t)(2 * py + ry) * s->w + 2 * px + rx) * C + c0;
                            _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), reg[ry * 4 + rx]));
                        }
                }
        }
}

/* bf16: each sample's sums made in float, rounded once (as a float32
 * result stored to bf16 activations anywhere else: cpu_to_bf16). */
T512 static void data(const struct dt_conv_shape *s, const struct dt_conv_shape *ps, int n, const struct picks *all,
                      const float *wt, void *dinp, int bf)
{
    const size_t in_n = (size_t)s->h * s->w * s->c, g_n = (size_t)ps->oh * ps->ow * s->k;
    if (!bf) memset(dinp, 0, sizeof(float) * in_n * (size_t)n);
#pragma omp parallel
    {
        float *wide = bf ? dt_xmalloc(sizeof(float) * in_n) : NULL;
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            const struct picks pk = {all->g + (size_t)i * g_n, all->q + (size_t)i * g_n};
            if (!bf) {
                data_sample(s, ps, &pk, wt, (float *)dinp + (size_t)i * in_n);
                continue;
            }
            memset(wide, 0, sizeof(float) * in_n);
            data_sample(s, ps, &pk, wt, wide);
            cpu_to_bf16((uint16_t *)dinp + (size_t)i * in_n, wide, in_n);
        }
        free(wide);
    }
}

void cpu_conv_poolgrad_backward(const struct dt_conv_shape *s, dt_pool_plan *pool, int n, void *dinp,
                                float *dweight, float *dbias, const void *dout, const void *pooled,
                                const void *inp, const float *weight)
{
    const int bf = cpu_act_bf16;
    const int verbose = cpu_kernel_verbose();
    double t0 = verbose ? cpu_conv_verbose_clock() : 0.0;
    const struct dt_conv_shape *ps = cpu_pool_shape(pool);
    const int K = s->k, C = s->c;
    const size_t gs = (size_t)n * ps->oh * ps->ow * K;
    /* q padded: the weights pass gathers it 4 bytes at a time */
    struct picks all = {dt_xmalloc(sizeof(float) * (gs ? gs : 1)), dt_xmalloc(gs + 4)};
    pick(&all, ps, n, cpu_pool_places(pool, n), dout, pooled, bf);
    float *t = dt_xmalloc(sizeof(float) * (size_t)K * 9 * C); /* [k][tap][c]: dW's sums, then W */
    memset(t, 0, sizeof(float) * (size_t)K * 9 * C);
    memset(dbias, 0, sizeof(float) * (size_t)K);
    weights(s, ps, n, &all, inp, bf, t, dbias);
    for (int k = 0; k < K; k++)
        for (int tc = 0; tc < 9 * C; tc++) dweight[(size_t)tc * K + k] = t[((size_t)k * 9 * C) + tc];
    /* the kernel's name says what the bench credits: the products of one
     * pixel in four (the pool's windows' share of the convolution) */
    if (verbose) cpu_conv_verbose(s, "dtrain_poolgrad:avx512", "direct", "backward_weights", n, t0);
    if (dinp) {
        t0 = verbose ? cpu_conv_verbose_clock() : 0.0;
        for (int k = 0; k < K; k++) /* [k][C / 16][tap][16] from HWIO [tap][c][k] */
            for (int tap = 0; tap < 9; tap++)
                for (int c = 0; c < C; c++)
                    t[(size_t)k * 9 * C + ((size_t)(c / 16) * 9 + tap) * 16 + c % 16] =
                        bf ? dt_bf16_to_f32(dt_f32_to_bf16(weight[((size_t)tap * C + c) * K + k])) /* as bf16 convolutions read it */
                           : weight[((size_t)tap * C + c) * K + k];
        data(s, ps, n, &all, t, dinp, bf);
        if (verbose) cpu_conv_verbose(s, "dtrain_poolgrad:avx512", "direct", "backward_data", n, t0);
    }
    free(t), free(all.g), free(all.q);
}

#else /* no AVX-512 intrinsics in this build */

int cpu_conv_poolgrad_fits(const struct dt_conv_shape *s, const struct dt_conv_shape *ps)
{
    (void)s, (void)ps;
    return 0;
}

void cpu_conv_poolgrad_backward(const struct dt_conv_shape *s, dt_pool_plan *pool, int n, void *dinp,
                                float *dweight, float *dbias, const void *dout, const void *pooled,
                                const void *inp, const float *weight)
{
    (void)s, (void)pool, (void)n, (void)dinp, (void)dweight, (void)dbias, (void)dout, (void)pooled, (void)inp,
        (void)weight;
    DT_DIE("cpu_conv_poolgrad_backward without AVX-512");
}

#endif
