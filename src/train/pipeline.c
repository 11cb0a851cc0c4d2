/* pipeline.c: the cut of the model into stages and the 1F1B schedule (see
 * pipeline.h).
 *
 * The cut: [stage] lines in the model file when it has them; otherwise
 * every layer's forward and backward pass is timed once at the
 * micro-batch's size (each rank times a share of the layers, one layer's
 * buffers at a time) and the layers are split into P contiguous stages
 * with the smallest slowest stage, at the places a model may be cut
 * (dt_model_can_cut: no residual reaches across).
 *
 * A batch of n samples is M micro-batches of n/M (the first n%M one more).
 * The loss of each is scaled by 1/(the update's samples), so the stages'
 * gradients, summed over micro-batches and replicas, are the data-parallel
 * run's. Activations go forward and their gradients back with MPI_Isend
 * (waited for before the copy that sent them runs again) and blocking
 * receives, in 1F1B order, which cannot deadlock: every receive's sender
 * is at an earlier point of the same order. Time in receives and waits,
 * and at the batch's end for the replica's other stages, is the bubble. */
#include "config.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics/timeline.h"
#include "runtime/checks.h"
#include "strategy/memplan.h"
#include "strategy/pipe.h"
#include "train/pipeline.h"
#include "train/train.h"

enum { TAG_ACT = 71, TAG_GRAD = 72 };

/* The micro-batch size: a batch's first part. */
static int micro_max(const struct dt_trainer *t)
{
    const int B = t->cfg->batch_size, M = t->cfg->micro_batches;
    return B / M + (B % M != 0);
}

/* Bytes of n samples of act[i] of model m. */
static size_t act_bytes(const struct dt_model *m, int i, int n)
{
    struct dt_shape s = i == 0 ? m->input : m->layers[i - 1].out;
    return dt_act_size(m->act_type) * dt_shape_size(s) * (size_t)n;
}

/* A model of the configured layers, built but not created. */
static void build_copy(const struct dt_trainer *t, struct dt_model *m)
{
    struct dt_layer_spec *specs;
    int n;
    dt_status st = {0};
    if (dt_model_specs(t->cfg->model, t->model.classes, t->cfg->dropout, &specs, &n, &st) != DT_OK ||
        dt_model_build_specs(m, t->cfg->model, t->model.input, t->model.classes, specs, n, &st) != DT_OK)
        DT_DIE("pipeline: the model built once does not build again: %s", st.msg);
    m->recompute = t->model.recompute;
    free(specs);
}

static double seconds_of(const struct dt_trainer *t, struct dt_model *one, int n)
{
    double best = DBL_MAX;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = MPI_Wtime();
        dt_model_forward(one, n, 1, (dt_rng *)&t->dropout_rng);
        dt_model_backward(one, n, (dt_rng *)&t->dropout_rng);
        double dt = MPI_Wtime() - t0;
        if (rep > 0 && dt < best) best = dt; /* the first warms up */
    }
    return best;
}

/* A layer timed alone: its parameters are zeros from a scratch block. */
static const float *scratch_at(void *arg, int layer, int backward, float **grads)
{
    (void)layer;
    if (backward) *grads = arg;
    return arg;
}
static void scratch_after(void *arg, int layer, int backward) { (void)arg, (void)layer, (void)backward; }

/* Layer i on its own (with the add folded into it, if any) at n samples:
 * zeros in, its other input (an add's or route's) in a buffer of its own. */
static double time_layer(struct dt_trainer *t, int i, int n, struct dt_param_hook *hook)
{
    struct dt_model one;
    build_copy(t, &one);
    one.lo = i;
    one.hi = one.layers[i].fold_add ? i + 2 : i + 1;
    one.sharded = 1;
    one.hook = hook;
    dt_model_create(&one, t->be, n);
    for (int k = one.lo; k <= one.hi; k++) {
        if (one.act[k]) t->be->zero(one.act[k], act_bytes(&one, k, n));
        if (k > 0 && one.dact[k]) t->be->zero(one.dact[k], act_bytes(&one, k, n));
    }
    const int other = one.layers[i].fold_add ? one.layers[i].add_src : one.layers[i].src;
    dt_act *borrowed = NULL;
    if (other >= 0 && other < one.lo) {
        borrowed = one.act[other] = t->be->alloc(act_bytes(&one, other, n));
        t->be->zero(borrowed, act_bytes(&one, other, n));
    }
    double sec = seconds_of(t, &one, n);
    if (borrowed) {
        t->be->free(borrowed);
        one.act[other] = NULL;
    }
    dt_model_free(&one);
    return sec;
}

/* Seconds of forward + backward of each layer at the micro-batch size,
 * timed on rank 0 alone while the others sleep (ranks timing at once on
 * shared cores would time each other), then sent to all. A folded add is
 * timed with the batchnorm it is folded into; a route, whose output is its
 * input, costs nothing. */
static void measure(struct dt_trainer *t, double *cost)
{
    const int L = t->model.nlayers, n = micro_max(t);
    memset(cost, 0, sizeof(double) * (size_t)L);
    if (t->rank == 0) {
        size_t widest = 1;
        for (int i = 0; i < L; i++)
            if (t->model.layers[i].nparams > widest) widest = t->model.layers[i].nparams;
        float *scratch = dt_xcalloc(widest, sizeof(float));
        struct dt_param_hook hook = {.at = scratch_at, .after = scratch_after, .arg = scratch};
        for (int i = 0; i < L; i++)
            if (!t->model.layers[i].folded && t->model.layers[i].ops != &dt_route_ops)
                cost[i] = time_layer(t, i, n, &hook);
        free(scratch);
    }
    MPI_Request req;
    DT_MPI_CHECK(MPI_Ibcast(cost, L, MPI_DOUBLE, 0, t->comm, &req));
    for (int done = 0;;) {
        DT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* The cut from [stage] lines; an error names a line that cannot be a cut. */
static int marked_cut(struct dt_trainer *t, int marks, dt_status *st)
{
    const struct dt_model *m = &t->model;
    const int P = t->pipe.P;
    if (marks + 1 != P)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: model %s has %d [stage] line%s, which make%s %d stage%s; "
                       "give --pipeline-stages %d, or add or remove [stage] lines", P, t->cfg->model, marks,
                       marks == 1 ? "" : "s", marks == 1 ? "s" : "", marks + 1, marks ? "s" : "", marks + 1);
    int k = 1;
    for (int i = 1; i < m->nlayers; i++)
        if (m->layers[i].spec.stage) {
            if (!dt_model_can_cut(m, i))
                return dt_fail(st, DT_EUSAGE, "model %s: the [stage] before layer %s cuts through a residual "
                               "block (a later add or route reads an output before it, or an add is folded into "
                               "the layer before); move it", t->cfg->model, m->layers[i].name);
            t->pipe.cut[k++] = i;
        }
    return DT_OK;
}

/* The stages' refusals, then the cut. */
static int plan_cut(struct dt_trainer *t, dt_status *st)
{
    const struct dt_model *m = &t->model;
    const int P = t->pipe.P;
    int marks = 0, places = 0;
    for (int i = 1; i < m->nlayers; i++) {
        marks += m->layers[i].spec.stage != 0;
        places += dt_model_can_cut(m, i);
    }
    if (t->nranks % P != 0)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d does not divide the job's %d rank%s: the ranks form a "
                       "P x D mesh (stages x replicas); use a divisor of %d", P, t->nranks, t->nranks == 1 ? "" : "s",
                       t->nranks);
    if (P > m->nlayers)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: more stages than model %s's %d layers", P,
                       t->cfg->model, m->nlayers);
    if (dt_model_tied_head(m) >= 0)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: model %s's %s shares the embedding's table (tied = 1), "
                       "and the first and last stages would each need it; set tied = 0 in the model file", P,
                       t->cfg->model, m->layers[dt_model_tied_head(m)].name);
    t->pipe.cut[0] = 0;
    t->pipe.cut[P] = m->nlayers;
    if (marks) {
        t->pipe.marked = 1;
        return marked_cut(t, marks, st);
    }
    if (places + 1 < P)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: model %s can be cut in only %d place%s (%d stages at "
                       "most): a stage may not start inside a residual block", P, t->cfg->model, places,
                       places == 1 ? "" : "s", places + 1);
    t->pipe.cost = dt_xcalloc((size_t)m->nlayers, sizeof(double));
    measure(t, t->pipe.cost);
    dt_pipe_balance(m, t->pipe.cost, P, t->pipe.cut);
    return DT_OK;
}

/* A micro-batch's activations cross each cut as one message of MPI_BYTEs,
 * whose count is an int. */
static int check_messages(struct dt_trainer *t, dt_status *st)
{
    const struct dt_pipe_run *pr = &t->pipe;
    for (int k = 1; k < pr->P; k++) {
        const struct dt_layer *l = &t->model.layers[pr->cut[k] - 1];
        double bytes = (double)dt_act_size(t->be->act_type()) * (double)dt_shape_size(l->out) * micro_max(t);
        if (bytes > (double)INT_MAX)
            return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: a micro-batch's activations after layer %s are %.0f "
                           "bytes, more than one MPI message holds (%d); give more --micro-batches or a smaller "
                           "--batch-size", pr->P, l->name, bytes, INT_MAX);
    }
    return DT_OK;
}

int dt_pipe_plan(struct dt_trainer *t, dt_status *st)
{
    struct dt_pipe_run *pr = &t->pipe;
    st->code = DT_OK;
    if (t->cfg->pipeline_stages < 2) return DT_OK;
    pr->on = 1;
    pr->P = t->cfg->pipeline_stages;
    pr->M = t->cfg->micro_batches;
    pr->cut = dt_xcalloc((size_t)pr->P + 1, sizeof(int));
    if (plan_cut(t, st) == DT_OK) check_messages(t, st);
    if (dt_status_agree(st, t->comm) != DT_OK) return st->code;
    const int D = t->nranks / pr->P, stage = t->rank / D;
    t->model.lo = pr->cut[stage];
    t->model.hi = pr->cut[stage + 1];
    pr->K = pr->M < pr->P - stage ? pr->M : pr->P - stage;
    pr->micro = micro_max(t);
    return DT_OK;
}

void dt_pipe_segment(const struct dt_trainer *t, int r, size_t *off, size_t *len)
{
    const struct dt_model *m = &t->model;
    const int k = r / (t->nranks / t->pipe.P), lo = t->pipe.cut[k], hi = t->pipe.cut[k + 1];
    *off = m->layers[lo].param_offset;
    *len = (hi < m->nlayers ? m->layers[hi].param_offset : m->nparams) - *off;
}

void dt_pipe_start(struct dt_trainer *t)
{
    struct dt_pipe_run *pr = &t->pipe;
    if (!pr->on) return;
    pr->copy = dt_xcalloc((size_t)pr->K, sizeof *pr->copy);
    pr->fwd = dt_xmalloc(sizeof(MPI_Request) * (size_t)pr->K);
    pr->bwd = dt_xmalloc(sizeof(MPI_Request) * (size_t)pr->K);
    for (int k = 0; k < pr->K; k++) pr->fwd[k] = pr->bwd[k] = MPI_REQUEST_NULL;
    for (int k = 1; k < pr->K; k++) {
        struct dt_model *c = &pr->copy[k];
        build_copy(t, c);
        c->lo = t->model.lo;
        c->hi = t->model.hi;
        c->sharded = 1;
        c->hook = t->model.hook;
        dt_model_create(c, t->be, pr->micro);
        for (int i = 0; i < c->nlayers; i++) c->layers[i].buffers = t->model.buffers + c->layers[i].buffer_offset;
    }
}

/* Copy k of the stage: the trainer's model is the first. */
static struct dt_model *copy_of(struct dt_trainer *t, int k) { return k ? &t->pipe.copy[k] : &t->model; }

/* Waits for a neighbour count as the bubble; one that does not end is the
 * stall watchdog's (--stall-timeout) to name. */
static void wait_req(struct dt_trainer *t, MPI_Request *r)
{
    int done;
    DT_MPI_CHECK(MPI_Test(r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    double t0 = MPI_Wtime();
    dt_watchdog_enter(&t->watchdog, "a pipeline send to a neighbouring stage");
    DT_MPI_CHECK(MPI_Wait(r, MPI_STATUS_IGNORE));
    dt_watchdog_leave(&t->watchdog);
    t->pipe.idle += MPI_Wtime() - t0;
}

static void recv_act(struct dt_trainer *t, dt_act *buf, size_t bytes, int from, int tag, MPI_Comm comm)
{
    double t0 = MPI_Wtime();
    DT_TL_BEGIN(tl_r);
    dt_watchdog_enter(&t->watchdog, tag == TAG_ACT ? "a pipeline receive of activations" : "a pipeline receive of gradients");
    DT_MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, from, tag, comm, MPI_STATUS_IGNORE));
    dt_watchdog_leave(&t->watchdog);
    DT_TL_END(tl_r, DT_TL_COMM, tag == TAG_ACT ? "pipeline: activations in" : "pipeline: gradients in", NULL);
    t->pipe.idle += MPI_Wtime() - t0;
}

struct micro {
    int n, at;       /* samples, and the first one's place in the batch */
    float scale;     /* loss gradient scale (0: evaluation) */
    float *stats;    /* the loss sum and correct count, on the last stage */
    double *sums;    /* evaluation's */
};

static void forward(struct dt_trainer *t, struct dt_model *m, MPI_Request *sent, const struct micro *u, int train)
{
    struct dt_pipe_run *pr = &t->pipe;
    const struct dt_pipe *p = dt_pipe_of(&t->strategy);
    const size_t row = dt_shape_size(t->model.input);
    wait_req(t, sent); /* this copy's last output has left */
    if (p->stage == 0) dt_model_load_input(m, m->act[0], t->dev_images + row * (size_t)u->at, row * (size_t)u->n);
    else recv_act(t, m->act[m->lo], act_bytes(m, m->lo, u->n), p->prev, TAG_ACT, p->pipe_comm);
    double t0 = MPI_Wtime();
    dt_model_forward(m, u->n, train, train ? &t->dropout_rng : NULL);
    if (p->next == MPI_PROC_NULL) {
        struct dt_loss_result r = dt_model_loss(m, t->dev_targets + t->target_row * (size_t)u->at, u->n, u->scale);
        if (u->stats) {
            u->stats[0] += (float)r.loss_sum;
            u->stats[1] += (float)r.correct;
        }
        if (u->sums) {
            u->sums[0] += r.loss_sum;
            u->sums[1] += (double)r.correct;
        }
    }
    pr->busy += MPI_Wtime() - t0;
    if (p->next != MPI_PROC_NULL)
        DT_MPI_CHECK(MPI_Isend(m->act[m->hi], (int)act_bytes(m, m->hi, u->n), MPI_BYTE, p->next, TAG_ACT,
                               p->pipe_comm, sent));
}

static void backward(struct dt_trainer *t, struct dt_model *m, MPI_Request *sent, const struct micro *u, int first)
{
    struct dt_pipe_run *pr = &t->pipe;
    struct dt_pipe *p = dt_pipe_of(&t->strategy);
    if (p->next != MPI_PROC_NULL)
        recv_act(t, m->dact[m->hi], act_bytes(m, m->hi, u->n), p->next, TAG_GRAD, p->pipe_comm);
    wait_req(t, sent); /* this copy's last input gradient has left */
    double t0 = MPI_Wtime();
    p->add = !first;
    dt_model_backward(m, u->n, &t->dropout_rng);
    pr->busy += MPI_Wtime() - t0;
    if (p->prev != MPI_PROC_NULL)
        DT_MPI_CHECK(MPI_Isend(m->dact[m->lo], (int)act_bytes(m, m->lo, u->n), MPI_BYTE, p->prev, TAG_GRAD,
                               p->pipe_comm, sent));
}

static struct micro part(const struct dt_trainer *t, int n, int j)
{
    const int M = t->pipe.M, q = n / M, r = n % M;
    return (struct micro){.n = q + (j < r), .at = j * q + (j < r ? j : r)};
}

void dt_pipe_batch(struct dt_trainer *t, int n, int64_t global, float *stats)
{
    struct dt_pipe_run *pr = &t->pipe;
    const struct dt_pipe *p = dt_pipe_of(&t->strategy);
    const int M = pr->M, K = pr->K;
    const int warm = M < p->P - p->stage - 1 ? M : p->P - p->stage - 1;
    const float scale = 1.0f / (float)(global > 0 ? global : 1);
    int f = 0, b = 0; /* the next micro-batch to go forward, backward */
    for (; f < warm; f++) {
        struct micro u = part(t, n, f);
        u.scale = scale;
        u.stats = stats;
        forward(t, copy_of(t, f % K), &pr->fwd[f % K], &u, 1);
    }
    for (; b < M; b++) {
        if (f < M) {
            struct micro u = part(t, n, f);
            u.scale = scale;
            u.stats = stats;
            forward(t, copy_of(t, f % K), &pr->fwd[f % K], &u, 1);
            f++;
        }
        struct micro u = part(t, n, b);
        backward(t, copy_of(t, b % K), &pr->bwd[b % K], &u, b == 0);
    }
    for (int k = 0; k < K; k++) {
        wait_req(t, &pr->fwd[k]);
        wait_req(t, &pr->bwd[k]);
    }
    /* The drain: a stage done early waits for the replica's others (stage 0's
     * last backward ends the schedule); that wait is bubble too. */
    double t0 = MPI_Wtime();
    dt_watchdog_enter(&t->watchdog, "the end of a pipelined batch");
    DT_MPI_CHECK(MPI_Barrier(p->pipe_comm));
    dt_watchdog_leave(&t->watchdog);
    pr->idle += MPI_Wtime() - t0;
}

void dt_pipe_evaluate(struct dt_trainer *t, int n, double sums[2])
{
    struct dt_pipe_run *pr = &t->pipe;
    const int M = pr->M;
    const double busy = pr->busy, idle = pr->idle; /* the bubble is training's */
    for (int j = 0; j < M; j++) { /* forward only: the micro-batches (n <= the batch) one after another, in copy 0 */
        struct micro u = part(t, n, j);
        u.sums = sums;
        forward(t, copy_of(t, 0), &pr->fwd[0], &u, 0);
        wait_req(t, &pr->fwd[0]);
    }
    pr->busy = busy;
    pr->idle = idle;
}

double dt_pipe_bubble(struct dt_trainer *t)
{
    struct dt_pipe_run *pr = &t->pipe;
    double v[2] = {pr->idle, pr->busy + pr->idle};
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, t->comm));
    pr->idle = pr->busy = 0.0;
    pr->last_bubble = v[1] > 0 ? v[0] / v[1] : 0.0;
    return pr->last_bubble;
}

void dt_pipe_describe(const struct dt_trainer *t, char *out, size_t len)
{
    const struct dt_pipe_run *pr = &t->pipe;
    size_t at = 0;
    out[0] = '\0';
    for (int k = 0; k < pr->P && at + 24 < len; k++)
        at += (size_t)snprintf(out + at, len - at, "%s%d-%d", k ? " | " : "", pr->cut[k], pr->cut[k + 1] - 1);
}

void dt_pipe_free(struct dt_trainer *t)
{
    struct dt_pipe_run *pr = &t->pipe;
    if (!pr->on) return;
    for (int k = 0; pr->copy && k < pr->K; k++) {
        if (pr->fwd[k] != MPI_REQUEST_NULL) MPI_Wait(&pr->fwd[k], MPI_STATUS_IGNORE);
        if (pr->bwd[k] != MPI_REQUEST_NULL) MPI_Wait(&pr->bwd[k], MPI_STATUS_IGNORE);
        if (k > 0) dt_model_free(&pr->copy[k]);
    }
    free(pr->copy);
    free(pr->fwd);
    free(pr->bwd);
    free(pr->cut);
    free(pr->cost);
    memset(pr, 0, sizeof *pr);
}
