/* adamw.c: AdamW as PyTorch's torch.optim.AdamW computes it (Loshchilov &
 * Hutter's decoupled weight decay). Two slots: m and v.
 *
 * Per step t, with the step's rate lr:
 *   p *= 1 - lr wd                       (only in the decayed ranges)
 *   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
 *   p -= lr m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)
 * The backend's kernel (adamw_update) adds eps to sqrt(v) itself, as Keras's
 * Adam does; PyTorch's form is the same update with the step size
 * lr sqrt(1 - b2^t) / (1 - b1^t) and eps sqrt(1 - b2^t) in its place, which
 * is what is passed. The decay mask is the block's sorted decayed ranges
 * (optim.h): one kernel per maximal run, decayed or not. */
#include "config.h"

#include <math.h>

#include "optim/optim.h"

static void adamw_create(struct dt_optim *o)
{
    for (int i = 0; i < 2; i++) {
        o->slot[i] = o->be->alloc(sizeof(float) * (o->n ? o->n : 1));
        o->be->zero(o->slot[i], sizeof(float) * o->n);
    }
}

static void adamw_step(struct dt_optim *o, float *params, const float *grads)
{
    const struct dt_optim_config *c = &o->cfg;
    const double t = (double)o->step, bc2 = sqrt(1.0 - pow((double)c->beta2, t));
    const float alpha = (float)((double)c->lr * bc2 / (1.0 - pow((double)c->beta1, t)));
    const float eps = (float)((double)c->eps * bc2), decay = c->lr * c->weight_decay;
    float *m = o->slot[0], *v = o->slot[1];
    size_t at = 0;
    for (int k = 0; k <= o->ndecay; k++) {
        /* the run before decayed range k (or the block's end), then range k */
        const size_t start = k < o->ndecay ? o->decay_off[k] : o->n;
        if (start > at)
            o->be->adamw_update(params + at, m + at, v + at, grads + at, start - at, alpha, c->beta1, c->beta2, eps,
                                0.0f);
        if (k == o->ndecay) break;
        const size_t len = o->decay_len[k];
        o->be->adamw_update(params + start, m + start, v + start, grads + start, len, alpha, c->beta1, c->beta2, eps,
                            decay);
        at = start + len;
    }
}

const struct dt_optim_ops dt_adamw_ops = {.name = "adamw", .create = adamw_create, .step = adamw_step};
