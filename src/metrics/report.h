/* report.h: what rank 0 tells the user while training runs, and after.
 *
 * One place for every human- and machine-readable account of an epoch: the
 * Keras-style progress bar (on a terminal) or one plain line per epoch (in a
 * batch job's log), the metrics file (--metrics FILE.csv or .jsonl: a row
 * per epoch, and per N steps with --metrics-every), TensorBoard scalars
 * (--logdir DIR: DIR/train and DIR/validation, as Keras's callback lays them
 * out), and the run summary at the end. Only rank 0 holds an open report;
 * the other ranks' calls do nothing. */
#ifndef DT_REPORT_H
#define DT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "options.h"
#include "runtime/status.h"

struct dt_epoch_stats {
    double loss, accuracy;          /* training, over the epoch's samples */
    double val_loss, val_accuracy;  /* when validated */
    int validated;
    int64_t samples;                /* trained on, all ranks */
    int64_t steps;                  /* steps run in this epoch */
    double seconds;                 /* training time (without validation) */
    double val_seconds;             /* validation time */
    double comm_ms, wait_ms;        /* per step: inside all-reduce; blocked for it */
    double data_ms;                 /* per step: the training thread waiting for its batch */
    long skipped;                   /* steps skipped by the loss scaler */
    float loss_scale;               /* at the epoch's end; 0 when off */
    float lr;                       /* learning rate used */
    double grad_norm, clipped;      /* --clip-norm: the updates' mean global gradient norm (before
                                       clipping) and the fraction clipped; NaN without it */
};

struct dt_tfevents;

struct dt_report {
    int active;                     /* rank 0 */
    const struct dt_config *cfg;
    FILE *out;
    int bar;                        /* progress bar (a terminal, or --progress bar) */
    int nranks;
    int positions;                  /* a language model's tokens a sample (its block_size): the epoch
                                       line adds tokens/s and perplexity; 0 otherwise */
    FILE *metrics;
    int jsonl;
    struct dt_tfevents *tb_train, *tb_val;
    double t_start, t_epoch, t_last_draw;
    int epoch, epochs;
    double best, best_time;         /* best val_accuracy (or accuracy) and when */
    int best_epoch;
    int best_is_val;                /* the epochs were validated */
    double train_seconds, val_seconds, comm_seconds, data_seconds;
    int64_t samples, steps;
};

/* Rank 0 opens the metrics file and the event files; errors name the path. */
int dt_report_open(struct dt_report *r, const struct dt_config *cfg, int rank, int nranks, FILE *out,
                   dt_status *st);
void dt_report_epoch_begin(struct dt_report *r, int epoch, int64_t steps);
/* After a step: running sums of the epoch so far (loss, correct over samples). */
void dt_report_step(struct dt_report *r, int64_t step, int64_t steps, double loss_sum, double correct,
                    int64_t samples, long global_step);
/* After an epoch (and its validation): the epoch line, a metrics row, scalars. */
void dt_report_epoch_end(struct dt_report *r, int epoch, const struct dt_epoch_stats *es, long global_step);
/* The run summary; peak_mib is the largest peak RSS over ranks. */
void dt_report_summary(struct dt_report *r, int epochs_done, double peak_mib);
void dt_report_close(struct dt_report *r);

#endif
