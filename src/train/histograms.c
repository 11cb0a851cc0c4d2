/* histograms.c: TensorBoard histograms of the model's parameter tensors and
 * their gradients (--histogram-freq, --histograms; libdtrain's
 * dtrain_write_histograms), one per tensor, tagged as Keras 3's TensorBoard
 * callback tags them: weight.path + "/histogram" (conv2d_1/kernel/histogram,
 * batch_normalization/gamma/histogram), and the gradient of the same tensor
 * <layer>/<name>_grad/histogram (tf.keras 1's write_grads suffix).
 *
 * The one design decision: the values are taken where checkpoints and
 * --export-keras take them (train/state.c's snapshot): the model's fp32
 * parameter block downloaded on rank 0. Between steps the data-parallel
 * strategies keep that block whole on every rank (sharded all-gathers it
 * after each update, a parameter server hands it to every rank at the
 * epoch's end), so nothing is gathered for them; under --precision
 * bf16/fp16 it is the fp32 master copy.
 * The gradient is the block as rank 0 holds it after the last update: the
 * replicas' reduced mean for the all-reduce strategies (mirrored,
 * multi_worker, central_storage), rank 0's own batch's share under sharded
 * and parameter_server, whose reduced gradient exists only in pieces. fsdp
 * and pipeline stages keep no whole block anywhere: both are gathered
 * (dt_strategy_get_block, every rank taking part), the gradient being the
 * reduced one. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "metrics/histogram.h"
#include "metrics/tfevents.h"
#include "runtime/checks.h"
#include "train/train.h"

/* Layer l's tensors: names and lengths, in the block's order. Returns how many. */
static int layer_tensors(const struct dt_layer *l, const char *name[2], size_t len[2])
{
    size_t rows, cols;
    if (l->ops == &dt_batchnorm_ops) {
        name[0] = "gamma";
        name[1] = "beta";
        len[0] = len[1] = l->nparams / 2;
        return 2;
    }
    if (dt_layer_kernel(l, &rows, &cols)) {
        name[0] = "kernel";
        name[1] = "bias";
        len[0] = rows * cols;
        len[1] = l->nparams - len[0];
        return len[1] ? 2 : 1;
    }
    name[0] = "params"; /* a layer type with parameters this table does not know */
    len[0] = l->nparams;
    return 1;
}

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Rank 0's part: every tensor of the host blocks p (parameters) and g
 * (gradients, NULL: none) into w. */
static int write_all(const struct dt_model *m, struct dt_tfevents *w, const float *p, const float *g, int what,
                     int64_t step, int *count, dt_status *st)
{
    const double wall = wall_now();
    char tag[96];
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (!l->nparams) continue;
        const char *name[2];
        size_t len[2], off = l->param_offset;
        int n = layer_tensors(l, name, len);
        for (int k = 0; k < n; off += len[k], k++) {
            if (what & DT_HIST_WEIGHTS) {
                snprintf(tag, sizeof tag, "%s/%s/histogram", l->name, name[k]);
                if (dt_histogram_write(w, tag, p + off, len[k], step, wall, st) != DT_OK) return st->code;
                ++*count;
            }
            if ((what & DT_HIST_GRADS) && g) {
                snprintf(tag, sizeof tag, "%s/%s_grad/histogram", l->name, name[k]);
                if (dt_histogram_write(w, tag, g + off, len[k], step, wall, st) != DT_OK) return st->code;
                ++*count;
            }
        }
    }
    return dt_tfevents_flush(w, st);
}

int dt_trainer_histograms(struct dt_trainer *t, struct dt_tfevents *w, int what, int64_t step, FILE *out,
                          dt_status *st)
{
    st->code = DT_OK;
    const struct dt_model *m = &t->model;
    const int gathers = dt_strategy_shards_params(&t->strategy); /* fsdp: every rank takes part */
    float *p = t->rank == 0 && w ? dt_xmalloc(sizeof(float) * (2 * m->nparams + 1)) : NULL, *g = NULL;
    double t0 = MPI_Wtime();
    if (gathers || p) dt_strategy_get_block(&t->strategy, 0, p, 0);
    if ((what & DT_HIST_GRADS) && (gathers || (p && m->grads))) {
        g = p ? p + m->nparams : NULL;
        dt_strategy_get_block(&t->strategy, 1, g, 0);
    }
    if (p) {
        int count = 0;
        write_all(m, w, p, g, what, step, &count, st);
        free(p);
        if (st->code == DT_OK && out && t->cfg->verbose >= DT_VERBOSE)
            fprintf(out, "histograms: %d tensors (%zu values) written in %.1f ms\n", count,
                    m->nparams * ((what & DT_HIST_WEIGHTS ? 1u : 0u) + (g ? 1u : 0u)), 1e3 * (MPI_Wtime() - t0));
    }
    return dt_status_agree(st, t->comm);
}
