/* lm_head.c: the language-model head, logits [n][T][V] = x . W^T with W
 * [V][C] (PyTorch's Linear layout, no bias: GPT-2's lm_head).
 * tied = 1 (the default, as GPT-2): W is the embedding's token table wte;
 * the layer has no parameters of its own, the model (model.c) hands it the
 * embedding's parameters and gradient slot, backward writes the head's
 * part of wte's gradient there first, and the embedding's backward adds
 * its own. tied = 0: W is this layer's own. */
#include "config.h"

#include "nn/layer.h"

static int lm_head_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    if (sp->vocab < 1) return dt_fail(st, DT_EUSAGE, "%s: vocab must be >= 1 (got %d)", l->name, sp->vocab);
    if (l->in.h != 1) /* a sequence; the model checks the tie */
        return dt_fail(st, DT_EUSAGE, "%s: expects a sequence (1 x T x C); found %dx%dx%d", l->name, l->in.h,
                       l->in.w, l->in.c);
    l->out = (struct dt_shape){1, l->in.w, sp->vocab};
    l->nparams = sp->tied ? 0 : (size_t)sp->vocab * l->in.c;
    return DT_OK;
}

static void lm_head_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    if (l->nparams) dt_normal_init(params, l->nparams, 0.02f, rng);
}

static int lm_head_decayed(const struct dt_layer *l, size_t *off, size_t *len, int max)
{
    if (!l->nparams || max < 1) return 0;
    off[0] = 0, len[0] = l->nparams;
    return 1;
}

static void lm_head_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                            const float *params)
{
    if (c->n == 0) return;
    c->be->linear_t_forward((size_t)c->n * l->in.w, l->in.c, l->out.c, out, inp, params);
}

static void lm_head_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                             const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)out;
    if (c->n == 0) {
        c->be->zero(dparams, sizeof(float) * (size_t)l->out.c * l->in.c);
        return;
    }
    c->be->linear_t_backward((size_t)c->n * l->in.w, l->in.c, l->out.c, dinp, dparams, dout, inp, params);
}

/* One row of logits; tied, params is the embedding's (wte first), as in forward. */
static void lm_head_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                           const float *params)
{
    (void)pos;
    c->be->linear_t_forward(1, l->in.c, l->out.c, out, inp, params);
}

const struct dt_layer_ops dt_lm_head_ops = {
    .type = "lm_head",
    .setup = lm_head_setup,
    .init = lm_head_init,
    .decayed = lm_head_decayed,
    .forward = lm_head_forward,
    .backward = lm_head_backward,
    .decode = lm_head_decode,
};
