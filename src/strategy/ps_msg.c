/* ps_msg.c: the parameter server over two-sided MPI (see ps.h).
 *
 * A worker asks each server for the parameters of step t (a PULL message
 * holding t) and waits for its shard (PARAMS); it pushes a step's gradient
 * as one PUSH message per server. A server receives in a loop: it keeps a
 * worker's pull until the mode lets that step start (dt_ps_may_start), and
 * applies pushes as ps_rma.c's server does, with the same counters. Only
 * point-to-point messages on a communicator of its own, so it runs on any
 * transport an MPI has: the fallback where one-sided windows cannot be made.
 *
 * Flow: a worker pushes again only after its pull for the next step was
 * answered, which the server does only after it applied that worker's
 * earlier pushes (messages from one rank arrive in order), so a worker's
 * inbox slot is free whenever its next push arrives. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "strategy/ps.h"

enum { TAG_PULL = 1, TAG_PARAMS = 2, TAG_PUSH = 3 };

struct msg {
    MPI_Comm comm;
    long *pending;      /* server: [W] the step a worker waits to start, or -1 */
    long *counters;     /* server: pushed[W], applied[W], version */
    long *steps;        /* worker: [K] the step asked of each server */
    MPI_Request *reqs;  /* worker: [2K] */
    MPI_Status *stats;  /* worker: [2K] (MPICH's headers reject MPI_STATUSES_IGNORE under gcc 12) */
};

static struct msg *M(const struct dt_strategy *s) { return dt_ps(s)->trp; }

static int msg_open(struct dt_strategy *s, char *why, size_t len)
{
    (void)why;
    (void)len;
    struct ps *p = dt_ps(s);
    struct msg *m = dt_xcalloc(1, sizeof *m);
    DT_MPI_CHECK(MPI_Comm_dup(s->coll->topo.world, &m->comm));
    p->trp = m;
    if (p->server >= 0) {
        size_t mylen = p->len[p->server], n = mylen ? mylen : 1;
        p->params = dt_xcalloc(n, sizeof(float));
        p->inbox = dt_xcalloc(n * (size_t)p->nworkers, sizeof(float));
        m->counters = dt_xcalloc(2 * (size_t)p->nworkers + 1, sizeof(long));
        p->pushed = m->counters;
        p->applied = m->counters + p->nworkers;
        p->version = m->counters + 2 * p->nworkers;
        m->pending = dt_xmalloc(sizeof(long) * (size_t)p->nworkers);
        for (int w = 0; w < p->nworkers; w++) m->pending[w] = -1;
    } else {
        m->steps = dt_xcalloc((size_t)p->nps, sizeof(long));
        m->reqs = dt_xcalloc(2 * (size_t)p->nps, sizeof(MPI_Request));
        m->stats = dt_xcalloc(2 * (size_t)p->nps, sizeof(MPI_Status));
    }
    return 0;
}

/* Worker: until every request is done, without holding the core. */
static void wait_all(int n, MPI_Request *reqs, MPI_Status *stats)
{
    int spins = 0, done = 0;
    for (;;) {
        DT_MPI_CHECK(MPI_Testall(n, reqs, &done, stats));
        if (done) return;
        dt_ps_idle(&spins);
    }
}

static void msg_pull(struct dt_strategy *s, long t)
{
    struct ps *p = dt_ps(s);
    struct msg *m = M(s);
    for (int k = 0; k < p->nps; k++) {
        m->steps[k] = t;
        DT_MPI_CHECK(MPI_Irecv(s->model->params + p->off[k], (int)p->len[k], MPI_FLOAT, k, TAG_PARAMS, m->comm,
                               &m->reqs[p->nps + k]));
        DT_MPI_CHECK(MPI_Isend(&m->steps[k], 1, MPI_LONG, k, TAG_PULL, m->comm, &m->reqs[k]));
    }
    wait_all(2 * p->nps, m->reqs, m->stats);
}

static void msg_push(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    struct msg *m = M(s);
    for (int k = 0; k < p->nps; k++)
        DT_MPI_CHECK(MPI_Isend(s->model->grads + p->off[k], (int)p->len[k], MPI_FLOAT, k, TAG_PUSH, m->comm,
                               &m->reqs[k]));
    wait_all(p->nps, m->reqs, m->stats); /* the block is the next backward's */
}

/* Server: one message from worker w. */
static void receive(struct dt_strategy *s, const MPI_Status *st)
{
    struct ps *p = dt_ps(s);
    struct msg *m = M(s);
    int w = st->MPI_SOURCE - p->nps;
    size_t len = p->len[p->server];
    if (w < 0 || w >= p->nworkers) DT_DIE("parameter server: message from rank %d, not a worker", st->MPI_SOURCE);
    if (st->MPI_TAG == TAG_PULL) {
        DT_MPI_CHECK(MPI_Recv(&m->pending[w], 1, MPI_LONG, st->MPI_SOURCE, TAG_PULL, m->comm, MPI_STATUS_IGNORE));
        return;
    }
    if (st->MPI_TAG != TAG_PUSH) DT_DIE("parameter server: message with tag %d from rank %d", st->MPI_TAG, st->MPI_SOURCE);
    DT_MPI_CHECK(MPI_Recv(p->inbox + (size_t)w * len, (int)len, MPI_FLOAT, st->MPI_SOURCE, TAG_PUSH, m->comm,
                          MPI_STATUS_IGNORE));
    p->pushed[w]++;
    if (p->mode != PS_SYNC) { /* one push: one update */
        dt_ps_apply_one(s, w);
        p->applied[w]++;
        return;
    }
    for (int v = 0; v < p->nworkers; v++)
        if (p->pushed[v] <= *p->version) return;
    dt_ps_apply_round(s);
    for (int v = 0; v < p->nworkers; v++) p->applied[v] = *p->version + 1;
    (*p->version)++;
}

static void msg_serve(struct dt_strategy *s, long target)
{
    struct ps *p = dt_ps(s);
    struct msg *m = M(s);
    size_t len = p->len[p->server];
    int spins = 0;
    for (;;) {
        /* Pulls the mode now lets start get the current shard. */
        for (int w = 0; w < p->nworkers; w++)
            if (m->pending[w] >= 0 && dt_ps_may_start(p, m->pending[w])) {
                DT_MPI_CHECK(MPI_Send(p->params, (int)len, MPI_FLOAT, p->nps + w, TAG_PARAMS, m->comm));
                m->pending[w] = -1;
            }
        int done = 1;
        if (p->mode == PS_SYNC) done = *p->version >= target;
        else
            for (int w = 0; w < p->nworkers; w++) done &= p->applied[w] >= target;
        if (done) return;
        int flag;
        MPI_Status st;
        DT_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->comm, &flag, &st));
        if (!flag) {
            dt_ps_idle(&spins);
            continue;
        }
        spins = 0;
        receive(s, &st);
        if (s->alive) s->alive(s->alive_arg);
    }
}

static void msg_close(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    struct msg *m = M(s);
    if (!m) return;
    MPI_Comm_free(&m->comm);
    if (p->server >= 0) {
        free(p->params);
        free(p->inbox);
        free(m->counters);
        free(m->pending);
    }
    free(m->steps);
    free(m->reqs);
    free(m->stats);
    free(m);
}

const struct ps_transport dt_ps_msg = {
    .name = "two-sided",
    .open = msg_open,
    .pull = msg_pull,
    .push = msg_push,
    .serve = msg_serve,
    .close = msg_close,
};
