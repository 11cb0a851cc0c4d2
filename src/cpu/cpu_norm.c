/* cpu_norm.c: per-channel sums and affine maps (batch normalization) and
 * average pooling, over NHWC tensors on the CPU.
 *
 * Channels are the innermost dimension, so every loop walks contiguous
 * memory with the channel loop vectorized. Sums run in float over blocks of
 * SUM_BLOCK rows and are folded into double per block: the float error stays
 * that of a 64-term sum (~4e-6 relative) however many rows there are, at
 * float speed. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#define SUM_BLOCK 64

DT_MULTIVERSION void cpu_channel_sums(double *s1, double *s2, const float *a, const float *b, size_t rows, int c)
{
    float *p1 = dt_xmalloc(sizeof(float) * 2 * (size_t)c), *p2 = p1 + c;
    for (int j = 0; j < c; j++) s1[j] = s2[j] = 0.0;
    for (size_t r0 = 0; r0 < rows; r0 += SUM_BLOCK) {
        size_t r1 = r0 + SUM_BLOCK < rows ? r0 + SUM_BLOCK : rows;
        memset(p1, 0, sizeof(float) * 2 * (size_t)c);
        for (size_t r = r0; r < r1; r++) {
            const float *restrict x = a + r * (size_t)c, *restrict y = b + r * (size_t)c;
            for (int j = 0; j < c; j++) {
                p1[j] += x[j];
                p2[j] += x[j] * y[j];
            }
        }
        for (int j = 0; j < c; j++) {
            s1[j] += (double)p1[j];
            s2[j] += (double)p2[j];
        }
    }
    free(p1);
}

DT_MULTIVERSION void cpu_channel_affine(float *out, const float *a, const float *b, size_t rows, int c,
                                        const float *p, const float *q, const float *r, int relu)
{
    for (size_t i = 0; i < rows; i++) {
        float *o = out + i * (size_t)c;
        const float *x = a + i * (size_t)c;
        if (b) {
            const float *y = b + i * (size_t)c;
            for (int j = 0; j < c; j++) o[j] = p[j] * x[j] + q[j] * y[j] + r[j];
        }
        else
            for (int j = 0; j < c; j++) o[j] = p[j] * x[j] + r[j];
        if (relu)
            for (int j = 0; j < c; j++) o[j] = o[j] > 0.0f ? o[j] : 0.0f;
    }
}

DT_MULTIVERSION void cpu_avgpool_forward(const struct dt_conv_shape *s, int n, float *out, const float *inp)
{
    const int C = s->c;
    const float inv = 1.0f / (float)(s->kh * s->kw);
    for (int b = 0; b < n; b++) {
        const float *x = inp + (size_t)b * s->h * s->w * C;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *restrict o = out + (((size_t)b * s->oh + oy) * s->ow + ox) * C;
                for (int j = 0; j < C; j++) o[j] = 0.0f;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        const float *restrict w = x + ((size_t)(oy * s->stride + ky) * s->w + ox * s->stride + kx) * C;
                        for (int j = 0; j < C; j++) o[j] += w[j];
                    }
                for (int j = 0; j < C; j++) o[j] *= inv;
            }
    }
}

DT_MULTIVERSION void cpu_avgpool_backward(const struct dt_conv_shape *s, int n, float *dinp, const float *dout)
{
    const int C = s->c;
    const float inv = 1.0f / (float)(s->kh * s->kw);
    memset(dinp, 0, sizeof(float) * (size_t)n * s->h * s->w * C);
    for (int b = 0; b < n; b++) {
        float *dx = dinp + (size_t)b * s->h * s->w * C;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const float *restrict g = dout + (((size_t)b * s->oh + oy) * s->ow + ox) * C;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        float *restrict d = dx + ((size_t)(oy * s->stride + ky) * s->w + ox * s->stride + kx) * C;
                        for (int j = 0; j < C; j++) d[j] += g[j] * inv;
                    }
            }
    }
}
