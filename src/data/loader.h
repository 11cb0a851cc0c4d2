/* loader.h: training batches for the step loop, read ahead by a thread.
 *
 * --prefetch N (N > 0): a thread reads, augments and places up to N batches
 * ahead of the step being trained into a ring of N + 1 host slots (pinned on
 * a GPU backend); the main thread waits only when the batch it needs is not
 * there yet. The thread makes no MPI call and no HDF5 call: it reads rows
 * with pread() through an address table built at open (data/rowmap.h), or
 * generates them (--synthetic). Where the table cannot be built (compressed
 * chunks, ...), the loader reads in the main thread instead, as N = 0 does:
 * step s + 1 is read after step s's forward pass.
 *
 * --map-threads N: the reads (pread or generated rows) and the augmentation
 * of a batch are split over N threads (data/pool.h), the reading thread (or
 * the main thread) being one of them; HDF5 reads stay in one thread. A
 * sample goes to one thread by its position in the batch, and what happens
 * to it depends on the sample alone, so the batch is bitwise the same for
 * every N. Normalisation (uint8 to float, x / 255) is not theirs: it is the
 * first thing the step does on the device (backend images_to_float), so a
 * GPU receives a quarter of the bytes.
 *
 * The one design decision: the thread runs one epoch at a time. It is
 * started with the epoch's order already drawn (dt_shard_epoch) and its
 * first step (s0 > 0 after a mid-epoch resume), and stopped at the epoch's
 * end, so it follows exactly the steps, samples and augmentation draws of
 * the synchronous path, and nothing runs while the main thread evaluates or
 * checkpoints.
 *
 * A read error (short read, I/O error) stops the reads; the batch that
 * failed and all later ones come back empty (n = 0: the rank still takes
 * part in every step's collectives, contributing nothing), and the error,
 * naming the file, is in dt_loader_error() for the caller to agree on.
 * --cache keeps rows in memory (data/cache.h), used by either path. */
#ifndef DT_LOADER_H
#define DT_LOADER_H

#include <pthread.h>
#include <stdint.h>

#include "backend.h"
#include "data/augment.h"
#include "data/cache.h"
#include "data/dataset_rows.h"
#include "data/pool.h"
#include "data/rowmap.h"
#include "data/shard.h"
#include "runtime/status.h"

/* One step's samples on this rank, in host memory. */
struct dt_batch {
    int64_t step;           /* within the epoch; -1: holds nothing */
    int failed;             /* empty because this or an earlier read failed */
    int n;                  /* samples (0: an empty batch) */
    int64_t global;         /* the step's samples over all replicas */
    int64_t *idx;           /* [batch] global sample indices */
    uint8_t *images;        /* [batch][H][W][C] */
    uint8_t *labels;        /* [batch] */
};

struct dt_loader_config {
    int batch;              /* samples per rank per step */
    int prefetch;           /* batches read ahead by the thread; 0: none */
    int map_threads;        /* threads that read and augment a batch (>= 1) */
    size_t cache_bytes;     /* --cache limit; 0: no cache */
    struct dt_augment augment; /* flip/pad 0: none */
    uint64_t seed;          /* for the augmentation draws */
    long fail_at;           /* test hook: the fail_at-th batch read (from 1) fails; 0 never */
};

struct dt_loader {
    struct dt_loader_config cfg;
    struct dt_dataset *ds;
    const struct dt_shard_plan *plan;
    const struct dt_backend *be;
    int threaded;           /* a thread reads (cfg.prefetch > 0 and the rows can be read without HDF5) */
    struct dt_rowmap map;   /* files only, threaded */
    struct dt_cache cache;
    int nslots;             /* prefetch + 1, or 2 */
    struct dt_batch *slot;
    struct dt_pool pool;    /* cfg.map_threads parts */
    /* fill()'s scratch: used by one batch at a time; [part] per map thread */
    uint8_t **aug_scratch, *miss_images, *miss_labels;
    int64_t *miss_idx;
    int *miss_at;
    void **map_scratch;
    dt_status *map_st;      /* [part] a read's error */
    int *map_rc;
    long reads;             /* batches read, for fail_at */
    /* the epoch in progress */
    int64_t epoch, end;     /* steps [.., end) */
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t filled;         /* threaded: steps below this are in their slots */
    int64_t taken;          /* threaded: the step the main thread holds */
    int stop, done;
    dt_status err;          /* the first read error (sticky) */
};

/* In the main thread, after dt_dataset_open and dt_shard_init; ds and plan
 * must outlive the loader. When cfg->prefetch > 0 but rows cannot be read
 * without HDF5, note receives why (naming the file) and the loader reads in
 * the main thread; note is "" otherwise. */
void dt_loader_open(struct dt_loader *ld, const struct dt_loader_config *cfg, struct dt_dataset *ds,
                    const struct dt_shard_plan *plan, const struct dt_backend *be, char *note, size_t notelen);
/* The epoch's steps [s0, end) begin; its order is drawn already. */
void dt_loader_start(struct dt_loader *ld, int64_t epoch, int64_t s0, int64_t end);
/* Step s's batch (steps in order, from s0); waits for the thread if needed.
 * It stays valid until the next call. */
const struct dt_batch *dt_loader_get(struct dt_loader *ld, int64_t s);
/* Where a synchronous loader reads step s ahead (after step s - 1's forward
 * pass, so a GPU computes meanwhile); nothing with a thread. */
void dt_loader_ahead(struct dt_loader *ld, int64_t s);
/* End the epoch: the thread stops (early, after an error) and is joined. */
void dt_loader_stop(struct dt_loader *ld);
/* The first read error, or NULL. */
const dt_status *dt_loader_error(const struct dt_loader *ld);
/* A slot for the caller's own reads (validation) while no epoch runs. */
struct dt_batch *dt_loader_spare(struct dt_loader *ld);
void dt_loader_close(struct dt_loader *ld);

#endif
