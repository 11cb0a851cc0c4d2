/* linear.c: a dense layer applied to every position of a sequence (the
 * channels of each row of an h x w x C input), as Keras's Dense on a 3-D
 * tensor and PyTorch's Linear: GPT-2's MLP (c_fc, c_proj). The plain
 * `dense` flattens its whole input instead.
 * Parameters: W [C][units] ([in][out], HF's Conv1D layout), then b [units].
 * activation = gelu keeps the pre-activation for backward (a buffer of the
 * output's size, as a separate gelu layer would). */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct linear_state {
    dt_act *pre; /* [max_n][rows][units]: before the GELU */
    int borrowed; /* pre is another layer's (share_state) */
};

static size_t rows_of(const struct dt_layer *l) { return (size_t)l->in.h * l->in.w; }

static int linear_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    if (sp->filters < 1) return dt_fail(st, DT_EUSAGE, "%s: units must be >= 1 (got %d)", l->name, sp->filters);
    l->out = (struct dt_shape){l->in.h, l->in.w, sp->filters};
    l->nparams = (size_t)l->in.c * sp->filters + (size_t)sp->filters;
    return DT_OK;
}

static void linear_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    struct linear_state *s = dt_xcalloc(1, sizeof *s);
    if (l->spec.activation == DT_ACT_GELU)
        s->pre = be->alloc(dt_act_size(be->act_type()) * dt_shape_size(l->out) * (size_t)max_n);
    l->state = s;
}

static double linear_state_bytes(const struct dt_layer *l, int n, size_t act_size)
{
    return l->spec.activation == DT_ACT_GELU ? (double)act_size * (double)dt_shape_size(l->out) * n : 0.0;
}

static void linear_share_state(struct dt_layer *l, const struct dt_layer *with, const struct dt_backend *be)
{
    struct linear_state *s = l->state;
    const struct linear_state *w = with->state;
    if (!s->pre || !w->pre) return;
    be->free(s->pre);
    s->pre = w->pre;
    s->borrowed = 1;
}

static void linear_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct linear_state *s = l->state;
    if (s && be && s->pre && !s->borrowed) be->free(s->pre);
    free(s);
    l->state = NULL;
}

static void linear_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    const size_t in = (size_t)l->in.c, units = (size_t)l->out.c;
    dt_normal_init(params, in * units, 0.02f, rng); /* GPT-2's N(0, 0.02); zero bias */
    for (size_t j = 0; j < units; j++) params[in * units + j] = 0.0f;
}

static int linear_decayed(const struct dt_layer *l, size_t *off, size_t *len, int max)
{
    if (max < 1) return 0;
    off[0] = 0, len[0] = (size_t)l->in.c * l->out.c;
    return 1;
}

static void linear_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                           const float *params)
{
    struct linear_state *s = l->state;
    const int in = l->in.c, units = l->out.c, rows = (int)rows_of(l) * c->n;
    const size_t n = (size_t)rows * units;
    if (c->n == 0) return;
    const float *w = params, *b = params + (size_t)in * units;
    if (l->spec.activation == DT_ACT_GELU) {
        c->be->dense_forward(rows, in, units, s->pre, inp, w, b);
        c->be->gelu_forward(out, s->pre, n);
        return;
    }
    c->be->dense_forward(rows, in, units, out, inp, w, b);
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_forward(out, out, n);
}

static void linear_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                            const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    struct linear_state *s = l->state;
    const int in = l->in.c, units = l->out.c, rows = (int)rows_of(l) * c->n;
    const size_t n = (size_t)rows * units;
    if (l->spec.activation == DT_ACT_GELU && n) c->be->gelu_backward(dout, dout, s->pre, n);
    if (l->spec.activation == DT_ACT_RELU && n) c->be->relu_backward(dout, dout, out, n);
    c->be->dense_backward(rows, in, units, dinp, dparams, dparams + (size_t)in * units, dout, inp, params);
}

/* One row: forward with rows = 1 (the GELU's input in row 0 of pre). */
static void linear_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                          const float *params)
{
    struct linear_state *s = l->state;
    const int in = l->in.c, units = l->out.c;
    const float *w = params, *b = params + (size_t)in * units;
    (void)pos;
    if (l->spec.activation == DT_ACT_GELU) {
        c->be->dense_forward(1, in, units, s->pre, inp, w, b);
        c->be->gelu_forward(out, s->pre, (size_t)units);
        return;
    }
    c->be->dense_forward(1, in, units, out, inp, w, b);
    if (l->spec.activation == DT_ACT_RELU) c->be->relu_forward(out, out, (size_t)units);
}

const struct dt_layer_ops dt_linear_ops = {
    .type = "linear",
    .setup = linear_setup,
    .create = linear_create,
    .state_bytes = linear_state_bytes,
    .share_state = linear_share_state,
    .destroy = linear_destroy,
    .init = linear_init,
    .decayed = linear_decayed,
    .forward = linear_forward,
    .backward = linear_backward,
    .decode = linear_decode,
};
