/* schedule.h: learning-rate schedules, as a function of the step.
 *
 * lr(step) for the update made at step (0-based, counted over the run):
 *   constant  the peak rate throughout
 *   step      the peak rate multiplied by factor at each epoch boundary listed
 *             (Keras' PiecewiseConstantDecay with a constant ratio)
 *   cosine    from the peak down to min_lr along half a cosine over the steps
 *             after warm-up (Keras' CosineDecay with alpha = min_lr / peak)
 * with an optional linear warm-up over the first warmup steps, from start
 * to the peak (Goyal et al.'s gradual warm-up). The peak is --lr, times the
 * number of replicas with --lr-scale linear (Goyal et al.'s rule, Horovod's
 * lr x hvd.size()); warm-up then starts from the unscaled --lr, otherwise
 * from peak / warmup. A pure function of the step, so a resumed run has the
 * same rates. */
#ifndef DT_SCHEDULE_H
#define DT_SCHEDULE_H

enum dt_lr_kind { DT_LR_CONSTANT = 0, DT_LR_STEP = 1, DT_LR_COSINE = 2 };

struct dt_lr_schedule {
    int kind;
    float peak, start, min_lr, factor;
    long warmup;            /* steps */
    long total;             /* steps in the run */
    long steps_per_epoch;
    int nboundaries;
    const int *boundaries;  /* epochs at whose start the rate is multiplied (step) */
};

float dt_lr_at(const struct dt_lr_schedule *s, long step);

#endif
