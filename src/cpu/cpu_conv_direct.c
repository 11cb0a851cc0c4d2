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
 * the two layers give apart (tests/check_fused.c). */
#include "config.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/half.h"
#include "runtime/status.h"
#include "cpu/cpu_internal.h"

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
        int32_t *restrict am, const void *inp, const float *restrict weight, const float *restrict bias, const int K,
        const int KH, const int KW, const int bf)
{
    const int ph = s->oh / 2, pw = s->ow / 2;
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * s->h * s->w;
        for (int py = 0; py < ph; py++)
            for (int px = 0; px < pw; px++) {
                float acc[4][MAX_K];
                for (int p = 0; p < 4; p++)
                    for (int k = 0; k < K; k++) acc[p][k] = bias[k];
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const float *w = weight + (size_t)(ky * KW + kx) * K;
                        for (int p = 0; p < 4; p++) {
                            const float v =
                                cpu_ld(inp, x + (size_t)(2 * py + p / 2 + ky) * s->w + 2 * px + p % 2 + kx, bf);
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
                    cpu_st(out, at + k, m, bf);
                    if (am) am[at + k] = a;
                }
            }
    }
}

DT_MULTIVERSION void cpu_conv_direct_pool_forward(const struct dt_conv_shape *s, int n, void *out, int32_t *am,
                                                  const void *inp, const float *restrict weight,
                                                  const float *restrict bias, int bf)
{
    if (bf) DIRECT_CASES(fwd_pool_kernel, 1, s, n, out, am, inp, weight, bias);
    else DIRECT_CASES(fwd_pool_kernel, 0, s, n, out, am, inp, weight, bias);
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

DT_MULTIVERSION void cpu_conv_direct_pool_backward_weights(const struct dt_conv_shape *s, int n,
                                                           float *restrict dweight, float *restrict dbias,
                                                           const void *dout, const void *out, const int32_t *am,
                                                           const void *inp, int bf)
{
    float *g = dt_xmalloc(sizeof(float) * (size_t)s->ow * (size_t)s->k * 2), *d = g + (size_t)s->ow * s->k;
    if (bf) DIRECT_CASES(bwdw_pool_kernel, 1, s, n, dweight, dbias, dout, out, am, inp, g, d);
    else DIRECT_CASES(bwdw_pool_kernel, 0, s, n, dweight, dbias, dout, out, am, inp, g, d);
    free(g);
}
