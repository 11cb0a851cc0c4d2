/* dataset.c: distributed datasets for custom loops (dtrain_dataset_*).
 *
 * A dtrain_dataset is the dtrain program's data path unchanged: the files
 * validated on rank 0 (data/dataset.h), the shard plan over the context's
 * ranks (data/shard.h) and the loader reading ahead (data/loader.h), set up
 * by the trainer's own functions (train/setup.c). Every
 * rank of the context is a replica, so replica i of the plan is rank i, and
 * begin_epoch draws the same order dtrain draws for that epoch and seed. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "runtime/checks.h"
#include "data/synthetic.h"

void dtrain_dataset_options_init(dtrain_dataset_options *o)
{
    memset(o, 0, sizeof *o);
    o->shard_policy = "auto";
    o->prefetch = 2;
    o->shuffle = 1;
}

static void dataset_free(dtrain_dataset *ds)
{
    if (ds->loader_open) dt_loader_close(&ds->loader);
    dt_shard_free(&ds->plan);
    dt_dataset_close(&ds->data);
    for (int i = 0; i < ds->npaths; i++) free(ds->paths[i]);
    free(ds->paths);
    free(ds->synthetic);
    free(ds);
}

/* The options' verdict, agreed on; fills policy. */
static int check_options(dtrain_context *ctx, const dtrain_dataset_options *o, int batch, int *policy,
                         struct dt_augment *aug, dt_status *st)
{
    st->code = DT_OK;
    memset(aug, 0, sizeof *aug);
    const char *p = o->shard_policy ? o->shard_policy : "auto";
    *policy = !strcmp(p, "auto") ? DT_SHARD_AUTO : !strcmp(p, "data") ? DT_SHARD_DATA
              : !strcmp(p, "file") ? DT_SHARD_FILE : -1;
    if (batch < 1 || batch > (1 << 20))
        dt_fail(st, DT_EUSAGE, "dtrain_dataset: batch: expected 1 to %d samples per replica, found %d", 1 << 20, batch);
    else if (*policy < 0)
        dt_fail(st, DT_EUSAGE, "dtrain_dataset: shard_policy: expected auto, data or file, found '%s'", p);
    else if (o->prefetch < 0 || o->prefetch > 64)
        dt_fail(st, DT_EUSAGE, "dtrain_dataset: prefetch: expected 0 to 64 batches, found %d", o->prefetch);
    else if (o->map_threads < 0 || o->map_threads > DT_MAP_THREADS_MAX)
        dt_fail(st, DT_EUSAGE, "dtrain_dataset: map_threads: expected 0 (auto) or 1 to %d threads, found %d",
                DT_MAP_THREADS_MAX, o->map_threads);
    else if (o->num_classes && (o->num_classes < 2 || o->num_classes > 256))
        dt_fail(st, DT_EUSAGE, "dtrain_dataset: num_classes: expected 0 (from the files) or 2 to 256, found %d",
                o->num_classes);
    else if (o->augment)
        dt_augment_parse(o->augment, aug, st);
    return dt_status_agree(st, ctx->comm);
}

/* After the data is open: the plan and the loader. */
static int finish_open(dtrain_dataset *ds, const dtrain_dataset_options *o, const struct dt_augment *aug,
                       dt_status *st)
{
    dtrain_context *ctx = ds->ctx;
    st->code = DT_OK;
    int policy = dt_setup_shard_policy(ds->policy, ds->npaths, ctx->size, "dtrain_dataset_open: ", "shard_policy", st);
    if (dt_status_agree(st, ctx->comm) != DT_OK) return st->code;
    ds->policy = policy;
    dt_setup_plan(&ds->plan, &ds->data, policy, ctx->rank, ctx->size, ds->batch);
    struct dt_loader_config lc = {.batch = ds->batch, .prefetch = o->prefetch, .augment = *aug,
                                  .seed = ctx->base.seed};
    char why[96];
    lc.map_threads = dt_setup_map_threads(o->map_threads, ctx->topo.local_size, ctx->base.threads, why, sizeof why);
    dt_setup_loader(&ds->loader, &lc, &ds->data, &ds->plan, ctx->device.be, ctx->rank == 0 && ctx->base.verbose >= DT_NORMAL,
                    "prefetch", "dtrain_dataset_next");
    ds->loader_open = 1;
    ds->shuffle = o->shuffle;
    ctx->nusers++;
    return DT_OK;
}

/* A dataset handle for ctx and batch; *opts NULL means the defaults (in def). */
static dtrain_dataset *dataset_new(dtrain_context *ctx, int batch, const dtrain_dataset_options **opts,
                                   dtrain_dataset_options *def)
{
    if (!*opts) {
        dtrain_dataset_options_init(def);
        *opts = def;
    }
    dtrain_dataset *ds = dt_xcalloc(1, sizeof *ds);
    ds->ctx = ctx;
    ds->batch = batch;
    return ds;
}

int dtrain_dataset_open(dtrain_context *ctx, const char *const *paths, int npaths, int batch,
                        const dtrain_dataset_options *opts, dtrain_dataset **out)
{
    dtrain_dataset_options def;
    dt_status st = {0};
    struct dt_augment aug;
    if (!ctx || !out) return DTRAIN_EUSAGE;
    *out = NULL;
    dtrain_dataset *ds = dataset_new(ctx, batch, &opts, &def);
    if (npaths < 1 || !paths)
        dt_fail(&st, DT_EUSAGE, "dtrain_dataset_open: expected at least one HDF5 file, found %d", npaths);
    for (int i = 0; st.code == DT_OK && i < npaths; i++)
        if (!paths[i]) dt_fail(&st, DT_EUSAGE, "dtrain_dataset_open: paths[%d] is NULL", i);
    if (dt_status_agree(&st, ctx->comm) != DT_OK || check_options(ctx, opts, batch, &ds->policy, &aug, &st) != DT_OK) {
        free(ds);
        return dt_api_error(ctx, &st);
    }
    ds->npaths = npaths;
    ds->paths = dt_xcalloc((size_t)npaths, sizeof *ds->paths);
    for (int i = 0; i < npaths; i++) {
        ds->paths[i] = strdup(paths[i]);
        if (!ds->paths[i]) DT_DIE("out of memory");
    }
    if (dt_dataset_open_classes(&ds->data, ds->paths, npaths, opts->num_classes, ctx->comm, &st) != DT_OK ||
        finish_open(ds, opts, &aug, &st) != DT_OK) {
        dataset_free(ds);
        return dt_api_error(ctx, &st);
    }
    *out = ds;
    return dt_api_error(ctx, &st);
}

int dtrain_dataset_synthetic(dtrain_context *ctx, const char *spec, int batch, const dtrain_dataset_options *opts,
                             dtrain_dataset **out)
{
    dtrain_dataset_options def;
    dt_status st = {0};
    struct dt_augment aug;
    struct dt_synthetic sy;
    if (!ctx || !out) return DTRAIN_EUSAGE;
    *out = NULL;
    dtrain_dataset *ds = dataset_new(ctx, batch, &opts, &def);
    if (!spec) dt_fail(&st, DT_EUSAGE, "dtrain_dataset_synthetic: spec is NULL; expected HxWxC:CLASSES[:N]");
    else if (opts->num_classes)
        dt_fail(&st, DT_EUSAGE, "dtrain_dataset_synthetic: num_classes is %d; leave it 0 (CLASSES in the spec gives "
                "the number)", opts->num_classes);
    else dt_synthetic_parse(spec, &sy, &st);
    if (dt_status_agree(&st, ctx->comm) != DT_OK || check_options(ctx, opts, batch, &ds->policy, &aug, &st) != DT_OK) {
        free(ds);
        return dt_api_error(ctx, &st);
    }
    size_t len = strlen(spec) + 16;
    ds->synthetic = strdup(spec);
    ds->paths = dt_xcalloc(1, sizeof *ds->paths);
    ds->paths[0] = dt_xmalloc(len);
    snprintf(ds->paths[0], len, "--synthetic %s", spec); /* how messages and checkpoints name it */
    ds->npaths = 1;
    dt_dataset_open_synthetic(&ds->data, &sy, ctx->base.seed);
    if (finish_open(ds, opts, &aug, &st) != DT_OK) {
        dataset_free(ds);
        return dt_api_error(ctx, &st);
    }
    *out = ds;
    return dt_api_error(ctx, &st);
}

long long dtrain_dataset_size(const dtrain_dataset *ds) { return ds ? (long long)ds->data.split[DT_TRAIN].n : 0; }

long long dtrain_dataset_test_size(const dtrain_dataset *ds)
{
    return ds && ds->data.split[DT_TEST].present ? (long long)ds->data.split[DT_TEST].n : 0;
}

void dtrain_dataset_shape(const dtrain_dataset *ds, int *height, int *width, int *channels, int *classes)
{
    if (height) *height = ds ? ds->data.shape.h : 0;
    if (width) *width = ds ? ds->data.shape.w : 0;
    if (channels) *channels = ds ? ds->data.shape.c : 0;
    if (classes) *classes = ds ? ds->data.classes : 0;
}

long long dtrain_dataset_steps(const dtrain_dataset *ds) { return ds ? (long long)ds->plan.steps : 0; }

/* The epoch in progress ends: the reading thread is joined. */
static void end_epoch(dtrain_dataset *ds)
{
    if (ds->steps) dt_loader_stop(&ds->loader);
    ds->steps = 0;
}

int dtrain_dataset_begin_epoch(dtrain_dataset *ds, int epoch, long long *steps)
{
    if (!ds) return DTRAIN_EUSAGE;
    if (epoch < 0) {
        snprintf(ds->ctx->err, sizeof ds->ctx->err, "dtrain_dataset_begin_epoch: epoch %d: expected 0 or more", epoch);
        return DTRAIN_EUSAGE;
    }
    end_epoch(ds);
    dt_shard_epoch(&ds->plan, ds->ctx->base.seed, epoch, ds->shuffle);
    ds->epoch = epoch;
    ds->step = 0;
    ds->steps = ds->plan.steps;
    if (ds->steps) dt_loader_start(&ds->loader, epoch, 0, ds->steps);
    if (steps) *steps = ds->steps;
    return DTRAIN_OK;
}

int dtrain_dataset_next(dtrain_dataset *ds, dtrain_batch *batch)
{
    if (!ds || !batch) return 0;
    if (ds->step >= ds->steps) {
        end_epoch(ds);
        return 0;
    }
    const struct dt_batch *b = dt_loader_get(&ds->loader, ds->step);
    batch->n = b->n;
    batch->global = b->global;
    batch->step = ds->step;
    batch->dataset = ds;
    batch->impl = b;
    ds->step++;
    return 1;
}

int dtrain_dataset_close(dtrain_dataset *ds)
{
    if (!ds) return DTRAIN_OK;
    if (ds->nusers > 0) {
        snprintf(ds->ctx->err, sizeof ds->ctx->err, "dtrain_dataset_close: %d model%s created with this dataset %s "
                 "still alive; free %s first (dtrain_model_free)", ds->nusers, ds->nusers == 1 ? "" : "s",
                 ds->nusers == 1 ? "is" : "are", ds->nusers == 1 ? "it" : "them");
        return DTRAIN_EUSAGE;
    }
    end_epoch(ds);
    ds->ctx->nusers--;
    dataset_free(ds);
    return DTRAIN_OK;
}
