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
 * rest (and this layer's backward-data, which the first layer never needs). */
#include "config.h"

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

static inline __attribute__((always_inline)) void bwdw_kernel(const struct dt_conv_shape *s, int n,
        float *restrict dweight, float *restrict dbias, const void *dout,
        const void *inp, const int K, const int KH, const int KW, const int bf)
{
    float dw[49][MAX_K], db[MAX_K];
    for (int t = 0; t < KH * KW; t++)
        for (int k = 0; k < K; k++) dw[t][k] = 0.0f;
    for (int k = 0; k < K; k++) db[k] = 0.0f;
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
                for (int k = 0; k < K; k++) db[k] += d[k];
                for (int ky = 0; ky < KH; ky++)
                    for (int kx = 0; kx < KW; kx++) {
                        const float v = cpu_ld(inp, x + (size_t)(oy + ky) * s->w + ox + kx, bf);
                        for (int k = 0; k < K; k++) dw[ky * KW + kx][k] += v * d[k];
                    }
            }
    }
    for (int t = 0; t < KH * KW; t++)
        for (int k = 0; k < K; k++) dweight[(size_t)t * K + k] = dw[t][k];
    for (int k = 0; k < K; k++) dbias[k] = db[k];
}

/* dweight[ky][kx][0][k] = sum over samples and pixels of inp * dout; dbias = sum of dout. */
DT_MULTIVERSION void cpu_conv_direct_backward_weights(const struct dt_conv_shape *s, int n,
                                                      float *restrict dweight, float *restrict dbias,
                                                      const void *dout, const void *inp, int bf)
{
    if (bf) DIRECT_CASES(bwdw_kernel, 1, s, n, dweight, dbias, dout, inp);
    else DIRECT_CASES(bwdw_kernel, 0, s, n, dweight, dbias, dout, inp);
}
