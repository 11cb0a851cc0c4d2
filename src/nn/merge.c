/* merge.c: the layers that make a model more than a chain, darknet-style.
 *
 *   add    out = input + (output of the layer `from` places back), then the
 *          optional ReLU: a residual connection (Keras Add + Activation).
 *   route  out = output of the layer `from` places back: the next layers
 *          branch off an earlier tensor (a ResNet's projection shortcut).
 *
 * The model (model.c) resolves `from` to l->src, an index into act, and
 * hands the second input's gradient back: after the backward of layer src,
 * it adds this layer's output gradient into dact[src]. So backward here only
 * passes the gradient to the chain input: add passes it through (after the
 * ReLU's backward, in place, which is also what the shortcut receives);
 * route's chain input does not reach its output and gets zero.
 *
 * Fused (model.c's plan_folds): an add right after a batchnorm is folded
 * into it, and does nothing itself; a route's output buffer is the routed
 * tensor's, so its forward copies nothing. */
#include "config.h"

#include "nn/layer.h"

static int add_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp;
    (void)st;
    l->out = l->in; /* the model checks that the other input has this shape */
    return DT_OK;
}

static void add_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                        const float *params)
{
    size_t n = dt_shape_size(l->out) * (size_t)c->n;
    (void)params;
    if (l->folded) return; /* the batchnorm before wrote out (layer.h) */
    c->be->copy(out, inp, c->act_size * n);
    c->be->act_add(out, c->act[l->src], n);
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_forward(out, out, n);
}

static void add_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout, const dt_act *inp,
                         const dt_act *out, const float *params, float *dparams)
{
    size_t n = dt_shape_size(l->out) * (size_t)c->n;
    (void)inp; (void)params; (void)dparams;
    if (l->folded) return; /* dinp is dout; the batchnorm applies the ReLU's backward */
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_backward(dout, dout, out, n);
    if (dinp) c->be->copy(dinp, dout, c->act_size * n);
}

/* One position: the other input is act[src]'s one position (layer.h's decode). */
static void add_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                       const float *params)
{
    const size_t n = (size_t)l->out.c;
    (void)pos; (void)params;
    c->be->copy(out, inp, c->act_size * n);
    c->be->act_add(out, c->act[l->src], n);
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_forward(out, out, n);
}

const struct dt_layer_ops dt_add_ops = {
    .type = "add",
    .setup = add_setup,
    .forward = add_forward,
    .backward = add_backward,
    .decode = add_decode,
};

static int route_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    (void)sp;
    (void)st;
    (void)l; /* l->out is the routed tensor's shape, set by the model */
    return DT_OK;
}

static void route_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                          const float *params)
{
    (void)inp; (void)params;
    if (out == c->act[l->src]) return; /* the model made out the routed tensor itself */
    c->be->copy(out, c->act[l->src], c->act_size * dt_shape_size(l->out) * (size_t)c->n);
}

static void route_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout, const dt_act *inp,
                           const dt_act *out, const float *params, float *dparams)
{
    (void)dout; (void)out; (void)params; (void)dparams; (void)inp;
    if (dinp) c->be->zero(dinp, c->act_size * dt_shape_size(l->in) * (size_t)c->n);
}

const struct dt_layer_ops dt_route_ops = {
    .type = "route",
    .setup = route_setup,
    .forward = route_forward,
    .backward = route_backward,
};
