/* optim.h: optimizers over flat parameter/gradient blocks.
 *
 * An optimizer is a small ops table (adam.c, adamw.c, sgd.c) plus its state;
 * the update itself is one fused backend kernel over the whole block, so a
 * shard of the block (a ZeRO strategy's) is just a pointer and a count.
 * AdamW's weight decay applies to parts of the block only (the weight
 * matrices, not biases or gains): the optimizer keeps them as a sorted list
 * of ranges of its own block, made once from ranges of the whole model's
 * (dt_optim_set_decay), and runs one kernel per maximal run of decayed or
 * not decayed parameters. Gradient clipping by global norm is here too, as
 * arithmetic: the sum of squares over the whole gradient is the strategy's
 * to collect, since only it knows which ranks hold which parts. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include <stddef.h>

#include "backend.h"
#include "runtime/status.h"

struct dt_optim_config {
    const char *name;   /* "adam", "adamw" or "sgd" */
    float lr;           /* default 1e-3 (adam, adamw) or 1e-2 (sgd) */
    float beta1, beta2, eps;
    float momentum;     /* sgd */
    float weight_decay; /* adamw: the decoupled decay per unit of lr (PyTorch's 0.01) */
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
    float *slot[2];     /* adam, adamw: m, v; sgd: velocity (device) */
    int ndecay;         /* adamw: the decayed ranges of this block, sorted, disjoint, */
    size_t *decay_off, *decay_len; /* none touching: [decay_off[i], + decay_len[i]) */
};

extern const struct dt_optim_ops dt_adam_ops, dt_adamw_ops, dt_sgd_ops;

/* The named optimizer's defaults: Keras's for adam and sgd, PyTorch's
 * torch.optim.AdamW's for adamw (lr 1e-3, betas 0.9, 0.999, eps 1e-8,
 * weight decay 0.01). */
int dt_optim_defaults(struct dt_optim_config *cfg, const char *name, dt_status *st);
/* Slots a parameter needs (2: adam, adamw; 1: sgd with momentum; 0). */
int dt_optim_nslots(const char *name, float momentum);
void dt_optim_create(struct dt_optim *o, const struct dt_backend *be,
                     const struct dt_optim_config *cfg, size_t n);
/* The optimizer's block is [lo, lo + o->n) of the model's flat block; of
 * the model's count ranges [off[i], off[i] + len[i]) (any order, may touch
 * or overlap), the parts inside it are decayed from now on, the rest not.
 * Without a call nothing is decayed. */
void dt_optim_set_decay(struct dt_optim *o, size_t lo, const size_t *off, const size_t *len, int count);
void dt_optim_step(struct dt_optim *o, float *params, const float *grads);
void dt_optim_free(struct dt_optim *o);

/* torch.nn.utils.clip_grad_norm_'s factor for a gradient of global L2 norm
 * `norm` clipped to max_norm: max_norm / (norm + 1e-6) when that is below
 * 1, else 1 (the gradient is left as it is). */
double dt_clip_factor(double norm, double max_norm);

#endif
