/* reducer.c: bucketed, overlapped gradient all-reduce (see reducer.h).
 *
 * Buckets are numbered in the order backward completes them: bucket 0 is
 * [start[1], start[0]) = the end of the block, bucket b is
 * [start[b+1], start[b]). The communication thread takes buckets strictly in
 * that order, so all ranks issue the same collectives in the same order. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "collectives/reducer.h"
#include "metrics/tl_span.h"

static int cmp_desc(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x < y) - (x > y);
}

/* --debug-collectives: before each bucket, all ranks compare which call
 * this is, which bucket and its extent (a max/min all-reduce); a mismatch
 * ends the job with rank 0 naming what differs. */
static void check_call(struct dt_reducer *r, int b)
{
    long mine[4] = {r->calls, b, (long)r->start[b + 1], (long)r->start[b]}, both[8];
    for (int k = 0; k < 4; k++) {
        both[k] = mine[k];
        both[4 + k] = -mine[k];
    }
    MPI_Comm comm = r->coll->topo.world;
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, both, 8, MPI_LONG, MPI_MAX, comm));
    int same = 1;
    for (int k = 0; k < 4; k++) same &= both[k] == -both[4 + k];
    r->calls++;
    if (same) return;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    long *all = dt_xmalloc(sizeof(long) * 4 * (size_t)size);
    DT_MPI_CHECK(MPI_Allgather(mine, 4, MPI_LONG, all, 4, MPI_LONG, comm));
    if (rank == 0) {
        fprintf(stderr, "dtrain: error: --debug-collectives: the ranks disagree on a gradient all-reduce:");
        for (int q = 0; q < size; q++)
            fprintf(stderr, "%s rank %d: call %ld, bucket %ld, floats [%ld, %ld)", q ? ";" : "", q, all[4 * q],
                    all[4 * q + 1], all[4 * q + 2], all[4 * q + 3]);
        fprintf(stderr, "\n");
        fflush(stderr);
    }
    free(all);
    MPI_Abort(MPI_COMM_WORLD, 1); /* DT_ERUNTIME */
}

static void reduce_bucket(struct dt_reducer *r, int b)
{
    size_t lo = r->start[b + 1], hi = r->start[b];
    if (r->debug) check_call(r, b);
    DT_TL_BEGIN(tl0);
    double t0 = MPI_Wtime();
    r->coll->polite = r->overlap; /* in the communication thread: leave the core to backward */
    if (r->psgd) dt_powersgd_reduce(r->psgd, r->buf, lo, hi);
    else dt_allreduce(r->coll, r->buf + lo, r->buf + lo, hi - lo);
    r->coll->polite = 0;
    r->comm_seconds += MPI_Wtime() - t0;
    DT_TL_ENDF(tl0, DT_TL_COMM, "all-reduce", "bucket %d, %zu floats", b, hi - lo);
}

static void *comm_thread(void *arg)
{
    struct dt_reducer *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->quit && !(r->launched < r->nbuckets && r->ready_from <= r->start[r->launched + 1]))
            pthread_cond_wait(&r->wake, &r->lock);
        if (r->quit) break;
        int b = r->launched++;
        pthread_mutex_unlock(&r->lock);
        reduce_bucket(r, b);
        pthread_mutex_lock(&r->lock);
        r->finished++;
        if (r->finished == r->nbuckets) pthread_cond_signal(&r->idle);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int dt_buckets_cut(size_t count, const size_t *bounds, int nbounds, size_t bucket_bytes, size_t **start_out)
{
    /* Candidate ends, from the end of the block down to 0. */
    size_t *cand = dt_xmalloc(sizeof(size_t) * (size_t)(nbounds + 2));
    int nc = 0;
    cand[nc++] = count;
    for (int i = 0; i < nbounds; i++)
        if (bounds[i] > 0 && bounds[i] < count) cand[nc++] = bounds[i];
    cand[nc++] = 0;
    qsort(cand, (size_t)nc, sizeof *cand, cmp_desc);
    size_t *start = dt_xmalloc(sizeof(size_t) * (size_t)(nc + 1));
    start[0] = count;
    int n = 0;
    for (int i = 1; i < nc; i++) {
        size_t bytes = (start[n] - cand[i]) * sizeof(float);
        /* Close a bucket once it is big enough; the last one takes the rest. */
        if (cand[i] == 0 || (bucket_bytes > 0 && bytes >= bucket_bytes)) {
            if (cand[i] == start[n]) continue;
            start[++n] = cand[i];
        }
    }
    free(cand);
    *start_out = start;
    return n;
}

void dt_reducer_init(struct dt_reducer *r, struct dt_coll *coll, float *buf, size_t count,
                     const size_t *bounds, int nbounds, size_t bucket_bytes, int overlap)
{
    memset(r, 0, sizeof *r);
    r->coll = coll;
    r->buf = buf;
    r->count = count;
    r->nbuckets = dt_buckets_cut(count, bounds, nbounds, bucket_bytes, &r->start);
    /* Alone, a sum is the identity: no thread, no calls. */
    if (coll->topo.size == 1) r->nbuckets = 0;
    if (r->nbuckets > 0) { /* auto across nodes: timed at these buckets' sizes */
        size_t *counts = dt_xmalloc(sizeof(size_t) * (size_t)r->nbuckets);
        for (int b = 0; b < r->nbuckets; b++) counts[b] = r->start[b] - r->start[b + 1];
        dt_auto_tune(coll, buf, buf, counts, r->nbuckets);
        free(counts);
    }
    r->overlap = overlap && r->nbuckets > 0;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    pthread_cond_init(&r->idle, NULL);
    r->launched = r->finished = r->nbuckets; /* idle until the first begin */
    if (r->overlap && pthread_create(&r->thread, NULL, comm_thread, r) != 0)
        r->overlap = 0;
}

void dt_reducer_free(struct dt_reducer *r)
{
    if (!r->start) return;
    if (r->overlap) {
        pthread_mutex_lock(&r->lock);
        r->quit = 1;
        pthread_cond_signal(&r->wake);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
    }
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->idle);
    free(r->start);
    memset(r, 0, sizeof *r);
}

void dt_reducer_begin(struct dt_reducer *r)
{
    pthread_mutex_lock(&r->lock);
    r->ready_from = r->count;
    r->launched = r->finished = 0;
    pthread_mutex_unlock(&r->lock);
}

void dt_reducer_ready(struct dt_reducer *r, size_t offset)
{
    if (!r->overlap) return;
    pthread_mutex_lock(&r->lock);
    if (offset < r->ready_from) {
        r->ready_from = offset;
        pthread_cond_signal(&r->wake);
    }
    pthread_mutex_unlock(&r->lock);
}

void dt_reducer_finish(struct dt_reducer *r)
{
    DT_TL_BEGIN(tl0);
    double t0 = MPI_Wtime();
    if (r->overlap) {
        pthread_mutex_lock(&r->lock);
        r->ready_from = 0;
        pthread_cond_signal(&r->wake);
        while (r->finished < r->nbuckets) pthread_cond_wait(&r->idle, &r->lock);
        pthread_mutex_unlock(&r->lock);
    } else {
        for (int b = 0; b < r->nbuckets; b++) reduce_bucket(r, b);
    }
    r->wait_seconds += MPI_Wtime() - t0;
    DT_TL_END(tl0, DT_TL_COMPUTE, "wait for gradients", NULL);
    r->steps++;
}

void dt_reducer_stats_reset(struct dt_reducer *r)
{
    r->comm_seconds = r->wait_seconds = 0.0;
    r->steps = 0;
}
