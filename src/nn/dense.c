/* dense.c: Keras Dense (optional fused ReLU) on the flattened input.
 * Parameters: kernel [in][units] (Keras's layout), then bias [units].
 * out[n][units] = inp[n][in] . W + b: the backend's dense ops (one GEMM
 * and the bias forward; three pieces backward). */
#include "config.h"

#include "nn/layer.h"

static int dense_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    if (sp->filters < 1) return dt_fail(st, DT_EUSAGE, "%s: units must be >= 1 (got %d)", l->name, sp->filters);
    l->out = (struct dt_shape){1, 1, sp->filters};
    l->nparams = dt_shape_size(l->in) * (size_t)sp->filters + (size_t)sp->filters;
    return DT_OK;
}

static void dense_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    int in = (int)dt_shape_size(l->in), units = l->out.c;
    dt_glorot_uniform(params, (size_t)in * units, in, units, rng);
    for (int i = 0; i < units; i++) params[(size_t)in * units + (size_t)i] = 0.0f;
}

static void dense_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                          const float *params)
{
    int in = (int)dt_shape_size(l->in), units = l->out.c;
    if (c->n == 0) return;
    c->be->dense_forward(c->n, in, units, out, inp, params, params + (size_t)in * units);
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_forward(out, out, (size_t)c->n * units);
}

static void dense_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                           const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    int in = (int)dt_shape_size(l->in), units = l->out.c;
    if (l->spec.activation == DT_ACT_RELU && !l->relu_bwd_by_next) c->be->relu_backward(dout, dout, out, (size_t)c->n * units);
    c->be->dense_backward(c->n, in, units, dinp, dparams, dparams + (size_t)in * units, dout, inp, params);
}

/* AdamW decays the kernel, not the bias. */
static int dense_decayed(const struct dt_layer *l, size_t *off, size_t *len, int max)
{
    if (max < 1) return 0;
    off[0] = 0;
    len[0] = dt_shape_size(l->in) * (size_t)l->out.c;
    return 1;
}

const struct dt_layer_ops dt_dense_ops = {
    .type = "dense",
    .setup = dense_setup,
    .init = dense_init,
    .decayed = dense_decayed,
    .forward = dense_forward,
    .backward = dense_backward,
};
