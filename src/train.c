/* train.c: the synchronous data-parallel loop (see train.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "checks.h"
#include "collectives/allreduce.h"
#include "device.h"
#include "train.h"


/* DTRAIN_TEST_OVERFLOW_STEPS="3,7": global step numbers (from 1, counted
 * over the run) whose loss gradient rank 0 sets to infinity, as an fp16
 * overflow would; for the loss-scaling tests. */
static long *parse_steps(const char *list, int *n)
{
    *n = 0;
    if (!list || !*list) return NULL;
    long *steps = dt_xcalloc(strlen(list) + 1, sizeof(long));
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        steps[(*n)++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return steps;
}

static int injected(const struct dt_trainer *t, long step)
{
    for (int i = 0; i < t->noverflow; i++)
        if (t->overflow_steps[i] == step) return 1;
    return 0;
}

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

    if (dt_dataset_open(&t->data, cfg->inputs, cfg->ninputs, t->comm, st) != DT_OK) return st->code;

    int policy = dt_shard_resolve(cfg->shard_policy, cfg->ninputs, t->nranks);
    t->policy = policy;
    if (policy < 0)
        dt_fail(st, DT_EUSAGE, "--shard-policy file: %d shard file%s for %d ranks; each rank needs at "
                "least one file (use --shard-policy data, or write more shards with dtrain-prep --shards)",
                cfg->ninputs, cfg->ninputs == 1 ? "" : "s", t->nranks);
    else if (dt_model_build(&t->model, cfg->model, t->data.shape, t->data.classes, cfg->dropout, st) != DT_OK) {
        /* The model is fine in itself, so the data's shape is what does not fit. */
        dt_status why = *st;
        dt_fail(st, DT_EINPUT, "%s: %dx%dx%d images do not fit model %s: %s", cfg->inputs[0],
                t->data.shape.h, t->data.shape.w, t->data.shape.c, cfg->model, why.msg);
    }
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;

    dt_model_create(&t->model, t->be, cfg->batch_size);
    if (t->rank == 0) dt_model_init_params(&t->model, cfg->seed);
    {   /* through host memory: the parameters may live on a GPU */
        float *host = dt_xmalloc(sizeof(float) * (t->model.nparams ? t->model.nparams : 1));
        if (t->rank == 0) t->be->download(host, t->model.params, sizeof(float) * t->model.nparams);
        DT_MPI_CHECK(MPI_Bcast(host, (int)t->model.nparams, MPI_FLOAT, 0, t->comm));
        t->be->upload(t->model.params, host, sizeof(float) * t->model.nparams);
        free(host);
    }

    /* The strategy places the gradient (and parameter) blocks, buckets and
     * the optimizer; its refusals (mirrored across nodes, ...) are agreed. */
    dt_strategy_create(&t->strategy, cfg, &t->model, &t->coll, st);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;

    int64_t *per_file = dt_xcalloc((size_t)cfg->ninputs, sizeof(int64_t));
    for (int f = 0; f < cfg->ninputs; f++)
        per_file[f] = t->data.split[DT_TRAIN].file_start[f + 1] - t->data.split[DT_TRAIN].file_start[f];
    /* Replicas only: a parameter server's servers train on nothing (they take
     * worker 0's plan, to know the step count). */
    int replica = t->strategy.replica >= 0 ? t->strategy.replica : 0;
    dt_shard_init(&t->plan, t->policy, replica, t->strategy.nreplicas, cfg->batch_size, cfg->ninputs, per_file);
    free(per_file);

    dt_rng_seed(&t->dropout_rng, cfg->seed, 0xd50000ULL + (uint64_t)t->rank);
    size_t row = dt_shape_size(t->data.shape), B = (size_t)cfg->batch_size;
    for (int k = 0; k < 2; k++) { /* two slots: the next batch is read while this one computes */
        t->idx[k] = dt_xmalloc(sizeof(int64_t) * B);
        t->host_images[k] = t->be->host_alloc(row * B); /* pinned on the GPU: asynchronous uploads */
        t->host_labels[k] = t->be->host_alloc(B);
    }
    t->overflow_steps = parse_steps(cfg->inject_overflow, &t->noverflow);
    t->dev_images = t->be->alloc(row * B);
    t->dev_labels = t->be->alloc(B);
    t->history = dt_xcalloc((size_t)cfg->epochs, sizeof *t->history);
    return DT_OK;
}

/* Put n samples (already in slot k's host buffers) into the model's input.
 * On the GPU the copies are asynchronous (pinned memory): the slot is not
 * written again before the step's end, which waits for the device. */
static void load_batch(struct dt_trainer *t, int k, int n)
{
    size_t bytes = dt_shape_size(t->data.shape) * (size_t)n;
    if (n == 0) return;
    t->be->upload(t->dev_images, t->host_images[k], bytes);
    t->be->upload(t->dev_labels, t->host_labels[k], (size_t)n);
    t->be->images_to_float(t->model.act[0], t->dev_images, bytes);
}

/* Step s's samples into slot k (their count and the step's global count). */
static int read_step(struct dt_trainer *t, int64_t s, int k, dt_status *st)
{
    t->slot_n[k] = dt_shard_step(&t->plan, s, t->idx[k], &t->slot_global[k]);
    return dt_dataset_read(&t->data, DT_TRAIN, t->idx[k], t->slot_n[k], t->host_images[k], t->host_labels[k], st);
}

void dt_trainer_evaluate(struct dt_trainer *t, double *loss, double *accuracy)
{
    const struct dt_split *sp = &t->data.split[DT_TEST];
    dt_status st = {0};
    /* Contiguous near-equal slices of the test split, one per rank. */
    int64_t q = sp->n / t->nranks, rem = sp->n % t->nranks;
    int64_t begin = t->rank * q + (t->rank < rem ? t->rank : rem), end = begin + q + (t->rank < rem);
    double sums[3] = {0.0, 0.0, 0.0}; /* loss, correct, samples */
    for (int64_t at = begin; at < end; at += t->cfg->batch_size) {
        int n = (int)(end - at < t->cfg->batch_size ? end - at : t->cfg->batch_size);
        for (int i = 0; i < n; i++) t->idx[0][i] = at + i;
        if (dt_dataset_read(&t->data, DT_TEST, t->idx[0], n, t->host_images[0], t->host_labels[0], &st) != DT_OK)
            DT_DIE("%s", st.msg);
        load_batch(t, 0, n);
        dt_model_forward(&t->model, n, 0, NULL);
        struct dt_loss_result r = dt_model_loss(&t->model, t->dev_labels, n, 0.0f);
        sums[0] += r.loss_sum;
        sums[1] += (double)r.correct;
        sums[2] += n;
    }
    dt_allreduce_sum_f64(sums, 3, t->comm);
    *loss = sums[2] > 0 ? sums[0] / sums[2] : (double)NAN;
    *accuracy = sums[2] > 0 ? sums[1] / sums[2] : (double)NAN;
}

static void grads_ready(void *ctx, size_t offset)
{
    struct dt_strategy *s = ctx;
    s->ops->grads_ready(s, offset);
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
    if (replica && steps > 0 && read_step(t, 0, 0, st) != DT_OK) return st->code;
    for (int64_t s = 0; s < steps; s++) {
        const int k = (int)(s & 1);
        int64_t global;
        if (!replica) { /* a parameter server's server: it serves in epoch_end */
            dt_shard_step(&t->plan, s, t->idx[0], &global);
            es->samples += global;
            continue;
        }
        int n = t->slot_n[k];
        global = t->slot_global[k];
        es->samples += global;
        load_batch(t, k, n);
        if (strat->ops->pull) strat->ops->pull(strat);
        dt_model_forward(&t->model, n, 1, &t->dropout_rng);
        /* While a GPU runs the forward pass, the CPU reads the next batch. */
        if (s + 1 < steps && read_step(t, s + 1, k ^ 1, st) != DT_OK) return st->code;
        float scale = strat->scale_local ? 1.0f / (float)(n > 0 ? n : 1) : 1.0f / (float)global;
        struct dt_loss_result r = dt_model_loss(&t->model, t->dev_labels, n, scale * strat->loss_scale.scale);
        if (t->noverflow && injected(t, ++t->global_step) && t->rank == 0 && n > 0) {
            const float inf = INFINITY;
            t->be->upload(t->model.dact[t->model.nlayers], &inf, sizeof inf);
        }
        float stats[DT_STATS] = {(float)r.loss_sum, (float)r.correct};
        t->strategy.ops->begin(&t->strategy, stats);
        dt_model_backward_notify(&t->model, n, &t->dropout_rng, grads_ready, &t->strategy);
        long skipped = strat->loss_scale.skipped;
        t->strategy.ops->finish(&t->strategy, stats);
        skipped = strat->loss_scale.skipped - skipped;

        sums[0] = (double)stats[0]; /* float: ~7 digits of a batch's sum, plenty for a log */
        sums[1] = (double)stats[1]; /* a count, exact in float below 2^24 */
        epoch_sums[0] += sums[0];
        epoch_sums[1] += sums[1];
        if (!per_step) continue; /* only this replica's figures: summed at the epoch's end */
        if (cfg->verbose >= 2 && t->rank == 0)
        {
            char note[96] = "";
            if (skipped)
                snprintf(note, sizeof note, " - gradient overflow: step skipped, loss scale now %g",
                         (double)strat->loss_scale.scale);
            fprintf(out, "step %lld/%lld - loss: %.6f - accuracy: %.4f%s\n", (long long)s + 1, (long long)steps,
                    sums[0] / (double)global, sums[1] / (double)global, note);
        }
        if (!isfinite(sums[0]))
            return dt_fail(st, DT_ERUNTIME, "epoch %d step %lld: the loss is %f; try a smaller --lr",
                           epoch + 1, (long long)s + 1, sums[0]);
    }
    if (strat->ops->epoch_end) strat->ops->epoch_end(strat, (long)steps);
    if (!per_step) {
        dt_allreduce_sum_f64(epoch_sums, 2, t->comm);
        if (!isfinite(epoch_sums[0]))
            return dt_fail(st, DT_ERUNTIME, "epoch %d: the loss is %f; try a smaller --lr", epoch + 1, epoch_sums[0]);
    }
    es->seconds = MPI_Wtime() - t0;
    es->skipped = strat->loss_scale.skipped - t->skipped_before;
    es->loss_scale = strat->loss_scale.scale;
    t->skipped_before = strat->loss_scale.skipped;
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

int dt_trainer_fit(struct dt_trainer *t, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int validate = cfg->validation && t->data.split[DT_TEST].present && t->data.split[DT_TEST].n > 0;
    for (int e = 0; e < cfg->epochs; e++) {
        struct dt_epoch_stats *es = &t->history[e];
        if (train_epoch(t, e, out, es, st) != DT_OK) return st->code;
        if (validate) {
            dt_trainer_evaluate(t, &es->val_loss, &es->val_accuracy);
            es->validated = 1;
        }
        t->epochs_done = e + 1;
        if (cfg->verbose >= 1 && t->rank == 0) {
            fprintf(out, "Epoch %d/%d - %.2f s - %.0f samples/s - loss: %.4f - accuracy: %.4f", e + 1,
                    cfg->epochs, es->seconds, es->seconds > 0 ? (double)es->samples / es->seconds : 0.0,
                    es->loss, es->accuracy);
            if (es->validated) fprintf(out, " - val_loss: %.4f - val_accuracy: %.4f", es->val_loss, es->val_accuracy);
            if (t->strategy.loss_scale.on)
                fprintf(out, " - loss scale: %g (%ld step%s skipped)", (double)es->loss_scale, es->skipped,
                        es->skipped == 1 ? "" : "s");
            if (t->nranks > 1 && t->strategy.reducer.steps) /* rank 0's view of the gradient exchange */
                fprintf(out, " - comm: %.2f ms/step, waited %.2f (%.0f%% hidden)", es->comm_ms, es->wait_ms,
                        es->comm_ms > es->wait_ms ? 100.0 * (1.0 - es->wait_ms / es->comm_ms) : 0.0);
            fputc('\n', out);
            fflush(out);
        }
    }
    return DT_OK;
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
    dt_strategy_free(&t->strategy);
    dt_model_free(&t->model);
    dt_shard_free(&t->plan);
    dt_dataset_close(&t->data);
    if (t->be) {
        if (t->dev_images) t->be->free(t->dev_images);
        if (t->dev_labels) t->be->free(t->dev_labels);
    }
    for (int k = 0; k < 2; k++) {
        free(t->idx[k]);
        if (t->be && t->host_images[k]) t->be->host_free(t->host_images[k]);
        if (t->be && t->host_labels[k]) t->be->host_free(t->host_labels[k]);
    }
    free(t->overflow_steps);
    free(t->history);
    dt_coll_free(&t->coll);
    memset(t, 0, sizeof *t);
}
