/* check_poolgrad.c: a convolution's backward with the ReLU and 2x2/2 max
 * pool after it folded in (backend.h's conv_poolgrad, cpu_conv_poolgrad.c),
 * against exact double sums and against the layers apart.
 *
 * A model conv - pool - conv - pool - dense is run with the fold and with
 * the layers apart (DTRAIN_NO_FUSION=1: oneDNN's backward after the pool's).
 * The logits must be equal bit for bit (forward is not folded). The second
 * conv's weight, bias and input gradients of the folded run are held to
 * double sums of the dense output gradient the layers apart made (the
 * pool's backward with its ReLU), each within 1e-5 of the magnitude of its
 * terms; so are the layers apart's own, and every other layer's gradient is
 * the apart run's within 1e-5 of that layer's largest. The fold must run
 * the same bits at 1 and 3 threads. Shapes: the seed CNN's (28x28 -> 32 ->
 * pool, cropped to 12x12 -> 64 -> 10x10 -> pool 5x5), and an odd one (48
 * input channels: a pass of 32 and one of 16; 40 output channels: blocks
 * with tails; a pool that drops a row and a column). The backend's fits
 * declines other shapes and DTRAIN_NO_FAST_KERNELS. This test reaches into
 * src/cpu/cpu_internal.h, as no code outside src/cpu/ may. */
#include "config.h"

#include <omp.h>

#include "layer_check.h"
#include "cpu/cpu_internal.h"
#include "runtime/half.h"

enum { N = 4 };

struct run {
    struct dt_model m;
};

static void run_model(struct run *r, struct dt_shape in, int c1, int c2, int fold)
{
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = c1, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "conv2d", .filters = c2, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "dense", .filters = 4},
    };
    const uint8_t labels[N] = {1, 3, 0, 2};
    dt_status st = {0};
    dt_rng g;
    setenv("DTRAIN_NO_FUSION", fold ? "0" : "1", 1);
    ck_assert_msg(dt_model_build_specs(&r->m, "poolgrad", in, 4, specs, 5, &st) == DT_OK, "%s", st.msg);
    dt_model_create(&r->m, be, N);
    unsetenv("DTRAIN_NO_FUSION");
    dt_model_init_params(&r->m, 2600);
    dt_rng_seed(&g, 2601, 0);
    for (int i = 0; i < 3; i += 2) { /* biases of both signs: some ReLUs dead */
        const struct dt_layer *c = &r->m.layers[i];
        fill_uniform(r->m.params + c->param_offset + c->nparams - (size_t)c->out.c, (size_t)c->out.c, &g, -0.2f,
                     0.1f);
    }
    uint8_t *pix = malloc(dt_shape_size(in) * N);
    for (size_t i = 0; i < dt_shape_size(in) * N; i++) pix[i] = (uint8_t)dt_rng_below(&g, 256);
    dt_model_load_input(&r->m, r->m.act[0], pix, dt_shape_size(in) * N);
    free(pix);
    dt_model_forward(&r->m, N, 1, &g);
    dt_model_loss(&r->m, labels, N, 1.0f);
    dt_model_backward(&r->m, N, &g);
}

/* Element i of an activation tensor (bf: bf16) as a double. */
static double val(const void *t, size_t i, int bf)
{
    return bf ? (double)dt_bf16_to_f32(((const uint16_t *)t)[i]) : (double)((const float *)t)[i];
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs((double)x[i]) > m ? fabs((double)x[i]) : m;
    return m;
}

/* The second conv's gradients (dw, db, dx) against double sums of dy: each
 * within 1e-5 of its terms' magnitude, dx (bf: stored in bf16, its weights
 * read as bf16) also within a bf16 rounding of its value. */
static void against_exact(const char *what, const struct dt_conv_shape *s, const void *x, const void *dy,
                          const float *w, const float *dw, const float *db, const void *dx, int bf)
{
    const int C = s->c, K = s->k;
    for (int t = 0; t < 9; t++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++) {
                double sum = 0, mag = 0;
                for (int i = 0; i < N; i++)
                    for (int y = 0; y < s->oh; y++)
                        for (int xx = 0; xx < s->ow; xx++) {
                            const double v = val(dy, (((size_t)i * s->oh + y) * s->ow + xx) * K + k, bf) *
                                             val(x, (((size_t)i * s->h + y + t / 3) * s->w + xx + t % 3) * C + c, bf);
                            sum += v, mag += fabs(v);
                        }
                const float got = dw[((size_t)t * C + c) * K + k];
                ck_assert_msg(fabs((double)got - sum) <= 1e-5 * mag + 1e-12, "%s dW[%d][%d][%d] = %.9g, exactly %.9g",
                              what, t, c, k, (double)got, sum);
            }
    for (int k = 0; k < K; k++) {
        double sum = 0, mag = 0;
        for (size_t j = 0; j < (size_t)N * s->oh * s->ow; j++) sum += val(dy, j * K + k, bf), mag += fabs(val(dy, j * K + k, bf));
        ck_assert_msg(fabs((double)db[k] - sum) <= 1e-5 * mag + 1e-12, "%s db[%d] = %.9g, exactly %.9g", what, k,
                      (double)db[k], sum);
    }
    for (int i = 0; i < N; i++)
        for (int y = 0; y < s->h; y++)
            for (int xx = 0; xx < s->w; xx++)
                for (int c = 0; c < C; c++) {
                    double sum = 0, mag = 0;
                    for (int t = 0; t < 9; t++) {
                        const int oy = y - t / 3, ox = xx - t % 3;
                        if (oy < 0 || ox < 0 || oy >= s->oh || ox >= s->ow) continue;
                        for (int k = 0; k < K; k++) {
                            const float wv = w[((size_t)t * C + c) * K + k];
                            const double v = val(dy, (((size_t)i * s->oh + oy) * s->ow + ox) * K + k, bf) *
                                             (bf ? (double)dt_bf16_to_f32(dt_f32_to_bf16(wv)) : (double)wv);
                            sum += v, mag += fabs(v);
                        }
                    }
                    const double got = val(dx, (((size_t)i * s->h + y) * s->w + xx) * C + c, bf);
                    ck_assert_msg(fabs(got - sum) <= 1e-5 * mag + (bf ? fabs(sum) / 256 : 0.0) + 1e-12,
                                  "%s dX[%d][%d][%d][%d] = %.9g, exactly %.9g", what, i, y, xx, c, got, sum);
                }
}

static void check_pair(struct dt_shape in, int c1, int c2)
{
    const int bf = be->act_type() == DT_PREC_BF16;
    struct run a, b;
    run_model(&b, in, c1, c2, 0);
    run_model(&a, in, c1, c2, 1);
    const struct dt_layer *conv = &a.m.layers[2];
    const struct dt_conv_shape *s = dt_conv2d_shape(conv);
    if (!conv->pool_bwd) {
        printf("# SKIP conv-poolgrad fold %dx%dx%d -> %d: this CPU or backend does not take it (AVX-512, float32)\n",
               s->h, s->w, s->c, s->k);
        dt_model_free(&a.m), dt_model_free(&b.m);
        return;
    }
    ck_assert_msg(a.m.layers[3].bwd_folded && !b.m.layers[2].pool_bwd, "fold flags");
    const size_t nlog = (size_t)N * 4;
    ck_assert_msg(memcmp(a.m.act[5], b.m.act[5], dt_act_size(be->act_type()) * nlog) == 0,
                  "logits differ: forward is not folded");
    /* the dense output gradient of the second conv, as the layers apart made it */
    const void *dy = b.m.dact[3], *x = b.m.act[2];
    const float *w = b.m.params + conv->param_offset;
    const size_t nw = (size_t)9 * s->c * s->k;
    size_t live = 0, all = (size_t)N * s->oh * s->ow * s->k;
    for (size_t j = 0; j < all; j++) live += val(dy, j, bf) != 0.0;
    ck_assert_msg(live > all / 16 && live <= all / 4, "degenerate: %zu of %zu output gradients live", live, all);
    against_exact("folded", s, x, dy, w, a.m.grads + conv->param_offset, a.m.grads + conv->param_offset + nw,
                  a.m.dact[2], bf);
    against_exact("apart", s, x, dy, w, b.m.grads + conv->param_offset, b.m.grads + conv->param_offset + nw,
                  b.m.dact[2], bf);
    for (int l = 0; l < a.m.nlayers; l++) { /* the layers below see the input gradient: close, not equal */
        const struct dt_layer *ly = &a.m.layers[l];
        if (!ly->nparams) continue;
        const float *ga = a.m.grads + ly->param_offset, *gb = b.m.grads + ly->param_offset;
        const double scale = max_abs(gb, ly->nparams);
        for (size_t i = 0; i < ly->nparams; i++)
            ck_assert_msg(fabs((double)ga[i] - (double)gb[i]) <= (bf ? 1e-2 : 1e-5) * scale, "%s grad[%zu] %.9g vs apart %.9g",
                          ly->name, i, (double)ga[i], (double)gb[i]);
    }
    /* the same bits at any thread count */
    struct run t3;
    omp_set_num_threads(3);
    run_model(&t3, in, c1, c2, 1);
    omp_set_num_threads(1);
    ck_assert_msg(memcmp(t3.m.grads, a.m.grads, sizeof(float) * a.m.nparams) == 0, "3 threads: other gradients");
    printf("# conv-poolgrad fold %dx%dx%d -> %dx%dx%d (%s): within bounds of exact; %zu of %zu output gradients live\n",
           s->h, s->w, s->c, s->oh, s->ow, s->k, bf ? "bf16" : "fp32", live, all);
    dt_model_free(&a.m), dt_model_free(&b.m), dt_model_free(&t3.m);
}

START_TEST(seed_shapes) { check_pair((struct dt_shape){28, 28, 1}, 32, 64); }
END_TEST

START_TEST(odd_shapes) { check_pair((struct dt_shape){20, 17, 1}, 48, 40); }
END_TEST

/* --precision bf16 with bf16 activations: read as floats, the input
 * gradient rounded once. */
START_TEST(bf16_shapes)
{
    char why[256];
    if (be->setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        printf("# SKIP conv-poolgrad bf16: %s\n", why);
        return;
    }
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16);
    check_pair((struct dt_shape){28, 28, 1}, 32, 64);
    check_pair((struct dt_shape){20, 17, 1}, 48, 40);
    be->set_act_type(DT_PREC_FP32);
    ck_assert_msg(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "fp32 refused: %s", why);
}
END_TEST

START_TEST(declines)
{
    struct dt_conv_shape s = {.h = 12, .w = 12, .c = 32, .k = 64, .kh = 3, .kw = 3, .stride = 1, .oh = 10, .ow = 10};
    const struct dt_conv_shape ps = {.h = 10, .w = 10, .c = 64, .k = 64, .kh = 2, .kw = 2, .stride = 2, .oh = 5,
                                     .ow = 5};
    if (!__builtin_cpu_supports("avx512f")) {
        ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 0);
        printf("# SKIP conv-poolgrad: no AVX-512 here (declined)\n");
        return;
    }
    ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 1);
    setenv("DTRAIN_NO_FAST_KERNELS", "1", 1);
    ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 0);
    unsetenv("DTRAIN_NO_FAST_KERNELS");
    s.c = 8; /* input channels not a multiple of 16 */
    ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 0);
    s.c = 32, s.kh = s.kw = 5, s.oh = s.ow = 8;
    ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 0);
    s.kh = s.kw = 3, s.oh = s.ow = 10, s.pad = 1;
    ck_assert_int_eq(cpu_conv_poolgrad_fits(&s, &ps), 0);
}
END_TEST

int main(void)
{
    omp_set_num_threads(1);
    Suite *su = suite_create("conv-poolgrad");
    TCase *tc = tcase_create("fold");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, seed_shapes);
    tcase_add_test(tc, odd_shapes);
    tcase_add_test(tc, bf16_shapes);
    tcase_add_test(tc, declines);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
