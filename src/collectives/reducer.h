/* reducer.h: gradient buckets reduced while backward is still running.
 *
 * The flat gradient block is cut into buckets at the boundaries the caller
 * gives (layer boundaries), in reverse order: backward produces the end of
 * the block first. As backward finishes a layer it calls dt_reducer_ready()
 * with that layer's offset; every bucket that lies entirely past it is handed
 * to a communication thread, which all-reduces it while backward goes on.
 * dt_reducer_finish() waits for the rest, just before the optimizer.
 *
 * MPI thread level: only the communication thread calls MPI while a step's
 * buckets are in flight, and the caller makes MPI calls only between
 * dt_reducer_finish() and the next dt_reducer_begin(), so
 * MPI_THREAD_SERIALIZED is enough. With overlap off (or a lower thread
 * level) the buckets are reduced in the calling thread at finish. */
#ifndef DT_REDUCER_H
#define DT_REDUCER_H

#include <pthread.h>
#include <stddef.h>

#include "collectives/coll.h"
#include "collectives/powersgd.h"

struct dt_reducer {
    struct dt_coll *coll;
    float *buf;
    size_t count;
    int nbuckets;
    size_t *start;           /* [nbuckets+1]: bucket b is [start[b+1], start[b]) ... see reducer.c */
    int overlap;             /* communication thread running */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    size_t ready_from;       /* gradients in [ready_from, count) are final */
    int launched, finished;  /* buckets taken by the thread / completed this step */
    int quit;
    /* measurements, summed since the last dt_reducer_stats_reset */
    double comm_seconds;     /* inside all-reduce calls */
    double wait_seconds;     /* the caller blocked in dt_reducer_finish */
    long steps;
    int debug;               /* --debug-collectives: ranks compare every call first */
    long calls;              /* bucket all-reduces so far (for debug) */
    struct dt_powersgd *psgd; /* set after dt_reducer_init: buckets go through PowerSGD (powersgd.h) */
};

/* Cut [0, count) into buckets at the candidate bounds (any order), each at
 * least bucket_bytes (0: one bucket), last one first: bucket b is
 * [start[b+1], start[b]), start[0] = count. Returns the bucket count;
 * *start is allocated. Shared with the device all-reduce (nccl.c). */
int dt_buckets_cut(size_t count, const size_t *bounds, int nbounds, size_t bucket_bytes, size_t **start);

/* bounds[0..nbounds) are offsets where buckets may end (layer starts, any
 * order); buckets hold at least bucket_bytes each (0: one bucket). */
void dt_reducer_init(struct dt_reducer *r, struct dt_coll *coll, float *buf, size_t count,
                     const size_t *bounds, int nbounds, size_t bucket_bytes, int overlap);
void dt_reducer_free(struct dt_reducer *r);
void dt_reducer_begin(struct dt_reducer *r);
/* Gradients from offset to the end are final. */
void dt_reducer_ready(struct dt_reducer *r, size_t offset);
/* All buckets reduced (sums in buf). */
void dt_reducer_finish(struct dt_reducer *r);
void dt_reducer_stats_reset(struct dt_reducer *r);

#endif
