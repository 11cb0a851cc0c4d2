/* parameter_server.c: TF ParameterServerStrategy on MPI one-sided RMA.
 *
 * Ranks 0..K-1 (--num-ps K, default 1) are servers and only servers: each
 * holds a contiguous shard of the parameters and its optimizer state, in RMA
 * windows. The other W ranks are the workers (the replicas): each step a
 * worker reads the current parameters with MPI_Get, computes its gradient,
 * and pushes each shard with MPI_Accumulate into its own slot of the
 * server's inbox, then bumps its push counter; servers apply pushed gradients
 * as they arrive and count what they applied. All epochs under passive-target
 * locks (MPI_Win_lock / lock_all), no fences between ranks.
 *
 * Modes (--ps-mode):
 *   async: a worker never waits for others; each push is one update (the
 *          worker's own batch mean), applied in arrival order;
 *   ssp:   like async, but a worker starts step t only when every worker's
 *          step t-S (--staleness S) has been applied;
 *   sync:  the server waits for all W pushes of a step and applies their
 *          sum (each scaled by 1/global batch) once: synchronous SGD.
 * A worker reuses its inbox slot only after the server applied the previous
 * push, so every pushed gradient is applied exactly once (counted).
 *
 * Windows come from MPI_Win_allocate, which Debian's Open MPI serves with
 * its shared-memory (sm) or rdma one-sided components; MPI_Win_create would
 * need osc pt2pt, which that configuration disables. */
#include "config.h"

#include <math.h>

#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "strategy/strategy.h"

enum { PS_ASYNC = 0, PS_SSP = 1, PS_SYNC = 2 };

struct ps {
    int nps, nworkers, mode, staleness;
    int server;                 /* my server index, or -1 */
    int worker;                 /* my worker index, or -1 */
    size_t *off, *len;          /* [nps] shard of each server */
    int *counts, *displs;       /* MPI int counts for the final gather (world ranks) */
    MPI_Win wparams, winbox, wctrl;
    float *params, *inbox;      /* server: [len], [nworkers*len] */
    long *ctrl;                 /* server: pushed[W], applied[W], version */
    long pushes;                /* worker: pushes per server so far this run */
    long step;                  /* worker: steps started this run */
    long applied_total;         /* server: updates applied (all workers) */
    long target;                /* steps every worker has run, over all epochs so far */
    float *sum;                 /* server, sync mode: [len] */
};

static struct ps *PS(const struct dt_strategy *s) { return s->priv; }

/* Waiting: spin a little (an update is usually microseconds away), then
 * sleep 20 us at a time, so a server or a waiting worker sharing a core
 * with a computing one does not take its cycles. */
static void idle(int *spins)
{
    if ((*spins)++ < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

#define PS_PUSHED(w) (w)
#define PS_APPLIED(p, w) ((p)->nworkers + (w))
#define PS_VERSION(p) (2 * (p)->nworkers)

/* Workers hold one shared passive-target epoch on every window for the whole
 * run (MPI_Win_lock_all) and complete each operation with MPI_Win_flush. */
static long ctrl_get(struct ps *p, int server, int idx)
{
    long v;
    DT_MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, server, idx, 1, MPI_LONG, p->wctrl));
    DT_MPI_CHECK(MPI_Win_flush(server, p->wctrl));
    return v;
}

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
#ifdef MPICH_VERSION
    /* Seen with Debian's MPICH 4.0.2 (ch4:ucx): with two or more servers a
     * worker's pushes to the second server are never seen there, and the job
     * hangs; one server works. Refused rather than hanging. */
    if (K > 1)
        return dt_fail(st, DT_EUSAGE, "--num-ps %d: with MPICH, more than one parameter server hangs in "
                       "passive-target RMA (seen with MPICH 4.0.2, ch4:ucx); use --num-ps 1, or Open MPI", K);
#endif
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
    size_t mylen = p->server >= 0 ? p->len[p->server] : 0;
    size_t nctrl = p->server >= 0 ? 2 * (size_t)p->nworkers + 1 : 0;
    DT_MPI_CHECK(MPI_Win_allocate((MPI_Aint)(mylen * sizeof(float)), sizeof(float), MPI_INFO_NULL, t->world,
                                  &p->params, &p->wparams));
    DT_MPI_CHECK(MPI_Win_allocate((MPI_Aint)(mylen * (size_t)p->nworkers * sizeof(float)), sizeof(float),
                                  MPI_INFO_NULL, t->world, &p->inbox, &p->winbox));
    DT_MPI_CHECK(MPI_Win_allocate((MPI_Aint)(nctrl * sizeof(long)), sizeof(long), MPI_INFO_NULL, t->world,
                                  &p->ctrl, &p->wctrl));
    if (p->server >= 0) {
        /* My shard of the broadcast parameters, an empty inbox, zero counters. */
        memcpy(p->params, m->params + p->off[p->server], sizeof(float) * mylen);
        memset(p->inbox, 0, sizeof(float) * mylen * (size_t)p->nworkers);
        memset(p->ctrl, 0, sizeof(long) * nctrl);
        dt_optim_create(&s->optim, s->be, &s->optim_cfg, mylen);
        if (p->mode == PS_SYNC) p->sum = dt_xcalloc(mylen ? mylen : 1, sizeof(float));
        s->shard_off = p->off[p->server];
        s->shard_len = mylen;
    }
    s->replica = p->worker;
    s->nreplicas = p->nworkers;
    s->local_stats = 1;
    s->scale_local = p->mode != PS_SYNC;
    DT_MPI_CHECK(MPI_Barrier(t->world)); /* windows initialised before anyone reads them */
    if (p->worker >= 0) {
        DT_MPI_CHECK(MPI_Win_lock_all(0, p->wparams));
        DT_MPI_CHECK(MPI_Win_lock_all(0, p->winbox));
        DT_MPI_CHECK(MPI_Win_lock_all(0, p->wctrl));
    }
    return DT_OK;
}

/* ---- worker --------------------------------------------------------------- */

static void ps_begin(struct dt_strategy *s, const float *stats)
{
    memcpy(s->stats, stats, sizeof s->stats);
}

/* Before a step's forward: wait as the mode says, then read the parameters. */
static void ps_pull(struct dt_strategy *s)
{
    struct ps *p = PS(s);
    long t = p->step++;
    for (int k = 0; k < p->nps; k++) {
        int spins = 0;
        if (p->mode == PS_SYNC) {
            while (ctrl_get(p, k, PS_VERSION(p)) < t) idle(&spins);
        } else if (p->mode == PS_SSP) {
            for (int w = 0; w < p->nworkers; w++)
                while (ctrl_get(p, k, PS_APPLIED(p, w)) < t - p->staleness) idle(&spins);
        }
        DT_MPI_CHECK(MPI_Get(s->model->params + p->off[k], (int)p->len[k], MPI_FLOAT, k, 0, (int)p->len[k],
                             MPI_FLOAT, p->wparams));
        DT_MPI_CHECK(MPI_Win_flush(k, p->wparams));
    }
}

static void ps_ready(struct dt_strategy *s, size_t offset) { (void)s; (void)offset; }

static void ps_finish(struct dt_strategy *s, float *stats)
{
    struct ps *p = PS(s);
    const long one = 1;
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
    for (int k = 0; k < p->nps; k++) {
        /* My slot is free once my previous push has been applied. */
        int spins = 0;
        while (ctrl_get(p, k, PS_APPLIED(p, p->worker)) < p->pushes) idle(&spins);
        DT_MPI_CHECK(MPI_Accumulate(s->model->grads + p->off[k], (int)p->len[k], MPI_FLOAT, k,
                                    (MPI_Aint)((size_t)p->worker * p->len[k]), (int)p->len[k], MPI_FLOAT,
                                    MPI_SUM, p->winbox));
        DT_MPI_CHECK(MPI_Win_flush(k, p->winbox)); /* the gradient is there before the count says so */
        DT_MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, k, PS_PUSHED(p->worker), 1, MPI_LONG, MPI_SUM, p->wctrl));
        DT_MPI_CHECK(MPI_Win_flush(k, p->wctrl));
    }
    p->pushes++;
    memcpy(stats, s->stats, sizeof s->stats); /* this worker's own; summed at the epoch's end */
}

/* ---- server ----------------------------------------------------------------- */

/* Apply pushes until every worker's `target` pushes have been applied. */
static void ps_serve(struct dt_strategy *s, long target)
{
    struct ps *p = PS(s);
    size_t len = p->len[p->server];
    long *pushed = p->ctrl, *applied = p->ctrl + p->nworkers, *version = p->ctrl + 2 * p->nworkers;
    /* A shared lock on my own windows only: local loads and stores, ordered
     * against the workers' RMA by MPI_Win_sync (other servers are not ours
     * to lock). */
    const int me = s->coll->topo.rank;
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, p->wctrl));
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, p->winbox));
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, p->wparams));
    int spins = 0;
    for (;;) {
        int done = 1, progressed = 0;
        MPI_Win_sync(p->wctrl);
        MPI_Win_sync(p->winbox);
        if (p->mode == PS_SYNC) {
            int all = 1;
            for (int w = 0; w < p->nworkers; w++) all &= pushed[w] > *version;
            if (all && *version < target) {
                memset(p->sum, 0, sizeof(float) * len);
                for (int w = 0; w < p->nworkers; w++) { /* in worker order: deterministic */
                    float *g = p->inbox + (size_t)w * len;
                    for (size_t i = 0; i < len; i++) p->sum[i] += g[i];
                    memset(g, 0, sizeof(float) * len);
                }
                dt_optim_step(&s->optim, p->params, p->sum);
                p->applied_total += p->nworkers;
                for (int w = 0; w < p->nworkers; w++) applied[w] = *version + 1;
                MPI_Win_sync(p->wparams);
                MPI_Win_sync(p->winbox);
                (*version)++;
                MPI_Win_sync(p->wctrl);
                progressed = 1;
            }
            done = *version >= target;
        } else {
            for (int w = 0; w < p->nworkers; w++) {
                if (pushed[w] > applied[w]) { /* one push: one update */
                    float *g = p->inbox + (size_t)w * len;
                    dt_optim_step(&s->optim, p->params, g);
                    memset(g, 0, sizeof(float) * len);
                    p->applied_total++;
                    MPI_Win_sync(p->wparams);
                    MPI_Win_sync(p->winbox);
                    applied[w]++;
                    MPI_Win_sync(p->wctrl);
                    progressed = 1;
                }
                done &= applied[w] >= target;
            }
        }
        if (done) break;
        if (progressed) spins = 0;
        else idle(&spins);
        /* Libraries that implement passive-target RMA in software (MPICH's
         * ch4 over UCX here) complete workers' gets and accumulates only
         * when the target calls into MPI: poke the progress engine. */
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->coll->topo.world, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Win_unlock(me, p->wparams);
    MPI_Win_unlock(me, p->winbox);
    MPI_Win_unlock(me, p->wctrl);
}

/* Collective at the end of an epoch: servers finish applying; everyone gets
 * the current parameters (evaluation, checkpoints, the next epoch's start). */
static void ps_epoch_end(struct dt_strategy *s, long steps)
{
    struct ps *p = PS(s);
    const struct dt_topo *t = &s->coll->topo;
    p->target += steps; /* counters are cumulative over the run */
    if (p->server >= 0) {
        ps_serve(s, p->target);
        memcpy(s->model->params + p->off[p->server], p->params, sizeof(float) * p->len[p->server]);
    }
    DT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s->model->params, p->counts, p->displs,
                                MPI_FLOAT, t->world));
}

static void ps_teardown(struct dt_strategy *s)
{
    struct ps *p = PS(s);
    if (!p) return;
    if (p->worker >= 0) {
        MPI_Win_unlock_all(p->wparams);
        MPI_Win_unlock_all(p->winbox);
        MPI_Win_unlock_all(p->wctrl);
    }
    MPI_Win_free(&p->wparams);
    MPI_Win_free(&p->winbox);
    MPI_Win_free(&p->wctrl);
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
    return s->ops == &dt_strategy_parameter_server && PS(s) ? PS(s)->applied_total : 0;
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
