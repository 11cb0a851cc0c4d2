/* sharded.c: ZeRO-1 data parallelism (DeepSpeed ZeRO stage 1, llm.c's
 * zero.cuh), beyond tf.distribute.
 *
 * Gradients are reduce-scattered: rank r receives the sum of its shard
 * (segment r of the flat block) only; it keeps the optimizer state of that
 * shard alone and updates those parameters; then the parameters are
 * all-gathered. Optimizer memory per rank falls by the rank count (Adam's
 * two slots: 8 bytes a parameter become 8/P). Each shard is summed on one
 * rank and then copied, so every rank ends with the same bits. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "metrics/tl_span.h"
#include "strategy/strategy.h"

struct sharded {
    int *counts, *displs; /* per rank, in floats (MPI's int counts) */
    float *shard_grads;   /* [shard_len] */
};

static int sharded_setup(struct dt_strategy *s, dt_status *st)
{
    const struct dt_topo *t = &s->coll->topo;
    size_t n = s->model->nparams;
    if (n > (size_t)INT_MAX)
        return dt_fail(st, DT_EUSAGE, "--strategy sharded: %zu parameters exceed MPI's int counts", n);
    struct sharded *z = dt_xcalloc(1, sizeof *z);
    z->counts = dt_xcalloc((size_t)t->size, sizeof(int));
    z->displs = dt_xcalloc((size_t)t->size, sizeof(int));
    for (int r = 0; r < t->size; r++) {
        size_t off, len;
        dt_segment(n, t->size, r, &off, &len);
        z->counts[r] = (int)len;
        z->displs[r] = (int)off;
    }
    dt_segment(n, t->size, t->rank, &s->shard_off, &s->shard_len);
    z->shard_grads = s->be->alloc(sizeof(float) * (s->shard_len ? s->shard_len : 1));
    s->priv = z;
    dt_strategy_create_optim(s, s->shard_off, s->shard_len);
    return DT_OK;
}

static void sharded_begin(struct dt_strategy *s, const float *stats)
{
    memcpy(s->stats, stats, sizeof s->stats);
}

static void sharded_ready(struct dt_strategy *s, size_t offset) { (void)s; (void)offset; }

static void sharded_finish(struct dt_strategy *s, float *stats)
{
    struct sharded *z = s->priv;
    struct dt_model *m = s->model;
    MPI_Comm world = s->coll->topo.world;
    DT_MPI_CHECK(MPI_Reduce_scatter(m->grads, z->shard_grads, z->counts, MPI_FLOAT, MPI_SUM, world));
    /* Each rank sees its shard only: the verdicts are combined. */
    int ok = s->be->unscale_check(z->shard_grads, s->shard_len, 1.0f);
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, world));
    s->nonfinite = !ok;
    if (s->nonfinite && s->nan_policy == DT_NAN_SKIP) s->nan_skipped++;
    if (ok) dt_strategy_clip(s, z->shard_grads, s->shard_len, world); /* the shards make one copy */
    DT_TL_BEGIN(tl0);
    if (ok) dt_optim_step(&s->optim, m->params + s->shard_off, z->shard_grads);
    DT_TL_END(tl0, DT_TL_COMPUTE, "optimizer", NULL);
    DT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m->params, z->counts, z->displs,
                                MPI_FLOAT, world));
    DT_MPI_CHECK(MPI_Allreduce(s->stats, stats, DT_STATS, MPI_FLOAT, MPI_SUM, world));
}

static void sharded_teardown(struct dt_strategy *s)
{
    struct sharded *z = s->priv;
    if (!z) return;
    s->be->free(z->shard_grads);
    free(z->counts);
    free(z->displs);
    free(z);
    s->priv = NULL;
}

const struct dt_strategy_ops dt_strategy_sharded = {
    .name = "sharded",
    .setup = sharded_setup,
    .begin = sharded_begin,
    .grads_ready = sharded_ready,
    .finish = sharded_finish,
    .teardown = sharded_teardown,
};
