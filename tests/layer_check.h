/* layer_check.h: the finite-difference machinery the layer tests share
 * (check_layers.c, check_residual_layers.c): objectives, probes that stay on
 * one linear piece, the tolerance and its proof of power, and a harness
 * that runs one layer alone on the CPU backend. Static functions: each test
 * program includes it once. */
#ifndef DT_LAYER_CHECK_H
#define DT_LAYER_CHECK_H

#include "ck_fast.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "runtime/rng.h"
#include "runtime/status.h"

static const struct dt_backend *const be = &dt_backend_cpu;

/* Finite-difference tolerance, as max|fd - analytic| / max|analytic| over the
 * probed coordinates (a norm-wise relative error, so coordinates with tiny
 * gradients are held to the scale of the large ones rather than excused by
 * an absolute floor). Expected error: the objective is accumulated in double
 * from float32 outputs; only the outputs a probe touches change, each with
 * about sqrt(K) * 6e-8 relative rounding (K <= 200 terms), so L(x+h) - L(x-h)
 * is off by ~1e-6 and the quotient by ~1e-6 / 2h: 5e-5 for h = 1e-2, ~1.5e-3
 * in the worst case of h = 3.3e-4 (the smallest step fd_compare falls back to
 * near a kink). Measured: 1e-6..1e-5 for layers at h = 1e-2, <= 1e-3 for the
 * CNN's first layer (steps down to 3e-4). 1e-2 covers that, yet a gradient
 * wrong by 10% (or with a flipped sign) gives >= 0.1 and fails: fd_assert
 * checks this on every run. */
#define FD_TOL 1e-2
/* Step for piecewise-linear layers: large, since there is no truncation
 * error on a linear piece and a larger step divides the rounding error. */
#define FD_STEP 1e-2f
/* A probe set must keep this fraction after discarding kink crossings. */
#define FD_MIN_KEPT 0.8

/* ---- helpers ----------------------------------------------------------- */

static inline float uniform(dt_rng *r, float lo, float hi) { return lo + (hi - lo) * dt_rng_uniform(r); }

static inline void fill_uniform(float *x, size_t n, dt_rng *r, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = uniform(r, lo, hi);
}

/* Distinct values spaced by `gap` (a shuffled ramp), so no two max-pool
 * candidates are within 2 x FD_STEP of each other: no ties, no argmax flips. */
static inline void fill_spaced(float *x, size_t n, dt_rng *r, float gap)
{
    int64_t *perm = malloc(sizeof *perm * n);
    dt_rng_permutation(r, perm, (int64_t)n);
    for (size_t i = 0; i < n; i++) x[i] = ((float)perm[i] - 0.5f * (float)n) * gap;
    free(perm);
}

static inline uint64_t fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ULL;
    }
    return h;
}

static int pool_kernel(const struct dt_layer *l) { return l->spec.kernel ? l->spec.kernel : 2; }
static int pool_stride(const struct dt_layer *l)
{
    return l->spec.stride ? l->spec.stride : pool_kernel(l);
}

/* Which linear piece a layer is on: the ReLU on/off pattern of its output
 * and, for a max pool, the position of each window's winner (the first
 * input equal to the output, as the backend picks it). */
static inline uint64_t layer_signature(const struct dt_layer *l, const float *inp, const float *out, int n,
                                uint64_t h)
{
    size_t nout = dt_shape_size(l->out) * (size_t)n;
    /* a conv folded with its pool never writes its own output */
    ck_assert_msg(!l->fold_pool && !(l->folded && l->ops == &dt_maxpool_ops), "%s: signature of a folded layer",
                  l->name);
    if (l->ops == &dt_relu_ops || (l->fold_add && l->add_relu) ||
        ((l->ops == &dt_conv2d_ops || l->ops == &dt_dense_ops || l->ops == &dt_batchnorm_ops ||
          l->ops == &dt_add_ops) && l->spec.activation == DT_ACT_RELU))
        for (size_t i = 0; i < nout; i++) h = fnv(h, out[i] > 0.0f);
    if (l->ops == &dt_maxpool_ops) {
        int k = pool_kernel(l), s = pool_stride(l);
        for (int b = 0; b < n; b++)
            for (int oy = 0; oy < l->out.h; oy++)
                for (int ox = 0; ox < l->out.w; ox++)
                    for (int c = 0; c < l->out.c; c++) {
                        float o = out[(((size_t)b * l->out.h + oy) * l->out.w + ox) * l->out.c + c];
                        int win = -1;
                        for (int q = 0; q < k * k && win < 0; q++) {
                            int iy = oy * s + q / k, ix = ox * s + q % k;
                            if (inp[(((size_t)b * l->in.h + iy) * l->in.w + ix) * l->in.c + c] == o) win = q;
                        }
                        h = fnv(h, (uint64_t)(int64_t)win);
                    }
    }
    return h;
}

/* ---- finite differences ------------------------------------------------ */

typedef double (*objective_fn)(void *ctx, uint64_t *signature);

struct fd_stats {
    double maxerr, maxwrong, maxan;
    float minstep;     /* the smallest step a kept probe needed */
    int checked, skipped;
};

/* Central differences of f with respect to x[idx[k]], against an[idx[k]]
 * (idx NULL: every coordinate). Each probe tries step, step/3, step/10, step/30
 * and uses the largest that stays on the base point's linear piece: large
 * steps divide the rounding error, small ones are needed near a kink. */
static inline struct fd_stats fd_compare(objective_fn f, void *ctx, float *x, const float *an,
                                  const size_t *idx, size_t nidx, float step)
{
    static const float ladder[] = {1.0f, 1.0f / 3.0f, 0.1f, 1.0f / 30.0f};
    struct fd_stats s = {.minstep = step};
    uint64_t base, sp, sm;
    f(ctx, &base);
    for (size_t k = 0; k < nidx; k++) {
        size_t i = idx ? idx[k] : k;
        float x0 = x[i];
        int kept = 0;
        for (size_t j = 0; j < sizeof ladder / sizeof *ladder && !kept; j++) {
            float h = step * ladder[j];
            x[i] = x0 + h;
            double xp = (double)x[i], lp = f(ctx, &sp);
            x[i] = x0 - h;
            double xm = (double)x[i], lm = f(ctx, &sm);
            x[i] = x0;
            if (sp != base || sm != base) continue;
            double fd = (lp - lm) / (xp - xm), a = (double)an[i];
            kept = 1;
            s.minstep = fminf(s.minstep, h);
            s.maxerr = fmax(s.maxerr, fabs(fd - a));
            s.maxwrong = fmax(s.maxwrong, fabs(fd - 1.1 * a));
            s.maxan = fmax(s.maxan, fabs(a));
        }
        if (kept) s.checked++;
        else s.skipped++;
    }
    return s;
}

static inline void fd_assert(const char *what, struct fd_stats s, size_t nidx)
{
    ck_assert_msg((double)s.checked >= FD_MIN_KEPT * (double)nidx,
                  "%s: only %d of %zu probes stayed on one linear piece", what, s.checked, nidx);
    /* A gradient of all zeros would make the comparison vacuous. */
    ck_assert_msg(s.maxan > 1e-3, "%s: analytic gradient is ~0 everywhere (max %g)", what, s.maxan);
    double rel = s.maxerr / s.maxan, wrong = s.maxwrong / s.maxan;
    printf("# %-30s fd rel err %.2e (1.1x grad: %.2e), %d probes, %d skipped, min step %.0e\n", what,
           rel, wrong, s.checked, s.skipped, (double)s.minstep);
    ck_assert_msg(rel < FD_TOL, "%s: |fd - analytic| / max|analytic| = %.3e >= %g (%d probes)", what,
                  rel, FD_TOL, s.checked);
    ck_assert_msg(wrong > FD_TOL, "%s: the check cannot tell a 10%% gradient error (%.3e)", what, wrong);
}

/* ---- a standalone layer ------------------------------------------------ */

struct lh {
    struct dt_layer l;
    struct dt_ctx c;
    dt_rng rng;        /* dropout stream */
    int reseed;        /* re-seed rng before each forward (fixed dropout mask) */
    int n;
    size_t nin, nout, np;
    float *inp, *out, *params, *dparams, *dinp, *dout, *R;
    float *buffers;    /* [l.nbuffers], initialised by the layer */
};

static inline void lh_setup(struct lh *h, const struct dt_layer_ops *ops, struct dt_layer_spec spec,
                     struct dt_shape in, int n, uint64_t seed)
{
    dt_status st = {0};
    dt_rng r;
    memset(h, 0, sizeof *h);
    h->l.ops = ops;
    h->l.in = in;
    h->l.spec = spec;
    snprintf(h->l.name, sizeof h->l.name, "%s", ops->type);
    ck_assert_msg(ops->setup(&h->l, &spec, &st) == DT_OK, "setup %s: %s", ops->type, st.msg);
    if (ops->create) ops->create(&h->l, be, n);
    h->n = n;
    h->nin = dt_shape_size(in) * (size_t)n;
    h->nout = dt_shape_size(h->l.out) * (size_t)n;
    h->np = h->l.nparams;
    h->inp = calloc(h->nin + 1, sizeof(float));
    h->dinp = calloc(h->nin + 1, sizeof(float));
    h->out = calloc(h->nout + 1, sizeof(float));
    h->dout = calloc(h->nout + 1, sizeof(float));
    h->R = calloc(h->nout + 1, sizeof(float));
    h->buffers = calloc(h->l.nbuffers + 1, sizeof(float));
    h->l.buffers = h->buffers;
    if (ops->init_buffers) ops->init_buffers(&h->l, h->buffers);
    h->params = calloc(h->np + 1, sizeof(float));
    h->dparams = calloc(h->np + 1, sizeof(float));
    dt_rng_seed(&r, seed, 1);
    fill_uniform(h->inp, h->nin, &r, -1.0f, 1.0f);
    fill_uniform(h->R, h->nout, &r, -1.0f, 1.0f);
    /* Random kernels and non-zero biases, so the bias path is exercised. */
    fill_uniform(h->params, h->np, &r, -0.5f, 0.5f);
    dt_rng_seed(&h->rng, seed, 2);
    h->c = (struct dt_ctx){.be = be, .n = n, .train = 1, .rng = &h->rng, .act_size = dt_act_size(be->act_type())};
}

static inline void lh_free(struct lh *h)
{
    if (h->l.ops->destroy) h->l.ops->destroy(&h->l, be);
    else free(h->l.state);
    free(h->inp); free(h->dinp); free(h->out); free(h->dout); free(h->R);
    free(h->params); free(h->dparams); free(h->buffers);
}

static inline void lh_forward(struct lh *h)
{
    if (h->reseed) dt_rng_seed(&h->rng, 0xd0d0, 3);
    h->l.ops->forward(&h->l, &h->c, h->out, h->inp, h->params);
}

static inline double lh_objective(void *ctx, uint64_t *sig)
{
    struct lh *h = ctx;
    double L = 0.0;
    lh_forward(h);
    for (size_t i = 0; i < h->nout; i++) L += (double)h->out[i] * (double)h->R[i];
    *sig = layer_signature(&h->l, h->inp, h->out, h->n, 14695981039346656037ULL);
    return L;
}

/* Analytic gradients of sum(out * R): dout = R. */
static inline void lh_backward(struct lh *h)
{
    lh_forward(h);
    memcpy(h->dout, h->R, sizeof(float) * h->nout);
    for (size_t i = 0; i < h->np; i++) h->dparams[i] = NAN; /* must be overwritten */
    for (size_t i = 0; i < h->nin; i++) h->dinp[i] = NAN;    /* so must every input gradient */
    h->l.ops->backward(&h->l, &h->c, h->dinp, h->dout, h->inp, h->out, h->params, h->dparams);
}

/* FD check of d/dinp and, for layers with parameters, d/dparams, with
 * central differences of the given step. */
static inline void lh_fd_step(struct lh *h, const char *what, float step)
{
    char label[96];
    float *an_in = malloc(sizeof(float) * (h->nin + 1)), *an_p = malloc(sizeof(float) * (h->np + 1));
    lh_backward(h);
    memcpy(an_in, h->dinp, sizeof(float) * h->nin);
    memcpy(an_p, h->dparams, sizeof(float) * h->np);
    snprintf(label, sizeof label, "%s d/dinp", what);
    fd_assert(label, fd_compare(lh_objective, h, h->inp, an_in, NULL, h->nin, step), h->nin);
    if (h->np) {
        snprintf(label, sizeof label, "%s d/dparams", what);
        fd_assert(label, fd_compare(lh_objective, h, h->params, an_p, NULL, h->np, step), h->np);
    }
    free(an_in);
    free(an_p);
}

static inline void lh_fd(struct lh *h, const char *what) { lh_fd_step(h, what, FD_STEP); }

/* ---- a whole model: the summed cross-entropy of a batch ----------------- */

struct model_ctx {
    struct dt_model m;
    int n;
    const uint8_t *labels;
    dt_rng rng;
};

static inline double model_objective(void *ctx, uint64_t *sig)
{
    struct model_ctx *x = ctx;
    dt_model_forward(&x->m, x->n, 1, &x->rng);
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < x->m.nlayers; i++)
        h = layer_signature(&x->m.layers[i], x->m.act[i], x->m.act[i + 1], x->n, h);
    *sig = h;
    return dt_model_loss(&x->m, x->labels, x->n, 0.0f).loss_sum;
}

#endif
