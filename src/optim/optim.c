/* optim.c: choosing an optimizer by name and the parts all of them share:
 * the decay ranges (optim.h) and the clipping factor. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

int dt_optim_defaults(struct dt_optim_config *cfg, const char *name, dt_status *st)
{
    if (strcmp(name, "adam") == 0) {
        *cfg = (struct dt_optim_config){.name = "adam", .lr = 1e-3f, .beta1 = 0.9f,
                                        .beta2 = 0.999f, .eps = 1e-7f};
        return DT_OK;
    }
    if (strcmp(name, "adamw") == 0) {
        *cfg = (struct dt_optim_config){.name = "adamw", .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                        .eps = 1e-8f, .weight_decay = 0.01f};
        return DT_OK;
    }
    if (strcmp(name, "sgd") == 0) {
        *cfg = (struct dt_optim_config){.name = "sgd", .lr = 1e-2f};
        return DT_OK;
    }
    return dt_fail(st, DT_EUSAGE, "--optimizer: expected adam, adamw or sgd, found '%s'", name);
}

int dt_optim_nslots(const char *name, float momentum)
{
    if (strcmp(name, "adam") == 0 || strcmp(name, "adamw") == 0) return 2;
    return momentum != 0.0f ? 1 : 0;
}

void dt_optim_create(struct dt_optim *o, const struct dt_backend *be,
                     const struct dt_optim_config *cfg, size_t n)
{
    memset(o, 0, sizeof *o);
    o->ops = strcmp(cfg->name, "sgd") == 0 ? &dt_sgd_ops : strcmp(cfg->name, "adamw") == 0 ? &dt_adamw_ops
                                                                                              : &dt_adam_ops;
    o->be = be;
    o->cfg = *cfg;
    o->n = n;
    o->ops->create(o);
}

struct range {
    size_t lo, hi;
};

static int by_start(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void dt_optim_set_decay(struct dt_optim *o, size_t lo, const size_t *off, const size_t *len, int count)
{
    const size_t hi = lo + o->n;
    struct range *r = dt_xcalloc((size_t)count + 1, sizeof *r);
    int k = 0;
    for (int i = 0; i < count; i++) { /* clipped to [lo, hi), in the block's own offsets */
        size_t a = off[i] > lo ? off[i] : lo, b = off[i] + len[i] < hi ? off[i] + len[i] : hi;
        if (b > a) r[k++] = (struct range){a - lo, b - lo};
    }
    qsort(r, (size_t)k, sizeof *r, by_start);
    free(o->decay_off);
    free(o->decay_len);
    o->decay_off = dt_xcalloc((size_t)k + 1, sizeof(size_t));
    o->decay_len = dt_xcalloc((size_t)k + 1, sizeof(size_t));
    o->ndecay = 0;
    for (int i = 0; i < k; i++) { /* merged where they touch or overlap: maximal runs */
        int last = o->ndecay - 1;
        if (last >= 0 && r[i].lo <= o->decay_off[last] + o->decay_len[last]) {
            size_t end = o->decay_off[last] + o->decay_len[last];
            if (r[i].hi > end) o->decay_len[last] = r[i].hi - o->decay_off[last];
            continue;
        }
        o->decay_off[o->ndecay] = r[i].lo;
        o->decay_len[o->ndecay++] = r[i].hi - r[i].lo;
    }
    free(r);
}

void dt_optim_step(struct dt_optim *o, float *params, const float *grads)
{
    o->step++;
    o->ops->step(o, params, grads);
}

void dt_optim_free(struct dt_optim *o)
{
    for (int i = 0; i < 2; i++)
        if (o->slot[i]) o->be->free(o->slot[i]);
    free(o->decay_off);
    free(o->decay_len);
    memset(o, 0, sizeof *o);
}

double dt_clip_factor(double norm, double max_norm)
{
    double f = max_norm / (norm + 1e-6);
    return f < 1.0 ? f : 1.0;
}
