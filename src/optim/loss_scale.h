/* loss_scale.h: loss scaling for 16-bit gradients (Keras' LossScaleOptimizer).
 *
 * The loss gradient is multiplied by the scale before backward, so small
 * fp16 gradients do not flush to zero; the reduced gradient is divided by it
 * again before the optimizer. Dynamic scaling starts at 2^15, halves and
 * skips the step when the gradient holds a NaN or infinity, and doubles after
 * 2000 clean steps in a row. A fixed scale also skips non-finite steps. The
 * decision depends only on the reduced gradient, which every replica holds
 * bit for bit, so all ranks skip the same steps without talking. */
#ifndef DT_LOSS_SCALE_H
#define DT_LOSS_SCALE_H

struct dt_loss_scale {
    int on, dynamic;
    float scale;           /* current factor (1 when off) */
    int growth_interval;   /* clean steps before doubling: 2000 */
    int clean;             /* clean steps since the last change */
    long skipped;          /* steps skipped for overflow, in total */
};

/* value: < 0 dynamic, 0 off, > 0 fixed (the --loss-scale setting). */
void dt_loss_scale_init(struct dt_loss_scale *ls, float value);
/* After a step's reduction: finite says whether the gradient was. Returns 1
 * when the optimizer should apply the step, 0 when it is skipped. */
int dt_loss_scale_update(struct dt_loss_scale *ls, int finite);

#endif
