/* check_layers.c: unit tests for the layers, the loss and the model API on
 * the CPU backend.
 *
 * Gradients are checked against central finite differences of a scalar
 * objective (L = sum(out * R) with a fixed random R for a layer, the summed
 * softmax cross-entropy for a model). Every layer here is piecewise linear,
 * so a central difference that stays on one linear piece has no truncation
 * error at all; each probe therefore records the ReLU on/off pattern and the
 * max-pool winners of the perturbed forwards and discards probes that
 * crossed a kink, instead of hoping a small step never does. What is left is
 * float32 rounding, which the tolerance below is sized for. Every gradient
 * check also proves it can fail: the same comparison against 1.1 x the
 * analytic gradient must exceed the tolerance.
 *
 * Forward passes are checked against naive double-precision loops with the
 * classic dot-product rounding bound as tolerance. No MPI: layers never call
 * it, so MPI_Init is not needed. */
#include "config.h"

#include "ck_fast.h"
#include <cpuid.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_internal.h" /* cpu_wino_avx2_tile, cpu_wino_avx2_data_transposed, cpu_conv3x3_runs */
#include "nn/layer.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "runtime/half.h"
#include "runtime/rng.h"
#include "runtime/status.h"


#include "layer_check.h"

/* ---- naive references -------------------------------------------------- */

/* Direct NHWC/HWIO convolution in double with TF's 'same' rule (output
 * ceil(h/s), padding total max((o-1)s + k - h, 0), the smaller half on top).
 * bound[i] = sum of |terms| of out[i], for the rounding tolerance. */
static void conv_ref(double *out, double *bound, int *poh, int *pow_, const float *inp,
                     const float *w, const float *b, int n, struct dt_shape in, int K, int k, int s,
                     int same)
{
    int oh = same ? (in.h + s - 1) / s : (in.h - k) / s + 1;
    int ow = same ? (in.w + s - 1) / s : (in.w - k) / s + 1;
    int pt = same ? ((oh - 1) * s + k - in.h > 0 ? ((oh - 1) * s + k - in.h) / 2 : 0) : 0;
    int pl = same ? ((ow - 1) * s + k - in.w > 0 ? ((ow - 1) * s + k - in.w) / 2 : 0) : 0;
    *poh = oh;
    *pow_ = ow;
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int f = 0; f < K; f++) {
                    double acc = (double)b[f], abs_acc = fabs((double)b[f]);
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            int iy = oy * s + ky - pt, ix = ox * s + kx - pl;
                            if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                            for (int c = 0; c < in.c; c++) {
                                double t = (double)inp[(((size_t)bi * in.h + iy) * in.w + ix) * in.c + c] *
                                           (double)w[(((size_t)ky * k + kx) * in.c + c) * K + f];
                                acc += t;
                                abs_acc += fabs(t);
                            }
                        }
                    size_t o = (((size_t)bi * oh + oy) * ow + ox) * K + f;
                    out[o] = acc;
                    bound[o] = abs_acc;
                }
}

/* Float32 dot products of K terms are within K * 2^-24 * sum|terms| of the
 * exact value (classic bound, any summation order); K <= 27 here, so 1e-5
 * of sum|terms| covers it with >10x margin, while any indexing or padding
 * mistake moves outputs by a whole term (~0.1 of sum|terms|). */
#define REF_TOL 1e-5

static void check_conv_forward(struct dt_shape in, int K, int k, int s, int same, int relu, int n)
{
    struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = k, .stride = s,
                                 .same = same, .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    struct lh h;
    int oh, ow;
    lh_setup(&h, &dt_conv2d_ops, spec, in, n, 100 + (uint64_t)(k * 7 + s * 3 + same));
    size_t nw = (size_t)k * k * in.c * K;
    double *ref = malloc(sizeof(double) * h.nout), *bound = malloc(sizeof(double) * h.nout);
    conv_ref(ref, bound, &oh, &ow, h.inp, h.params, h.params + nw, n, in, K, k, s, same);
    ck_assert_int_eq(h.l.out.h, oh);
    ck_assert_int_eq(h.l.out.w, ow);
    ck_assert_int_eq(h.l.out.c, K);
    ck_assert_uint_eq(h.np, nw + (size_t)K);
    lh_forward(&h);
    int zeros = 0;
    for (size_t i = 0; i < h.nout; i++) {
        double want = relu ? fmax(ref[i], 0.0) : ref[i];
        zeros += h.out[i] == 0.0f;
        ck_assert_msg(fabs((double)h.out[i] - want) <= REF_TOL * bound[i],
                      "conv %dx%d s%d %s: out[%zu] = %.9g, naive %.9g", k, k, s, same ? "same" : "valid", i,
                      (double)h.out[i], want);
    }
    if (relu) ck_assert_msg(zeros > 0 && (size_t)zeros < h.nout, "relu case should clip some outputs");
    free(ref);
    free(bound);
    lh_free(&h);
}

/* ---- forward references ------------------------------------------------ */

START_TEST(conv_forward_valid)
{
    check_conv_forward((struct dt_shape){6, 7, 3}, 4, 3, 1, 0, 0, 2);
}
END_TEST

START_TEST(conv_forward_valid_relu)
{
    check_conv_forward((struct dt_shape){6, 7, 3}, 4, 3, 1, 0, 1, 2);
}
END_TEST

START_TEST(conv_forward_same_s1)
{
    check_conv_forward((struct dt_shape){7, 7, 2}, 3, 3, 1, 1, 0, 2);
}
END_TEST

START_TEST(conv_forward_same_s2_odd)
{
    check_conv_forward((struct dt_shape){7, 7, 2}, 3, 3, 2, 1, 0, 2);
}
END_TEST

/* 8 with stride 2 and kernel 3 pads one pixel in total: TF puts it on the
 * bottom/right, so this case tells top/left from bottom/right padding. */
START_TEST(conv_forward_same_s2_even)
{
    check_conv_forward((struct dt_shape){8, 8, 2}, 3, 3, 2, 1, 0, 2);
}
END_TEST

START_TEST(conv_forward_valid_s2)
{
    check_conv_forward((struct dt_shape){9, 8, 2}, 3, 3, 2, 0, 0, 2);
}
END_TEST

static void check_pool_forward(struct dt_shape in, int k, int s, int n)
{
    struct dt_layer_spec spec = {.type = "maxpool", .kernel = k, .stride = s};
    struct lh h;
    lh_setup(&h, &dt_maxpool_ops, spec, in, n, 200 + (uint64_t)(in.h * 10 + k));
    int ss = s ? s : k, oh = (in.h - k) / ss + 1, ow = (in.w - k) / ss + 1;
    ck_assert_int_eq(h.l.out.h, oh);
    ck_assert_int_eq(h.l.out.w, ow);
    ck_assert_int_eq(h.l.out.c, in.c);
    for (int train = 0; train <= 1; train++) {
        h.c.train = train;
        lh_forward(&h);
        for (int b = 0; b < n; b++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++)
                    for (int c = 0; c < in.c; c++) {
                        float m = -INFINITY;
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++)
                                m = fmaxf(m, h.inp[(((size_t)b * in.h + oy * ss + ky) * in.w + ox * ss + kx) * in.c + c]);
                        float got = h.out[(((size_t)b * oh + oy) * ow + ox) * in.c + c];
                        /* max is exact: one of the inputs, bit for bit */
                        ck_assert_msg(got == m, "pool %dx%d/%d on %dx%d: [%d,%d,%d,%d] = %g, naive %g", k, k,
                                      ss, in.h, in.w, b, oy, ox, c, (double)got, (double)m);
                    }
    }
    lh_free(&h);
}

START_TEST(maxpool_forward_even) { check_pool_forward((struct dt_shape){6, 6, 3}, 2, 0, 2); }
END_TEST

START_TEST(maxpool_forward_odd) { check_pool_forward((struct dt_shape){7, 5, 3}, 2, 0, 2); }
END_TEST

START_TEST(maxpool_forward_overlap) { check_pool_forward((struct dt_shape){7, 7, 2}, 3, 2, 2); }
END_TEST

/* The 2x2/2 path (cpu_pool.c's pool2_fwd) at the seed CNN's shapes and an
 * odd channel count, with ties (inputs on a coarse grid), -infinity and NaN:
 * the output is the naive maximum from -FLT_MAX with strict '>' (so a NaN
 * never wins and -infinity gives -FLT_MAX), and backward sends each
 * gradient to the first maximum in window order, zero elsewhere. */
static void check_pool2(struct dt_shape in, int n)
{
    struct lh h;
    lh_setup(&h, &dt_maxpool_ops, (struct dt_layer_spec){.type = "maxpool", .kernel = 2}, in, n, 77);
    for (size_t i = 0; i < h.nin; i++) h.inp[i] = (float)((int)(h.inp[i] * 3.0f)) / 3.0f; /* -2/3 .. 2/3: ties */
    h.inp[5] = NAN;
    h.inp[in.c + 6] = -INFINITY;
    for (int j = 0; j < 4; j++) h.inp[(size_t)(j / 2) * in.w * in.c + (size_t)(j % 2) * in.c + 7] = -INFINITY;
    lh_backward(&h);
    const int oh = in.h / 2, ow = in.w / 2;
    int ties = 0;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int c = 0; c < in.c; c++) {
                    float m = -FLT_MAX;
                    size_t arg = 0, at[4];
                    for (int t = 0; t < 4; t++) {
                        at[t] = (((size_t)b * in.h + 2 * oy + t / 2) * in.w + 2 * ox + t % 2) * in.c + c;
                        if (h.inp[at[t]] > m) m = h.inp[at[t]], arg = at[t];
                        else if (h.inp[at[t]] == m) ties++;
                    }
                    if (m == -FLT_MAX) arg = at[0];
                    const size_t o = (((size_t)b * oh + oy) * ow + ox) * in.c + c;
                    if (h.out[o] != m || memcmp(&h.out[o], &m, sizeof m))
                        ck_abort_msg("pool2 %dx%dx%d [%d,%d,%d,%d] = %g, naive %g", in.h, in.w, in.c, b, oy, ox, c,
                                     (double)h.out[o], (double)m);
                    for (int t = 0; t < 4; t++)
                        if (h.dinp[at[t]] != (at[t] == arg ? h.R[o] : 0.0f))
                            ck_abort_msg("pool2 %dx%dx%d [%d,%d,%d,%d] tap %d: gradient %g, want %g", in.h, in.w,
                                         in.c, b, oy, ox, c, t, (double)h.dinp[at[t]],
                                         (double)(at[t] == arg ? h.R[o] : 0.0f));
                }
    for (int b = 0; b < n; b++) /* the row and column no window covers (odd sizes): zero, not left as they were */
        for (int y = 0; y < in.h; y++)
            for (int x = 0; x < in.w; x++)
                for (int c = 0; c < in.c; c++)
                    if ((y >= 2 * oh || x >= 2 * ow) && h.dinp[(((size_t)b * in.h + y) * in.w + x) * in.c + c] != 0.0f)
                        ck_abort_msg("pool2 %dx%dx%d [%d,%d,%d,%d]: uncovered input's gradient %g, want 0", in.h,
                                     in.w, in.c, b, y, x, c, (double)h.dinp[(((size_t)b * in.h + y) * in.w + x) * in.c + c]);
    ck_assert_msg(ties > 0, "no ties: the first-maximum rule is not exercised");
    lh_free(&h);
}

START_TEST(maxpool2_seed_shapes)
{
    check_pool2((struct dt_shape){26, 26, 32}, 2); /* the seed CNN's first pool */
    check_pool2((struct dt_shape){11, 11, 64}, 2); /* its second: odd, the last row and column dropped */
    check_pool2((struct dt_shape){6, 8, 13}, 3);   /* channels not a vector multiple */
    check_pool2((struct dt_shape){7, 9, 5}, 2);    /* odd both ways, few channels */
}
END_TEST

static void check_dense_forward(int relu)
{
    struct dt_shape in = {3, 2, 4}; /* read flattened: 24 inputs */
    int units = 5, n = 3, nin = 24;
    struct dt_layer_spec spec = {.type = "dense", .filters = units,
                                 .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    struct lh h;
    lh_setup(&h, &dt_dense_ops, spec, in, n, 300 + (uint64_t)relu);
    ck_assert_int_eq(h.l.out.h, 1);
    ck_assert_int_eq(h.l.out.w, 1);
    ck_assert_int_eq(h.l.out.c, units);
    ck_assert_uint_eq(h.np, (size_t)nin * units + (size_t)units);
    lh_forward(&h);
    const float *W = h.params, *bias = h.params + nin * units;
    int zeros = 0;
    for (int b = 0; b < n; b++)
        for (int u = 0; u < units; u++) {
            double acc = (double)bias[u], bound = fabs((double)bias[u]);
            for (int i = 0; i < nin; i++) {
                double t = (double)h.inp[b * nin + i] * (double)W[i * units + u];
                acc += t;
                bound += fabs(t);
            }
            if (relu) acc = fmax(acc, 0.0);
            float got = h.out[b * units + u];
            zeros += got == 0.0f;
            ck_assert_msg(fabs((double)got - acc) <= REF_TOL * bound, "dense[%d][%d] = %.9g, naive %.9g", b,
                          u, (double)got, acc);
        }
    if (relu) ck_assert_msg(zeros > 0 && zeros < n * units, "relu case should clip some outputs");
    lh_free(&h);
}

START_TEST(dense_forward) { check_dense_forward(0); }
END_TEST

START_TEST(dense_forward_relu) { check_dense_forward(1); }
END_TEST

START_TEST(relu_forward_backward_exact)
{
    struct lh h;
    lh_setup(&h, &dt_relu_ops, (struct dt_layer_spec){.type = "relu"}, (struct dt_shape){3, 3, 2}, 2, 400);
    lh_backward(&h);
    int pos = 0;
    for (size_t i = 0; i < h.nin; i++) {
        pos += h.inp[i] > 0.0f;
        ck_assert(h.out[i] == (h.inp[i] > 0.0f ? h.inp[i] : 0.0f));
        ck_assert(h.dinp[i] == (h.inp[i] > 0.0f ? h.R[i] : 0.0f));
    }
    ck_assert(pos > 0 && (size_t)pos < h.nin);
    lh_free(&h);
}
END_TEST

/* ---- gradients: layers standalone -------------------------------------- */

static void fd_conv(struct dt_shape in, int K, int k, int s, int same, int relu, const char *what)
{
    struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = k, .stride = s,
                                 .same = same, .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    struct lh h;
    lh_setup(&h, &dt_conv2d_ops, spec, in, 2, 500 + (uint64_t)(k * 7 + s * 3 + same + relu * 11));
    lh_fd(&h, what);
    lh_free(&h);
}

START_TEST(fd_conv_valid) { fd_conv((struct dt_shape){6, 7, 3}, 4, 3, 1, 0, 0, "conv2d valid s1"); }
END_TEST

START_TEST(fd_conv_valid_relu) { fd_conv((struct dt_shape){6, 7, 3}, 4, 3, 1, 0, 1, "conv2d valid s1 relu"); }
END_TEST

START_TEST(fd_conv_same_s1) { fd_conv((struct dt_shape){7, 7, 2}, 3, 3, 1, 1, 0, "conv2d same s1 7x7"); }
END_TEST

START_TEST(fd_conv_same_s2_odd) { fd_conv((struct dt_shape){7, 7, 2}, 3, 3, 2, 1, 0, "conv2d same s2 7x7"); }
END_TEST

START_TEST(fd_conv_same_s2_even) { fd_conv((struct dt_shape){8, 8, 2}, 3, 3, 2, 1, 1, "conv2d same s2 8x8 relu"); }
END_TEST

/* A 1x1 convolution of stride 2 on few input channels, backward against an
 * exact double reference, at a batch and image large enough to matter.
 * oneDNN's jit_1x1 backward-weights kernels (2.x and 3.x, AVX2 and AVX-512)
 * copy the strided NHWC source into a workspace sized for whole channel
 * blocks ("reduce to unit stride") and write past it when the input has
 * fewer channels than a block (8 on AVX2, 16 on AVX-512; oneDNN issue
 * 6035): one thread corrupts the heap or segfaults, more hang or give wrong
 * weight gradients. cpu_conv2d.c steers these shapes to another kernel;
 * this test fails (crash or wrong dW) without that. */
static void conv1x1_s2_backward(int C, int K)
{
    const int n = 32, H = 32;
    check_conv_forward((struct dt_shape){H, H, C}, K, 1, 2, 0, 0, n);
    struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = 1, .stride = 2};
    struct lh h;
    lh_setup(&h, &dt_conv2d_ops, spec, (struct dt_shape){H, H, C}, n, 900 + (uint64_t)C);
    const int oh = h.l.out.h;
    ck_assert_int_eq(oh, H / 2);
    lh_backward(&h);
    size_t nw = (size_t)C * K;
    double *dw = calloc(nw + (size_t)K, sizeof(double)), *bw = calloc(nw + (size_t)K, sizeof(double));
    for (int b = 0; b < n; b++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < oh; x++) {
                const float *xi = h.inp + (((size_t)b * H + 2 * y) * H + 2 * x) * C;
                const float *r = h.R + (((size_t)b * oh + y) * oh + x) * K;
                for (int c = 0; c < C; c++)
                    for (int f = 0; f < K; f++) {
                        dw[(size_t)c * K + f] += (double)xi[c] * (double)r[f];
                        bw[(size_t)c * K + f] += fabs((double)xi[c] * (double)r[f]);
                    }
                for (int f = 0; f < K; f++) {
                    dw[nw + f] += (double)r[f];
                    bw[nw + f] += fabs((double)r[f]);
                }
            }
    /* n * oh * oh = 8192 terms each: float32 sums of them are within about
     * 1e-4 of sum|terms| in any order; the bug's gradients are off by whole
     * multiples of the values. */
    for (size_t i = 0; i < nw + (size_t)K; i++)
        ck_assert_msg(fabs((double)h.dparams[i] - dw[i]) <= 1e-4 * bw[i] + 1e-6,
                      "1x1 s2 conv, %d -> %d channels: d/dparams[%zu] = %.9g, reference %.9g", C, K, i,
                      (double)h.dparams[i], dw[i]);
    for (int b = 0; b < n; b++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < H; x++)
                for (int c = 0; c < C; c++) {
                    double want = 0.0, bound = 0.0;
                    if (y % 2 == 0 && x % 2 == 0) {
                        const float *r = h.R + (((size_t)b * oh + y / 2) * oh + x / 2) * K;
                        for (int f = 0; f < K; f++) {
                            want += (double)h.params[(size_t)c * K + f] * (double)r[f];
                            bound += fabs((double)h.params[(size_t)c * K + f] * (double)r[f]);
                        }
                    }
                    size_t i = (((size_t)b * H + y) * H + x) * C + c;
                    ck_assert_msg(fabs((double)h.dinp[i] - want) <= REF_TOL * bound,
                                  "1x1 s2 conv, %d -> %d channels: d/dinp[%zu] = %.9g, reference %.9g", C, K, i,
                                  (double)h.dinp[i], want);
                }
    free(dw);
    free(bw);
    lh_free(&h);
}

START_TEST(conv1x1_s2_few_channels_avx2) { conv1x1_s2_backward(4, 8); }
END_TEST

START_TEST(conv1x1_s2_few_channels_avx512) { conv1x1_s2_backward(12, 16); }
END_TEST

/* The AVX2 3x3 kernels (cpu_conv3x3_avx2.c: 3x3, stride 1, 'same', channels
 * multiples of 8) against exact double references and against oneDNN's
 * kernels, on shapes that exercise their edges: pixel tiles across rows and
 * images (batch 3 of 9x7), an 8-channel output tail (24 = 16 + 8), 8 input
 * channels, a 4x4 image smaller than a tile. DTRAIN_NO_FAST_KERNELS picks
 * the set at plan creation: "avx512" runs the AVX2 kernels on an AVX-512
 * CPU too, "1" leaves every convolution to oneDNN. */
static int avx2_conv_here(void)
{
    /* the backend's own answer: built (GCC on x86-64), AVX2 + FMA, not off */
    const struct dt_conv_shape probe = {.h = 8, .w = 8, .c = 8, .k = 8, .kh = 3, .kw = 3, .stride = 1, .pad = 1,
                                        .oh = 8, .ow = 8};
    return cpu_conv3x3_runs(&probe);
}

static void conv3x3_run(struct lh *h, struct dt_shape in, int K, int n, int relu, int same, const char *set)
{
    struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = 3, .stride = 1, .same = same,
                                 .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    if (set) setenv("DTRAIN_NO_FAST_KERNELS", set, 1);
    else unsetenv("DTRAIN_NO_FAST_KERNELS");
    lh_setup(h, &dt_conv2d_ops, spec, in, n, 4000 + (uint64_t)(in.c * 31 + K));
    unsetenv("DTRAIN_NO_FAST_KERNELS");
    lh_backward(h);
}

static void check_conv3x3_set(struct dt_shape in, int K, int n, int relu, int same)
{
    if (!avx2_conv_here()) {
        printf("# SKIP the AVX2 3x3 kernels: this CPU lacks AVX2 or FMA\n");
        return;
    }
    struct lh a, o;
    conv3x3_run(&a, in, K, n, relu, same, __builtin_cpu_supports("avx512f") ? "avx512" : NULL);
    conv3x3_run(&o, in, K, n, relu, same, "1");
    const int H = in.h, W = in.w, C = in.c, pad = same ? 1 : 0;
    /* forward against the double reference (with the ReLU) */
    double *ref = malloc(sizeof(double) * a.nout), *bound = malloc(sizeof(double) * a.nout);
    int oh, ow;
    conv_ref(ref, bound, &oh, &ow, a.inp, a.params, a.params + (size_t)9 * C * K, n, in, K, 3, 1, same);
    double worst = 0.0, vs = 0.0;
    for (size_t i = 0; i < a.nout; i++) {
        double want = relu ? fmax(ref[i], 0.0) : ref[i];
        ck_assert_msg(fabs((double)a.out[i] - want) <= REF_TOL * bound[i],
                      "conv3x3 avx2 %dx%dx%d -> %d: out[%zu] = %.9g, reference %.9g", H, W, C, K, i,
                      (double)a.out[i], want);
        worst = fmax(worst, fabs((double)a.out[i] - want) / (bound[i] + 1e-30));
        vs = fmax(vs, fabs((double)a.out[i] - (double)o.out[i]) / (bound[i] + 1e-30));
    }
    /* backward: dout = R masked by the ReLU, as the layer passes it on */
    double *dw = calloc((size_t)9 * C * K + (size_t)K, sizeof(double));
    double *bw = calloc((size_t)9 * C * K + (size_t)K, sizeof(double));
    double *dx = calloc(a.nin, sizeof(double)), *bx = calloc(a.nin, sizeof(double));
    for (int b = 0; b < n; b++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int k = 0; k < K; k++) {
                    size_t oi = (((size_t)b * oh + y) * ow + x) * K + k;
                    double g = relu && a.out[oi] <= 0.0f ? 0.0 : (double)a.R[oi];
                    dw[(size_t)9 * C * K + k] += g;
                    bw[(size_t)9 * C * K + k] += fabs(g);
                    for (int t = 0; t < 9; t++) {
                        int iy = y + t / 3 - pad, ix = x + t % 3 - pad;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        for (int c = 0; c < C; c++) {
                            size_t ii = (((size_t)b * H + iy) * W + ix) * C + c, wi = ((size_t)t * C + c) * K + k;
                            dw[wi] += (double)a.inp[ii] * g;
                            bw[wi] += fabs((double)a.inp[ii] * g);
                            dx[ii] += (double)a.params[wi] * g;
                            bx[ii] += fabs((double)a.params[wi] * g);
                        }
                    }
                }
    for (size_t i = 0; i < (size_t)9 * C * K + (size_t)K; i++) {
        ck_assert_msg(fabs((double)a.dparams[i] - dw[i]) <= REF_TOL * bw[i] + 1e-12,
                      "conv3x3 avx2 %dx%dx%d -> %d: d/dparams[%zu] = %.9g, reference %.9g", H, W, C, K, i,
                      (double)a.dparams[i], dw[i]);
        vs = fmax(vs, fabs((double)a.dparams[i] - (double)o.dparams[i]) / (bw[i] + 1e-30));
    }
    for (size_t i = 0; i < a.nin; i++) {
        ck_assert_msg(fabs((double)a.dinp[i] - dx[i]) <= REF_TOL * bx[i] + 1e-12,
                      "conv3x3 avx2 %dx%dx%d -> %d: d/dinp[%zu] = %.9g, reference %.9g", H, W, C, K, i,
                      (double)a.dinp[i], dx[i]);
        vs = fmax(vs, fabs((double)a.dinp[i] - (double)o.dinp[i]) / (bx[i] + 1e-30));
    }
    printf("# conv3x3 avx2 kernels %dx%dx%d -> %d %s, batch %d%s: forward within %.1e of sum|terms| of the "
           "reference, oneDNN's results within %.1e\n", H, W, C, K, same ? "same" : "valid", n, relu ? ", relu" : "",
           worst, vs);
    ck_assert_msg(vs <= 2 * REF_TOL, "the AVX2 kernels and oneDNN's differ by %.3e of sum|terms|", vs);
    free(ref); free(bound); free(dw); free(bw); free(dx); free(bx);
    lh_free(&a);
    lh_free(&o);
}

START_TEST(conv3x3_avx2_rows_and_images) { check_conv3x3_set((struct dt_shape){9, 7, 8}, 16, 3, 1, 1); }
END_TEST

START_TEST(conv3x3_avx2_channel_tail) { check_conv3x3_set((struct dt_shape){6, 5, 16}, 24, 2, 0, 1); }
END_TEST

START_TEST(conv3x3_avx2_small_image) { check_conv3x3_set((struct dt_shape){4, 4, 8}, 8, 5, 0, 1); }
END_TEST

/* 'valid' (no padding): the seed CNN's second convolution's kind */
START_TEST(conv3x3_avx2_valid) { check_conv3x3_set((struct dt_shape){9, 8, 16}, 24, 3, 1, 0); }
END_TEST

START_TEST(fd_conv3x3_avx2)
{
    if (!avx2_conv_here()) {
        printf("# SKIP the AVX2 3x3 kernels' finite differences: this CPU lacks AVX2 or FMA\n");
        return;
    }
    struct dt_layer_spec spec = {.type = "conv2d", .filters = 8, .kernel = 3, .stride = 1, .same = 1};
    struct lh h;
    if (__builtin_cpu_supports("avx512f")) setenv("DTRAIN_NO_FAST_KERNELS", "avx512", 1);
    lh_setup(&h, &dt_conv2d_ops, spec, (struct dt_shape){5, 6, 8}, 2, 4321);
    unsetenv("DTRAIN_NO_FAST_KERNELS");
    lh_fd(&h, "conv2d 3x3 same s1, AVX2 kernels");
    lh_free(&h);
}
END_TEST

static void fd_pool(struct dt_shape in, int k, int s, const char *what)
{
    struct lh h;
    dt_rng r;
    lh_setup(&h, &dt_maxpool_ops, (struct dt_layer_spec){.type = "maxpool", .kernel = k, .stride = s},
             in, 2, 600 + (uint64_t)in.h);
    dt_rng_seed(&r, 601, 0);
    fill_spaced(h.inp, h.nin, &r, 4.0f * FD_STEP); /* neighbours 4 steps apart: no flips */
    lh_fd(&h, what);
    lh_free(&h);
}

START_TEST(fd_maxpool_even) { fd_pool((struct dt_shape){6, 6, 3}, 2, 0, "maxpool 2x2 on 6x6"); }
END_TEST

START_TEST(fd_maxpool_odd) { fd_pool((struct dt_shape){7, 5, 3}, 2, 0, "maxpool 2x2 on 7x5"); }
END_TEST

START_TEST(fd_maxpool_overlap) { fd_pool((struct dt_shape){7, 7, 2}, 3, 2, "maxpool 3x3/2 on 7x7"); }
END_TEST

static void fd_dense(int relu, const char *what)
{
    struct lh h;
    lh_setup(&h, &dt_dense_ops,
             (struct dt_layer_spec){.type = "dense", .filters = 5, .activation = relu ? DT_ACT_RELU : DT_ACT_NONE},
             (struct dt_shape){3, 2, 4}, 3, 700 + (uint64_t)relu);
    lh_fd(&h, what);
    lh_free(&h);
}

START_TEST(fd_dense_plain) { fd_dense(0, "dense"); }
END_TEST

START_TEST(fd_dense_relu) { fd_dense(1, "dense relu"); }
END_TEST

START_TEST(fd_relu)
{
    struct lh h;
    lh_setup(&h, &dt_relu_ops, (struct dt_layer_spec){.type = "relu"}, (struct dt_shape){4, 3, 2}, 2, 800);
    /* keep inputs >= 0.05 away from the kink */
    for (size_t i = 0; i < h.nin; i++) h.inp[i] = h.inp[i] < 0.0f ? h.inp[i] - 0.05f : h.inp[i] + 0.05f;
    lh_fd(&h, "relu");
    lh_free(&h);
}
END_TEST

START_TEST(fd_dropout)
{
    struct lh h;
    lh_setup(&h, &dt_dropout_ops, (struct dt_layer_spec){.type = "dropout", .rate = 0.3f},
             (struct dt_shape){4, 4, 3}, 2, 900);
    h.reseed = 1; /* the same mask in every forward */
    lh_fd(&h, "dropout 0.3");
    /* and exactly: dinp = R * mask, mask in {0, 1/(1-rate)} */
    lh_backward(&h);
    for (size_t i = 0; i < h.nin; i++) {
        float want = h.out[i] == 0.0f ? 0.0f : h.R[i] * (h.out[i] / h.inp[i]);
        ck_assert_msg(fabsf(h.dinp[i] - want) <= 1e-6f * fabsf(want), "dropout dinp[%zu]", i);
    }
    lh_free(&h);
}
END_TEST

/* ---- loss -------------------------------------------------------------- */

struct xent_ctx {
    float *logits;
    const uint8_t *labels;
    int n, classes;
};

static double xent_objective(void *ctx, uint64_t *sig)
{
    struct xent_ctx *x = ctx;
    *sig = 0;
    return dt_softmax_xent(be, NULL, x->logits, x->labels, x->n, x->classes, 0.0f).loss_sum;
}

/* The loss is smooth, so here the central difference has a truncation
 * error, h^2/6 * |f'''| <= 1e-4/6 * O(1) ~ 2e-5 for h = 1e-2 (softmax
 * derivatives are bounded by small constants): well inside FD_TOL. */
START_TEST(fd_softmax_xent)
{
    enum { N = 4, C = 5 };
    float logits[N * C], dl[N * C], an[N * C];
    const uint8_t labels[N] = {0, 3, 4, 3};
    dt_rng r;
    dt_rng_seed(&r, 1000, 0);
    fill_uniform(logits, N * C, &r, -2.0f, 2.0f);
    struct xent_ctx x = {logits, labels, N, C};
    /* grad_scale 1: d(sum loss)/d(logits), as the objective */
    dt_softmax_xent(be, dl, logits, labels, N, C, 1.0f);
    memcpy(an, dl, sizeof an);
    fd_assert("softmax xent d/dlogits", fd_compare(xent_objective, &x, logits, an, NULL, N * C, FD_STEP), N * C);
    /* grad_scale scales the gradient and nothing else */
    float half[N * C];
    dt_softmax_xent(be, half, logits, labels, N, C, 0.25f);
    for (int i = 0; i < N * C; i++) ck_assert_msg(fabsf(half[i] - 0.25f * an[i]) <= 1e-7f, "grad_scale at %d", i);
}
END_TEST

START_TEST(softmax_xent_hand)
{
    /* Sample 0: logits [0, ln 2, 0], label 1: softmax = [1/4, 1/2, 1/4], so
     * loss = -ln(1/2) = ln 4 - ln 2 = ln 2 and dlogits = [1/4, -1/2, 1/4].
     * Sample 1: the same logits, label 0: loss = ln 4, dlogits = [-3/4, 1/2, 1/4].
     * Sample 2: [1000, 0, -1000], label 2: loss = 2000 (exp would overflow
     * without the max shift), dlogits = [1, 0, -1] to float precision. */
    const float ln2 = (float)M_LN2;
    const float logits[9] = {0.0f, ln2, 0.0f, 0.0f, ln2, 0.0f, 1000.0f, 0.0f, -1000.0f};
    const uint8_t labels[3] = {1, 0, 2};
    float d[9];
    struct dt_loss_result r = dt_softmax_xent(be, d, logits, labels, 3, 3, 1.0f);
    /* The float logit ln2 is off by <= 2^-25 relative, and the loss moves by
     * at most that much per unit logit: 1e-7 absolute covers it. */
    double want = M_LN2 + 2.0 * M_LN2 + 2000.0;
    ck_assert_msg(fabs(r.loss_sum - want) <= 1e-7 * 3.0 + 1e-12 * 2000.0, "loss %.12g, want %.12g",
                  r.loss_sum, want);
    ck_assert_int_eq(r.correct, 1); /* only sample 0's argmax (1) is its label */
    const double wd[9] = {0.25, -0.5, 0.25, -0.75, 0.5, 0.25, 1.0, 0.0, -1.0};
    for (int i = 0; i < 9; i++)
        ck_assert_msg(fabs((double)d[i] - wd[i]) <= 1e-7, "dlogits[%d] = %.9g, want %g", i, (double)d[i], wd[i]);
    /* per sample too, so a swapped label/sum cannot pass by cancellation */
    r = dt_softmax_xent(be, NULL, logits, labels, 1, 3, 0.0f);
    ck_assert_msg(fabs(r.loss_sum - M_LN2) <= 1e-7, "sample 0 loss %.12g", r.loss_sum);
    r = dt_softmax_xent(be, NULL, logits + 3, labels + 1, 1, 3, 0.0f);
    ck_assert_msg(fabs(r.loss_sum - 2.0 * M_LN2) <= 1e-7, "sample 1 loss %.12g", r.loss_sum);
}
END_TEST

/* ---- the model API: a small CNN ---------------------------------------- */

static const struct dt_layer_spec small_cnn[] = {
    {.type = "conv2d", .filters = 4, .kernel = 3, .activation = DT_ACT_RELU},
    {.type = "maxpool", .kernel = 2},
    {.type = "conv2d", .filters = 6, .kernel = 3, .activation = DT_ACT_RELU},
    {.type = "maxpool", .kernel = 2},
    {.type = "dense", .filters = 8, .activation = DT_ACT_RELU},
    {.type = "dense", .filters = 4},
};
#define SMALL_CNN_N ((int)(sizeof small_cnn / sizeof *small_cnn))
static const struct dt_shape small_in = {12, 12, 1}; /* 10 -> 5 -> 3 -> 1 (odd edges dropped): 1x1x6 into dense */

static void model_setup(struct model_ctx *x, const uint8_t *labels, int n, uint64_t seed)
{
    dt_status st = {0};
    dt_rng r;
    memset(x, 0, sizeof *x);
    ck_assert_msg(dt_model_build_specs(&x->m, "small", small_in, 4, small_cnn, SMALL_CNN_N, &st) == DT_OK,
                  "%s", st.msg);
    /* The layers apart: the finite differences read every layer's output
     * (layer_signature), which a conv folded with its pool never writes;
     * the fold itself is held to this path bit for bit (check_fold). */
    setenv("DTRAIN_NO_FUSION", "1", 1);
    dt_model_create(&x->m, be, n);
    unsetenv("DTRAIN_NO_FUSION");
    dt_model_init_params(&x->m, seed);
    /* Non-zero biases, so the ReLUs see a mix of signs from the start. */
    dt_rng_seed(&r, seed, 9);
    for (int i = 0; i < x->m.nlayers; i++) {
        const struct dt_layer *l = &x->m.layers[i];
        if (!l->nparams) continue;
        float *b = x->m.params + l->param_offset + l->nparams - (size_t)l->out.c;
        fill_uniform(b, (size_t)l->out.c, &r, -0.1f, 0.1f);
    }
    fill_uniform(x->m.act[0], dt_shape_size(small_in) * (size_t)n, &r, 0.0f, 1.0f);
    x->n = n;
    x->labels = labels;
    dt_rng_seed(&x->rng, seed, 10);
}

START_TEST(fd_cnn_model)
{
    const uint8_t labels[3] = {2, 0, 3};
    struct model_ctx x;
    model_setup(&x, labels, 3, 1100);
    /* The pool after each ReLU-activated conv takes over its ReLU backward. */
    ck_assert(x.m.layers[0].relu_bwd_by_next && x.m.layers[1].relu_bwd_of_prev);
    ck_assert(x.m.layers[2].relu_bwd_by_next && x.m.layers[3].relu_bwd_of_prev);
    ck_assert(!x.m.layers[4].relu_bwd_by_next);

    dt_model_forward(&x.m, 3, 1, &x.rng);
    dt_model_loss(&x.m, labels, 3, 1.0f);
    for (size_t i = 0; i < x.m.nparams; i++) x.m.grads[i] = NAN; /* must all be overwritten */
    dt_model_backward(&x.m, 3, &x.rng);
    float *an = malloc(sizeof(float) * x.m.nparams);
    memcpy(an, x.m.grads, sizeof(float) * x.m.nparams);
    for (size_t i = 0; i < x.m.nparams; i++) ck_assert_msg(isfinite(an[i]), "grad[%zu] not written", i);

    /* Per layer: up to 40 kernel entries at random and every bias. The loss
     * is smooth between kinks; with h = 1e-2 its truncation error is
     * h^2/6 |f'''| ~ 1e-5, well inside FD_TOL. */
    dt_rng r;
    dt_rng_seed(&r, 1101, 0);
    for (int li = 0; li < x.m.nlayers; li++) {
        const struct dt_layer *l = &x.m.layers[li];
        if (!l->nparams) continue;
        size_t nb = (size_t)l->out.c, nk = l->nparams - nb, idx[64], nidx = 0;
        for (size_t j = 0; j < 40 && j < nk; j++) idx[nidx++] = l->param_offset + (size_t)dt_rng_below(&r, nk);
        for (size_t j = 0; j < nb && nidx < 64; j++) idx[nidx++] = l->param_offset + nk + j;
        char label[64];
        snprintf(label, sizeof label, "cnn %s d/dparams", l->name);
        fd_assert(label, fd_compare(model_objective, &x, x.m.params, an, idx, nidx, FD_STEP), nidx);
    }
    free(an);
    dt_model_free(&x.m);
}
END_TEST

/* The fused ReLU backward in the pool gives the same gradient, bit for bit,
 * as pooling backward first and undoing the ReLU on the large side after. */
static void check_fusion(struct dt_shape in)
{
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = 3, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "dense", .filters = 4},
    };
    const uint8_t labels[3] = {1, 3, 0};
    int n = 3;
    struct dt_model m;
    dt_status st = {0};
    dt_rng r;
    ck_assert_msg(dt_model_build_specs(&m, "fuse", in, 4, specs, 3, &st) == DT_OK, "%s", st.msg);
    ck_assert(m.layers[0].relu_bwd_by_next && m.layers[1].relu_bwd_of_prev);
    dt_model_create(&m, be, n);
    dt_model_init_params(&m, 1200);
    dt_rng_seed(&r, 1201, 0);
    fill_uniform(m.act[0], dt_shape_size(in) * (size_t)n, &r, -1.0f, 1.0f);
    dt_model_forward(&m, n, 1, &r);
    dt_model_loss(&m, labels, n, 1.0f);
    dt_model_backward(&m, n, &r);

    /* Unfused: a pool that does not know about the ReLU, then relu_backward. */
    struct dt_layer pool = {.ops = &dt_maxpool_ops, .in = m.layers[1].in, .spec = specs[1]};
    snprintf(pool.name, sizeof pool.name, "pool");
    struct dt_ctx c = {.be = be, .n = n, .train = 1, .rng = &r, .act_size = dt_act_size(be->act_type())};
    size_t nconv = dt_shape_size(m.layers[0].out) * (size_t)n, npool = dt_shape_size(m.layers[1].out) * (size_t)n;
    float *pout = malloc(sizeof(float) * npool), *dpout = malloc(sizeof(float) * npool);
    float *dconv = malloc(sizeof(float) * nconv);
    ck_assert_int_eq(pool.ops->setup(&pool, &specs[1], &st), DT_OK);
    pool.ops->create(&pool, be, n);
    pool.ops->forward(&pool, &c, pout, m.act[1], NULL);
    ck_assert(memcmp(pout, m.act[2], sizeof(float) * npool) == 0);
    memcpy(dpout, m.dact[2], sizeof(float) * npool);
    pool.ops->backward(&pool, &c, dconv, dpout, m.act[1], pout, NULL, NULL);
    be->relu_backward(dconv, dconv, m.act[1], nconv);

    size_t zero_windows = 0, nonzero = 0;
    for (size_t i = 0; i < npool; i++) zero_windows += ((const float *)m.act[2])[i] == 0.0f;
    for (size_t i = 0; i < nconv; i++) nonzero += dconv[i] != 0.0f;
    /* Meaningful only if some windows are all-zero after the ReLU (the case
     * the fusion must get right) and some gradient flows. */
    ck_assert_msg(zero_windows > 0 && nonzero > 0, "degenerate case: %zu dead windows, %zu nonzero",
                  zero_windows, nonzero);
    ck_assert_msg(memcmp(dconv, m.dact[1], sizeof(float) * nconv) == 0, "fused != unfused on %dx%d",
                  in.h, in.w);
    pool.ops->destroy(&pool, be);
    free(pout);
    free(dpout);
    free(dconv);
    dt_model_free(&m);
}

START_TEST(pool_relu_fusion_even) { check_fusion((struct dt_shape){10, 10, 2}); }
END_TEST

START_TEST(pool_relu_fusion_odd) { check_fusion((struct dt_shape){9, 11, 2}); }
END_TEST

/* A first conv2d on one input channel with its ReLU and a 2x2/2 max pool
 * after it runs as one pass where the backend can (layer.h's fold_pool):
 * the same outputs and parameter gradients, bit for bit, as the two layers
 * apart (DTRAIN_NO_FUSION=1). Even and odd sizes (an odd last row and
 * column are dropped by the pool), the kernel's 32-filter case and its
 * general one. */
struct fold_run {
    struct dt_model m;
    size_t bytes_out, bytes_pool;
};

static void run_fold(struct fold_run *f, struct dt_shape in, int filters, int n, int fold)
{
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = filters, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "dense", .filters = 4},
    };
    const uint8_t labels[4] = {1, 3, 0, 2};
    dt_status st = {0};
    dt_rng r;
    setenv("DTRAIN_NO_FUSION", fold ? "0" : "1", 1);
    ck_assert_msg(dt_model_build_specs(&f->m, "fold", in, 4, specs, 3, &st) == DT_OK, "%s", st.msg);
    dt_model_create(&f->m, be, n);
    unsetenv("DTRAIN_NO_FUSION");
    /* DTRAIN_NO_DIRECT_CONV (tests/layers_onednn.sh) leaves the conv to
     * oneDNN, which has no pooling pass: then nothing is folded */
    const int want = fold && !getenv("DTRAIN_NO_DIRECT_CONV");
    ck_assert_msg(f->m.layers[0].fold_pool == want && f->m.layers[1].folded == want, "fold %d, want %d", fold, want);
    dt_model_init_params(&f->m, 1300);
    dt_rng_seed(&r, 1301, 0);
    const struct dt_layer *c = &f->m.layers[0];
    fill_uniform(f->m.params + c->param_offset + c->nparams - (size_t)c->out.c, (size_t)c->out.c, &r, -0.3f, 0.1f);
    uint8_t *pix = malloc(dt_shape_size(in) * (size_t)n);
    for (size_t i = 0; i < dt_shape_size(in) * (size_t)n; i++) pix[i] = (uint8_t)dt_rng_below(&r, 256);
    dt_model_load_input(&f->m, f->m.act[0], pix, dt_shape_size(in) * (size_t)n);
    free(pix);
    dt_model_forward(&f->m, n, 1, &r);
    dt_model_loss(&f->m, labels, n, 1.0f);
    dt_model_backward(&f->m, n, &r);
    const size_t as = dt_act_size(be->act_type());
    f->bytes_out = dt_shape_size(f->m.layers[2].out) * (size_t)n * as;
    f->bytes_pool = dt_shape_size(f->m.layers[1].out) * (size_t)n * as;
}

static void check_fold(struct dt_shape in, int filters)
{
    const int n = 4;
    if (!be->conv_pool_fits) {
        printf("# SKIP conv-pool fold: this backend has none\n");
        return;
    }
    struct fold_run a, b;
    run_fold(&a, in, filters, n, 1);
    run_fold(&b, in, filters, n, 0);
    size_t dead = 0, moved = 0;
    const size_t npool = b.bytes_pool / dt_act_size(be->act_type());
    for (size_t i = 0; i < npool; i++) /* pooled outputs the ReLU zeroed: their windows pass no gradient */
        dead += be->act_type() == DT_PREC_FP32 ? ((const float *)b.m.act[2])[i] == 0.0f
                                               : ((const uint16_t *)b.m.act[2])[i] == 0;
    for (size_t i = 0; i < b.m.layers[0].nparams; i++) moved += b.m.grads[i] != 0.0f;
    ck_assert_msg(dead > 0 && dead < npool && moved > 0, "degenerate: %zu of %zu pooled outputs dead, %zu grads",
                  dead, npool, moved);
    ck_assert_msg(memcmp(a.m.act[2], b.m.act[2], a.bytes_pool) == 0, "pool output: folded != apart (%dx%d, %d)", in.h,
                  in.w, filters);
    ck_assert_msg(memcmp(a.m.act[3], b.m.act[3], a.bytes_out) == 0, "logits: folded != apart");
    ck_assert_msg(memcmp(a.m.grads, b.m.grads, sizeof(float) * a.m.nparams) == 0,
                  "parameter gradients: folded != apart (%dx%d, %d filters)", in.h, in.w, filters);
    const struct dt_conv_shape cs = {.h = in.h, .w = in.w, .c = 1, .k = filters, .kh = 3, .kw = 3, .stride = 1,
                                     .oh = in.h - 2, .ow = in.w - 2};
    printf("# conv-pool fold %dx%d, %d filters (%s, %s): equal bit for bit; %zu of %zu pooled outputs dead\n", in.h,
           in.w, filters, be->act_type() == DT_PREC_FP32 ? "fp32" : "bf16",
           cpu_conv_direct_pool_fast(&cs) ? "AVX-512 passes" : "generic loops", dead, npool);
    dt_model_free(&a.m);
    dt_model_free(&b.m);
}

START_TEST(conv_pool_fold_seed) { check_fold((struct dt_shape){28, 28, 1}, 32); }
END_TEST

START_TEST(conv_pool_fold_odd)
{
    check_fold((struct dt_shape){11, 13, 1}, 7);
    check_fold((struct dt_shape){13, 15, 1}, 48); /* the AVX-512 kernels: a pass of 32 channels, then one of 16 */
}
END_TEST

/* ---- initialisation ---------------------------------------------------- */

START_TEST(glorot_dense)
{
    const struct dt_layer_spec spec = {.type = "dense", .filters = 50};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "g", (struct dt_shape){1, 1, 100}, 50, &spec, 1, &st), DT_OK);
    dt_model_create(&m, be, 1);
    dt_model_init_params(&m, 1300);
    const size_t nw = 100 * 50;
    ck_assert_uint_eq(m.nparams, nw + 50);
    const double limit = sqrt(6.0 / 150.0);
    double sum = 0.0, sum2 = 0.0, maxabs = 0.0;
    for (size_t i = 0; i < nw; i++) {
        double w = (double)m.params[i];
        ck_assert_msg(fabs(w) <= limit, "w[%zu] = %g outside +-%g", i, w, limit);
        sum += w;
        sum2 += w * w;
        maxabs = fmax(maxabs, fabs(w));
    }
    for (size_t i = nw; i < m.nparams; i++) ck_assert_msg(m.params[i] == 0.0f, "bias %zu not zero", i - nw);
    /* U(-a, a): mean 0, sd a/sqrt(3); var a^2/3, sd of w^2 is a^2 sqrt(4/45).
     * Over 5000 draws the sample mean's sd is a/sqrt(3*5000) and the sample
     * variance's a^2 sqrt(4/45/5000); allow 5 sigma. The variance test also
     * catches a wrong fan (limit sqrt(6/100) would give +50%). */
    double mean = sum / (double)nw, var = sum2 / (double)nw - mean * mean;
    ck_assert_msg(fabs(mean) < 5.0 * limit / sqrt(3.0 * (double)nw), "mean %g", mean);
    ck_assert_msg(fabs(var - limit * limit / 3.0) < 5.0 * limit * limit * sqrt(4.0 / 45.0 / (double)nw),
                  "variance %g, want %g", var, limit * limit / 3.0);
    /* P(no |w| > 0.99 a) = 0.99^5000 ~ 1e-22: the range is used in full */
    ck_assert_msg(maxabs > 0.99 * limit, "max |w| %g", maxabs);
    dt_model_free(&m);
}
END_TEST

START_TEST(glorot_conv)
{
    /* HWIO 3x3x4x8: fan_in = 3*3*4, fan_out = 3*3*8 (Keras's receptive-field fans) */
    const struct dt_layer_spec specs[] = {{.type = "conv2d", .filters = 8, .kernel = 3},
                                          {.type = "dense", .filters = 2}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "g", (struct dt_shape){5, 5, 4}, 2, specs, 2, &st), DT_OK);
    dt_model_create(&m, be, 1);
    dt_model_init_params(&m, 1301);
    const size_t nw = 3 * 3 * 4 * 8;
    const double limit = sqrt(6.0 / (36.0 + 72.0));
    double maxabs = 0.0;
    for (size_t i = 0; i < nw; i++) maxabs = fmax(maxabs, fabs((double)m.params[i]));
    for (size_t i = nw; i < nw + 8; i++) ck_assert(m.params[i] == 0.0f);
    /* P(no |w| > 0.95 a) = 0.95^288 ~ 4e-7 */
    ck_assert_msg(maxabs <= limit && maxabs > 0.95 * limit, "max |w| %g, limit %g", maxabs, limit);
    dt_model_free(&m);
}
END_TEST

/* ---- dropout statistics ------------------------------------------------ */

START_TEST(dropout_stats)
{
    const float rate = 0.3f;
    struct lh h;
    lh_setup(&h, &dt_dropout_ops, (struct dt_layer_spec){.type = "dropout", .rate = rate},
             (struct dt_shape){10, 10, 10}, 10, 1400);
    for (size_t i = 0; i < h.nin; i++) h.inp[i] = 1.0f + h.inp[i] * 0.5f; /* in [0.5, 1.5): never 0 */
    dt_rng draws = h.rng;
    lh_forward(&h);
    const double n = (double)h.nin, scale = 1.0 / (1.0 - (double)rate);
    size_t zeros = 0;
    /* element i dropped where the stream's i-th uniform draw is below the
     * rate, and the stream advanced by exactly one draw an element (the
     * kernel draws them in bulk: the same numbers as one call each) */
    for (size_t i = 0; i < h.nin; i++)
        ck_assert_msg((h.out[i] == 0.0f) == (dt_rng_uniform(&draws) < rate), "out[%zu]: not the stream's draw", i);
    ck_assert_msg(memcmp(&draws, &h.rng, sizeof draws) == 0, "the dropout stream advanced by other than n draws");
    for (size_t i = 0; i < h.nin; i++) {
        if (h.out[i] == 0.0f) { zeros++; continue; }
        /* kept: x * (1/(1-rate)), up to two float roundings */
        double want = (double)h.inp[i] * scale;
        ck_assert_msg(fabs((double)h.out[i] - want) <= 2.4e-7 * want, "kept out[%zu] = %.9g, want %.9g", i,
                      (double)h.out[i], want);
    }
    /* Binomial(10000, 0.3): sd = sqrt(n p (1-p)) ~ 46; 5 sigma */
    double sd = sqrt(n * (double)rate * (1.0 - (double)rate));
    ck_assert_msg(fabs((double)zeros - n * (double)rate) < 5.0 * sd, "%zu of %.0f zeroed", zeros, n);
    /* a second forward draws a different mask from the advancing stream */
    float *first = malloc(sizeof(float) * h.nin);
    memcpy(first, h.out, sizeof(float) * h.nin);
    lh_forward(&h);
    ck_assert(memcmp(first, h.out, sizeof(float) * h.nin) != 0);
    free(first);
    lh_free(&h);
}
END_TEST

START_TEST(dropout_inference_identity)
{
    struct lh h;
    lh_setup(&h, &dt_dropout_ops, (struct dt_layer_spec){.type = "dropout", .rate = 0.3f},
             (struct dt_shape){4, 4, 3}, 2, 1500);
    h.c.train = 0;
    dt_rng before = h.rng;
    lh_forward(&h);
    ck_assert(memcmp(h.out, h.inp, sizeof(float) * h.nin) == 0);
    ck_assert(memcmp(&before, &h.rng, sizeof before) == 0); /* draws nothing */
    lh_free(&h);
}
END_TEST

/* ---- building errors --------------------------------------------------- */

START_TEST(build_unknown_type)
{
    const struct dt_layer_spec specs[] = {{.type = "dense", .filters = 4}, {.type = "conv3d", .filters = 2}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){4, 4, 1}, 4, specs, 2, &st), DT_EUSAGE);
    ck_assert_int_eq(st.code, DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "mymodel") && strstr(st.msg, "conv3d"), "message: %s", st.msg);
    free(m.layers); /* the dense layer has no state; see build_failure_then_free */
}
END_TEST

START_TEST(build_class_mismatch)
{
    const struct dt_layer_spec specs[] = {{.type = "dense", .filters = 5}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){4, 4, 1}, 4, specs, 1, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "mymodel") && strstr(st.msg, "5") && strstr(st.msg, "4"), "message: %s", st.msg);
    dt_model_free(&m);
}
END_TEST

START_TEST(build_kernel_too_big)
{
    const struct dt_layer_spec conv[] = {{.type = "conv2d", .filters = 2, .kernel = 5}, {.type = "dense", .filters = 2}};
    const struct dt_layer_spec pool[] = {{.type = "maxpool", .kernel = 3}, {.type = "dense", .filters = 2}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){4, 6, 1}, 2, conv, 2, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "conv2d") && strstr(st.msg, "5x5") && strstr(st.msg, "4x6"), "message: %s", st.msg);
    free(m.layers[0].state);
    free(m.layers);
    st = (dt_status){0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){2, 2, 1}, 2, pool, 2, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "max") && strstr(st.msg, "2x2"), "message: %s", st.msg);
    free(m.layers);
    /* 'same' padding fits any kernel: not an error */
    const struct dt_layer_spec same[] = {{.type = "conv2d", .filters = 2, .kernel = 5, .same = 1},
                                         {.type = "dense", .filters = 2}};
    st = (dt_status){0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){4, 4, 1}, 2, same, 2, &st), DT_OK);
    ck_assert_int_eq(m.layers[0].out.h, 4);
    dt_model_free(&m);
}
END_TEST

/* dt_trainer_free() calls dt_model_free() after a failed build (main.c's
 * error path), so a half-built model must be freeable. */
START_TEST(build_failure_then_free)
{
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = 2, .kernel = 3},
        {.type = "conv2d", .filters = 2, .kernel = 3}, /* 2x2 input: does not fit */
        {.type = "dense", .filters = 2},
    };
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mymodel", (struct dt_shape){4, 4, 1}, 2, specs, 3, &st), DT_EUSAGE);
    dt_model_free(&m);
    ck_assert_ptr_null(m.layers);
}
END_TEST

/* ---- an empty batch ---------------------------------------------------- */

START_TEST(batch_of_zero)
{
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = 4, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "conv2d", .filters = 6, .kernel = 3, .same = 1, .stride = 2},
        {.type = "relu"},
        {.type = "dense", .filters = 8, .activation = DT_ACT_RELU},
        {.type = "dropout", .rate = 0.5f},
        {.type = "dense", .filters = 4},
    };
    const uint8_t labels[3] = {0, 1, 2};
    struct dt_model m;
    dt_status st = {0};
    dt_rng r;
    ck_assert_int_eq(dt_model_build_specs(&m, "empty", (struct dt_shape){10, 10, 1}, 4, specs, 7, &st), DT_OK);
    dt_model_create(&m, be, 3);
    dt_model_init_params(&m, 1600);
    dt_rng_seed(&r, 1601, 0);
    fill_uniform(m.act[0], 300, &r, 0.0f, 1.0f);
    /* a full batch first, so stale non-zero gradients are in place */
    dt_model_forward(&m, 3, 1, &r);
    dt_model_loss(&m, labels, 3, 1.0f);
    dt_model_backward(&m, 3, &r);
    size_t nonzero = 0;
    for (size_t i = 0; i < m.nparams; i++) nonzero += m.grads[i] != 0.0f;
    ck_assert(nonzero > 0);

    dt_model_forward(&m, 0, 1, &r);
    struct dt_loss_result lr = dt_model_loss(&m, labels, 0, 1.0f);
    ck_assert(lr.loss_sum == 0.0 && lr.correct == 0);
    dt_model_backward(&m, 0, &r);
    for (size_t i = 0; i < m.nparams; i++)
        ck_assert_msg(m.grads[i] == 0.0f, "grad[%zu] = %g after an empty batch", i, (double)m.grads[i]);
    dt_model_forward(&m, 0, 0, &r); /* evaluation too */
    dt_model_free(&m);
}
END_TEST

/* ---- bf16 arithmetic --------------------------------------------------- */

/* --precision bf16 rounds the inputs of convolutions and matrix products to
 * bf16 (8 significant bits) and accumulates in float32, so its results are
 * compared with the float32 path's, not with exact references. Each operand
 * is rounded by at most 2^-9 relative, each product by at most ~2^-8; over
 * K products of mixed signs the errors add up to about sqrt(K) 2^-9 typical
 * terms while the sum itself is about sqrt(K) typical terms, so an output
 * is off by ~2e-3 of the outputs' magnitude (the tests print what they
 * measure). BF16_TOL, norm-wise like FD_TOL, leaves 5x margin; an indexing
 * or layout mistake moves outputs by whole terms and fails it.
 * BF16_MIN_DIFF is the other side: float32 kernels that only sum in another
 * order agree to ~1e-6, so a difference below 1e-4 means the inputs were not
 * rounded, i.e. the op silently ran in float32. */
#define BF16_TOL 1e-2
#define BF16_MIN_DIFF 1e-4

/* Switches the backend to bf16; where the CPU has no bf16 instructions it
 * says so on stdout (the test log) and the caller passes without checking. */
static int use_bf16(const char *test)
{
    char why[256];
    if (be->setup(1, DT_PREC_BF16, why, sizeof why) == 0) return 1;
    printf("# SKIP %s: no bf16 here: %s\n", test, why);
    return 0;
}

/* Teardown of the bf16 cases: the rest of the file expects float32, also in
 * no-fork mode and after a failed assertion. */
static void back_to_fp32(void)
{
    char why[256];
    ck_assert_msg(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "fp32 refused: %s", why);
}

/* max |got - ref| / max |ref| */
static double rel_diff(const float *got, const float *ref, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - (double)ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    ck_assert_msg(m > 0.0, "reference is all zeros: the comparison would be vacuous");
    return d / m;
}

enum { BF_OUT, BF_DINP, BF_DWEIGHT, BF_DBIAS, BF_NCONV };
static const char *const bf_conv_what[BF_NCONV] = {"out", "dinp", "dweight", "dbias"};

/* rel[] of a conv layer's results (K filters) against a reference run's:
 * out, dinp, dweight, dbias. */
static void conv_rel_diffs(const struct lh *got, const struct lh *ref, int K, double rel[BF_NCONV])
{
    size_t nw = got->np - (size_t)K;
    rel[BF_OUT] = rel_diff(got->out, ref->out, got->nout);
    rel[BF_DINP] = rel_diff(got->dinp, ref->dinp, got->nin);
    rel[BF_DWEIGHT] = rel_diff(got->dparams, ref->dparams, nw);
    rel[BF_DBIAS] = rel_diff(got->dparams + nw, ref->dparams + nw, (size_t)K);
}

/* A conv layer run forward and backward twice on the same inputs and
 * parameters, with a float32 plan and with a bf16 plan; rel[] gets the
 * bf16 run's rel_diff from the float32 one per result. 0 without bf16. */
static int bf16_conv_case(struct dt_shape in, int K, int s, int same, int relu, double rel[BF_NCONV])
{
    struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = 3, .stride = s, .same = same,
                                 .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    const uint64_t seed = 1700 + (uint64_t)(in.c * 3 + s + relu);
    struct lh f, b;
    lh_setup(&f, &dt_conv2d_ops, spec, in, 4, seed); /* plans take the precision at creation */
    lh_backward(&f);
    if (!use_bf16("bf16 conv")) {
        lh_free(&f);
        return 0;
    }
    lh_setup(&b, &dt_conv2d_ops, spec, in, 4, seed);
    lh_backward(&b);
    conv_rel_diffs(&b, &f, K, rel);
    if (relu) {
        size_t zeros = 0;
        for (size_t i = 0; i < b.nout; i++) {
            ck_assert_msg(b.out[i] >= 0.0f, "bf16 conv relu: out[%zu] = %g", i, (double)b.out[i]);
            zeros += b.out[i] == 0.0f;
        }
        ck_assert_msg(zeros > 0 && zeros < b.nout, "relu case should clip some outputs");
    }
    if (relu) /* see bf_convs: backward is compared without the ReLU */
        printf("# bf16 conv %dx%dx%d -> %d s%d %s relu: rel diff out %.2e\n", in.h, in.w, in.c, K, s,
               same ? "same" : "valid", rel[BF_OUT]);
    else
        printf("# bf16 conv %dx%dx%d -> %d s%d %s: rel diff out %.2e dinp %.2e dweight %.2e dbias %.2e\n",
               in.h, in.w, in.c, K, s, same ? "same" : "valid", rel[BF_OUT], rel[BF_DINP], rel[BF_DWEIGHT],
               rel[BF_DBIAS]);
    lh_free(&f);
    lh_free(&b);
    return 1;
}

/* The seed CNN's second conv (channels that fill vectors), and a small odd
 * one with 'same' padding and stride 2 (channels that do not). The ReLU is
 * off for backward: with it, an output near zero may switch sides between
 * the runs and let a whole different gradient through. */
static const struct bf_conv_shape {
    struct dt_shape in;
    int K, s, same;
} bf_convs[] = {{{13, 13, 32}, 64, 1, 0}, {{7, 7, 3}, 5, 2, 1}};

/* ---- bf16 backward-weights: cpu_wgrad_bf16.c -------------------------- */

/* The shapes its tiles and edges take: the seed CNN's 13x13x32 -> 64 'valid'
 * (4 blocks of outputs per tile; odd width, so images pair, and an odd
 * count: the last one's partner zero), stride 2 with 'same' on even sizes
 * (bottom/right padding only) into 32 outputs (2 blocks), and on odd ones
 * (a row and column of padding on each side), one image; an odd 9x7 at
 * stride 1 into 16 (1 block), 48 outputs (3 blocks: 1 per tile), 48x48
 * images large enough for one image per chunk and 47x47 ones for one pair
 * of images per chunk; one image of odd width (no partner at all). */
static const struct wg_case {
    struct dt_shape in;
    int K, s, same, n;
} wg_cases[] = {{{13, 13, 32}, 64, 1, 0, 3}, {{8, 8, 16}, 32, 2, 1, 5}, {{9, 7, 16}, 16, 1, 1, 2},
                {{6, 5, 32}, 48, 2, 1, 3}, {{48, 48, 16}, 16, 1, 1, 3}, {{7, 7, 16}, 32, 2, 1, 1},
                {{11, 9, 32}, 16, 2, 1, 4}, {{47, 47, 16}, 16, 1, 1, 3}, {{5, 9, 16}, 32, 1, 0, 1}};

static struct dt_conv_shape wg_shape(const struct wg_case *c)
{
    struct dt_conv_shape s = {.h = c->in.h, .w = c->in.w, .c = c->in.c, .k = c->K, .kh = 3, .kw = 3,
                              .stride = c->s};
    s.oh = c->same ? (s.h + s.stride - 1) / s.stride : (s.h - 3) / s.stride + 1;
    s.ow = c->same ? (s.w + s.stride - 1) / s.stride : (s.w - 3) / s.stride + 1;
    s.pad = c->same ? ((s.oh - 1) * s.stride + 3 - s.h) / 2 : 0; /* Keras: the odd one to the bottom/right */
    return s;
}

/* Random bf16 operands of a case, and the exact (double) backward-weights of
 * them with, per weight, the sum of its terms' magnitudes (the scale of a
 * float32 sum's rounding). */
struct wg_run {
    struct dt_conv_shape s;
    int n;
    size_t nx, ny, nw;
    uint16_t *x, *dy;
    double *ref, *mag, refb[4096], magb[4096];
};

static void wg_prepare(struct wg_run *r, const struct wg_case *c, uint64_t seed)
{
    dt_rng g;
    r->s = wg_shape(c);
    r->n = c->n;
    const struct dt_conv_shape *s = &r->s;
    r->nx = (size_t)c->n * s->h * s->w * s->c;
    r->ny = (size_t)c->n * s->oh * s->ow * s->k;
    r->nw = (size_t)9 * s->c * s->k;
    r->x = malloc(2 * r->nx);
    r->dy = malloc(2 * r->ny);
    r->ref = calloc(r->nw, sizeof(double));
    r->mag = calloc(r->nw, sizeof(double));
    dt_rng_seed(&g, seed, 0);
    for (size_t i = 0; i < r->nx; i++) r->x[i] = dt_f32_to_bf16(2.0f * dt_rng_uniform(&g) - 1.0f);
    for (size_t i = 0; i < r->ny; i++) r->dy[i] = dt_f32_to_bf16(2.0f * dt_rng_uniform(&g) - 1.0f);
    memset(r->refb, 0, sizeof r->refb);
    memset(r->magb, 0, sizeof r->magb);
    for (int i = 0; i < c->n; i++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const uint16_t *d = r->dy + (((size_t)i * s->oh + oy) * s->ow + ox) * s->k;
                for (int k = 0; k < s->k; k++) {
                    r->refb[k] += (double)dt_bf16_to_f32(d[k]);
                    r->magb[k] += fabs((double)dt_bf16_to_f32(d[k]));
                }
                for (int t = 0; t < 9; t++) {
                    const int iy = oy * s->stride + t / 3 - s->pad, ix = ox * s->stride + t % 3 - s->pad;
                    if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                    const uint16_t *xv = r->x + (((size_t)i * s->h + iy) * s->w + ix) * s->c;
                    for (int ci = 0; ci < s->c; ci++)
                        for (int k = 0; k < s->k; k++) {
                            const double v = (double)dt_bf16_to_f32(xv[ci]) * (double)dt_bf16_to_f32(d[k]);
                            r->ref[((size_t)t * s->c + ci) * s->k + k] += v;
                            r->mag[((size_t)t * s->c + ci) * s->k + k] += fabs(v);
                        }
                }
            }
}

static void wg_free(struct wg_run *r)
{
    free(r->x);
    free(r->dy);
    free(r->ref);
    free(r->mag);
}

/* got against the exact sums: each weight within 1e-5 of its terms'
 * magnitude (float32 sums of a few thousand terms are off by ~1e-6 of it;
 * a wrong tap, channel or pixel moves whole terms); returns the worst. */
static double wg_check(const struct wg_run *r, const float *dw, const float *db, const char *what)
{
    double worst = 0.0;
    for (size_t j = 0; j < r->nw; j++) {
        const double e = fabs((double)dw[j] - r->ref[j]) / (r->mag[j] > 0.0 ? r->mag[j] : 1.0);
        ck_assert_msg(e < 1e-5, "%s: dweight[%zu] = %.9g, exact %.9g (terms' magnitude %.3g)", what, j, (double)dw[j],
                      r->ref[j], r->mag[j]);
        worst = fmax(worst, e);
    }
    for (int k = 0; k < r->s.k; k++)
        ck_assert_msg(fabs((double)db[k] - r->refb[k]) < 1e-5 * r->magb[k], "%s: dbias[%d] = %.9g, exact %.9g", what,
                      k, (double)db[k], r->refb[k]);
    return worst;
}

static int wgrad_bf16_here(void)
{
    const struct dt_conv_shape probe = {.h = 8, .w = 8, .c = 16, .k = 16, .kh = 3, .kw = 3, .stride = 1, .pad = 1,
                                        .oh = 8, .ow = 8};
    if (cpu_wgrad_bf16_fits(&probe)) return 1;
    printf("# SKIP dtrain's bf16 backward-weights: this CPU lacks AVX512-BF16 or has AMX (oneDNN's kernels run)\n");
    return 0;
}

/* The kernel itself at 1, 2 and 3 threads: each against the exact sums,
 * and bit for bit the same on a second call; its scratch filled with a
 * pattern first (nothing may be read before written), and once called from
 * inside a parallel region, where its team has one thread whatever it asks
 * for. */
START_TEST(wgrad_bf16_exact)
{
    if (!wgrad_bf16_here()) return;
    for (size_t i = 0; i < sizeof wg_cases / sizeof *wg_cases; i++) {
        struct wg_run r;
        wg_prepare(&r, &wg_cases[i], 2100 + i);
        for (int nt = 1; nt <= 3; nt++) {
            float *dw = malloc(sizeof(float) * r.nw), *dw2 = malloc(sizeof(float) * r.nw);
            float db[4096], db2[4096];
            const size_t bytes = cpu_wgrad_bf16_scratch(&r.s, r.n, nt);
            void *scratch = malloc(bytes);
            memset(scratch, 0x41, bytes); /* 0x4141...: about 12 as bf16 or float */
            cpu_wgrad_bf16(&r.s, r.n, dw, db, r.dy, r.x, scratch, nt);
            char what[96];
            snprintf(what, sizeof what, "bf16 wgrad %dx%dx%d -> %d s%d, %d threads", r.s.h, r.s.w, r.s.c, r.s.k,
                     r.s.stride, nt);
            const double worst = wg_check(&r, dw, db, what);
            cpu_wgrad_bf16(&r.s, r.n, dw2, db2, r.dy, r.x, scratch, nt);
            ck_assert_msg(!memcmp(dw, dw2, sizeof(float) * r.nw) && !memcmp(db, db2, sizeof(float) * r.s.k),
                          "%s: a second call differs", what);
            printf("# %s: worst error %.2e of the terms' magnitude\n", what, worst);
            memset(scratch, 0x41, bytes);
#pragma omp parallel num_threads(2)
#pragma omp single
            cpu_wgrad_bf16(&r.s, r.n, dw2, db2, r.dy, r.x, scratch, nt);
            snprintf(what, sizeof what, "bf16 wgrad %dx%dx%d -> %d s%d, asked for %d threads in a parallel region",
                     r.s.h, r.s.w, r.s.c, r.s.k, r.s.stride, nt);
            wg_check(&r, dw2, db2, what);
            free(dw);
            free(dw2);
            free(scratch);
        }
        wg_free(&r);
    }
}
END_TEST

/* Through a bf16 plan on bf16 activations (as --precision bf16 runs): the
 * plan takes the kernel (its weight gradients differ from oneDNN's, with
 * DTRAIN_NO_FAST_KERNELS=1, in the last bits), both within the exact sums'
 * bound, and backward-data is oneDNN's in both, bit for bit. */
START_TEST(wgrad_bf16_plan)
{
    if (!use_bf16("wgrad_bf16_plan") || !wgrad_bf16_here()) return;
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16);
    for (size_t i = 0; i < sizeof wg_cases / sizeof *wg_cases; i++) {
        struct wg_run r;
        wg_prepare(&r, &wg_cases[i], 2200 + i);
        float *w = malloc(sizeof(float) * r.nw), *dw[2], db[2][4096];
        uint16_t *dx[2];
        dt_rng g;
        dt_rng_seed(&g, 2300 + i, 0);
        fill_uniform(w, r.nw, &g, -0.5f, 0.5f);
        for (int own = 1; own >= 0; own--) {
            if (!own) setenv("DTRAIN_NO_FAST_KERNELS", "1", 1);
            dt_conv_plan *p = be->conv_create(&r.s, 0);
            unsetenv("DTRAIN_NO_FAST_KERNELS");
            dw[own] = malloc(sizeof(float) * r.nw);
            dx[own] = malloc(2 * r.nx);
            be->conv_backward(p, r.n, dx[own], dw[own], db[own], r.dy, r.x, w);
            be->conv_destroy(p);
            wg_check(&r, dw[own], db[own], own ? "plan, dtrain's kernel" : "plan, oneDNN's kernel");
        }
        ck_assert_msg(memcmp(dw[0], dw[1], sizeof(float) * r.nw) != 0,
                      "case %zu: weight gradients bit for bit oneDNN's: the plan did not take dtrain's kernel", i);
        ck_assert_msg(!memcmp(dx[0], dx[1], 2 * r.nx), "case %zu: backward-data changed", i);
        for (int k = 0; k < 2; k++) free(dw[k]), free(dx[k]);
        free(w);
        wg_free(&r);
    }
}
END_TEST

/* ---- --winograd: oneDNN's Winograd kernels ------------------------------ */

/* Switches Winograd on for the plans created next; where oneDNN has none
 * here it says so on stdout (the test log) and the caller passes unchecked. */
static int use_winograd(const char *test)
{
    char why[256];
    if (be->set_winograd(1, why, sizeof why) == 0) return 1;
    printf("# SKIP %s: %s\n", test, why);
    return 0;
}

/* Whether this is an AMD family 0x19 CPU with AVX-512 (Zen 4), read from
 * CPUID here as the backend should read it. */
static int zen4_here(void)
{
    unsigned a, b, c, d;
    if (!__builtin_cpu_is("amd") || !__builtin_cpu_supports("avx512f") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return ((a >> 8) & 0xf) == 0xf && ((a >> 20) & 0xff) == 0x19 - 0xf;
}

/* Whether --winograd runs dtrain's own kernels here by default (an AVX2
 * CPU without AVX-512, or Zen 4) rather than oneDNN's. */
static int own_winograd_here(void)
{
    return avx2_conv_here() && (!__builtin_cpu_supports("avx512f") || zen4_here());
}

static void no_winograd(void)
{
    char why[256];
    ck_assert(be->set_winograd(0, why, sizeof why) == 0);
}

#define WINO_TOL 1e-4

/* A 3x3 conv2d layer on inputs and parameters that depend only on the shape
 * (and ReLU): a direct and a Winograd plan see the same ones. */
static void conv_case_setup(struct lh *h, struct dt_shape in, int K, int relu, int same)
{
    const struct dt_layer_spec spec = {.type = "conv2d", .filters = K, .kernel = 3, .stride = 1, .same = same,
                                       .activation = relu ? DT_ACT_RELU : DT_ACT_NONE};
    lh_setup(h, &dt_conv2d_ops, spec, in, 4, 1900 + (uint64_t)(in.c + K + relu));
}

/* The direct layer winograd_vs_direct compares with (the caller frees it). */
static void direct_case(struct lh *d, struct dt_shape in, int K, int relu, int same)
{
    conv_case_setup(d, in, K, relu, same);
    lh_backward(d);
}

/* A layer with a Winograd plan on direct_case's inputs and parameters,
 * forward and backward; rel[] gets its rel_diff from the direct layer d per
 * result. 0 without Winograd. */
static int winograd_vs_direct(const struct lh *d, struct dt_shape in, int K, int relu, int same, const char *tag,
                              double rel[BF_NCONV])
{
    struct lh w;
    if (!use_winograd("winograd conv")) return 0;
    conv_case_setup(&w, in, K, relu, same); /* plans take the choice at creation */
    no_winograd();
    lh_backward(&w);
    conv_rel_diffs(&w, d, K, rel);
    printf("# winograd%s conv %dx%dx%d -> %d%s%s: rel diff from direct out %.2e dinp %.2e dweight %.2e dbias %.2e\n",
           tag, in.h, in.w, in.c, K, same ? "" : " valid", relu ? " relu" : "", rel[BF_OUT], rel[BF_DINP],
           rel[BF_DWEIGHT], rel[BF_DBIAS]);
    lh_free(&w);
    return 1;
}

/* Both: a direct and a Winograd layer on the same inputs and parameters. */
static int winograd_case(struct dt_shape in, int K, int relu, int same, const char *tag, double rel[BF_NCONV])
{
    struct lh d;
    direct_case(&d, in, K, relu, same);
    const int ran = winograd_vs_direct(&d, in, K, relu, same, tag, rel);
    lh_free(&d);
    return ran;
}

/* ResNet-20's 32- and 64-channel shapes (and on dtrain's own kernels its
 * 16-channel one), the seed CNN's second
 * convolution ('valid', 13x13 -> 11x11: odd, so Winograd's tiles end partly
 * outside) and a 6x6 one: Winograd's results within 1e-4 of direct's, and
 * not bitwise equal to them (else the direct kernels ran). dtrain's own
 * kernels run with each output tile forced (DTRAIN_WINO_TILE=2: F(2x2, 3x3),
 * 4: F(4x4, 3x3)) and with their own choice, which must give the very bits
 * of the tile it should have chosen (F(4x4) but at 6x6, where F(4x4)'s tiles
 * would stick out most) and not those of the other. The ReLU is off for
 * backward (see bf_convs). */
START_TEST(winograd_conv_vs_direct)
{
    static const struct { struct dt_shape in; int K, same, tile; } shapes[] = {
        {{16, 16, 32}, 32, 1, 4}, {{8, 8, 64}, 64, 1, 4}, {{13, 13, 32}, 64, 0, 4}, {{6, 6, 32}, 32, 1, 2},
        {{32, 32, 16}, 16, 1, 4}};
    static const char *const tiles[3] = {"2", "4", NULL}, *const tags[3] = {" F(2x2)", " F(4x4)", " own choice"};
    /* On an AVX-512 CPU: oneDNN's F(4x4,3x3) (DTRAIN_WINOGRAD_KERNELS=
     * onednn), dtrain's against its direct AVX2 kernels (DTRAIN_NO_FAST_
     * KERNELS=avx512), and dtrain's against oneDNN's direct kernels
     * (DTRAIN_WINOGRAD_KERNELS=dtrain, as Zen 4 runs it); on an AVX2 CPU
     * dtrain's against its direct kernels only. The 'valid', 6x6 and
     * 16-channel cases on dtrain's only: oneDNN's may leave such shapes to
     * its direct kernels. */
    const int avx512 = __builtin_cpu_supports("avx512f");
    static const char *const modes[3] = {"oneDNN's", "dtrain's F(2x2,3x3) and F(4x4,3x3), direct AVX2 reference",
                                         "dtrain's F(2x2,3x3) and F(4x4,3x3), oneDNN's direct reference"};
    for (int mode = avx512 ? 0 : 1; mode <= (avx512 ? 2 : 1); mode++) {
        const int own = mode > 0;
        if (own && !avx2_conv_here()) break;
        if (mode != 1) setenv("DTRAIN_WINOGRAD_KERNELS", own ? "dtrain" : "onednn", 1);
        if (mode == 1 && avx512) setenv("DTRAIN_NO_FAST_KERNELS", "avx512", 1);
        printf("# winograd kernels: %s\n", modes[mode]);
        for (size_t i = 0; i < (own ? 5u : 2u); i++)
            for (int relu = 0; relu <= 1; relu++) {
                double rel[3][BF_NCONV];
                struct lh d; /* one direct reference for every tile */
                direct_case(&d, shapes[i].in, shapes[i].K, relu, shapes[i].same);
                for (int t = 0; t < (own ? 3 : 1); t++) {
                    if (own && tiles[t]) setenv("DTRAIN_WINO_TILE", tiles[t], 1);
                    const int ran = winograd_vs_direct(&d, shapes[i].in, shapes[i].K, relu, shapes[i].same,
                                                       own ? tags[t] : "", rel[t]);
                    unsetenv("DTRAIN_WINO_TILE");
                    if (!ran) {
                        lh_free(&d);
                        unsetenv("DTRAIN_NO_FAST_KERNELS");
                        unsetenv("DTRAIN_WINOGRAD_KERNELS");
                        return;
                    }
                    ck_assert_msg(rel[t][BF_OUT] > 0.0, "winograd conv %zu%s: out bitwise equal to direct: not Winograd",
                                  i, tags[t]);
                    ck_assert_msg(!own || relu || rel[t][BF_DWEIGHT] > 0.0,
                                  "winograd conv %zu%s: dweight bitwise equal to direct: not Winograd", i, tags[t]);
                    for (int r = 0; r < (relu ? 1 : BF_NCONV); r++)
                        ck_assert_msg(rel[t][r] < WINO_TOL, "winograd conv %zu%s relu %d: %s off by %.3e of its magnitude",
                                      i, tags[t], relu, bf_conv_what[r], rel[t][r]);
                }
                lh_free(&d);
                if (!own) continue;
                const int want = shapes[i].tile == 4, other = !want;
                ck_assert_msg(rel[2][BF_OUT] == rel[want][BF_OUT] && rel[2][BF_OUT] != rel[other][BF_OUT],
                              "winograd conv %zu: own choice's out (rel %.3e) is not F(%dx%d)'s (%.3e; the other's %.3e)",
                              i, rel[2][BF_OUT], shapes[i].tile, shapes[i].tile, rel[want][BF_OUT], rel[other][BF_OUT]);
                ck_assert_msg(relu || rel[2][BF_DINP] == rel[want][BF_DINP],
                              "winograd conv %zu: own choice's dinp (rel %.3e) is not F(%dx%d)'s (%.3e)", i,
                              rel[2][BF_DINP], shapes[i].tile, shapes[i].tile, rel[want][BF_DINP]);
            }
        unsetenv("DTRAIN_NO_FAST_KERNELS");
        unsetenv("DTRAIN_WINOGRAD_KERNELS");
    }
}
END_TEST

/* dtrain's own Winograd kernels' choices (pure functions of the shape):
 * F(4x4) unless F(2x2) needs no more than 5/4 of its multiplies (outputs 1,
 * 2, 5, 6, 9, 10 wide), and backward-data on the forward pass's F(4x4)
 * tiles where they need fewer multiplies than its own (the seed CNN's
 * 'valid' 13x13 -> 11x11: 9 tiles an image against 16), not on a 'same'
 * convolution (the same tiles either way). */
START_TEST(winograd_tile_choice)
{
    static const int two[] = {1, 2, 5, 6, 9, 10}, four[] = {3, 4, 7, 8, 11, 12, 13, 14, 16, 32};
    unsetenv("DTRAIN_WINO_TILE");
    for (size_t i = 0; i < sizeof two / sizeof *two; i++)
        ck_assert_msg(cpu_wino_avx2_tile(two[i], two[i]) == 2, "%dx%d output: F(%d), expected F(2x2)", two[i],
                      two[i], cpu_wino_avx2_tile(two[i], two[i]));
    for (size_t i = 0; i < sizeof four / sizeof *four; i++)
        ck_assert_msg(cpu_wino_avx2_tile(four[i], four[i]) == 4, "%dx%d output: F(%d), expected F(4x4)", four[i],
                      four[i], cpu_wino_avx2_tile(four[i], four[i]));
    const struct dt_conv_shape seed = {.h = 13, .w = 13, .c = 32, .k = 64, .kh = 3, .kw = 3, .stride = 1, .pad = 0,
                                       .oh = 11, .ow = 11};
    const struct dt_conv_shape same = {.h = 16, .w = 16, .c = 32, .k = 32, .kh = 3, .kw = 3, .stride = 1, .pad = 1,
                                       .oh = 16, .ow = 16};
    ck_assert_msg(cpu_wino_avx2_data_transposed(&seed, 4, 4), "13x13 -> 11x11: backward-data not transposed");
    ck_assert_msg(!cpu_wino_avx2_data_transposed(&seed, 2, 2), "13x13 -> 11x11 on F(2x2): transposed");
    ck_assert_msg(!cpu_wino_avx2_data_transposed(&same, 4, 4), "16x16 'same': backward-data transposed");
    setenv("DTRAIN_WINO_TILE", "2", 1);
    ck_assert_int_eq(cpu_wino_avx2_tile(16, 16), 2);
    setenv("DTRAIN_WINO_TILE", "4", 1);
    ck_assert_int_eq(cpu_wino_avx2_tile(6, 6), 4);
    setenv("DTRAIN_WINO_TILE", "3", 1);
    ck_assert_int_eq(cpu_wino_avx2_forced_tile(), -1);
    unsetenv("DTRAIN_WINO_TILE");
    ck_assert_int_eq(cpu_wino_avx2_forced_tile(), 0);
}
END_TEST

/* Whose Winograd kernels --winograd takes: dtrain's own exactly where
 * own_winograd_here says (cpu_winograd 2), oneDNN's under
 * DTRAIN_NO_FAST_KERNELS=1 (which refuses DTRAIN_WINOGRAD_KERNELS=dtrain),
 * and DTRAIN_WINOGRAD_KERNELS other than dtrain or onednn refused by name. */
START_TEST(winograd_kernel_choice)
{
    char why[256];
    setenv("DTRAIN_WINOGRAD_KERNELS", "mkl", 1);
    ck_assert_int_eq(be->set_winograd(1, why, sizeof why), -1);
    ck_assert_str_eq(why, "DTRAIN_WINOGRAD_KERNELS: expected dtrain or onednn, found 'mkl'");
    /* DTRAIN_NO_FAST_KERNELS=1 turns dtrain's own kernels off: asked for,
     * they are refused; by default oneDNN's run where they can */
    setenv("DTRAIN_NO_FAST_KERNELS", "1", 1);
    setenv("DTRAIN_WINOGRAD_KERNELS", "dtrain", 1);
    ck_assert_int_eq(be->set_winograd(1, why, sizeof why), -1);
    ck_assert_str_eq(why, "DTRAIN_WINOGRAD_KERNELS=dtrain: dtrain's Winograd kernels need AVX2 and FMA, and "
                          "DTRAIN_NO_FAST_KERNELS unset, 0 or avx512 (found '1')");
    unsetenv("DTRAIN_WINOGRAD_KERNELS");
    if (be->set_winograd(1, why, sizeof why) == 0) {
        ck_assert_int_eq(cpu_winograd, 1);
        no_winograd();
    } else {
        printf("# SKIP winograd with DTRAIN_NO_FAST_KERNELS=1: %s\n", why);
    }
    unsetenv("DTRAIN_NO_FAST_KERNELS");
    if (!use_winograd("winograd kernel choice")) return;
    printf("# winograd kernels by default: %s\n", cpu_winograd == 2 ? "dtrain's" : "oneDNN's");
    ck_assert_msg((cpu_winograd == 2) == own_winograd_here(), "--winograd took %s kernels; expected %s",
                  cpu_winograd == 2 ? "dtrain's" : "oneDNN's", own_winograd_here() ? "dtrain's" : "oneDNN's");
    no_winograd();
}
END_TEST

/* A shape dtrain's Winograd kernels do not take (36 channels: not a
 * multiple of 8) goes to oneDNN's wherever oneDNN has them (an AVX-512
 * CPU), whether dtrain's run beside them (DTRAIN_WINOGRAD_KERNELS=dtrain,
 * as on Zen 4 by default) or not (DTRAIN_NO_FAST_KERNELS=1): within 1e-4
 * of direct, not bitwise; elsewhere it stays direct, bitwise. */
START_TEST(winograd_other_shape)
{
    char why[256];
    double rel[BF_NCONV];
    setenv("DTRAIN_WINOGRAD_KERNELS", "onednn", 1);
    const int onednn = be->set_winograd(1, why, sizeof why) == 0;
    no_winograd();
    const int both = onednn; /* oneDNN's take the shape, beside dtrain's where those run */
    if (onednn && avx2_conv_here()) setenv("DTRAIN_WINOGRAD_KERNELS", "dtrain", 1);
    else unsetenv("DTRAIN_WINOGRAD_KERNELS");
    const int ran = winograd_case((struct dt_shape){8, 8, 36}, 36, 0, 1, "", rel);
    unsetenv("DTRAIN_WINOGRAD_KERNELS");
    if (!ran) return;
    printf("# 36 channels under --winograd: %s\n",
           !both ? "direct" : avx2_conv_here() ? "oneDNN's beside dtrain's" : "oneDNN's");
    for (int r = 0; r < BF_NCONV; r++)
        ck_assert_msg(both ? rel[r] < WINO_TOL && (r == BF_DBIAS || rel[r] > 0.0) : rel[r] == 0.0,
                      "36-channel conv under --winograd (%s): %s off direct by %.3e", both ? "oneDNN's" : "direct",
                      bf_conv_what[r], rel[r]);
}
END_TEST

/* Fewer channels than Winograd pays for keep the direct kernels, bitwise
 * their results: 16 on oneDNN's (an AVX-512 CPU), 8 on dtrain's own. */
START_TEST(winograd_not_below_threshold)
{
    double rel[BF_NCONV];
    const int c = own_winograd_here() ? 8 : 16;
    if (!winograd_case((struct dt_shape){8, 8, c}, c, 0, 1, "", rel)) return;
    for (int r = 0; r < BF_NCONV; r++)
        ck_assert_msg(rel[r] == 0.0, "%d-channel conv under --winograd: %s differs from direct by %.3e", c,
                      bf_conv_what[r], rel[r]);
}
END_TEST

/* Winograd's gradients against finite differences: every 5th input, every
 * bias, and every 37th weight (all 1,600 inputs and 9,216 weights would take
 * seconds a probe run, minutes under Valgrind, where this runs since dtrain's
 * own Winograd kernels run on its AVX2 CPU; 5 and 37 are prime to the 32
 * channels and filters, so each channel, filter and tap is probed). Where
 * dtrain's own kernels run, once with each output tile: on the 5x5 image
 * F(2x2)'s last tiles and three quarters of F(4x4)'s stick out. */
static void fd_winograd_tile(const char *tile)
{
    if (tile) setenv("DTRAIN_WINO_TILE", tile, 1);
    if (!use_winograd("fd winograd conv")) {
        unsetenv("DTRAIN_WINO_TILE");
        return;
    }
    struct dt_layer_spec spec = {.type = "conv2d", .filters = 32, .kernel = 3, .stride = 1, .same = 1};
    struct lh h;
    lh_setup(&h, &dt_conv2d_ops, spec, (struct dt_shape){5, 5, 32}, 2, 2100);
    no_winograd();
    unsetenv("DTRAIN_WINO_TILE");
    lh_backward(&h);
    float *an_in = malloc(sizeof(float) * h.nin), *an_p = malloc(sizeof(float) * h.np);
    memcpy(an_in, h.dinp, sizeof(float) * h.nin);
    memcpy(an_p, h.dparams, sizeof(float) * h.np);
    size_t nw = h.np - 32, *idx = malloc(sizeof(size_t) * (h.np > h.nin ? h.np : h.nin)), n = 0;
    char what[64];
    for (size_t i = 0; i < h.nin; i += 5) idx[n++] = i;
    snprintf(what, sizeof what, "conv2d winograd%s%s d/dinp", tile ? " tile " : "", tile ? tile : "");
    fd_assert(what, fd_compare(lh_objective, &h, h.inp, an_in, idx, n, FD_STEP), n);
    n = 0;
    for (size_t i = 0; i < h.np; i++)
        if (i >= nw || i % 37 == 0) idx[n++] = i;
    snprintf(what, sizeof what, "conv2d winograd%s%s d/dparams", tile ? " tile " : "", tile ? tile : "");
    fd_assert(what, fd_compare(lh_objective, &h, h.params, an_p, idx, n, FD_STEP), n);
    free(idx);
    free(an_in);
    free(an_p);
    lh_free(&h);
}

START_TEST(fd_conv_winograd)
{
    if (own_winograd_here()) {
        fd_winograd_tile("2");
        fd_winograd_tile("4");
    } else {
        fd_winograd_tile(NULL);
    }
}
END_TEST

START_TEST(bf16_conv_forward)
{
    for (size_t i = 0; i < sizeof bf_convs / sizeof *bf_convs; i++)
        for (int relu = 0; relu <= 1; relu++) {
            const struct bf_conv_shape *c = &bf_convs[i];
            double rel[BF_NCONV];
            if (!bf16_conv_case(c->in, c->K, c->s, c->same, relu, rel)) return;
            ck_assert_msg(rel[BF_OUT] < BF16_TOL, "bf16 conv %zu relu %d: out off by %.3e of its magnitude",
                          i, relu, rel[BF_OUT]);
            back_to_fp32();
        }
}
END_TEST

START_TEST(bf16_conv_backward)
{
    for (size_t i = 0; i < sizeof bf_convs / sizeof *bf_convs; i++) {
        const struct bf_conv_shape *c = &bf_convs[i];
        double rel[BF_NCONV];
        if (!bf16_conv_case(c->in, c->K, c->s, c->same, 0, rel)) return;
        for (int r = BF_DINP; r < BF_NCONV; r++)
            ck_assert_msg(rel[r] < BF16_TOL, "bf16 conv %zu: %s off by %.3e of its magnitude", i,
                          bf_conv_what[r], rel[r]);
        back_to_fp32();
    }
}
END_TEST

/* be->gemm in float32 and in bf16 on the same operands: the seed CNN's
 * Dense(128) products at batch 64 (forward, dW = x^T dy, dx = dy W^T), and
 * a small case with alpha, beta and leading dimensions wider than the
 * matrices. Returns rel_diff, or -1 without bf16. */
static double bf16_gemm_case(int ta, int tb, int m, int n, int k, float alpha, float beta, int pad)
{
    int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb);
    float *c0 = malloc(sizeof(float) * nc), *cf = malloc(sizeof(float) * nc), *cb = malloc(sizeof(float) * nc);
    dt_rng r;
    dt_rng_seed(&r, 1800 + (uint64_t)(m + n + k), 0);
    fill_uniform(a, na, &r, -1.0f, 1.0f);
    fill_uniform(b, nb, &r, -1.0f, 1.0f);
    fill_uniform(c0, nc, &r, -1.0f, 1.0f);
    memcpy(cf, c0, sizeof(float) * nc);
    memcpy(cb, c0, sizeof(float) * nc);
    be->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cf, ldc);
    double rel = -1.0;
    if (use_bf16("bf16 gemm")) {
        be->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cb, ldc);
        /* the padding between rows is not C's: it must be left alone */
        for (int i = 0; i < m; i++)
            for (int j = n; j < ldc; j++)
                ck_assert_msg(cb[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j], "bf16 gemm wrote C's padding");
        rel = rel_diff(cb, cf, nc);
        printf("# bf16 gemm %c%c %dx%dx%d alpha %g beta %g pad %d: rel diff %.2e\n", ta ? 'T' : 'N',
               tb ? 'T' : 'N', m, n, k, (double)alpha, (double)beta, pad, rel);
        back_to_fp32();
    }
    free(a); free(b); free(c0); free(cf); free(cb);
    return rel;
}

static const struct bf_gemm_shape {
    int ta, tb, m, n, k;
} bf_gemms[] = {{0, 0, 64, 128, 1600}, {1, 0, 1600, 128, 64}, {0, 1, 64, 1600, 128}};

START_TEST(conv_pool_fold_bf16)
{
    if (!use_bf16("conv_pool_fold_bf16")) return;
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16); /* bf16 activations, as --precision bf16 */
    check_fold((struct dt_shape){28, 28, 1}, 32);
    check_fold((struct dt_shape){12, 14, 1}, 5);
    check_fold((struct dt_shape){28, 28, 1}, 64); /* the AVX512-BF16 kernel's other constant case */
    check_fold((struct dt_shape){13, 15, 1}, 16); /* and its general one, odd sizes */
}
END_TEST

START_TEST(bf16_gemm)
{
    for (size_t i = 0; i < sizeof bf_gemms / sizeof *bf_gemms; i++) {
        const struct bf_gemm_shape *g = &bf_gemms[i];
        double rel = bf16_gemm_case(g->ta, g->tb, g->m, g->n, g->k, 1.0f, 0.0f, 0);
        if (rel < 0.0) return;
        ck_assert_msg(rel < BF16_TOL, "bf16 gemm %zu off by %.3e of its magnitude", i, rel);
    }
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++) {
            double rel = bf16_gemm_case(ta, tb, 5, 7, 33, 0.5f, 2.0f, 3);
            if (rel < 0.0) return;
            ck_assert_msg(rel < BF16_TOL, "bf16 gemm %d%d with alpha/beta off by %.3e", ta, tb, rel);
        }
}
END_TEST

/* Rounding to bf16 is to nearest, ties to even: a 1x1x1 product with b = 1
 * returns bf16(a) exactly (the product of two bf16 values is exact in
 * float32). Near 1 the bf16 spacing is 2^-7. */
START_TEST(bf16_rounding)
{
    const float u = 0x1p-7f;
    const struct { float in, want; } cases[] = {
        {1.0f + u / 2, 1.0f},                      /* tie, 1.0 is even: down */
        {1.0f + 3 * u / 2, 1.0f + 2 * u},          /* tie, 1 + u is odd: up */
        {1.0f + u / 2 + 0x1p-20f, 1.0f + u},       /* just past the tie: up */
        {1.0f + u / 2 - 0x1p-20f, 1.0f},           /* just short of it: down */
        {-(1.0f + 3 * u / 2), -(1.0f + 2 * u)},    /* symmetric in sign */
        {0x1.fffffep127f, INFINITY},               /* FLT_MAX rounds up past bf16's largest */
        {3.0f, 3.0f},                              /* representable: unchanged */
    };
    if (!use_bf16("bf16 rounding")) return;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float a = cases[i].in, b = 1.0f, c = NAN;
        be->gemm(0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
        ck_assert_msg(c == cases[i].want, "bf16(%a) = %a, want %a", (double)a, (double)c,
                      (double)cases[i].want);
    }
    float a = NAN, b = 1.0f, c = 0.0f;
    be->gemm(0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    ck_assert_msg(isnan(c), "bf16(NaN) = %g", (double)c);
}
END_TEST

/* The tolerance tests above would pass if bf16 mode quietly ran float32
 * (difference 0). Here every op must differ from float32 by rounding. */
START_TEST(bf16_not_fp32)
{
    for (size_t i = 0; i < sizeof bf_convs / sizeof *bf_convs; i++) {
        const struct bf_conv_shape *c = &bf_convs[i];
        double rel[BF_NCONV];
        if (!bf16_conv_case(c->in, c->K, c->s, c->same, 0, rel)) return;
        for (int r = 0; r < BF_NCONV; r++)
            ck_assert_msg(rel[r] > BF16_MIN_DIFF, "bf16 conv %zu: %s differs from float32 by only %.3e: "
                          "not computed in bf16", i, bf_conv_what[r], rel[r]);
        back_to_fp32();
    }
    for (size_t i = 0; i < sizeof bf_gemms / sizeof *bf_gemms; i++) {
        const struct bf_gemm_shape *g = &bf_gemms[i];
        double rel = bf16_gemm_case(g->ta, g->tb, g->m, g->n, g->k, 1.0f, 0.0f, 0);
        if (rel < 0.0) return;
        ck_assert_msg(rel > BF16_MIN_DIFF, "bf16 gemm %zu differs from float32 by only %.3e: "
                      "not computed in bf16", i, rel);
    }
}
END_TEST

static Suite *layers_suite(void)
{
    Suite *s = suite_create("layers");
    TCase *tc;

    tc = tcase_create("reference");
    tcase_add_test(tc, conv_forward_valid);
    tcase_add_test(tc, conv_forward_valid_relu);
    tcase_add_test(tc, conv_forward_same_s1);
    tcase_add_test(tc, conv_forward_same_s2_odd);
    tcase_add_test(tc, conv_forward_same_s2_even);
    tcase_add_test(tc, conv_forward_valid_s2);
    tcase_add_test(tc, maxpool_forward_even);
    tcase_add_test(tc, maxpool_forward_odd);
    tcase_add_test(tc, maxpool_forward_overlap);
    tcase_add_test(tc, maxpool2_seed_shapes);
    tcase_add_test(tc, dense_forward);
    tcase_add_test(tc, dense_forward_relu);
    tcase_add_test(tc, relu_forward_backward_exact);
    tcase_add_test(tc, pool_relu_fusion_even);
    tcase_add_test(tc, pool_relu_fusion_odd);
    tcase_add_test(tc, conv_pool_fold_seed);
    tcase_add_test(tc, conv_pool_fold_odd);
    suite_add_tcase(s, tc);

    tc = tcase_create("gradients");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fd_conv_valid);
    tcase_add_test(tc, fd_conv_valid_relu);
    tcase_add_test(tc, fd_conv_same_s1);
    tcase_add_test(tc, fd_conv_same_s2_odd);
    tcase_add_test(tc, fd_conv_same_s2_even);
    tcase_add_test(tc, conv1x1_s2_few_channels_avx2);
    tcase_add_test(tc, conv1x1_s2_few_channels_avx512);
    tcase_add_test(tc, conv3x3_avx2_rows_and_images);
    tcase_add_test(tc, conv3x3_avx2_channel_tail);
    tcase_add_test(tc, conv3x3_avx2_small_image);
    tcase_add_test(tc, conv3x3_avx2_valid);
    tcase_add_test(tc, fd_conv3x3_avx2);
    tcase_add_test(tc, fd_maxpool_even);
    tcase_add_test(tc, fd_maxpool_odd);
    tcase_add_test(tc, fd_maxpool_overlap);
    tcase_add_test(tc, fd_dense_plain);
    tcase_add_test(tc, fd_dense_relu);
    tcase_add_test(tc, fd_relu);
    tcase_add_test(tc, fd_dropout);
    tcase_add_test(tc, fd_softmax_xent);
    tcase_add_test(tc, softmax_xent_hand);
    tcase_add_test(tc, fd_cnn_model);
    suite_add_tcase(s, tc);

    tc = tcase_create("init");
    tcase_add_test(tc, glorot_dense);
    tcase_add_test(tc, glorot_conv);
    tcase_add_test(tc, dropout_stats);
    tcase_add_test(tc, dropout_inference_identity);
    suite_add_tcase(s, tc);

    tc = tcase_create("build");
    tcase_add_test(tc, build_unknown_type);
    tcase_add_test(tc, build_class_mismatch);
    tcase_add_test(tc, build_kernel_too_big);
    tcase_add_test(tc, build_failure_then_free);
    tcase_add_test(tc, batch_of_zero);
    suite_add_tcase(s, tc);

    /* --winograd: each case takes its choice back as soon as its plans exist. */
    tc = tcase_create("winograd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, winograd_conv_vs_direct);
    tcase_add_test(tc, winograd_not_below_threshold);
    tcase_add_test(tc, winograd_tile_choice);
    tcase_add_test(tc, winograd_kernel_choice);
    tcase_add_test(tc, winograd_other_shape);
    tcase_add_test(tc, fd_conv_winograd);
    suite_add_tcase(s, tc);

    /* Each case switches the backend to bf16; the teardown switches it back. */
    tc = tcase_create("bf16");
    tcase_add_checked_fixture(tc, NULL, back_to_fp32);
    tcase_add_test(tc, bf16_conv_forward);
    tcase_add_test(tc, conv_pool_fold_bf16);
    tcase_add_test(tc, bf16_conv_backward);
    tcase_add_test(tc, wgrad_bf16_exact);
    tcase_add_test(tc, wgrad_bf16_plan);
    tcase_add_test(tc, bf16_gemm);
    tcase_add_test(tc, bf16_rounding);
    tcase_add_test(tc, bf16_not_fp32);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(layers_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
