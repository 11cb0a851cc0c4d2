/* model.c: models for custom loops: create, step, evaluate, checkpoints.
 *
 * A dtrain_model is the dtrain program's trainer without its data and loop:
 * dtrain_model_create runs dt_trainer_init's model stages (train/setup.c),
 * dtrain_forward_backward and dtrain_apply_gradients are the two halves of
 * its step (train/step.h), dtrain_evaluate reads its slices
 * (train/evaluate.c), checkpoints are train/state.c's. The loss is scaled
 * by 1 / the step's global sample count, exactly as dtrain scales it, so
 * the same data, seed and settings give the same parameters step for step. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/api.h"
#include "metrics/tfevents.h"
#include "runtime/checks.h"
#include "train/step.h"

void dtrain_model_options_init(dtrain_model_options *o)
{
    struct dt_config d;
    dt_options_defaults(&d); /* the dtrain program's, from its option table */
    memset(o, 0, sizeof *o);
    o->model = d.model;
    o->dropout = d.dropout;
    o->strategy = d.strategy;
    o->optimizer = d.optimizer;
    o->lr = d.lr;
    o->momentum = d.momentum;
    o->allreduce = d.allreduce;
    o->bucket_mb = d.bucket_mb;
    o->overlap = DT_OVERLAP_OFF; /* not dtrain's auto: the library starts no thread unasked */
    o->nan_policy = dt_options_choice_name("nan-policy", d.nan_policy);
    o->keep = d.keep;
}

static char *dup_or(const char *s, const char *fallback)
{
    char *d = strdup(s ? s : fallback);
    if (!d) DT_DIE("out of memory");
    return d;
}

/* The options as the dtrain program's configuration (NULL strings: its
 * defaults); their verdict in st, from the checks dtrain makes of its own. */
static void fill_config(dtrain_model *m, const dtrain_model_options *o, dt_status *st)
{
    struct dt_config *cfg = &m->cfg;
    const dtrain_dataset *ds = m->ds;
    *cfg = m->ctx->base;
    m->model_name = dup_or(o->model, cfg->model);
    m->strategy_name = dup_or(o->strategy, cfg->strategy);
    m->optimizer_name = dup_or(o->optimizer, cfg->optimizer);
    m->allreduce_name = dup_or(o->allreduce, cfg->allreduce);
    cfg->model = m->model_name;
    cfg->strategy = m->strategy_name;
    cfg->optimizer = m->optimizer_name;
    cfg->allreduce = m->allreduce_name;
    cfg->dropout = o->dropout;
    cfg->lr = o->lr;
    cfg->momentum = o->momentum;
    cfg->bucket_mb = o->bucket_mb;
    cfg->overlap = o->overlap;
    cfg->keep = o->keep;
    cfg->batch_size = ds->batch;
    cfg->inputs = ds->paths;
    cfg->ninputs = ds->npaths;
    cfg->synthetic = ds->synthetic;
    cfg->shard_policy = ds->policy;
    cfg->prefetch = ds->loader.cfg.prefetch;
    cfg->validation = ds->data.split[DT_TEST].present && ds->data.split[DT_TEST].n > 0;
    cfg->epochs = 1;
    st->code = DT_OK;
    if (!strcmp(cfg->strategy, "parameter-server"))
        dt_fail(st, DT_EUSAGE, "dtrain_model_create: strategy parameter-server: its workers do not step together, "
                "which a custom loop's collective steps assume; use the dtrain program for it, or a synchronous "
                "strategy (auto, mirrored, multi-worker, sharded, central-storage)");
    else if (!strcmp(cfg->strategy, "fsdp"))
        dt_fail(st, DT_EUSAGE, "dtrain_model_create: strategy fsdp: not offered to custom loops yet (its parameters "
                "live in no whole block, which dtrain_model_get_parameters and the callers' own code expect); use "
                "the dtrain program for it, or sharded (ZeRO-1)");
    else if (o->overlap != DT_OVERLAP_OFF && o->overlap != DT_OVERLAP_ON) /* dtrain's auto is not offered */
        dt_fail(st, DT_EUSAGE, "dtrain_model_create: overlap: expected 0 or 1, found %d", o->overlap);
    else if (!o->nan_policy || dt_options_set(cfg, "nan-policy", o->nan_policy, "dtrain_model_create", st) == DT_OK)
        dt_options_check(cfg, "dtrain_model_create", st);
}

/* Room for n epochs of history (train/state.c writes history[0..epochs_done)).
 * The API does not know the caller's epoch figures: they are recorded as NaN. */
static void history_reserve(dtrain_model *m, int n)
{
    if (n <= m->hist_cap) return;
    int cap = m->hist_cap ? m->hist_cap : 16;
    while (cap < n) cap *= 2;
    struct dt_epoch_stats *h = realloc(m->t.history, (size_t)cap * sizeof *h);
    if (!h) DT_DIE("out of memory");
    for (int e = m->hist_cap; e < cap; e++)
        h[e] = (struct dt_epoch_stats){.loss = NAN, .accuracy = NAN, .val_loss = NAN, .val_accuracy = NAN};
    m->t.history = h;
    m->hist_cap = cap;
}

int dtrain_model_create(dtrain_context *ctx, dtrain_dataset *ds, const dtrain_model_options *opts,
                        dtrain_model **out)
{
    dtrain_model_options def;
    dt_status st = {0};
    if (!ctx || !out) return DTRAIN_EUSAGE;
    *out = NULL;
    if (!ds) {
        dt_fail(&st, DT_EUSAGE, "dtrain_model_create: the dataset is NULL (it gives the input shape and classes)");
        dt_status_agree(&st, ctx->comm);
        return dt_api_error(ctx, &st);
    }
    if (!opts) {
        dtrain_model_options_init(&def);
        opts = &def;
    }
    dtrain_model *m = dt_xcalloc(1, sizeof *m);
    m->ctx = ctx;
    m->ds = ds;
    ctx->nusers++;
    ds->nusers++;
    struct dt_trainer *t = &m->t;
    t->cfg = &m->cfg;
    fill_config(m, opts, &st);
    if (dt_status_agree(&st, ctx->comm) != DT_OK) goto fail;
    /* The model's own communicators (dt_coll duplicates the context's): its
     * all-reduces never meet another model's or the caller's. */
    struct dt_coll_config cc = {.algorithm = m->cfg.allreduce, .ranks_per_node = m->cfg.ranks_per_node};
    if (dt_coll_init(&t->coll, ctx->comm, &cc, &st) != DT_OK) goto fail;
    t->comm = t->coll.topo.world;
    t->rank = ctx->rank;
    t->nranks = ctx->size;
    t->device = ctx->device;
    t->be = ctx->device.be;
    t->policy = ds->policy;
    if (dt_trainer_build_model(t, &ds->data, "in dtrain_model_create", &st) != DT_OK) goto fail;
    dt_trainer_create_model(t);
    dt_strategy_create(&t->strategy, &m->cfg, &t->model, &t->coll, &st);
    if (dt_status_agree(&st, t->comm) != DT_OK) goto fail;
    dt_trainer_alloc_step(t);
    history_reserve(m, 16);
    dt_monitor_init(&t->stopper, m->cfg.monitor, -1, 0.0);
    dt_monitor_init(&t->saver, m->cfg.monitor, -1, 0.0);
    *out = m;
    return dt_api_error(ctx, &st);
fail:
    dtrain_model_free(m);
    return dt_api_error(ctx, &st);
}

size_t dtrain_model_num_parameters(const dtrain_model *m) { return m ? m->t.model.nparams : 0; }

int dtrain_model_get_parameters(const dtrain_model *m, float *host, size_t n)
{
    if (!m || !host || n < m->t.model.nparams) return DTRAIN_EUSAGE;
    m->t.be->download(host, m->t.model.params, sizeof(float) * m->t.model.nparams);
    return DTRAIN_OK;
}

void dtrain_model_summary(const dtrain_model *m, FILE *out)
{
    if (m && m->t.rank == 0) dt_model_summary(&m->t.model, out);
}

long long dtrain_model_iterations(const dtrain_model *m) { return m ? m->t.global_step : 0; }

float dtrain_get_learning_rate(const dtrain_model *m) { return m ? m->t.strategy.optim_cfg.lr : 0.0f; }

int dtrain_set_learning_rate(dtrain_model *m, float lr)
{
    if (!m) return DTRAIN_EUSAGE;
    if (!(lr > 0.0f) || lr > 1e6f) {
        snprintf(m->ctx->err, sizeof m->ctx->err, "dtrain_set_learning_rate: expected a positive rate, found %g",
                 (double)lr);
        return DTRAIN_EUSAGE;
    }
    m->t.strategy.optim_cfg.lr = lr; /* what checkpoints record */
    if (m->t.strategy.optim.ops) m->t.strategy.optim.cfg.lr = lr;
    return DTRAIN_OK;
}

int dtrain_forward_backward(dtrain_model *m, const dtrain_batch *batch, double *loss_sum, long *correct)
{
    if (!m) return DTRAIN_EUSAGE;
    struct dt_trainer *t = &m->t;
    dtrain_context *ctx = m->ctx;
    /* Local checks: in an SPMD loop every rank reaches the same verdict. */
    if (m->pending) {
        snprintf(ctx->err, sizeof ctx->err, "dtrain_forward_backward: the previous step's gradients are not applied "
                 "yet; call dtrain_apply_gradients first (gradient accumulation is not offered by the API)");
        return DTRAIN_EUSAGE;
    }
    if (!batch || !batch->impl || !batch->dataset) {
        snprintf(ctx->err, sizeof ctx->err, "dtrain_forward_backward: no batch (fill it with dtrain_dataset_next)");
        return DTRAIN_EUSAGE;
    }
    const struct dt_dataset *data = &batch->dataset->data;
    if (batch->n > t->model.max_n || dt_shape_size(data->shape) != dt_shape_size(t->model.input) ||
        data->classes != t->model.classes) {
        snprintf(ctx->err, sizeof ctx->err, "dtrain_forward_backward: a batch of %d samples of %dx%dx%d, %d classes "
                 "for a model of %dx%dx%d, %d classes, batches up to %d", batch->n, data->shape.h, data->shape.w,
                 data->shape.c, data->classes, t->model.input.h, t->model.input.w, t->model.input.c,
                 t->model.classes, t->model.max_n);
        return DTRAIN_EUSAGE;
    }
    float stats[DT_STATS] = {0.0f, 0.0f};
    struct dt_loss_result r = dt_step_forward_backward(t, batch->impl, stats);
    m->stats_loss = stats[0];
    m->stats_correct = stats[1];
    m->pending = 1;
    m->last_ds = (dtrain_dataset *)batch->dataset;
    if (loss_sum) *loss_sum = r.loss_sum;
    if (correct) *correct = (long)r.correct;
    return DTRAIN_OK;
}

int dtrain_apply_gradients(dtrain_model *m)
{
    if (!m) return DTRAIN_EUSAGE;
    struct dt_trainer *t = &m->t;
    struct dt_strategy *s = &t->strategy;
    dt_status st = {0};
    if (!m->pending) {
        snprintf(m->ctx->err, sizeof m->ctx->err, "dtrain_apply_gradients: no gradients to apply; call "
                 "dtrain_forward_backward first");
        return DTRAIN_EUSAGE;
    }
    m->pending = 0;
    t->global_step++;
    float stats[DT_STATS] = {m->stats_loss, m->stats_correct};
    dt_step_apply(t, stats);
    /* A replica whose batch could not be read sent NaN: every rank learns of
     * it from the reduced statistics (or, where the strategy returns only
     * this replica's, from one more reduction). */
    int bad = !isfinite(stats[0]);
    if (s->local_stats) DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, t->comm));
    if (bad) {
        if (dt_step_read_failure(t, m->last_ds ? &m->last_ds->loader : NULL, &st) == DT_OK)
            dt_fail(&st, DT_ERUNTIME, "update %lld: the loss is not finite; try a smaller learning rate",
                    (long long)t->global_step);
        return dt_api_error(m->ctx, &st);
    }
    if (s->nonfinite && s->nan_policy == DT_NAN_ABORT) { /* the same reduced gradient on every rank */
        dt_fail(&st, DT_ERUNTIME, "update %lld: the reduced gradient holds a NaN or infinity; try a smaller "
                "learning rate, or nan_policy \"skip\" to drop such steps", (long long)t->global_step);
        return dt_api_error(m->ctx, &st);
    }
    return dt_api_error(m->ctx, &st);
}

int dtrain_train_step(dtrain_model *m, const dtrain_batch *batch, double *loss_sum, long *correct)
{
    int rc = dtrain_forward_backward(m, batch, loss_sum, correct);
    return rc != DTRAIN_OK ? rc : dtrain_apply_gradients(m);
}

int dtrain_evaluate(dtrain_model *m, dtrain_dataset *ds, double *loss, double *accuracy)
{
    if (!m) return DTRAIN_EUSAGE;
    struct dt_trainer *t = &m->t;
    dt_status st = {0};
    const struct dt_split *sp = ds ? &ds->data.split[DT_TEST] : NULL;
    if (m->pending)
        dt_fail(&st, DT_EUSAGE, "dtrain_evaluate: a step is in progress; call dtrain_apply_gradients first");
    else if (!ds)
        dt_fail(&st, DT_EUSAGE, "dtrain_evaluate: the dataset is NULL");
    else if (!sp->present || sp->n == 0)
        dt_fail(&st, DT_EUSAGE, "dtrain_evaluate: %s has no /test split to evaluate on", ds->paths[0]);
    else if (dt_shape_size(ds->data.shape) != dt_shape_size(t->model.input) || ds->data.classes != t->model.classes)
        dt_fail(&st, DT_EUSAGE, "dtrain_evaluate: %s holds %dx%dx%d images of %d classes; the model takes %dx%dx%d, "
                "%d classes", ds->paths[0], ds->data.shape.h, ds->data.shape.w, ds->data.shape.c, ds->data.classes,
                t->model.input.h, t->model.input.w, t->model.input.c, t->model.classes);
    if (dt_status_agree(&st, t->comm) != DT_OK) return dt_api_error(m->ctx, &st);
    int B = ds->batch < t->model.max_n ? ds->batch : t->model.max_n;
    struct dt_batch b = {.idx = dt_xmalloc(sizeof(int64_t) * (size_t)B),
                         .images = dt_xmalloc(dt_shape_size(ds->data.shape) * (size_t)B),
                         .labels = dt_xmalloc((size_t)B)};
    double sums[3] = {0.0, 0.0, 0.0}, l, a; /* loss, correct, samples */
    dt_trainer_evaluate_slice(t, &ds->data, &b, B, sums, &st);
    free(b.images);
    free(b.labels);
    free(b.idx);
    if (dt_status_agree(&st, t->comm) != DT_OK) return dt_api_error(m->ctx, &st);
    dt_trainer_evaluate_mean(t, sums, &l, &a);
    if (loss) *loss = l;
    if (accuracy) *accuracy = a;
    return dt_api_error(m->ctx, &st);
}

/* The checksum of the training split that checkpoints carry (train/state.c
 * computes it over t->data): the dataset's reader is lent to the trainer
 * for the call. Only the read scratch changes, and is handed back. */
static int data_checksum(dtrain_model *m, dt_status *st)
{
    struct dt_trainer *t = &m->t;
    st->code = DT_OK;
    if (m->checksum_ok) return DT_OK;
    t->data = m->ds->data;
    int rc = dt_trainer_data_checksum(t, st);
    m->ds->data.scratch = t->data.scratch;
    m->ds->data.scratch_bytes = t->data.scratch_bytes;
    memset(&t->data, 0, sizeof t->data);
    m->checksum_ok = rc == DT_OK;
    return rc;
}

int dtrain_checkpoint_save(dtrain_model *m, const char *dir, int epochs_done, char *path_out, size_t path_len)
{
    if (!m) return DTRAIN_EUSAGE;
    struct dt_trainer *t = &m->t;
    dt_status st = {0};
    if (m->pending)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_save: a step is in progress; call dtrain_apply_gradients first");
    else if (!dir || !*dir)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_save: expected a directory, found %s", dir ? "\"\"" : "NULL");
    else if (strlen(dir) >= sizeof m->last_dir - 64)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_save: the directory name is too long (%zu bytes)", strlen(dir));
    else if (epochs_done < 0)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_save: epochs_done: expected 0 or more, found %d", epochs_done);
    if (dt_status_agree(&st, t->comm) != DT_OK || data_checksum(m, &st) != DT_OK) return dt_api_error(m->ctx, &st);
    history_reserve(m, epochs_done);
    double zero[3] = {0.0, 0.0, 0.0};
    char path[4096] = "";
    if (dt_trainer_save(t, dir, m->cfg.keep, epochs_done, 0, zero, path, sizeof path, &st) != DT_OK)
        return dt_api_error(m->ctx, &st);
    snprintf(m->last_dir, sizeof m->last_dir, "%s", dir);
    if (path_out && path_len) snprintf(path_out, path_len, "%s", path);
    return dt_api_error(m->ctx, &st);
}

int dtrain_checkpoint_restore(dtrain_model *m, const char *what, int *epochs_done)
{
    if (!m) return DTRAIN_EUSAGE;
    struct dt_trainer *t = &m->t;
    struct dt_config *cfg = &m->cfg;
    dt_status st = {0};
    if (epochs_done) *epochs_done = 0;
    if (m->pending)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_restore: a step is in progress; call dtrain_apply_gradients first");
    else if (!what || !*what)
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_restore: expected \"latest\", a directory or a file, found %s",
                what ? "\"\"" : "NULL");
    else if (!strcmp(what, "latest") && !m->last_dir[0])
        dt_fail(&st, DT_EUSAGE, "dtrain_checkpoint_restore: \"latest\" names the directory of this model's last "
                "dtrain_checkpoint_save, and there was none; give the directory");
    if (dt_status_agree(&st, t->comm) != DT_OK) return dt_api_error(m->ctx, &st);
    /* A directory resumes as dtrain --resume latest --checkpoint-dir DIR
     * (none there yet is a fresh start); rank 0's file system decides. */
    int isdir = 0;
    if (!strcmp(what, "latest")) isdir = 1;
    else if (t->rank == 0) {
        struct stat sb;
        isdir = stat(what, &sb) == 0 && S_ISDIR(sb.st_mode);
    }
    DT_MPI_CHECK(MPI_Bcast(&isdir, 1, MPI_INT, 0, t->comm));
    if (data_checksum(m, &st) != DT_OK) return dt_api_error(m->ctx, &st);
    cfg->resume = isdir ? "latest" : what;
    cfg->checkpoint_dir = isdir ? (!strcmp(what, "latest") ? m->last_dir : what) : NULL;
    cfg->epochs = m->hist_cap; /* the history train/state.c may fill */
    t->resumed = 0;
    int rc = dt_trainer_resume_params(t, &st);
    if (dt_status_agree(&st, t->comm) == DT_OK && t->resumed) {
        /* Uploaded to the model's block: where the node shares it
         * (central-storage), every local rank wrote the same values. */
        if (t->model.params_borrowed) DT_MPI_CHECK(MPI_Barrier(t->coll.topo.node));
        rc = dt_trainer_resume_optimizer(t, &st);
        if (dt_status_agree(&st, t->comm) == DT_OK && epochs_done) *epochs_done = t->start_epoch;
    }
    (void)rc;
    cfg->resume = NULL;
    cfg->checkpoint_dir = NULL;
    cfg->epochs = 1;
    return dt_api_error(m->ctx, &st);
}

int dtrain_model_free(dtrain_model *m)
{
    if (!m) return DTRAIN_OK;
    dt_trainer_free(&m->t); /* what the model made: its data and loader are the dataset's, left alone */
    dt_tfevents_close(m->hist_w);
    m->ds->nusers--;
    m->ctx->nusers--;
    free(m->model_name);
    free(m->strategy_name);
    free(m->optimizer_name);
    free(m->allreduce_name);
    free(m);
    return DTRAIN_OK;
}

/* Rank 0's event file in LOGDIR/train, opened at the first call and again
 * when logdir changes (the previous one closed). */
static int histogram_writer(dtrain_model *m, const char *logdir, dt_status *st)
{
    char dir[4096];
    st->code = DT_OK;
    if (m->t.rank != 0 || (m->hist_w && !strcmp(m->hist_dir, logdir))) return DT_OK;
    dt_tfevents_close(m->hist_w);
    m->hist_w = NULL;
    if (snprintf(dir, sizeof dir, "%s/train", logdir) >= (int)sizeof dir)
        return dt_fail(st, DT_EUSAGE, "dtrain_write_histograms: the logdir name is too long");
    if (!(m->hist_w = dt_tfevents_open(dir, st))) return st->code;
    snprintf(m->hist_dir, sizeof m->hist_dir, "%s", logdir);
    return DT_OK;
}

int dtrain_write_histograms(dtrain_model *m, const char *logdir, long long step, int what)
{
    if (!m) return DTRAIN_EUSAGE;
    dt_status st = {0};
    if (!logdir || !*logdir)
        dt_fail(&st, DT_EUSAGE, "dtrain_write_histograms: logdir is %s; expected a directory", logdir ? "empty" : "NULL");
    else if (what < 1 || what > (DTRAIN_HISTOGRAM_WEIGHTS | DTRAIN_HISTOGRAM_GRADS))
        dt_fail(&st, DT_EUSAGE, "dtrain_write_histograms: what is %d; expected DTRAIN_HISTOGRAM_WEIGHTS, "
                "DTRAIN_HISTOGRAM_GRADS or both", what);
    else if (m->pending)
        dt_fail(&st, DT_EUSAGE, "dtrain_write_histograms: a step is in progress; call dtrain_apply_gradients first");
    else histogram_writer(m, logdir, &st);
    if (dt_status_agree(&st, m->t.comm) != DT_OK) return dt_api_error(m->ctx, &st);
    dt_trainer_histograms(&m->t, m->hist_w, what, (int64_t)step, NULL, &st);
    return dt_api_error(m->ctx, &st);
}

_Static_assert((int)DTRAIN_HISTOGRAM_WEIGHTS == (int)DT_HIST_WEIGHTS && (int)DTRAIN_HISTOGRAM_GRADS == (int)DT_HIST_GRADS,
               "libdtrain's histogram bits are --histograms' own");
