/* reshape.c: Keras Flatten (h x w x c into 1 x 1 x hwc) and Reshape (any
 * shape of the same size). NHWC memory is already the flattened order, so
 * both are copies forward and backward. */
#include "config.h"

#include "nn/layer.h"

static int flatten_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp;
    (void)st;
    l->out = (struct dt_shape){1, 1, (int)dt_shape_size(l->in)};
    return DT_OK;
}

static int reshape_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    struct dt_shape s = sp->shape;
    if (s.h < 1 || s.w < 1 || s.c < 1 || dt_shape_size(s) != dt_shape_size(l->in))
        return dt_fail(st, DT_EUSAGE, "%s: cannot reshape %dx%dx%d (%zu values) into %dx%dx%d", l->name, l->in.h,
                       l->in.w, l->in.c, dt_shape_size(l->in), s.h, s.w, s.c);
    l->out = s;
    return DT_OK;
}

static void copy_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                         const float *params)
{
    (void)params;
    c->be->copy(out, inp, c->act_size * dt_shape_size(l->out) * (size_t)c->n);
}

static void copy_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout, const dt_act *inp,
                          const dt_act *out, const float *params, float *dparams)
{
    (void)inp; (void)out; (void)params; (void)dparams;
    if (dinp) c->be->copy(dinp, dout, c->act_size * dt_shape_size(l->out) * (size_t)c->n);
}

const struct dt_layer_ops dt_flatten_ops = {
    .type = "flatten",
    .setup = flatten_setup,
    .forward = copy_forward,
    .backward = copy_backward,
};

const struct dt_layer_ops dt_reshape_ops = {
    .type = "reshape",
    .setup = reshape_setup,
    .forward = copy_forward,
    .backward = copy_backward,
};
