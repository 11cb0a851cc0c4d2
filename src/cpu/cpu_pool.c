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
 * the multiversioned loops below (a call per window costs more than it
 * does). The running maximum o is float (for bf16 a row of scratch, stored
 * after the window: a max is one of its inputs, so it comes out exactly as
 * stored; for float32 the output row itself, as before bf16 existed). */
static inline __attribute__((always_inline)) void window_max_arg(float *restrict o, int32_t *restrict am,
                                                                 const void *restrict x, int32_t off, int channels,
                                                                 const int bf)
{
    for (int c = 0; c < channels; c++) {
        float ov = o[c], xv = cpu_ld(x, c, bf);
        int32_t keep = -(int32_t)(xv > ov); /* all ones where x wins: a mask, not a branch */
        o[c] = xv > ov ? xv : ov;
        am[c] = (am[c] & ~keep) | ((off + c) & keep);
    }
}

static inline __attribute__((always_inline)) void window_max(float *restrict o, const void *restrict x,
                                                             int channels, const int bf)
{
    for (int c = 0; c < channels; c++) {
        float ov = o[c], xv = cpu_ld(x, c, bf);
        o[c] = xv > ov ? xv : ov;
    }
}

/* 2x2 windows at stride 2, the CNNs' usual pool: per channel the maximum
 * and its offset stay in registers over the four taps and are stored once
 * (window_max_arg keeps them in the output row and rewrites it per tap:
 * 2x slower). The same comparisons in the same order from the same start
 * (-FLT_MAX, the first tap's offset): the same results, ties and NaNs
 * included. */
static inline __attribute__((always_inline)) void pool2_px(void *restrict out, int32_t *restrict am,
                                                           const void *restrict inp, size_t at, size_t x,
                                                           int32_t off, int32_t dx, int32_t dy, int C,
                                                           const int train, const int bf)
{
    for (int c = 0; c < C; c++) {
        float m = -FLT_MAX, v;
        int32_t a = off + c;
        v = cpu_ld(inp, x + (size_t)off + c, bf);
        a = v > m ? off + c : a, m = v > m ? v : m;
        v = cpu_ld(inp, x + (size_t)(off + dx) + c, bf);
        a = v > m ? off + dx + c : a, m = v > m ? v : m;
        v = cpu_ld(inp, x + (size_t)(off + dy) + c, bf);
        a = v > m ? off + dy + c : a, m = v > m ? v : m;
        v = cpu_ld(inp, x + (size_t)(off + dy + dx) + c, bf);
        a = v > m ? off + dy + dx + c : a, m = v > m ? v : m;
        cpu_st_max(out, at + c, m, bf);
        if (train) am[c] = a;
    }
}

static inline __attribute__((always_inline)) void pool2_fwd(dt_pool_plan *p, int n, void *out, const void *inp,
                                                            const int train, const int bf)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c, out_sample = (size_t)s->oh * s->ow * s->c;
    const int32_t dx = s->c, dy = s->w * s->c;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const size_t at = (size_t)b * out_sample + ((size_t)oy * s->ow + ox) * s->c;
                const int32_t off = (int32_t)(((size_t)oy * 2 * s->w + (size_t)ox * 2) * s->c);
                pool2_px(out, train ? p->argmax + at : NULL, inp, at, (size_t)b * in_sample, off, dx, dy, s->c,
                         train, bf);
            }
}

static inline __attribute__((always_inline)) void pool_fwd(dt_pool_plan *p, int n, void *out, const void *inp,
                                                           int train, float *tmp, const int bf)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c, out_sample = (size_t)s->oh * s->ow * s->c;
    for (int b = 0; b < n; b++) {
        const size_t x = (size_t)b * in_sample;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const size_t at = (size_t)b * out_sample + ((size_t)oy * s->ow + ox) * s->c;
                int32_t *am = train ? p->argmax + at : NULL;
                float *restrict o = bf ? tmp : (float *)out + at; /* float32: the maximum is kept in place */
                for (int c = 0; c < s->c; c++) o[c] = -FLT_MAX;
                int32_t off0 = (int32_t)(((size_t)oy * s->stride * s->w + (size_t)ox * s->stride) * s->c);
                if (am) for (int c = 0; c < s->c; c++) am[c] = off0 + c;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        int iy = oy * s->stride + ky, ix = ox * s->stride + kx;
                        int32_t off = (int32_t)(((size_t)iy * s->w + ix) * s->c);
                        const void *xi = cpu_at(inp, x + (size_t)off, bf);
                        if (am) window_max_arg(o, am, xi, off, s->c, bf);
                        else window_max(o, xi, s->c, bf);
                    }
                if (bf)
                    for (int c = 0; c < s->c; c++) cpu_st_max(out, at + c, o[c], 1);
            }
    }
}

const struct dt_conv_shape *cpu_pool_shape(const dt_pool_plan *p) { return &p->s; }

int32_t *cpu_pool_places(dt_pool_plan *p, int n)
{
    if (n > p->capacity) {
        free(p->argmax);
        p->argmax = dt_xmalloc(sizeof(int32_t) * (size_t)p->s.oh * p->s.ow * p->s.c * (size_t)n);
        p->capacity = n;
    }
    return p->argmax;
}

DT_MULTIVERSION void cpu_pool_forward(dt_pool_plan *p, int n, void *out, const void *inp, int train, int bf)
{
    const struct dt_conv_shape *s = &p->s;
    if (train) cpu_pool_places(p, n);
    if (s->kh == 2 && s->kw == 2 && s->stride == 2) {
        if (bf && train) pool2_fwd(p, n, out, inp, 1, 1);
        else if (bf) pool2_fwd(p, n, out, inp, 0, 1);
        else if (train) pool2_fwd(p, n, out, inp, 1, 0);
        else pool2_fwd(p, n, out, inp, 0, 0);
        return;
    }
    if (!bf) { /* float32 keeps each maximum in the output row itself */
        pool_fwd(p, n, out, inp, train, NULL, 0);
        return;
    }
    float *tmp = dt_xmalloc(sizeof(float) * (size_t)s->c);
    pool_fwd(p, n, out, inp, train, tmp, 1);
    free(tmp);
}

/* Non-overlapping windows: every input element under a window is written
 * once (gradient or zero), so only the rows and columns no window covers
 * need clearing. A bf16 gradient is copied as its 16 bits: it is the
 * pool's gradient or zero, nothing to round. */
static inline __attribute__((always_inline)) void unpool_row(void *restrict dx, const void *restrict dy,
                                                             const void *restrict y, const int32_t *restrict am,
                                                             int32_t off, int channels, const int bf)
{
    if (bf) {
        const uint16_t *restrict dy16 = dy, *restrict y16 = y;
        uint16_t *restrict dx16 = dx;
        for (int c = 0; c < channels; c++) {
            uint16_t g = y16 && !(dt_bf16_to_f32(y16[c]) > 0.0f) ? 0 : dy16[c];
            dx16[c] = am[c] == off + c ? g : 0;
        }
        return;
    }
    for (int c = 0; c < channels; c++) {
        float g = y && !(cpu_ld(y, c, bf) > 0.0f) ? 0.0f : cpu_ld(dy, c, bf);
        cpu_st(dx, c, am[c] == off + c ? g : 0.0f, bf);
    }
}

/* A tiled pool's input gradient outside every window: the columns right of
 * the last window in the rows the windows cover, then the rows below. */
static void unpool_edges(const struct dt_conv_shape *s, void *dinp, size_t x, size_t es)
{
    const size_t row = (size_t)s->w * s->c, cw = (size_t)s->ow * s->stride * s->c;
    const int ch = s->oh * s->stride;
    if (cw < row)
        for (int y = 0; y < ch; y++) memset((char *)dinp + (x + (size_t)y * row + cw) * es, 0, (row - cw) * es);
    if (ch < s->h) memset((char *)dinp + (x + (size_t)ch * row) * es, 0, (size_t)(s->h - ch) * row * es);
}

static inline __attribute__((always_inline)) void pool_bwd(dt_pool_plan *p, int n, void *dinp, const void *dout,
                                                           const void *relu_out, const int bf)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c, out_sample = (size_t)s->oh * s->ow * s->c;
    const int tiled = s->stride == s->kh && s->stride == s->kw;
    for (int b = 0; b < n; b++) {
        const size_t dx = (size_t)b * in_sample, dy = (size_t)b * out_sample;
        const int32_t *am = p->argmax + dy;
        if (tiled) {
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++) {
                    size_t o = ((size_t)oy * s->ow + ox) * s->c;
                    for (int ky = 0; ky < s->kh; ky++)
                        for (int kx = 0; kx < s->kw; kx++) {
                            int32_t off = (int32_t)((((size_t)oy * s->stride + ky) * s->w +
                                                     (size_t)ox * s->stride + kx) * s->c);
                            unpool_row(cpu_at(dinp, dx + (size_t)off, bf), cpu_at(dout, dy + o, bf),
                                       relu_out ? cpu_at(relu_out, dy + o, bf) : NULL, am + o, off, s->c, bf);
                        }
                }
            unpool_edges(s, dinp, dx, bf ? 2 : sizeof(float));
        } else {
            for (size_t i = 0; i < out_sample; i++)
                if (!relu_out || cpu_ld(relu_out, dy + i, bf) > 0.0f)
                    cpu_st(dinp, dx + (size_t)am[i],
                           cpu_ld(dinp, dx + (size_t)am[i], bf) + cpu_ld(dout, dy + i, bf), bf);
        }
    }
}

DT_MULTIVERSION void cpu_pool_backward(dt_pool_plan *p, int n, void *dinp, const void *dout, const void *relu_out,
                                       int bf)
{
    const struct dt_conv_shape *s = &p->s;
    const size_t in_sample = (size_t)s->h * s->w * s->c;
    if (s->stride != s->kh || s->stride != s->kw) /* overlapping windows add up */
        memset(dinp, 0, (bf ? 2 : sizeof(float)) * in_sample * (size_t)n);
    if (bf) pool_bwd(p, n, dinp, dout, relu_out, 1);
    else pool_bwd(p, n, dinp, dout, relu_out, 0);
}
