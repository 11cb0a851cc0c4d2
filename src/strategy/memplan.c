/* memplan.c: bytes per rank by strategy (see memplan.h). */
#include "config.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"

#include "strategy/memplan.h"

int dt_fsdp_group(const struct dt_model *m, double bucket_mb, int *of_layer, size_t largest[2])
{
    const size_t limit = bucket_mb > 0 ? (size_t)(bucket_mb * 1048576.0 / sizeof(float)) : m->nparams;
    size_t len = 0, most[2] = {0, 0}, start = 0;
    int nb = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (of_layer) of_layer[i] = -1;
        if (!l->nparams) continue;
        if (nb == 0 || len >= limit) { /* a new bucket */
            nb++;
            start = l->param_offset;
        }
        len = l->param_offset + l->nparams - start;
        if (len > most[(nb - 1) % 2]) most[(nb - 1) % 2] = len;
        if (of_layer) of_layer[i] = nb - 1;
    }
    if (largest) {
        largest[0] = most[0];
        largest[1] = most[1];
    }
    return nb;
}

/* What layers lo..hi-1 keep beside their outputs (layer.h's state_bytes),
 * at n samples (under --recompute each recomputed place's once), and the
 * largest shared scratch once. */
static double layer_state(const struct dt_model *m, int lo, int hi, int n, size_t act_size)
{
    double own = 0.0, shared = 0.0;
    int *start = dt_xmalloc(sizeof(int) * ((size_t)(hi - lo) + 2));
    const int np = m->recompute ? dt_model_pieces(m, lo, hi, start) : 0;
    for (int i = lo; i < hi; i++) {
        const struct dt_layer *l = &m->layers[i];
        const int mine = !np || dt_model_state_owner(m, start, np, i) == i; /* --recompute: a place's once */
        if (l->ops->state_bytes && mine) own += l->ops->state_bytes(l, n, act_size);
        double s = l->ops->scratch_bytes ? l->ops->scratch_bytes(l, n, act_size) : 0.0;
        if (s > shared) shared = s;
    }
    free(start);
    return own + shared;
}

/* Bytes of act[i] (and, backward, dact[i]) of one sample. */
static double act_row(const struct dt_model *m, int i)
{
    struct dt_shape sh = i == 0 ? m->input : m->layers[i - 1].out;
    return (double)dt_shape_size(sh);
}

/* Whether act[i] (d 0) or dact[i] (d 1) of a stage lo..hi is a buffer of
 * its own, as dt_model_create lays them out: not an alias of another
 * output (model.h's act_alias: a batch norm folded into the add after it
 * writes the add's output; a route reads its source's), act[lo] always,
 * and no dact of the model's input or of a language model's logits (the
 * loss writes their gradient over them). The first conv folded into its
 * pool (plan_conv_pool) depends on the backend and is decided when the
 * model is created: a plan made before (the start-up check, dtrain-predict)
 * counts the conv's output and its gradient, which the fold never makes
 * (5.3 MiB for the seed CNN at batch 32); one made after (a pipeline
 * stage's report) does not. */
static int own_buffer(const struct dt_model *m, int lo, int i, int d)
{
    if (i == lo) return !d || lo > 0;
    if (d && i == m->nlayers && m->tokens) return 0;
    const int *alias = d ? m->dact_alias : m->act_alias;
    return !alias || alias[i] == i;
}

/* Elements of one sample's outputs of layers lo..hi-1 (and act[lo]) with
 * their gradients, the buffers of their own (own_buffer); under --recompute
 * (model.h) the inner outputs of the recomputed pieces once for all pieces,
 * by position, aliases or not, as dt_model_create sizes them. */
static double act_rows(const struct dt_model *m, int lo, int hi)
{
    int *start = dt_xmalloc(sizeof(int) * ((size_t)(hi - lo) + 2));
    double *widest = dt_xcalloc((size_t)(hi - lo) + 1, sizeof *widest), row = 0.0;
    const int n = m->recompute ? dt_model_pieces(m, lo, hi, start) : 0;
    for (int i = lo, k = 0; i <= hi; i++) {
        while (k + 1 < n && start[k + 1] <= i) k++;
        if (n && dt_model_recomputed(start, n, k) && i > start[k]) {
            const double twice = 2.0 * act_row(m, i); /* inner: never the logits */
            const int j = i - start[k] - 1;
            if (twice > widest[j]) widest[j] = twice;
        } else {
            row += (own_buffer(m, lo, i, 0) + own_buffer(m, lo, i, 1)) * act_row(m, i);
        }
    }
    for (int j = 0; j <= hi - lo; j++) row += widest[j];
    free(widest);
    free(start);
    return row;
}

void dt_mem_plan(const struct dt_model *m, const char *strategy, int slots, int nranks, int local, double bucket_mb,
                 int batch, size_t act_size, struct dt_mem_plan *p)
{
    const double P = 4.0 * (double)m->nparams, N = nranks > 0 ? nranks : 1, Q = local > 0 ? local : 1;
    const char *s = strategy ? strategy : "auto";
    memset(p, 0, sizeof *p);
    p->params = P;
    p->grads = P;
    p->slots = slots * P;
    if (!strcmp(s, "central-storage")) {
        p->params = P / Q;
        p->slots = slots * P / Q;
        p->mapped = P - P / Q;
    } else if (!strcmp(s, "mirrored") || !strcmp(s, "multi-worker") || !strcmp(s, "auto")) {
        p->mapped = (Q - 1.0) * P; /* the peers' gradient windows (strategy/mirrored.c) */
    } else if (!strcmp(s, "parameter-server")) {
        p->slots = 0; /* a worker's: the servers keep the slots of their ranges */
    } else if (!strcmp(s, "sharded")) {
        p->slots = slots * P / N;
    } else if (!strcmp(s, "fsdp")) {
        size_t largest[2] = {0, 0};
        dt_fsdp_group(m, bucket_mb, NULL, largest);
        p->params = P / N;
        p->grads = P / N;
        p->slots = slots * P / N;
        p->gathered = 2.0 * sizeof(float) * (double)(largest[0] + largest[1]); /* parameters + gradients a slot */
        const int head = dt_model_tied_head(m); /* its gradient of the table, kept aside (model.h's tie_grad) */
        if (head >= 0) p->gathered += sizeof(float) * (double)m->layers[head].out.c * m->layers[head].in.c;
    }
    p->activations = act_rows(m, 0, m->nlayers) * (double)batch * (double)act_size;
    p->activations += layer_state(m, 0, m->nlayers, batch, act_size);
}

double dt_mem_plan_total(const struct dt_mem_plan *p) { return p->params + p->grads + p->slots + p->gathered + p->activations; }

double dt_mem_plan_rss(const struct dt_mem_plan *p) { return dt_mem_plan_total(p) + p->mapped; }

/* Dynamic programming over the layers: best(k, i), the least slowest stage
 * of the first i layers as k stages, from best(k-1, j) for every allowed j;
 * among equally slow ways, the one whose stages' squared costs add up least
 * (so stages past the slowest are balanced too, not left near empty). Not
 * between a conv and its 2x2 max pool (dt_model_conv_pool2) unless the
 * model has too few other places for P stages: the stage would receive 4x
 * the pool's output, and the pair's backward, folded on the CPU (model.c's
 * plan_poolgrad), would run apart, summing in another order. */
void dt_pipe_balance(const struct dt_model *m, const double *cost, int P, int *cut)
{
    const int L = m->nlayers;
    const size_t W = (size_t)L + 1;
    double *pre = dt_xcalloc(W, sizeof(double));
    char *ok = dt_xcalloc(W, 1); /* a stage may start (and the one before end) at layer i */
    for (int i = 0; i < L; i++) pre[i + 1] = pre[i] + cost[i];
    int places = 0;
    for (int i = 0; i <= L; i++) {
        ok[i] = i == 0 || i == L || (dt_model_can_cut(m, i) && !dt_model_conv_pool2(m, i));
        places += i > 0 && i < L && ok[i];
    }
    if (places + 1 < P)
        for (int i = 1; i < L; i++) ok[i] = dt_model_can_cut(m, i);
    double *best = dt_xmalloc(sizeof(double) * (size_t)(P + 1) * W), *sq = dt_xmalloc(sizeof(double) * (size_t)(P + 1) * W);
    int *from = dt_xcalloc((size_t)(P + 1) * W, sizeof(int));
    for (size_t x = 0; x < (size_t)(P + 1) * W; x++) best[x] = sq[x] = DBL_MAX;
    best[0] = sq[0] = 0.0;
    for (int k = 1; k <= P; k++)
        for (int i = 1; i <= L; i++) {
            if (!ok[i]) continue;
            const size_t at = (size_t)k * W + (size_t)i;
            for (int j = k - 1; j < i; j++) {
                const size_t prev = (size_t)(k - 1) * W + (size_t)j;
                if (!ok[j] || best[prev] == DBL_MAX) continue;
                const double c = pre[i] - pre[j], v = best[prev] > c ? best[prev] : c, q = sq[prev] + c * c;
                const double tie = 1e-9 * (v > best[at] || best[at] == DBL_MAX ? v : best[at]);
                if (v < best[at] - tie || (v <= best[at] + tie && q < sq[at])) {
                    best[at] = v;
                    sq[at] = q;
                    from[at] = j;
                }
            }
        }
    cut[P] = L;
    for (int k = P; k > 0; k--) cut[k - 1] = from[(size_t)k * W + (size_t)cut[k]];
    free(best);
    free(sq);
    free(from);
    free(ok);
    free(pre);
}


void dt_mem_plan_pipeline(const struct dt_model *m, const int *cut, int P, int M, int stage, int slots, int batch,
                          size_t act_size, struct dt_mem_plan *p)
{
    const int lo = cut[stage], hi = cut[stage + 1];
    const size_t end = hi < m->nlayers ? m->layers[hi].param_offset : m->nparams;
    const double len = 4.0 * (double)(end - m->layers[lo].param_offset);
    size_t widest = 0;
    for (int i = lo; i < hi; i++)
        if (m->layers[i].nparams > widest) widest = m->layers[i].nparams;
    memset(p, 0, sizeof *p);
    p->params = len;
    p->grads = len + 4.0 * (double)widest; /* and a layer's gradient of a later micro-batch, before it is added */
    p->slots = slots * len;
    const int K = M < P - stage ? M : P - stage, micro = batch / M + (batch % M != 0);
    p->activations = act_rows(m, lo, hi) * (double)act_size * (double)K * (double)micro;
    p->activations += (double)K * layer_state(m, lo, hi, micro, act_size);
}

double dt_pipe_bubble_ideal(int P, int M) { return (double)(P - 1) / (double)(M + P - 1); }
