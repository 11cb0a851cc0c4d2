/* check_crop.c: nn/crop.c, layers that compute only the part of their
 * output the layers after them read.
 *
 * Shapes: the seed CNN's second convolution computes 10x10 of its 11x11
 * pixels from 12x12 of the first pool's 13x13; chains of 'valid'
 * convolutions (stride 1 and 2) shrink back to a pool; a chain that reaches
 * the model's input, a 'same' convolution, a batchnorm or a route reading
 * the output stops it; DTRAIN_NO_CROP=1 keeps every layer whole; the
 * summary still shows Keras's shapes.
 *
 * Results: each model is run cropped and whole from the same parameters and
 * batch (forward, loss, backward; the first conv folded with its pool and
 * apart): the logits bit for bit, since each output that is computed sums
 * the same products in the same order, and the parameter gradients within
 * 1e-6 of their largest (a library may sum a shorter row's products in
 * another order; whether they came out bit for bit is printed). A crop that
 * took the wrong part of a map, or left a dropped pixel's gradient
 * uncleared, fails both. In float32, and in bf16 where the CPU has it. */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "nn/model.h"
#include "runtime/rng.h"

static const struct dt_backend *const be = &dt_backend_cpu;

#define CONV(f, k, s) {.type = "conv2d", .filters = (f), .kernel = (k), .stride = (s), .activation = DT_ACT_RELU}
#define POOL {.type = "maxpool", .kernel = 2}
#define DENSE(u) {.type = "dense", .filters = (u)}

static const struct dt_layer_spec seed[] = {CONV(32, 3, 1), POOL, CONV(64, 3, 1), POOL, DENSE(16), DENSE(10)};
static const struct dt_layer_spec chain[] = {CONV(8, 3, 1),  POOL, CONV(16, 3, 1), CONV(16, 3, 1),
                                             POOL,           CONV(16, 3, 2),      POOL, DENSE(10)};

static void build(struct dt_model *m, const char *name, struct dt_shape in, const struct dt_layer_spec *specs,
                  int n, int crop)
{
    dt_status st = {0};
    setenv("DTRAIN_NO_CROP", crop ? "0" : "1", 1);
    ck_assert_msg(dt_model_build_specs(m, name, in, 10, specs, n, &st) == DT_OK, "%s: %s", name, st.msg);
    unsetenv("DTRAIN_NO_CROP");
}

/* layer i: computes (oh, ow) from an (ih, iw) input; Keras's shape (fh, fw) */
static void expect(const struct dt_model *m, int i, int ih, int iw, int oh, int ow, int fh, int fw)
{
    const struct dt_layer *l = &m->layers[i];
    ck_assert_msg(l->in.h == ih && l->in.w == iw && l->out.h == oh && l->out.w == ow && l->full.h == fh &&
                      l->full.w == fw,
                  "%s %s: in %dx%d out %dx%d full %dx%d, want in %dx%d out %dx%d full %dx%d", m->name, l->name,
                  l->in.h, l->in.w, l->out.h, l->out.w, l->full.h, l->full.w, ih, iw, oh, ow, fh, fw);
}

START_TEST(seed_shapes)
{
    struct dt_model m;
    build(&m, "seed", (struct dt_shape){28, 28, 1}, seed, 6, 1);
    expect(&m, 0, 28, 28, 26, 26, 26, 26); /* reads the model's input, which is whole */
    expect(&m, 1, 26, 26, 12, 12, 13, 13); /* 12x12 windows of the whole 26x26 */
    expect(&m, 2, 12, 12, 10, 10, 11, 11);
    expect(&m, 3, 10, 10, 5, 5, 5, 5);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dt_model_summary(&m, f);
    fclose(f);
    ck_assert_msg(strstr(text, "->   11 x   11 x   64") && strstr(text, "(computes 10x10: read no further)"),
                  "summary:\n%s", text);
    free(text);
    dt_model_free(&m);
    build(&m, "seed", (struct dt_shape){28, 28, 1}, seed, 6, 0);
    expect(&m, 1, 26, 26, 13, 13, 13, 13);
    expect(&m, 2, 13, 13, 11, 11, 11, 11);
    expect(&m, 3, 11, 11, 5, 5, 5, 5);
    dt_model_free(&m);
}
END_TEST

START_TEST(chain_shapes)
{
    struct dt_model m;
    /* 36 -> conv 34 -> pool 17 -> conv 15 -> conv 13 -> pool 6 -> conv/2 2 -> pool 1.
     * The stride-2 conv reads 5 of pool 4's 6, which reads 10 of conv 3's 13, which
     * needs 12 of conv 2's 15, which needs 14 of pool 1's 17: pool 1 computes
     * 14x14 windows of the first conv's 34x34 (that conv reads the input: whole). */
    build(&m, "chain", (struct dt_shape){36, 36, 1}, chain, 8, 1);
    expect(&m, 0, 36, 36, 34, 34, 34, 34);
    expect(&m, 1, 34, 34, 14, 14, 17, 17);
    expect(&m, 2, 14, 14, 12, 12, 15, 15);
    expect(&m, 3, 12, 12, 10, 10, 13, 13);
    expect(&m, 4, 10, 10, 5, 5, 6, 6);
    expect(&m, 5, 5, 5, 2, 2, 2, 2);
    expect(&m, 6, 2, 2, 1, 1, 1, 1);
    dt_model_free(&m);
    /* 31 -> 29 -> pool 14 (reads 28 of 29; the conv before reads the input) -> 12 -> 10 -> 5 -> 2 -> 1 */
    build(&m, "chain", (struct dt_shape){31, 31, 1}, chain, 8, 1);
    expect(&m, 0, 31, 31, 29, 29, 29, 29);
    expect(&m, 1, 29, 29, 14, 14, 14, 14);
    expect(&m, 4, 10, 10, 5, 5, 5, 5);
    dt_model_free(&m);
    build(&m, "chain", (struct dt_shape){36, 36, 1}, chain, 8, 0);
    for (int i = 0; i < m.nlayers; i++)
        ck_assert_msg(m.layers[i].out.h == m.layers[i].full.h && m.layers[i].out.w == m.layers[i].full.w,
                      "DTRAIN_NO_CROP=1: %s cropped", m.layers[i].name);
    dt_model_free(&m);
}
END_TEST

/* What ends a chain: the conv's output read by a route as well; a 'same'
 * conv; a batchnorm between conv and pool. */
START_TEST(stops)
{
    struct dt_model m;
    const struct dt_shape in = {28, 28, 1};
    const struct dt_layer_spec routed[] = {CONV(8, 3, 1), POOL, CONV(8, 3, 1), POOL, {.type = "route", .from = -2},
                                           POOL, DENSE(10)};
    build(&m, "routed", in, routed, 7, 1);
    expect(&m, 2, 13, 13, 11, 11, 11, 11); /* act[3] is read by the route too */
    expect(&m, 1, 26, 26, 13, 13, 13, 13);
    dt_model_free(&m);
    struct dt_layer_spec same[] = {CONV(8, 3, 1), POOL, CONV(8, 3, 1), POOL, DENSE(10)};
    same[2].same = 1;
    build(&m, "same", in, same, 5, 1);
    expect(&m, 2, 13, 13, 13, 13, 13, 13);
    expect(&m, 3, 13, 13, 6, 6, 6, 6); /* reads 12 of 13 but its conv cannot shrink */
    expect(&m, 1, 26, 26, 13, 13, 13, 13);
    dt_model_free(&m);
    const struct dt_layer_spec bn[] = {CONV(8, 3, 1), POOL, CONV(8, 3, 1), {.type = "batchnorm"}, POOL, DENSE(10)};
    build(&m, "bn", in, bn, 6, 1);
    expect(&m, 2, 13, 13, 11, 11, 11, 11);
    expect(&m, 3, 11, 11, 11, 11, 11, 11);
    dt_model_free(&m);
}
END_TEST

/* One forward, loss and backward of a model built cropped or whole. */
static void run(struct dt_model *m, const char *name, struct dt_shape in, const struct dt_layer_spec *specs,
                int nspecs, int n, int crop, int fuse)
{
    build(m, name, in, specs, nspecs, crop);
    setenv("DTRAIN_NO_FUSION", fuse ? "0" : "1", 1);
    dt_model_create(m, be, n);
    unsetenv("DTRAIN_NO_FUSION");
    dt_model_init_params(m, 77);
    dt_rng r;
    dt_rng_seed(&r, 78, 0);
    for (int i = 0; i < m->nlayers; i++) { /* biases that leave some ReLUs dead, some live */
        const struct dt_layer *l = &m->layers[i];
        if (l->ops == &dt_conv2d_ops)
            for (int k = 0; k < l->out.c; k++)
                m->params[l->param_offset + l->nparams - (size_t)l->out.c + (size_t)k] =
                    0.2f * dt_rng_uniform(&r) - 0.1f;
    }
    uint8_t *pix = malloc(dt_shape_size(in) * (size_t)n), labels[8];
    for (size_t i = 0; i < dt_shape_size(in) * (size_t)n; i++) pix[i] = (uint8_t)dt_rng_below(&r, 256);
    for (int i = 0; i < n; i++) labels[i] = (uint8_t)dt_rng_below(&r, 10);
    dt_model_load_input(m, m->act[0], pix, dt_shape_size(in) * (size_t)n);
    free(pix);
    dt_model_forward(m, n, 1, &r);
    dt_model_loss(m, labels, n, 1.0f);
    dt_model_backward(m, n, &r);
}

static void compare(const char *name, struct dt_shape in, const struct dt_layer_spec *specs, int nspecs, int fuse)
{
    const int n = 5;
    struct dt_model a, b;
    run(&a, name, in, specs, nspecs, n, 1, fuse);
    run(&b, name, in, specs, nspecs, n, 0, fuse);
    int cropped = 0;
    for (int i = 0; i < a.nlayers; i++) cropped += a.layers[i].out.h != b.layers[i].out.h;
    ck_assert_msg(cropped > 0, "%s: nothing cropped", name);
    const size_t logits = (size_t)n * 10 * dt_act_size(be->act_type());
    ck_assert_msg(memcmp(a.act[a.nlayers], b.act[b.nlayers], logits) == 0, "%s: logits cropped != whole", name);
    double d = 0.0, big = 0.0;
    for (size_t i = 0; i < a.nparams; i++) {
        d = fmax(d, fabs((double)a.grads[i] - (double)b.grads[i]));
        big = fmax(big, fabs((double)b.grads[i]));
    }
    for (int i = 0; i < b.nlayers; i++) { /* every conv's gradient alive */
        const struct dt_layer *l = &b.layers[i];
        size_t moved = 0;
        for (size_t j = 0; l->ops == &dt_conv2d_ops && j < l->nparams; j++) moved += b.grads[l->param_offset + j] != 0.0f;
        ck_assert_msg(l->ops != &dt_conv2d_ops || moved > l->nparams / 4, "%s: degenerate, %zu of %s's %zu gradients nonzero",
                      name, moved, l->name, l->nparams);
    }
    ck_assert_msg(d <= 1e-6 * big, "%s: gradients cropped and whole %.3g apart (largest %.3g)", name, d, big);
    printf("# %s %dx%dx%d (%s, %s): %d layers cropped; logits equal bit for bit, gradients %s (%.2g of the largest)\n", name, in.h, in.w, in.c,
           be->act_type() == DT_PREC_FP32 ? "fp32" : "bf16", a.layers[0].fold_pool ? "first conv folded" : "apart",
           cropped, memcmp(a.grads, b.grads, sizeof(float) * a.nparams) ? "within 1e-6" : "bit for bit",
           big > 0 ? d / big : 0.0);
    dt_model_free(&a);
    dt_model_free(&b);
}

static void all(void)
{
    for (int fuse = 1; fuse >= 0; fuse--) compare("seed", (struct dt_shape){28, 28, 1}, seed, 6, fuse);
    compare("chain", (struct dt_shape){36, 36, 1}, chain, 8, 1); /* its first conv folded */
    compare("chain", (struct dt_shape){36, 36, 3}, chain, 8, 1); /* three channels: not folded */
}

START_TEST(same_results_fp32) { all(); }
END_TEST

START_TEST(same_results_bf16)
{
    char why[256];
    if (be->setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        printf("# SKIP same_results_bf16: no bf16 here: %s\n", why);
        return;
    }
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16); /* bf16 activations, as --precision bf16 */
    all();
    be->set_act_type(DT_PREC_FP32);
    ck_assert(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0);
}
END_TEST

static Suite *crop_suite(void)
{
    Suite *s = suite_create("crop");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, seed_shapes);
    tcase_add_test(tc, chain_shapes);
    tcase_add_test(tc, stops);
    tcase_add_test(tc, same_results_fp32);
    tcase_add_test(tc, same_results_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char why[256];
    if (be->setup(1, DT_PREC_FP32, why, sizeof why) != 0) {
        fprintf(stderr, "cpu backend: %s\n", why);
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(crop_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
