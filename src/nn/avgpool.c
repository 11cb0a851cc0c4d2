/* avgpool.c: Keras AveragePooling2D ('valid' windows; pool 2, stride = pool
 * by default) and GlobalAveragePooling2D (the mean over all of h x w, giving
 * 1x1xC, which a dense layer reads as C values). Both are the backend's
 * avgpool over a window; the global one's window is the whole image. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

static int pool_setup(struct dt_layer *l, int kh, int kw, int s, dt_status *st)
{
    if (l->in.h < kh || l->in.w < kw)
        return dt_fail(st, DT_EUSAGE, "%s: %dx%d pool does not fit a %dx%d input", l->name, kh, kw, l->in.h,
                       l->in.w);
    struct dt_conv_shape *cs = calloc(1, sizeof *cs);
    *cs = (struct dt_conv_shape){.h = l->in.h, .w = l->in.w, .c = l->in.c, .k = l->in.c, .kh = kh, .kw = kw,
                                 .stride = s, .oh = (l->in.h - kh) / s + 1, .ow = (l->in.w - kw) / s + 1};
    l->out = (struct dt_shape){cs->oh, cs->ow, l->in.c};
    l->nparams = 0;
    l->state = cs;
    return DT_OK;
}

static int avgpool_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    int k = sp->kernel ? sp->kernel : 2;
    return pool_setup(l, k, k, sp->stride ? sp->stride : k, st);
}

static int global_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp;
    return pool_setup(l, l->in.h, l->in.w, 1, st);
}

static void pool_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    (void)be;
    free(l->state);
    l->state = NULL;
}

static int pool_supported(const struct dt_backend *be) { return be->avgpool_forward && be->avgpool_backward; }

static void pool_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                         const float *params)
{
    (void)params;
    c->be->avgpool_forward(l->state, c->n, out, inp);
}

static void pool_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout, const dt_act *inp,
                          const dt_act *out, const float *params, float *dparams)
{
    (void)inp; (void)out; (void)params; (void)dparams;
    if (dinp) c->be->avgpool_backward(l->state, c->n, dinp, dout);
}

const struct dt_layer_ops dt_avgpool_ops = {
    .type = "avgpool",
    .setup = avgpool_setup,
    .destroy = pool_destroy,
    .supported = pool_supported,
    .forward = pool_forward,
    .backward = pool_backward,
};

const struct dt_layer_ops dt_global_avgpool_ops = {
    .type = "global_avgpool",
    .setup = global_setup,
    .destroy = pool_destroy,
    .supported = pool_supported,
    .forward = pool_forward,
    .backward = pool_backward,
};
