/* relu.c: a standalone ReLU layer (conv2d and dense can also fuse it). */
#include "config.h"

#include "nn/layer.h"

static int relu_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp; (void)st;
    l->out = l->in;
    return DT_OK;
}

static void relu_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                         const float *params)
{
    (void)params;
    c->be->relu_forward(out, inp, dt_shape_size(l->out) * (size_t)c->n);
}

static void relu_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                          const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)inp; (void)params; (void)dparams;
    if (dinp) c->be->relu_backward(dinp, dout, out, dt_shape_size(l->out) * (size_t)c->n);
}

const struct dt_layer_ops dt_relu_ops = {
    .type = "relu",
    .setup = relu_setup,
    .forward = relu_forward,
    .backward = relu_backward,
};
