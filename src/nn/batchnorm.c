/* batchnorm.c: Keras BatchNormalization over the channels of NHWC tensors,
 * with an optional fused ReLU.
 *
 * Parameters: gamma [c], beta [c] (trained). Buffers: moving_mean [c],
 * moving_variance [c] (not trained; Keras's non-trainable weights).
 *
 * Training: per channel, mean and biased variance over the batch's n*h*w
 * values; y = gamma * (x - mean) / sqrt(var + eps) + beta; the moving
 * statistics follow m = m * momentum + stat * (1 - momentum), as Keras 3
 * does (biased variance, momentum 0.99, eps 1e-3 by default). Inference
 * uses the moving statistics instead.
 *
 * With ctx->reduce (--sync-bn) the sums behind the statistics (count, sum x,
 * sum x^2) and behind the input gradient (sum dy, sum dy*x) are summed over
 * all replicas first: the statistics are those of the global batch, as
 * tf.keras.layers.BatchNormalization(synchronized=True) and Horovod's
 * SyncBatchNorm compute them, and the input gradient is the global batch's.
 * gamma's and beta's gradients stay this replica's share; the strategy sums
 * them with the other gradients.
 *
 * Backward, with xhat = (x - mean) * istd and N values per channel:
 *   dbeta = sum dy, dgamma = sum dy * xhat,
 *   dx = gamma * istd * (dy - mean(dy) - xhat * mean(dy * xhat)),
 * which the backend computes as one per-channel map dx = p*dy + q*x + r.
 *
 * Fused: an add that follows (a residual block's end) is folded in by the
 * model (layer.h's fold_add): forward writes add_relu(p*x + r + shortcut)
 * straight into the add's output, and backward applies that ReLU's
 * backward (and this layer's own) inside the sums' pass, writing the
 * masked gradient in place, where the model then hands it to the
 * shortcut. Two passes forward (sums, map) and two backward.
 * Per-channel vectors are small (c values): they live on the host and the
 * layer moves gamma, beta and the moving statistics with upload/download. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "nn/layer.h"

struct bn_state {
    int c;
    float momentum, eps;
    double *sums;        /* [1 + 4c]: count, s1, s2 (forward) or the backward sums, and a local copy */
    double *mean, *istd; /* [c]: the last training forward's statistics */
    double count;        /* values per channel behind them (over all replicas with sync) */
    float *host;         /* [6c]: gamma, beta, moving mean, moving variance, then scratch */
    float *p, *q, *r;    /* [c] each: the per-channel map */
};

static int bn_setup(struct dt_layer *l, const struct dt_layer_spec *sp, dt_status *st)
{
    float mom = sp->momentum != 0.0f ? sp->momentum : 0.99f, eps = sp->epsilon != 0.0f ? sp->epsilon : 1e-3f;
    if (!(mom >= 0.0f && mom < 1.0f) || !(eps > 0.0f))
        return dt_fail(st, DT_EUSAGE, "%s: momentum must be in [0, 1) and epsilon > 0 (got %g, %g)", l->name,
                       (double)mom, (double)eps);
    int c = l->in.c;
    struct bn_state *s = dt_xcalloc(1, sizeof *s);
    s->c = c;
    s->momentum = mom;
    s->eps = eps;
    s->sums = dt_xcalloc(1 + 4 * (size_t)c, sizeof(double));
    s->mean = dt_xcalloc(2 * (size_t)c, sizeof(double));
    s->istd = s->mean + c;
    s->host = dt_xcalloc(9 * (size_t)c, sizeof(float));
    s->p = s->host + 6 * (size_t)c;
    s->q = s->p + c;
    s->r = s->q + c;
    l->state = s;
    l->out = l->in;
    l->nparams = 2 * (size_t)c;
    l->nbuffers = 2 * (size_t)c;
    return DT_OK;
}

static void bn_destroy(struct dt_layer *l, const struct dt_backend *be)
{
    struct bn_state *s = l->state;
    (void)be;
    if (s) {
        free(s->sums);
        free(s->mean);
        free(s->host);
    }
    free(s);
    l->state = NULL;
}

static void bn_init(struct dt_layer *l, float *params, dt_rng *rng)
{
    int c = l->in.c;
    (void)rng;
    for (int j = 0; j < c; j++) {
        params[j] = 1.0f;     /* gamma: ones */
        params[c + j] = 0.0f; /* beta: zeros */
    }
}

static void bn_init_buffers(struct dt_layer *l, float *buf)
{
    int c = l->in.c;
    for (int j = 0; j < c; j++) {
        buf[j] = 0.0f;     /* moving_mean: zeros */
        buf[c + j] = 1.0f; /* moving_variance: ones */
    }
}

static int bn_supported(const struct dt_backend *be) { return be->channel_sums && be->channel_affine; }

static void bn_forward(struct dt_layer *l, const struct dt_ctx *ctx, dt_act *out, const dt_act *inp,
                       const float *params)
{
    struct bn_state *s = l->state;
    const struct dt_backend *be = ctx->be;
    const int c = s->c;
    const size_t rows = (size_t)ctx->n * l->in.h * l->in.w;
    float *gamma = s->host, *beta = gamma + c, *mm = beta + c, *mv = mm + c;
    be->download(gamma, params, sizeof(float) * 2 * (size_t)c);
    if (ctx->train) {
        double *sum = s->sums;
        sum[0] = (double)rows;
        if (rows) be->channel_sums(sum + 1, sum + 1 + c, inp, inp, rows, c);
        else memset(sum + 1, 0, sizeof(double) * 2 * (size_t)c);
        if (ctx->reduce) ctx->reduce(ctx->reduce_arg, sum, 1 + 2 * c);
        s->count = sum[0];
        if (s->count == 0.0) return; /* nothing anywhere: no statistics to take */
        be->download(mm, l->buffers, sizeof(float) * 2 * (size_t)c);
        for (int j = 0; j < c; j++) {
            double mean = sum[1 + j] / s->count, var = sum[1 + c + j] / s->count - mean * mean;
            if (var < 0.0) var = 0.0; /* rounding, for a constant channel */
            s->mean[j] = mean;
            s->istd[j] = 1.0 / sqrt(var + (double)s->eps);
            mm[j] = mm[j] * s->momentum + (float)mean * (1.0f - s->momentum);
            mv[j] = mv[j] * s->momentum + (float)var * (1.0f - s->momentum);
        }
        be->upload(l->buffers, mm, sizeof(float) * 2 * (size_t)c);
        for (int j = 0; j < c; j++) {
            s->p[j] = (float)((double)gamma[j] * s->istd[j]);
            s->r[j] = (float)((double)beta[j] - s->mean[j] * (double)gamma[j] * s->istd[j]);
        }
    }
    else {
        be->download(mm, l->buffers, sizeof(float) * 2 * (size_t)c);
        for (int j = 0; j < c; j++) {
            double istd = 1.0 / sqrt((double)mv[j] + (double)s->eps);
            s->p[j] = (float)((double)gamma[j] * istd);
            s->r[j] = (float)((double)beta[j] - (double)mm[j] * (double)gamma[j] * istd);
        }
    }
    if (!rows) return;
    if (l->fold_add) { /* the add folded in: out = add_relu(p x + r + shortcut) */
        for (int j = 0; j < c; j++) s->q[j] = 1.0f;
        be->channel_affine(out, inp, ctx->act[l->add_src], rows, c, s->p, s->q, s->r, l->add_relu);
    }
    else be->channel_affine(out, inp, NULL, rows, c, s->p, NULL, s->r, l->spec.activation == DT_ACT_RELU);
}

static void bn_backward(struct dt_layer *l, const struct dt_ctx *ctx, dt_act *dinp, dt_act *dout, const dt_act *inp,
                        const dt_act *out, const float *params, float *dparams)
{
    struct bn_state *s = l->state;
    const struct dt_backend *be = ctx->be;
    const int c = s->c;
    const size_t rows = (size_t)ctx->n * l->in.h * l->in.w;
    float *gamma = s->host, *dg = s->host + 2 * (size_t)c, *db = dg + c;
    double *sdy = s->sums, *sdyx = sdy + c, *gdy = sdy + 2 * c, *gdyx = sdy + 3 * c;
    /* A ReLU's backward first: this layer's own, or a folded add's (out is
     * then the add's output); in the sums' pass where the backend can. */
    const dt_act *relu_out = l->spec.activation == DT_ACT_RELU || (l->fold_add && l->add_relu) ? out : NULL;
    if (rows && relu_out && be->channel_sums_relu) be->channel_sums_relu(sdy, sdyx, dout, inp, relu_out, rows, c);
    else if (rows) {
        if (relu_out) be->relu_backward(dout, dout, relu_out, rows * (size_t)c);
        be->channel_sums(sdy, sdyx, dout, inp, rows, c);
    }
    else memset(sdy, 0, sizeof(double) * 2 * (size_t)c);
    be->download(gamma, params, sizeof(float) * (size_t)c);
    for (int j = 0; j < c; j++) {
        db[j] = (float)sdy[j];
        dg[j] = (float)(s->istd[j] * (sdyx[j] - s->mean[j] * sdy[j]));
    }
    be->upload(dparams, dg, sizeof(float) * 2 * (size_t)c);
    if (!dinp) return;
    memcpy(gdy, sdy, sizeof(double) * 2 * (size_t)c);
    if (ctx->reduce) ctx->reduce(ctx->reduce_arg, gdy, 2 * c);
    if (s->count == 0.0 || rows == 0) return;
    for (int j = 0; j < c; j++) {
        double g = (double)gamma[j] * s->istd[j];
        double mdy = gdy[j] / s->count;
        double mdyxh = s->istd[j] * (gdyx[j] - s->mean[j] * gdy[j]) / s->count; /* mean(dy * xhat) */
        s->p[j] = (float)g;
        s->q[j] = (float)(-g * s->istd[j] * mdyxh);
        s->r[j] = (float)(g * (s->mean[j] * s->istd[j] * mdyxh - mdy));
    }
    be->channel_affine(dinp, dout, inp, rows, c, s->p, s->q, s->r, 0);
}

const struct dt_layer_ops dt_batchnorm_ops = {
    .type = "batchnorm",
    .setup = bn_setup,
    .destroy = bn_destroy,
    .init = bn_init,
    .init_buffers = bn_init_buffers,
    .supported = bn_supported,
    .host_roundtrip = "its batch statistics go to the host at every step",
    .forward = bn_forward,
    .backward = bn_backward,
};
