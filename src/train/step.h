/* step.h: one training step, for the dtrain program and for libdtrain.
 *
 * A step is one update: batch -> forward -> loss -> backward (each bucket
 * handed to the strategy as backward finishes it) -> the strategy's
 * reduction and optimizer -> batchnorm's statistics -> the step's figures.
 * With --grad-accum K it reads K micro-batches and sums their gradients
 * before the one reduction; with --cuda-graphs forward, loss and backward
 * replay as one launch. Both happen inside dt_step: the epoch loop
 * (train.c) only asks for the next update and reports it.
 *
 * The design decision: libdtrain's step is the same code cut in two,
 * dt_step_forward_backward then dt_step_apply (src/api/model.c), so a custom
 * loop gives dtrain's numbers step for step. */
#ifndef DT_STEP_H
#define DT_STEP_H

#include <stdint.h>

#include "train/train.h"

/* The epoch in progress, as its steps see it (train.c fills it). */
struct dt_epoch_run {
    int epoch;              /* 0-based */
    int64_t first, steps;   /* the epoch's steps [first, steps); first > 0 resumes a checkpoint's epoch */
    int64_t end;            /* this rank takes [first, end): end = first where it holds no replica */
    int64_t per_update;     /* micro-batches per update (--grad-accum) */
    double sums[2];         /* the loss sum and correct count so far */
    double data_seconds;    /* waiting for batches */
    double t0;              /* when it began (MPI_Wtime) */
};

/* What one update gave. */
struct dt_step_result {
    double loss_sum, correct; /* over all replicas (this replica's, where the strategy keeps local stats) */
    int64_t samples;          /* the update's samples over all replicas */
    int skipped;              /* dropped: its reduced gradient was not finite (--nan-policy skip) */
    long overflows;           /* 1 if the loss scaler skipped it (an fp16 overflow) */
};

/* Collective: the update made of ep's steps [s, end) (end - s micro-batches).
 * DT_OK, or an error agreed on by every rank (a failed read, naming the
 * file; a gradient that is not finite under --nan-policy abort). */
int dt_step(struct dt_trainer *t, struct dt_epoch_run *ep, int64_t s, int64_t end, struct dt_step_result *r,
            dt_status *st);

/* dt_step cut in two, for a custom loop (src/api/): one batch, no
 * accumulation. The first half: batch b into the model, forward, loss, and
 * backward, handing the buckets to the strategy; stats (zeros on entry)
 * receives this rank's loss sum and correct count (NaN after a failed read). */
struct dt_loss_result dt_step_forward_backward(struct dt_trainer *t, const struct dt_batch *b,
                                               float stats[DT_STATS]);
/* The second, collective: the strategy's reduction and update, then the
 * replicas' mean of batchnorm's statistics where they step together; stats
 * becomes the sums over the replicas. The caller counts the update
 * (t->global_step) and sets the rate first. */
void dt_step_apply(struct dt_trainer *t, float stats[DT_STATS]);
/* Collective, once a reduced loss came out not finite: a replica whose read
 * failed sent NaN (data/loader.h: it trains on empty batches meanwhile), so
 * a failure reaches every rank through the step's own reduction, at no cost
 * while nothing fails. Returns the read error of ld (NULL: none) naming the
 * file if any rank has one, else DT_OK: the loss really is not finite. */
int dt_step_read_failure(struct dt_trainer *t, const struct dt_loader *ld, dt_status *st);
/* The first n samples of batch b into the model's input. */
void dt_step_load(struct dt_trainer *t, const struct dt_batch *b, int n);

#endif
