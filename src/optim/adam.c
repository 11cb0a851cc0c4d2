/* adam.c: Adam as Keras 3 computes it (bias correction folded into the step
 * size; epsilon added to sqrt(v) uncorrected). Two slots: m and v.
 * PyTorch's torch.optim.Adam adds epsilon to sqrt(v_hat) instead: its eps is
 * this one over sqrt(1 - beta2^t), which matters while v is tiny (and its
 * default is 1e-8, Keras's 1e-7). --optimizer adamw follows PyTorch. */
#include "config.h"

#include <math.h>

#include "optim/optim.h"

static void adam_create(struct dt_optim *o)
{
    for (int i = 0; i < 2; i++) {
        o->slot[i] = o->be->alloc(sizeof(float) * (o->n ? o->n : 1));
        o->be->zero(o->slot[i], sizeof(float) * o->n);
    }
}

static void adam_step(struct dt_optim *o, float *params, const float *grads)
{
    const struct dt_optim_config *c = &o->cfg;
    double t = (double)o->step;
    double alpha = (double)c->lr * sqrt(1.0 - pow((double)c->beta2, t)) / (1.0 - pow((double)c->beta1, t));
    o->be->adam_update(params, o->slot[0], o->slot[1], grads, o->n, (float)alpha, c->beta1,
                       c->beta2, c->eps);
}

const struct dt_optim_ops dt_adam_ops = {.name = "adam", .create = adam_create, .step = adam_step};
