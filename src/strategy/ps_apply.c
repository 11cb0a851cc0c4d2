/* ps_apply.c: what a parameter server does with pushed gradients, and how
 * it waits for them: the functions both transports (ps_rma.c, ps_msg.c)
 * call, so a sync-mode run gives the same bits over either.
 *
 * Apart from parameter_server.c because that file picks the transport:
 * with these there, the strategy and its transports would depend on each
 * other. */
#include "config.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include "strategy/ps.h"

void dt_ps_idle(int *spins)
{
    /* An update is usually microseconds away; after that, do not take the
     * cycles of a computing rank that shares the core. */
    if ((*spins)++ < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

void dt_ps_apply_one(struct dt_strategy *s, int w)
{
    struct ps *p = dt_ps(s);
    size_t len = p->len[p->server];
    float *g = p->inbox + (size_t)w * len;
    dt_optim_step(&s->optim, p->params, g);
    memset(g, 0, sizeof(float) * len);
    p->applied_total++;
}

void dt_ps_apply_round(struct dt_strategy *s)
{
    struct ps *p = dt_ps(s);
    size_t len = p->len[p->server];
    memset(p->sum, 0, sizeof(float) * len);
    for (int w = 0; w < p->nworkers; w++) { /* in worker order: deterministic */
        float *g = p->inbox + (size_t)w * len;
        for (size_t i = 0; i < len; i++) p->sum[i] += g[i];
        memset(g, 0, sizeof(float) * len);
    }
    dt_strategy_clip(s, p->sum, len, MPI_COMM_NULL); /* --num-ps 1 (parameter_server.c): the whole gradient */
    dt_optim_step(&s->optim, p->params, p->sum);
    p->applied_total += p->nworkers;
}

int dt_ps_may_start(const struct ps *p, long t)
{
    if (p->mode == PS_SYNC) return *p->version >= t;
    if (p->mode == PS_SSP)
        for (int w = 0; w < p->nworkers; w++)
            if (p->applied[w] < t - p->staleness) return 0;
    return 1;
}
