/* step.c: one training step (see step.h).
 *
 * dt_step reads top to bottom as the step goes: the update's first batch,
 * where the ranks stand, then per micro-batch: load, forward, loss (with
 * --cuda-graphs backward too, in one launch), and for every micro-batch but
 * the last its gradient into t->accum; for the last, backward with the
 * buckets handed to the strategy, the strategy's reduction and optimizer,
 * and the checks of what came back. The design decision: the strategy
 * (strategy/strategy.h) does everything that differs between strategies;
 * this file never asks which one runs. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/timeline.h"
#include "runtime/checks.h"
#include "runtime/consistency.h"
#include "runtime/fault.h"
#include "runtime/half.h"
#include "strategy/pipe.h"
#include "train/step.h"

void dt_step_load(struct dt_trainer *t, const struct dt_batch *b, int n)
{
    /* On the GPU the copies are asynchronous (pinned memory): the loader does
     * not write b's slot again before the next step's batch is asked for,
     * after this step's end, which waits for the device. */
    size_t bytes = dt_shape_size(t->model.input) * (size_t)n;
    if (n == 0) return;
    t->be->upload(t->dev_images, b->images, bytes);
    t->be->upload(t->dev_labels, b->labels, (size_t)n);
    if (!t->pipe.on) dt_model_load_input(&t->model, t->model.act[0], t->dev_images, bytes); /* a pipeline: by micro-batch */
}

/* Step s's batch from the loader, the wait counted as data time and shown
 * on the timeline as "read batch". */
static const struct dt_batch *next_batch(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t s)
{
    double tr = MPI_Wtime();
    DT_TL_BEGIN(tl_read);
    const struct dt_batch *b = dt_loader_get(&t->loader, s);
    DT_TL_END(tl_read, DT_TL_DATA, "read batch", NULL);
    ep->data_seconds += MPI_Wtime() - tr;
    return b;
}

/* While a GPU runs the forward pass, a loader without a thread reads step s
 * (a thread reads ahead on its own; ep NULL: a custom loop reads its own). */
static void read_ahead(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t s)
{
    if (!ep || t->loader.threaded) return;
    double tr = MPI_Wtime();
    DT_TL_BEGIN(tl_read);
    dt_loader_ahead(&t->loader, s);
    DT_TL_END(tl_read, DT_TL_DATA, "read batch", NULL);
    ep->data_seconds += MPI_Wtime() - tr;
}

/* The update's samples over all replicas (its loss is their mean): those of
 * batch b (step s) and of the later micro-batches up to end, from the plan. */
static int64_t update_samples(struct dt_trainer *t, const struct dt_batch *b, int64_t s, int64_t end)
{
    int64_t global = b->global;
    for (int64_t u = s + 1; u < end; u++) {
        int64_t g;
        dt_shard_step(&t->plan, u, t->idx_scratch, &g);
        global += g;
    }
    return global;
}

/* The ranks agree on where they are before an update's first collective:
 * at the epoch's first update, every 100 updates, or every update with
 * --debug-collectives. Replicas that do not step together (a parameter
 * server's) have no such collective. */
static int check_agreement(struct dt_trainer *t, const struct dt_epoch_run *ep, int64_t s, dt_status *st)
{
    const struct dt_reducer *rd = &t->strategy.reducer;
    if (!t->strategy.lockstep || !(s == ep->first || t->cfg->debug_collectives || (t->global_step + 1) % 100 == 0))
        return DT_OK;
    static const char *const names[] = {"epoch", "step", "update", "parameters", "gradient buckets", "bucket layout"};
    const long vals[] = {ep->epoch + 1, (long)s + 1, t->global_step + 1, (long)t->model.nparams, rd->nbuckets,
                         rd->start ? dt_consistency_hash_longs((const long *)rd->start, (size_t)rd->nbuckets + 1) : 0};
    char when[64];
    snprintf(when, sizeof when, "before epoch %d step %lld", ep->epoch + 1, (long long)s + 1);
    dt_watchdog_enter(&t->watchdog, "the ranks' consistency check"); /* a rank lost since the last step stops here */
    const int rc = dt_consistency_check(t->comm, when, vals, names, 6, st);
    dt_watchdog_leave(&t->watchdog);
    return rc;
}

/* A parameter-server worker reads the current parameters before its
 * update's forward pass, waiting for the others as its mode says. */
static void pull(struct dt_trainer *t)
{
    struct dt_strategy *s = &t->strategy;
    if (!s->ops->pull) return;
    dt_watchdog_enter(&t->watchdog, "a parameter-server pull");
    s->ops->pull(s);
    dt_watchdog_leave(&t->watchdog);
}

/* Batch b (step u) in, its forward pass and loss, as part of an update of
 * `global` samples over the replicas (the first of it: the parameters are
 * pulled first where the strategy pulls). Its loss sum and correct count
 * join stats (NaN after a failed read: see dt_step_read_failure). With
 * --cuda-graphs backward runs in the same launch: *graphed says so. */
static struct dt_loss_result forward_loss(struct dt_trainer *t, struct dt_epoch_run *ep, const struct dt_batch *b,
                                          int64_t u, int first, int64_t global, float *stats, int *graphed)
{
    const struct dt_strategy *s = &t->strategy;
    const int n = b->n;
    dt_step_load(t, b, n);
    if (first) pull(t);
    /* This replica's share of the update's mean loss: the sum of the
     * gradients over the replicas is then the update's gradient. */
    float scale = s->scale_local ? 1.0f / (float)(n > 0 ? n : 1) : 1.0f / (float)(global > 0 ? global : 1);
    *graphed = t->graphs.on && n > 0 && !dt_fault_overflow_at(t->global_step + 1); /* an injected fault: plainly */
    struct dt_loss_result r = {0.0, 0};
    if (*graphed) {
        DT_TL_BEGIN(tl_graph);
        r = dt_step_graphs_run(&t->graphs, &t->model, t->dev_targets, n, scale * s->loss_scale.scale,
                               &t->dropout_rng, t->rank == 0 && t->cfg->verbose ? stdout : NULL);
        DT_TL_END(tl_graph, DT_TL_COMPUTE, "forward+loss+backward (graph)", NULL);
    }
    else
        dt_model_forward(&t->model, n, 1, &t->dropout_rng);
    read_ahead(t, ep, u + 1);
    if (!*graphed) {
        DT_TL_BEGIN(tl_loss);
        r = dt_model_loss(&t->model, t->dev_targets, n, scale * s->loss_scale.scale);
        DT_TL_END(tl_loss, DT_TL_COMPUTE, "loss", NULL);
    }
    stats[0] += (float)r.loss_sum;
    stats[1] += (float)r.correct;
    if (b->failed) stats[0] = NAN; /* tells every rank */
    return r;
}

/* --grad-accum: a micro-batch before the update's last; its gradient joins
 * the sum in t->accum, and nothing is reduced yet. */
static void accumulate(struct dt_trainer *t, int n, int graphed, int first)
{
    if (!graphed) dt_model_backward(&t->model, n, &t->dropout_rng);
    if (t->model.sharded) return; /* fsdp sums the micro-batches in its shards */
    if (first) t->be->copy(t->accum, t->model.grads, sizeof(float) * t->model.nparams);
    else t->be->accumulate(t->accum, t->model.grads, t->model.nparams);
}

/* Tests (runtime/fault.h): rank 0's loss gradient becomes +inf at the
 * chosen updates, as an fp16 overflow would make it. */
static void inject_overflow(struct dt_trainer *t, int n)
{
    if (!dt_fault_overflow_at(t->global_step + 1) || t->strategy.replica != 0 || n <= 0) return;
    const float inf = INFINITY;
    uint32_t bits; /* room for one element of any activation type */
    dt_act_encode(t->model.act_type, &bits, &inf, 1);
    t->be->upload(t->model.dact[t->model.nlayers], &bits, dt_act_size(t->model.act_type));
}

static void grads_ready(void *ctx, size_t offset)
{
    struct dt_strategy *s = ctx;
    s->ops->grads_ready(s, offset);
}

/* The update's last micro-batch (n samples): the strategy's step begins
 * (stats: this rank's figures), and each bucket goes to it once final: as
 * backward finishes it (one micro-batch), all at once (backward ran in the
 * graph), or the whole block once the earlier micro-batches' sum is in. */
static void backward_reduce(struct dt_trainer *t, int n, int graphed, int first, const float *stats)
{
    struct dt_strategy *s = &t->strategy;
    s->ops->begin(s, stats);
    if (first && graphed)
        dt_model_notify_all(&t->model, grads_ready, s);
    else if (first)
        dt_model_backward_notify(&t->model, n, &t->dropout_rng, grads_ready, s);
    else {
        if (!graphed) dt_model_backward(&t->model, n, &t->dropout_rng);
        if (!t->model.sharded) t->be->accumulate(t->model.grads, t->accum, t->model.nparams);
        grads_ready(s, 0); /* the whole block is final */
    }
}

/* Batch normalization's moving statistics without --sync-bn: each replica
 * moves them by its own batch; here they become the replicas' mean (what
 * tf.distribute's MEAN aggregation of these variables gives), so every
 * rank evaluates and checkpoints the same model. Servers of a parameter
 * server hold no statistics of their own and count for nothing. */
void dt_trainer_average_buffers(struct dt_trainer *t)
{
    struct dt_model *m = &t->model;
    if (!m->nbuffers || t->cfg->sync_bn) return;
    float *host = dt_xmalloc(sizeof(float) * m->nbuffers);
    t->be->download(host, m->buffers, sizeof(float) * m->nbuffers);
    if (t->strategy.replica < 0) memset(host, 0, sizeof(float) * m->nbuffers);
    const struct dt_pipe *p = dt_pipe_of(&t->strategy);
    if (p) /* a stage moved its own layers' statistics only: each comes from its stage's replicas */
        for (size_t i = 0; i < m->nbuffers; i++)
            if (i < p->boff || i >= p->boff + p->blen) host[i] = 0.0f;
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host, (int)m->nbuffers, MPI_FLOAT, MPI_SUM, t->comm));
    float inv = 1.0f / (float)t->strategy.nreplicas;
    for (size_t i = 0; i < m->nbuffers; i++) host[i] *= inv;
    t->be->upload(m->buffers, host, sizeof(float) * m->nbuffers);
    free(host);
}

void dt_step_apply(struct dt_trainer *t, float stats[DT_STATS])
{
    struct dt_strategy *s = &t->strategy;
    dt_watchdog_enter(&t->watchdog, "the gradient exchange");
    s->ops->finish(s, stats);
    if (s->lockstep) dt_trainer_average_buffers(t); /* the replicas step together: each step, as TF does */
    dt_watchdog_leave(&t->watchdog);
}

int dt_step_read_failure(struct dt_trainer *t, const struct dt_loader *ld, dt_status *st)
{
    const dt_status *err = ld ? dt_loader_error(ld) : NULL;
    if (err) *st = *err;
    else st->code = DT_OK;
    dt_watchdog_enter(&t->watchdog, "the ranks' agreement on a failed read");
    const int rc = dt_status_agree(st, t->comm);
    dt_watchdog_leave(&t->watchdog);
    return rc;
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
    size_t ng = m->grads ? m->nparams : 0; /* fsdp: no whole block here, no layer named */
    if (ng) t->be->download(g, m->grads, sizeof(float) * m->nparams);
    long mine[2] = {!isfinite(local_loss), -1};
    for (size_t i = 0; i < ng && mine[1] < 0; i++)
        if (!isfinite(g[i])) mine[1] = (long)i;
    free(g);
    long *all = dt_xcalloc(2 * (size_t)t->nranks, sizeof(long));
    dt_watchdog_enter(&t->watchdog, "the search for a NaN (--nan-policy abort)");
    DT_MPI_CHECK(MPI_Allgather(mine, 2, MPI_LONG, all, 2, MPI_LONG, t->comm));
    dt_watchdog_leave(&t->watchdog);
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

/* After the update whose last step is s: a failed read on any rank ends
 * the run (naming the file); a reduced gradient that is not finite ends it
 * too, or the update is dropped (--nan-policy). local_loss: this rank's. */
static int check_update(struct dt_trainer *t, const struct dt_epoch_run *ep, int64_t s, const float *stats,
                        float local_loss, struct dt_step_result *r, dt_status *st)
{
    const struct dt_strategy *strat = &t->strategy;
    if (!strat->local_stats && !isfinite(stats[0]) && dt_step_read_failure(t, &t->loader, st) != DT_OK)
        return st->code;
    if (!strat->nonfinite) return DT_OK; /* every replica saw the same reduced gradient */
    if (strat->nan_policy == DT_NAN_ABORT) return nan_abort(t, ep->epoch, s, local_loss, st);
    r->skipped = 1;
    return DT_OK;
}

int dt_step(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t s, int64_t end, struct dt_step_result *r,
            dt_status *st)
{
    struct dt_strategy *strat = &t->strategy;
    float local[DT_STATS] = {0.0f, 0.0f}; /* this rank's loss sum and correct count */
    int graphed;
    const struct dt_batch *b = next_batch(t, ep, s);
    const int64_t global = update_samples(t, b, s, end);
    dt_watchdog_step(&t->watchdog, ep->epoch + 1, s + 1);
    dt_fault_stall_point(t->rank, t->global_step + 1); /* before the update's first collective */
    if (check_agreement(t, ep, s, st) != DT_OK) return st->code;

    int64_t u = s;
    if (t->pipe.on) { /* --pipeline-stages: the batch's micro-batches through the stages, 1F1B */
        dt_step_load(t, b, b->n);
        dt_pipe_batch(t, b->n, global, local);
        read_ahead(t, ep, s + 1);
        if (b->failed) local[0] = NAN;
    } else {
        forward_loss(t, ep, b, u, 1, global, local, &graphed);
        for (; u + 1 < end; u++) { /* --grad-accum: more micro-batches to come */
            accumulate(t, b->n, graphed, u == s);
            b = next_batch(t, ep, u + 1);
            forward_loss(t, ep, b, u + 1, 0, global, local, &graphed);
        }
        inject_overflow(t, b->n); /* dtrain's tests only: libdtrain's halves never inject */
    }
    float stats[DT_STATS] = {local[0], local[1]};
    if (t->pipe.on) strat->ops->begin(strat, stats);
    else backward_reduce(t, b->n, graphed, u == s, stats);

    long overflows = strat->loss_scale.skipped;
    t->global_step++;
    if (strat->optim.ops) strat->optim.cfg.lr = dt_lr_at(&t->sched, t->global_step - 1);
    dt_step_apply(t, stats);
    *r = (struct dt_step_result){.loss_sum = stats[0], .correct = stats[1], .samples = global,
                                 .overflows = strat->loss_scale.skipped - overflows};
    return check_update(t, ep, end - 1, stats, local[0], r, st);
}

struct dt_loss_result dt_step_forward_backward(struct dt_trainer *t, const struct dt_batch *b,
                                               float stats[DT_STATS])
{
    int graphed;
    struct dt_loss_result r = forward_loss(t, NULL, b, 0, 1, b->global, stats, &graphed);
    backward_reduce(t, b->n, graphed, 1, stats);
    return r;
}
