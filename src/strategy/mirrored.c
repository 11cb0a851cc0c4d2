/* mirrored.c: TF MirroredStrategy: synchronous replicas on one node.
 *
 * Every rank keeps the whole model and optimizer; gradients are summed by
 * dtrain's all-reduce in buckets (collectives/reducer.c), the per-step loss
 * and accuracy sums riding in two floats after the gradient block, and every
 * rank applies the same update. Refuses a job that spans nodes: that is
 * multi-worker's (multi_worker.c), which shares this file's machinery. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/checks.h"
#include "metrics/tl_span.h"
#include "strategy/strategy.h"
#ifdef DT_HAVE_CUDA
#include "collectives/nccl.h"
#endif

int dt_strategy_gradient_ok(struct dt_strategy *s, const float *g, size_t n)
{
    s->nonfinite = !s->be->unscale_check((float *)g, n, 1.0f); /* a scale of 1 leaves g as it is */
    if (s->nonfinite && s->nan_policy == DT_NAN_SKIP) s->nan_skipped++;
    return !s->nonfinite;
}

/* --grad-compression powersgd:R: the weight gradients worth compressing
 * (a dense kernel [in][units], a conv kernel [kh][kw][c][filters]: rows x
 * units, min(rows, units) > R and (rows + units) R < rows units), the
 * compressor on the reducer's buckets, and its ratio said once. */
static void powersgd_setup(struct dt_strategy *s)
{
    const struct dt_config *cfg = s->cfg;
    const struct dt_model *m = s->model;
    size_t R = (size_t)cfg->powersgd_rank, full, sent, err = 0;
    struct dt_psgd_matrix *mats = dt_xcalloc((size_t)m->nlayers + 1, sizeof *mats);
    int n = 0, tensors = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (!l->nparams) continue;
        tensors += 2; /* kernel and bias, or batchnorm's gamma and beta */
        size_t rows, cols;
        if (dt_layer_kernel(l, &rows, &cols) && dt_powersgd_worth(rows, cols, R)) {
            mats[n++] = (struct dt_psgd_matrix){l->param_offset, rows, cols};
            err += rows * cols;
        }
    }
    s->psgd = dt_xmalloc(sizeof *s->psgd);
    dt_powersgd_init(s->psgd, s->coll, cfg->powersgd_rank, mats, n, cfg->seed);
    free(mats);
    s->reducer.psgd = s->psgd;
    dt_powersgd_sizes(s->psgd, m->nparams, &full, &sent);
    if (s->coll->topo.rank == 0 && cfg->verbose >= DT_NORMAL)
        printf("powersgd:%d: %d of %d tensors compressed, %.3g M -> %.3g M floats per step (%.1fx); "
               "error feedback %.1f MiB per rank\n", cfg->powersgd_rank, n, tensors, (double)full / 1e6,
               (double)sent / 1e6, sent ? (double)full / (double)sent : 0.0, (double)err * 4.0 / 1048576.0);
}

/* The CPU reducer over the gradient block, cut at the layers' starts. */
static void make_reducer(struct dt_strategy *s, size_t bucket_bytes, int overlap)
{
    struct dt_model *m = s->model;
    size_t *bounds = dt_xcalloc((size_t)m->nlayers + 1, sizeof(size_t));
    for (int i = 0; i < m->nlayers; i++) bounds[i] = m->layers[i].param_offset;
    dt_reducer_init(&s->reducer, s->coll, m->grads, m->nparams + DT_STATS, bounds, m->nlayers, bucket_bytes, overlap);
    s->reducer.debug = s->cfg->debug_collectives;
    s->reducer.psgd = s->psgd; /* NULL unless powersgd (attached again after a re-cut) */
    free(bounds);
}

void dt_allreduce_strategy_configure(struct dt_strategy *s, const struct dt_allreduce_algo *algo,
                                     size_t bucket_bytes, int overlap)
{
    struct dt_reducer *r = &s->reducer;
    /* The epoch's figures and --debug-collectives' call count go on across the change. */
    double comm = r->comm_seconds, wait = r->wait_seconds;
    long steps = r->steps, calls = r->calls;
    dt_reducer_free(r);
    s->coll->algo = algo;
    s->overlap = overlap;
    make_reducer(s, bucket_bytes, overlap);
    r->comm_seconds = comm;
    r->wait_seconds = wait;
    r->steps = steps;
    r->calls = calls;
}

int dt_allreduce_strategy_setup(struct dt_strategy *s, dt_status *st)
{
    struct dt_model *m = s->model;
    const struct dt_config *cfg = s->cfg;
#ifdef DT_HAVE_CUDA
    if (s->cuda) { /* device memory, reduced on streams by NCCL (+ MPI across nodes) */
        s->be->free(m->grads);
        m->grads = s->be->alloc(sizeof(float) * (m->nparams + DT_STATS));
        s->be->zero(m->grads, sizeof(float) * (m->nparams + DT_STATS));
        size_t *b = dt_xcalloc((size_t)m->nlayers + 1, sizeof(size_t));
        for (int i = 0; i < m->nlayers; i++) b[i] = m->layers[i].param_offset;
        s->nccl = dt_nccl_create(&s->coll->topo, m->grads, m->nparams, m->grads + m->nparams, DT_STATS, b,
                                 m->nlayers, (size_t)(cfg->bucket_mb * 1048576.0), cfg->compress, st);
        free(b);
        if (!s->nccl) return st->code;
        s->overlap = dt_nccl_buckets(s->nccl) > 0; /* streams overlap by themselves */
        s->shard_off = 0;
        s->shard_len = m->nparams;
        dt_strategy_create_optim(s, 0, m->nparams);
        return DT_OK;
    }
#endif
    /* The gradient block lives in a node-shared window, so the hierarchical
     * all-reduce reads peers' gradients in place; the statistics ride after it. */
    s->be->free(m->grads);
    m->grads = dt_coll_alloc(s->coll, m->nparams + DT_STATS);
    m->grads_borrowed = 1;
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    /* Measured (doc/design.md): inside one node the all-reduce is CPU work on
     * the rank's own core, so a thread only time-slices with backward; across
     * nodes there is network time to hide. */
    /* --sync-bn reduces in the main thread during backward: no overlap thread. */
    int want = cfg->sync_bn ? 0 : cfg->overlap == DT_OVERLAP_AUTO ? s->coll->topo.nnodes > 1 : cfg->overlap;
    s->overlap = want && level >= MPI_THREAD_SERIALIZED;
    if (want && !s->overlap && s->coll->topo.rank == 0 && cfg->verbose)
        printf("dtrain: note: the MPI library gives thread level %d, below MPI_THREAD_SERIALIZED; "
               "buckets are reduced after backward (no overlap)\n", level);
    make_reducer(s, (size_t)(cfg->bucket_mb * 1048576.0), s->overlap);
    if (cfg->powersgd_rank && s->reducer.nbuckets > 0) powersgd_setup(s);
    else if (cfg->powersgd_rank && s->coll->topo.rank == 0 && cfg->verbose >= DT_NORMAL)
        printf("powersgd:%d: one replica: nothing to send, the gradient is used as it is\n", cfg->powersgd_rank);
    s->shard_off = 0;
    s->shard_len = m->nparams;
    dt_strategy_create_optim(s, 0, m->nparams);
    (void)st;
    return DT_OK;
}

static int mirrored_setup(struct dt_strategy *s, dt_status *st)
{
    char layout[160];
    if (s->coll->topo.nnodes > 1) {
        dt_topo_describe(&s->coll->topo, layout, sizeof layout);
        return dt_fail(st, DT_EUSAGE, "--strategy mirrored: the ranks span %s; mirrored keeps replicas on "
                       "one node, use --strategy multi-worker (or auto)", layout);
    }
    return dt_allreduce_strategy_setup(s, st);
}

void dt_allreduce_strategy_begin(struct dt_strategy *s, const float *stats)
{
    /* Before any bucket can start: the statistics travel in the last one. */
    s->be->upload(s->model->grads + s->model->nparams, stats, sizeof(float) * DT_STATS);
#ifdef DT_HAVE_CUDA
    if (s->nccl) {
        dt_nccl_begin(s->nccl);
        return;
    }
#endif
    dt_reducer_begin(&s->reducer);
}

void dt_allreduce_strategy_ready(struct dt_strategy *s, size_t offset)
{
#ifdef DT_HAVE_CUDA
    if (s->nccl) {
        dt_nccl_ready(s->nccl, offset);
        return;
    }
#endif
    dt_reducer_ready(&s->reducer, offset);
}

void dt_allreduce_strategy_finish(struct dt_strategy *s, float *stats)
{
    struct dt_model *m = s->model;
#ifdef DT_HAVE_CUDA
    if (s->nccl) dt_nccl_finish(s->nccl);
    else
#endif
        dt_reducer_finish(&s->reducer);
    /* Every replica holds the same reduced gradient, so every replica takes
     * the same decision here. */
    struct dt_loss_scale *ls = &s->loss_scale;
    int apply = 1;
    float scale_before = ls->scale;
    /* With loss scaling an overflow is routine (halve, skip); without, a
     * NaN or infinity is an error or a skip by --nan-policy. */
    if (ls->on) apply = dt_loss_scale_update(ls, s->be->unscale_check(m->grads, m->nparams, 1.0f / ls->scale));
    else apply = dt_strategy_gradient_ok(s, m->grads, m->nparams);
    /* PowerSGD's error buffers hold what this step left over: gone with a
     * skipped step, and in the loss scale's units. */
    if (s->psgd && !apply) dt_powersgd_discard(s->psgd);
    else if (s->psgd && ls->scale != scale_before) dt_powersgd_rescale(s->psgd, ls->scale / scale_before);
    if (apply) {
        dt_strategy_clip(s, m->grads, m->nparams, MPI_COMM_NULL); /* every replica holds the whole gradient */
        DT_TL_BEGIN(tl0);
        dt_optim_step(&s->optim, m->params, m->grads);
        DT_TL_END(tl0, DT_TL_COMPUTE, "optimizer", NULL);
    }
    s->be->download(stats, m->grads + m->nparams, sizeof(float) * DT_STATS);
}

void dt_allreduce_strategy_teardown(struct dt_strategy *s)
{
#ifdef DT_HAVE_CUDA
    if (s->nccl) {
        s->be->synchronize();
        dt_nccl_free(s->nccl);
        s->nccl = NULL;
        return;
    }
#endif
    long nb = s->reducer.nbuckets > 0 ? s->reducer.nbuckets : 1;
    dt_reducer_free(&s->reducer);
    if (s->psgd) {
        long steps = s->psgd->calls / nb;
        if (s->coll->topo.rank == 0 && s->cfg->verbose >= DT_VERBOSE && steps > 0)
            printf("powersgd:%d: %.3f ms per step compressing (rank 0, outside the all-reduces)\n",
                   s->psgd->rank, 1e3 * s->psgd->compute_seconds / (double)steps);
        dt_powersgd_free(s->psgd);
        free(s->psgd);
        s->psgd = NULL;
    }
}

const struct dt_strategy_ops dt_strategy_mirrored = {
    .name = "mirrored",
    .setup = mirrored_setup,
    .begin = dt_allreduce_strategy_begin,
    .grads_ready = dt_allreduce_strategy_ready,
    .finish = dt_allreduce_strategy_finish,
    .teardown = dt_allreduce_strategy_teardown,
};
