/* state.c: the trainer's state in and out of checkpoints.
 *
 * Gathers what an exact restart needs (parameters, optimizer slots, the step
 * counters, every rank's dropout stream, the sums of the epoch in progress,
 * the loss scale, the history and the early-stopping monitor) into a
 * struct dt_ckpt for checkpoint/checkpoint.c, and puts it back. Resuming is
 * two reads: the parameters before the strategy places them (a parameter
 * server copies them into its windows at setup), the optimizer slots after
 * it, at the offsets this rank's strategy owns, whatever split wrote them. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "runtime/fault.h"
#include "train/train.h"

/* The parts of the flat parameter block the checkpoint names per layer,
 * then the buffers (batchnorm's moving statistics), which the checkpoint
 * sees after the parameters: a batchnorm layer's gamma and beta are its
 * "kernel" and "bias", and an entry "<layer>.moving" holds its moving mean
 * (kernel) and variance (bias). A layer of more than one matrix has an entry
 * for each, in block order: an embedding's wte is "<layer>" and its wpe
 * "<layer>.position" (no bias), an attention's fused q, k, v projection is
 * "<layer>" and its output projection "<layer>.proj"; a layernorm's gain and
 * bias are kernel and bias, an untied lm_head's table a kernel without bias.
 * *count receives the number of entries. */
static void entry(struct dt_ckpt_layer *L, const char *name, size_t offset, int rank, int64_t d0, int64_t d1,
                  int64_t d2, int64_t d3, int64_t bias)
{
    *L = (struct dt_ckpt_layer){.name = name, .offset = offset, .kernel_rank = rank, .kernel_dims = {d0, d1, d2, d3},
                                .bias_len = bias};
}

struct dt_ckpt_layer *dt_ckpt_layer_table(const struct dt_model *m, int *count)
{
    int extra = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        extra += l->nbuffers > 0 || (l->nparams && (l->ops == &dt_embedding_ops || l->ops == &dt_attention_ops));
    }
    struct dt_ckpt_layer *L = dt_xcalloc((size_t)(m->nlayers + extra) + 1, sizeof *L + 48);
    char *names = (char *)(L + m->nlayers + extra + 1);
    int k = 0, nb = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        const size_t o = l->param_offset;
        const int64_t C = l->in.c, units = (int64_t)l->out.c * l->out.h * l->out.w;
        char *second = names + 48 * (size_t)(k - i); /* this layer's second entry's name, if it has one */
        if (!l->nparams) {
            entry(&L[k++], l->name, o, 0, 0, 0, 0, 0, 0);
        } else if (l->ops == &dt_conv2d_ops) {
            entry(&L[k++], l->name, o, 4, l->spec.kernel, l->spec.kernel, C, l->out.c, l->out.c);
        } else if (l->ops == &dt_batchnorm_ops || l->ops == &dt_layernorm_ops) { /* gamma, beta */
            entry(&L[k++], l->name, o, 1, l->out.c, 0, 0, 0, l->out.c);
        } else if (l->ops == &dt_embedding_ops) { /* wte [V][C], wpe [T][C] */
            const int64_t V = l->spec.vocab, T = l->out.w, W = l->out.c;
            entry(&L[k++], l->name, o, 2, V, W, 0, 0, 0);
            snprintf(second, 48, "%s.position", l->name);
            entry(&L[k++], second, o + (size_t)(V * W), 2, T, W, 0, 0, 0);
        } else if (l->ops == &dt_attention_ops) { /* Wqkv [C][3C], bqkv; Wo [C][C], bo */
            entry(&L[k++], l->name, o, 2, C, 3 * C, 0, 0, 3 * C);
            snprintf(second, 48, "%s.proj", l->name);
            entry(&L[k++], second, o + (size_t)(3 * C * C + 3 * C), 2, C, C, 0, 0, C);
        } else if (l->ops == &dt_linear_ops) { /* [C][units] on each position */
            entry(&L[k++], l->name, o, 2, C, l->out.c, 0, 0, l->out.c);
        } else if (l->ops == &dt_lm_head_ops) { /* untied: [V][C] */
            entry(&L[k++], l->name, o, 2, l->out.c, C, 0, 0, 0);
        } else { /* dense: [in][units] */
            entry(&L[k++], l->name, o, 2, (int64_t)dt_shape_size(l->in), units, 0, 0, units);
        }
    }
    for (int i = 0; i < m->nlayers; i++) { /* moving mean, moving variance */
        const struct dt_layer *l = &m->layers[i];
        if (!l->nbuffers) continue;
        char *name = names + 48 * (size_t)(m->nlayers + extra - 1 - nb++);
        snprintf(name, 48, "%s.moving", l->name);
        entry(&L[k++], name, m->nparams + l->buffer_offset, 1, (int64_t)l->nbuffers / 2, 0, 0, 0,
              (int64_t)l->nbuffers / 2);
    }
    *count = k;
    return L;
}

static int optim_slots(const struct dt_strategy *s, const char **names)
{
    if (dt_optim_nslots(s->optim_cfg.name, 0.0f) == 2) { /* adam, adamw */
        names[0] = "m";
        names[1] = "v";
        return 2;
    }
    if (s->optim_cfg.momentum != 0.0f) {
        names[0] = "velocity";
        return 1;
    }
    return 0;
}

/* The strategy's optimizer range on this rank, and whether this rank is the
 * first holder of it (and so its writer). */
static void optim_owner(struct dt_trainer *t, size_t *off, size_t *len, int *writer)
{
    const struct dt_strategy *s = &t->strategy;
    int holds = s->optim.ops != NULL;
    long mine = holds ? (long)s->shard_off : -1;
    long *all = dt_xcalloc((size_t)t->nranks, sizeof(long));
    DT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_LONG, all, 1, MPI_LONG, t->comm));
    *writer = holds;
    for (int r = 0; r < t->rank && *writer; r++)
        if (all[r] == mine) *writer = 0;
    free(all);
    *off = holds ? s->shard_off : 0;
    *len = holds ? s->shard_len : 0;
}

/* Every option, as text, for the checkpoint's /config. */
struct kv {
    int n;
    const char *key[48];
    const char *value[48];
    char buf[48][160];
};

static void kv_add(struct kv *kv, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv_add(struct kv *kv, const char *key, const char *fmt, ...)
{
    va_list ap;
    if (kv->n >= 48) return;
    va_start(ap, fmt);
    vsnprintf(kv->buf[kv->n], sizeof kv->buf[0], fmt, ap);
    va_end(ap);
    kv->key[kv->n] = key;
    kv->value[kv->n] = kv->buf[kv->n];
    kv->n++;
}

static void config_text(const struct dt_config *c, int nranks, struct kv *kv)
{
    memset(kv, 0, sizeof *kv);
    kv_add(kv, "inputs", "%s%s", c->inputs[0], c->ninputs > 1 ? " ..." : "");
    kv_add(kv, "ranks", "%d", nranks);
    kv_add(kv, "epochs", "%d", c->epochs);
    kv_add(kv, "batch_size", "%d", c->batch_size);
    kv_add(kv, "grad_accum", "%d", c->grad_accum > 1 ? c->grad_accum : 1);
    kv_add(kv, "steps_per_epoch", "%ld", c->steps_per_epoch);
    kv_add(kv, "model", "%s", c->model);
    kv_add(kv, "dropout", "%g", (double)c->dropout);
    kv_add(kv, "optimizer", "%s", c->optimizer);
    kv_add(kv, "lr", "%g", (double)c->lr);
    kv_add(kv, "momentum", "%g", (double)c->momentum);
    kv_add(kv, "seed", "%llu", (unsigned long long)c->seed);
    kv_add(kv, "validation", "%d", c->validation);
    kv_add(kv, "shard_policy", "%d", c->shard_policy);
    kv_add(kv, "threads", "%d", c->threads);
    kv_add(kv, "device", "%s", c->device);
    kv_add(kv, "precision", "%s", dt_precision_name(c->precision));
    kv_add(kv, "loss_scale", "%g", (double)c->loss_scale);
    kv_add(kv, "strategy", "%s", c->strategy);
    kv_add(kv, "num_ps", "%d", c->num_ps);
    kv_add(kv, "ps_mode", "%d", c->ps_mode);
    kv_add(kv, "staleness", "%d", c->staleness);
    kv_add(kv, "allreduce", "%s", c->allreduce);
    kv_add(kv, "bucket_mb", "%g", c->bucket_mb);
    kv_add(kv, "grad_compression", "%d", c->compress);
    kv_add(kv, "powersgd_rank", "%d", c->powersgd_rank);
    kv_add(kv, "checkpoint_every", "%ld%s", c->ckpt_every, c->ckpt_every_steps ? "step" : "epoch");
    kv_add(kv, "monitor", "%s", c->monitor);
    kv_add(kv, "early_stopping", "%d", c->patience);
    kv_add(kv, "min_delta", "%g", c->min_delta);
}

int dt_trainer_data_checksum(struct dt_trainer *t, dt_status *st)
{
    enum { BLOCK = 4096 }; /* samples per hashed block */
    const struct dt_split *sp = &t->data.split[DT_TRAIN];
    size_t row = dt_shape_size(t->data.shape);
    uint8_t *img = dt_xmalloc(row * BLOCK), *lab = dt_xmalloc(BLOCK);
    int64_t *idx = dt_xmalloc(sizeof(int64_t) * BLOCK);
    uint64_t sum = 0;
    int64_t nblocks = (sp->n + BLOCK - 1) / BLOCK;
    st->code = DT_OK;
    for (int64_t b = t->rank; b < nblocks && st->code == DT_OK; b += t->nranks) {
        int64_t at = b * BLOCK;
        int n = (int)(sp->n - at < BLOCK ? sp->n - at : BLOCK);
        for (int i = 0; i < n; i++) idx[i] = at + i;
        if (dt_dataset_read(&t->data, DT_TRAIN, idx, n, img, lab, st) != DT_OK) break;
        uint64_t h = dt_fnv1a64(img, row * (size_t)n, 0);
        h = dt_fnv1a64(lab, (size_t)n, h);
        sum += dt_ckpt_block_mix((uint64_t)b, h);
    }
    free(img);
    free(lab);
    free(idx);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    DT_MPI_CHECK(MPI_Allreduce(&sum, &t->data_checksum, 1, MPI_UINT64_T, MPI_SUM, t->comm));
    return DT_OK;
}

/* The optimizer into c: its settings, and this rank's slots where it holds
 * some (collective: the update count). */
static void save_optimizer(struct dt_trainer *t, struct dt_ckpt *c)
{
    const struct dt_strategy *s = &t->strategy;
    c->optimizer = s->optim_cfg.name;
    c->lr = s->optim_cfg.lr;
    c->beta1 = s->optim_cfg.beta1;
    c->beta2 = s->optim_cfg.beta2;
    c->eps = s->optim_cfg.eps;
    c->momentum = s->optim_cfg.momentum;
    c->nslots = optim_slots(s, c->slot_names);
    optim_owner(t, &c->off, &c->len, &c->writer);
    /* The update count lives with whoever holds optimizer state; rank 0 may not. */
    long step_count = s->optim.ops ? s->optim.step : -1;
    DT_MPI_CHECK(MPI_Allreduce(&step_count, &c->opt_step, 1, MPI_LONG, MPI_MAX, t->comm));
    for (int i = 0; i < 2; i++)  /* the snapshot's buffers (room for len) hold the slots */
        if (i >= c->nslots || !s->optim.ops) c->slots[i] = NULL;
        else t->be->download(c->slots[i], s->optim.slot[i], sizeof(float) * c->len);
}

/* Where training stands into c: counters, the epoch's sums, the dropout
 * stream, the loss scale, the history (c->history, to free) and the
 * early-stopping monitor. */
static void save_progress(struct dt_trainer *t, struct dt_ckpt *c, int epochs_done, int64_t step,
                          const double progress[3])
{
    const struct dt_loss_scale *ls = &t->strategy.loss_scale;
    c->epoch = epochs_done;
    c->step = step;
    c->global_step = t->global_step;
    memcpy(c->progress, progress, sizeof c->progress);
    memcpy(c->rng, t->dropout_rng.s, sizeof c->rng);
    c->ls_on = ls->on;
    c->ls_dynamic = ls->dynamic;
    c->ls_clean = ls->clean;
    c->ls_scale = ls->scale;
    c->ls_skipped = ls->skipped;
    c->nhistory = epochs_done;
    c->history = dt_xcalloc((size_t)epochs_done + 1, sizeof *c->history);
    for (int e = 0; e < epochs_done; e++) {
        const struct dt_epoch_stats *h = &t->history[e];
        double row[DT_CKPT_HIST] = {h->loss, h->accuracy, h->validated ? h->val_loss : (double)NAN,
                                    h->validated ? h->val_accuracy : (double)NAN, h->seconds, (double)h->samples};
        memcpy(c->history[e], row, sizeof row);
    }
    c->best = t->stopper.best;
    c->best_epoch = t->stopper.best_epoch;
    c->wait = t->stopper.wait;
}

/* A checkpoint's state copied out of the trainer (train.h). Its buffers
 * and the configuration text are its own; names (model, layers, strategy,
 * optimizer, command line) point into the trainer, which outlives it. */
struct dt_snapshot {
    struct dt_ckpt c;
    struct dt_ckpt_layer *layers;
    struct kv kv;
    float *params, *slots[2];       /* the big buffers, kept when the snapshot is reused */
    size_t params_cap, slots_cap;   /* floats */
};

/* snap's big buffers for t's model and this rank's optimizer part: kept
 * from its previous use where they are large enough, so that a snapshot
 * every few steps neither allocates nor faults in fresh pages. */
static void snapshot_buffers(struct dt_trainer *t, struct dt_snapshot *snap)
{
    const char *names[2];
    const int nslots = optim_slots(&t->strategy, names);
    const size_t slot_len = t->strategy.optim.ops ? t->strategy.shard_len : 0;
    size_t np = t->model.nparams + t->model.nbuffers + 1;
    if (snap->params_cap < np) {
        free(snap->params);
        snap->params = dt_xmalloc(sizeof(float) * np);
        snap->params_cap = np;
    }
    if (snap->slots_cap < slot_len + 1) {
        for (int i = 0; i < 2; i++) {
            free(snap->slots[i]);
            snap->slots[i] = i < nslots ? dt_xmalloc(sizeof(float) * (slot_len + 1)) : NULL;
        }
        snap->slots_cap = slot_len + 1;
    }
}

struct dt_snapshot *dt_trainer_snapshot(struct dt_trainer *t, int epochs_done, int64_t step,
                                        const double progress[3], struct dt_snapshot *reuse)
{
    struct dt_model *m = &t->model;
    struct dt_strategy *s = &t->strategy;
    struct dt_snapshot *snap = reuse ? reuse : dt_xcalloc(1, sizeof *snap);
    struct dt_ckpt *c = &snap->c;
    struct kv *kv = &snap->kv;
    free(c->history);
    free(snap->layers);
    memset(c, 0, sizeof *c);
    snapshot_buffers(t, snap);
    config_text(t->cfg, t->nranks, kv);
    if (kv->n < 48 && dt_auto_encode(&t->coll, kv->buf[kv->n], sizeof kv->buf[0])) { /* auto's timed choices */
        kv->key[kv->n] = "allreduce_timed";
        kv->value[kv->n] = kv->buf[kv->n];
        kv->n++;
    }
    c->dtrain_version = PACKAGE_VERSION;
    c->strategy = s->ops->name;
    c->model = m->name;
    c->nranks = t->nranks;
    c->nconfig = kv->n;
    c->config_keys = kv->key;
    c->config_values = kv->value;
    c->command_line = t->cfg->command_line ? t->cfg->command_line : "";
    c->data_checksum = t->data_checksum;
    c->nparams = m->nparams;
    c->nbuffers = m->nbuffers;
    c->classes = m->classes; /* what rebuilds the model without its files (dtrain-generate) */
    c->model_text = t->model_text;
    c->model_text_len = t->model_text_len;
    if (t->data.tokens) {
        c->tokenizer = t->data.tokenizer;
        c->merges = t->data.merges;
        c->nmerges = t->data.nmerges;
    }
    snap->layers = dt_ckpt_layer_table(m, &c->nlayers);
    c->layers = snap->layers;
    c->params = snap->params;
    dt_strategy_get_block(&t->strategy, 0, c->params, -1); /* gathered, under fsdp */
    t->be->download(c->params + m->nparams, m->buffers, sizeof(float) * m->nbuffers);
    c->slots[0] = snap->slots[0];
    c->slots[1] = snap->slots[1];
    save_optimizer(t, c);
    save_progress(t, c, epochs_done, step, progress);
    return snap;
}

int dt_snapshot_write(const struct dt_snapshot *snap, MPI_Comm comm, const char *dir, int keep, char *path,
                      size_t pathlen, dt_status *st)
{
    return dt_ckpt_write(comm, dir, keep, &snap->c, path, pathlen, st);
}

void dt_snapshot_free(struct dt_snapshot *snap)
{
    if (!snap) return;
    free(snap->c.history);
    free(snap->slots[0]);
    free(snap->slots[1]);
    free(snap->params);
    free(snap->layers);
    free(snap);
}

int dt_trainer_save(struct dt_trainer *t, const char *dir, int keep, int epochs_done, int64_t step,
                    const double progress[3], char *path, size_t pathlen, dt_status *st)
{
    dt_fault_stall_phase(t->rank, "checkpoint", epochs_done);
    /* Timed only against a rank whose process has stopped: a large write
     * may rightly take longer than --stall-timeout. */
    dt_watchdog_enter_io(&t->watchdog, "a checkpoint write");
    /* At most one write at a time: an asynchronous one in flight ends first. */
    int rc = dt_ckpt_async_wait(t->ckpt_async, st);
    if (rc == DT_OK) {
        struct dt_snapshot *snap = dt_trainer_snapshot(t, epochs_done, step, progress, NULL);
        rc = dt_snapshot_write(snap, t->comm, dir, keep, path, pathlen, st);
        dt_snapshot_free(snap);
    }
    dt_watchdog_leave(&t->watchdog);
    return rc;
}

/* Put host parameters into the model, once per node when the node shares them. */
static void place_params(struct dt_trainer *t, const float *host)
{
    struct dt_model *m = &t->model;
    if (t->strategy.ops && t->strategy.ops->load_block) { /* fsdp: each rank takes its part */
        t->strategy.ops->load_block(&t->strategy, host);
        return;
    }
    if (!m->params_borrowed || t->coll.topo.local_rank == 0)
        t->be->upload(m->params, host, sizeof(float) * m->nparams);
    if (m->params_borrowed) DT_MPI_CHECK(MPI_Barrier(t->coll.topo.node));
}

void dt_trainer_set_params(struct dt_trainer *t, const float *host) { place_params(t, host); }

/* A dt_ckpt ready for dt_ckpt_read of this model: the layer table (returned,
 * to free) and a parameter buffer (c->params, to free). */
static struct dt_ckpt_layer *read_setup(const struct dt_model *m, struct dt_ckpt *c)
{
    memset(c, 0, sizeof *c);
    struct dt_ckpt_layer *layers = dt_ckpt_layer_table(m, &c->nlayers);
    c->nparams = m->nparams;
    c->nbuffers = m->nbuffers;
    c->layers = layers;
    c->params = dt_xmalloc(sizeof(float) * (m->nparams + m->nbuffers + 1));
    return layers;
}

/* Rank 0: does dir hold no checkpoint at all (no latest, no ckpt-*.h5)? */
static int no_checkpoint_yet(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", dir);
    if (access(path, F_OK) == 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    int none = 1;
    while (none && (e = readdir(d)))
        if (!strncmp(e->d_name, "ckpt-", 5)) none = 0;
    closedir(d);
    return none;
}

/* Collective: --resume latest in a first run of a requeued job (no
 * checkpoint in the directory yet, rank 0 decides): a fresh start. */
static int nothing_to_resume(struct dt_trainer *t)
{
    const struct dt_config *cfg = t->cfg;
    if (strcmp(cfg->resume, "latest")) return 0;
    int fresh = t->rank == 0 ? no_checkpoint_yet(cfg->checkpoint_dir) : 0;
    DT_MPI_CHECK(MPI_Bcast(&fresh, 1, MPI_INT, 0, t->comm));
    if (fresh && t->rank == 0 && cfg->verbose >= DT_NORMAL)
        printf("dtrain: --resume latest: no checkpoint in %s yet; starting from the beginning\n", cfg->checkpoint_dir);
    return fresh;
}

/* Whether a run of nranks under policy deals the same samples to global
 * step k as a run of any other rank count with the same global batch. */
static int order_portable(int policy, int nranks) { return policy == DT_SHARD_DATA || nranks == 1; }

/* The checkpoint's layout (ranks x batch, which decides the data order
 * within an epoch, and auto's timed algorithms): this rank's dropout stream
 * where the layout is the same; else a note. An interrupted epoch goes on
 * where it stopped when the order is the same anyway (the same global batch,
 * and a policy whose order does not depend on the rank count: data, or one
 * rank); otherwise it starts again. */
static void resume_layout(struct dt_trainer *t, const struct dt_ckpt *c)
{
    const struct dt_config *cfg = t->cfg;
    long file_batch = 0, file_accum = 1, file_policy = DT_SHARD_AUTO;
    for (int i = 0; i < c->nconfig; i++) {
        if (!strcmp(c->config_keys[i], "batch_size")) file_batch = strtol(c->config_values[i], NULL, 10);
        if (!strcmp(c->config_keys[i], "grad_accum")) file_accum = strtol(c->config_values[i], NULL, 10);
        if (!strcmp(c->config_keys[i], "shard_policy")) file_policy = strtol(c->config_values[i], NULL, 10);
        /* auto's algorithms as that run timed them, so the resumed run sums in the same order */
        if (!strcmp(c->config_keys[i], "allreduce_timed")) dt_auto_preset(&t->coll, c->config_values[i]);
    }
    int same_layout = c->file_nranks == t->nranks && file_batch == cfg->batch_size;
    if (same_layout) memcpy(t->dropout_rng.s, c->all_rng[t->rank], sizeof t->dropout_rng.s);
    const int accum = cfg->grad_accum > 1 ? cfg->grad_accum : 1;
    const int was = dt_shard_resolve((int)file_policy, t->data.nfiles, c->file_nranks);
    const int same_order = (long)c->file_nranks * file_batch * file_accum == (long)t->nranks * cfg->batch_size * accum &&
                           was >= 0 && order_portable(was, c->file_nranks) && order_portable(t->policy, t->nranks);
    if (!same_layout && t->rank == 0)
        fprintf(stderr, "dtrain: note: --resume: the checkpoint was written by %d rank%s x batch %ld, this run has "
                "%d x %d: %s; dropout streams restart from the seed%s\n", c->file_nranks,
                c->file_nranks == 1 ? "" : "s", file_batch, t->nranks, cfg->batch_size,
                same_order ? "the same global batch deals the same samples" : "the data order is re-sharded",
                c->step <= 0 ? "" : same_order ? "; the interrupted epoch goes on where it stopped"
                                               : "; the interrupted epoch starts again from its beginning");
    if (!same_layout && !same_order && c->step > 0) {
        t->start_step = 0;
        memset(t->start_progress, 0, sizeof t->start_progress);
    }
}

/* The epochs' history, the early-stopping monitor and the loss scale (put
 * back once the strategy exists). */
static void resume_history(struct dt_trainer *t, const struct dt_ckpt *c)
{
    int nh = c->nhistory < t->cfg->epochs ? c->nhistory : t->cfg->epochs;
    for (int e = 0; e < nh; e++) {
        struct dt_epoch_stats *h = &t->history[e];
        h->loss = c->history[e][0];
        h->accuracy = c->history[e][1];
        h->val_loss = c->history[e][2];
        h->val_accuracy = c->history[e][3];
        h->validated = c->history[e][2] == c->history[e][2]; /* not NaN */
        h->seconds = c->history[e][4];
        h->samples = (int64_t)c->history[e][5];
    }
    t->epochs_done = nh;
    t->stopper.best = c->best;
    t->stopper.best_epoch = c->best_epoch;
    t->stopper.wait = c->wait;
    t->resume_ls[0] = (double)c->ls_scale;
    t->resume_ls[1] = (double)c->ls_clean;
    t->resume_ls[2] = (double)c->ls_skipped;
    t->resume_ls_on = c->ls_on;
}

int dt_trainer_resume_params(struct dt_trainer *t, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    struct dt_model *m = &t->model;
    if (nothing_to_resume(t)) {
        st->code = DT_OK;
        return DT_OK;
    }
    if (dt_ckpt_resolve(t->comm, cfg->resume, cfg->checkpoint_dir, t->resume_path, sizeof t->resume_path, st) != DT_OK)
        return st->code;
    struct dt_ckpt c;
    struct dt_ckpt_layer *layers = read_setup(m, &c);
    int rc = dt_ckpt_read(t->comm, t->resume_path, &c, st);
    if (rc == DT_OK && c.data_checksum != t->data_checksum)
        rc = dt_fail(st, DT_EINPUT, "--resume %s: the checkpoint was trained on other data (checksum %016llx; "
                     "%s gives %016llx)", t->resume_path, (unsigned long long)c.data_checksum, cfg->inputs[0],
                     (unsigned long long)t->data_checksum);
    else if (rc == DT_OK && strcmp(c.optimizer, cfg->optimizer) != 0)
        rc = dt_fail(st, DT_EUSAGE, "--resume %s: the checkpoint's optimizer is %s, this run's is %s",
                     t->resume_path, c.optimizer, cfg->optimizer);
    if (rc != DT_OK) {
        dt_ckpt_release(&c);
        free(c.params);
        free(layers);
        return dt_status_agree(st, t->comm);
    }
    if (m->sharded && t->cfg->pipeline_stages < 2) { /* fsdp keeps this rank's segment only: the rest stays untouched */
        size_t off, len;
        dt_fsdp_segment(t->cfg->fsdp_node, &t->coll.topo, m->nparams, t->rank, &off, &len);
        memcpy(m->params + off, c.params + off, sizeof(float) * len);
    } else {
        t->be->upload(m->params, c.params, sizeof(float) * m->nparams); /* the model's own block, before placement */
    }
    t->be->upload(m->buffers, c.params + m->nparams, sizeof(float) * m->nbuffers);
    t->start_epoch = c.epoch;
    t->start_step = c.step;
    t->global_step = c.global_step;
    memcpy(t->start_progress, c.progress, sizeof c.progress);
    resume_layout(t, &c);
    resume_history(t, &c);
    t->resumed = 1;
    dt_ckpt_release(&c);
    free(c.params);
    free(layers);
    return DT_OK;
}

int dt_trainer_resume_optimizer(struct dt_trainer *t, dt_status *st)
{
    struct dt_model *m = &t->model;
    struct dt_strategy *s = &t->strategy;
    struct dt_ckpt c;
    struct dt_ckpt_layer *layers = read_setup(m, &c);
    c.nslots = optim_slots(s, c.slot_names);
    int writer;
    optim_owner(t, &c.off, &c.len, &writer);
    for (int i = 0; i < c.nslots; i++)
        if (s->optim.ops) c.slots[i] = dt_xmalloc(sizeof(float) * (c.len ? c.len : 1));
    int rc = dt_ckpt_read(t->comm, t->resume_path, &c, st);
    if (rc == DT_OK) {
        for (int i = 0; i < c.nslots; i++)
            if (c.slots[i]) t->be->upload(s->optim.slot[i], c.slots[i], sizeof(float) * c.len);
        if (s->optim.ops) s->optim.step = c.opt_step;
        if (t->resume_ls_on && s->loss_scale.on) {
            s->loss_scale.scale = (float)t->resume_ls[0];
            s->loss_scale.clean = (int)t->resume_ls[1];
            s->loss_scale.skipped = (long)t->resume_ls[2];
        }
    }
    for (int i = 0; i < c.nslots; i++) free(c.slots[i]);
    dt_ckpt_release(&c);
    free(c.params);
    free(layers);
    return rc;
}

int dt_trainer_resume_best(struct dt_trainer *t, dt_status *st)
{
    struct dt_model *m = &t->model;
    char dir[4096], path[4096];
    snprintf(dir, sizeof dir, "%s/best", t->cfg->checkpoint_dir);
    if (dt_ckpt_resolve(t->comm, dir, NULL, path, sizeof path, st) != DT_OK) return st->code;
    struct dt_ckpt c;
    struct dt_ckpt_layer *layers = read_setup(m, &c);
    int rc = dt_ckpt_read(t->comm, path, &c, st);
    if (rc == DT_OK && c.epoch != t->stopper.best_epoch + 1)
        rc = dt_fail(st, DT_EINPUT, "%s holds epoch %d, the best was epoch %d", path, c.epoch, t->stopper.best_epoch + 1);
    if (rc == DT_OK) {
        t->best_params = c.params; /* kept: freed with the trainer */
        c.params = NULL;
    }
    dt_ckpt_release(&c);
    free(c.params);
    free(layers);
    return dt_status_agree(st, t->comm);
}
