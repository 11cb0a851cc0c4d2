/* cpu_conv_direct.c: direct convolution for one input channel.
 *
 * The first layer of an image model sees one (or three) input channels, so
 * oneDNN's kernels, which vectorize over input channels, run mostly empty
 * vectors there: measured here, 0.85 ms forward and 0.97 ms backward-weights
 * per 64-sample batch of the reference CNN's first conv, 8% of its FLOPs and
 * 25% of its convolution time. This kernel vectorizes over the output
 * channels instead (NHWC with HWIO weights makes them contiguous): each
 * output pixel is kh*kw broadcast-FMAs into a vector of K accumulators.
 * Used for c == 1, stride 1, no padding, up to 64 filters; oneDNN does the
 * rest (and this layer's backward-data, which the first layer never needs).
 *
 * With the ReLU and a 2x2 stride-2 max pool after it (the seed CNN's first
 * block; model.c folds them, backend.h's conv_pool), one pass computes a
 * pool window's four pixels and keeps only their maximum and its place: the
 * convolution's output, 4x the pool's, is never written, nor read back by
 * the pool, nor its gradient made dense for the weight gradient, which
 * reads the pool's gradient at the kept places instead. Bit for bit what
 * the two layers give apart (tests/check_layers.c's conv_pool_fold tests).
 *
 * The folded passes also come written with AVX-512 intrinsics, taken where
 * the CPU has AVX512-BF16 and K is a multiple of 16 (DTRAIN_NO_FAST_KERNELS
 * turns them off): the same sums in the same order, so the same bits (a
 * build that does not contract the generic loops into FMAs differs, and a
 * check on first use then keeps the generic loops: self_check). In
 * the seed CNN's training on one Zen 4 core (DTRAIN_KERNEL_VERBOSE, means
 * over an epoch of 64-sample batches): forward 0.36 against 0.53 ms in
 * bf16, 0.29 against 0.33 in float32; backward-weights 0.29 against 0.45 ms
 * in bf16, 0.36 against 0.49 in float32. The generic kernels stay the
 * reference. */
#include "config.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/half.h"
#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define DIRECT_BF16_HW 1
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#define MAX_K 64

int cpu_conv_direct_fits(const struct dt_conv_shape *s)
{
    return s->c == 1 && s->stride == 1 && s->pad == 0 && s->k <= MAX_K && s->kh * s->kw <= 49;
}

/* The kernels are written once with K, KH, KW as parameters and inlined into
 * callers that pass constants, so the compiler keeps the accumulators in
 * vector registers and unrolls the taps (3x3 with 32 or 64 filters are the
 * cases that matter); anything else runs the same code with variables. */
#define PX 4 /* output pixels per inner block: independent FMA chains */

static inline __attribute__((always_inline)) void fwd_kernel(const struct dt_conv_shape *s, int relu, int n,
        void *out, const void *inp, const float *restrict weight,
        const float *restrict bias, const int K, const int KH, const int KW, const int bf)
{
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * s->h * s->w;
        for (int oy = 0; oy < s->oh; oy++) {
            const size_t orow = ((size_t)b * s->oh + oy) * s->ow * K;
            int ox = 0;
            for (; ox + PX <= s->ow; ox += PX) {
                float acc[PX][MAX_K];
                for (int p = 0; p < PX; p++)
                    for (int k = 0; k < K; k++) acc[p][k] = bias[k];
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const float *w = weight + (size_t)(ky * KW + kx) * K;
                        const size_t xr = x + (size_t)(oy + ky) * s->w + ox + kx;
                        for (int p = 0; p < PX; p++) {
                            const float v = cpu_ld(inp, xr + p, bf);
                            for (int k = 0; k < K; k++) acc[p][k] += v * w[k];
                        }
                    }
                for (int p = 0; p < PX; p++)
                    for (int k = 0; k < K; k++)
                        cpu_st(out, orow + (size_t)(ox + p) * K + k, relu && acc[p][k] < 0.0f ? 0.0f : acc[p][k], bf);
            }
            for (; ox < s->ow; ox++) {
                float acc[MAX_K];
                for (int k = 0; k < K; k++) acc[k] = bias[k];
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const float v = cpu_ld(inp, x + (size_t)(oy + ky) * s->w + ox + kx, bf);
                        const float *w = weight + (size_t)(ky * KW + kx) * K;
                        for (int k = 0; k < K; k++) acc[k] += v * w[k];
                    }
                for (int k = 0; k < K; k++)
                    cpu_st(out, orow + (size_t)ox * K + k, relu && acc[k] < 0.0f ? 0.0f : acc[k], bf);
            }
        }
    }
}

/* One sample's input (hw values from element x) as float32: in place for
 * float32, else widened into buf once, so that the taps' broadcasts read
 * float32 (a bf16 tap is a load, a shift and a broadcast each time). */
static inline __attribute__((always_inline)) const float *sample_f32(const void *inp, size_t x, size_t hw,
                                                                     float *restrict buf, const int bf)
{
    if (!bf) return (const float *)inp + x;
    for (size_t i = 0; i < hw; i++) buf[i] = cpu_ld(inp, x + i, 1);
    return buf;
}

/* The cases that matter with constants, for each activation type. */
#define DIRECT_CASES(kernel, bf, ...)                                                  \
    do {                                                                              \
        if (s->kh == 3 && s->kw == 3 && s->k == 32) kernel(__VA_ARGS__, 32, 3, 3, bf); \
        else if (s->kh == 3 && s->kw == 3 && s->k == 64) kernel(__VA_ARGS__, 64, 3, 3, bf); \
        else kernel(__VA_ARGS__, s->k, s->kh, s->kw, bf);                              \
    } while (0)

DT_MULTIVERSION void cpu_conv_direct_forward(const struct dt_conv_shape *s, int relu, int n, void *out,
                                             const void *inp, const float *restrict weight,
                                             const float *restrict bias, int bf)
{
    if (bf) DIRECT_CASES(fwd_kernel, 1, s, relu, n, out, inp, weight, bias);
    else DIRECT_CASES(fwd_kernel, 0, s, relu, n, out, inp, weight, bias);
}

/* The weight gradient's sums, kept in registers over a whole batch: one
 * pixel's gradient d [K] times its input taps added in, then written out. */
#define AI __attribute__((always_inline))
static inline AI void grads_zero(float dw[49][MAX_K], float *db, const int K, const int KH, const int KW)
{
    for (int t = 0; t < KH * KW; t++)
        for (int k = 0; k < K; k++) dw[t][k] = 0.0f;
    for (int k = 0; k < K; k++) db[k] = 0.0f;
}

static inline AI void grads_add(float dw[49][MAX_K], float *db, const float *restrict d, const void *inp,
                                size_t at, int w, const int K, const int KH, const int KW, const int bf)
{
    for (int k = 0; k < K; k++) db[k] += d[k];
    for (int ky = 0; ky < KH; ky++)
        for (int kx = 0; kx < KW; kx++) {
            const float v = cpu_ld(inp, at + (size_t)ky * w + kx, bf);
            for (int k = 0; k < K; k++) dw[ky * KW + kx][k] += v * d[k];
        }
}

static inline AI void grads_out(float dw[49][MAX_K], const float *db, float *restrict dweight,
                                float *restrict dbias, const int K, const int KH, const int KW)
{
    for (int t = 0; t < KH * KW; t++)
        for (int k = 0; k < K; k++) dweight[(size_t)t * K + k] = dw[t][k];
    for (int k = 0; k < K; k++) dbias[k] = db[k];
}

static inline AI void bwdw_kernel(const struct dt_conv_shape *s, int n, float *restrict dweight,
                                  float *restrict dbias, const void *dout, const void *inp, const int K,
                                  const int KH, const int KW, const int bf)
{
    float dw[49][MAX_K], db[MAX_K];
    grads_zero(dw, db, K, KH, KW);
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * s->h * s->w;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const size_t at = (((size_t)b * s->oh + oy) * s->ow + ox) * K;
                float dbuf[MAX_K];
                const float *restrict d = (const float *)dout + at; /* float32: read in place */
                if (bf) {
                    for (int k = 0; k < K; k++) dbuf[k] = cpu_ld(dout, at + k, 1);
                    d = dbuf;
                }
                grads_add(dw, db, d, inp, x + (size_t)oy * s->w + ox, s->w, K, KH, KW, bf);
            }
    }
    grads_out(dw, db, dweight, dbias, K, KH, KW);
}

/* dweight[ky][kx][0][k] = sum over samples and pixels of inp * dout; dbias = sum of dout. */
DT_MULTIVERSION void cpu_conv_direct_backward_weights(const struct dt_conv_shape *s, int n,
                                                      float *restrict dweight, float *restrict dbias,
                                                      const void *dout, const void *inp, int bf)
{
    if (bf) DIRECT_CASES(bwdw_kernel, 1, s, n, dweight, dbias, dout, inp);
    else DIRECT_CASES(bwdw_kernel, 0, s, n, dweight, dbias, dout, inp);
}

/* ---- folded with a 2x2 / 2 max pool ------------------------------------- */

/* A pool window's four pixels (pool2_px's tap order: (0,0), (0,1), (1,0),
 * (1,1)), each summed as fwd_kernel sums it, passed through the ReLU and
 * rounded to the activation type as fwd_kernel stores it; then pool2_px's
 * comparisons from -FLT_MAX. am: the places (offsets into one sample's
 * convolution output), NULL outside training. */
static inline __attribute__((always_inline)) void fwd_pool_kernel(const struct dt_conv_shape *s, int n, void *out,
        int32_t *restrict am, const void *inp, const float *restrict weight, const float *restrict bias,
        float *restrict xbuf, const int K, const int KH, const int KW, const int bf)
{
    const int ph = s->oh / 2, pw = s->ow / 2;
    for (int b = 0; b < n; b++) {
        const float *img = sample_f32(inp, (size_t)b * s->h * s->w, (size_t)s->h * s->w, xbuf, bf);
        for (int py = 0; py < ph; py++)
            for (int px = 0; px < pw; px++) {
                float acc[4][MAX_K];
                for (int p = 0; p < 4; p++)
                    for (int k = 0; k < K; k++) acc[p][k] = bias[k];
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const float *w = weight + (size_t)(ky * KW + kx) * K;
                        for (int p = 0; p < 4; p++) {
                            const float v = img[(size_t)(2 * py + p / 2 + ky) * s->w + 2 * px + p % 2 + kx];
                            for (int k = 0; k < K; k++) acc[p][k] += v * w[k];
                        }
                    }
                for (int p = 0; p < 4; p++)
                    for (int k = 0; k < K; k++) {
                        const float v = acc[p][k] < 0.0f ? 0.0f : acc[p][k];
                        acc[p][k] = bf ? dt_bf16_to_f32(dt_f32_to_bf16(v)) : v; /* as stored, then loaded */
                    }
                const size_t at = (((size_t)b * ph + py) * pw + px) * K;
                for (int k = 0; k < K; k++) {
                    float m = -FLT_MAX;
                    int32_t a = 0;
                    for (int p = 0; p < 4; p++) {
                        const int32_t off = ((2 * py + p / 2) * s->ow + 2 * px + p % 2) * K + k;
                        a = p == 0 || acc[p][k] > m ? off : a;
                        m = acc[p][k] > m ? acc[p][k] : m;
                    }
                    cpu_st_max(out, at + k, m, bf);
                    if (am) am[at + k] = a;
                }
            }
    }
}

#ifdef DIRECT_BF16_HW
/* fwd_pool_kernel for K a multiple of 16 (at most 64), written with AVX-512
 * intrinsics: the bf16 rounding of the window's four pixels is
 * vcvtneps2bf16 rather than runtime/half.h's bit arithmetic, which GCC
 * turns into mask juggling (it made this layer's bf16 forward 1.6x its
 * float32 one), and each input of the window's patch is broadcast once
 * (16 broadcasts instead of 36 for 3x3). The same sums in the same order
 * (a pixel's taps in raster order, one FMA each, as GCC compiles the
 * generic loop), the same nearest-even rounding (the instruction's flushing
 * of denormals changes nothing: FMA results are flushed already under
 * cpu_setup's FTZ), the same comparisons; so bit for bit the generic
 * kernel's (check_layers' conv_pool_fold tests compare it with the two
 * layers apart). */
BF_TARGET static inline __attribute__((always_inline)) void fwd_pool_hw_t(const struct dt_conv_shape *s, int n,
        void *restrict out, int32_t *restrict am, const void *inp, const float *restrict weight,
        const float *restrict bias, float *restrict buf, const int K, const int KH, const int KW, const int bf)
{
    const int ph = s->oh / 2, pw = s->ow / 2, V = K / 16;
    const __m512 zero = _mm512_setzero_ps(), lowest = _mm512_set1_ps(-FLT_MAX);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int b = 0; b < n; b++) {
        const float *img = sample_f32(inp, (size_t)b * s->h * s->w, (size_t)s->h * s->w, buf, bf);
        for (int py = 0; py < ph; py++)
            for (int px = 0; px < pw; px++) {
                __m512 acc[4][MAX_K / 16];
                for (int v = 0; v < V; v++) {
                    const __m512 b0 = _mm512_loadu_ps(bias + 16 * v);
                    for (int p = 0; p < 4; p++) acc[p][v] = b0;
                }
                /* each input of the window's (KH + 1) x (KW + 1) patch broadcast once, into
                 * every pixel it feeds; a pixel's taps still come in raster order */
                for (int r = 0; r <= KH; r++)
                    for (int c = 0; c <= KW; c++) {
                        const __m512 x = _mm512_set1_ps(img[(size_t)(2 * py + r) * s->w + 2 * px + c]);
                        for (int p = 0; p < 4; p++) {
                            const int ky = r - p / 2, kx = c - p % 2;
                            if (ky < 0 || ky >= KH || kx < 0 || kx >= KW) continue;
                            const float *w = weight + (size_t)(ky * KW + kx) * K;
                            for (int v = 0; v < V; v++)
                                acc[p][v] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 16 * v), acc[p][v]);
                        }
                    }
                const size_t at = (((size_t)b * ph + py) * pw + px) * K;
                for (int v = 0; v < V; v++) {
                    __m512 m = lowest;
                    __m256i m16 = _mm256_set1_epi16((short)0xff80); /* -FLT_MAX rounded: every pixel NaN */
                    __m512i a = _mm512_setzero_si512();
                    for (int p = 0; p < 4; p++) {
                        __m512 r = _mm512_max_ps(zero, acc[p][v]); /* the ReLU: acc < 0 ? 0 : acc */
                        __m256i h = _mm256_setzero_si256();
                        if (bf) { /* rounded as stored, then loaded */
                            h = (__m256i)_mm512_cvtneps_pbh(r);
                            r = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                        }
                        const __mmask16 gt = _mm512_cmp_ps_mask(r, m, _CMP_GT_OQ);
                        const __m512i off = _mm512_add_epi32(
                            lane, _mm512_set1_epi32(((2 * py + p / 2) * s->ow + 2 * px + p % 2) * K + 16 * v));
                        a = p == 0 ? off : _mm512_mask_blend_epi32(gt, a, off);
                        m = _mm512_mask_blend_ps(gt, m, r);
                        if (bf) m16 = _mm256_mask_blend_epi16(gt, m16, h);
                    }
                    if (bf) _mm256_storeu_si256((__m256i *)((uint16_t *)out + at + 16 * v), m16);
                    else _mm512_storeu_ps((float *)out + at + 16 * v, m);
                    if (am) _mm512_storeu_si512(am + at + 16 * v, a);
                }
            }
    }
}

BF_TARGET static void fwd_pool_hw(const struct dt_conv_shape *s, int n, void *out, int32_t *am, const void *inp,
                                  const float *weight, const float *bias, float *buf, int bf)
{
    const int k3 = s->kh == 3 && s->kw == 3;
    if (k3 && s->k == 32 && bf) fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, 32, 3, 3, 1);
    else if (k3 && s->k == 32) fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, 32, 3, 3, 0);
    else if (k3 && s->k == 64 && bf) fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, 64, 3, 3, 1);
    else if (k3 && s->k == 64) fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, 64, 3, 3, 0);
    else if (bf) fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, s->k, s->kh, s->kw, 1);
    else fwd_pool_hw_t(s, n, out, am, inp, weight, bias, buf, s->k, s->kh, s->kw, 0);
}
#endif

/* The generic folded passes (the reference), for every CPU. */
DT_MULTIVERSION static void generic_pool_forward(const struct dt_conv_shape *s, int n, void *out, int32_t *am,
                                                 const void *inp, const float *restrict weight,
                                                 const float *restrict bias, int bf)
{
    float *xbuf = bf ? dt_xmalloc(sizeof(float) * (size_t)s->h * (size_t)s->w) : NULL;
    if (bf) DIRECT_CASES(fwd_pool_kernel, 1, s, n, out, am, inp, weight, bias, xbuf);
    else DIRECT_CASES(fwd_pool_kernel, 0, s, n, out, am, inp, weight, bias, xbuf);
    free(xbuf);
}

/* bwdw_kernel on gradients made a row of pixels at a time, as the pool's
 * backward would have stored them: the pool's gradient where the pixel held
 * its window's maximum and the pool's output passed the ReLU, else 0 (and
 * 0 on a row or column the pool dropped). The same pixels in the same
 * order, so the same sums. g: a pooled row's gradients after the ReLU's
 * backward ([ow/2][K]), made once for the two rows that read it; d: a row
 * of pixels' ([ow][K]). */
static inline __attribute__((always_inline)) void bwdw_pool_kernel(const struct dt_conv_shape *s, int n,
        float *restrict dweight, float *restrict dbias, const void *dout, const void *out, const int32_t *am,
        const void *inp, float *restrict g, float *restrict d, const int K, const int KH, const int KW,
        const int bf)
{
    const int ph = s->oh / 2, pw = s->ow / 2;
    float dw[49][MAX_K], db[MAX_K];
    grads_zero(dw, db, K, KH, KW);
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * s->h * s->w;
        for (int oy = 0; oy < s->oh; oy++) {
            const int py = oy / 2;
            const size_t row = ((size_t)b * ph + py) * pw * K;
            if (py < ph) {
                if (oy % 2 == 0)
                    for (size_t i = 0; i < (size_t)pw * K; i++)
                        g[i] = cpu_ld(out, row + i, bf) > 0.0f ? cpu_ld(dout, row + i, bf) : 0.0f;
                for (int ox = 0; ox < 2 * pw; ox++) {
                    const int32_t *a = am + row + (size_t)(ox / 2) * K, off = (oy * s->ow + ox) * K;
                    for (int k = 0; k < K; k++)
                        d[(size_t)ox * K + k] = a[k] == off + k ? g[(size_t)(ox / 2) * K + k] : 0.0f;
                }
                for (size_t i = (size_t)2 * pw * K; i < (size_t)s->ow * K; i++) d[i] = 0.0f;
            } else {
                for (size_t i = 0; i < (size_t)s->ow * K; i++) d[i] = 0.0f;
            }
            for (int ox = 0; ox < s->ow; ox++)
                grads_add(dw, db, d + (size_t)ox * K, inp, x + (size_t)oy * s->w + ox, s->w, K, KH, KW, bf);
        }
    }
    grads_out(dw, db, dweight, dbias, K, KH, KW);
}

#ifdef DIRECT_BF16_HW
/* bwdw_pool_kernel with AVX-512 intrinsics, for K a multiple of 16, 32
 * channels (V = 2 vectors) a pass: 9 taps x 2 vectors of weight-gradient
 * sums and 2 of bias stay in registers over the whole batch, and a pixel's
 * gradient is made in registers (its window's place compared with the
 * pixel's, the pooled gradient where equal) instead of in a row of memory
 * read back tap by tap. The same pixels in the same order, one FMA per tap
 * as GCC compiles the generic loop: the same sums, bit for bit. */
BF_TARGET static inline __attribute__((always_inline)) void bwdw_pool_hw_t(const struct dt_conv_shape *s, int n,
        float *restrict dweight, float *restrict dbias, const void *dout, const void *out, const int32_t *am,
        const void *inp, float *restrict g, float *restrict buf, int k0, const int V, const int K, const int KH,
        const int KW, const int bf)
{
    const int ph = s->oh / 2, pw = s->ow / 2;
    const __m512 zero = _mm512_setzero_ps();
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 dw[49][2], db[2];
    for (int v = 0; v < V; v++) {
        db[v] = zero;
        for (int t = 0; t < KH * KW; t++) dw[t][v] = zero;
    }
    for (int b = 0; b < n; b++) {
        const float *img = sample_f32(inp, (size_t)b * s->h * s->w, (size_t)s->h * s->w, buf, bf);
        for (int oy = 0; oy < s->oh; oy++) {
            const int py = oy / 2;
            const size_t row = ((size_t)b * ph + py) * pw * K + k0;
            if (py < ph && oy % 2 == 0) /* the pooled row's gradients after the ReLU's backward */
                for (int px = 0; px < pw; px++)
                    for (int v = 0; v < V; v++) {
                        const size_t at = row + (size_t)px * K + 16 * v;
                        __m512 y, dy;
                        if (bf) {
                            y = _mm512_castsi512_ps(_mm512_slli_epi32(
                                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)out + at))), 16));
                            dy = _mm512_castsi512_ps(_mm512_slli_epi32(
                                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)dout + at))), 16));
                        } else {
                            y = _mm512_loadu_ps((const float *)out + at);
                            dy = _mm512_loadu_ps((const float *)dout + at);
                        }
                        _mm512_storeu_ps(g + (size_t)px * 16 * V + 16 * v,
                                         _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), dy));
                    }
            int ox = 0;
            /* The two pixels of a window's row at once: its places and
             * gradients loaded once, each sum given pixel ox's product,
             * then ox + 1's (the order of one pixel at a time), each
             * input read as a broadcast operand of its FMAs. */
            if (py < ph)
                for (; ox + 1 < 2 * pw; ox += 2) {
                    __m512 d0[2], d1[2];
                    for (int v = 0; v < V; v++) {
                        const __m512i a = _mm512_loadu_si512(am + row + (size_t)(ox / 2) * K + 16 * v);
                        const __m512i off = _mm512_add_epi32(lane, _mm512_set1_epi32((oy * s->ow + ox) * K + k0 + 16 * v));
                        const __m512 gv = _mm512_loadu_ps(g + (size_t)(ox / 2) * 16 * V + 16 * v);
                        d0[v] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, off), gv);
                        d1[v] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(off, _mm512_set1_epi32(K))), gv);
                        db[v] = _mm512_add_ps(_mm512_add_ps(db[v], d0[v]), d1[v]);
                    }
                    for (int ky = 0; ky < KH; ky++) {
                        const float *r = img + (size_t)(oy + ky) * s->w + ox;
                        for (int kx = 0; kx < KW; kx++) {
                            const __m512 x0 = _mm512_set1_ps(r[kx]), x1 = _mm512_set1_ps(r[kx + 1]);
                            for (int v = 0; v < V; v++)
                                dw[ky * KW + kx][v] = _mm512_fmadd_ps(x1, d1[v], _mm512_fmadd_ps(x0, d0[v], dw[ky * KW + kx][v]));
                        }
                    }
                }
            /* The pixels no window covers (a column or row the pool
             * dropped): gradient 0, their products still added, as the
             * generic kernel does (an infinite input makes them NaN). */
            for (; ox < s->ow; ox++) {
                for (int v = 0; v < V; v++) db[v] = _mm512_add_ps(db[v], zero);
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const __m512 x = _mm512_set1_ps(img[(size_t)(oy + ky) * s->w + ox + kx]);
                        for (int v = 0; v < V; v++) dw[ky * KW + kx][v] = _mm512_fmadd_ps(x, zero, dw[ky * KW + kx][v]);
                    }
            }
        }
    }
    for (int v = 0; v < V; v++) {
        for (int t = 0; t < KH * KW; t++) _mm512_storeu_ps(dweight + (size_t)t * K + k0 + 16 * v, dw[t][v]);
        _mm512_storeu_ps(dbias + k0 + 16 * v, db[v]);
    }
}

/* The passes over 32 (or a last 16) channels, 3x3 windows with constants. */
BF_TARGET static void bwdw_pool_hw(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                   const void *dout, const void *out, const int32_t *am, const void *inp, float *g,
                                   float *buf, int bf)
{
    for (int k0 = 0; k0 < s->k; k0 += 32) {
        const int two = s->k - k0 >= 32;
        if (s->kh == 3 && s->kw == 3) {
            if (bf && two) bwdw_pool_hw_t(s, n, dweight, dbias, dout, out, am, inp, g, buf, k0, 2, s->k, 3, 3, 1);
            else if (bf) bwdw_pool_hw_t(s, n, dweight, dbias, dout, out, am, inp, g, buf, k0, 1, s->k, 3, 3, 1);
            else if (two) bwdw_pool_hw_t(s, n, dweight, dbias, dout, out, am, inp, g, buf, k0, 2, s->k, 3, 3, 0);
            else bwdw_pool_hw_t(s, n, dweight, dbias, dout, out, am, inp, g, buf, k0, 1, s->k, 3, 3, 0);
        } else {
            bwdw_pool_hw_t(s, n, dweight, dbias, dout, out, am, inp, g, buf, k0, two ? 2 : 1, s->k, s->kh, s->kw, bf);
        }
    }
}
#endif

DT_MULTIVERSION static void generic_pool_backward_weights(const struct dt_conv_shape *s, int n,
                                                          float *restrict dweight, float *restrict dbias,
                                                          const void *dout, const void *out, const int32_t *am,
                                                          const void *inp, int bf)
{
    float *g = dt_xmalloc(sizeof(float) * (size_t)s->ow * (size_t)s->k * 2), *d = g + (size_t)s->ow * s->k;
    if (bf) DIRECT_CASES(bwdw_pool_kernel, 1, s, n, dweight, dbias, dout, out, am, inp, g, d);
    else DIRECT_CASES(bwdw_pool_kernel, 0, s, n, dweight, dbias, dout, out, am, inp, g, d);
    free(g);
}

#ifdef DIRECT_BF16_HW
/* Whether the intrinsic passes give the generic loops' bits in this build.
 * They do where GCC contracts the generic `acc += v * w` into one FMA, as it
 * does at -O2 and above in its default (GNU C) mode; at -O1 or -O0, with
 * -std=c11 or -ffp-contract=off it does not, and the two differ in the last
 * bits. So before their first use both run on a small problem (two 10x10
 * images into 48 filters: a pass of 32 channels and one of 16; both
 * activation types; both passes), and if any bit differs every call takes
 * the generic loops. */
static float self_value(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(*x >> 41) / 4194304.0f - 1.0f; /* [-1, 1) */
}

static int self_check(void)
{
    enum { H = 10, K = 48, OH = H - 2, PH = OH / 2, N = 2, NI = N * H * H, NO = N * PH * PH * K };
    const struct dt_conv_shape s = {.h = H, .w = H, .c = 1, .k = K, .kh = 3, .kw = 3, .stride = 1, .pad = 0,
                                    .oh = OH, .ow = OH};
    float *in32 = dt_xmalloc(sizeof(float) * (NI + 10 * K + 2 * NO + H * H + 2 * OH * K));
    float *w = in32 + NI, *b = w + 9 * K, *dy32 = b + K, *buf = dy32 + NO, *g = buf + H * H;
    float *outs = dt_xmalloc(sizeof(float) * 2 * (NO + 10 * K)), *grads = outs + 2 * NO;
    uint16_t *in16 = dt_xmalloc(sizeof(uint16_t) * (NI + NO)), *dy16 = in16 + NI;
    int32_t *am = dt_xmalloc(sizeof(int32_t) * 2 * NO);
    uint64_t x = 54;
    for (int i = 0; i < NI; i++) in16[i] = dt_f32_to_bf16(in32[i] = self_value(&x));
    for (int i = 0; i < 10 * K; i++) w[i] = self_value(&x); /* the weights, then the bias */
    for (int i = 0; i < NO; i++) dy16[i] = dt_f32_to_bf16(dy32[i] = self_value(&x));
    int same = 1;
    for (int bf = 0; bf <= 1 && same; bf++) {
        const void *in = bf ? (const void *)in16 : in32, *dy = bf ? (const void *)dy16 : dy32;
        float *o0 = outs, *o1 = outs + NO, *dw0 = grads, *dw1 = grads + 10 * K;
        memset(outs, 0, sizeof(float) * 2 * NO);
        generic_pool_forward(&s, N, o0, am, in, w, b, bf);
        fwd_pool_hw(&s, N, o1, am + NO, in, w, b, buf, bf);
        generic_pool_backward_weights(&s, N, dw0, dw0 + 9 * K, dy, o0, am, in, bf);
        bwdw_pool_hw(&s, N, dw1, dw1 + 9 * K, dy, o0, am, in, g, buf, bf);
        same = !memcmp(o0, o1, sizeof(float) * NO) && !memcmp(am, am + NO, sizeof(int32_t) * NO) &&
               !memcmp(dw0, dw1, sizeof(float) * 10 * K);
    }
    free(in32);
    free(outs);
    free(in16);
    free(am);
    return same;
}

/* The intrinsic passes run here: a CPU with AVX512-BF16, the fast kernels
 * on, K a multiple of 16, and this build's generic loops their twin. */
static int use_hw(const struct dt_conv_shape *s)
{
    static int agrees = -1;
    if (s->k % 16 != 0 || cpu_fast_kernels() != CPU_FAST_ALL || !cpu_avx512_bf16()) return 0;
    if (agrees < 0) agrees = self_check();
    return agrees;
}
#endif

int cpu_conv_direct_pool_fast(const struct dt_conv_shape *s)
{
#ifdef DIRECT_BF16_HW
    return use_hw(s);
#else
    (void)s;
    return 0;
#endif
}

void cpu_conv_direct_pool_forward(const struct dt_conv_shape *s, int n, void *out, int32_t *am, const void *inp,
                                  const float *weight, const float *bias, int bf)
{
#ifdef DIRECT_BF16_HW
    if (use_hw(s)) {
        float *buf = bf ? dt_xmalloc(sizeof(float) * (size_t)s->h * (size_t)s->w) : NULL;
        fwd_pool_hw(s, n, out, am, inp, weight, bias, buf, bf);
        free(buf);
        return;
    }
#endif
    generic_pool_forward(s, n, out, am, inp, weight, bias, bf);
}

void cpu_conv_direct_pool_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                           const void *dout, const void *out, const int32_t *am, const void *inp,
                                           int bf)
{
#ifdef DIRECT_BF16_HW
    if (use_hw(s)) {
        float *g = dt_xmalloc(sizeof(float) * (size_t)s->ow * (size_t)s->k * 2);
        float *buf = bf ? dt_xmalloc(sizeof(float) * (size_t)s->h * (size_t)s->w) : NULL;
        bwdw_pool_hw(s, n, dweight, dbias, dout, out, am, inp, g, buf, bf);
        free(buf);
        free(g);
        return;
    }
#endif
    generic_pool_backward_weights(s, n, dweight, dbias, dout, out, am, inp, bf);
}
