/* memplan.c: bytes per rank by strategy (see memplan.h). */
#include "config.h"

#include <string.h>

#include "strategy/memplan.h"

int dt_fsdp_group(const struct dt_model *m, double bucket_mb, int *of_layer, size_t *largest)
{
    const size_t limit = bucket_mb > 0 ? (size_t)(bucket_mb * 1048576.0 / sizeof(float)) : m->nparams;
    size_t len = 0, most = 0, start = 0;
    int nb = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (of_layer) of_layer[i] = -1;
        if (!l->nparams) continue;
        if (nb == 0 || len >= limit) { /* a new bucket */
            nb++;
            start = l->param_offset;
        }
        len = l->param_offset + l->nparams - start;
        if (len > most) most = len;
        if (of_layer) of_layer[i] = nb - 1;
    }
    if (largest) *largest = most;
    return nb;
}

void dt_mem_plan(const struct dt_model *m, const char *strategy, int slots, int nranks, int local, double bucket_mb,
                 int batch, size_t act_size, struct dt_mem_plan *p)
{
    const double P = 4.0 * (double)m->nparams, N = nranks > 0 ? nranks : 1, Q = local > 0 ? local : 1;
    const char *s = strategy ? strategy : "auto";
    memset(p, 0, sizeof *p);
    p->params = P;
    p->grads = P;
    p->slots = slots * P;
    if (!strcmp(s, "central-storage")) {
        p->params = P / Q;
        p->slots = slots * P / Q;
    } else if (!strcmp(s, "parameter-server")) {
        p->slots = 0; /* a worker's: the servers keep the slots of their ranges */
    } else if (!strcmp(s, "sharded")) {
        p->slots = slots * P / N;
    } else if (!strcmp(s, "fsdp")) {
        size_t largest = 0;
        dt_fsdp_group(m, bucket_mb, NULL, &largest);
        p->params = P / N;
        p->grads = P / N;
        p->slots = slots * P / N;
        p->gathered = 4.0 * sizeof(float) * (double)largest;
    }
    for (int i = 0; i <= m->nlayers; i++) {
        struct dt_shape sh = i == 0 ? m->input : m->layers[i - 1].out;
        p->activations += (i == 0 ? 1.0 : 2.0) * (double)dt_shape_size(sh) * (double)batch * (double)act_size;
    }
}

double dt_mem_plan_total(const struct dt_mem_plan *p) { return p->params + p->grads + p->slots + p->gathered + p->activations; }
