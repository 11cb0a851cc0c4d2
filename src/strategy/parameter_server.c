/* parameter_server.c: TF ParameterServerStrategy in MPI.
 *
 * Ranks 0..K-1 (--num-ps K, default 1) are servers and only servers: each
 * holds a contiguous shard of the parameters and its optimizer state. The
 * other W ranks are the workers (the replicas): each step a worker reads the
 * current parameters, computes its gradient and pushes each shard to its
 * server; servers apply pushed gradients as they arrive and count what they
 * applied.
 *
 * Modes (--ps-mode):
 *   async: a worker never waits for others; each push is one update (the
 *          worker's own batch mean), applied in arrival order;
 *   ssp:   like async, but a worker starts step t only when every worker's
 *          step t-S (--staleness S) has been applied;
 *   sync:  the server waits for all W pushes of a step and applies their
 *          sum (each scaled by 1/global batch) once: synchronous SGD.
 * A worker pushes again only after the server applied its previous push, so
 * every pushed gradient is applied exactly once (counted).
 *
 * How pushes and pulls travel is the transport's (ps.h, --ps-transport):
 * one-sided windows where the MPI can make them, two-sided messages where it
 * cannot (auto tries the first and falls back to the second, and says so). */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/checks.h"
#include "strategy/ps.h"

static int ps_setup(struct dt_strategy *s, dt_status *st)
{
    const struct dt_config *cfg = s->cfg;
    const struct dt_topo *t = &s->coll->topo;
    struct dt_model *m = s->model;
    int K = cfg->num_ps > 0 ? cfg->num_ps : 1;
    if (K >= t->size)
        return dt_fail(st, DT_EUSAGE, "--num-ps %d: the parameter server needs at least one worker besides "
                       "its %d server rank%s, and the job has %d rank%s", K, K, K == 1 ? "" : "s", t->size,
                       t->size == 1 ? "" : "s");
    int want = cfg->ps_transport;
#ifdef MPICH_VERSION
    /* Seen with Debian's MPICH 4.0.2 (ch4:ucx): with two or more servers a
     * worker's pushes to the second server are never seen there over
     * one-sided RMA, and the job hangs; one server works. auto takes the
     * two-sided transport there; asking for one-sided is refused. */
    if (K > 1 && want == PS_TRANSPORT_RMA)
        return dt_fail(st, DT_EUSAGE, "--num-ps %d --ps-transport one-sided: with MPICH, more than one parameter "
                       "server hangs in passive-target RMA (seen with MPICH 4.0.2, ch4:ucx); use --num-ps 1, "
                       "--ps-transport two-sided (or auto), or Open MPI", K);
    if (K > 1 && want == PS_TRANSPORT_AUTO) want = PS_TRANSPORT_MSG;
#endif
    if (cfg->clip_norm > 0.0f && cfg->ps_mode == PS_SYNC && K > 1)
        return dt_fail(st, DT_EUSAGE, "--clip-norm with --ps-mode sync --num-ps %d: a sync update is the sum of "
                       "the pushes, whose norm no server sees whole; use --num-ps 1, or --ps-mode async or ssp "
                       "(there each worker clips its own push)", K);
    if ((size_t)K > m->nparams)
        return dt_fail(st, DT_EUSAGE, "--num-ps %d: more servers than the model's %zu parameters", K, m->nparams);
    struct ps *p = dt_xcalloc(1, sizeof *p);
    s->priv = p;
    p->nps = K;
    p->nworkers = t->size - K;
    p->mode = cfg->ps_mode;
    p->staleness = cfg->staleness;
    p->server = t->rank < K ? t->rank : -1;
    p->worker = t->rank >= K ? t->rank - K : -1;
    p->off = dt_xcalloc((size_t)K, sizeof(size_t));
    p->len = dt_xcalloc((size_t)K, sizeof(size_t));
    p->counts = dt_xcalloc((size_t)t->size, sizeof(int));
    p->displs = dt_xcalloc((size_t)t->size, sizeof(int));
    for (int k = 0; k < K; k++) {
        dt_segment(m->nparams, K, k, &p->off[k], &p->len[k]);
        p->counts[k] = (int)p->len[k];
        p->displs[k] = (int)p->off[k];
    }
    char why[256] = "";
    if (want != PS_TRANSPORT_MSG) {
        p->tr = &dt_ps_rma;
        if (p->tr->open(s, why, sizeof why) != 0) {
            p->tr = NULL;
            if (want == PS_TRANSPORT_RMA)
                return dt_fail(st, DT_ERUNTIME, "--ps-transport one-sided: this MPI cannot make the servers' "
                               "one-sided windows (%s); use --ps-transport two-sided (or auto), or a one-sided "
                               "component that works on this network (Open MPI: --mca osc ucx or pt2pt)", why);
            if (t->rank == 0 && cfg->verbose >= DT_NORMAL)
                fprintf(stderr, "dtrain: note: parameter server: no one-sided windows here (%s); pushes and pulls "
                        "go as two-sided messages (--ps-transport two-sided)\n", why);
        }
    }
    if (!p->tr) {
        p->tr = &dt_ps_msg;
        if (p->tr->open(s, why, sizeof why) != 0) DT_DIE("the two-sided parameter server failed to start: %s", why);
    }
    if (p->server >= 0) {
        size_t mylen = p->len[p->server];
        /* My shard of the broadcast parameters; empty inbox and zero counters (open). */
        memcpy(p->params, m->params + p->off[p->server], sizeof(float) * mylen);
        dt_strategy_create_optim(s, p->off[p->server], mylen);
        if (p->mode == PS_SYNC) p->sum = dt_xcalloc(mylen ? mylen : 1, sizeof(float));
        s->shard_off = p->off[p->server];
        s->shard_len = mylen;
    }
    s->replica = p->worker;
    s->nreplicas = p->nworkers;
    s->local_stats = 1;
    s->lockstep = 0;
    s->scale_local = p->mode != PS_SYNC;
    DT_MPI_CHECK(MPI_Barrier(t->world)); /* servers initialised before any worker reads them */
    return DT_OK;
}

const char *dt_ps_transport_name(const struct dt_strategy *s)
{
    return s->ops == &dt_strategy_parameter_server && dt_ps(s) && dt_ps(s)->tr ? dt_ps(s)->tr->name : "";
}

/* ---- worker --------------------------------------------------------------- */

static void ps_begin(struct dt_strategy *s, const float *stats)
{
    memcpy(s->stats, stats, sizeof s->stats);
}

/* Before a step's forward: wait as the mode says, then read the parameters. */
static void ps_pull(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    p->tr->pull(s, p->step++);
}

static void ps_ready(struct dt_strategy *s, size_t offset) { (void)s; (void)offset; }

static void ps_finish(struct dt_strategy *s, float *stats)
{
    struct ps *p = dt_ps(s);
    /* Pushes are applied as they come: a non-finite one would reach the
     * parameters of every worker. The worker checks its own gradient and
     * ends the job first (--nan-policy skip is refused with this strategy). */
    if (!s->be->unscale_check(s->model->grads, s->model->nparams, 1.0f)) {
        fprintf(stderr, "dtrain: error: rank %d (a parameter-server worker): the gradient of its push %ld holds a NaN "
                "or infinity (its loss is %s); the job ends before a server applies it; try a smaller --lr\n",
                s->coll->topo.rank, p->pushes + 1, isfinite(s->stats[0]) ? "finite" : "not finite");
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, DT_ERUNTIME); /* the servers and other workers do not know to stop */
    }
    /* async, ssp: each push is an update of its own, whose whole gradient is
     * here; sync's update is the servers' sum (ps_apply.c). */
    if (p->mode != PS_SYNC) dt_strategy_clip(s, s->model->grads, s->model->nparams, MPI_COMM_NULL);
    p->tr->push(s);
    p->pushes++;
    memcpy(stats, s->stats, sizeof s->stats); /* this worker's own; summed at the epoch's end */
}

/* Collective at the end of an epoch: servers finish applying; everyone gets
 * the current parameters (evaluation, checkpoints, the next epoch's start). */
static void ps_epoch_end(struct dt_strategy *s, long steps)
{
    struct ps *p = dt_ps(s);
    const struct dt_topo *t = &s->coll->topo;
    p->target += steps; /* counters are cumulative over the run */
    if (p->server >= 0) {
        p->tr->serve(s, p->target);
        memcpy(s->model->params + p->off[p->server], p->params, sizeof(float) * p->len[p->server]);
    }
    DT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s->model->params, p->counts, p->displs,
                                MPI_FLOAT, t->world));
}

static void ps_teardown(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    if (!p) return;
    if (p->tr) p->tr->close(s);
    p->trp = NULL;
    p->params = p->inbox = NULL; /* the transport's memory, freed by close */
    p->pushed = p->applied = p->version = NULL;
    free(p->off);
    free(p->len);
    free(p->counts);
    free(p->displs);
    free(p->sum);
    free(p);
    s->priv = NULL;
}

long dt_ps_applied(const struct dt_strategy *s)
{
    return s->ops == &dt_strategy_parameter_server && dt_ps(s) ? dt_ps(s)->applied_total : 0;
}

const struct dt_strategy_ops dt_strategy_parameter_server = {
    .name = "parameter-server",
    .setup = ps_setup,
    .pull = ps_pull,
    .begin = ps_begin,
    .grads_ready = ps_ready,
    .finish = ps_finish,
    .epoch_end = ps_epoch_end,
    .teardown = ps_teardown,
};
