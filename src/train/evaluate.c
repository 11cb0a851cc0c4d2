/* evaluate.c: what the trainer checks and measures between epochs: the
 * test split's loss and accuracy, the replicas' agreement, the memory used.
 *
 * The design decision: evaluation is split into this rank's slice (local,
 * no collective) and the mean over the ranks, so the program (which stops
 * on a read error where it happens) and libdtrain (which reports it as a
 * value, src/api/model.c) read the same slices with the same code. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "collectives/sum_large.h"
#include "metrics/timeline.h"
#include "runtime/checks.h"
#include "runtime/consistency.h"
#include "strategy/memplan.h"
#include "strategy/pipe.h"
#include "train/step.h"

int dt_trainer_evaluate_slice(struct dt_trainer *t, struct dt_dataset *data, struct dt_batch *b, int batch,
                              double sums[3], dt_status *st)
{
    const struct dt_split *sp = &data->split[DT_TEST];
    /* Contiguous near-equal slices of the test split, one per rank (a
     * pipeline: per replica, its stages passing each batch along). */
    const int pipe = t->pipe.on, slices = pipe ? t->strategy.nreplicas : t->nranks;
    const int me = pipe ? t->strategy.replica : t->rank;
    const int counts = !pipe || t->rank / slices == t->pipe.P - 1; /* the last stage has the loss */
    int64_t q = sp->n / slices, rem = sp->n % slices;
    int64_t begin = me * q + (me < rem ? me : rem), end = begin + q + (me < rem);
    st->code = DT_OK;
    for (int64_t at = begin; at < end; at += batch) {
        int n = (int)(end - at < batch ? end - at : batch);
        for (int i = 0; i < n; i++) b->idx[i] = at + i;
        if (dt_dataset_read(data, DT_TEST, b->idx, n, b->images, b->labels, st) != DT_OK) return st->code;
        dt_step_load(t, b, n);
        if (pipe) {
            dt_pipe_evaluate(t, n, sums);
        } else {
            dt_model_forward(&t->model, n, 0, NULL);
            struct dt_loss_result r = dt_model_loss(&t->model, t->dev_targets, n, 0.0f);
            sums[0] += r.loss_sum;
            sums[1] += (double)r.correct;
        }
        sums[2] += counts ? n : 0;
    }
    return DT_OK;
}

void dt_trainer_evaluate_mean(struct dt_trainer *t, double sums[3], double *loss, double *accuracy)
{
    dt_allreduce_sum_f64(sums, 3, t->comm);
    *loss = sums[2] > 0 ? sums[0] / sums[2] : (double)NAN;
    *accuracy = sums[2] > 0 ? sums[1] / sums[2] : (double)NAN;
}

void dt_trainer_evaluate(struct dt_trainer *t, double *loss, double *accuracy)
{
    DT_TL_BEGIN(tl_eval);
    dt_status st = {0};
    double sums[3] = {0.0, 0.0, 0.0}; /* loss, correct, samples */
    struct dt_batch *b = dt_loader_spare(&t->loader); /* no epoch runs now */
    if (dt_trainer_evaluate_slice(t, &t->data, b, t->cfg->batch_size, sums, &st) != DT_OK) DT_DIE("%s", st.msg);
    /* Between epochs rank 0 also writes reports alone, so these waits are
     * timed as a checkpoint write's: only against a rank gone silent. */
    dt_watchdog_enter_io(&t->watchdog, "the validation's end");
    dt_trainer_evaluate_mean(t, sums, loss, accuracy);
    dt_watchdog_leave(&t->watchdog);
    DT_TL_END(tl_eval, DT_TL_COMPUTE, "evaluate", NULL);
}

int dt_trainer_check_replicas(struct dt_trainer *t, int epoch, FILE *out, dt_status *st)
{
    size_t np = t->model.nparams, nb = t->model.nbuffers;
    if (dt_strategy_shards_params(&t->strategy)) np = 0; /* one copy of each, nothing to diverge */
    /* The values' bits, hashed through a 4 MiB window: a whole host copy of
     * the model would raise every rank's peak memory by the model's size. */
    const size_t piece = (size_t)1 << 20;
    float *host = dt_xmalloc(sizeof(float) * piece);
    uint64_t h = 0;
    for (int part = 0; part < 2; part++) {
        const float *src = part ? t->model.buffers : t->model.params;
        const size_t n = part ? nb : np;
        for (size_t at = 0; at < n; at += piece) {
            const size_t k = n - at < piece ? n - at : piece;
            t->be->download(host, src + at, sizeof(float) * k);
            h = dt_fnv1a64(host, sizeof(float) * k, h);
        }
    }
    free(host);
    static const char *const names[] = {"parameters and statistics (a hash of their bits)"};
    const long val = (long)(h >> 1);
    char when[64];
    snprintf(when, sizeof when, "after epoch %d", epoch);
    dt_watchdog_enter_io(&t->watchdog, "the replicas' consistency check"); /* as validation's end */
    const int rc = dt_consistency_check(t->comm, when, &val, names, 1, st);
    dt_watchdog_leave(&t->watchdog);
    if (rc != DT_OK) {
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

/* Under --pipeline-stages: what each stage's first replica holds, one line
 * a stage from rank 0, beside the plan (strategy/memplan.h). Collective. */
static void report_stage_memory(struct dt_trainer *t, FILE *out)
{
    const struct dt_pipe *p = dt_pipe_of(&t->strategy);
    const double M = 1048576.0;
    double mine[4] = {4.0 * (double)p->len[p->stage], 4.0 * (double)(p->len[p->stage] + p->scratch_len),
                      (double)dt_strategy_optimizer_bytes(&t->strategy), (double)t->model.act_bytes};
    for (int k = 1; k < t->pipe.K; k++) mine[3] += (double)t->pipe.copy[k].act_bytes;
    double *all = t->rank == 0 ? dt_xmalloc(sizeof(double) * 4 * (size_t)t->nranks) : NULL;
    DT_MPI_CHECK(MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, t->comm));
    const int slots = t->strategy.optim.slot[1] ? 2 : t->strategy.optim.slot[0] ? 1 : 0;
    for (int k = 0; t->rank == 0 && k < p->P; k++) {
        const double *a = all + 4 * (size_t)(k * p->D);
        struct dt_mem_plan plan;
        dt_mem_plan_pipeline(&t->model, p->lo, p->P, t->pipe.M, k, slots, t->cfg->batch_size,
                             dt_act_size(t->model.act_type), &plan);
        const int copies = t->pipe.M < p->P - k ? t->pipe.M : p->P - k; /* micro-batches in flight there */
        fprintf(out, "pipeline stage %d (layers %d-%d, rank %d): parameters %.2f MiB, gradients %.2f, optimizer %.2f, "
                "activations %.2f (%d cop%s of the stage); %.2f MiB in all, planned %.2f\n", k, p->lo[k],
                p->lo[k + 1] - 1, k * p->D, a[0] / M, a[1] / M, a[2] / M, a[3] / M, copies, copies == 1 ? "y" : "ies",
                (a[0] + a[1] + a[2] + a[3]) / M, dt_mem_plan_total(&plan) / M);
    }
    free(all);
}

void dt_trainer_report_memory(struct dt_trainer *t, FILE *out)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mine[3] = {(double)ru.ru_maxrss / 1024.0, pss_kib() / 1024.0,
                      (double)dt_strategy_optimizer_bytes(&t->strategy) / 1048576.0};
    double lo[3], hi[3], sum = 0.0;
    dt_watchdog_enter_io(&t->watchdog, "the run's summary"); /* as dt_trainer_fit's */
    MPI_Allreduce(mine, lo, 3, MPI_DOUBLE, MPI_MIN, t->comm);
    MPI_Allreduce(mine, hi, 3, MPI_DOUBLE, MPI_MAX, t->comm);
    MPI_Allreduce(mine, &sum, 1, MPI_DOUBLE, MPI_SUM, t->comm);
    if (t->rank == 0)
        fprintf(out, "memory per rank: peak RSS %.1f-%.1f MiB, PSS %.1f-%.1f MiB, optimizer state %.2f-%.2f MiB; "
                "the ranks' peak RSS added up: %.1f MiB\n", lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], sum);
    if (t->pipe.on) report_stage_memory(t, out);
    if (t->strategy.ops == &dt_strategy_fsdp) { /* what it holds beside the optimizer */
        size_t two = 0, peak = dt_fsdp_held_peak(&t->strategy, &two);
        double most = (double)peak, shard = (double)t->strategy.shard_len * 2.0 * sizeof(float);
        MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_DOUBLE, MPI_MAX, t->comm);
        if (t->rank == 0)
            fprintf(out, "fsdp: rank 0's shard of parameters and gradients %.2f MiB; gathered parameters held at "
                    "most %.0f bytes on any rank (its two buffers, the largest even and odd bucket: %zu bytes; the model: %zu)\n",
                    shard / 1048576.0, most, two, t->model.nparams * sizeof(float));
    }
    dt_watchdog_leave(&t->watchdog);
}
