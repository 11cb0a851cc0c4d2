/* layernorm.c: layer normalization over the channels of each position
 * (each row of C), with a gain and a bias (GPT-2's ln_1, ln_2, ln_f).
 * Parameters: gamma [C] (ones), then beta [C] (zeros). The statistics are
 * float32 under every precision, kept per row for backward. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct ln_state {
    float *mean, *rstd; /* [max_n * rows per sample], device */
};

static size_t rows_of(const struct dt_layer *l) { return (size_t)l->in.h * l->in.w; }

static int layernorm_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    float eps = sp->epsilon != 0.0f ? sp->epsilon : 1e-5f;
    if (!(eps > 0.0f)) return dt_fail(st, DT_EUSAGE, "%s: epsilon must be > 0 (got %g)", l->name, (double)eps);
    l->spec.epsilon = eps;
    l->out = l->in;
    l->nparams = 2 * (size_t)l->in.c;
    return DT_OK;
}

static void layernorm_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    struct ln_state *s = dt_xcalloc(1, sizeof *s);
    size_t rows = rows_of(l) * (size_t)max_n;
    s->mean = be->alloc(sizeof(float) * rows);
    s->rstd = be->alloc(sizeof(float) * rows);
    l->state = s;
}

static double layernorm_state_bytes(const struct dt_layer *l, int n, size_t act_size)
{
    (void)act_size;
    return 8.0 * (double)rows_of(l) * n;
}

static void layernorm_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct ln_state *s = l->state;
    if (s && be) {
        be->free(s->mean);
        be->free(s->rstd);
    }
    free(s);
    l->state = NULL;
}

static void layernorm_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    (void)rng;
    for (int j = 0; j < l->in.c; j++) {
        params[j] = 1.0f;
        params[l->in.c + j] = 0.0f;
    }
}

static void layernorm_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                              const float *params)
{
    struct ln_state *s = l->state;
    const int C = l->in.c;
    if (c->n == 0) return;
    c->be->layernorm_forward(out, s->mean, s->rstd, inp, params, params + C, rows_of(l) * (size_t)c->n, C,
                             l->spec.epsilon);
}

static void layernorm_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                               const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)out;
    struct ln_state *s = l->state;
    const int C = l->in.c;
    if (c->n == 0) {
        c->be->zero(dparams, sizeof(float) * 2 * (size_t)C);
        return;
    }
    /* dinp NULL (a first layer) still needs the parameter gradients: dout is scratch then */
    c->be->layernorm_backward(dinp ? dinp : dout, dparams, dparams + C, dout, inp, params, s->mean, s->rstd,
                              rows_of(l) * (size_t)c->n, C);
}

/* One row; its statistics go to row 0 of forward's (backward never follows). */
static void layernorm_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                             const float *params)
{
    struct ln_state *s = l->state;
    const int C = l->in.c;
    (void)pos;
    c->be->layernorm_forward(out, s->mean, s->rstd, inp, params, params + C, 1, C, l->spec.epsilon);
}

const struct dt_layer_ops dt_layernorm_ops = {
    .type = "layernorm",
    .setup = layernorm_setup,
    .create = layernorm_create,
    .state_bytes = layernorm_state_bytes,
    .destroy = layernorm_destroy,
    .init = layernorm_init,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .decode = layernorm_decode,
};
