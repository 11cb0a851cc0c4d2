/* strategy.h: how local gradients become new parameters (tf.distribute's
 * strategies, expressed in MPI).
 *
 * A strategy is one file filling a const struct dt_strategy_ops; the trainer
 * calls s->ops->... and never switches on the strategy. It is the only layer
 * that joins the model (nn/) with communication (collectives/): it owns where
 * the parameter and gradient blocks live, the buckets, and the optimizer
 * call. Every synchronous strategy leaves the parameters bitwise identical on
 * all ranks after each step. */
#ifndef DT_STRATEGY_H
#define DT_STRATEGY_H

#include <stddef.h>

#include "collectives/coll.h"
#include "collectives/reducer.h"
#include "nn/model.h"
#include "optim/loss_scale.h"
#include "optim/optim.h"
#include "options.h"

enum { DT_STATS = 2 }; /* per-step statistics reduced with the gradients: loss sum, correct */

/* --clip-norm: the global L2 norms of the update gradients this rank saw
 * (before clipping), since the trainer last cleared them. */
struct dt_clip_stats {
    double last;        /* the latest update's */
    double norm_sum;    /* summed over the updates */
    long updates;       /* updates whose norm was taken */
    long clipped;       /* of them, those scaled down */
};

struct dt_strategy;
struct dt_nccl;

struct dt_strategy_ops {
    const char *name;
    /* Collective. After the model exists and rank 0's parameters have been
     * broadcast: check the layout, place the blocks, create the optimizer. */
    int (*setup)(struct dt_strategy *s, dt_status *st);
    /* Optional: before a step's forward (a parameter-server worker reads the
     * current parameters here, after waiting as its mode says). */
    void (*pull)(struct dt_strategy *s);
    /* A step starts (before backward); stats[DT_STATS] are this rank's. */
    void (*begin)(struct dt_strategy *s, const float *stats);
    /* Backward has finished every layer from offset to the end of the block. */
    void (*grads_ready)(struct dt_strategy *s, size_t offset);
    /* Backward is done: reduce, update the parameters; stats receives the
     * sums over all replicas. */
    void (*finish)(struct dt_strategy *s, float *stats);
    /* Optional, collective: an epoch of `steps` steps per replica is over
     * (servers apply what is left; every rank gets the parameters). A rank
     * that holds no replica (replica < 0: a parameter server's server) takes
     * no steps of its own: this is where it works, serving the replicas'. */
    void (*epoch_end)(struct dt_strategy *s, long steps);
    void (*teardown)(struct dt_strategy *s);
    /* Optional, collective (a strategy that keeps no whole parameter block:
     * fsdp): the whole fp32 block of parameters (grads: of the last update's
     * gradients) into host on rank root, or every rank when root < 0. */
    void (*gather_block)(struct dt_strategy *s, int grads, float *host, int root);
    /* Optional (the same strategies): host holds the whole block on every
     * rank; the parameters become it. */
    void (*load_block)(struct dt_strategy *s, const float *host);
};

struct dt_strategy {
    const struct dt_strategy_ops *ops;
    const struct dt_config *cfg;
    struct dt_model *model;
    struct dt_coll *coll;
    const struct dt_backend *be;
    struct dt_optim_config optim_cfg;
    struct dt_optim optim;       /* over the whole block, or this rank's shard */
    size_t shard_off, shard_len; /* the part of the block this rank's optimizer owns */
    struct dt_reducer reducer;   /* all-reduce strategies */
    struct dt_powersgd *psgd;    /* --grad-compression powersgd:R (attached to reducer.psgd); NULL: off */
    int cuda;                    /* the model is on the GPU: buckets go to nccl */
    struct dt_nccl *nccl;        /* the device all-reduce (collectives/nccl.h) */
    struct dt_loss_scale loss_scale; /* --loss-scale: applied by the all-reduce strategies */
    int overlap;                 /* buckets reduced during backward */
    void *priv;                  /* strategy-private state */
    float stats[DT_STATS];
    int replica, nreplicas;      /* my index among the replicas (-1: server only), their count */
    int lockstep;                /* the replicas step together: every rank joins each step's collective
                                  * (0: a parameter server's, whose servers join none) */
    int local_stats;             /* finish returns this replica's stats only (summed per epoch) */
    int scale_local;             /* the loss is this batch's mean, not the global batch's share */
    int nan_policy;              /* --nan-policy: DT_NAN_ABORT or DT_NAN_SKIP */
    int nonfinite;               /* the last step's reduced gradient held a NaN or infinity */
    long nan_skipped;            /* steps skipped for that (--nan-policy skip), in total */
    struct dt_clip_stats clip;   /* --clip-norm's norms (dt_strategy_clip) */
    /* Optional: a parameter server calls it after each update it applies, as
     * it may serve for a whole epoch inside one wait (the trainer's stall
     * watchdog then counts its timeout from there). */
    void (*alive)(void *arg);
    void *alive_arg;
    /* Optional, with alive_arg: a wait for other ranks inside forward or
     * backward (fsdp's gathers and reduce-scatters) begins and ends, so the
     * watchdog ends a step in which a rank was lost there too. */
    void (*wait_begin)(void *arg, const char *what);
    void (*wait_end)(void *arg);
};

enum dt_nan_policy { DT_NAN_ABORT = 0, DT_NAN_SKIP = 1 };

/* After a step's reduction, without loss scaling: whether the n values of g
 * (the reduced gradient, the same bits on every rank that checks it) are
 * finite; records a non-finite step in s->nonfinite (and s->nan_skipped
 * under --nan-policy skip). Returns 1 when the optimizer may apply it. */
int dt_strategy_gradient_ok(struct dt_strategy *s, const float *g, size_t n);

/* strategy/optimizer.c. The strategy's optimizer over [off, off + len) of the flat block, with
 * AdamW's decay ranges there: the layers' `decayed` parts, or the whole
 * block under --decay-all. Every strategy makes its optimizer this way. */
void dt_strategy_create_optim(struct dt_strategy *s, size_t off, size_t len);
/* --clip-norm (a no-op without it): g holds n floats of the update's
 * gradient, reduced, unscaled and finite; its squares summed over comm
 * (MPI_COMM_NULL: g is the whole gradient), the ranks that together hold one
 * copy of it, give the global norm; above the limit, g is scaled by
 * torch.nn.utils.clip_grad_norm_'s factor. Collective over comm; counted in
 * s->clip. */
void dt_strategy_clip(struct dt_strategy *s, float *g, size_t n, MPI_Comm comm);

extern const struct dt_strategy_ops dt_strategy_mirrored, dt_strategy_multi_worker, dt_strategy_sharded,
    dt_strategy_central_storage, dt_strategy_parameter_server, dt_strategy_fsdp, dt_strategy_pipeline;
/* fsdp: the most bytes of gathered parameters it ever held, and (into
 * two_largest) its two buffers' bytes, the bound it keeps to: the largest
 * even-numbered bucket and the largest odd one (bucket k uses buffer k % 2). */
size_t dt_fsdp_held_peak(const struct dt_strategy *s, size_t *two_largest);
/* fsdp: the segment [*off, *off + *len) of an n-parameter block that rank
 * keeps: one of all ranks', or with node (--fsdp-shard node) one of its
 * node's ranks'. */
void dt_fsdp_segment(int node, const struct dt_topo *t, size_t n, int rank, size_t *off, size_t *len);
/* fsdp: how many buckets the layers were grouped into. */
int dt_fsdp_buckets(const struct dt_strategy *s);
/* Collective where the strategy has gather_block (fsdp), local otherwise:
 * the whole fp32 parameter block (grads: the gradient block) into host, on
 * rank root or on every rank when root < 0 (host may be NULL elsewhere). A
 * gradient block that is nowhere (grads and no such op) leaves host as it is. */
void dt_strategy_get_block(struct dt_strategy *s, int grads, float *host, int root);
/* Whether the parameters live in no whole block on any rank (fsdp). */
int dt_strategy_shards_params(const struct dt_strategy *s);
/* Updates the parameter server applied on this rank (0 elsewhere). */
long dt_ps_applied(const struct dt_strategy *s);
/* The parameter server's transport ("one-sided", "two-sided"), or "". */
const char *dt_ps_transport_name(const struct dt_strategy *s);

/* Resolve cfg->strategy ("auto" by layout) and run its setup. Refusals
 * (tpu, mirrored across nodes, ...) are usage errors agreed on by all ranks. */
int dt_strategy_create(struct dt_strategy *s, const struct dt_config *cfg, struct dt_model *model,
                       struct dt_coll *coll, dt_status *st);
void dt_strategy_free(struct dt_strategy *s);

/* Shared by the all-reduce strategies (mirrored.c, multi_worker.c). */
int dt_allreduce_strategy_setup(struct dt_strategy *s, dt_status *st);
void dt_allreduce_strategy_begin(struct dt_strategy *s, const float *stats);
void dt_allreduce_strategy_ready(struct dt_strategy *s, size_t offset);
void dt_allreduce_strategy_finish(struct dt_strategy *s, float *stats);
void dt_allreduce_strategy_teardown(struct dt_strategy *s);
/* Collective, between steps (--autotune): the CPU reducer made again with
 * this algorithm, bucket size and overlap (a thread level that allows it is
 * the caller's to check); all ranks must pass the same. */
void dt_allreduce_strategy_configure(struct dt_strategy *s, const struct dt_allreduce_algo *algo,
                                     size_t bucket_bytes, int overlap);
/* Bytes of optimizer state this rank holds. */
size_t dt_strategy_optimizer_bytes(const struct dt_strategy *s);

#endif
