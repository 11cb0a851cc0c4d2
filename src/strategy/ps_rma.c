/* ps_rma.c: the parameter server over one-sided MPI (see ps.h).
 *
 * Each server exposes three windows: its parameter shard, an inbox of one
 * slot per worker, and counters (pushed[W], applied[W], version). A worker
 * reads parameters with MPI_Get, pushes with MPI_Accumulate into its own
 * slot and then bumps its pushed counter; it reads the counters to wait as
 * the mode says. Workers hold one shared passive-target epoch on every
 * window for the whole run (MPI_Win_lock_all) and complete each operation
 * with MPI_Win_flush; servers poll their own memory, ordered against the
 * workers' RMA by MPI_Win_sync. No fences between ranks.
 *
 * Windows come from MPI_Win_allocate (with errors returned: rma.h), which
 * Debian's Open MPI serves with its shared-memory (sm) component inside a
 * node; across nodes over TCP it cannot, and the strategy falls back to
 * ps_msg.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "runtime/rma.h"
#include "strategy/ps.h"

struct rma {
    MPI_Win wparams, winbox, wctrl;
    long *ctrl; /* server: pushed[W], applied[W], version */
};

#define PS_PUSHED(w) (w)
#define PS_APPLIED(p, w) ((p)->nworkers + (w))
#define PS_VERSION(p) (2 * (p)->nworkers)

static struct rma *R(const struct dt_strategy *s) { return dt_ps(s)->trp; }

static long ctrl_get(struct dt_strategy *s, int server, int idx)
{
    long v;
    DT_MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, server, idx, 1, MPI_LONG, R(s)->wctrl));
    DT_MPI_CHECK(MPI_Win_flush(server, R(s)->wctrl));
    return v;
}

static int rma_open(struct dt_strategy *s, char *why, size_t len)
{
    struct ps *p = dt_ps(s);
    MPI_Comm world = s->coll->topo.world;
    struct rma *r = dt_xcalloc(1, sizeof *r);
    size_t mylen = p->server >= 0 ? p->len[p->server] : 0;
    size_t nctrl = p->server >= 0 ? 2 * (size_t)p->nworkers + 1 : 0;
    /* The first window tells whether the MPI can make them at all. */
    if (dt_rma_allocate((MPI_Aint)(mylen * sizeof(float)), sizeof(float), world, &p->params, &r->wparams, why,
                        len) != 0) {
        free(r);
        p->params = NULL;
        return 1;
    }
    DT_MPI_CHECK(MPI_Win_allocate((MPI_Aint)(mylen * (size_t)p->nworkers * sizeof(float)), sizeof(float),
                                  MPI_INFO_NULL, world, &p->inbox, &r->winbox));
    DT_MPI_CHECK(MPI_Win_allocate((MPI_Aint)(nctrl * sizeof(long)), sizeof(long), MPI_INFO_NULL, world, &r->ctrl,
                                  &r->wctrl));
    p->trp = r;
    if (p->server >= 0) {
        memset(p->inbox, 0, sizeof(float) * mylen * (size_t)p->nworkers);
        memset(r->ctrl, 0, sizeof(long) * nctrl);
        p->pushed = r->ctrl;
        p->applied = r->ctrl + p->nworkers;
        p->version = r->ctrl + 2 * p->nworkers;
    } else {
        DT_MPI_CHECK(MPI_Win_lock_all(0, r->wparams));
        DT_MPI_CHECK(MPI_Win_lock_all(0, r->winbox));
        DT_MPI_CHECK(MPI_Win_lock_all(0, r->wctrl));
    }
    return 0;
}

static void rma_pull(struct dt_strategy *s, long t)
{
    struct ps *p = dt_ps(s);
    for (int k = 0; k < p->nps; k++) {
        int spins = 0;
        if (p->mode == PS_SYNC) {
            while (ctrl_get(s, k, PS_VERSION(p)) < t) dt_ps_idle(&spins);
        } else if (p->mode == PS_SSP) {
            for (int w = 0; w < p->nworkers; w++)
                while (ctrl_get(s, k, PS_APPLIED(p, w)) < t - p->staleness) dt_ps_idle(&spins);
        }
        DT_MPI_CHECK(MPI_Get(s->model->params + p->off[k], (int)p->len[k], MPI_FLOAT, k, 0, (int)p->len[k],
                             MPI_FLOAT, R(s)->wparams));
        DT_MPI_CHECK(MPI_Win_flush(k, R(s)->wparams));
    }
}

static void rma_push(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    struct rma *r = R(s);
    const long one = 1;
    for (int k = 0; k < p->nps; k++) {
        /* My slot is free once my previous push has been applied. */
        int spins = 0;
        while (ctrl_get(s, k, PS_APPLIED(p, p->worker)) < p->pushes) dt_ps_idle(&spins);
        DT_MPI_CHECK(MPI_Accumulate(s->model->grads + p->off[k], (int)p->len[k], MPI_FLOAT, k,
                                    (MPI_Aint)((size_t)p->worker * p->len[k]), (int)p->len[k], MPI_FLOAT,
                                    MPI_SUM, r->winbox));
        DT_MPI_CHECK(MPI_Win_flush(k, r->winbox)); /* the gradient is there before the count says so */
        DT_MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, k, PS_PUSHED(p->worker), 1, MPI_LONG, MPI_SUM, r->wctrl));
        DT_MPI_CHECK(MPI_Win_flush(k, r->wctrl));
    }
}

static void rma_serve(struct dt_strategy *s, long target)
{
    struct ps *p = dt_ps(s);
    struct rma *r = R(s);
    /* A shared lock on my own windows only: local loads and stores, ordered
     * against the workers' RMA by MPI_Win_sync (other servers are not ours
     * to lock). */
    const int me = s->coll->topo.rank;
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, r->wctrl));
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, r->winbox));
    DT_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, me, MPI_MODE_NOCHECK, r->wparams));
    int spins = 0;
    for (;;) {
        int done = 1, progressed = 0;
        MPI_Win_sync(r->wctrl);
        MPI_Win_sync(r->winbox);
        if (p->mode == PS_SYNC) {
            int all = 1;
            for (int w = 0; w < p->nworkers; w++) all &= p->pushed[w] > *p->version;
            if (all && *p->version < target) {
                dt_ps_apply_round(s);
                for (int w = 0; w < p->nworkers; w++) p->applied[w] = *p->version + 1;
                MPI_Win_sync(r->wparams);
                MPI_Win_sync(r->winbox);
                (*p->version)++;
                MPI_Win_sync(r->wctrl);
                progressed = 1;
            }
            done = *p->version >= target;
        } else {
            for (int w = 0; w < p->nworkers; w++) {
                if (p->pushed[w] > p->applied[w]) { /* one push: one update */
                    dt_ps_apply_one(s, w);
                    MPI_Win_sync(r->wparams);
                    MPI_Win_sync(r->winbox);
                    p->applied[w]++;
                    MPI_Win_sync(r->wctrl);
                    progressed = 1;
                }
                done &= p->applied[w] >= target;
            }
        }
        if (done) break;
        if (progressed) {
            spins = 0;
            if (s->alive) s->alive(s->alive_arg);
        } else {
            dt_ps_idle(&spins);
        }
        /* Libraries that implement passive-target RMA in software (MPICH's
         * ch4 over UCX here) complete workers' gets and accumulates only
         * when the target calls into MPI: poke the progress engine. */
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->coll->topo.world, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Win_unlock(me, r->wparams);
    MPI_Win_unlock(me, r->winbox);
    MPI_Win_unlock(me, r->wctrl);
}

static void rma_close(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    struct rma *r = R(s);
    if (!r) return;
    if (p->worker >= 0) {
        MPI_Win_unlock_all(r->wparams);
        MPI_Win_unlock_all(r->winbox);
        MPI_Win_unlock_all(r->wctrl);
    }
    MPI_Win_free(&r->wparams);
    MPI_Win_free(&r->winbox);
    MPI_Win_free(&r->wctrl);
    free(r);
}

const struct ps_transport dt_ps_rma = {
    .name = "one-sided",
    .open = rma_open,
    .pull = rma_pull,
    .push = rma_push,
    .serve = rma_serve,
    .close = rma_close,
};
