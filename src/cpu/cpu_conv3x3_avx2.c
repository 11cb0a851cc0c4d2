/* cpu_conv3x3_avx2.c: float32 3x3 convolutions (stride 1, padding 1 or 0:
 * 'same' or 'valid'; NHWC activations, HWIO weights) for CPUs with AVX2 +
 * FMA and without AVX-512.
 *
 * On such a CPU oneDNN 2.6 has only its older jit:avx2 kernels, which ran
 * ResNet-20's 3x3 layers at 37-99 GFLOP/s of a core's 100 (bench/conv_layouts,
 * batch 64, Zen 3): backward-weights of the 16-channel stage at 37. These
 * kernels are one register tile each, the same 6 x 16 as the attention's
 * AVX2 set (12 accumulators, 2 vectors of B and the broadcast of A in 16
 * registers):
 *
 *  - forward: 6 output pixels x 16 output channels; for each of the 9 taps
 *    and each input channel, 2 loads of the weights' row, 6 broadcasts of
 *    the pixels' input and 12 FMAs. The 6 pixels run along the flattened
 *    batch (n, y, x), so rows and images end inside a tile at no cost: each
 *    pixel's tap reads a row of zeros where it falls in the padding.
 *  - backward-data is the forward of diff_dst with the weights turned
 *    half a circle and transposed (plan-owned, rebuilt each call: 9 C K
 *    floats).
 *  - backward-weights: 6 input channels x 16 output channels of one tap,
 *    reduced over the pixels of a chunk of rows small enough for L1/L2;
 *    the accumulators stay in registers across the chunk.
 *
 * Sums run in a fixed order (bitwise reproducible run to run, at any thread
 * count for forward and backward-data; backward-weights adds per-thread
 * partial sums in thread order), but not oneDNN's order: results differ from
 * oneDNN's in the last bits (check_layers: within 1e-5 of sum|terms|).
 * Threads: OpenMP over pixel tiles (forward) and row chunks (weights). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#define MAX_CH 4096 /* channels on either side; the zero row is this long */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <omp.h>

#define HAVE_CONV3 1
#define FAST2 __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))
#define PX 6 /* pixels (forward) or input channels (weights) per tile */

static const float zeros[MAX_CH] __attribute__((aligned(64)));

/* One pass as a forward convolution: input hi x wi, output ho x wo, tap
 * (ky, kx) of output (y, x) reading input (y + ky - pad, x + kx - pad). The
 * forward pass is the layer's own; backward-data runs diff_dst (oh x ow)
 * into diff_src (h x w) with pad 2 - pad (full correlation). */
struct geom {
    int hi, wi, ho, wo, pad;
};

/* out[p0 .. p0+R)[co0 .. co0+8 NV) = bias + sum over taps and ci; R <= 6,
 * NV 1 or 2, both constants where inlined. */
FAST2 static INLINE void fwd_tile(const int R, const int NV, const struct geom *g, long p0, int co0,
                                  float *out, const float *inp, const float *wt, int Ci, int Co,
                                  const float *bias, int relu)
{
    const int H = g->hi, W = g->wi, HO = g->ho, WO = g->wo;
    int n[PX], y[PX], x[PX];
    {
        long p = p0;
        n[0] = (int)(p / ((long)HO * WO));
        int r = (int)(p % ((long)HO * WO));
        y[0] = r / WO;
        x[0] = r % WO;
        for (int j = 1; j < R; j++) {
            n[j] = n[j - 1], y[j] = y[j - 1], x[j] = x[j - 1] + 1;
            if (x[j] == WO) {
                x[j] = 0;
                if (++y[j] == HO) y[j] = 0, n[j]++;
            }
        }
    }
    __m256 acc[PX][2];
#pragma GCC unroll 6
    for (int j = 0; j < R; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[j][v] = bias ? _mm256_loadu_ps(bias + co0 + 8 * v) : _mm256_setzero_ps();
    for (int t = 0; t < 9; t++) {
        const int dy = t / 3 - g->pad, dx = t % 3 - g->pad;
        const float *src[PX];
        int inside = 0;
#pragma GCC unroll 6
        for (int j = 0; j < R; j++) {
            const int iy = y[j] + dy, ix = x[j] + dx, in = iy >= 0 && iy < H && ix >= 0 && ix < W;
            src[j] = in ? inp + (((size_t)n[j] * H + (size_t)iy) * W + (size_t)ix) * (size_t)Ci : zeros;
            inside |= in;
        }
        if (!inside) continue; /* the whole tile's tap in the padding (backward-data's pad 2) */
        const float *w = wt + (size_t)t * Ci * Co + co0;
        for (int c = 0; c < Ci; c++) {
            __m256 b[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) b[v] = _mm256_loadu_ps(w + 8 * v);
#pragma GCC unroll 6
            for (int j = 0; j < R; j++) {
                const __m256 a = _mm256_broadcast_ss(src[j] + c);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) acc[j][v] = _mm256_fmadd_ps(a, b[v], acc[j][v]);
            }
            w += Co;
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            __m256 o = relu ? _mm256_max_ps(acc[j][v], _mm256_setzero_ps()) : acc[j][v];
            _mm256_storeu_ps(out + (size_t)(p0 + j) * Co + co0 + 8 * v, o);
        }
}

#define FWD_CASES(NV)                                                                  \
    switch (R) {                                                                       \
    case 6: fwd_tile(6, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;       \
    case 5: fwd_tile(5, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;       \
    case 4: fwd_tile(4, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;       \
    case 3: fwd_tile(3, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;       \
    case 2: fwd_tile(2, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;       \
    default: fwd_tile(1, NV, g, p0, co, out, inp, wt, Ci, Co, bias, relu); break;      \
    }

/* R pixels from p0, every output block: 16 wide, then 8 where Co % 16 == 8. */
FAST2 static void fwd_tiles(const struct geom *g, long p0, int R, float *out, const float *inp,
                            const float *wt, int Ci, int Co, const float *bias, int relu)
{
    int co = 0;
    for (; co + 16 <= Co; co += 16) FWD_CASES(2)
    if (co < Co) FWD_CASES(1)
}

/* out = conv(inp, wt) (+ bias, ReLU): Ci channels in, Co out, g's sizes. */
static void conv_core(const struct geom *g, int n, float *out, const float *inp, const float *wt, int Ci, int Co,
                      const float *bias, int relu)
{
    const long P = (long)n * g->ho * g->wo, tiles = (P + PX - 1) / PX;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < tiles; i++) {
        const long p0 = i * PX;
        fwd_tiles(g, p0, P - p0 < PX ? (int)(P - p0) : PX, out, inp, wt, Ci, Co, bias, relu);
    }
}

/* dw[t][ci0 .. ci0+R)[co0 .. co0+8 NV) += sum over the rows [r0, r1) of the
 * flattened (n, y) of inp(shifted by tap t) x dout. */
FAST2 static INLINE void bww_tile(const int R, const int NV, const struct dt_conv_shape *s, long r0, long r1, int t,
                                  int ci0, int co0, float *dw, const float *dout, const float *inp)
{
    const int H = s->h, W = s->w, C = s->c, K = s->k, HO = s->oh, WO = s->ow;
    const int dy = t / 3 - s->pad, dx = t % 3 - s->pad;
    /* output columns whose tap lands inside the input */
    const int x0 = dx < 0 ? -dx : 0, x1 = WO < W - dx ? WO : W - dx;
    float *d = dw + ((size_t)t * C + (size_t)ci0) * K + co0;
    __m256 acc[PX][2];
#pragma GCC unroll 6
    for (int j = 0; j < R; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[j][v] = _mm256_loadu_ps(d + (size_t)j * K + 8 * v);
    for (long r = r0; r < r1; r++) { /* r: output row of the flattened batch */
        const int y = (int)(r % HO), iy = y + dy;
        if (iy < 0 || iy >= H) continue;
        const float *a = inp + (((size_t)(r / HO) * H + (size_t)iy) * W + (size_t)(x0 + dx)) * C + ci0;
        const float *b = dout + ((size_t)r * WO + (size_t)x0) * K + co0;
        for (int x = x0; x < x1; x++) {
            __m256 bv[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 6
            for (int j = 0; j < R; j++) {
                const __m256 av = _mm256_broadcast_ss(a + j);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) acc[j][v] = _mm256_fmadd_ps(av, bv[v], acc[j][v]);
            }
            a += C;
            b += K;
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(d + (size_t)j * K + 8 * v, acc[j][v]);
}

#define BWW_CASES(NV)                                                                  \
    switch (R) {                                                                       \
    case 6: bww_tile(6, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;               \
    case 5: bww_tile(5, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;               \
    case 4: bww_tile(4, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;               \
    case 3: bww_tile(3, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;               \
    case 2: bww_tile(2, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;               \
    default: bww_tile(1, NV, s, r0, r1, t, ci, co, dw, dout, inp); break;              \
    }

/* Every tap, channel block and output block over one chunk of rows. */
FAST2 static void bww_chunk(const struct dt_conv_shape *s, long r0, long r1, float *dw, const float *dout,
                            const float *inp)
{
    for (int t = 0; t < 9; t++)
        for (int ci = 0; ci < s->c; ci += PX) {
            const int R = s->c - ci < PX ? s->c - ci : PX;
            int co = 0;
            for (; co + 16 <= s->k; co += 16) BWW_CASES(2)
            if (co < s->k) BWW_CASES(1)
        }
}

/* Output rows per chunk: inputs and gradients of the chunk in about 48 KiB. */
static long chunk_rows(const struct dt_conv_shape *s)
{
    long bytes = (long)s->w * (s->c + s->k) * (long)sizeof(float), rows = 49152 / bytes;
    return rows < 1 ? 1 : rows;
}

#endif /* x86-64 GCC */

int cpu_conv3x3_runs(const struct dt_conv_shape *s)
{
#ifdef HAVE_CONV3
    return cpu_fast_kernels() != CPU_FAST_NONE && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && s->kh == 3 && s->kw == 3 &&
           s->stride == 1 && (s->pad == 0 || s->pad == 1) && s->oh == s->h + 2 * s->pad - 2 &&
           s->ow == s->w + 2 * s->pad - 2 && s->oh > 0 && s->ow > 0 && s->c % 8 == 0 && s->k % 8 == 0 &&
           s->c <= MAX_CH && s->k <= MAX_CH;
#else
    (void)s;
    return 0;
#endif
}

int cpu_conv3x3_fits(const struct dt_conv_shape *s)
{
#ifdef HAVE_CONV3
    return cpu_conv3x3_runs(s) && (cpu_fast_kernels() == CPU_FAST_NO512 || !__builtin_cpu_supports("avx512f"));
#else
    (void)s;
    return 0;
#endif
}

#ifdef HAVE_CONV3
void cpu_conv3x3_forward(const struct dt_conv_shape *s, int relu, int n, float *out, const float *inp,
                         const float *weight, const float *bias)
{
    const struct geom g = {s->h, s->w, s->oh, s->ow, s->pad};
    conv_core(&g, n, out, inp, weight, s->c, s->k, bias, relu);
}

void cpu_conv3x3_flip(const struct dt_conv_shape *s, const float *weight, float *wflip)
{
    const int C = s->c, K = s->k;
    for (int t = 0; t < 9; t++) /* wflip[t][k][c] = weight[8 - t][c][k] */
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++)
                wflip[((size_t)t * K + (size_t)k) * C + c] = weight[((size_t)(8 - t) * C + (size_t)c) * K + k];
}

void cpu_conv3x3_backward_data(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                               const float *weight, float *wflip)
{
    const struct geom g = {s->oh, s->ow, s->h, s->w, 2 - s->pad};
    cpu_conv3x3_flip(s, weight, wflip);
    conv_core(&g, n, dinp, dout, wflip, s->k, s->c, NULL, 0);
}

void cpu_conv3x3_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                  const float *dout, const float *inp)
{
    const size_t nw = (size_t)9 * s->c * s->k;
    const long rows = (long)n * s->oh, step = chunk_rows(s), chunks = (rows + step - 1) / step;
    const int nt = omp_get_max_threads() < chunks ? omp_get_max_threads() : (int)chunks;
    float *part = nt > 1 ? dt_xcalloc((size_t)(nt - 1) * nw, sizeof(float)) : NULL;
    memset(dweight, 0, nw * sizeof(float));
#pragma omp parallel num_threads(nt > 1 ? nt : 1)
    {
        const int me = omp_get_thread_num(), th = omp_get_num_threads();
        float *dw = me == 0 ? dweight : part + (size_t)(me - 1) * nw;
        for (long i = me; i < chunks; i += th) { /* round robin: fixed per thread count */
            const long r0 = i * step, r1 = r0 + step < rows ? r0 + step : rows;
            bww_chunk(s, r0, r1, dw, dout, inp);
        }
    }
    for (int i = 1; i < nt; i++)
        for (size_t j = 0; j < nw; j++) dweight[j] += part[(size_t)(i - 1) * nw + j];
    free(part);
    cpu_bias_grad(dbias, dout, n * s->oh * s->ow, s->k, 0);
}
#else
void cpu_conv3x3_forward(const struct dt_conv_shape *s, int relu, int n, float *out, const float *inp,
                         const float *weight, const float *bias)
{
    (void)s, (void)relu, (void)n, (void)out, (void)inp, (void)weight, (void)bias;
}
void cpu_conv3x3_backward_data(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                               const float *weight, float *wflip)
{
    (void)s, (void)n, (void)dinp, (void)dout, (void)weight, (void)wflip;
}
void cpu_conv3x3_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                  const float *dout, const float *inp)
{
    (void)s, (void)n, (void)dweight, (void)dbias, (void)dout, (void)inp;
}
void cpu_conv3x3_flip(const struct dt_conv_shape *s, const float *weight, float *wflip)
{
    (void)s, (void)weight, (void)wflip;
}
#endif
