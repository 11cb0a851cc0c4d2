/* optim.h: optimizers over flat parameter/gradient blocks.
 *
 * An optimizer is a small ops table (adam.c, sgd.c) plus its state; the
 * update itself is one fused backend kernel over the whole block, so a
 * shard of the block (a later ZeRO strategy) is just a pointer and a count. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include <stddef.h>

#include "backend.h"
#include "runtime/status.h"

struct dt_optim_config {
    const char *name;   /* "adam" or "sgd" */
    float lr;           /* default 1e-3 (adam) or 1e-2 (sgd), Keras's */
    float beta1, beta2, eps;
    float momentum;     /* sgd */
};

struct dt_optim;

struct dt_optim_ops {
    const char *name;
    void (*create)(struct dt_optim *o);
    void (*step)(struct dt_optim *o, float *params, const float *grads);
};

struct dt_optim {
    const struct dt_optim_ops *ops;
    const struct dt_backend *be;
    struct dt_optim_config cfg;
    size_t n;
    long step;          /* updates applied so far */
    float *slot[2];     /* adam: m, v; sgd: velocity (device) */
};

extern const struct dt_optim_ops dt_adam_ops, dt_sgd_ops;

/* Keras's defaults for the named optimizer; lr <= 0 means "use the default". */
int dt_optim_defaults(struct dt_optim_config *cfg, const char *name, dt_status *st);
void dt_optim_create(struct dt_optim *o, const struct dt_backend *be,
                     const struct dt_optim_config *cfg, size_t n);
void dt_optim_step(struct dt_optim *o, float *params, const float *grads);
void dt_optim_free(struct dt_optim *o);

#endif
