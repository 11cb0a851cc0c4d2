/* central_storage.c: TF CentralStorageStrategy: one copy of the parameters
 * and of the optimizer state per node.
 *
 * The parameters live in an MPI-3 shared-memory window that every local
 * rank maps and reads in place (no copies): forward and backward on all
 * local ranks use the same bytes. Gradients are summed as in mirrored (the
 * bucketed all-reduce, shared memory inside the node); then local rank 0
 * alone applies the optimizer to the node's copy, holding the only optimizer
 * state on the node, and the others wait at a node barrier until the new
 * parameters are in place. Across nodes every leader applies the same update
 * to the same sums, so the nodes' copies stay bitwise identical.
 * Memory per rank falls by (L-1)/L of parameters + optimizer state. */
#include "config.h"

#include <string.h>

#include "runtime/checks.h"
#include "strategy/strategy.h"

static const struct dt_shm *shared_params(const struct dt_strategy *s)
{
    return s->priv;
}

static int central_setup(struct dt_strategy *s, dt_status *st)
{
    struct dt_model *m = s->model;
    struct dt_coll *c = s->coll;
    const struct dt_shm *shm = dt_coll_alloc_node_shared(c, m->nparams);
    float *shared = shm->peer[0];
    /* The node's copy starts as the (already broadcast) parameters. */
    if (c->topo.local_rank == 0) s->be->copy(shared, m->params, sizeof(float) * m->nparams);
    dt_shm_fence(c, shm);
    s->be->free(m->params);
    m->params = shared;
    m->params_borrowed = 1;
    s->priv = (void *)(uintptr_t)shm; /* kept const in use: shared_params() */
    /* Gradients and buckets as mirrored, without its optimizer. */
    int rc = dt_allreduce_strategy_setup(s, st);
    dt_optim_free(&s->optim);
    if (c->topo.local_rank == 0) dt_strategy_create_optim(s, 0, m->nparams);
    return rc;
}

static void central_finish(struct dt_strategy *s, float *stats)
{
    struct dt_model *m = s->model;
    const struct dt_shm *shm = shared_params(s);
    dt_reducer_finish(&s->reducer);
    /* Nobody may still be reading the parameters (a slower rank's backward)
     * while the leader writes them, nor read them before it is done. */
    /* Every rank checks the same reduced gradient: the same verdict. */
    int apply = dt_strategy_gradient_ok(s, m->grads, m->nparams);
    if (apply) dt_strategy_clip(s, m->grads, m->nparams, MPI_COMM_NULL); /* each rank its own reduced copy */
    dt_shm_fence(s->coll, shm);
    if (s->coll->topo.local_rank == 0 && apply) dt_optim_step(&s->optim, m->params, m->grads);
    dt_shm_fence(s->coll, shm);
    s->be->download(stats, m->grads + m->nparams, sizeof(float) * DT_STATS);
}

const struct dt_strategy_ops dt_strategy_central_storage = {
    .name = "central-storage",
    .setup = central_setup,
    .begin = dt_allreduce_strategy_begin,
    .grads_ready = dt_allreduce_strategy_ready,
    .finish = central_finish,
    .teardown = dt_allreduce_strategy_teardown,
};
