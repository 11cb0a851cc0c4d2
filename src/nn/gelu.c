/* gelu.c: a standalone GELU layer, the tanh approximation GPT-2 uses
 * (linear can also fuse it). */
#include "config.h"

#include "nn/layer.h"

static int gelu_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp; (void)st;
    l->out = l->in;
    return DT_OK;
}

static void gelu_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                         const float *params)
{
    (void)params;
    if (c->n > 0) c->be->gelu_forward(out, inp, dt_shape_size(l->out) * (size_t)c->n);
}

static void gelu_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                          const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)out; (void)params; (void)dparams;
    if (dinp && c->n > 0) c->be->gelu_backward(dinp, dout, inp, dt_shape_size(l->out) * (size_t)c->n);
}

static void gelu_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                        const float *params)
{
    (void)pos; (void)params;
    c->be->gelu_forward(out, inp, (size_t)l->out.c);
}

const struct dt_layer_ops dt_gelu_ops = {
    .type = "gelu",
    .setup = gelu_setup,
    .forward = gelu_forward,
    .backward = gelu_backward,
    .decode = gelu_decode,
};
