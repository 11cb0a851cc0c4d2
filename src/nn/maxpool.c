/* maxpool.c: Keras MaxPooling2D with 'valid' windows (pool 2, stride 2 by
 * default); an odd last row/column is dropped, as Keras does. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct pool_state {
    struct dt_conv_shape shape;
    dt_pool_plan *plan;
};

static int maxpool_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    int k = sp->kernel ? sp->kernel : 2, s = sp->stride ? sp->stride : k;
    if (l->in.h < k || l->in.w < k)
        return dt_fail(st, DT_EUSAGE, "%s: %dx%d pool does not fit a %dx%d input", l->name, k, k,
                       l->in.h, l->in.w);
    struct pool_state *ps = calloc(1, sizeof *ps);
    ps->shape = (struct dt_conv_shape){.h = l->in.h, .w = l->in.w, .c = l->in.c, .k = l->in.c,
                                       .kh = k, .kw = k, .stride = s,
                                       .oh = (l->in.h - k) / s + 1, .ow = (l->in.w - k) / s + 1};
    l->out = (struct dt_shape){ps->shape.oh, ps->shape.ow, l->in.c};
    l->nparams = 0;
    l->state = ps;
    return DT_OK;
}

static void maxpool_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    struct pool_state *ps = l->state;
    (void)max_n;
    ps->plan = be->pool_create(&ps->shape);
}

static void maxpool_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct pool_state *ps = l->state;
    if (ps && ps->plan) be->pool_destroy(ps->plan);
    free(ps);
    l->state = NULL;
}

static void maxpool_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                            const float *params)
{
    struct pool_state *ps = l->state;
    (void)params;
    if (l->folded) return; /* the conv2d before wrote out (layer.h's fold_pool) */
    c->be->pool_forward(ps->plan, c->n, out, inp, c->train);
}

static void maxpool_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                             const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    struct pool_state *ps = l->state;
    (void)inp; (void)params; (void)dparams;
    if (l->folded || l->bwd_folded) return; /* the conv2d before reads dout itself */
    if (dinp) c->be->pool_backward(ps->plan, c->n, dinp, dout, l->relu_bwd_of_prev ? out : NULL);
}

dt_pool_plan *dt_maxpool_plan(const struct dt_layer *l)
{
    return ((const struct pool_state *)l->state)->plan;
}

const struct dt_conv_shape *dt_maxpool_shape(const struct dt_layer *l)
{
    return &((const struct pool_state *)l->state)->shape;
}

void dt_maxpool_resize(struct dt_layer *l, int ih, int iw, int oh, int ow)
{
    struct dt_conv_shape *cs = &((struct pool_state *)l->state)->shape;
    if (oh < 1 || ow < 1 || (oh - 1) * cs->stride + cs->kh > ih || (ow - 1) * cs->stride + cs->kw > iw)
        DT_DIE("%s: %dx%d windows do not fit a %dx%d input", l->name, oh, ow, ih, iw);
    cs->h = ih;
    cs->w = iw;
    cs->oh = oh;
    cs->ow = ow;
    l->in.h = ih;
    l->in.w = iw;
    l->out.h = oh;
    l->out.w = ow;
}

const struct dt_layer_ops dt_maxpool_ops = {
    .type = "maxpool",
    .setup = maxpool_setup,
    .create = maxpool_create,
    .destroy = maxpool_destroy,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};
