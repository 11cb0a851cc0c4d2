/* optimizer.c: what every strategy does with its optimizer besides the step
 * (see strategy.h): making it over its part of the block with AdamW's decay
 * ranges there, and clipping the update's gradient by the global norm.
 *
 * The design decision: the norm is summed over a communicator the caller
 * names, the ranks that together hold one copy of the gradient, since only
 * the strategy knows who holds what (sharded: all ranks; fsdp: the shards'
 * ranks, the node's under HSDP; pipeline: one replica's stages; the
 * all-reduce strategies and the parameter server: nobody else). Apart from
 * strategy.c, which names every strategy: the strategies call these. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/checks.h"
#include "strategy/strategy.h"

void dt_strategy_create_optim(struct dt_strategy *s, size_t off, size_t len)
{
    enum { PER_LAYER = 8 }; /* decayed ranges a layer may report */
    const struct dt_model *m = s->model;
    dt_optim_create(&s->optim, s->be, &s->optim_cfg, len);
    if (s->optim.ops != &dt_adamw_ops) return;
    size_t *o = dt_xcalloc((size_t)m->nlayers * PER_LAYER + 1, sizeof(size_t));
    size_t *l = dt_xcalloc((size_t)m->nlayers * PER_LAYER + 1, sizeof(size_t));
    int n = 0;
    if (s->cfg->decay_all) {
        l[n++] = m->nparams;
    } else {
        for (int i = 0; i < m->nlayers; i++) {
            const struct dt_layer *ly = &m->layers[i];
            if (!ly->nparams || !ly->ops->decayed) continue;
            int k = ly->ops->decayed(ly, o + n, l + n, PER_LAYER);
            for (int j = 0; j < k; j++) o[n + j] += ly->param_offset;
            n += k;
        }
    }
    dt_optim_set_decay(&s->optim, off, o, l, n);
    free(o);
    free(l);
}

void dt_strategy_clip(struct dt_strategy *s, float *g, size_t n, MPI_Comm comm)
{
    const double max = (double)s->cfg->clip_norm;
    if (!(max > 0.0)) return;
    double sq = n ? s->be->sum_squares(g, n) : 0.0;
    if (comm != MPI_COMM_NULL) DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, comm));
    const double norm = sqrt(sq), f = dt_clip_factor(norm, max);
    if (f < 1.0) {
        if (n) s->be->scale(g, n, (float)f);
        s->clip.clipped++;
    }
    s->clip.last = norm;
    s->clip.norm_sum += norm;
    s->clip.updates++;
}
