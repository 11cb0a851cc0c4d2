/* setup.c: making a trainer (dt_trainer_init), and the stages of it that
 * libdtrain shares (see train.h).
 *
 * dt_trainer_init is a short list of named stages, in the order they must
 * run: the ranks and the device, the data, the model (built, checked and the
 * same on every rank), the history, the parameters (rank 0's, broadcast, or
 * a checkpoint's), the strategy, the watchdog, the batches, the learning
 * rate. The design decision: each stage that a custom loop also needs (the
 * model, its parameters, the step's buffers, the shard plan and its loader)
 * is a function of its own that src/api/ calls too, so the library and the
 * program cannot drift apart. A stage returns a user error agreed on by all
 * ranks, or DT_OK. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "data/synthetic.h"
#include "metrics/timeline.h"
#include "runtime/checks.h"
#include "runtime/consistency.h"
#include "runtime/fault.h"
#include "runtime/rma.h"
#include "strategy/memplan.h"
#include "train/train.h"

/* ---- shared with libdtrain -------------------------------------------------- */

int dt_setup_shard_policy(int policy, int nfiles, int nranks, const char *who, const char *flag, dt_status *st)
{
    int resolved = dt_shard_resolve(policy, nfiles, nranks);
    if (resolved < 0)
        dt_fail(st, DT_EUSAGE, "%s%s file: %d shard file%s for %d ranks; each rank needs at least one file (use %s "
                "data, or write more shards with dtrain-prep --shards)", who, flag, nfiles, nfiles == 1 ? "" : "s",
                nranks, flag);
    return resolved;
}

void dt_setup_plan(struct dt_shard_plan *plan, const struct dt_dataset *data, int policy, int replica, int nreplicas,
                   int batch)
{
    const struct dt_split *train = &data->split[DT_TRAIN];
    int64_t *per_file = dt_xcalloc((size_t)data->nfiles, sizeof(int64_t));
    for (int f = 0; f < data->nfiles; f++) per_file[f] = train->file_start[f + 1] - train->file_start[f];
    dt_shard_init(plan, policy, replica, nreplicas, batch, data->nfiles, per_file);
    free(per_file);
}

int dt_setup_map_threads(int requested, int local_ranks, int compute_threads, char *why, size_t len)
{
    why[0] = '\0';
    if (requested > 0) return requested;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int share = online > 0 ? (int)(online / (local_ranks > 0 ? local_ranks : 1)) : 1, mine = share;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < mine) mine = CPU_COUNT(&set);
    if (mine < 1) mine = 1;
    int n = mine - compute_threads;
    if (n < 1) n = 1;
    if (n > DT_MAP_THREADS_MAX) n = DT_MAP_THREADS_MAX;
    snprintf(why, len, "auto: %d CPU%s for this rank (%s), %d for --threads", mine, mine == 1 ? "" : "s",
             mine < share ? "its affinity mask" : "the node's over its ranks", compute_threads);
    return n;
}

void dt_setup_loader(struct dt_loader *ld, const struct dt_loader_config *lc, struct dt_dataset *data,
                     const struct dt_shard_plan *plan, const struct dt_backend *be, int say, const char *flag,
                     const char *where)
{
    char note[1100];
    dt_loader_open(ld, lc, data, plan, be, note, sizeof note);
    if (note[0] && say)
        fprintf(stderr, "dtrain: note: %s %d: %s, so its rows are read through HDF5, which is not thread-safe here; "
                "batches are read in %s instead\n", flag, lc->prefetch, note, where);
}

/* Before anything passes buffers between ranks: the same model and run
 * everywhere (runtime/consistency.h); when names the moment. */
static int same_everywhere(struct dt_trainer *t, const struct dt_dataset *data, const char *when, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    static const char *const names[] = {"parameters", "layers", "model buffers", "batch size", "epochs", "seed",
                                        "training samples", "classes", "strategy", "optimizer", "model"};
    const long vals[] = {(long)t->model.nparams, t->model.nlayers, (long)t->model.nbuffers, cfg->batch_size,
                         cfg->epochs, (long)cfg->seed, (long)data->split[DT_TRAIN].n, data->classes,
                         dt_consistency_hash(cfg->strategy), dt_consistency_hash(cfg->optimizer),
                         dt_consistency_hash(cfg->model)};
    const char *const text[] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, cfg->strategy, cfg->optimizer,
                                cfg->model};
    return dt_consistency_check_text(t->comm, when, vals, names, text, 11, st);
}

/* A branched model (add or route layers) cannot be exported to Keras:
 * refused now, not after training. */
static void refuse_keras_export(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const char *keras = cfg->export_keras ? cfg->export_keras
                        : cfg->save_best && strstr(cfg->save_best, ".weights.h5") ? cfg->save_best : NULL;
    if (keras)
        dt_fail(st, DT_EUSAGE, "%s %s: model %s has add or route layers, and the export writes Keras Sequential "
                "models only; save a checkpoint (--checkpoint-dir) instead",
                keras == cfg->export_keras ? "--export-keras" : "--save-best", keras, t->model.name);
}

/* A token dataset's samples are windows of the model's block_size: its
 * first layer must be the embedding that says how long. */
static void token_windows(struct dt_dataset *data, const struct dt_layer_spec *specs, int n, const char *model,
                          dt_status *st)
{
    if (n < 1 || strcmp(specs[0].type, "embedding"))
        dt_fail(st, DT_EINPUT, "%s: a token dataset (dtrain-prep --text) needs a model that starts with [embedding] "
                "(e.g. inputs/gpt-mini.cfg); model %s starts with [%s]", data->paths[0], model,
                n > 0 ? specs[0].type : "nothing");
    else
        dt_dataset_set_block(data, specs[0].block, st);
}

/* The model file's text, read right after it was parsed, for the
 * checkpoints: a checkpoint rebuilds its model without the file (it may be
 * moved or edited since). */
static void keep_model_text(struct dt_trainer *t, dt_status *st)
{
    enum { MAX_TEXT = 1 << 24 };
    const char *path = t->cfg->model;
    free(t->model_text);
    t->model_text = NULL;
    t->model_text_len = 0;
    if (!dt_model_is_file(path)) return;
    FILE *f = fopen(path, "rb");
    char *buf = dt_xmalloc(MAX_TEXT + 1);
    size_t n = f ? fread(buf, 1, MAX_TEXT + 1, f) : 0;
    if (!f || ferror(f))
        dt_fail(st, DT_EUSAGE, "--model %s: cannot read it again: %s", path, strerror(errno));
    else if (n > MAX_TEXT)
        dt_fail(st, DT_EUSAGE, "--model %s: more than %d bytes; a model file is a few kilobytes", path, MAX_TEXT);
    if (f) fclose(f);
    if (st->code != DT_OK) {
        free(buf);
        return;
    }
    t->model_text = buf;
    t->model_text_len = n;
}

int dt_trainer_build_model(struct dt_trainer *t, struct dt_dataset *data, const char *when, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_layer_spec *specs;
    int n;
    st->code = DT_OK;
    /* A wrong model file is a usage error as it is; a model that is fine in
     * itself but does not build means the data's shape does not fit it. */
    if (dt_model_specs(cfg->model, data->classes, cfg->dropout, &specs, &n, st) == DT_OK && data->tokens)
        token_windows(data, specs, n, cfg->model, st);
    if (st->code == DT_OK && dt_model_build_specs(&t->model, cfg->model, data->shape, data->classes, specs, n, st) != DT_OK) {
        dt_status why = *st;
        if (data->tokens)
            dt_fail(st, DT_EINPUT, "%s: token windows (a vocabulary of %d) do not fit model %s: %s", cfg->inputs[0],
                    data->classes, cfg->model, why.msg);
        else
            dt_fail(st, DT_EINPUT, "%s: %dx%dx%d images do not fit model %s: %s", cfg->inputs[0], data->shape.h,
                    data->shape.w, data->shape.c, cfg->model, why.msg);
    }
    free(specs);
    if (st->code == DT_OK && cfg->recompute) dt_model_set_recompute(&t->model, st); /* before the memory plan */
    for (int i = 0; st->code == DT_OK && cfg->recompute && cfg->cuda_graphs && i < t->model.nlayers; i++)
        if (t->model.layers[i].ops == &dt_dropout_ops)
            dt_fail(st, DT_EUSAGE, "--recompute with --cuda-graphs: model %s has dropout (%s), whose second pass "
                    "draws from a copy of the stream that a recorded graph cannot draw again; drop one of the two",
                    cfg->model, t->model.layers[i].name);
    if (st->code == DT_OK) keep_model_text(t, st);
    if (st->code == DT_OK) dt_model_check_backend(&t->model, t->be, st);
    if (st->code == DT_OK && cfg->cuda_graphs) dt_step_graphs_init(&t->graphs, &t->model, t->be, st);
    if (st->code == DT_OK && dt_model_is_branched(&t->model)) refuse_keras_export(t, st);
    if (st->code == DT_OK && cfg->export_hf) /* refused now, not after training; rank 0 reads the files */
        dt_hf_check(cfg->export_hf, &t->model, data->tokens && !data->synthetic, data->paths, data->nfiles,
                    t->rank == 0, st);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    return same_everywhere(t, data, when, st);
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

/* --strategy fsdp: rank 0's initial parameters go out segment by segment,
 * each rank's into its place in its own block, whose other pages are never
 * touched (so never resident) before fsdp.c keeps the segment and frees the
 * block; the buffers are broadcast whole. The block is host memory: fsdp
 * runs on the CPU only. */
static void scatter_segments(struct dt_trainer *t)
{
    struct dt_model *m = &t->model;
    int *counts = dt_xcalloc((size_t)t->nranks, sizeof(int)), *displs = dt_xcalloc((size_t)t->nranks, sizeof(int));
    for (int r = 0; r < t->nranks; r++) { /* under --fsdp-shard node the segments repeat on every node */
        size_t off, len;
        dt_fsdp_segment(t->cfg->fsdp_node, &t->coll.topo, m->nparams, r, &off, &len);
        counts[r] = (int)len;
        displs[r] = (int)off;
    }
    float *mine = m->params + displs[t->rank];
    DT_MPI_CHECK(MPI_Scatterv(m->params, counts, displs, MPI_FLOAT, t->rank == 0 ? MPI_IN_PLACE : (void *)mine,
                              counts[t->rank], MPI_FLOAT, 0, t->comm));
    DT_MPI_CHECK(MPI_Bcast(m->buffers, (int)m->nbuffers, MPI_FLOAT, 0, t->comm));
    free(counts);
    free(displs);
}

/* --pipeline-stages: rank 0's initial parameters go to each rank as its
 * stage's range only (point to point: a stage's replicas read the same
 * range, which a scatter may not), into the same place of its own block;
 * the rest of that block is never touched before pipeline.c keeps the
 * range and frees it. The buffers are broadcast whole. */
static void send_stages(struct dt_trainer *t)
{
    struct dt_model *m = &t->model;
    for (int r = 1; r < t->nranks; r++) {
        size_t off, len;
        dt_pipe_segment(t, r, &off, &len);
        if (t->rank == 0) DT_MPI_CHECK(MPI_Send(m->params + off, (int)len, MPI_FLOAT, r, 0, t->comm));
        else if (t->rank == r) DT_MPI_CHECK(MPI_Recv(m->params + off, (int)len, MPI_FLOAT, 0, 0, t->comm, MPI_STATUS_IGNORE));
    }
    DT_MPI_CHECK(MPI_Bcast(m->buffers, (int)m->nbuffers, MPI_FLOAT, 0, t->comm));
}

void dt_trainer_create_model(struct dt_trainer *t)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_model *m = &t->model;
    const int fsdp = cfg->strategy && !strcmp(cfg->strategy, "fsdp");
    m->sharded = fsdp || cfg->pipeline_stages > 1; /* its gradients are the strategy's */
    dt_model_create(m, t->be, t->pipe.on ? t->pipe.micro : cfg->batch_size); /* a stage's copy 0: a micro-batch */
    if (cfg->sync_bn) { /* batchnorm sums its statistics over the replicas */
        DT_MPI_CHECK(MPI_Comm_dup(t->comm, &t->bn_comm));
        m->reduce = sync_bn_reduce;
        m->reduce_arg = t;
    }
    if (t->rank == 0) dt_model_init_params(m, cfg->seed);
    if (fsdp || t->pipe.on) { /* on the CPU: rank r needs its segment (fsdp.c) or stage (pipeline.c) only */
        if (fsdp) scatter_segments(t);
        else send_stages(t);
        dt_rng_seed(&t->dropout_rng, cfg->seed, 0xd50000ULL + (uint64_t)t->rank);
        return;
    }
    /* Through host memory (they may live on a GPU), 4 MiB at a time (a host
     * copy of the whole model would add its size to the peak): the
     * parameters, then the buffers (batchnorm's moving statistics). */
    const size_t piece = (size_t)1 << 20;
    float *host = dt_xmalloc(sizeof(float) * piece);
    for (int part = 0; part < 2; part++) {
        float *dst = part ? m->buffers : m->params;
        const size_t n = part ? m->nbuffers : m->nparams;
        for (size_t at = 0; at < n; at += piece) {
            const size_t k = n - at < piece ? n - at : piece;
            if (t->rank == 0) t->be->download(host, dst + at, sizeof(float) * k);
            DT_MPI_CHECK(MPI_Bcast(host, (int)k, MPI_FLOAT, 0, t->comm));
            t->be->upload(dst + at, host, sizeof(float) * k);
        }
    }
    free(host);
    dt_rng_seed(&t->dropout_rng, cfg->seed, 0xd50000ULL + (uint64_t)t->rank); /* a checkpoint may replace it */
}

void dt_trainer_alloc_step(struct dt_trainer *t)
{
    size_t row = dt_shape_size(t->model.input), B = (size_t)t->cfg->batch_size;
    t->dev_images = t->be->alloc(row * B);
    t->dev_labels = t->be->alloc(B);
    t->dev_targets = t->model.tokens ? t->dev_images : t->dev_labels;
    t->target_row = t->model.tokens ? row : 1;
    t->idx_scratch = dt_xmalloc(sizeof(int64_t) * B);
    if (t->cfg->grad_accum > 1 && !t->model.sharded) t->accum = t->be->alloc(sizeof(float) * (t->model.nparams ? t->model.nparams : 1));
}

/* ---- dt_trainer_init's own stages ------------------------------------------- */

/* The communicators (collectives/coll.h), this rank, and its backend and
 * device (threads, precision), agreed on by all ranks. */
static int open_ranks(struct dt_trainer *t, MPI_Comm comm, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_coll_config cc = {.algorithm = cfg->allreduce, .ranks_per_node = cfg->ranks_per_node,
                                .compress = cfg->compress, .compress_cross_only = cfg->compress_cross_only,
                                .table = cfg->allreduce_table,
                                .chunk_bytes = (size_t)cfg->ring_chunk_kb * 1024, .ring_depth = cfg->ring_depth};
    if (dt_coll_init(&t->coll, comm, &cc, st) != DT_OK) return st->code;
    t->comm = t->coll.topo.world;
    MPI_Comm_rank(t->comm, &t->rank);
    MPI_Comm_size(t->comm, &t->nranks);
    if (dt_device_open(&t->device, cfg, &t->coll.topo, st) != DT_OK) return st->code;
    t->be = t->device.be;
    return DT_OK;
}

/* The input files (or the synthetic set) and how they are sharded. */
static int open_data(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    if (cfg->synthetic) {
        struct dt_synthetic sy;
        dt_synthetic_parse(cfg->synthetic, &sy, st); /* checked by the options already */
        dt_dataset_open_synthetic(&t->data, &sy, cfg->seed);
    }
    else if (dt_dataset_open_classes(&t->data, cfg->inputs, cfg->ninputs, cfg->num_classes, t->comm, st) != DT_OK)
        return st->code;
    t->policy = dt_setup_shard_policy(cfg->shard_policy, t->data.nfiles, t->nranks, "", "--shard-policy", st);
    return dt_status_agree(st, t->comm);
}

/* The epochs' history and the monitors of --early-stopping and --save-best. */
static int open_history(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    t->history = dt_xcalloc((size_t)cfg->epochs, sizeof *t->history);
    dt_monitor_init(&t->stopper, cfg->monitor, cfg->patience, cfg->min_delta);
    dt_monitor_init(&t->saver, cfg->monitor, -1, 0.0);
    int validates = cfg->validation && t->data.split[DT_TEST].present && t->data.split[DT_TEST].n > 0;
    if ((cfg->patience >= 0 || cfg->save_best) && !strncmp(cfg->monitor, "val_", 4) && !validates) {
        dt_fail(st, DT_EUSAGE, "--monitor %s: there is no validation (%s); monitor loss or accuracy instead",
                cfg->monitor, cfg->validation ? "the input has no /test split" : "--no-validation was given");
        return dt_status_agree(st, t->comm);
    }
    return DT_OK;
}

/* --resume: the parameters, counters and dropout streams, before the
 * strategy places the parameters (train/state.c). */
static int resume_params(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    if ((cfg->checkpoint_dir || cfg->resume) && dt_trainer_data_checksum(t, st) != DT_OK) return st->code;
    if (cfg->resume && dt_trainer_resume_params(t, st) != DT_OK) return st->code;
    return DT_OK;
}

/* A resumed run: the optimizer's slots, the monitors, and --restore-best's
 * weights (kept in DIR/best; without them, the best epoch from now on). */
static int resume_rest(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    if (dt_trainer_resume_optimizer(t, st) != DT_OK) return st->code;
    t->saver.best = t->stopper.best;
    t->saver.best_epoch = t->stopper.best_epoch;
    t->skipped_before = t->strategy.loss_scale.skipped;
    if (t->rank == 0 && cfg->verbose >= DT_NORMAL)
        printf("dtrain: resuming from %s: %d epoch%s and %lld step%s done\n", t->resume_path, t->start_epoch,
               t->start_epoch == 1 ? "" : "s", (long long)t->start_step, t->start_step == 1 ? "" : "s");
    if (t->rank == 0 && cfg->verbose >= DT_NORMAL && t->strategy.psgd)
        printf("dtrain: note: powersgd:%d starts afresh: checkpoints hold neither its error buffers nor its warm "
               "start Q, so this run continues close to, not bit for bit as, one never interrupted\n",
               cfg->powersgd_rank);
    if (cfg->restore_best && t->stopper.best_epoch >= 0 && dt_trainer_resume_best(t, st) != DT_OK) {
        if (t->rank == 0)
            fprintf(stderr, "dtrain: note: --restore-best: the best weights (epoch %d) cannot be read (%s); "
                    "the best epoch from now on will be restored\n", t->stopper.best_epoch + 1, st->msg);
        st->code = DT_OK;
        t->stopper.best_epoch = -1;
        t->stopper.best = t->stopper.maximize ? -INFINITY : INFINITY;
    }
    return DT_OK;
}

/* The strategy places the gradient (and parameter) blocks, buckets and the
 * optimizer; its refusals (mirrored across nodes, ...) are agreed. */
static int create_strategy(struct dt_trainer *t, dt_status *st)
{
    dt_strategy_create(&t->strategy, t->cfg, &t->model, &t->coll, st);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    return t->resumed ? resume_rest(t, st) : DT_OK;
}

/* The strategy's alive hook: a parameter server serving is not stalled. */
static void watchdog_alive(void *w) { dt_watchdog_alive(w); }
/* Its wait hooks: fsdp's many short waits in a step, the table not told of each. */
static void watchdog_wait_begin(void *w, const char *what) { dt_watchdog_enter_quiet(w, what); }
static void watchdog_wait_end(void *w) { dt_watchdog_leave(w); }

/* --stall-timeout. */
static int start_watchdog(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    /* Enter/leave may publish to the table only when no other thread uses
     * MPI then, or when MPI lets threads call it at once. */
    const int publish = (!t->strategy.overlap && !t->strategy.cuda) || dt_mpi_thread_level() == MPI_THREAD_MULTIPLE;
    if (dt_watchdog_start(&t->watchdog, t->comm, cfg->stall_timeout, publish, st) != DT_OK)
        return dt_status_agree(st, t->comm);
    t->strategy.alive = watchdog_alive;
    t->strategy.alive_arg = &t->watchdog;
    if (t->watchdog.on) {
        t->strategy.wait_begin = watchdog_wait_begin;
        t->strategy.wait_end = watchdog_wait_end;
    }
    if (t->watchdog.on && t->watchdog.how != DT_WATCH_PUT && t->rank == 0 && cfg->verbose >= DT_NORMAL)
        fprintf(stderr, "dtrain: note: --stall-timeout: no one-sided window here (%s); the watchdog %s\n",
                t->watchdog.why, t->watchdog.how == DT_WATCH_SEND
                ? "gathers progress with two-sided messages instead"
                : "still ends a stalled job, but cannot name the late ranks (MPI gives no MPI_THREAD_MULTIPLE)");
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

/* This replica's shard plan and the loader of its batches (--prefetch,
 * --cache, --augment). A parameter server's servers train on nothing: they
 * take worker 0's plan, to know the step count. */
static void open_batches(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int replica = t->strategy.replica >= 0 ? t->strategy.replica : 0;
    dt_setup_plan(&t->plan, &t->data, t->policy, replica, t->strategy.nreplicas, cfg->batch_size);
    if (cfg->augment) dt_augment_parse(cfg->augment, &t->augment, st); /* checked by the options */
    struct dt_loader_config lc = {.batch = cfg->batch_size, .prefetch = cfg->prefetch, .augment = t->augment,
                                  .seed = cfg->seed};
    lc.map_threads = dt_setup_map_threads(cfg->map_threads, t->coll.topo.local_size, cfg->threads, t->map_why,
                                          sizeof t->map_why);
    if (cfg->cache) lc.cache_bytes = cfg->cache_limit_mib ? (size_t)cfg->cache_limit_mib << 20 : default_cache_bytes(t);
    lc.fail_at = dt_fault_read_error_at(t->rank);
    dt_setup_loader(&t->loader, &lc, &t->data, &t->plan, t->be, t->rank == 0 && cfg->verbose >= DT_NORMAL, "--prefetch",
                    "the training loop");
}

/* The learning rate per step (optim/schedule.h), from the strategy's rate,
 * the replicas and the updates per epoch. Collective verdict. */
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

/* --checkpoint-async: its writer, on a communicator of its own. Its
 * collectives run beside the training's, which only MPI_THREAD_MULTIPLE
 * allows; without it checkpoints are written in the step, as without the
 * option, and rank 0 says so. */
static void start_ckpt_writer(struct dt_trainer *t)
{
    int level = dt_mpi_thread_level();
    if (level == MPI_THREAD_MULTIPLE) {
        t->ckpt_async = dt_ckpt_async_new(t->comm);
        return;
    }
    if (t->rank == 0)
        fprintf(stderr, "dtrain: note: --checkpoint-async: MPI gives %s, not MPI_THREAD_MULTIPLE; checkpoints are "
                "written synchronously\n", dt_mpi_thread_level_name(level));
}

/* MemAvailable of this node, in bytes; 0 where unknown. */
static double node_available(void)
{
    if (dt_fault_mem_available() >= 0) return dt_fault_mem_available(); /* tests */
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    double kib = 0.0;
    if (!f) return 0.0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024.0;
}

/* Before anything big is allocated: the strategy's plan (strategy/memplan.h)
 * for this node's ranks against the memory the node has available. The
 * plan leaves out MPI's and the libraries' own memory, so a run it refuses
 * cannot fit; one it lets through may still not. Agreed on. */
static int check_memory(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const int slots = dt_optim_nslots(cfg->optimizer, cfg->momentum);
    const int local = t->coll.topo.local_size > 0 ? t->coll.topo.local_size : 1;
    const size_t act = dt_act_size(t->be->act_type());
    struct dt_mem_plan p, fs;
    const int shards = cfg->fsdp_node ? local : t->nranks; /* fsdp's: the node's ranks, or all */
    const int fsdp = cfg->strategy && !strcmp(cfg->strategy, "fsdp");
    dt_mem_plan(&t->model, cfg->strategy, slots, fsdp ? shards : t->nranks, local, cfg->bucket_mb, cfg->batch_size,
                act, &p);
    dt_mem_plan(&t->model, "fsdp", slots, shards, local, cfg->bucket_mb, cfg->batch_size, act, &fs);
    double need = dt_mem_plan_total(&p) * local;
    const double avail = node_available(), G = 1073741824.0;
    if (t->pipe.on) { /* each stage its own: the node's ranks' plans added up */
        const int D = t->nranks / t->pipe.P;
        dt_mem_plan_pipeline(&t->model, t->pipe.cut, t->pipe.P, t->pipe.M, t->rank / D, slots, cfg->batch_size, act, &p);
        need = dt_mem_plan_total(&p);
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &need, 1, MPI_DOUBLE, MPI_SUM, t->coll.topo.node));
    }
    char hint[160], gathered[48] = "";
    if (fsdp) snprintf(gathered, sizeof gathered, ", gathered buckets %.2f", p.gathered / G);
    if (fsdp)
        snprintf(hint, sizeof hint, "fewer ranks per node, more nodes%s, or a smaller --batch-size",
                 cfg->fsdp_node ? " (or --fsdp-shard world)" : "");
    else
        snprintf(hint, sizeof hint, "--strategy fsdp keeps 1/%d of the parameters, gradients and slots on each rank "
                 "(about %.1f GiB a rank)", shards, dt_mem_plan_total(&fs) / G);
    char what[48];
    if (t->pipe.on) snprintf(what, sizeof what, "--pipeline-stages %d", t->pipe.P);
    else snprintf(what, sizeof what, "--strategy %s", cfg->strategy);
    st->code = DT_OK;
    if (avail > 0 && need > avail)
        dt_fail(st, DT_EUSAGE, "%s: model %s (%zu parameters) needs about %.1f GiB %s (parameters %.2f, gradients "
                "%.2f, optimizer slots %.2f%s, activations %.2f), %.1f GiB for this node's %d rank%s, and the node "
                "has %.1f GiB available; %s", what, t->model.name, t->model.nparams, dt_mem_plan_total(&p) / G,
                t->pipe.on ? "on rank 0's stage" : "per rank", p.params / G, p.grads / G, p.slots / G, gathered,
                p.activations / G, need / G, local, local == 1 ? "" : "s", avail / G, hint);
    return dt_status_agree(st, t->comm);
}

int dt_trainer_init(struct dt_trainer *t, const struct dt_config *cfg, MPI_Comm comm, dt_status *st)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    st->code = DT_OK;
    if (open_ranks(t, comm, st) != DT_OK || open_data(t, st) != DT_OK) return st->code;
    if (dt_trainer_build_model(t, &t->data, "before the first collective of training", st) != DT_OK) return st->code;
    if (dt_pipe_plan(t, st) != DT_OK) return st->code;
    if (open_history(t, st) != DT_OK || check_memory(t, st) != DT_OK) return st->code;
    dt_trainer_create_model(t);
    if (resume_params(t, st) != DT_OK || create_strategy(t, st) != DT_OK) return st->code;
    dt_pipe_start(t);
    if (cfg->checkpoint_dir) dt_signals_install();
    if (cfg->checkpoint_dir && cfg->ckpt_async) start_ckpt_writer(t);
    if (start_watchdog(t, st) != DT_OK) return st->code;
    t->last_ckpt_time = MPI_Wtime();
    open_batches(t, st);
    dt_trainer_alloc_step(t);
    return setup_schedule(t, st); /* needs the plan's steps per epoch */
}

void dt_trainer_free(struct dt_trainer *t)
{
    if (!t->cfg) return;
    dt_ckpt_async_free(t->ckpt_async); /* a write in flight ends first: it reads the model's names */
    dt_watchdog_stop(&t->watchdog);
    dt_pipe_free(t);
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
    free(t->model_text);
    dt_coll_free(&t->coll);
    memset(t, 0, sizeof *t);
}
