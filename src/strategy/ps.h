/* ps.h: the parameter server's inside, shared by parameter_server.c (the
 * strategy: shards, modes), ps_apply.c (what a server applies) and its two
 * transports:
 *
 *   ps_rma.c  one-sided: workers get parameters and accumulate gradients
 *             into MPI windows on the servers, with no server involvement
 *             but polling (the design TF's ParameterServerStrategy suggests);
 *   ps_msg.c  two-sided: workers send pull requests and gradients, servers
 *             answer and apply in a receive loop. Works over any transport;
 *             the fallback where the MPI cannot make one-sided windows
 *             across nodes (Open MPI over TCP).
 *
 * Both keep the same counters with the same meaning, and apply through the
 * same two functions, so a sync-mode run gives the same bits over either. */
#ifndef DT_PS_H
#define DT_PS_H

#include <mpi.h>
#include <stddef.h>

#include "strategy/strategy.h"

enum dt_ps_mode { PS_ASYNC = 0, PS_SSP = 1, PS_SYNC = 2 };
enum dt_ps_transport { PS_TRANSPORT_AUTO = 0, PS_TRANSPORT_RMA = 1, PS_TRANSPORT_MSG = 2 };

struct ps;

struct ps_transport {
    const char *name;
    /* Collective over the world. Non-zero: this transport cannot run here
     * (every rank alike), why says so; nothing is left allocated. */
    int (*open)(struct dt_strategy *s, char *why, size_t len);
    /* Worker, before step t (0-based, counted over the run): wait as the
     * mode says, then copy every server's shard into the model. */
    void (*pull)(struct dt_strategy *s, long t);
    /* Worker: send this step's gradient (the model's block) to every server. */
    void (*push)(struct dt_strategy *s);
    /* Server: apply pushes until every worker's `target` pushes have been applied. */
    void (*serve)(struct dt_strategy *s, long target);
    /* Frees what open made (the server's shard, inbox and counters too). */
    void (*close)(struct dt_strategy *s);
};

extern const struct ps_transport dt_ps_rma, dt_ps_msg;

struct ps {
    int nps, nworkers, mode, staleness;
    int server;                 /* my server index, or -1 */
    int worker;                 /* my worker index, or -1 */
    size_t *off, *len;          /* [nps] shard of each server */
    int *counts, *displs;       /* MPI int counts for the final gather (world ranks) */
    const struct ps_transport *tr;
    void *trp;                  /* the transport's own state */
    /* Server (both transports keep these; ps_rma.c inside its window). */
    float *params;              /* [len] my shard */
    float *inbox;               /* [nworkers * len] gradients pushed, not yet applied */
    long *pushed, *applied;     /* [nworkers] per worker, over the run */
    long *version;              /* sync rounds applied */
    float *sum;                 /* sync: [len] */
    long applied_total;         /* updates applied (all workers) */
    /* Worker. */
    long pushes;                /* pushes per server so far this run */
    long step;                  /* steps started this run */
    long target;                /* steps every worker has run, over all epochs so far */
};

static inline struct ps *dt_ps(const struct dt_strategy *s) { return s->priv; }

/* Server: apply worker w's pushed gradient (async, ssp) and clear its slot. */
void dt_ps_apply_one(struct dt_strategy *s, int w);
/* Server, sync: every worker pushed; apply their sum (in worker order) once. */
void dt_ps_apply_round(struct dt_strategy *s);
/* Server: may a worker start step t (0-based) under the mode? */
int dt_ps_may_start(const struct ps *p, long t);
/* Spin a little, then sleep 20 us at a time (*spins counts the calls). */
void dt_ps_idle(int *spins);

#endif
