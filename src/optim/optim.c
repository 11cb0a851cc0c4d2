/* optim.c: choosing an optimizer by name and the parts all of them share. */
#include "config.h"

#include <string.h>

#include "optim/optim.h"

int dt_optim_defaults(struct dt_optim_config *cfg, const char *name, dt_status *st)
{
    if (strcmp(name, "adam") == 0) {
        *cfg = (struct dt_optim_config){.name = "adam", .lr = 1e-3f, .beta1 = 0.9f,
                                        .beta2 = 0.999f, .eps = 1e-7f};
        return DT_OK;
    }
    if (strcmp(name, "sgd") == 0) {
        *cfg = (struct dt_optim_config){.name = "sgd", .lr = 1e-2f};
        return DT_OK;
    }
    return dt_fail(st, DT_EUSAGE, "--optimizer: expected adam or sgd, found '%s'", name);
}

void dt_optim_create(struct dt_optim *o, const struct dt_backend *be,
                     const struct dt_optim_config *cfg, size_t n)
{
    memset(o, 0, sizeof *o);
    o->ops = strcmp(cfg->name, "sgd") == 0 ? &dt_sgd_ops : &dt_adam_ops;
    o->be = be;
    o->cfg = *cfg;
    o->n = n;
    o->ops->create(o);
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
    memset(o, 0, sizeof *o);
}
