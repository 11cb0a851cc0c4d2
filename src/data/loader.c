/* loader.c: the batch loader and its read-ahead thread (see loader.h).
 *
 * Slots: the thread fills step s into slot s % nslots while s <= taken +
 * prefetch, where taken is the step the main thread holds; so the slot in
 * use by the main thread (and, on a GPU, by the upload it started from it)
 * is never written, and the thread is at most prefetch batches ahead. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "data/loader.h"
#include "data/synthetic.h"

void dt_loader_open(struct dt_loader *ld, const struct dt_loader_config *cfg, struct dt_dataset *ds,
                    const struct dt_shard_plan *plan, const struct dt_backend *be, char *note, size_t notelen)
{
    memset(ld, 0, sizeof *ld);
    ld->cfg = *cfg;
    ld->ds = ds;
    ld->plan = plan;
    ld->be = be;
    note[0] = '\0';
    if (cfg->prefetch > 0) {
        dt_status why = {0};
        if (ds->synthetic) ld->threaded = 1; /* generated rows: a pure function of the index */
        else if (dt_rowmap_open(&ld->map, ds, DT_TRAIN, &why) == DT_OK) ld->threaded = 1;
        else snprintf(note, notelen, "%s", why.msg);
    }
    const size_t row = dt_shape_size(ds->shape), B = (size_t)cfg->batch;
    ld->nslots = ld->threaded ? cfg->prefetch + 1 : 2;
    ld->slot = dt_xcalloc((size_t)ld->nslots, sizeof *ld->slot);
    for (int k = 0; k < ld->nslots; k++) {
        ld->slot[k].step = -1;
        ld->slot[k].idx = dt_xmalloc(sizeof(int64_t) * B);
        ld->slot[k].images = be->host_alloc(row * B); /* pinned on the GPU: asynchronous uploads */
        ld->slot[k].labels = be->host_alloc(B);
    }
    dt_cache_init(&ld->cache, cfg->cache_bytes, row, ds->split[DT_TRAIN].n);
    const int parts = cfg->map_threads > 1 ? cfg->map_threads : 1;
    dt_pool_init(&ld->pool, parts);
    ld->aug_scratch = dt_xcalloc((size_t)parts, sizeof *ld->aug_scratch);
    ld->map_scratch = dt_xcalloc((size_t)parts, sizeof *ld->map_scratch);
    ld->map_st = dt_xcalloc((size_t)parts, sizeof *ld->map_st);
    ld->map_rc = dt_xcalloc((size_t)parts, sizeof *ld->map_rc);
    for (int k = 0; k < parts; k++) {
        ld->aug_scratch[k] = dt_xmalloc(row);
        ld->map_scratch[k] = dt_xmalloc(dt_rowmap_scratch_bytes(cfg->batch));
    }
    if (cfg->cache_bytes) { /* misses gather here before they are placed and kept */
        ld->miss_images = dt_xmalloc(row * B);
        ld->miss_labels = dt_xmalloc(B);
    }
    ld->miss_idx = dt_xmalloc(sizeof(int64_t) * B);
    ld->miss_at = dt_xmalloc(sizeof(int) * B);
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
}

/* Read samples idx[0..n) into images/labels: generated, by pread() or, in
 * the main thread only, through HDF5. */
static int read_rows(struct dt_loader *ld, const int64_t *idx, int n, uint8_t *images, uint8_t *labels,
                     void *scratch, dt_status *st)
{
    if (ld->ds->synthetic) {
        dt_synthetic_rows(ld->ds, idx, n, images, labels);
        return DT_OK;
    }
    if (ld->threaded) return dt_rowmap_read(&ld->map, idx, n, images, labels, scratch, st);
    return dt_dataset_read(ld->ds, DT_TRAIN, idx, n, images, labels, st);
}

/* One batch's work for the map threads: rows idx[0..n) read into
 * images/labels (n = 0: none), then samples aug_idx[0..aug_n) of
 * aug_images augmented. Part k takes positions [n k / P, n (k + 1) / P) of
 * each; when both lists are the batch, a part augments the rows it read. */
struct map_job {
    struct dt_loader *ld;
    const int64_t *idx;
    int n;
    uint8_t *images, *labels;
    const int64_t *aug_idx;
    int aug_n;
    uint8_t *aug_images;
};

static void map_part(void *arg, int k, int parts)
{
    const struct map_job *j = arg;
    struct dt_loader *ld = j->ld;
    const struct dt_shape sh = ld->ds->shape;
    const size_t row = dt_shape_size(sh);
    const int r0 = (int)((int64_t)j->n * k / parts), r1 = (int)((int64_t)j->n * (k + 1) / parts);
    ld->map_rc[k] = DT_OK;
    if (r1 > r0)
        ld->map_rc[k] = read_rows(ld, j->idx + r0, r1 - r0, j->images + (size_t)r0 * row, j->labels + r0,
                                  ld->map_scratch[k], &ld->map_st[k]);
    if (ld->map_rc[k] != DT_OK) return;
    const int a0 = (int)((int64_t)j->aug_n * k / parts), a1 = (int)((int64_t)j->aug_n * (k + 1) / parts);
    for (int i = a0; i < a1; i++) {
        int flip, dy, dx;
        dt_augment_draw(&ld->cfg.augment, ld->cfg.seed, ld->epoch, j->aug_idx[i], &flip, &dy, &dx);
        dt_augment_image(j->aug_images + (size_t)i * row, sh.h, sh.w, sh.c, flip, dy, dx, ld->aug_scratch[k]);
    }
}

/* Run job on the map threads; the first failed part's error (by position). */
static int map_run(struct dt_loader *ld, struct map_job *job, dt_status *st)
{
    if (job->n == 0 && job->aug_n == 0) return DT_OK;
    dt_pool_run(&ld->pool, map_part, job);
    for (int k = 0; k < ld->pool.n; k++)
        if (ld->map_rc[k] != DT_OK) {
            *st = ld->map_st[k];
            return st->code;
        }
    return DT_OK;
}

/* Step s of the epoch into b: the plan's samples, from the cache or read,
 * then augmented. The one routine both paths use, so they give the same
 * bytes. Rows are read on the map threads where no HDF5 call is needed
 * (pread, generated); the cache is looked up and filled in this thread. */
static int fill(struct dt_loader *ld, struct dt_batch *b, int64_t s, dt_status *st)
{
    const size_t row = dt_shape_size(ld->ds->shape);
    const int parallel_reads = ld->ds->synthetic || ld->threaded;
    const int augment = ld->cfg.augment.flip || ld->cfg.augment.pad;
    b->step = s;
    b->failed = 0;
    b->n = dt_shard_step(ld->plan, s, b->idx, &b->global);
    int m = 0;
    for (int i = 0; i < b->n; i++)
        if (!dt_cache_get(&ld->cache, b->idx[i], b->images + (size_t)i * row, &b->labels[i])) {
            ld->miss_idx[m] = b->idx[i];
            ld->miss_at[m++] = i;
        }
    if (ld->cfg.fail_at && ++ld->reads == ld->cfg.fail_at)
        return dt_fail(st, DT_ERUNTIME, "%s: reading step %lld of epoch %lld: Input/output error "
                       "(injected by DTRAIN_TEST_READ_ERROR)", ld->ds->paths[0], (long long)s + 1,
                       (long long)ld->epoch + 1);
    struct map_job job = {.ld = ld, .aug_idx = b->idx, .aug_n = augment ? b->n : 0, .aug_images = b->images};
    if (m == b->n && parallel_reads && !ld->cache.limit) { /* the common case: read and augment in one pass */
        job.idx = b->idx;
        job.n = m;
        job.images = b->images;
        job.labels = b->labels;
        return map_run(ld, &job, st);
    }
    if (m) { /* misses: straight into the slot when there are no hits, kept as read */
        const int direct = m == b->n;
        const int64_t *idx = direct ? b->idx : ld->miss_idx;
        uint8_t *img = direct ? b->images : ld->miss_images, *lab = direct ? b->labels : ld->miss_labels;
        struct map_job rd = {.ld = ld, .idx = idx, .n = m, .images = img, .labels = lab};
        int rc = parallel_reads ? map_run(ld, &rd, st) : read_rows(ld, idx, m, img, lab, ld->map_scratch[0], st);
        if (rc != DT_OK) return rc;
        for (int j = 0; j < m; j++) {
            if (!direct) {
                memcpy(b->images + (size_t)ld->miss_at[j] * row, img + (size_t)j * row, row);
                b->labels[ld->miss_at[j]] = lab[j];
            }
            if (ld->cache.limit) dt_cache_put(&ld->cache, idx[j], img + (size_t)j * row, lab[j]);
        }
    }
    return map_run(ld, &job, st);
}

/* After a read error: step s as an empty batch (its global count still the plan's). */
static struct dt_batch *empty(struct dt_loader *ld, int64_t s)
{
    struct dt_batch *b = &ld->slot[s % ld->nslots];
    dt_shard_step(ld->plan, s, b->idx, &b->global);
    b->step = s;
    b->n = 0;
    b->failed = 1;
    return b;
}

static void *run(void *arg)
{
    struct dt_loader *ld = arg;
    for (int64_t s = ld->filled; s < ld->end; s++) {
        pthread_mutex_lock(&ld->mu);
        while (!ld->stop && s - ld->taken > ld->cfg.prefetch) pthread_cond_wait(&ld->cv, &ld->mu);
        int stop = ld->stop;
        pthread_mutex_unlock(&ld->mu);
        if (stop) break;
        dt_status st = {0};
        int rc = fill(ld, &ld->slot[s % ld->nslots], s, &st);
        pthread_mutex_lock(&ld->mu);
        if (rc == DT_OK) ld->filled = s + 1;
        else ld->err = st;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        if (rc != DT_OK) break;
    }
    pthread_mutex_lock(&ld->mu);
    ld->done = 1;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

void dt_loader_start(struct dt_loader *ld, int64_t epoch, int64_t s0, int64_t end)
{
    dt_loader_stop(ld);
    ld->epoch = epoch;
    ld->end = end;
    for (int k = 0; k < ld->nslots; k++) ld->slot[k].step = -1;
    if (!ld->threaded || s0 >= end || ld->err.code != DT_OK) return;
    ld->filled = s0;
    ld->taken = s0 - 1;
    ld->stop = ld->done = 0;
    /* Signals (SIGUSR1/SIGTERM: checkpoint and exit) go to the main thread:
     * the new thread starts with all of them blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&ld->thread, NULL, run, ld);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) DT_DIE("cannot start the data loader's thread");
    ld->running = 1;
}

const struct dt_batch *dt_loader_get(struct dt_loader *ld, int64_t s)
{
    if (!ld->threaded || !ld->running) {
        struct dt_batch *b = &ld->slot[s % ld->nslots];
        if (ld->err.code != DT_OK) return empty(ld, s);
        if (b->step == s) return b; /* read ahead */
        dt_status st = {0};
        if (fill(ld, b, s, &st) != DT_OK) {
            ld->err = st;
            return empty(ld, s);
        }
        return b;
    }
    pthread_mutex_lock(&ld->mu);
    ld->taken = s; /* step s - 1's slot is free now */
    pthread_cond_broadcast(&ld->cv);
    while (ld->filled <= s && !ld->done) pthread_cond_wait(&ld->cv, &ld->mu);
    int ready = ld->filled > s;
    pthread_mutex_unlock(&ld->mu);
    return ready ? &ld->slot[s % ld->nslots] : empty(ld, s);
}

void dt_loader_ahead(struct dt_loader *ld, int64_t s)
{
    if (ld->threaded || s >= ld->end || ld->err.code != DT_OK) return;
    dt_status st = {0};
    if (fill(ld, &ld->slot[s % ld->nslots], s, &st) != DT_OK) {
        ld->err = st;
        ld->slot[s % ld->nslots].step = -1;
    }
}

void dt_loader_stop(struct dt_loader *ld)
{
    if (!ld->running) return;
    pthread_mutex_lock(&ld->mu);
    ld->stop = 1;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(ld->thread, NULL);
    ld->running = 0;
}

const dt_status *dt_loader_error(const struct dt_loader *ld)
{
    return ld->err.code != DT_OK ? &ld->err : NULL;
}

struct dt_batch *dt_loader_spare(struct dt_loader *ld)
{
    ld->slot[0].step = -1;
    return &ld->slot[0];
}

void dt_loader_close(struct dt_loader *ld)
{
    if (!ld->slot) return;
    dt_loader_stop(ld);
    for (int k = 0; k < ld->nslots; k++) {
        free(ld->slot[k].idx);
        ld->be->host_free(ld->slot[k].images);
        ld->be->host_free(ld->slot[k].labels);
    }
    free(ld->slot);
    dt_rowmap_close(&ld->map);
    dt_cache_free(&ld->cache);
    for (int k = 0; k < ld->pool.n; k++) {
        free(ld->aug_scratch[k]);
        free(ld->map_scratch[k]);
    }
    dt_pool_free(&ld->pool);
    free(ld->aug_scratch);
    free(ld->map_st);
    free(ld->map_rc);
    free(ld->miss_images);
    free(ld->miss_labels);
    free(ld->miss_idx);
    free(ld->miss_at);
    free(ld->map_scratch);
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv);
    memset(ld, 0, sizeof *ld);
}
