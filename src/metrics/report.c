/* report.c: progress bar, epoch lines, metrics file, TensorBoard scalars and
 * the run summary (see report.h). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "metrics/report.h"
#include "metrics/tfevents.h"

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static const char *const columns[] = {"kind", "epoch", "step", "global_step", "samples", "seconds",
                                      "samples_per_s", "loss", "accuracy", "val_loss", "val_accuracy", "lr",
                                      "loss_scale", "skipped", "comm_ms", "wait_ms", "data_ms", "grad_norm",
                                      "clipped"};
enum { NCOL = sizeof columns / sizeof *columns };

int dt_report_open(struct dt_report *r, const struct dt_config *cfg, int rank, int nranks, FILE *out,
                   dt_status *st)
{
    memset(r, 0, sizeof *r);
    st->code = DT_OK;
    r->cfg = cfg;
    r->out = out;
    r->nranks = nranks;
    r->best_epoch = -1;
    r->best = -INFINITY;
    r->t_start = wall_now();
    if (rank != 0) return DT_OK;
    r->active = 1;
    /* A bar only for a person watching: a terminal, normal verbosity. Open
     * MPI's mpirun hands every rank a pseudo-terminal whatever its own
     * output is (a file, a pipe), so there isatty() says nothing: plain
     * lines unless --progress bar. */
    int tty = isatty(fileno(out)) && !getenv("OMPI_COMM_WORLD_SIZE");
    r->bar = cfg->progress == DT_PROGRESS_BAR || (cfg->progress == DT_PROGRESS_AUTO && tty);
    if (cfg->verbose != DT_NORMAL) r->bar = 0;
    if (cfg->metrics) {
        r->jsonl = dt_ends_with(cfg->metrics, ".jsonl");
        r->metrics = fopen(cfg->metrics, "w");
        if (!r->metrics) return dt_fail(st, DT_EUSAGE, "--metrics %s: cannot create it: %s", cfg->metrics, strerror(errno));
        if (!r->jsonl) {
            for (int c = 0; c < NCOL; c++) fprintf(r->metrics, "%s%s", c ? "," : "", columns[c]);
            fputc('\n', r->metrics);
        }
    }
    if (cfg->logdir) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/train", cfg->logdir);
        if (!(r->tb_train = dt_tfevents_open(dir, st))) return st->code;
        snprintf(dir, sizeof dir, "%s/validation", cfg->logdir);
        if (!(r->tb_val = dt_tfevents_open(dir, st))) return st->code;
    }
    return DT_OK;
}

void dt_report_epoch_begin(struct dt_report *r, int epoch, int64_t steps)
{
    (void)steps;
    r->epoch = epoch;
    r->t_epoch = wall_now();
    r->t_last_draw = 0.0;
    if (r->active && r->bar) {
        fprintf(r->out, "Epoch %d/%d\n", epoch + 1, r->cfg->epochs);
        fflush(r->out);
    }
}

/* One metrics row; v[] in the order of columns[] from "epoch" on (NaN: empty / null). */
static void metrics_row(struct dt_report *r, const char *kind, const double *v)
{
    if (!r->metrics) return;
    if (r->jsonl) {
        fprintf(r->metrics, "{\"kind\":\"%s\"", kind);
        for (int c = 1; c < NCOL; c++) {
            if (isnan(v[c - 1])) fprintf(r->metrics, ",\"%s\":null", columns[c]);
            else fprintf(r->metrics, ",\"%s\":%.10g", columns[c], v[c - 1]);
        }
        fputs("}\n", r->metrics);
    }
    else {
        fputs(kind, r->metrics);
        for (int c = 1; c < NCOL; c++) {
            if (isnan(v[c - 1])) fputc(',', r->metrics);
            else fprintf(r->metrics, ",%.10g", v[c - 1]);
        }
        fputc('\n', r->metrics);
    }
    fflush(r->metrics);
}

void dt_report_step(struct dt_report *r, int64_t step, int64_t steps, double loss_sum, double correct,
                    int64_t samples, long global_step)
{
    if (!r->active) return;
    double now = wall_now(), el = now - r->t_epoch;
    double loss = samples ? loss_sum / (double)samples : (double)NAN;
    double acc = samples ? correct / (double)samples : (double)NAN;
    const struct dt_config *cfg = r->cfg;
    if (cfg->metrics_every > 0 && global_step % cfg->metrics_every == 0) {
        double v[NCOL - 1] = {r->epoch + 1, (double)step, (double)global_step, (double)samples, el,
                              el > 0 ? (double)samples / el : (double)NAN, loss, acc, NAN, NAN, NAN, NAN, NAN,
                              NAN, NAN, NAN, NAN, NAN};
        metrics_row(r, "step", v);
    }
    if (!r->bar || (now - r->t_last_draw < 0.1 && step < steps)) return;
    r->t_last_draw = now;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int filled = steps ? (int)((double)WIDTH * (double)step / (double)steps) : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '=' : '.';
    if (filled > 0 && filled < WIDTH) bar[filled - 1] = '>';
    bar[WIDTH] = '\0';
    double eta = step ? el / (double)step * (double)(steps - step) : 0.0;
    int w = snprintf(NULL, 0, "%lld", (long long)steps);
    fprintf(r->out, "\r\033[K%*lld/%lld [%s] - ETA: %.0fs - loss: %.4f - accuracy: %.4f - %.0f samples/s", w,
            (long long)step, (long long)steps, bar, eta, loss, acc, el > 0 ? (double)samples / el : 0.0);
    fflush(r->out);
}

void dt_report_epoch_end(struct dt_report *r, int epoch, const struct dt_epoch_stats *es, long global_step)
{
    double now = wall_now();
    r->train_seconds += es->seconds;
    r->val_seconds += es->val_seconds;
    r->comm_seconds += 1e-3 * es->comm_ms * (double)es->steps;
    r->data_seconds += 1e-3 * es->data_ms * (double)es->steps;
    r->samples += es->samples;
    r->steps += es->steps;
    double best_now = es->validated ? es->val_accuracy : es->accuracy;
    r->best_is_val = es->validated;
    if (best_now > r->best) {
        r->best = best_now;
        r->best_epoch = epoch;
        r->best_time = now - r->t_start;
    }
    if (!r->active) return;
    const struct dt_config *cfg = r->cfg;
    double rate = es->seconds > 0 ? (double)es->samples / es->seconds : 0.0;
    if (cfg->verbose >= DT_NORMAL) {
        FILE *out = r->out;
        if (r->bar) fputs("\r\033[K", out);
        fprintf(out, "Epoch %d/%d - %.2f s - %.0f samples/s", epoch + 1, cfg->epochs, es->seconds, rate);
        if (r->positions) fprintf(out, " (%.0f tokens/s)", rate * r->positions);
        fprintf(out, " - loss: %.4f - accuracy: %.4f", es->loss, es->accuracy);
        if (es->validated) fprintf(out, " - val_loss: %.4f - val_accuracy: %.4f", es->val_loss, es->val_accuracy);
        if (es->validated && r->positions) fprintf(out, " - val_perplexity: %.2f", exp(es->val_loss));
        if (es->loss_scale > 0.0f)
            fprintf(out, " - loss scale: %g (%ld step%s skipped)", (double)es->loss_scale, es->skipped,
                    es->skipped == 1 ? "" : "s");
        else if (es->skipped > 0) /* --nan-policy skip */
            fprintf(out, " - %ld non-finite step%s skipped", es->skipped, es->skipped == 1 ? "" : "s");
        if (!isnan(es->grad_norm))
            fprintf(out, " - grad norm: %.4g (%.0f%% clipped)", es->grad_norm, 100.0 * es->clipped);
        if (r->nranks > 1 && (es->comm_ms > 0.0 || es->wait_ms > 0.0)) /* rank 0's view of the gradient exchange */
            fprintf(out, " - comm: %.2f ms/step, waited %.2f (%.0f%% hidden)", es->comm_ms, es->wait_ms,
                    es->comm_ms > es->wait_ms ? 100.0 * (1.0 - es->wait_ms / es->comm_ms) : 0.0);
        fputc('\n', out);
        fflush(out);
    }
    char lrbuf[32]; /* the float as given (0.001, not 0.001000000047) */
    snprintf(lrbuf, sizeof lrbuf, "%.7g", (double)es->lr);
    double lr = strtod(lrbuf, NULL);
    double step_ms = es->steps ? 1e3 * es->seconds / (double)es->steps : (double)NAN;
    double v[NCOL - 1] = {epoch + 1, (double)es->steps, (double)global_step, (double)es->samples, es->seconds, rate,
                          es->loss, es->accuracy, es->validated ? es->val_loss : (double)NAN,
                          es->validated ? es->val_accuracy : (double)NAN, lr,
                          es->loss_scale > 0.0f ? (double)es->loss_scale : (double)NAN, (double)es->skipped,
                          es->comm_ms, es->wait_ms, es->data_ms, es->grad_norm, es->clipped};
    metrics_row(r, "epoch", v);
    dt_status st;
    if (r->tb_train) {
        double wt = now;
        struct { const char *tag; double v; } s[] = {
            {"epoch_loss", es->loss}, {"epoch_accuracy", es->accuracy}, {"epoch_learning_rate", es->lr},
            {"samples_per_second", rate}, {"step_time_ms", step_ms}, {"comm_ms", es->comm_ms},
            {"data_wait_ms", es->data_ms}, {"loss_scale", es->loss_scale}};
        int n = es->loss_scale > 0.0f ? 8 : 7;
        for (int i = 0; i < n; i++) dt_tfevents_scalar(r->tb_train, s[i].tag, (float)s[i].v, epoch, wt, &st);
        if (!isnan(es->grad_norm)) { /* --clip-norm */
            dt_tfevents_scalar(r->tb_train, "epoch_grad_norm", (float)es->grad_norm, epoch, wt, &st);
            dt_tfevents_scalar(r->tb_train, "epoch_clipped_fraction", (float)es->clipped, epoch, wt, &st);
        }
        dt_tfevents_flush(r->tb_train, &st);
        if (es->validated) {
            dt_tfevents_scalar(r->tb_val, "epoch_loss", (float)es->val_loss, epoch, wt, &st);
            if (r->positions) dt_tfevents_scalar(r->tb_val, "epoch_perplexity", (float)exp(es->val_loss), epoch, wt, &st);
            dt_tfevents_scalar(r->tb_val, "epoch_accuracy", (float)es->val_accuracy, epoch, wt, &st);
            dt_tfevents_flush(r->tb_val, &st);
        }
    }
}

void dt_report_summary(struct dt_report *r, int epochs_done, double peak_mib)
{
    if (!r->active || r->cfg->verbose < DT_NORMAL) return;
    FILE *out = r->out;
    double total = wall_now() - r->t_start;
    fprintf(out, "Run summary\n");
    fprintf(out, "  epochs               %d (training %.2f s, validation %.2f s, total %.2f s)\n", epochs_done,
            r->train_seconds, r->val_seconds, total);
    fprintf(out, "  mean throughput      %.0f samples/s\n",
            r->train_seconds > 0 ? (double)r->samples / r->train_seconds : 0.0);
    if (r->best_epoch >= 0)
        fprintf(out, "  best %-15s %.4f (epoch %d, reached after %.2f s)\n",
                r->best_is_val ? "val_accuracy" : "accuracy", r->best, r->best_epoch + 1, r->best_time);
    if (r->train_seconds > 0)
        fprintf(out, "  communication        %.1f%% of training time; data wait %.1f%%\n",
                100.0 * r->comm_seconds / r->train_seconds, 100.0 * r->data_seconds / r->train_seconds);
    fprintf(out, "  peak memory per rank %.1f MiB (largest of %d rank%s)\n", peak_mib, r->nranks,
            r->nranks == 1 ? "" : "s");
    fflush(out);
}

void dt_report_close(struct dt_report *r)
{
    if (r->metrics) fclose(r->metrics);
    if (r->tb_train) dt_tfevents_close(r->tb_train);
    if (r->tb_val) dt_tfevents_close(r->tb_val);
    memset(r, 0, sizeof *r);
}
