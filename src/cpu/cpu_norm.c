/* cpu_norm.c: per-channel sums and affine maps (batch normalization) and
 * average pooling, over NHWC tensors on the CPU.
 *
 * Channels are the innermost dimension, so every loop walks contiguous
 * memory with the channel loop vectorized. Sums run in float over blocks of
 * SUM_BLOCK rows and are folded into double per block: the float error stays
 * that of a 64-term sum (~4e-6 relative) however many rows there are, at
 * float speed. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#define SUM_BLOCK 64

/* Channel loops run in blocks of LANES with a constant trip count: the
 * compiler then makes each block one vector for float32 and for bf16 alike
 * (left to itself it picks 32 lanes for bf16 and runs a 16-channel tensor
 * in its scalar remainder loop, 2x slower). */
#define LANES 16

static inline __attribute__((always_inline)) void sums_step(float *restrict p1, float *restrict p2, void *restrict a,
                                                            const void *restrict b, const void *restrict m, size_t o,
                                                            int j, const int bf, const int masked)
{
    float x = cpu_ld(a, o + j, bf);
    if (masked) {
        x = cpu_ld(m, o + j, bf) > 0.0f ? x : 0.0f;
        cpu_st(a, o + j, x, bf); /* exact: x is a stored value or zero */
    }
    p1[j] += x;
    p2[j] += x * cpu_ld(b, o + j, bf);
}

/* Per channel: s1 = sum of a, s2 = sum of a * b, a chunk of rows in float
 * folded into double. With a mask m (a ReLU's output), a is first set to
 * zero where m <= 0, in place: the ReLU's backward in the same pass. */
static inline __attribute__((always_inline)) void sums_body(double *s1, double *s2, void *restrict a,
                                                            const void *restrict b, const void *restrict m,
                                                            size_t rows, int c, float *restrict p1,
                                                            const int bf, const int masked)
{
    float *restrict p2 = p1 + c;
    for (int j = 0; j < c; j++) s1[j] = s2[j] = 0.0;
    for (size_t r0 = 0; r0 < rows; r0 += SUM_BLOCK) {
        size_t r1 = r0 + SUM_BLOCK < rows ? r0 + SUM_BLOCK : rows;
        memset(p1, 0, sizeof(float) * 2 * (size_t)c);
        for (size_t r = r0; r < r1; r++) {
            const size_t o = r * (size_t)c;
            int j = 0;
            for (; j + LANES <= c; j += LANES) /* a constant trip count: one vector, either type */
                for (int l = j; l < j + LANES; l++) sums_step(p1, p2, a, b, m, o, l, bf, masked);
            for (; j < c; j++) sums_step(p1, p2, a, b, m, o, j, bf, masked);
        }
        for (int j = 0; j < c; j++) {
            s1[j] += (double)p1[j];
            s2[j] += (double)p2[j];
        }
    }
}

DT_MULTIVERSION void cpu_channel_sums(double *s1, double *s2, const void *a, const void *b, size_t rows, int c,
                                      int bf)
{
    float *p1 = dt_xmalloc(sizeof(float) * 2 * (size_t)c);
    void *in = (void *)(uintptr_t)a; /* only read: no mask */
    if (bf) sums_body(s1, s2, in, b, NULL, rows, c, p1, 1, 0);
    else sums_body(s1, s2, in, b, NULL, rows, c, p1, 0, 0);
    free(p1);
}

DT_MULTIVERSION void cpu_channel_sums_relu(double *s1, double *s2, void *a, const void *b, const void *relu_out,
                                           size_t rows, int c, int bf)
{
    float *p1 = dt_xmalloc(sizeof(float) * 2 * (size_t)c);
    if (bf) sums_body(s1, s2, a, b, relu_out, rows, c, p1, 1, 1);
    else sums_body(s1, s2, a, b, relu_out, rows, c, p1, 0, 1);
    free(p1);
}

static inline __attribute__((always_inline)) void affine_step(void *out, const void *a, const void *b, size_t o,
                                                              int j, const float *p, const float *q, const float *r,
                                                              int relu, const int bf)
{
    float v = b ? p[j] * cpu_ld(a, o + j, bf) + q[j] * cpu_ld(b, o + j, bf) + r[j] : p[j] * cpu_ld(a, o + j, bf) + r[j];
    cpu_st(out, o + j, relu && v < 0.0f ? 0.0f : v, bf);
}

/* The four cases (b or not, relu or not) as separate loops, each branch-free. */
#define AFFINE_ROWS(b_, relu_)                                                              \
    for (size_t i = 0; i < rows; i++) {                                                    \
        const size_t o = i * (size_t)c;                                                    \
        int j = 0;                                                                         \
        for (; j + LANES <= c; j += LANES)                                                 \
            for (int l = j; l < j + LANES; l++) affine_step(out, a, b_, o, l, p, q, r, relu_, bf); \
        for (; j < c; j++) affine_step(out, a, b_, o, j, p, q, r, relu_, bf);            \
    }

static inline __attribute__((always_inline)) void affine_body(void *out, const void *a, const void *b, size_t rows,
                                                              int c, const float *p, const float *q, const float *r,
                                                              int relu, const int bf)
{
    if (b && relu) AFFINE_ROWS(b, 1)
    else if (b) AFFINE_ROWS(b, 0)
    else if (relu) AFFINE_ROWS(NULL, 1)
    else AFFINE_ROWS(NULL, 0)
}

DT_MULTIVERSION void cpu_channel_affine(void *out, const void *a, const void *b, size_t rows, int c, const float *p,
                                        const float *q, const float *r, int relu, int bf)
{
    if (bf) affine_body(out, a, b, rows, c, p, q, r, relu, 1);
    else affine_body(out, a, b, rows, c, p, q, r, relu, 0);
}

static inline __attribute__((always_inline)) void avgpool_fwd(const struct dt_conv_shape *s, int n, void *out,
                                                              const void *inp, float *o, const int bf)
{
    const int C = s->c;
    const float inv = 1.0f / (float)(s->kh * s->kw);
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * s->h * s->w * C;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const size_t at = (((size_t)b * s->oh + oy) * s->ow + ox) * C;
                for (int j = 0; j < C; j++) o[j] = 0.0f;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        const size_t w = x + ((size_t)(oy * s->stride + ky) * s->w + ox * s->stride + kx) * C;
                        for (int j = 0; j < C; j++) o[j] += cpu_ld(inp, w + j, bf);
                    }
                for (int j = 0; j < C; j++) cpu_st(out, at + j, o[j] * inv, bf);
            }
    }
}

DT_MULTIVERSION void cpu_avgpool_forward(const struct dt_conv_shape *s, int n, void *out, const void *inp, int bf)
{
    float *o = dt_xmalloc(sizeof(float) * (size_t)s->c); /* a window's sums, in float in both types */
    if (bf) avgpool_fwd(s, n, out, inp, o, 1);
    else avgpool_fwd(s, n, out, inp, o, 0);
    free(o);
}

/* Windows may overlap, so the gradient is summed in float: in place for
 * float32, through a float copy of one sample for bf16. */
static inline __attribute__((always_inline)) void avgpool_bwd(const struct dt_conv_shape *s, float *dx,
                                                              const void *dout, int b, const int bf)
{
    const int C = s->c;
    const float inv = 1.0f / (float)(s->kh * s->kw);
    memset(dx, 0, sizeof(float) * (size_t)s->h * s->w * C);
    for (int oy = 0; oy < s->oh; oy++)
        for (int ox = 0; ox < s->ow; ox++) {
            const size_t g = (((size_t)b * s->oh + oy) * s->ow + ox) * C;
            for (int ky = 0; ky < s->kh; ky++)
                for (int kx = 0; kx < s->kw; kx++) {
                    float *restrict d = dx + ((size_t)(oy * s->stride + ky) * s->w + ox * s->stride + kx) * C;
                    for (int j = 0; j < C; j++) d[j] += cpu_ld(dout, g + j, bf) * inv;
                }
        }
}

DT_MULTIVERSION void cpu_avgpool_backward(const struct dt_conv_shape *s, int n, void *dinp, const void *dout, int bf)
{
    const size_t in_sample = (size_t)s->h * s->w * s->c;
    float *tmp = bf ? dt_xmalloc(sizeof(float) * in_sample) : NULL;
    for (int b = 0; b < n; b++) {
        if (!bf) { avgpool_bwd(s, (float *)dinp + (size_t)b * in_sample, dout, b, 0); continue; }
        avgpool_bwd(s, tmp, dout, b, 1);
        for (size_t i = 0; i < in_sample; i++) cpu_st(dinp, (size_t)b * in_sample + i, tmp[i], 1);
    }
    free(tmp);
}
