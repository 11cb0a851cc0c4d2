/* sgd.c: SGD with optional momentum, as Keras computes it
 * (velocity = momentum * velocity - lr * g; param += velocity). */
#include "config.h"

#include "optim/optim.h"

static void sgd_create(struct dt_optim *o)
{
    if (o->cfg.momentum == 0.0f) return;
    o->slot[0] = o->be->alloc(sizeof(float) * (o->n ? o->n : 1));
    o->be->zero(o->slot[0], sizeof(float) * o->n);
}

static void sgd_step(struct dt_optim *o, float *params, const float *grads)
{
    o->be->sgd_update(params, o->slot[0], grads, o->n, o->cfg.lr, o->cfg.momentum);
}

const struct dt_optim_ops dt_sgd_ops = {.name = "sgd", .create = sgd_create, .step = sgd_step};
