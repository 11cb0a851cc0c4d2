/* grad.c (dtrain-predict): the gradient's buckets and their cost (grad.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/reducer.h"
#include "predict/grad.h"
#include "runtime/checks.h"

int dt_cm_compress_parse(const char *text, struct dt_cm_compress *x)
{
    double gflops = x->psgd_gflops;
    memset(x, 0, sizeof *x);
    x->psgd_gflops = gflops;
    if (!strcmp(text, "none")) return 0;
    if (!strcmp(text, "fp16") || !strcmp(text, "bf16")) {
        x->half = 1;
        return 0;
    }
    char *end;
    if (!strncmp(text, "powersgd:", 9)) {
        long r = strtol(text + 9, &end, 10);
        if (end != text + 9 && !*end && r >= 1 && r <= 256) {
            x->psgd_rank = (int)r;
            return 0;
        }
    }
    return -1;
}

/* Convolutions dominate where parameters are few, so backward's progress
 * (and a pipeline stage's share) follows this, not parameter counts. */
double dt_cm_layer_work(const struct dt_layer *l)
{
    if (l->ops == &dt_conv2d_ops) return 2.0 * l->out.h * l->out.w * (double)l->nparams;
    if (l->ops == &dt_dense_ops) return 2.0 * (double)l->nparams;
    return 4.0 * (double)dt_shape_size(l->out);
}

int dt_cm_buckets(const struct dt_model *m, double bucket_mb, const struct dt_cm_compress *x, double *bytes,
                  double *bytes2, double *cpu_s, double *ready)
{
    size_t *bounds = dt_xcalloc((size_t)m->nlayers + 1, sizeof(size_t)), *start;
    for (int i = 0; i < m->nlayers; i++) bounds[i] = m->layers[i].param_offset;
    size_t bb = bucket_mb > 0.0 ? (size_t)(bucket_mb * 1048576.0) : 0;
    int nb = dt_buckets_cut(m->nparams, bounds, m->nlayers, bb, &start);
    free(bounds);
    if (nb > DT_CM_MAXBUCKETS) nb = DT_CM_MAXBUCKETS;
    double total = 0.0, per = x->half ? 2.0 : 4.0, R = x->psgd_rank;
    for (int i = 0; i < m->nlayers; i++) total += dt_cm_layer_work(&m->layers[i]);
    for (int b = 0; b < nb; b++) { /* bucket b is [start[b+1], start[b]) */
        double done = 0.0, first = (double)(start[b] - start[b + 1]), second = 0.0, flops = 0.0;
        for (int i = 0; i < m->nlayers; i++) {
            const struct dt_layer *l = &m->layers[i];
            if (l->param_offset >= start[b + 1]) done += dt_cm_layer_work(l); /* backward has finished it */
            size_t n, k;
            if (l->param_offset >= start[b + 1] && l->param_offset < start[b] && dt_layer_kernel(l, &n, &k) &&
                dt_powersgd_worth(n, k, (size_t)R)) {
                first -= (double)n * (double)k - (double)n * R; /* P instead of the kernel */
                second += (double)k * R;                        /* and Q */
                flops += 6.0 * n * k * R + 3.0 * n * k + 2.0 * n * R * R;
            }
        }
        bytes[b] = first * per;
        bytes2[b] = second * per;
        cpu_s[b] = flops > 0 && x->psgd_gflops > 0 ? flops / (x->psgd_gflops * 1e9) : 0.0;
        ready[b] = total > 0.0 ? done / total : 1.0;
    }
    free(start);
    return nb;
}
