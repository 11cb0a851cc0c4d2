/* train.c: the synchronous data-parallel loop (see train.h). */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "checkpoint/keras.h"
#include "runtime/checks.h"
#include "runtime/consistency.h"
#include "collectives/sum_large.h"
#include "data/augment.h"
#include "data/synthetic.h"
#include "runtime/device.h"
#include "runtime/half.h"
#include "metrics/timeline.h"
#include "nn/model_file.h"
#include "runtime/fault.h"
#include "runtime/rma.h"
#include "train/train.h"


/* The learning rate per step (optim/schedule.h), from the strategy's rate,
 * the replicas and the steps per epoch. Collective verdict. */
static int setup_schedule(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_strategy *s = &t->strategy;
    struct dt_lr_schedule *sc = &t->sched;
    long spe = t->plan.steps;
    if (cfg->steps_per_epoch > 0 && cfg->steps_per_epoch < spe) spe = cfg->steps_per_epoch;
    if (cfg->grad_accum > 1) spe = (spe + cfg->grad_accum - 1) / cfg->grad_accum; /* updates, not micro-batches */
    memset(sc, 0, sizeof *sc);
    sc->kind = cfg->lr_schedule;
    sc->peak = s->optim_cfg.lr * (cfg->lr_scale_linear ? (float)s->nreplicas : 1.0f);
    sc->min_lr = cfg->lr_min;
    sc->factor = cfg->lr_factor;
    sc->steps_per_epoch = spe;
    sc->total = spe * cfg->epochs;
    sc->warmup = (long)lroundf(cfg->warmup_epochs * (float)spe);
    if (cfg->warmup_epochs > 0 && sc->warmup < 1) sc->warmup = 1;
    sc->start = cfg->lr_scale_linear ? s->optim_cfg.lr : sc->peak / (float)(sc->warmup ? sc->warmup : 1);
    sc->nboundaries = cfg->n_lr_boundaries;
    sc->boundaries = t->lr_epochs;
    for (int i = 0; i < cfg->n_lr_boundaries; i++) t->lr_epochs[i] = cfg->lr_boundaries[i] - 1; /* 0-based */
    st->code = DT_OK;
    if (s->ops == &dt_strategy_parameter_server && cfg->grad_accum > 1)
        dt_fail(st, DT_EUSAGE, "--grad-accum %d: the parameter server applies each worker's push as it comes; use a "
                "synchronous strategy (or a larger --batch-size)", cfg->grad_accum);
    else if (s->ops == &dt_strategy_parameter_server && cfg->sync_bn)
        dt_fail(st, DT_EUSAGE, "--sync-bn: the parameter server's workers do not step together; use a synchronous "
                "strategy (without --sync-bn, batch normalization's moving statistics are averaged over the "
                "workers at each epoch's end)");
    else if (s->ops == &dt_strategy_parameter_server && (sc->kind != DT_LR_CONSTANT || sc->warmup > 0))
        dt_fail(st, DT_EUSAGE, "--lr-schedule/--warmup-epochs: the parameter server applies gradients as they arrive, "
                "not in steps; use a constant rate (with --lr-scale if you like) or a synchronous strategy");
    else if (sc->kind == DT_LR_COSINE && cfg->lr_min > sc->peak)
        dt_fail(st, DT_EUSAGE, "--lr-min %g: above the peak rate %g", (double)cfg->lr_min, (double)sc->peak);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    if (s->optim.ops) s->optim.cfg.lr = dt_lr_at(sc, t->global_step); /* the parameter server's constant rate */
    return DT_OK;
}

/* --cache-limit's default: a quarter of the node's memory, shared by its ranks. */
static size_t default_cache_bytes(const struct dt_trainer *t)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t node = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)4 << 30;
    int local = t->coll.topo.local_size > 0 ? t->coll.topo.local_size : 1;
    return node / 4 / (size_t)local;
}

/* The training batches (data/loader.h), after the plan. */
static void open_loader(struct dt_trainer *t)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_loader_config lc = {.batch = cfg->batch_size, .prefetch = cfg->prefetch, .augment = t->augment,
                                  .seed = cfg->seed};
    if (cfg->cache) lc.cache_bytes = cfg->cache_limit_mib ? (size_t)cfg->cache_limit_mib << 20 : default_cache_bytes(t);
    lc.fail_at = dt_fault_read_error_at(t->rank);
    char note[1100];
    dt_loader_open(&t->loader, &lc, &t->data, &t->plan, t->be, note, sizeof note);
    if (note[0] && t->rank == 0 && cfg->verbose >= DT_NORMAL)
        fprintf(stderr, "dtrain: note: --prefetch %d: %s, so its rows are read through HDF5, which is not "
                "thread-safe here; batches are read in the training loop instead\n", cfg->prefetch, note);
}

static void sync_bn_reduce(void *arg, double *buf, int n);
static int nan_abort(struct dt_trainer *t, int epoch, int64_t s, float local_loss, dt_status *st);

/* The strategy's alive hook: a parameter server serving is not stalled. */
static void watchdog_alive(void *w) { dt_watchdog_alive(w); }

int dt_trainer_init(struct dt_trainer *t, const struct dt_config *cfg, MPI_Comm comm, dt_status *st)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    st->code = DT_OK;
    struct dt_coll_config cc = {.algorithm = cfg->allreduce, .ranks_per_node = cfg->ranks_per_node,
                                .compress = cfg->compress, .compress_cross_only = cfg->compress_cross_only,
                                .table = cfg->allreduce_table};
    if (dt_coll_init(&t->coll, comm, &cc, st) != DT_OK) return st->code;
    t->comm = t->coll.topo.world;
    MPI_Comm_rank(t->comm, &t->rank);
    MPI_Comm_size(t->comm, &t->nranks);
    /* The backend and device (threads, precision), agreed on by all ranks. */
    if (dt_device_open(&t->device, cfg, &t->coll.topo, st) != DT_OK) return st->code;
    t->be = t->device.be;

    if (cfg->synthetic) {
        struct dt_synthetic sy;
        dt_synthetic_parse(cfg->synthetic, &sy, st); /* checked by the options already */
        dt_dataset_open_synthetic(&t->data, &sy, cfg->seed);
    }
    else if (dt_dataset_open(&t->data, cfg->inputs, cfg->ninputs, t->comm, st) != DT_OK)
        return st->code;

    int policy = dt_shard_resolve(cfg->shard_policy, cfg->ninputs, t->nranks);
    t->policy = policy;
    if (policy < 0)
        dt_fail(st, DT_EUSAGE, "--shard-policy file: %d shard file%s for %d ranks; each rank needs at "
                "least one file (use --shard-policy data, or write more shards with dtrain-prep --shards)",
                cfg->ninputs, cfg->ninputs == 1 ? "" : "s", t->nranks);
    else if (dt_model_is_file(cfg->model) &&
             dt_model_file_parse(cfg->model, t->data.classes, t->specs, &t->nspecs, st) != DT_OK) {
        /* the file itself is wrong: a usage error, as it is */
    }
    else if (dt_model_build(&t->model, cfg->model, t->data.shape, t->data.classes, cfg->dropout, st) != DT_OK) {
        /* The model is fine in itself, so the data's shape is what does not fit. */
        dt_status why = *st;
        dt_fail(st, DT_EINPUT, "%s: %dx%dx%d images do not fit model %s: %s", cfg->inputs[0],
                t->data.shape.h, t->data.shape.w, t->data.shape.c, cfg->model, why.msg);
    }
    if (st->code == DT_OK) dt_model_check_backend(&t->model, t->be, st);
    if (st->code == DT_OK && cfg->cuda_graphs) dt_step_graphs_init(&t->graphs, &t->model, t->be, st);
    if (st->code == DT_OK && dt_model_is_graph(&t->model)) { /* refused now, not after training */
        const char *keras = cfg->export_keras ? cfg->export_keras
                            : cfg->save_best && strstr(cfg->save_best, ".weights.h5") ? cfg->save_best : NULL;
        if (keras)
            dt_fail(st, DT_EUSAGE, "%s %s: model %s has add or route layers, and the export writes Keras Sequential "
                    "models only; save a checkpoint (--checkpoint-dir) instead",
                    keras == cfg->export_keras ? "--export-keras" : "--save-best", keras, t->model.name);
    }
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    {   /* Before anything passes buffers between ranks: the same model and run everywhere. */
        static const char *const names[] = {"parameters", "layers", "model buffers", "batch size", "epochs", "seed",
                                            "training samples", "classes", "strategy", "optimizer", "model"};
        const long vals[] = {(long)t->model.nparams, t->model.nlayers, (long)t->model.nbuffers, cfg->batch_size,
                             cfg->epochs, (long)cfg->seed, (long)t->data.split[DT_TRAIN].n, t->data.classes,
                             dt_consistency_hash(cfg->strategy), dt_consistency_hash(cfg->optimizer),
                             dt_consistency_hash(cfg->model)};
        const char *const text[] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, cfg->strategy, cfg->optimizer,
                                    cfg->model};
        if (dt_consistency_check_text(t->comm, "before the first collective of training", vals, names, text, 11, st) !=
            DT_OK)
            return st->code;
    }

    t->history = dt_xcalloc((size_t)cfg->epochs, sizeof *t->history);
    dt_monitor_init(&t->stopper, cfg->monitor, cfg->patience, cfg->min_delta);
    dt_monitor_init(&t->saver, cfg->monitor, -1, 0.0);
    int validates = cfg->validation && t->data.split[DT_TEST].present && t->data.split[DT_TEST].n > 0;
    if ((cfg->patience >= 0 || cfg->save_best) && !strncmp(cfg->monitor, "val_", 4) && !validates) {
        dt_fail(st, DT_EUSAGE, "--monitor %s: there is no validation (%s); monitor loss or accuracy instead",
                cfg->monitor, cfg->validation ? "the input has no /test split" : "--no-validation was given");
        return dt_status_agree(st, t->comm);
    }
    dt_model_create(&t->model, t->be, cfg->batch_size);
    if (cfg->sync_bn) { /* batchnorm sums its statistics over the replicas */
        DT_MPI_CHECK(MPI_Comm_dup(t->comm, &t->bn_comm));
        t->model.reduce = sync_bn_reduce;
        t->model.reduce_arg = t;
    }
    if (t->rank == 0) dt_model_init_params(&t->model, cfg->seed);
    {   /* through host memory: the parameters may live on a GPU */
        float *host = dt_xmalloc(sizeof(float) * (t->model.nparams ? t->model.nparams : 1));
        if (t->rank == 0) t->be->download(host, t->model.params, sizeof(float) * t->model.nparams);
        DT_MPI_CHECK(MPI_Bcast(host, (int)t->model.nparams, MPI_FLOAT, 0, t->comm));
        t->be->upload(t->model.params, host, sizeof(float) * t->model.nparams);
        free(host);
        /* and the buffers (batchnorm's moving statistics: zeros and ones) */
        host = dt_xmalloc(sizeof(float) * (t->model.nbuffers + 1));
        if (t->rank == 0) t->be->download(host, t->model.buffers, sizeof(float) * t->model.nbuffers);
        DT_MPI_CHECK(MPI_Bcast(host, (int)t->model.nbuffers, MPI_FLOAT, 0, t->comm));
        t->be->upload(t->model.buffers, host, sizeof(float) * t->model.nbuffers);
        free(host);
    }

    dt_rng_seed(&t->dropout_rng, cfg->seed, 0xd50000ULL + (uint64_t)t->rank); /* a checkpoint may replace it */
    if ((cfg->checkpoint_dir || cfg->resume) && dt_trainer_data_checksum(t, st) != DT_OK) return st->code;
    if (cfg->resume && dt_trainer_resume_params(t, st) != DT_OK) return st->code;

    /* The strategy places the gradient (and parameter) blocks, buckets and
     * the optimizer; its refusals (mirrored across nodes, ...) are agreed. */
    dt_strategy_create(&t->strategy, cfg, &t->model, &t->coll, st);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    if (t->resumed && dt_trainer_resume_optimizer(t, st) != DT_OK) return st->code;
    if (t->resumed) {
        t->saver.best = t->stopper.best;
        t->saver.best_epoch = t->stopper.best_epoch;
        t->skipped_before = t->strategy.loss_scale.skipped;
        if (t->rank == 0 && cfg->verbose >= DT_NORMAL)
            printf("dtrain: resuming from %s: %d epoch%s and %lld step%s done\n", t->resume_path, t->start_epoch,
                   t->start_epoch == 1 ? "" : "s", (long long)t->start_step, t->start_step == 1 ? "" : "s");
        /* --restore-best: the best epoch's weights, kept in DIR/best. */
        if (cfg->restore_best && t->stopper.best_epoch >= 0 && dt_trainer_resume_best(t, st) != DT_OK) {
            if (t->rank == 0)
                fprintf(stderr, "dtrain: note: --restore-best: the best weights (epoch %d) cannot be read (%s); "
                        "the best epoch from now on will be restored\n", t->stopper.best_epoch + 1, st->msg);
            st->code = DT_OK;
            t->stopper.best_epoch = -1;
            t->stopper.best = t->stopper.maximize ? -INFINITY : INFINITY;
        }
    }
    if (cfg->checkpoint_dir) dt_signals_install();
    /* Enter/leave may publish to the table only when no other thread uses
     * MPI then, or when MPI lets threads call it at once. */
    const int publish = (!t->strategy.overlap && !t->strategy.cuda) || dt_mpi_thread_level() == MPI_THREAD_MULTIPLE;
    if (dt_watchdog_start(&t->watchdog, t->comm, cfg->stall_timeout, publish, st) != DT_OK)
        return dt_status_agree(st, t->comm);
    t->strategy.alive = watchdog_alive;
    t->strategy.alive_arg = &t->watchdog;
    if (t->watchdog.on && t->watchdog.how != DT_WATCH_PUT && t->rank == 0 && cfg->verbose >= DT_NORMAL)
        fprintf(stderr, "dtrain: note: --stall-timeout: no one-sided window here (%s); the watchdog %s\n",
                t->watchdog.why, t->watchdog.how == DT_WATCH_SEND
                ? "gathers progress with two-sided messages instead"
                : "still ends a stalled job, but cannot name the late ranks (MPI gives no MPI_THREAD_MULTIPLE)");
    t->last_ckpt_time = MPI_Wtime();

    int64_t *per_file = dt_xcalloc((size_t)cfg->ninputs, sizeof(int64_t));
    for (int f = 0; f < cfg->ninputs; f++)
        per_file[f] = t->data.split[DT_TRAIN].file_start[f + 1] - t->data.split[DT_TRAIN].file_start[f];
    /* Replicas only: a parameter server's servers train on nothing (they take
     * worker 0's plan, to know the step count). */
    int replica = t->strategy.replica >= 0 ? t->strategy.replica : 0;
    dt_shard_init(&t->plan, t->policy, replica, t->strategy.nreplicas, cfg->batch_size, cfg->ninputs, per_file);
    free(per_file);

    size_t row = dt_shape_size(t->data.shape), B = (size_t)cfg->batch_size;
    if (cfg->augment) dt_augment_parse(cfg->augment, &t->augment, st); /* checked by the options */
    open_loader(t);
    t->dev_images = t->be->alloc(row * B);
    t->dev_labels = t->be->alloc(B);
    if (setup_schedule(t, st) != DT_OK) return st->code; /* needs the plan's steps per epoch */
    t->idx_scratch = dt_xmalloc(sizeof(int64_t) * B);
    if (cfg->grad_accum > 1) t->accum = t->be->alloc(sizeof(float) * (t->model.nparams ? t->model.nparams : 1));
    return DT_OK;
}

/* Put batch b's n samples into the model's input. On the GPU the copies
 * are asynchronous (pinned memory): the loader does not write b's slot again
 * before the next step's batch is asked for, after this step's end, which
 * waits for the device. */
static void load_batch(struct dt_trainer *t, const struct dt_batch *b, int n)
{
    size_t bytes = dt_shape_size(t->data.shape) * (size_t)n;
    if (n == 0) return;
    t->be->upload(t->dev_images, b->images, bytes);
    t->be->upload(t->dev_labels, b->labels, (size_t)n);
    t->be->images_to_float(t->model.act[0], t->dev_images, bytes);
}

/* Step s's batch from the loader, the wait counted as data time and shown
 * on the timeline as "read batch". */
static const struct dt_batch *next_batch(struct dt_trainer *t, int64_t s, double *data_seconds)
{
    double tr = MPI_Wtime();
    DT_TL_BEGIN(tl_read);
    const struct dt_batch *b = dt_loader_get(&t->loader, s);
    DT_TL_END(tl_read, DT_TL_DATA, "read batch", NULL);
    *data_seconds += MPI_Wtime() - tr;
    return b;
}

/* Collective, on every rank once any rank's loss sum came out non-finite: a
 * rank whose loader failed sends NaN in its statistics (data/loader.h: it
 * trains on empty batches meanwhile), so the failure reaches every rank
 * through the step's own reduction, at no cost while nothing fails. Returns
 * the read error (naming the file) if any rank has one, else DT_OK: the loss
 * really is not finite. */
static int data_failure(struct dt_trainer *t, dt_status *st)
{
    const dt_status *err = dt_loader_error(&t->loader);
    if (err) *st = *err;
    else st->code = DT_OK;
    return dt_status_agree(st, t->comm);
}

void dt_trainer_evaluate(struct dt_trainer *t, double *loss, double *accuracy)
{
    DT_TL_BEGIN(tl_eval);
    const struct dt_split *sp = &t->data.split[DT_TEST];
    dt_status st = {0};
    /* Contiguous near-equal slices of the test split, one per rank. */
    int64_t q = sp->n / t->nranks, rem = sp->n % t->nranks;
    int64_t begin = t->rank * q + (t->rank < rem ? t->rank : rem), end = begin + q + (t->rank < rem);
    double sums[3] = {0.0, 0.0, 0.0}; /* loss, correct, samples */
    struct dt_batch *b = dt_loader_spare(&t->loader); /* no epoch runs now */
    for (int64_t at = begin; at < end; at += t->cfg->batch_size) {
        int n = (int)(end - at < t->cfg->batch_size ? end - at : t->cfg->batch_size);
        for (int i = 0; i < n; i++) b->idx[i] = at + i;
        if (dt_dataset_read(&t->data, DT_TEST, b->idx, n, b->images, b->labels, &st) != DT_OK)
            DT_DIE("%s", st.msg);
        load_batch(t, b, n);
        dt_model_forward(&t->model, n, 0, NULL);
        struct dt_loss_result r = dt_model_loss(&t->model, t->dev_labels, n, 0.0f);
        sums[0] += r.loss_sum;
        sums[1] += (double)r.correct;
        sums[2] += n;
    }
    dt_allreduce_sum_f64(sums, 3, t->comm);
    DT_TL_END(tl_eval, DT_TL_COMPUTE, "evaluate", NULL);
    *loss = sums[2] > 0 ? sums[0] / sums[2] : (double)NAN;
    *accuracy = sums[2] > 0 ? sums[1] / sums[2] : (double)NAN;
}

/* --nan-policy abort: the reduced gradient of step s holds a NaN or an
 * infinity (every replica knows it). Where: the first such parameter's
 * layer, from each rank's gradient block (the reduced one for the all-reduce
 * strategies, the local one for sharded), and the ranks whose own loss was
 * not finite. Collective; returns the agreed error. */
static int nan_abort(struct dt_trainer *t, int epoch, int64_t s, float local_loss, dt_status *st)
{
    struct dt_model *m = &t->model;
    float *g = dt_xmalloc(sizeof(float) * (m->nparams + 1));
    t->be->download(g, m->grads, sizeof(float) * m->nparams);
    long mine[2] = {!isfinite(local_loss), -1};
    for (size_t i = 0; i < m->nparams && mine[1] < 0; i++)
        if (!isfinite(g[i])) mine[1] = (long)i;
    free(g);
    long *all = dt_xcalloc(2 * (size_t)t->nranks, sizeof(long));
    DT_MPI_CHECK(MPI_Allgather(mine, 2, MPI_LONG, all, 2, MPI_LONG, t->comm));
    char layer[96] = "", ranks[256] = "";
    long first = -1;
    for (int r = 0; r < t->nranks; r++) {
        if (all[2 * r + 1] >= 0 && (first < 0 || all[2 * r + 1] < first)) first = all[2 * r + 1];
        size_t n = strlen(ranks);
        if (all[2 * r] && n + 16 < sizeof ranks) snprintf(ranks + n, sizeof ranks - n, "%s%d", n ? ", " : "", r);
    }
    free(all);
    for (int i = 0; i < m->nlayers && first >= 0; i++)
        if ((size_t)first >= m->layers[i].param_offset && (size_t)first < m->layers[i].param_offset + m->layers[i].nparams)
            snprintf(layer, sizeof layer, " (first in layer %s, parameter %ld of the block)", m->layers[i].name, first);
    return dt_fail(st, DT_ERUNTIME, "epoch %d step %lld: the gradient holds a NaN or infinity%s; %s%s; try a smaller "
                   "--lr, or --nan-policy skip to drop such steps", epoch + 1, (long long)s + 1, layer,
                   ranks[0] ? "the loss was not finite on rank " : "the loss was finite on every rank (it came up in backward)",
                   ranks);
}

/* --sync-bn: the model's reduction (nn/layer.h), on a communicator of its own. */
static void sync_bn_reduce(void *arg, double *buf, int n)
{
    struct dt_trainer *t = arg;
    DT_TL_BEGIN(tl0);
    dt_watchdog_enter(&t->watchdog, "a --sync-bn reduction");
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, t->bn_comm));
    dt_watchdog_leave(&t->watchdog);
    DT_TL_END(tl0, DT_TL_COMM, "sync-bn", NULL);
}

/* Batch normalization's moving statistics without --sync-bn: each replica
 * moves them by its own batch; here they become the replicas' mean (what
 * tf.distribute's MEAN aggregation of these variables gives), so every
 * rank evaluates and checkpoints the same model. Servers of a parameter
 * server hold no statistics of their own and count for nothing. */
static void average_buffers(struct dt_trainer *t)
{
    struct dt_model *m = &t->model;
    if (!m->nbuffers || t->cfg->sync_bn) return;
    float *host = dt_xmalloc(sizeof(float) * m->nbuffers);
    t->be->download(host, m->buffers, sizeof(float) * m->nbuffers);
    if (t->strategy.replica < 0) memset(host, 0, sizeof(float) * m->nbuffers);
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host, (int)m->nbuffers, MPI_FLOAT, MPI_SUM, t->comm));
    float inv = 1.0f / (float)t->strategy.nreplicas;
    for (size_t i = 0; i < m->nbuffers; i++) host[i] *= inv;
    t->be->upload(m->buffers, host, sizeof(float) * m->nbuffers);
    free(host);
}

void dt_trainer_average_buffers(struct dt_trainer *t) { average_buffers(t); }

static void grads_ready(void *ctx, size_t offset)
{
    struct dt_strategy *s = ctx;
    s->ops->grads_ready(s, offset);
}

/* After step `done` (of steps) of epoch: a checkpoint when the step count,
 * the clock (rank 0's) or a signal (any rank's) asks; all ranks agree. A
 * signal ends the run with DT_EXIT_REQUEUE once the checkpoint is written. */
static int step_checkpoint(struct dt_trainer *t, int epoch, int64_t done, int64_t steps, const double sums[2],
                           int64_t samples, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int flags[2] = {dt_signals_pending(),
                    t->rank == 0 && cfg->ckpt_seconds > 0 && MPI_Wtime() - t->last_ckpt_time >= cfg->ckpt_seconds};
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, t->comm));
    int want = flags[1] || (cfg->ckpt_every_steps && t->global_step % cfg->ckpt_every == 0);
    if (done == steps) { /* the epoch's end writes it (and sees the signal), after validation */
        t->ckpt_pending |= want;
        return DT_OK;
    }
    if (!want && !flags[0]) return DT_OK;
    double progress[3] = {sums[0], sums[1], (double)samples};
    DT_TL_BEGIN(tl_ckpt);
    if (dt_trainer_save(t, cfg->checkpoint_dir, cfg->keep, epoch, done, progress, t->last_ckpt, sizeof t->last_ckpt, st) != DT_OK)
        return st->code;
    DT_TL_END(tl_ckpt, DT_TL_COMPUTE, "checkpoint", NULL);
    t->last_ckpt_time = MPI_Wtime();
    if (cfg->verbose >= DT_VERBOSE && t->rank == 0) printf("checkpoint: %s\n", t->last_ckpt);
    if (flags[0])
        return dt_fail(st, DT_EXIT_REQUEUE, "%s received: checkpoint %s written after epoch %d step %lld; exiting "
                       "with %d so the job can be requeued (resume with --resume latest)",
                       flags[0] == SIGTERM ? "SIGTERM" : "SIGUSR1", t->last_ckpt, epoch + 1, (long long)done,
                       DT_EXIT_REQUEUE);
    return DT_OK;
}

static int train_epoch(struct dt_trainer *t, int epoch, FILE *out, struct dt_epoch_stats *es, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int64_t steps = t->plan.steps;
    double sums[2] = {0.0, 0.0}, epoch_sums[2] = {0.0, 0.0};
    if (cfg->steps_per_epoch > 0 && cfg->steps_per_epoch < steps) steps = cfg->steps_per_epoch;
    dt_shard_epoch(&t->plan, cfg->seed, epoch, 1);
    dt_reducer_stats_reset(&t->strategy.reducer);
    struct dt_strategy *strat = &t->strategy;
    const int replica = strat->replica >= 0, per_step = !strat->local_stats;
    double t0 = MPI_Wtime();
    int64_t s0 = 0; /* a resumed epoch starts where its checkpoint was taken */
    if (t->resumed && epoch == t->start_epoch && t->start_step > 0 && t->start_step < steps) {
        s0 = t->start_step;
        epoch_sums[0] = t->start_progress[0];
        epoch_sums[1] = t->start_progress[1];
        es->samples = (int64_t)t->start_progress[2];
    }
    const int ps = strat->ops == &dt_strategy_parameter_server; /* checkpoints at epoch ends only */
    double data_seconds = 0.0;
    if (replica) dt_loader_start(&t->loader, epoch, s0, steps); /* the epoch's order is drawn */
    dt_report_epoch_begin(&t->report, epoch, steps);
    /* --grad-accum K: K micro-batches (steps of the data plan) make one
     * update; their gradients are summed in t->accum and reduced once. */
    const int64_t K = cfg->grad_accum > 1 ? cfg->grad_accum : 1;
    int64_t group_global = 0, updates = 0;
    float group_stats[DT_STATS] = {0.0f, 0.0f};
    for (int64_t s = s0; s < steps; s++) {
        int64_t global;
        if (!replica) { /* a parameter server's server: it serves in epoch_end */
            dt_shard_step(&t->plan, s, t->idx_scratch, &global);
            es->samples += global;
            continue;
        }
        const struct dt_batch *b = next_batch(t, s, &data_seconds);
        const int first = (s - s0) % K == 0, last = (s - s0) % K == K - 1 || s + 1 == steps;
        if (first) { /* the update's samples over all replicas: its loss is their mean */
            group_global = b->global;
            for (int64_t u = s + 1; u < s + K && u < steps; u++) { /* the later micro-batches' (K > 1) */
                int64_t g;
                dt_shard_step(&t->plan, u, t->idx_scratch, &g);
                group_global += g;
            }
            group_stats[0] = group_stats[1] = 0.0f;
            dt_watchdog_step(&t->watchdog, epoch + 1, s + 1);
            /* The ranks agree on where they are before this step's first
             * collective: each epoch's start, every 100 updates, or every
             * step with --debug-collectives (workers and servers of a
             * parameter server do not step together). */
            if (!ps && (s == s0 || cfg->debug_collectives || (t->global_step + 1) % 100 == 0)) {
                static const char *const names[] = {"epoch", "step", "update", "parameters", "gradient buckets",
                                                    "bucket layout"};
                const struct dt_reducer *rd = &strat->reducer;
                const long vals[] = {epoch + 1, (long)s + 1, t->global_step + 1, (long)t->model.nparams, rd->nbuckets,
                                     rd->start ? dt_consistency_hash_longs((const long *)rd->start, (size_t)rd->nbuckets + 1) : 0};
                char when[64];
                snprintf(when, sizeof when, "before epoch %d step %lld", epoch + 1, (long long)s + 1);
                if (dt_consistency_check(t->comm, when, vals, names, 6, st) != DT_OK) return st->code;
            }
            dt_fault_stall_point(t->rank, t->global_step + 1);
        }
        int n = b->n;
        global = b->global;
        es->samples += global;
        load_batch(t, b, n);
        if (strat->ops->pull && first) { /* a parameter-server worker may wait here for the others */
            dt_watchdog_enter(&t->watchdog, "a parameter-server pull");
            strat->ops->pull(strat);
            dt_watchdog_leave(&t->watchdog);
        }
        float scale = strat->scale_local ? 1.0f / (float)(n > 0 ? n : 1) : 1.0f / (float)group_global;
        /* --cuda-graphs: forward, loss and backward in one launch; the
         * gradients are then final, and the buckets go out after it. A
         * step with an injected overflow (tests) runs plainly. */
        const int graphed = t->graphs.on && n > 0 && !dt_fault_overflow_at(t->global_step + 1);
        struct dt_loss_result r = {0.0, 0};
        if (graphed) {
            DT_TL_BEGIN(tl_graph);
            r = dt_step_graphs_run(&t->graphs, &t->model, t->dev_labels, n, scale * strat->loss_scale.scale,
                                   &t->dropout_rng, t->rank == 0 && cfg->verbose ? stdout : NULL);
            DT_TL_END(tl_graph, DT_TL_COMPUTE, "forward+loss+backward (graph)", NULL);
        }
        else
            dt_model_forward(&t->model, n, 1, &t->dropout_rng);
        if (!t->loader.threaded) { /* while a GPU runs the forward pass, the CPU reads the next batch */
            double tr = MPI_Wtime();
            DT_TL_BEGIN(tl_read);
            dt_loader_ahead(&t->loader, s + 1);
            DT_TL_END(tl_read, DT_TL_DATA, "read batch", NULL);
            data_seconds += MPI_Wtime() - tr;
        }
        if (!graphed) {
            DT_TL_BEGIN(tl_loss);
            r = dt_model_loss(&t->model, t->dev_labels, n, scale * strat->loss_scale.scale);
            DT_TL_END(tl_loss, DT_TL_COMPUTE, "loss", NULL);
        }
        group_stats[0] += (float)r.loss_sum;
        group_stats[1] += (float)r.correct;
        if (b->failed) group_stats[0] = NAN; /* tells every rank: see data_failure */
        if (!last) { /* a micro-batch: its gradient joins the sum, nothing is reduced yet */
            if (!graphed) dt_model_backward(&t->model, n, &t->dropout_rng);
            if (first) t->be->copy(t->accum, t->model.grads, sizeof(float) * t->model.nparams);
            else t->be->accumulate(t->accum, t->model.grads, t->model.nparams);
            continue;
        }
        t->global_step++;
        updates++;
        if (dt_fault_overflow_at(t->global_step) && t->strategy.replica == 0 && n > 0) {
            const float inf = INFINITY;
            uint32_t bits; /* room for one element of any activation type */
            dt_act_encode(t->model.act_type, &bits, &inf, 1);
            t->be->upload(t->model.dact[t->model.nlayers], &bits, dt_act_size(t->model.act_type));
        }
        float stats[DT_STATS] = {group_stats[0], group_stats[1]};
        t->strategy.ops->begin(&t->strategy, stats);
        if (first && graphed) /* backward ran in the graph: every bucket is ready */
            dt_model_notify_all(&t->model, grads_ready, &t->strategy);
        else if (first) /* one micro-batch: buckets go out as backward finishes them */
            dt_model_backward_notify(&t->model, n, &t->dropout_rng, grads_ready, &t->strategy);
        else {
            if (!graphed) dt_model_backward(&t->model, n, &t->dropout_rng);
            t->be->accumulate(t->model.grads, t->accum, t->model.nparams);
            grads_ready(&t->strategy, 0); /* the whole block is final */
        }
        long skipped = strat->loss_scale.skipped;
        if (strat->optim.ops) strat->optim.cfg.lr = dt_lr_at(&t->sched, t->global_step - 1);
        dt_watchdog_enter(&t->watchdog, "the gradient exchange");
        t->strategy.ops->finish(&t->strategy, stats);
        dt_watchdog_leave(&t->watchdog);
        if (!ps) average_buffers(t); /* the replicas step together: each step, as TF does */
        skipped = strat->loss_scale.skipped - skipped;

        sums[0] = (double)stats[0]; /* float: ~7 digits of a batch's sum, plenty for a log */
        sums[1] = (double)stats[1]; /* a count, exact in float below 2^24 */
        if (per_step && !isfinite(sums[0]) && data_failure(t, st) != DT_OK) return st->code;
        if (strat->nonfinite) { /* every replica saw the same reduced gradient */
            if (strat->nan_policy == DT_NAN_ABORT) return nan_abort(t, epoch, s, group_stats[0], st);
            es->samples -= group_global; /* the step did not happen */
            if (cfg->verbose >= DT_VERBOSE && t->rank == 0)
                fprintf(out, "step %lld/%lld - the gradient holds a NaN or infinity: step skipped (--nan-policy skip)\n",
                        (long long)s + 1, (long long)steps);
            continue;
        }
        epoch_sums[0] += sums[0];
        epoch_sums[1] += sums[1];
        dt_report_step(&t->report, s + 1, steps, epoch_sums[0], epoch_sums[1], es->samples, t->global_step);
        if (!per_step) continue; /* only this replica's figures: summed at the epoch's end */
        if (cfg->verbose >= DT_VERBOSE && t->rank == 0)
        {
            char note[96] = "";
            if (skipped)
                snprintf(note, sizeof note, " - gradient overflow: step skipped, loss scale now %g",
                         (double)strat->loss_scale.scale);
            fprintf(out, "step %lld/%lld - loss: %.6f - accuracy: %.4f%s\n", (long long)s + 1, (long long)steps,
                    sums[0] / (double)group_global, sums[1] / (double)group_global, note);
        }
        if (!isfinite(sums[0]))
            return dt_fail(st, DT_ERUNTIME, "epoch %d step %lld: the loss is %f; try a smaller --lr",
                           epoch + 1, (long long)s + 1, sums[0]);
        if (cfg->checkpoint_dir && !ps && step_checkpoint(t, epoch, s + 1, steps, epoch_sums, es->samples, st) != DT_OK)
            return st->code;
    }
    if (!replica) dt_watchdog_step(&t->watchdog, epoch + 1, steps); /* a server: where its workers end */
    dt_watchdog_enter(&t->watchdog, "the epoch's end");
    if (strat->ops->epoch_end) strat->ops->epoch_end(strat, (long)steps);
    dt_watchdog_leave(&t->watchdog);
    if (ps) average_buffers(t); /* workers step on their own: at the epoch's end */
    if (!per_step) {
        dt_allreduce_sum_f64(epoch_sums, 2, t->comm);
        if (!isfinite(epoch_sums[0]) && data_failure(t, st) != DT_OK) return st->code;
        if (!isfinite(epoch_sums[0]))
            return dt_fail(st, DT_ERUNTIME, "epoch %d: the loss is %f; try a smaller --lr", epoch + 1, epoch_sums[0]);
    }
    es->seconds = MPI_Wtime() - t0;
    es->steps = replica ? updates : (steps - s0 + K - 1) / K;
    es->data_ms = es->steps ? 1e3 * data_seconds / (double)es->steps : 0.0;
    es->lr = dt_lr_at(&t->sched, t->global_step > 0 ? t->global_step - 1 : 0); /* the epoch's last step */
    es->skipped = strat->loss_scale.skipped + strat->nan_skipped - t->skipped_before;
    es->loss_scale = strat->loss_scale.on ? strat->loss_scale.scale : 0.0f;
    t->skipped_before = strat->loss_scale.skipped + strat->nan_skipped;
    if (t->strategy.reducer.steps) {
        es->comm_ms = 1e3 * t->strategy.reducer.comm_seconds / (double)t->strategy.reducer.steps;
        es->wait_ms = 1e3 * t->strategy.reducer.wait_seconds / (double)t->strategy.reducer.steps;
    }
    /* Rank 0's clock decides, so every rank reports the same figure. */
    MPI_Bcast(&es->seconds, 1, MPI_DOUBLE, 0, t->comm);
    es->loss = es->samples ? epoch_sums[0] / (double)es->samples : (double)NAN;
    es->accuracy = es->samples ? epoch_sums[1] / (double)es->samples : (double)NAN;
    return DT_OK;
}

static double monitored(const struct dt_epoch_stats *es, const char *name)
{
    if (!strcmp(name, "val_loss")) return es->val_loss;
    if (!strcmp(name, "val_accuracy")) return es->val_accuracy;
    if (!strcmp(name, "accuracy")) return es->accuracy;
    return es->loss;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Rank 0 writes the model's weights in Keras 3's .weights.h5 layout. */
static int export_keras(struct dt_trainer *t, const char *path, dt_status *st)
{
    st->code = DT_OK;
    if (t->rank == 0) {
        float *host = dt_xmalloc(sizeof(float) * (t->model.nparams + t->model.nbuffers + 1));
        t->be->download(host, t->model.params, sizeof(float) * t->model.nparams);
        t->be->download(host + t->model.nparams, t->model.buffers, sizeof(float) * t->model.nbuffers);
        dt_keras_export(path, &t->model, host, host + t->model.nparams, st);
        free(host);
    }
    return dt_status_agree(st, t->comm);
}

/* After an epoch: ModelCheckpoint(save_best_only), EarlyStopping, the
 * epoch-end checkpoint, and signals. Returns DT_OK to go on; *stop = 1 when
 * early stopping ends training. */
static int epoch_callbacks(struct dt_trainer *t, int e, int *stop, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const struct dt_epoch_stats *es = &t->history[e];
    double v = monitored(es, cfg->monitor);
    double zero[3] = {0.0, 0.0, 0.0};
    *stop = 0;
    if (cfg->save_best) {
        double before = t->saver.best;
        if (dt_monitor_update(&t->saver, e, v)) {
            DT_TL_BEGIN(tl_ckpt);
            int rc = ends_with(cfg->save_best, ".weights.h5")
                         ? export_keras(t, cfg->save_best, st)
                         : dt_trainer_save(t, cfg->save_best, 1, e + 1, 0, zero, NULL, 0, st);
            DT_TL_END(tl_ckpt, DT_TL_COMPUTE, "checkpoint", NULL);
            if (rc != DT_OK) return st->code;
            if (cfg->verbose >= DT_NORMAL && t->rank == 0)
                fprintf(out, "Epoch %d: %s improved from %.5f to %.5f, saving model to %s\n", e + 1, cfg->monitor,
                        before, v, cfg->save_best);
        }
    }
    if (cfg->patience >= 0) {
        if (dt_monitor_update(&t->stopper, e, v) && cfg->restore_best) {
            if (!t->best_params) t->best_params = dt_xmalloc(sizeof(float) * (t->model.nparams + t->model.nbuffers + 1));
            t->be->download(t->best_params, t->model.params, sizeof(float) * t->model.nparams);
            t->be->download(t->best_params + t->model.nparams, t->model.buffers, sizeof(float) * t->model.nbuffers);
            /* On disk too, so a restart can still restore them (DIR/best). */
            char best[4096];
            if (cfg->checkpoint_dir && snprintf(best, sizeof best, "%s/best", cfg->checkpoint_dir) < (int)sizeof best &&
                dt_trainer_save(t, best, 1, e + 1, 0, zero, NULL, 0, st) != DT_OK)
                return st->code;
        }
        *stop = t->stopper.stopped_epoch >= 0;
    }
    if (!cfg->checkpoint_dir) return DT_OK;
    int sig = dt_signals_pending();
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, t->comm));
    int every = cfg->ckpt_every_steps ? 0 : (e + 1) % cfg->ckpt_every == 0;
    int last = e + 1 == cfg->epochs || *stop;
    if (every || last || t->ckpt_pending || sig ||
        (cfg->ckpt_seconds > 0 && MPI_Wtime() - t->last_ckpt_time >= cfg->ckpt_seconds)) {
        DT_TL_BEGIN(tl_ckpt);
        if (dt_trainer_save(t, cfg->checkpoint_dir, cfg->keep, e + 1, 0, zero, t->last_ckpt, sizeof t->last_ckpt, st) != DT_OK)
            return st->code;
        DT_TL_END(tl_ckpt, DT_TL_COMPUTE, "checkpoint", NULL);
        t->ckpt_pending = 0;
        t->last_ckpt_time = MPI_Wtime();
        if (cfg->verbose >= DT_VERBOSE && t->rank == 0) fprintf(out, "checkpoint: %s\n", t->last_ckpt);
    }
    if (sig && !last)
        return dt_fail(st, DT_EXIT_REQUEUE, "%s received: checkpoint %s written after epoch %d; exiting with %d so "
                       "the job can be requeued (resume with --resume latest)", sig == SIGTERM ? "SIGTERM" : "SIGUSR1",
                       t->last_ckpt, e + 1, DT_EXIT_REQUEUE);
    return DT_OK;
}

static int fit(struct dt_trainer *t, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int validate = cfg->validation && t->data.split[DT_TEST].present && t->data.split[DT_TEST].n > 0;
    dt_report_open(&t->report, cfg, t->rank, t->nranks, out, st); /* rank 0 opens the files */
    if (dt_status_agree(st, t->comm) != DT_OK) {
        dt_report_close(&t->report);
        return st->code;
    }
    if (cfg->timeline && dt_timeline_start(t->comm, cfg->timeline, st) != DT_OK) return st->code;
    if (t->start_epoch >= cfg->epochs && t->rank == 0 && cfg->verbose >= DT_NORMAL)
        fprintf(out, "dtrain: the checkpoint has %d epochs done, --epochs is %d: nothing left to train\n",
                t->start_epoch, cfg->epochs);
    for (int e = t->start_epoch; e < cfg->epochs; e++) {
        struct dt_epoch_stats *es = &t->history[e];
        memset(es, 0, sizeof *es);
        int rc = train_epoch(t, e, out, es, st);
        dt_loader_stop(&t->loader); /* nothing reads while validation and checkpoints run */
        if (rc != DT_OK) return rc;
        if (dt_trainer_check_replicas(t, e + 1, out, st) != DT_OK) return st->code;
        if (validate) {
            double tv = MPI_Wtime();
            dt_trainer_evaluate(t, &es->val_loss, &es->val_accuracy);
            es->val_seconds = MPI_Wtime() - tv;
            es->validated = 1;
        }
        t->epochs_done = e + 1;
        dt_report_epoch_end(&t->report, e, es, t->global_step);
        int stop = 0;
        if (epoch_callbacks(t, e, &stop, out, st) != DT_OK) return st->code;
        if (stop) {
            if (cfg->verbose >= DT_NORMAL && t->rank == 0) fprintf(out, "Epoch %d: early stopping\n", e + 1);
            break;
        }
    }
    if (cfg->restore_best && t->best_params && t->stopper.best_epoch >= 0) {
        dt_trainer_set_params(t, t->best_params);
        t->be->upload(t->model.buffers, t->best_params + t->model.nparams, sizeof(float) * t->model.nbuffers);
        if (cfg->verbose >= DT_NORMAL && t->rank == 0)
            fprintf(out, "Restoring model weights from the end of the best epoch: %d.\n", t->stopper.best_epoch + 1);
        if (validate) {
            double vl, va;
            dt_trainer_evaluate(t, &vl, &va);
            if (cfg->verbose >= DT_NORMAL && t->rank == 0)
                fprintf(out, "restored weights: val_loss: %.4f - val_accuracy: %.4f\n", vl, va);
        }
    }
    if (cfg->export_keras && export_keras(t, cfg->export_keras, st) != DT_OK) return st->code;
    return DT_OK;
}

int dt_trainer_check_replicas(struct dt_trainer *t, int epoch, FILE *out, dt_status *st)
{
    size_t np = t->model.nparams, nb = t->model.nbuffers;
    float *host = dt_xmalloc(sizeof(float) * (np + nb + 1));
    t->be->download(host, t->model.params, sizeof(float) * np);
    t->be->download(host + np, t->model.buffers, sizeof(float) * nb);
    uint64_t h = dt_fnv1a64(host, sizeof(float) * (np + nb), 0); /* the values' bits */
    free(host);
    static const char *const names[] = {"parameters and statistics (a hash of their bits)"};
    const long val = (long)(h >> 1);
    char when[64];
    snprintf(when, sizeof when, "after epoch %d", epoch);
    if (dt_consistency_check(t->comm, when, &val, names, 1, st) != DT_OK) {
        size_t n = strlen(st->msg);
        snprintf(st->msg + n, sizeof st->msg - n, "; the replicas diverged (every strategy ends an epoch with the "
                 "same model on every rank): rerun with --debug-collectives, or name another --allreduce");
        return st->code;
    }
    if (t->rank == 0 && t->cfg->verbose >= DT_VERBOSE)
        fprintf(out, "epoch %d: parameters and statistics bitwise identical on all %d ranks (hash %016lx)\n", epoch,
                t->nranks, (unsigned long)val);
    return DT_OK;
}

/* Collective: --cache's figures over all ranks, one summary line from rank 0. */
static void report_cache(struct dt_trainer *t, FILE *out)
{
    const struct dt_cache *c = &t->loader.cache;
    double counts[2] = {(double)c->hits, (double)(c->hits + c->misses)}, held = (double)dt_cache_bytes(c), most = 0.0;
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_DOUBLE, MPI_SUM, t->comm));
    DT_MPI_CHECK(MPI_Allreduce(&held, &most, 1, MPI_DOUBLE, MPI_MAX, t->comm));
    if (t->rank == 0 && t->cfg->verbose >= DT_NORMAL)
        fprintf(out, "  data cache           %.2f MiB held per rank (largest; limit %.2f MiB), %.1f%% of sample "
                "reads from memory\n", most / 1048576.0, (double)c->limit / 1048576.0,
                counts[1] > 0 ? 100.0 * counts[0] / counts[1] : 0.0);
}

int dt_trainer_fit(struct dt_trainer *t, FILE *out, dt_status *st)
{
    int rc = fit(t, out, st);
    if (rc == DT_OK) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double mine = (double)ru.ru_maxrss / 1024.0, peak = 0.0;
        DT_MPI_CHECK(MPI_Allreduce(&mine, &peak, 1, MPI_DOUBLE, MPI_MAX, t->comm));
        dt_report_summary(&t->report, t->epochs_done - t->start_epoch, peak);
        if (t->cfg->cache) report_cache(t, out);
    }
    /* The timeline is written even when training failed: it shows where. */
    dt_status tst = {0};
    if (dt_timeline && dt_timeline_finish(t->comm, &tst) != DT_OK && rc == DT_OK) {
        *st = tst;
        rc = st->code;
    }
    dt_report_close(&t->report);
    return rc;
}

/* Proportional set size in KiB from /proc (Linux); -1 where unknown. */
static double pss_kib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    double kib = -1.0;
    if (!f) return kib;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

void dt_trainer_report_memory(struct dt_trainer *t, FILE *out)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mine[3] = {(double)ru.ru_maxrss / 1024.0, pss_kib() / 1024.0,
                      (double)dt_strategy_optimizer_bytes(&t->strategy) / 1048576.0};
    double lo[3], hi[3];
    MPI_Allreduce(mine, lo, 3, MPI_DOUBLE, MPI_MIN, t->comm);
    MPI_Allreduce(mine, hi, 3, MPI_DOUBLE, MPI_MAX, t->comm);
    if (t->rank == 0)
        fprintf(out, "memory per rank: peak RSS %.1f-%.1f MiB, PSS %.1f-%.1f MiB, optimizer state %.2f-%.2f MiB\n",
                lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]);
}

void dt_trainer_free(struct dt_trainer *t)
{
    if (!t->cfg) return;
    dt_watchdog_stop(&t->watchdog);
    dt_strategy_free(&t->strategy);
    if (t->be) dt_step_graphs_free(&t->graphs, t->be);
    dt_model_free(&t->model);
    if (t->bn_comm != 0 && t->bn_comm != MPI_COMM_NULL) MPI_Comm_free(&t->bn_comm);
    dt_loader_close(&t->loader); /* before the data and the backend it uses */
    dt_shard_free(&t->plan);
    dt_dataset_close(&t->data);
    if (t->be) {
        if (t->dev_images) t->be->free(t->dev_images);
        if (t->dev_labels) t->be->free(t->dev_labels);
    }
    free(t->idx_scratch);
    if (t->accum && t->be) t->be->free(t->accum);
    free(t->best_params);
    free(t->history);
    dt_coll_free(&t->coll);
    memset(t, 0, sizeof *t);
}
