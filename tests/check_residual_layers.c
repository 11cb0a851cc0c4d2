/* check_residual_layers.c: unit tests for the layers that residual networks
 * need: average and global average pooling, batch normalization (training,
 * inference, moving statistics, and its cross-replica form), add and route
 * (the edges that make a model branch), flatten and reshape; and a small residual model
 * built from all of them, gradient-checked end to end.
 *
 * Gradients are checked against central finite differences (layer_check.h).
 * Batch normalization is smooth rather than piecewise linear, so its probes
 * use a smaller step (1e-3): the truncation error h^2/6 |f'''| is then
 * ~1e-7, and the rounding error ~1e-6 / 2h = 5e-4, inside FD_TOL (1e-2),
 * while a 10% gradient error still fails (fd_assert proves it each time).
 * Forward passes are compared with double-precision references. */
#include "config.h"

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

#include "layer_check.h"

#define BN_STEP 1e-3f

/* ---- average pooling ---------------------------------------------------- */

static void check_avgpool_forward(const struct dt_layer_ops *ops, struct dt_shape in, int k, int s)
{
    struct lh h;
    lh_setup(&h, ops, (struct dt_layer_spec){.type = ops->type, .kernel = k, .stride = s}, in, 2, 40);
    lh_forward(&h);
    int kh = ops == &dt_global_avgpool_ops ? in.h : k, kw = ops == &dt_global_avgpool_ops ? in.w : k;
    int st = ops == &dt_global_avgpool_ops ? 1 : (s ? s : k);
    ck_assert_int_eq(h.l.out.h, (in.h - kh) / st + 1);
    ck_assert_int_eq(h.l.out.w, (in.w - kw) / st + 1);
    ck_assert_int_eq(h.l.out.c, in.c);
    for (int b = 0; b < 2; b++)
        for (int oy = 0; oy < h.l.out.h; oy++)
            for (int ox = 0; ox < h.l.out.w; ox++)
                for (int c = 0; c < in.c; c++) {
                    double sum = 0.0;
                    for (int y = 0; y < kh; y++)
                        for (int x = 0; x < kw; x++)
                            sum += (double)h.inp[(((size_t)b * in.h + oy * st + y) * in.w + ox * st + x) * in.c + c];
                    double want = sum / (kh * kw);
                    float got = h.out[(((size_t)b * h.l.out.h + oy) * h.l.out.w + ox) * in.c + c];
                    ck_assert_msg(fabs((double)got - want) <= 1e-6 * (1.0 + fabs(want)),
                                  "%s (%d,%d,%d,%d): %g, want %g", ops->type, b, oy, ox, c, (double)got, want);
                }
    lh_free(&h);
}

START_TEST(avgpool_forward_even) { check_avgpool_forward(&dt_avgpool_ops, (struct dt_shape){6, 6, 3}, 2, 0); }
END_TEST

START_TEST(avgpool_forward_overlap) { check_avgpool_forward(&dt_avgpool_ops, (struct dt_shape){7, 5, 2}, 3, 2); }
END_TEST

START_TEST(global_avgpool_forward) { check_avgpool_forward(&dt_global_avgpool_ops, (struct dt_shape){5, 4, 3}, 0, 0); }
END_TEST

static void fd_avgpool(const struct dt_layer_ops *ops, struct dt_shape in, int k, int s, const char *what)
{
    struct lh h;
    lh_setup(&h, ops, (struct dt_layer_spec){.type = ops->type, .kernel = k, .stride = s}, in, 2, 41);
    lh_fd(&h, what);
    lh_free(&h);
}

START_TEST(fd_avgpool_even) { fd_avgpool(&dt_avgpool_ops, (struct dt_shape){6, 6, 3}, 2, 0, "avgpool 2x2 on 6x6"); }
END_TEST

START_TEST(fd_avgpool_overlap) { fd_avgpool(&dt_avgpool_ops, (struct dt_shape){7, 7, 2}, 3, 2, "avgpool 3x3/2 on 7x7"); }
END_TEST

START_TEST(fd_global_avgpool) { fd_avgpool(&dt_global_avgpool_ops, (struct dt_shape){5, 4, 3}, 0, 0, "global avgpool 5x4"); }
END_TEST

/* ---- batch normalization ------------------------------------------------- */

/* Inputs with a different mean and scale per channel, so normalizing does
 * something visible. */
static void bn_inputs(struct lh *h)
{
    int C = h->l.in.c;
    for (size_t i = 0; i < h->nin; i++) {
        int c = (int)(i % (size_t)C);
        h->inp[i] = h->inp[i] * (0.5f + (float)c) + (float)c - 1.0f;
    }
}

static void bn_setup(struct lh *h, struct dt_shape in, int n, int relu, uint64_t seed)
{
    lh_setup(h, &dt_batchnorm_ops,
             (struct dt_layer_spec){.type = "batchnorm", .activation = relu ? DT_ACT_RELU : DT_ACT_NONE}, in, n, seed);
    bn_inputs(h);
}

START_TEST(batchnorm_forward_train_and_inference)
{
    const struct dt_shape in = {3, 4, 3};
    const int n = 2, C = in.c;
    const size_t rows = (size_t)n * in.h * in.w;
    struct lh h;
    bn_setup(&h, in, n, 0, 50);
    float *gamma = h.params, *beta = h.params + C;
    /* Keras's initial weights: gamma 1, beta 0, moving mean 0, variance 1. */
    float p0[6];
    memcpy(p0, h.params, sizeof p0);
    h.l.ops->init(&h.l, h.params, NULL);
    for (int c = 0; c < C; c++) {
        ck_assert(gamma[c] == 1.0f && beta[c] == 0.0f);
        ck_assert(h.buffers[c] == 0.0f && h.buffers[C + c] == 1.0f);
    }
    memcpy(h.params, p0, sizeof p0); /* back to random gamma/beta */
    lh_forward(&h);
    for (int c = 0; c < C; c++) {
        double mean = 0.0, var = 0.0, g = (double)gamma[c], be_ = (double)beta[c];
        for (size_t r = 0; r < rows; r++) mean += (double)h.inp[r * C + c];
        mean /= (double)rows;
        for (size_t r = 0; r < rows; r++) var += ((double)h.inp[r * C + c] - mean) * ((double)h.inp[r * C + c] - mean);
        var /= (double)rows; /* biased, as Keras */
        for (size_t r = 0; r < rows; r++) {
            double want = g * ((double)h.inp[r * C + c] - mean) / sqrt(var + 1e-3) + be_, got = (double)h.out[r * C + c];
            ck_assert_msg(fabs(got - want) <= 2e-6 * (1.0 + fabs(want)), "train out[%zu][%d] %g want %g", r, c, got, want);
        }
        /* momentum 0.99: one step moves the statistics 1% of the way */
        double mm = 0.01 * mean, mv = 0.99 + 0.01 * var;
        ck_assert_msg(fabs((double)h.buffers[c] - mm) <= 1e-6 * (1.0 + fabs(mm)), "moving mean %d", c);
        ck_assert_msg(fabs((double)h.buffers[C + c] - mv) <= 1e-6 * (1.0 + mv), "moving variance %d", c);
    }
    /* Inference: the moving statistics, which stay where they are. */
    float mm[3], mv[3];
    memcpy(mm, h.buffers, sizeof mm);
    memcpy(mv, h.buffers + C, sizeof mv);
    h.c.train = 0;
    lh_forward(&h);
    for (int c = 0; c < C; c++) {
        ck_assert(h.buffers[c] == mm[c] && h.buffers[C + c] == mv[c]);
        for (size_t r = 0; r < rows; r++) {
            double want = (double)gamma[c] * ((double)h.inp[r * C + c] - (double)mm[c]) / sqrt((double)mv[c] + 1e-3) +
                          (double)beta[c];
            ck_assert_msg(fabs((double)h.out[r * C + c] - want) <= 2e-6 * (1.0 + fabs(want)), "inference out[%zu][%d]", r, c);
        }
    }
    lh_free(&h);
}
END_TEST

START_TEST(batchnorm_relu_forward)
{
    struct lh a, b;
    bn_setup(&a, (struct dt_shape){2, 3, 4}, 3, 0, 51);
    bn_setup(&b, (struct dt_shape){2, 3, 4}, 3, 1, 51);
    lh_forward(&a);
    lh_forward(&b);
    for (size_t i = 0; i < a.nout; i++) ck_assert(b.out[i] == (a.out[i] > 0.0f ? a.out[i] : 0.0f));
    lh_free(&a);
    lh_free(&b);
}
END_TEST

START_TEST(fd_batchnorm)
{
    struct lh h;
    bn_setup(&h, (struct dt_shape){3, 3, 4}, 2, 0, 52);
    lh_fd_step(&h, "batchnorm train", BN_STEP);
    lh_free(&h);
}
END_TEST

START_TEST(fd_batchnorm_relu)
{
    struct lh h;
    bn_setup(&h, (struct dt_shape){3, 3, 4}, 2, 1, 53);
    lh_fd_step(&h, "batchnorm train relu", BN_STEP);
    lh_free(&h);
}
END_TEST

/* A batchnorm with an add (and its ReLU) folded in, as the model folds a
 * residual block's end: out = relu(BN(x) + shortcut), the ReLU's backward
 * applied to dout in place (what the model hands the shortcut). 16
 * channels: the AVX-512 fast paths where the CPU has them. */
START_TEST(fd_batchnorm_folded_add)
{
    struct lh h, plain;
    const struct dt_shape in = {3, 3, 16};
    bn_setup(&h, in, 2, 0, 54);
    bn_setup(&plain, in, 2, 0, 54);
    float *shortcut = malloc(sizeof(float) * h.nout);
    dt_rng r;
    dt_rng_seed(&r, 55, 0);
    fill_uniform(shortcut, h.nout, &r, -1.0f, 1.0f);
    dt_act *acts[1] = {shortcut};
    h.c.act = acts;
    h.l.fold_add = 1;
    h.l.add_src = 0;
    h.l.add_relu = 1;
    lh_forward(&h);
    lh_forward(&plain);
    for (size_t i = 0; i < h.nout; i++) {
        float want = plain.out[i] + shortcut[i];
        want = want > 0.0f ? want : 0.0f;
        ck_assert_msg(fabsf(h.out[i] - want) <= 1e-6f * (1.0f + fabsf(want)), "out[%zu] %g, want %g", i,
                      (double)h.out[i], (double)want);
    }
    lh_fd_step(&h, "batchnorm + add + relu", BN_STEP);
    lh_backward(&h);
    for (size_t i = 0; i < h.nout; i++)
        ck_assert_msg(h.dout[i] == (h.out[i] > 0.0f ? h.R[i] : 0.0f), "masked gradient [%zu]", i);
    free(shortcut);
    lh_free(&h);
    lh_free(&plain);
}
END_TEST

START_TEST(fd_batchnorm_inference)
{
    struct lh h;
    bn_setup(&h, (struct dt_shape){2, 2, 3}, 2, 0, 54);
    for (int c = 0; c < 3; c++) {
        h.buffers[c] = 0.3f * (float)c;
        h.buffers[3 + c] = 0.5f + (float)c;
    }
    /* Inference is affine in the input: dinp = gamma / sqrt(var + eps) * R. */
    h.c.train = 0;
    lh_forward(&h);
    memcpy(h.dout, h.R, sizeof(float) * h.nout);
    /* backward after an inference forward is not used in training; only the
     * forward is checked here, against finite differences of the input */
    float *an = malloc(sizeof(float) * h.nin);
    for (size_t i = 0; i < h.nin; i++) {
        int c = (int)(i % 3);
        an[i] = (float)((double)h.params[c] / sqrt((double)h.buffers[3 + c] + 1e-3) * (double)h.R[i]);
    }
    fd_assert("batchnorm inference d/dinp", fd_compare(lh_objective, &h, h.inp, an, NULL, h.nin, FD_STEP), h.nin);
    free(an);
    lh_free(&h);
}
END_TEST

/* Two replicas in one process: each half of a batch runs its own layer with
 * a reduce that adds the other half's sums (captured in a first pass). The
 * result must be the full batch's, as --sync-bn promises. */
struct fake_reduce {
    double *captured[2]; /* [0] forward sums, [1] backward sums */
    const double *other[2];
    int call, capture;
};

static void fake_reduce(void *arg, double *buf, int n)
{
    struct fake_reduce *f = arg;
    int k = f->call++ % 2;
    if (f->capture) memcpy(f->captured[k], buf, sizeof(double) * (size_t)n);
    else
        for (int i = 0; i < n; i++) buf[i] += f->other[k][i];
}

START_TEST(sync_batchnorm_equals_full_batch)
{
    const struct dt_shape in = {2, 3, 4};
    const int C = in.c, half = 3;
    struct lh full, rep[2];
    bn_setup(&full, in, 2 * half, 0, 60);
    struct fake_reduce fr[2];
    size_t per = (size_t)half * dt_shape_size(in);
    for (int r = 0; r < 2; r++) {
        bn_setup(&rep[r], in, half, 0, 61 + (uint64_t)r);
        memcpy(rep[r].inp, full.inp + (size_t)r * per, sizeof(float) * per);
        memcpy(rep[r].R, full.R + (size_t)r * per, sizeof(float) * per);
        memcpy(rep[r].params, full.params, sizeof(float) * 2 * (size_t)C);
        memset(&fr[r], 0, sizeof fr[r]);
        fr[r].captured[0] = calloc(1 + 2 * (size_t)C, sizeof(double));
        fr[r].captured[1] = calloc(2 * (size_t)C, sizeof(double));
        rep[r].c.reduce = fake_reduce;
        rep[r].c.reduce_arg = &fr[r];
    }
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < 2; r++) {
            fr[r].capture = pass == 0;
            fr[r].other[0] = fr[1 - r].captured[0];
            fr[r].other[1] = fr[1 - r].captured[1];
            memcpy(rep[r].buffers, full.buffers, sizeof(float) * 2 * (size_t)C);
            lh_backward(&rep[r]); /* forward (reduce 1) and backward (reduce 2) */
        }
    lh_backward(&full);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < per; i++) {
            size_t j = (size_t)r * per + i;
            ck_assert_msg(fabsf(rep[r].out[i] - full.out[j]) <= 1e-5f * (1.0f + fabsf(full.out[j])), "out %zu", j);
            ck_assert_msg(fabsf(rep[r].dinp[i] - full.dinp[j]) <= 1e-5f * (1.0f + fabsf(full.dinp[j])), "dinp %zu: %g vs %g",
                          j, (double)rep[r].dinp[i], (double)full.dinp[j]);
        }
    for (int k = 0; k < 2 * C; k++) {
        float sum = rep[0].dparams[k] + rep[1].dparams[k];
        ck_assert_msg(fabsf(sum - full.dparams[k]) <= 1e-5f * (1.0f + fabsf(full.dparams[k])),
                      "dparams %d: %g + %g vs %g", k, (double)rep[0].dparams[k], (double)rep[1].dparams[k],
                      (double)full.dparams[k]);
        /* both replicas keep the global batch's moving statistics */
        ck_assert_msg(fabsf(rep[0].buffers[k] - full.buffers[k]) <= 1e-6f && rep[0].buffers[k] == rep[1].buffers[k],
                      "moving statistic %d", k);
    }
    /* and without the reduction the halves' statistics differ: the check bites */
    struct lh lone;
    bn_setup(&lone, in, half, 0, 62);
    memcpy(lone.inp, full.inp, sizeof(float) * per);
    memcpy(lone.params, full.params, sizeof(float) * 2 * (size_t)C);
    lh_forward(&lone);
    double maxd = 0.0;
    for (size_t i = 0; i < per; i++) maxd = fmax(maxd, fabs((double)lone.out[i] - (double)full.out[i]));
    ck_assert_msg(maxd > 1e-3, "a half batch normalizes like the full one (%g): the test cannot fail", maxd);
    lh_free(&lone);
    for (int r = 0; r < 2; r++) {
        free(fr[r].captured[0]);
        free(fr[r].captured[1]);
        lh_free(&rep[r]);
    }
    lh_free(&full);
}
END_TEST

/* ---- flatten and reshape ------------------------------------------------- */

START_TEST(flatten_reshape_copy)
{
    struct lh f, r;
    lh_setup(&f, &dt_flatten_ops, (struct dt_layer_spec){.type = "flatten"}, (struct dt_shape){3, 2, 4}, 2, 70);
    ck_assert(f.l.out.h == 1 && f.l.out.w == 1 && f.l.out.c == 24);
    lh_setup(&r, &dt_reshape_ops, (struct dt_layer_spec){.type = "reshape", .shape = {4, 6, 1}},
             (struct dt_shape){3, 2, 4}, 2, 70);
    ck_assert(r.l.out.h == 4 && r.l.out.w == 6 && r.l.out.c == 1);
    lh_backward(&f);
    lh_backward(&r);
    ck_assert(!memcmp(f.out, f.inp, sizeof(float) * f.nin) && !memcmp(f.dinp, f.R, sizeof(float) * f.nin));
    ck_assert(!memcmp(r.out, r.inp, sizeof(float) * r.nin) && !memcmp(r.dinp, r.R, sizeof(float) * r.nin));
    lh_free(&f);
    lh_free(&r);
    dt_status st = {0};
    struct dt_layer l = {.ops = &dt_reshape_ops, .in = {3, 2, 4}, .name = "reshape"};
    struct dt_layer_spec bad = {.type = "reshape", .shape = {5, 5, 1}};
    ck_assert_int_eq(dt_reshape_ops.setup(&l, &bad, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "cannot reshape 3x2x4 (24 values) into 5x5x1"), "%s", st.msg);
}
END_TEST

/* ---- a residual model ---------------------------------------------------- */

/* Every new layer in one model: a residual block (add with ReLU), a
 * projection branch (route back, strided 1x1 conv), a second add across
 * the branch, flatten, reshape, global average pooling. */
static const struct dt_layer_spec resnet_specs[] = {
    {.type = "conv2d", .filters = 4, .kernel = 3, .same = 1, .activation = DT_ACT_RELU}, /* 0 -> act1 */
    {.type = "batchnorm"},                                                               /* 1 -> act2 */
    {.type = "conv2d", .filters = 4, .kernel = 3, .same = 1},                            /* 2 */
    {.type = "batchnorm", .activation = DT_ACT_RELU},                                    /* 3 */
    {.type = "add", .from = -3, .activation = DT_ACT_RELU},                              /* 4: + act2 */
    {.type = "route", .from = -5},                                                       /* 5: act1 */
    {.type = "conv2d", .filters = 4, .kernel = 1, .stride = 2},                          /* 6: 3x3x4 */
    {.type = "route", .from = -3},                                                       /* 7: layer 4's */
    {.type = "avgpool", .kernel = 2},                                                    /* 8: 3x3x4 */
    {.type = "add", .from = -3},                                                         /* 9: + layer 6's */
    {.type = "flatten"},
    {.type = "reshape", .shape = {3, 3, 4}},
    {.type = "global_avgpool"},
    {.type = "dense", .filters = 3},
};
#define RESNET_N ((int)(sizeof resnet_specs / sizeof *resnet_specs))

START_TEST(fd_residual_model)
{
    const uint8_t labels[4] = {2, 0, 1, 1};
    const int n = 4;
    struct model_ctx x;
    dt_status st = {0};
    memset(&x, 0, sizeof x);
    ck_assert_msg(dt_model_build_specs(&x.m, "res", (struct dt_shape){6, 6, 2}, 3, resnet_specs, RESNET_N, &st) == DT_OK,
                  "%s", st.msg);
    ck_assert(dt_model_is_branched(&x.m));
    ck_assert_int_eq(x.m.layers[4].src, 2);
    ck_assert_int_eq(x.m.layers[5].src, 1);
    ck_assert_int_eq(x.m.layers[9].src, 7);
    ck_assert(x.m.layers[5].out.h == 6 && x.m.layers[6].out.h == 3);
    ck_assert_int_eq((int)x.m.nbuffers, 16);
    dt_model_create(&x.m, be, n);
    dt_model_init_params(&x.m, 80);
    dt_rng r;
    dt_rng_seed(&r, 81, 0);
    for (int i = 0; i < x.m.nlayers; i++) { /* non-zero biases, gamma and beta */
        const struct dt_layer *l = &x.m.layers[i];
        if (l->ops == &dt_batchnorm_ops) fill_uniform(x.m.params + l->param_offset, l->nparams, &r, 0.5f, 1.5f);
        else if (l->nparams) fill_uniform(x.m.params + l->param_offset + l->nparams - (size_t)l->out.c,
                                          (size_t)l->out.c, &r, -0.1f, 0.1f);
    }
    fill_uniform(x.m.act[0], 72 * (size_t)n, &r, 0.0f, 1.0f);
    x.n = n;
    x.labels = labels;
    dt_rng_seed(&x.rng, 82, 0);

    dt_model_forward(&x.m, n, 1, &x.rng);
    dt_model_loss(&x.m, labels, n, 1.0f);
    for (size_t i = 0; i < x.m.nparams; i++) x.m.grads[i] = NAN;
    dt_model_backward(&x.m, n, &x.rng);
    float *an = malloc(sizeof(float) * x.m.nparams);
    memcpy(an, x.m.grads, sizeof(float) * x.m.nparams);
    for (size_t i = 0; i < x.m.nparams; i++) ck_assert_msg(isfinite(an[i]), "grad[%zu] not written", i);
    for (int li = 0; li < x.m.nlayers; li++) {
        const struct dt_layer *l = &x.m.layers[li];
        if (!l->nparams) continue;
        size_t idx[64], nidx = 0;
        for (size_t j = 0; j < l->nparams && nidx < 48; j++) idx[nidx++] = l->param_offset + j;
        char label[64];
        snprintf(label, sizeof label, "resnet %s d/dparams", l->name);
        fd_assert(label, fd_compare(model_objective, &x, x.m.params, an, idx, nidx, BN_STEP), nidx);
    }
    free(an);
    dt_model_free(&x.m);
}
END_TEST

/* A basic block as ResNets end it: conv - BN - add - ReLU. The model folds
 * the add into the batchnorm (layer.h's fold_add) unless DTRAIN_NO_FUSION=1;
 * both must give the same gradients (with 16 channels, so the CPU's
 * AVX-512 fast paths of cpu_avx512.c run where the CPU has them).
 * fd_batchnorm_folded_add checks the folded layer against finite
 * differences (a whole block of three batch norms is too ill-conditioned
 * for float32 difference quotients, fused or not). */
static void block_specs(struct dt_layer_spec *sp, int filters)
{
    const struct dt_layer_spec b[] = {
        {.type = "conv2d", .filters = filters, .kernel = 3, .same = 1},
        {.type = "batchnorm", .activation = DT_ACT_RELU}, /* 1 -> act2: the block's input */
        {.type = "conv2d", .filters = filters, .kernel = 3, .same = 1},
        {.type = "batchnorm", .activation = DT_ACT_RELU},
        {.type = "conv2d", .filters = filters, .kernel = 3, .same = 1},
        {.type = "batchnorm"},                            /* 5: the add folds into it */
        {.type = "add", .from = -5, .activation = DT_ACT_RELU}, /* 6: + act2 */
        {.type = "route", .from = -1},                    /* 7: its output is act7 itself */
        {.type = "global_avgpool"},
        {.type = "dense", .filters = 3},
    };
    memcpy(sp, b, sizeof b);
}
#define BLOCK_N 10

static float *block_grads(struct model_ctx *x, int fused, int filters, const uint8_t *labels, int n)
{
    dt_status st = {0};
    struct dt_layer_spec sp[BLOCK_N];
    block_specs(sp, filters);
    memset(x, 0, sizeof *x);
    if (!fused) setenv("DTRAIN_NO_FUSION", "1", 1);
    int rc = dt_model_build_specs(&x->m, "block", (struct dt_shape){6, 6, 2}, 3, sp, BLOCK_N, &st);
    unsetenv("DTRAIN_NO_FUSION");
    ck_assert_msg(rc == DT_OK, "%s", st.msg);
    ck_assert_int_eq(x->m.layers[5].fold_add, fused);
    ck_assert_int_eq(x->m.layers[6].folded, fused);
    dt_model_create(&x->m, be, n);
    ck_assert_msg((x->m.act[6] == x->m.act[7]) == fused && (x->m.dact[6] == x->m.dact[7]) == fused,
                  "fused %d: the batchnorm's and the add's buffers", fused);
    ck_assert_msg((x->m.act[8] == x->m.act[7]) == fused, "fused %d: the route's output buffer", fused);
    dt_model_init_params(&x->m, 90);
    dt_rng r;
    dt_rng_seed(&r, 91, 0);
    for (int i = 0; i < x->m.nlayers; i++) {
        const struct dt_layer *l = &x->m.layers[i];
        if (l->ops == &dt_batchnorm_ops) fill_uniform(x->m.params + l->param_offset, l->nparams, &r, 0.5f, 1.5f);
        else if (l->nparams) fill_uniform(x->m.params + l->param_offset + l->nparams - (size_t)l->out.c,
                                          (size_t)l->out.c, &r, -0.1f, 0.1f);
    }
    fill_uniform(x->m.act[0], 72 * (size_t)n, &r, 0.0f, 1.0f);
    x->n = n;
    x->labels = labels;
    dt_rng_seed(&x->rng, 92, 0);
    dt_model_forward(&x->m, n, 1, &x->rng);
    dt_model_loss(&x->m, labels, n, 1.0f);
    dt_model_backward(&x->m, n, &x->rng);
    float *g = malloc(sizeof(float) * x->m.nparams);
    memcpy(g, x->m.grads, sizeof(float) * x->m.nparams);
    return g;
}

START_TEST(fused_block_equals_reference)
{
    const uint8_t labels[4] = {2, 0, 1, 1};
    struct model_ctx ref, fused;
    float *gr = block_grads(&ref, 0, 16, labels, 4), *gf = block_grads(&fused, 1, 16, labels, 4);
    ck_assert(fused.m.act_bytes < ref.m.act_bytes); /* the folded add's buffers are shared */
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.m.nparams; i++) {
        ck_assert_msg(isfinite(gf[i]), "fused grad[%zu] not written", i);
        double d = (double)gf[i] - (double)gr[i];
        num += d * d;
        den += (double)gr[i] * (double)gr[i];
    }
    /* the same arithmetic up to the order of one add: rounding only */
    ck_assert_msg(sqrt(num / den) < 1e-5, "fused gradients differ from the reference's: rel L2 %.2e", sqrt(num / den));
    free(gr);
    free(gf);
    dt_model_free(&ref.m);
    dt_model_free(&fused.m);
}
END_TEST

/* ---- building ------------------------------------------------------------ */

static void build_fails(const struct dt_layer_spec *specs, int n, const char *want)
{
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "bad", (struct dt_shape){8, 8, 2}, 3, specs, n, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, want), "message '%s' lacks '%s'", st.msg, want);
    dt_model_free(&m);
}

START_TEST(build_branch_errors)
{
    const struct dt_layer_spec past[] = {{.type = "conv2d", .filters = 2, .kernel = 3}, {.type = "add", .from = -3},
                                         {.type = "global_avgpool"}, {.type = "dense", .filters = 3}};
    build_fails(past, 4, "add: from = -3: expected -1 (the previous layer) to -2 (the model's input)");
    const struct dt_layer_spec zero[] = {{.type = "route", .from = 0}, {.type = "global_avgpool"},
                                         {.type = "dense", .filters = 3}};
    build_fails(zero, 3, "route: from = 0");
    const struct dt_layer_spec shape[] = {{.type = "conv2d", .filters = 2, .kernel = 3}, {.type = "add", .from = -2},
                                          {.type = "global_avgpool"}, {.type = "dense", .filters = 3}};
    build_fails(shape, 4, "add: adds the model input's 8x8x2 output to a 6x6x2 input");
    const struct dt_layer_spec nonsq[] = {{.type = "reshape", .shape = {16, 1, 8}},
                                          {.type = "conv2d", .filters = 2, .kernel = 3, .stride = 2, .same = 1},
                                          {.type = "dense", .filters = 3}};
    build_fails(nonsq, 3, "one padding for both is supported");
}
END_TEST

START_TEST(backend_without_batchnorm)
{
    struct dt_backend lacking = dt_backend_cpu;
    lacking.name = "test";
    lacking.channel_sums = NULL;
    const struct dt_layer_spec specs[] = {{.type = "batchnorm"}, {.type = "flatten"}, {.type = "dense", .filters = 3}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "bn", (struct dt_shape){2, 2, 2}, 3, specs, 3, &st), DT_OK);
    ck_assert_int_eq(dt_model_check_backend(&m, &dt_backend_cpu, &st), DT_OK);
    ck_assert_int_eq(dt_model_check_backend(&m, &lacking, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "layer batch_normalization (batchnorm) is not implemented on the test backend"), "%s",
                  st.msg);
    ck_assert(!dt_model_is_branched(&m));
    dt_model_free(&m);
}
END_TEST

static Suite *residual_suite(void)
{
    Suite *s = suite_create("residual layers");
    TCase *tc = tcase_create("reference");
    tcase_add_test(tc, avgpool_forward_even);
    tcase_add_test(tc, avgpool_forward_overlap);
    tcase_add_test(tc, global_avgpool_forward);
    tcase_add_test(tc, batchnorm_forward_train_and_inference);
    tcase_add_test(tc, batchnorm_relu_forward);
    tcase_add_test(tc, sync_batchnorm_equals_full_batch);
    tcase_add_test(tc, flatten_reshape_copy);
    suite_add_tcase(s, tc);

    tc = tcase_create("gradients");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fd_avgpool_even);
    tcase_add_test(tc, fd_avgpool_overlap);
    tcase_add_test(tc, fd_global_avgpool);
    tcase_add_test(tc, fd_batchnorm);
    tcase_add_test(tc, fd_batchnorm_relu);
    tcase_add_test(tc, fd_batchnorm_inference);
    tcase_add_test(tc, fd_residual_model);
    tcase_add_test(tc, fused_block_equals_reference);
    tcase_add_test(tc, fd_batchnorm_folded_add);
    suite_add_tcase(s, tc);

    tc = tcase_create("build");
    tcase_add_test(tc, build_branch_errors);
    tcase_add_test(tc, backend_without_batchnorm);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(residual_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
