/* train.c: the training loop: for each epoch, for each update: the step
 * (step.c), then its report and checkpoint; after each epoch validation
 * and the callbacks (--save-best, --early-stopping, checkpoints, signals).
 *
 * The design decision: train_epoch is the same code for every strategy and
 * every step shape. What differs lives elsewhere: inside dt_step
 * (--grad-accum's micro-batches, --cuda-graphs), or behind the strategy (a
 * parameter server's servers take no steps here and serve in its
 * epoch_end). */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "checkpoint/hf.h"
#include "checkpoint/keras.h"
#include "collectives/sum_large.h"
#include "metrics/timeline.h"
#include "runtime/checks.h"
#include "runtime/fault.h"
#include "strategy/memplan.h"
#include "train/autotune.h"
#include "train/step.h"

/* --checkpoint-async's write in flight, once it has ended on every rank:
 * collected (its failure is the run's), its file named. Call it at the same
 * point on every rank. */
static int collect_async(struct dt_trainer *t, FILE *out, dt_status *st)
{
    if (!dt_ckpt_async_inflight(t->ckpt_async)) return DT_OK;
    dt_watchdog_enter_io(&t->watchdog, "the end of an asynchronous checkpoint write");
    const int rc = dt_ckpt_async_wait(t->ckpt_async, st);
    dt_watchdog_leave(&t->watchdog);
    if (rc != DT_OK) {
        size_t n = strlen(st->msg);
        snprintf(st->msg + n, sizeof st->msg - n, "; found failed at global step %ld", t->global_step);
        return st->code;
    }
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dt_ckpt_async_path(t->ckpt_async));
    if (t->cfg->verbose >= DT_VERBOSE && t->rank == 0)
        fprintf(out, "checkpoint: %s (written on the writer thread in %.2f s)\n", t->last_ckpt,
                dt_ckpt_async_last_seconds(t->ckpt_async));
    return DT_OK;
}

static int snapshot_write(const void *snap, MPI_Comm comm, const char *dir, int keep, char *path, size_t pathlen,
                          dt_status *st)
{
    return dt_snapshot_write(snap, comm, dir, keep, path, pathlen, st);
}

static void snapshot_free(void *snap) { dt_snapshot_free(snap); }

/* A checkpoint into --checkpoint-dir of where training stands: handed to
 * the writer thread with --checkpoint-async (after the previous write, if
 * one is still going), or written here when sync asks for it (a signal,
 * the last epoch) or there is no writer. The time training stands still
 * for it is counted. */
static int take_checkpoint(struct dt_trainer *t, int epochs_done, int64_t step, const double progress[3], int sync,
                           FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    double t0 = MPI_Wtime();
    DT_TL_BEGIN(tl_ckpt);
    if (collect_async(t, out, st) != DT_OK) return st->code; /* at most one write in flight */
    if (t->ckpt_async && !sync) {
        struct dt_snapshot *spare = dt_ckpt_async_spare(t->ckpt_async); /* the last one's buffers */
        struct dt_ckpt_job job = {dt_trainer_snapshot(t, epochs_done, step, progress, spare), snapshot_write,
                                  snapshot_free};
        dt_ckpt_async_start(t->ckpt_async, job, cfg->checkpoint_dir, cfg->keep, epochs_done, (long long)step);
    } else {
        if (dt_trainer_save(t, cfg->checkpoint_dir, cfg->keep, epochs_done, step, progress, t->last_ckpt,
                            sizeof t->last_ckpt, st) != DT_OK)
            return st->code;
        if (cfg->verbose >= DT_VERBOSE && t->rank == 0) fprintf(out, "checkpoint: %s\n", t->last_ckpt);
    }
    DT_TL_END(tl_ckpt, DT_TL_COMPUTE, "checkpoint", NULL);
    const int how = t->ckpt_async && !sync;
    t->ckpt_blocked[how] += MPI_Wtime() - t0;
    t->ckpt_count[how]++;
    t->last_ckpt_time = MPI_Wtime();
    return DT_OK;
}

/* After step `done` (of steps) of epoch: a checkpoint when the step count,
 * the clock (rank 0's) or a signal (any rank's) asks; all ranks agree, also
 * on whether an asynchronous write has ended everywhere. A signal ends the
 * run with DT_EXIT_REQUEUE once the checkpoint is written. */
static int step_checkpoint(struct dt_trainer *t, int epoch, int64_t done, int64_t steps, const double sums[2],
                           int64_t samples, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int flags[3] = {dt_signals_pending(),
                    t->rank == 0 && cfg->ckpt_seconds > 0 && MPI_Wtime() - t->last_ckpt_time >= cfg->ckpt_seconds,
                    dt_ckpt_async_busy(t->ckpt_async)};
    /* Watched: a rank lost after the gradient exchange is missed here. */
    dt_watchdog_enter(&t->watchdog, "the ranks' agreement on a checkpoint");
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 3, MPI_INT, MPI_MAX, t->comm));
    dt_watchdog_leave(&t->watchdog);
    if (!flags[2] && collect_async(t, out, st) != DT_OK) return st->code;
    int want = flags[1] || (cfg->ckpt_every_steps && t->global_step % cfg->ckpt_every == 0);
    if (done == steps) { /* the epoch's end writes it (and sees the signal), after validation */
        t->ckpt_pending |= want;
        return DT_OK;
    }
    if (!want && !flags[0]) return DT_OK;
    double progress[3] = {sums[0], sums[1], (double)samples};
    if (take_checkpoint(t, epoch, done, progress, flags[0] != 0, out, st) != DT_OK) return st->code;
    if (flags[0])
        return dt_fail(st, DT_EXIT_REQUEUE, "%s received: checkpoint %s written after epoch %d step %lld; exiting "
                       "with %d so the job can be requeued (resume with --resume latest)",
                       flags[0] == SIGTERM ? "SIGTERM" : "SIGUSR1", t->last_ckpt, epoch + 1, (long long)done,
                       DT_EXIT_REQUEUE);
    return DT_OK;
}

/* The epoch's plan: its order drawn, where a resumed epoch starts, the
 * steps this rank takes, and its loader started. */
static void epoch_begin(struct dt_trainer *t, int epoch, struct dt_epoch_run *ep, struct dt_epoch_stats *es)
{
    const struct dt_config *cfg = t->cfg;
    memset(ep, 0, sizeof *ep);
    ep->epoch = epoch;
    ep->steps = t->plan.steps;
    if (cfg->steps_per_epoch > 0 && cfg->steps_per_epoch < ep->steps) ep->steps = cfg->steps_per_epoch;
    ep->per_update = cfg->grad_accum > 1 ? cfg->grad_accum : 1;
    dt_shard_epoch(&t->plan, cfg->seed, epoch, 1);
    dt_reducer_stats_reset(&t->strategy.reducer);
    memset(&t->strategy.clip, 0, sizeof t->strategy.clip); /* --clip-norm's figures are the epoch's */
    ep->t0 = MPI_Wtime();
    if (t->resumed && epoch == t->start_epoch && t->start_step > 0 && t->start_step < ep->steps) {
        ep->first = t->start_step; /* where its checkpoint was taken */
        ep->sums[0] = t->start_progress[0];
        ep->sums[1] = t->start_progress[1];
        es->samples = (int64_t)t->start_progress[2];
    }
    /* A rank that holds no replica takes no steps (see strategy.h's epoch_end). */
    ep->end = t->strategy.replica >= 0 ? ep->steps : ep->first;
    dt_loader_start(&t->loader, epoch, ep->first, ep->end);
    dt_report_epoch_begin(&t->report, epoch, ep->steps);
}

/* After the update that ends at step `done`: its figures join the epoch's
 * and the progress line; a loss that is not finite ends the run; a
 * checkpoint where one is due. */
static int after_step(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t done, const struct dt_step_result *r,
                      struct dt_epoch_stats *es, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const int say = cfg->verbose >= DT_VERBOSE && t->rank == 0;
    if (r->skipped) {
        if (say)
            fprintf(out, "step %lld/%lld - the gradient holds a NaN or infinity: step skipped (--nan-policy skip)\n",
                    (long long)done, (long long)ep->steps);
        return DT_OK;
    }
    es->samples += r->samples;
    ep->sums[0] += r->loss_sum;
    ep->sums[1] += r->correct;
    dt_report_step(&t->report, done, ep->steps, ep->sums[0], ep->sums[1], es->samples, t->global_step);
    if (t->strategy.local_stats) return DT_OK; /* only this replica's figures: summed at the epoch's end */
    if (say) {
        char note[96] = "";
        if (r->overflows)
            snprintf(note, sizeof note, " - gradient overflow: step skipped, loss scale now %g",
                     (double)t->strategy.loss_scale.scale);
        else if (cfg->clip_norm > 0.0f) /* the norm before clipping */
            snprintf(note, sizeof note, " - grad norm: %.6g", t->strategy.clip.last);
        fprintf(out, "step %lld/%lld - loss: %.6f - accuracy: %.4f%s\n", (long long)done, (long long)ep->steps,
                r->loss_sum / (double)r->samples, r->correct / (double)r->samples, note);
    }
    if (!isfinite(r->loss_sum))
        return dt_fail(st, DT_ERUNTIME, "epoch %d step %lld: the loss is %f; try a smaller --lr", ep->epoch + 1,
                       (long long)done, r->loss_sum);
    if (cfg->checkpoint_dir && t->strategy.lockstep &&
        step_checkpoint(t, ep->epoch, done, ep->steps, ep->sums, es->samples, out, st) != DT_OK)
        return st->code;
    return DT_OK;
}

/* The steps [s, steps) this rank did not take (all of them, on a rank that
 * holds no replica) count as the replicas took them: their samples, and
 * the watchdog hears where they end. */
static void steps_not_taken(struct dt_trainer *t, const struct dt_epoch_run *ep, int64_t s, struct dt_epoch_stats *es)
{
    if (s >= ep->steps) return;
    for (; s < ep->steps; s++) {
        int64_t global;
        dt_shard_step(&t->plan, s, t->idx_scratch, &global);
        es->samples += global;
    }
    dt_watchdog_step(&t->watchdog, ep->epoch + 1, ep->steps);
}

/* The epoch's figures (metrics/report.h); rank 0's clock decides its time,
 * so every rank reports the same. */
static void epoch_figures(struct dt_trainer *t, const struct dt_epoch_run *ep, struct dt_epoch_stats *es)
{
    const struct dt_strategy *strat = &t->strategy;
    es->seconds = MPI_Wtime() - ep->t0;
    es->steps = (ep->steps - ep->first + ep->per_update - 1) / ep->per_update;
    es->data_ms = es->steps ? 1e3 * ep->data_seconds / (double)es->steps : 0.0;
    es->lr = dt_lr_at(&t->sched, t->global_step > 0 ? t->global_step - 1 : 0); /* the epoch's last step */
    es->skipped = strat->loss_scale.skipped + strat->nan_skipped - t->skipped_before;
    es->loss_scale = strat->loss_scale.on ? strat->loss_scale.scale : 0.0f;
    const double updates = (double)strat->clip.updates; /* --clip-norm */
    es->grad_norm = updates > 0 ? strat->clip.norm_sum / updates : (double)NAN;
    es->clipped = updates > 0 ? (double)strat->clip.clipped / updates : (double)NAN;
    t->skipped_before = strat->loss_scale.skipped + strat->nan_skipped;
    if (strat->reducer.steps) {
        es->comm_ms = 1e3 * strat->reducer.comm_seconds / (double)strat->reducer.steps;
        es->wait_ms = 1e3 * strat->reducer.wait_seconds / (double)strat->reducer.steps;
    }
    MPI_Bcast(&es->seconds, 1, MPI_DOUBLE, 0, t->comm);
    es->loss = es->samples ? ep->sums[0] / (double)es->samples : (double)NAN;
    es->accuracy = es->samples ? ep->sums[1] / (double)es->samples : (double)NAN;
}

/* Collective: the epoch ends (the strategy's epoch_end: servers serve
 * there), statistics that were not averaged at each step are, and the
 * figures are summed where each replica kept its own. s: where this
 * rank's loop stopped. */
static int epoch_end(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t s, struct dt_epoch_stats *es,
                     dt_status *st)
{
    struct dt_strategy *strat = &t->strategy;
    steps_not_taken(t, ep, s, es);
    dt_fault_stall_phase(t->rank, "epoch-end", ep->epoch + 1);
    /* Every collective here is watched: a rank lost in the epoch's last
     * step is found here, not left to the scheduler's walltime. */
    dt_watchdog_enter(&t->watchdog, "the epoch's end");
    if (strat->ops->epoch_end) strat->ops->epoch_end(strat, (long)ep->steps);
    if (!strat->lockstep) dt_trainer_average_buffers(t); /* workers step on their own: at the epoch's end */
    if (strat->local_stats) {
        dt_allreduce_sum_f64(ep->sums, 2, t->comm);
        double clip[3] = {strat->clip.norm_sum, (double)strat->clip.updates, (double)strat->clip.clipped};
        dt_allreduce_sum_f64(clip, 3, t->comm); /* the ranks that clipped: workers, or sync's server */
        strat->clip.norm_sum = clip[0];
        strat->clip.updates = (long)clip[1];
        strat->clip.clipped = (long)clip[2];
    }
    epoch_figures(t, ep, es);
    dt_watchdog_leave(&t->watchdog);
    if (strat->local_stats && !isfinite(ep->sums[0])) {
        if (dt_step_read_failure(t, &t->loader, st) != DT_OK) return st->code;
        return dt_fail(st, DT_ERUNTIME, "epoch %d: the loss is %f; try a smaller --lr", ep->epoch + 1, ep->sums[0]);
    }
    return DT_OK;
}

static int train_epoch(struct dt_trainer *t, int epoch, FILE *out, struct dt_epoch_stats *es, dt_status *st)
{
    struct dt_epoch_run ep;
    epoch_begin(t, epoch, &ep, es);
    int64_t s = ep.first;
    for (; s < ep.end; s += ep.per_update) {
        int64_t end = s + ep.per_update < ep.steps ? s + ep.per_update : ep.steps;
        struct dt_step_result r;
        dt_autotune_before_step(t);
        double t0 = MPI_Wtime();
        if (dt_step(t, &ep, s, end, &r, st) != DT_OK) return st->code;
        dt_fault_stall_phase(t->rank, "update-end", t->global_step);
        dt_sample_log_write(t->sample_log, t, epoch, s, end);
        dt_autotune_after_step(t, MPI_Wtime() - t0);
        if (after_step(t, &ep, end, &r, es, out, st) != DT_OK) return st->code;
    }
    return epoch_end(t, &ep, s, es, st);
}

static double monitored(const struct dt_epoch_stats *es, const char *name)
{
    if (!strcmp(name, "val_loss")) return es->val_loss;
    if (!strcmp(name, "val_accuracy")) return es->val_accuracy;
    if (!strcmp(name, "accuracy")) return es->accuracy;
    return es->loss;
}

/* Rank 0 writes the model's weights in Keras 3's .weights.h5 layout, or
 * (hf) as a Hugging Face GPT-2 directory with the data's tokenizer. */
static int export_weights(struct dt_trainer *t, const char *path, int hf, dt_status *st)
{
    st->code = DT_OK;
    dt_fault_stall_phase(t->rank, "export", t->epochs_done);
    dt_watchdog_enter_io(&t->watchdog, "the weights' export"); /* rank 0 writes alone, as a checkpoint */
    float *host = t->rank == 0 ? dt_xmalloc(sizeof(float) * (t->model.nparams + t->model.nbuffers + 1)) : NULL;
    dt_strategy_get_block(&t->strategy, 0, host, 0); /* gathered on rank 0, under fsdp and pipeline stages */
    if (t->rank == 0) {
        t->be->download(host + t->model.nparams, t->model.buffers, sizeof(float) * t->model.nbuffers);
        if (hf) dt_hf_export(path, &t->model, host, t->data.paths[0], st);
        else dt_keras_export(path, &t->model, host, host + t->model.nparams, st);
        free(host);
    }
    const int rc = dt_status_agree(st, t->comm);
    dt_watchdog_leave(&t->watchdog);
    return rc;
}

static int export_keras(struct dt_trainer *t, const char *path, dt_status *st) { return export_weights(t, path, 0, st); }

/* --save-best: ModelCheckpoint(save_best_only) after epoch e, on value v. */
static int save_best(struct dt_trainer *t, int e, double v, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    double before = t->saver.best, zero[3] = {0.0, 0.0, 0.0};
    if (!cfg->save_best || !dt_monitor_update(&t->saver, e, v)) return DT_OK;
    if (collect_async(t, out, st) != DT_OK) return st->code; /* one HDF5 write at a time */
    DT_TL_BEGIN(tl_ckpt);
    int rc = dt_ends_with(cfg->save_best, ".weights.h5") ? export_keras(t, cfg->save_best, st)
                                                        : dt_trainer_save(t, cfg->save_best, 1, e + 1, 0, zero, NULL, 0, st);
    DT_TL_END(tl_ckpt, DT_TL_COMPUTE, "checkpoint", NULL);
    if (rc != DT_OK) return st->code;
    if (cfg->verbose >= DT_NORMAL && t->rank == 0)
        fprintf(out, "Epoch %d: %s improved from %.5f to %.5f, saving model to %s\n", e + 1, cfg->monitor, before, v,
                cfg->save_best);
    return DT_OK;
}

/* --early-stopping: EarlyStopping after epoch e, on value v; --restore-best
 * keeps the best weights (in memory, and in DIR/best for a restart).
 * *stop = 1 when training ends here. */
static int early_stopping(struct dt_trainer *t, int e, double v, int *stop, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const struct dt_model *m = &t->model;
    double zero[3] = {0.0, 0.0, 0.0};
    char best[4096];
    if (cfg->patience < 0) return DT_OK;
    if (dt_monitor_update(&t->stopper, e, v) && cfg->restore_best) {
        if (!t->best_params) t->best_params = dt_xmalloc(sizeof(float) * (m->nparams + m->nbuffers + 1));
        dt_strategy_get_block(&t->strategy, 0, t->best_params, -1);
        t->be->download(t->best_params + m->nparams, m->buffers, sizeof(float) * m->nbuffers);
        if (cfg->checkpoint_dir && snprintf(best, sizeof best, "%s/best", cfg->checkpoint_dir) < (int)sizeof best &&
            dt_trainer_save(t, best, 1, e + 1, 0, zero, NULL, 0, st) != DT_OK)
            return st->code;
    }
    *stop = t->stopper.stopped_epoch >= 0;
    return DT_OK;
}

/* The epoch-end checkpoint (--checkpoint-every, --checkpoint-seconds, the
 * last epoch, one a step count left pending, or a signal); a signal then
 * ends the run with DT_EXIT_REQUEUE. All ranks agree. */
static int epoch_checkpoint(struct dt_trainer *t, int e, int stop, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    double zero[3] = {0.0, 0.0, 0.0};
    if (!cfg->checkpoint_dir) return DT_OK;
    int flags[2] = {dt_signals_pending(), dt_ckpt_async_busy(t->ckpt_async)};
    /* After rank 0's reports (files it writes alone): timed only against a silent rank. */
    dt_watchdog_enter_io(&t->watchdog, "the ranks' agreement on a checkpoint");
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, t->comm));
    dt_watchdog_leave(&t->watchdog);
    if (!flags[1] && collect_async(t, out, st) != DT_OK) return st->code;
    int sig = flags[0];
    int every = cfg->ckpt_every_steps ? 0 : (e + 1) % cfg->ckpt_every == 0;
    int last = e + 1 == cfg->epochs || stop;
    if (every || last || t->ckpt_pending || sig ||
        (cfg->ckpt_seconds > 0 && MPI_Wtime() - t->last_ckpt_time >= cfg->ckpt_seconds)) {
        if (take_checkpoint(t, e + 1, 0, zero, last || sig, out, st) != DT_OK) return st->code;
        t->ckpt_pending = 0;
    }
    if (sig && !last)
        return dt_fail(st, DT_EXIT_REQUEUE, "%s received: checkpoint %s written after epoch %d; exiting with %d so "
                       "the job can be requeued (resume with --resume latest)", sig == SIGTERM ? "SIGTERM" : "SIGUSR1",
                       t->last_ckpt, e + 1, DT_EXIT_REQUEUE);
    return DT_OK;
}

/* After epoch e: the callbacks, in Keras's order. *stop = 1 when early
 * stopping ends training. */
static int epoch_callbacks(struct dt_trainer *t, int e, int *stop, FILE *out, dt_status *st)
{
    double v = monitored(&t->history[e], t->cfg->monitor);
    *stop = 0;
    if (save_best(t, e, v, out, st) != DT_OK || early_stopping(t, e, v, stop, st) != DT_OK) return st->code;
    return epoch_checkpoint(t, e, *stop, out, st);
}

/* --restore-best at the end: the best epoch's weights back, and their
 * validation figures. */
static void restore_best(struct dt_trainer *t, int validate, FILE *out)
{
    const struct dt_config *cfg = t->cfg;
    if (!cfg->restore_best || !t->best_params || t->stopper.best_epoch < 0) return;
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

static int fit(struct dt_trainer *t, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    int validate = cfg->validation && t->data.split[DT_TEST].present && t->data.split[DT_TEST].n > 0;
    dt_report_open(&t->report, cfg, t->rank, t->nranks, out, st); /* rank 0 opens the files */
    if (dt_model_is_lm(&t->model)) t->report.positions = t->model.layers[t->model.nlayers - 1].out.w;
    if (dt_status_agree(st, t->comm) != DT_OK) {
        dt_report_close(&t->report);
        return st->code;
    }
    if (dt_sample_log_open(t, &t->sample_log, st) != DT_OK) return st->code;
    if (dt_autotune_start(t, out, st) != DT_OK) return st->code;
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
            dt_fault_stall_phase(t->rank, "validation", e + 1);
            double tv = MPI_Wtime();
            dt_trainer_evaluate(t, &es->val_loss, &es->val_accuracy);
            es->val_seconds = MPI_Wtime() - tv;
            es->validated = 1;
        }
        t->epochs_done = e + 1;
        dt_report_epoch_end(&t->report, e, es, t->global_step);
        if (cfg->histogram_freq > 0 && (e + 1) % cfg->histogram_freq == 0 && /* after epochs N, 2N, ... */
            dt_trainer_histograms(t, t->report.tb_train, cfg->histograms, e, out, st) != DT_OK)
            return st->code;
        int stop = 0;
        if (epoch_callbacks(t, e, &stop, out, st) != DT_OK) return st->code;
        if (stop) {
            if (cfg->verbose >= DT_NORMAL && t->rank == 0) fprintf(out, "Epoch %d: early stopping\n", e + 1);
            break;
        }
    }
    if (collect_async(t, out, st) != DT_OK) return st->code; /* a write still in flight ends with the run */
    restore_best(t, validate, out);
    if (cfg->export_keras && export_keras(t, cfg->export_keras, st) != DT_OK) return st->code;
    if (cfg->export_hf && export_weights(t, cfg->export_hf, 1, st) != DT_OK) return st->code;
    return DT_OK;
}

/* Rank 0's input pipeline, one summary line: how many read ahead, on how
 * many threads, and how rows are read. */
static void report_pipeline(const struct dt_trainer *t, FILE *out)
{
    const struct dt_loader *ld = &t->loader;
    if (t->rank != 0 || t->cfg->verbose < DT_NORMAL) return;
    const char *how = ld->ds->synthetic ? "generated" : ld->threaded ? "read with pread()" : "read through HDF5";
    fprintf(out, "  input pipeline       prefetch %d, %d map thread%s%s%s%s, rows %s\n", ld->cfg.prefetch,
            ld->pool.n, ld->pool.n == 1 ? "" : "s", t->map_why[0] ? " (" : "", t->map_why, t->map_why[0] ? ")" : "",
            how);
}

/* Collective under --pipeline-stages: the bubble over the whole run, one
 * summary line from rank 0 beside the ideal schedule's. */
static void report_stages(struct dt_trainer *t, FILE *out)
{
    double busy[2] = {t->pipe.busy, -t->pipe.busy};
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, busy, 2, MPI_DOUBLE, MPI_MIN, t->comm));
    const double bubble = dt_pipe_bubble(t);
    if (t->rank != 0 || t->cfg->verbose < DT_NORMAL) return;
    fprintf(out, "  pipeline             %d stages x %d replica%s, %d micro-batch%s: bubble %.1f%% of the stages' "
            "schedule time (ideal (P-1)/(M+P-1) = %.1f%%); busy %.3f-%.3f s a rank\n", t->pipe.P,
            t->strategy.nreplicas, t->strategy.nreplicas == 1 ? "" : "s", t->pipe.M, t->pipe.M == 1 ? "" : "es",
            100.0 * bubble, 100.0 * dt_pipe_bubble_ideal(t->pipe.P, t->pipe.M), busy[0], -busy[1]);
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

/* Collective: how long training stood still for checkpoints (the slowest
 * rank's figures), one summary line from rank 0: those written in the step,
 * and those handed to --checkpoint-async's writer. */
static void report_checkpoints(struct dt_trainer *t, FILE *out)
{
    double most[2] = {0.0, 0.0}, seconds;
    long writes, n = t->ckpt_count[0] + t->ckpt_count[1];
    DT_MPI_CHECK(MPI_Allreduce(t->ckpt_blocked, most, 2, MPI_DOUBLE, MPI_MAX, t->comm));
    dt_ckpt_async_totals(t->ckpt_async, &writes, &seconds);
    if (t->rank != 0 || t->cfg->verbose < DT_NORMAL || n == 0) return;
    fprintf(out, "  checkpoints          %ld", n);
    for (int how = 1; how >= 0; how--) {
        long k = t->ckpt_count[how];
        if (k == 0) continue;
        fprintf(out, "%s %ld %s, training stood still %.3f s (%.1f ms each)", how || !t->ckpt_count[1] ? ":" : ";", k,
                how ? "on the writer thread" : "in the step", most[how], 1e3 * most[how] / (double)k);
        if (how) fprintf(out, ", written there in %.2f s", seconds);
    }
    fputc('\n', out);
}

int dt_trainer_fit(struct dt_trainer *t, FILE *out, dt_status *st)
{
    int rc = fit(t, out, st);
    dt_autotune_end(t, rc == DT_OK);
    if (rc == DT_OK) {
        /* Rank 0 writes the summary alone: a wait that ends the job only
         * when a rank has also gone silent (a host lost at the very end). */
        dt_fault_stall_phase(t->rank, "summary", t->epochs_done);
        dt_watchdog_enter_io(&t->watchdog, "the run's summary");
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double mine = (double)ru.ru_maxrss / 1024.0, peak = 0.0;
        DT_MPI_CHECK(MPI_Allreduce(&mine, &peak, 1, MPI_DOUBLE, MPI_MAX, t->comm));
        dt_report_summary(&t->report, t->epochs_done - t->start_epoch, peak);
        report_pipeline(t, out);
        if (t->pipe.on) report_stages(t, out);
        if (t->cfg->cache) report_cache(t, out);
        if (t->cfg->checkpoint_dir) report_checkpoints(t, out);
        dt_watchdog_leave(&t->watchdog);
    }
    /* The timeline is written even when training failed: it shows where. */
    dt_status tst = {0};
    if (dt_timeline && dt_timeline_finish(t->comm, &tst) != DT_OK && rc == DT_OK) {
        *st = tst;
        rc = st->code;
    }
    if (t->cfg->sample_log) { /* every rank: rank 0's write error is the run's */
        dt_status lst = {0};
        dt_sample_log_close(t->sample_log, &lst);
        t->sample_log = NULL;
        if (dt_status_agree(&lst, t->comm) != DT_OK && rc == DT_OK) {
            *st = lst;
            rc = st->code;
        }
    }
    dt_report_close(&t->report);
    return rc;
}
