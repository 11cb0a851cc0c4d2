/* attention.c: causal multi-head self-attention, GPT-2's attn block.
 * Parameters: Wqkv [C][3C] then bqkv [3C] (the fused q | k | v
 * projection, HF's c_attn in its Conv1D [in][out] layout), Wo [C][C] then
 * bo [C] (c_proj). Input and output are sequences 1 x T x C.
 *
 *   qkv [n][T][3C] = x . Wqkv + bqkv        (the backend's dense ops)
 *   att [n][T][C]  = softmax(q k^T / sqrt(D), causal) v, per head
 *   out            = att . Wo + bo
 *
 * The one design decision: the scores are never stored. The backend's
 * attention computes softmax online over blocks of keys (flash attention)
 * and keeps only each query's log-sum-exp; backward recomputes the scores
 * from qkv and it. What the layer keeps for backward is qkv, att and lse:
 * 4C + H floats a position, not T. The gradients of att and qkv are scratch
 * that every attention layer of the process shares, since only one runs
 * backward at a time. */
#include "config.h"

#include <stdlib.h>

#include "nn/layer.h"

struct attn_state {
    dt_act *qkv, *att; /* [max_n][T][3C], [max_n][T][C] */
    float *lse;        /* [max_n][H][T] */
    dt_act *cache;     /* decode: [T][3C], the qkv rows of the positions generated so far
                          (allocated on the first decode) */
    int borrowed;      /* qkv, att and lse are another layer's (share_state) */
};

/* Backward's scratch: dqkv then datt, shared by the attention layers of the
 * process and freed with the last of them. */
static const struct dt_backend *scratch_be;
static dt_act *scratch;
static size_t scratch_bytes;
static int scratch_users;

static int attention_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    const int C = l->in.c, H = sp->heads;
    if (l->in.h != 1 || l->in.w < 1)
        return dt_fail(st, DT_EUSAGE, "%s: expects a sequence (1 x T x C, after an embedding); found %dx%dx%d",
                       l->name, l->in.h, l->in.w, l->in.c);
    if (H < 1 || C % H != 0)
        return dt_fail(st, DT_EUSAGE, "%s: heads = %d does not divide the width %d (each head takes width / heads "
                       "channels)", l->name, H, C);
    l->out = l->in;
    l->nparams = (size_t)C * 3 * C + 3 * (size_t)C + (size_t)C * C + (size_t)C;
    return DT_OK;
}

static void attention_create(struct dt_layer *l, const struct dt_backend *be, int max_n)
{
    const size_t T = (size_t)l->in.w, C = (size_t)l->in.c, H = (size_t)l->spec.heads, n = (size_t)max_n;
    const size_t as = dt_act_size(be->act_type());
    struct attn_state *s = dt_xcalloc(1, sizeof *s);
    s->qkv = be->alloc(as * n * T * 3 * C);
    s->att = be->alloc(as * n * T * C);
    s->lse = be->alloc(sizeof(float) * n * H * T);
    l->state = s;
    size_t need = as * n * T * 4 * C;
    if (scratch && (scratch_be != be || scratch_bytes < need)) { /* grow (one backend at a time) */
        scratch_be->free(scratch);
        scratch = NULL;
    }
    if (!scratch) {
        scratch = be->alloc(need > scratch_bytes ? need : scratch_bytes);
        scratch_bytes = need > scratch_bytes ? need : scratch_bytes;
        scratch_be = be;
    }
    scratch_users++;
}

/* What a layer keeps (qkv, att, lse), and the scratch all share (dqkv, datt). */
static double attention_state_bytes(const struct dt_layer *l, int n, size_t act_size)
{
    const double T = l->in.w, C = l->in.c, H = l->spec.heads;
    return (double)n * T * (4.0 * C * (double)act_size + 4.0 * H);
}

static double attention_scratch_bytes(const struct dt_layer *l, int n, size_t act_size)
{
    return (double)n * l->in.w * 4.0 * l->in.c * (double)act_size;
}

static void attention_share_state(struct dt_layer *l, const struct dt_layer *with, const struct dt_backend *be)
{
    struct attn_state *s = l->state;
    const struct attn_state *w = with->state;
    be->free(s->qkv);
    be->free(s->att);
    be->free(s->lse);
    s->qkv = w->qkv;
    s->att = w->att;
    s->lse = w->lse;
    s->borrowed = 1;
}

static void attention_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct attn_state *s = l->state;
    if (s && be) {
        if (!s->borrowed) {
            be->free(s->qkv);
            be->free(s->att);
            be->free(s->lse);
        }
        if (s->cache) be->free(s->cache);
        if (--scratch_users == 0) {
            scratch_be->free(scratch);
            scratch = NULL;
            scratch_bytes = 0;
        }
    }
    free(s);
    l->state = NULL;
}

static void attention_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    const size_t C = (size_t)l->in.c;
    float *wqkv = params, *bqkv = wqkv + C * 3 * C, *wo = bqkv + 3 * C, *bo = wo + C * C;
    dt_normal_init(wqkv, C * 3 * C, 0.02f, rng);
    dt_normal_init(wo, C * C, 0.02f, rng);
    for (size_t j = 0; j < 3 * C; j++) bqkv[j] = 0.0f;
    for (size_t j = 0; j < C; j++) bo[j] = 0.0f;
}

static int attention_decayed(const struct dt_layer *l, size_t *off, size_t *len, int max)
{
    const size_t C = (size_t)l->in.c;
    if (max < 2) return 0;
    off[0] = 0, len[0] = C * 3 * C;                     /* Wqkv */
    off[1] = C * 3 * C + 3 * C, len[1] = C * C;         /* Wo */
    return 2;
}

static void attention_forward(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                              const float *params)
{
    struct attn_state *s = l->state;
    const int T = l->in.w, C = l->in.c, H = l->spec.heads, rows = c->n * T;
    const float *wqkv = params, *bqkv = wqkv + (size_t)C * 3 * C, *wo = bqkv + 3 * (size_t)C,
                *bo = wo + (size_t)C * C;
    if (c->n == 0) return;
    c->be->dense_forward(rows, C, 3 * C, s->qkv, inp, wqkv, bqkv);
    c->be->attention_forward(s->att, s->lse, s->qkv, c->n, T, C, H);
    c->be->dense_forward(rows, C, C, out, s->att, wo, bo);
}

static void attention_backward(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                               const dt_act *inp, const dt_act *out, const float *params, float *dparams)
{
    (void)out;
    struct attn_state *s = l->state;
    const int T = l->in.w, C = l->in.c, H = l->spec.heads, rows = c->n * T;
    const size_t C3 = (size_t)C * 3 * C;
    const float *wqkv = params, *wo = params + C3 + 3 * (size_t)C;
    float *dwqkv = dparams, *dbqkv = dwqkv + C3, *dwo = dbqkv + 3 * (size_t)C, *dbo = dwo + (size_t)C * C;
    dt_act *dqkv = scratch;
    dt_act *datt = (char *)scratch + c->act_size * (size_t)rows * 3 * C;
    c->be->dense_backward(rows, C, C, datt, dwo, dbo, dout, s->att, wo);
    if (c->n > 0) c->be->attention_backward(dqkv, datt, s->qkv, s->att, s->lse, c->n, T, C, H);
    c->be->dense_backward(rows, C, 3 * C, dinp, dwqkv, dbqkv, dqkv, inp, wqkv);
}

/* One position (layer.h's decode): its q, k, v projected into row pos of the
 * cache, which is attention_forward's qkv layout, so the rows of earlier
 * positions are the keys and values; then the one query against them, and
 * the output projection of that one row. */
static void attention_decode(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                             const float *params)
{
    struct attn_state *s = l->state;
    const int T = l->in.w, C = l->in.c, H = l->spec.heads;
    const size_t row = c->act_size * 3 * (size_t)C;
    const float *wqkv = params, *bqkv = wqkv + (size_t)C * 3 * C, *wo = bqkv + 3 * (size_t)C,
                *bo = wo + (size_t)C * C;
    if (!s->cache) s->cache = c->be->alloc(row * (size_t)T);
    c->be->dense_forward(1, C, 3 * C, (char *)s->cache + row * (size_t)pos, inp, wqkv, bqkv);
    c->be->attention_decode(s->att, s->cache, pos, C, H);
    c->be->dense_forward(1, C, C, out, s->att, wo, bo);
}

const struct dt_layer_ops dt_attention_ops = {
    .type = "attention",
    .setup = attention_setup,
    .create = attention_create,
    .state_bytes = attention_state_bytes,
    .scratch_bytes = attention_scratch_bytes,
    .share_state = attention_share_state,
    .destroy = attention_destroy,
    .init = attention_init,
    .decayed = attention_decayed,
    .forward = attention_forward,
    .backward = attention_backward,
    .decode = attention_decode,
};
