/* pool.h: the data loader's map threads (--map-threads N).
 *
 * A fixed set of threads that run one function over N parts of a batch and
 * return when all parts are done: the caller's thread runs part 0 and N - 1
 * pool threads run the others. The loader hands it the batch's reads
 * (pread, or generated rows) and its augmentation, each sample to exactly
 * one part by position, so which thread handles a sample never changes
 * what is computed: a sample's bytes and its augmentation draw depend on
 * the sample alone (augment.h), and the batch is bitwise the one a single
 * thread makes.
 *
 * The one design decision: the threads live as long as the loader and sleep
 * on a condition variable between batches, so a batch costs two wake-ups,
 * not N thread creations; they block every signal (the main thread takes
 * SIGUSR1/SIGTERM) and make no MPI or HDF5 call. */
#ifndef DT_POOL_H
#define DT_POOL_H

#include <pthread.h>

enum { DT_MAP_THREADS_MAX = 64 };

/* Part k of nparts: the work fn is handed. */
typedef void (*dt_pool_fn)(void *arg, int part, int nparts);

struct dt_pool {
    int n;                  /* parts: the caller's thread and n - 1 pool threads */
    pthread_t *thread;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;      /* one per dt_pool_run: the threads' start signal */
    int pending;            /* pool threads not done with the current generation */
    int quit;
    dt_pool_fn fn;
    void *arg;
};

/* n >= 1 parts; n == 1 starts no thread. Dies if a thread cannot start. */
void dt_pool_init(struct dt_pool *p, int n);
/* fn(arg, k, n) for k = 0..n-1, part 0 in the calling thread; returns when
 * all are done. One caller at a time. */
void dt_pool_run(struct dt_pool *p, dt_pool_fn fn, void *arg);
void dt_pool_free(struct dt_pool *p);

#endif
