/* conv2d.c: Keras Conv2D (stride, 'valid' or 'same' padding, optional fused
 * ReLU). Parameters: kernel HWIO [kh][kw][c][filters], then bias [filters].
 * The arithmetic is the backend's (oneDNN on the CPU, cuDNN on the GPU).
 * With fold_pool (layer.h) the 2x2/2 max pool after it runs in the same
 * pass, its places kept in a pool plan of this layer's. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct conv_state {
    struct dt_conv_shape shape;
    dt_conv_plan *plan;
    dt_pool_plan *pool; /* fold_pool: the folded pool's places */
};

static int conv2d_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    int k = sp->kernel, s = sp->stride ? sp->stride : 1;
    if (sp->filters < 1 || k < 1 || s < 1)
        return dt_fail(st, DT_EUSAGE, "%s: filters, kernel and stride must be >= 1 (got %d, %d, %d)",
                       l->name, sp->filters, k, s);
    struct dt_conv_shape cs = {.h = l->in.h, .w = l->in.w, .c = l->in.c, .k = sp->filters,
                               .kh = k, .kw = k, .stride = s};
    if (sp->same) {
        cs.oh = (cs.h + s - 1) / s;
        cs.ow = (cs.w + s - 1) / s;
        int ph = (cs.oh - 1) * s + k - cs.h, pw = (cs.ow - 1) * s + k - cs.w;
        cs.pad = ph > 0 ? ph / 2 : 0; /* the odd pixel goes bottom/right, as in TF */
        if ((pw > 0 ? pw / 2 : 0) != cs.pad)
            return dt_fail(st, DT_EUSAGE, "%s: 'same' padding of a %dx%d input pads %d rows but %d columns at the "
                           "top/left; one padding for both is supported (use a square input or 'valid')",
                           l->name, cs.h, cs.w, cs.pad, pw > 0 ? pw / 2 : 0);
    } else {
        if (cs.h < k || cs.w < k)
            return dt_fail(st, DT_EUSAGE, "%s: %dx%d kernel does not fit a %dx%d input",
                           l->name, k, k, cs.h, cs.w);
        cs.oh = (cs.h - k) / s + 1;
        cs.ow = (cs.w - k) / s + 1;
    }
    l->out = (struct dt_shape){cs.oh, cs.ow, cs.k};
    l->nparams = (size_t)k * k * cs.c * cs.k + (size_t)cs.k;
    struct conv_state *state = calloc(1, sizeof *state);
    state->shape = cs;
    l->state = state;
    return DT_OK;
}

static void conv2d_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    struct conv_state *s = l->state;
    (void)max_n;
    s->plan = be->conv_create(&s->shape, l->spec.activation == DT_ACT_RELU);
    if (l->fold_pool) {
        const struct dt_conv_shape ps = {.h = s->shape.oh, .w = s->shape.ow, .c = s->shape.k, .k = s->shape.k,
                                         .kh = 2, .kw = 2, .stride = 2, .oh = l->fold_out.h,
                                         .ow = l->fold_out.w};
        s->pool = be->pool_create(&ps);
    }
}

static void conv2d_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct conv_state *s = l->state;
    if (s && s->plan) be->conv_destroy(s->plan);
    if (s && s->pool) be->pool_destroy(s->pool);
    free(s);
    l->state = NULL;
}

static void conv2d_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    const struct dt_conv_shape *s = &((struct conv_state *)l->state)->shape;
    size_t nw = (size_t)s->kh * s->kw * s->c * s->k;
    dt_glorot_uniform(params, nw, s->kh * s->kw * s->c, s->kh * s->kw * s->k, rng);
    for (int i = 0; i < s->k; i++) params[nw + (size_t)i] = 0.0f;
}

static void conv2d_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                           const float *params)
{
    struct conv_state *s = l->state;
    size_t nw = (size_t)s->shape.kh * s->shape.kw * s->shape.c * s->shape.k;
    if (l->fold_pool) c->be->conv_pool_forward(s->plan, s->pool, c->n, out, inp, params, params + nw, c->train);
    else c->be->conv_forward(s->plan, c->n, out, inp, params, params + nw);
}

static void conv2d_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                            const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    struct conv_state *s = l->state;
    size_t nw = (size_t)s->shape.kh * s->shape.kw * s->shape.c * s->shape.k;
    if (l->fold_pool) { /* out and dout are the pool's; dinp is NULL (a first layer) */
        c->be->conv_pool_backward(s->plan, s->pool, c->n, dparams, dparams + nw, dout, out, inp);
        return;
    }
    if (l->pool_bwd) { /* dout is the pool's (the model aliases them) */
        c->be->conv_poolgrad_backward(&s->shape, dt_maxpool_plan(l->pool_bwd), c->n, dinp, dparams,
                                      dparams + nw, dout, c->act[l->pool_bwd_out], inp, params);
        return;
    }
    if (l->spec.activation == DT_ACT_RELU && !l->relu_bwd_by_next)
        c->be->relu_backward(dout, dout, out, dt_shape_size(l->out) * (size_t)c->n);
    c->be->conv_backward(s->plan, c->n, dinp, dparams, dparams + nw, dout, inp, params);
}

const struct dt_conv_shape *dt_conv2d_shape(const struct dt_layer *l)
{
    return &((const struct conv_state *)l->state)->shape;
}

void dt_conv2d_resize(struct dt_layer *l, int ih, int iw)
{
    struct dt_conv_shape *cs = &((struct conv_state *)l->state)->shape;
    if (l->spec.same || ih < cs->kh || iw < cs->kw) DT_DIE("%s: no 'valid' convolution of a %dx%d input", l->name, ih, iw);
    cs->h = ih;
    cs->w = iw;
    cs->oh = (ih - cs->kh) / cs->stride + 1;
    cs->ow = (iw - cs->kw) / cs->stride + 1;
    l->in.h = ih;
    l->in.w = iw;
    l->out.h = cs->oh;
    l->out.w = cs->ow;
}

/* AdamW decays the kernel, not the bias. */
static int conv2d_decayed(const struct dt_layer *l, size_t *off, size_t *len, int max)
{
    if (max < 1) return 0;
    off[0] = 0;
    len[0] = l->nparams - (size_t)l->spec.filters;
    return 1;
}

const struct dt_layer_ops dt_conv2d_ops = {
    .type = "conv2d",
    .setup = conv2d_setup,
    .create = conv2d_create,
    .destroy = conv2d_destroy,
    .init = conv2d_init,
    .decayed = conv2d_decayed,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
};
