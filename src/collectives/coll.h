/* coll.h: dtrain's all-reduce: one interface, one file per algorithm.
 *
 * Every algorithm fills a const struct dt_allreduce_algo (name, whether it
 * can run on this layout, run); the harness and the trainer call
 * algo->run(...) and never switch on the algorithm, as nccl-tests does.
 * All of them sum float32 buffers in place or out of place, for any element
 * count (0 included) and any rank count, and leave bitwise-identical results
 * on every rank (replicas would drift otherwise).
 *
 * A dt_coll holds what the algorithms share: the topology, scratch buffers,
 * and a node-shared MPI-3 window. Memory from dt_coll_alloc() lives in that
 * window, so the hierarchical algorithm reads peers' data in place instead of
 * copying it in first (the trainer keeps its gradient block there). Knows
 * nothing about layers or models. */
#ifndef DT_COLL_H
#define DT_COLL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/topology.h"
#include "runtime/status.h"

enum dt_compress { DT_COMPRESS_NONE = 0, DT_COMPRESS_FP16 = 1, DT_COMPRESS_BF16 = 2 };

#define DT_RING_MAX_DEPTH 16

struct dt_coll_config {
    const char *algorithm;     /* "auto" (default), "mpi", "ring", "hier" */
    int ranks_per_node;        /* 0 = detect */
    int compress;              /* enum dt_compress */
    int compress_cross_only;   /* hier: compress only the cross-node hop */
    /* The ring's pieces: chunk_bytes each, ring_depth in flight (1 to
     * DT_RING_MAX_DEPTH); 0 = by layout. Inside one host (shared memory, or an
     * emulated layout) 256 KiB x 2; across real nodes 63 KiB x 8: Open MPI's
     * tcp BTL sends a message above its 64 KiB eager limit only after a
     * rendezvous handshake whose reply queues behind the peer's own data in
     * the same TCP connection, and a ring sends both ways at once, so large
     * pieces got half a shaped link (doc/scaling.md). */
    size_t chunk_bytes;
    int ring_depth;
    const char *table;         /* auto's table file; NULL = built in */
};

struct dt_coll;

struct dt_allreduce_algo {
    const char *name;
    /* 0 if it cannot run here; why says so in one line. */
    int (*usable)(const struct dt_coll *c, char *why, size_t len);
    void (*run)(struct dt_coll *c, const float *send, float *recv, size_t count);
};

extern const struct dt_allreduce_algo dt_allreduce_mpi, dt_allreduce_ring, dt_allreduce_hier,
    dt_allreduce_auto;

/* A size class auto timed at start-up: messages of [2^cls, 2^(cls+1)) bytes. */
struct dt_auto_tuned {
    int cls;
    const struct dt_allreduce_algo *pick;
    double mpi_us, pick_us;     /* us per call (slowest rank): mpi's median, and the pick's as mpi's times
                                   the median of their round-by-round ratios; mpi_us 0: not a candidate */
};

/* One row of auto's table: at this layout and from this size on, use algo. */
struct dt_auto_rule {
    int nodes, ranks_per_node;  /* 0 = any */
    size_t min_bytes;
    char algo[16];
    const struct dt_allreduce_algo *pick; /* algo, or ring where algo cannot run here */
    int applies;                /* the rule's layout is this job's */
};

/* A node-shared MPI-3 window: one region per local rank, all mapped here. */
struct dt_shm {
    MPI_Win win;
    size_t count;               /* floats per local rank */
    float **peer;               /* [local_size] base of each local rank's region */
    int node_shared;            /* one block in local rank 0's region (not per rank) */
};

struct dt_coll {
    struct dt_topo topo;
    struct dt_coll_config cfg;
    const struct dt_allreduce_algo *algo;  /* the configured one */
    struct dt_shm staging;      /* hier copies other buffers through this */
    struct dt_shm **allocs;     /* dt_coll_alloc's windows (stable pointers) */
    int nallocs;
    /* scratch */
    float *tmp;
    size_t tmp_count;
    uint16_t *packed[2];
    size_t packed_count;
    /* auto */
    struct dt_auto_rule *rules;
    int nrules;
    int table_builtin;          /* rules from the built-in table (no file given) */
    struct dt_auto_tuned *tuned; /* choices timed at start-up (dt_auto_tune) */
    int ntuned;
    int tuned_preset;           /* the choices came from dt_auto_preset (a checkpoint) */
    /* The ring's waits sleep between tests instead of spinning: set by
     * the reducer's communication thread while it reduces, so a rank's one
     * core goes to backward, not to polling the network. */
    int polite;
};

/* Collective over comm. Checks the configuration against the layout (an
 * algorithm that cannot run here is a usage error naming why). */
int dt_coll_init(struct dt_coll *c, MPI_Comm comm, const struct dt_coll_config *cfg, dt_status *st);
void dt_coll_free(struct dt_coll *c);
/* Collective over the node: count floats inside the shared window (the
 * same count on every rank). Valid until dt_coll_free. */
float *dt_coll_alloc(struct dt_coll *c, size_t count);
/* Collective over the node: ONE block of count floats for the whole node
 * (held in local rank 0's region), mapped by every local rank. */
const struct dt_shm *dt_coll_alloc_node_shared(struct dt_coll *c, size_t count);
/* Sum over all ranks with the configured algorithm. */
void dt_allreduce(struct dt_coll *c, const float *send, float *recv, size_t count);
const struct dt_allreduce_algo *dt_allreduce_find(const char *name);

/* ---- shm.c: the node-shared windows ---- */
/* Collective over the node: a window of count floats per local rank, of
 * which mine_count are in my region (count, or 0 off local rank 0 for a
 * node-shared block). Returns MPI's error code, 0 when it worked (errors
 * are returned while the window is made: runtime/rma.h). */
int dt_shm_create(struct dt_coll *c, struct dt_shm *s, size_t count, size_t mine_count);
void dt_shm_free(struct dt_shm *s);
/* The dt_coll_alloc window whose region of mine holds [p, p+count), or NULL. */
const struct dt_shm *dt_coll_find_shm(const struct dt_coll *c, const float *p, size_t count);
/* Make stores to the window visible to the node, and wait for everyone. */
void dt_shm_fence(struct dt_coll *c, const struct dt_shm *s);

/* ---- ring.c ---- */
/* Ring all-reduce over any communicator (used by ring and by hier's
 * cross-node hop). compress: 16-bit transport, fp32 sums; cross_only (comm
 * must then be the world): only hops between nodes are compressed. */
void dt_ring_allreduce(struct dt_coll *c, MPI_Comm comm, float *buf, size_t count, int compress,
                       int cross_only);
/* Segment i of n over count elements: near-equal, contiguous. */
static inline void dt_segment(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t q = count / (size_t)n, r = count % (size_t)n, ui = (size_t)i;
    *off = ui * q + (ui < r ? ui : r);
    *len = q + (ui < r);
}

/* auto.c: read cfg.table (or the built-in table) into c->rules. */
int dt_auto_load(struct dt_coll *c, dt_status *st);
void dt_auto_resolve(struct dt_coll *c);
/* The algorithm auto picks for count floats on this layout. */
const struct dt_allreduce_algo *dt_auto_choose(const struct dt_coll *c, size_t count);
/* Collective. Where the job spans real nodes (detected, not --ranks-per-node)
 * and auto uses its built-in table, which was measured on one node: time the
 * usable algorithms at the size class of each of the n counts, on these
 * buffers (send == recv: in place; recv's contents are kept), and use the
 * fastest there from now on: mpi, unless another beats it by 5% in the
 * median of their round-by-round ratios and in most rounds. Returns the
 * number of size classes timed (0: nothing to do here). Environment:
 * DTRAIN_ALLREDUCE_TUNE=0 never times, =1 times on emulated layouts too. */
int dt_auto_tune(struct dt_coll *c, const float *send, float *recv, const size_t *counts, int n);
/* What auto does here, in words ("table", or the timed choices). */
void dt_auto_describe(const struct dt_coll *c, char *buf, size_t len);
/* The timed choices as one line of text ("NODES RANKS_PER_NODE CLASS:ALGO
 * ..."), for a checkpoint; 0 when nothing was timed. A run resumed on the
 * same layout gives them back to dt_auto_preset before its buckets exist,
 * and dt_auto_tune then uses them instead of timing again: the same
 * algorithms, so the same bits as a run never interrupted. Returns 1 when
 * the text applies here (same layout, where timing would happen). */
int dt_auto_encode(const struct dt_coll *c, char *buf, size_t len);
int dt_auto_preset(struct dt_coll *c, const char *text);

#endif
