/* cpu_pool.c: max pooling over NHWC, 'valid' windows (Keras MaxPooling2D).
 *
 * Forward records, per output element, the input offset of its maximum
 * (first one on ties); backward scatters the gradient there. Channels are the
 * innermost loop, so both passes stream contiguous memory. */
#include "config.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

struct dt_pool_plan {
    struct dt_conv_shape s;
    int32_t *argmax;   /* [n][oh][ow][c] offsets within one sample's input */
    int capacity;      /* samples argmax can hold */
};

dt_pool_plan *cpu_pool_create(const struct dt_conv_shape *shape)
{
    dt_pool_plan *p = dt_xcalloc(1, sizeof *p);
    p->s = *shape;
    return p;
}

void cpu_pool_destroy(dt_pool_plan *p)
{
    if (!p) return;
    free(p->argmax);
    free(p);
}

/* Branch-free over channels, so the compiler vectorizes both; inlined into
 * the multiversioned loops below (a call per window costs more than it does). */
static inline __attribute__((always_inline)) void window_max_arg(float *restrict o, int32_t *restrict am, const float *restrict x,
                           int32_t off, int channels)
{
    for (int c = 0; c < channels; c++) {
        float ov = o[c], xv = x[c];
        int32_t keep = -(int32_t)(xv > ov); /* all ones where x wins: a mask, not a branch */
        o[c] = xv > ov ? xv : ov;
        am[c] = (am[c] & ~keep) | ((off + c) & keep);
    }
}

static inline __attribute__((always_inline)) void window_max(float *restrict o, const float *restrict x, int channels)
{
    for (int c = 0; c < channels; c++) {
        float ov = o[c], xv = x[c];
        o[c] = xv > ov ? xv : ov;
    }
}

DT_MULTIVERSION void cpu_pool_forward(dt_pool_plan *p, int n, float *out, const float *inp, int train)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c, out_sample = (size_t)s->oh * s->ow * s->c;
    if (train && n > p->capacity) {
        free(p->argmax);
        p->argmax = dt_xmalloc(sizeof(int32_t) * out_sample * (size_t)n);
        p->capacity = n;
    }
    for (int b = 0; b < n; b++) {
        const float *x = inp + (size_t)b * in_sample;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *o = out + (size_t)b * out_sample + ((size_t)oy * s->ow + ox) * s->c;
                int32_t *am = train ? p->argmax + (size_t)b * out_sample + ((size_t)oy * s->ow + ox) * s->c : NULL;
                for (int c = 0; c < s->c; c++) o[c] = -FLT_MAX;
                int32_t off0 = (int32_t)(((size_t)oy * s->stride * s->w + (size_t)ox * s->stride) * s->c);
                if (am) for (int c = 0; c < s->c; c++) am[c] = off0 + c;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        int iy = oy * s->stride + ky, ix = ox * s->stride + kx;
                        int32_t off = (int32_t)(((size_t)iy * s->w + ix) * s->c);
                        const float *xi = x + off;
                        if (am) window_max_arg(o, am, xi, off, s->c);
                        else window_max(o, xi, s->c);
                    }
            }
    }
}

/* Non-overlapping windows: every input element is written once (gradient
 * or zero), so no separate clearing pass. */
static inline __attribute__((always_inline)) void unpool_row(float *restrict dx, const float *restrict dy,
                                       const int32_t *restrict am, const float *restrict y,
                                       int32_t off, int channels)
{
    for (int c = 0; c < channels; c++) {
        float g = y && !(y[c] > 0.0f) ? 0.0f : dy[c];
        dx[c] = am[c] == off + c ? g : 0.0f;
    }
}

DT_MULTIVERSION void cpu_pool_backward(dt_pool_plan *p, int n, float *dinp, const float *dout,
                                       const float *relu_out)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c, out_sample = (size_t)s->oh * s->ow * s->c;
    const int tiled = s->stride == s->kh && s->stride == s->kw;
    if (!tiled || s->oh * s->stride != s->h || s->ow * s->stride != s->w)
        memset(dinp, 0, sizeof(float) * in_sample * (size_t)n); /* overlaps or uncovered edges */
    for (int b = 0; b < n; b++) {
        float *dx = dinp + (size_t)b * in_sample;
        const float *dy = dout + (size_t)b * out_sample;
        const float *y = relu_out ? relu_out + (size_t)b * out_sample : NULL;
        const int32_t *am = p->argmax + (size_t)b * out_sample;
        if (tiled) {
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++) {
                    size_t o = ((size_t)oy * s->ow + ox) * s->c;
                    for (int ky = 0; ky < s->kh; ky++)
                        for (int kx = 0; kx < s->kw; kx++) {
                            int32_t off = (int32_t)((((size_t)oy * s->stride + ky) * s->w +
                                                     (size_t)ox * s->stride + kx) * s->c);
                            unpool_row(dx + off, dy + o, am + o, y ? y + o : NULL, off, s->c);
                        }
                }
        } else {
            for (size_t i = 0; i < out_sample; i++)
                if (!y || y[i] > 0.0f) dx[am[i]] += dy[i];
        }
    }
}
