/* pipeline.c: pipeline stages (GPipe, Megatron's 1F1B), --pipeline-stages P.
 *
 * The ranks form a P x D mesh (pipe.h). Stage k runs the layers
 * [lo[k], lo[k+1]) (cut by train/pipeline.c before the model was created)
 * and keeps only their parameters, gradients and optimizer slots: one
 * contiguous range of the flat block, since layers own consecutive ranges.
 * The model reaches them through its parameter hook, as under fsdp; in
 * backward, the update's first micro-batch writes its gradient straight
 * into the stage's gradient and each later one adds its own to it.
 *
 * finish: the stage's gradient is summed over its D replicas (the mirrored
 * strategy's all-reduce, on stage_comm), every rank agrees whether all of
 * them are finite, and the optimizer updates the stage's range. The loss
 * sum and the correct count come from the last stage only (the others add
 * zero), summed over the world.
 *
 * The design decision: the mesh and the parameters live here, the schedule
 * (which micro-batch runs where, 1F1B) in the trainer (train/pipeline.c);
 * checkpoints see the whole block through gather_block, so they are the
 * same file with or without stages. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/tl_span.h"
#include "runtime/checks.h"
#include "strategy/pipe.h"
#include "strategy/strategy.h"

struct dt_pipe *dt_pipe_of(const struct dt_strategy *s)
{
    return s->ops == &dt_strategy_pipeline ? s->priv : NULL;
}

static const float *hook_at(void *arg, int layer, int backward, float **grads)
{
    struct dt_strategy *s = arg;
    struct dt_pipe *p = s->priv;
    const struct dt_layer *l = &s->model->layers[layer];
    if (!l->nparams) return NULL;
    const size_t in = l->param_offset - p->off[p->stage];
    if (backward) *grads = p->add ? p->scratch : p->grads + in;
    return p->params + in;
}

static void hook_after(void *arg, int layer, int backward)
{
    struct dt_strategy *s = arg;
    struct dt_pipe *p = s->priv;
    const struct dt_layer *l = &s->model->layers[layer];
    if (backward && p->add && l->nparams)
        s->be->accumulate(p->grads + (l->param_offset - p->off[p->stage]), p->scratch, l->nparams);
}

/* Stage k's parameters and buffers: the ranges of its layers. */
static void stage_ranges(struct dt_pipe *p, const struct dt_model *m)
{
    for (int k = 0; k < p->P; k++) {
        const struct dt_layer *a = &m->layers[p->lo[k]];
        p->off[k] = a->param_offset;
        p->len[k] = (k + 1 < p->P ? m->layers[p->lo[k + 1]].param_offset : m->nparams) - a->param_offset;
    }
    const int a = p->lo[p->stage], b = p->lo[p->stage + 1];
    p->boff = m->layers[a].buffer_offset;
    p->blen = (b < m->nlayers ? m->layers[b].buffer_offset : m->nbuffers) - p->boff;
}

static int pipe_setup(struct dt_strategy *s, dt_status *st)
{
    const struct dt_topo *t = &s->coll->topo;
    struct dt_model *m = s->model;
    const int P = s->cfg->pipeline_stages;
    if (m->nparams > (size_t)INT_MAX)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages: %zu parameters exceed MPI's int counts", m->nparams);
    struct dt_pipe *p = dt_xcalloc(1, sizeof *p);
    s->priv = p;
    p->P = P;
    p->D = t->size / P;
    p->stage = t->rank / p->D;
    p->replica = t->rank % p->D;
    p->lo = dt_xcalloc((size_t)P + 1, sizeof(int));
    p->off = dt_xcalloc((size_t)P, sizeof(size_t));
    p->len = dt_xcalloc((size_t)P, sizeof(size_t));
    /* Every rank knows every stage's first layer: its own is m->lo. */
    int *lo = dt_xcalloc((size_t)t->size, sizeof(int));
    DT_MPI_CHECK(MPI_Allgather(&m->lo, 1, MPI_INT, lo, 1, MPI_INT, t->world));
    for (int k = 0; k < P; k++) p->lo[k] = lo[k * p->D]; /* the mesh's stage k: ranks k*D.. */
    p->lo[P] = m->nlayers;
    free(lo);
    stage_ranges(p, m);
    DT_MPI_CHECK(MPI_Comm_split(t->world, p->stage, p->replica, &p->stage_comm));
    DT_MPI_CHECK(MPI_Comm_split(t->world, p->replica, p->stage, &p->pipe_comm));
    p->prev = p->stage > 0 ? p->stage - 1 : MPI_PROC_NULL;
    p->next = p->stage + 1 < P ? p->stage + 1 : MPI_PROC_NULL;
    const size_t len = p->len[p->stage], n = len ? len : 1;
    size_t widest = 1;
    for (int i = m->lo; i < m->hi; i++)
        if (m->layers[i].nparams > widest) widest = m->layers[i].nparams;
    p->params = dt_xmalloc(sizeof(float) * n);
    p->grads = dt_xcalloc(n, sizeof(float));
    p->scratch = dt_xmalloc(sizeof(float) * widest);
    p->scratch_len = widest;
    /* The whole block (rank 0's, broadcast, or a checkpoint's) is here once more: keep this stage's part. */
    s->be->download(p->params, m->params + p->off[p->stage], sizeof(float) * len);
    s->be->free(m->params);
    m->params = NULL;
    p->hook = (struct dt_param_hook){.at = hook_at, .after = hook_after, .arg = s};
    m->hook = &p->hook;
    s->shard_off = p->off[p->stage];
    s->shard_len = len;
    s->replica = p->replica;
    s->nreplicas = p->D;
    dt_strategy_create_optim(s, p->off[p->stage], len);
    return DT_OK;
}

static void pipe_begin(struct dt_strategy *s, const float *stats) { memcpy(s->stats, stats, sizeof s->stats); }

static void pipe_ready(struct dt_strategy *s, size_t offset) { (void)s; (void)offset; }

static void pipe_finish(struct dt_strategy *s, float *stats)
{
    struct dt_pipe *p = s->priv;
    const size_t len = p->len[p->stage];
    DT_TL_BEGIN(tl_ar);
    if (p->D > 1) DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p->grads, (int)len, MPI_FLOAT, MPI_SUM, p->stage_comm));
    DT_TL_END(tl_ar, DT_TL_COMM, "stage all-reduce", NULL);
    int ok = s->be->unscale_check(p->grads, len, 1.0f); /* each stage sees its own range: combined */
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, s->coll->topo.world));
    s->nonfinite = !ok;
    if (s->nonfinite && s->nan_policy == DT_NAN_SKIP) s->nan_skipped++;
    if (ok) dt_strategy_clip(s, p->grads, len, p->pipe_comm); /* this replica's stages make one copy */
    DT_TL_BEGIN(tl0);
    if (ok) dt_optim_step(&s->optim, p->params, p->grads);
    DT_TL_END(tl0, DT_TL_COMPUTE, "optimizer", NULL);
    DT_MPI_CHECK(MPI_Allreduce(s->stats, stats, DT_STATS, MPI_FLOAT, MPI_SUM, s->coll->topo.world));
}

/* Stage k's range, as MPI counts over the stages. */
static void stage_counts(const struct dt_pipe *p, int *counts, int *displs)
{
    for (int k = 0; k < p->P; k++) {
        counts[k] = (int)p->len[k];
        displs[k] = (int)p->off[k];
    }
}

/* The whole block (or the last update's gradients) into host: the stages of
 * root's replica gather it on root; with root < 0 every replica's stages
 * gather it on all of theirs. */
static void pipe_gather_block(struct dt_strategy *s, int grads, float *host, int root)
{
    struct dt_pipe *p = s->priv;
    if (root >= 0 && root % p->D != p->replica) return;
    int *counts = dt_xcalloc((size_t)p->P, sizeof(int)), *displs = dt_xcalloc((size_t)p->P, sizeof(int));
    stage_counts(p, counts, displs);
    const float *mine = grads ? p->grads : p->params;
    const int n = (int)p->len[p->stage];
    if (root < 0)
        DT_MPI_CHECK(MPI_Allgatherv(mine, n, MPI_FLOAT, host, counts, displs, MPI_FLOAT, p->pipe_comm));
    else
        DT_MPI_CHECK(MPI_Gatherv(mine, n, MPI_FLOAT, host, counts, displs, MPI_FLOAT, root / p->D, p->pipe_comm));
    free(counts);
    free(displs);
}

static void pipe_load_block(struct dt_strategy *s, const float *host)
{
    struct dt_pipe *p = s->priv;
    memcpy(p->params, host + p->off[p->stage], sizeof(float) * p->len[p->stage]);
}

static void pipe_teardown(struct dt_strategy *s)
{
    struct dt_pipe *p = s->priv;
    if (!p) return;
    if (s->model && s->model->hook == &p->hook) s->model->hook = NULL;
    if (p->stage_comm != MPI_COMM_NULL && p->stage_comm) MPI_Comm_free(&p->stage_comm);
    if (p->pipe_comm != MPI_COMM_NULL && p->pipe_comm) MPI_Comm_free(&p->pipe_comm);
    free(p->lo);
    free(p->off);
    free(p->len);
    free(p->params);
    free(p->grads);
    free(p->scratch);
    free(p);
    s->priv = NULL;
}

const struct dt_strategy_ops dt_strategy_pipeline = {
    .name = "pipeline",
    .setup = pipe_setup,
    .begin = pipe_begin,
    .grads_ready = pipe_ready,
    .finish = pipe_finish,
    .teardown = pipe_teardown,
    .gather_block = pipe_gather_block,
    .load_block = pipe_load_block,
};
