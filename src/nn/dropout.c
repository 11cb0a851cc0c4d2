/* dropout.c: inverted dropout (Keras Dropout). In training each element is
 * kept with probability 1-rate and scaled by 1/(1-rate); in inference it is
 * the identity. The mask comes from the replica's own seeded stream, so runs
 * are reproducible and replicas drop different units. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct dropout_state {
    float *mask;
    int borrowed; /* mask is another layer's (share_state) */
};

static int dropout_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    if (!(sp->rate >= 0.0f && sp->rate < 1.0f))
        return dt_fail(st, DT_EUSAGE, "%s: rate must be in [0, 1) (got %g)", l->name, (double)sp->rate);
    l->out = l->in;
    l->state = calloc(1, sizeof(struct dropout_state));
    return DT_OK;
}

static void dropout_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    struct dropout_state *s = l->state;
    s->mask = be->alloc(sizeof(float) * dt_shape_size(l->out) * (size_t)(max_n > 0 ? max_n : 1));
}

static void dropout_share_state(struct dt_layer *l, const struct dt_layer *with, const struct dt_backend *be)
{
    struct dropout_state *s = l->state;
    const struct dropout_state *w = with->state;
    be->free(s->mask);
    s->mask = w->mask;
    s->borrowed = 1;
}

static void dropout_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct dropout_state *s = l->state;
    if (s && s->mask && !s->borrowed) be->free(s->mask);
    free(s);
    l->state = NULL;
}

static void dropout_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                            const float *params)
{
    struct dropout_state *s = l->state;
    size_t n = dt_shape_size(l->out) * (size_t)c->n;
    (void)params;
    if (c->train && l->spec.rate > 0.0f)
        c->be->dropout_forward(out, s->mask, inp, n, l->spec.rate, c->rng);
    else if (out != inp)
        c->be->copy(out, inp, c->act_size * n);
}

static void dropout_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                             const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    struct dropout_state *s = l->state;
    size_t n = dt_shape_size(l->out) * (size_t)c->n;
    (void)inp; (void)out; (void)params; (void)dparams;
    if (!dinp) return;
    if (l->spec.rate > 0.0f)
        c->be->dropout_backward(dinp, dout, s->mask, n);
    else
        c->be->copy(dinp, dout, c->act_size * n);
}

const struct dt_layer_ops dt_dropout_ops = {
    .type = "dropout",
    .setup = dropout_setup,
    .create = dropout_create,
    .share_state = dropout_share_state,
    .destroy = dropout_destroy,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
