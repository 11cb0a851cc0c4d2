/* embedding.c: token and learned position embedding, GPT-2's wte + wpe.
 * Parameters: wte [V][C], then wpe [T][C].
 * The input is a window of token ids, int32 [n][T+1] (the data layer's rows:
 * tokens 0..T-1 are read here, tokens 1..T are the loss's targets), so the
 * input shape is 1 x (T+1) x 4 bytes; the output is a sequence 1 x T x C.
 * Forward gathers rows of wte and adds wpe; backward scatter-adds into wte.
 * The one design decision: a tied LM head (lm_head.c) writes its gradient
 * into this layer's wte slot first (it runs first in backward), so wte's
 * gradient is accumulated onto it here rather than overwritten. */
#include "config.h"

#include <stdint.h>

#include "nn/layer.h"

static int embedding_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    int T = sp->block, C = sp->filters, V = sp->vocab;
    if (l->in.h != 1 || l->in.c != 4 || l->in.w < 2)
        return dt_fail(st, DT_EUSAGE, "%s: expects windows of tokens (a dataset from dtrain-prep --text); found "
                       "an input of %dx%dx%d", l->name, l->in.h, l->in.w, l->in.c);
    if (T < 1 || C < 1 || V < 1)
        return dt_fail(st, DT_EUSAGE, "%s: block_size, width and vocab must be >= 1 (got %d, %d, %d)", l->name, T,
                       C, V);
    if (l->in.w != T + 1)
        return dt_fail(st, DT_EUSAGE, "%s: block_size = %d but the data gives windows of %d tokens", l->name, T,
                       l->in.w - 1);
    l->out = (struct dt_shape){1, T, C};
    l->nparams = (size_t)V * C + (size_t)T * C;
    return DT_OK;
}

static void embedding_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    dt_normal_init(params, l->nparams, 0.02f, rng); /* GPT-2: wte and wpe N(0, 0.02) */
}

static void embedding_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                              const float *params)
{
    const int T = l->out.w, C = l->out.c;
    if (c->n == 0) return;
    const float *wte = params, *wpe = params + (size_t)l->spec.vocab * C;
    c->be->embed_forward(out, (const int32_t *)inp, wte, wpe, c->n, T, C);
}

static void embedding_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                               const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)dinp; (void)out; (void)params;
    const int T = l->out.w, C = l->out.c;
    const size_t nwte = (size_t)l->spec.vocab * C;
    if (l->tie < 0) c->be->zero(dparams, sizeof(float) * nwte); /* no head wrote its part first */
    if (c->n == 0) {
        c->be->zero(dparams + nwte, sizeof(float) * (size_t)T * C);
        return;
    }
    c->be->embed_backward(dparams, dparams + nwte, dout, (const int32_t *)inp, c->n, T, C);
}

/* One token at position pos: wte[token] + wpe[pos] (the forward of a window
 * of one position whose position table starts at row pos). */
static void embedding_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                             const float *params)
{
    const int C = l->out.c;
    const float *wte = params, *wpe = params + (size_t)l->spec.vocab * C;
    c->be->embed_forward(out, (const int32_t *)inp, wte, wpe + (size_t)pos * C, 1, 1, C);
}

const struct dt_layer_ops dt_embedding_ops = {
    .type = "embedding",
    .setup = embedding_setup,
    .init = embedding_init,
    .forward = embedding_forward,
    .backward = embedding_backward,
    .decode = embedding_decode,
};
