/* check_fused.c: the CPU's fused batch-norm kernels, generic and AVX-512,
 * against double-precision references.
 *
 * cpu_channel_affine (out = p a + q b + r, optional ReLU), cpu_channel_sums
 * and cpu_channel_sums_relu (the ReLU's backward applied to a in place in
 * the same pass) each have a generic form (cpu_norm.c, the readable
 * reference) and a fast path (cpu_avx512.c) for channels in multiples of
 * 16; both are run here on float32 and bf16 tensors, on channel counts the
 * fast path takes (16, 32, 64, 48, 80: the constant and variable cases)
 * and one it declines (24), with a row count that is no multiple of the
 * 64-row summing block. This test reaches into src/cpu/cpu_internal.h, as
 * no other code outside src/cpu/ may: the fast and generic kernels are not
 * separately visible through the backend table. */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "runtime/half.h"
#include "runtime/rng.h"

enum { ROWS = 203 };

/* A tensor of rows x c random values in [-1, 1), stored as float32 or bf16;
 * vals receives what is stored, as floats. */
static void *tensor(float *vals, size_t n, int bf, dt_rng *r)
{
    void *t = malloc(n * (bf ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        float v = 2.0f * dt_rng_uniform(r) - 1.0f;
        if (bf) {
            ((uint16_t *)t)[i] = dt_f32_to_bf16(v);
            v = dt_bf16_to_f32(((uint16_t *)t)[i]);
        } else ((float *)t)[i] = v;
        vals[i] = v;
    }
    return t;
}

static float value(const void *t, size_t i, int bf)
{
    return bf ? dt_bf16_to_f32(((const uint16_t *)t)[i]) : ((const float *)t)[i];
}

/* Stored results within one rounding of the type (plus float32 noise). */
static void close_to(const char *what, float got, double want, int bf)
{
    double tol = (bf ? 1.0 / 256 : 1e-6) * (1.0 + fabs(want));
    ck_assert_msg(fabs((double)got - want) <= tol, "%s: %.8g, want %.8g", what, (double)got, want);
}

static void check_affine(int c, int bf, int fast)
{
    size_t n = (size_t)ROWS * c;
    float *av = malloc(sizeof(float) * n), *bv = malloc(sizeof(float) * n), p[80], q[80], r[80];
    dt_rng rng;
    dt_rng_seed(&rng, 1000 + (uint64_t)c, (uint64_t)bf);
    void *a = tensor(av, n, bf, &rng), *b = tensor(bv, n, bf, &rng), *out = malloc(n * 4);
    for (int j = 0; j < c; j++) {
        p[j] = 2.0f * dt_rng_uniform(&rng);
        q[j] = dt_rng_uniform(&rng) - 0.5f;
        r[j] = dt_rng_uniform(&rng) - 0.5f;
    }
    for (int with_b = 0; with_b < 2; with_b++)
        for (int relu = 0; relu < 2; relu++) {
            const void *bb = with_b ? b : NULL;
            if (fast) ck_assert_int_eq(cpu_fast_affine(out, a, bb, ROWS, c, p, q, r, relu, bf), c % 16 == 0);
            if (!fast || c % 16) cpu_channel_affine(out, a, bb, ROWS, c, p, q, r, relu, bf);
            for (size_t i = 0; i < n; i++) {
                int j = (int)(i % (size_t)c);
                double want = (double)p[j] * (double)av[i] + (double)r[j] + (with_b ? (double)q[j] * (double)bv[i] : 0.0);
                if (relu && want < 0) want = 0;
                char what[96];
                snprintf(what, sizeof what, "affine c=%d %s%s%s [%zu]", c, bf ? "bf16" : "f32", with_b ? " +b" : "",
                         relu ? " relu" : "", i);
                close_to(what, value(out, i, bf), want, bf);
            }
        }
    free(av), free(bv), free(a), free(b), free(out);
}

static void check_sums(int c, int bf, int fast, int masked)
{
    size_t n = (size_t)ROWS * c;
    float *av = malloc(sizeof(float) * n), *bv = malloc(sizeof(float) * n), *mv = malloc(sizeof(float) * n);
    dt_rng rng;
    dt_rng_seed(&rng, 2000 + (uint64_t)c, (uint64_t)(bf + 2 * masked));
    void *a = tensor(av, n, bf, &rng), *b = tensor(bv, n, bf, &rng), *m = tensor(mv, n, bf, &rng);
    double s1[80], s2[80], w1[80] = {0}, w2[80] = {0}, mag[80] = {0};
    for (size_t i = 0; i < n; i++) {
        int j = (int)(i % (size_t)c);
        double x = masked && !(mv[i] > 0.0f) ? 0.0 : (double)av[i];
        w1[j] += x;
        w2[j] += x * (double)bv[i];
        mag[j] += fabs(x) + 1.0;
    }
    int ran = 0;
    if (fast) {
        ran = cpu_fast_sums(s1, s2, a, b, masked ? m : NULL, ROWS, c, bf);
        ck_assert_int_eq(ran, c % 16 == 0);
    }
    if (!ran && masked) cpu_channel_sums_relu(s1, s2, a, b, m, ROWS, c, bf);
    else if (!ran) cpu_channel_sums(s1, s2, a, b, ROWS, c, bf);
    for (int j = 0; j < c; j++) { /* float sums over 64-row blocks: ~1e-6 of the magnitudes */
        ck_assert_msg(fabs(s1[j] - w1[j]) <= 1e-6 * mag[j], "sum c=%d bf %d masked %d [%d]: %.9g want %.9g", c, bf,
                      masked, j, s1[j], w1[j]);
        ck_assert_msg(fabs(s2[j] - w2[j]) <= 1e-6 * mag[j], "sum of products c=%d bf %d masked %d [%d]", c, bf, masked, j);
    }
    if (masked) /* the ReLU's backward, in place and exact */
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(value(a, i, bf) == (mv[i] > 0.0f ? av[i] : 0.0f), "masked a [%zu]", i);
    free(av), free(bv), free(mv), free(a), free(b), free(m);
}

static const int channels[] = {16, 32, 64, 48, 80, 24};

static void all(int bf, int fast)
{
    char why[128];
    if (bf && cpu_setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        printf("SKIP bf16 kernels: %s\n", why);
        return;
    }
    for (size_t k = 0; k < sizeof channels / sizeof *channels; k++) {
        check_affine(channels[k], bf, fast);
        check_sums(channels[k], bf, fast, 0);
        check_sums(channels[k], bf, fast, 1);
    }
}

START_TEST(generic_f32) { all(0, 0); }
END_TEST
START_TEST(generic_bf16) { all(1, 0); }
END_TEST
/* The fast paths, where this CPU runs them (a zero-row call says whether). */
static void fast(int bf)
{
    if (!cpu_fast_affine(NULL, NULL, NULL, 0, 16, NULL, NULL, NULL, 0, bf)) {
        printf("SKIP fast paths: this CPU lacks AVX-512 with BF16 (the generic kernels run)\n");
        return;
    }
    all(bf, 1);
}

START_TEST(fast_f32) { fast(0); }
END_TEST
START_TEST(fast_bf16) { fast(1); }
END_TEST

START_TEST(bf16_add)
{
    enum { N = 1000 };
    float av[N], bv[N];
    dt_rng rng;
    dt_rng_seed(&rng, 3000, 0);
    uint16_t *a = tensor(av, N, 1, &rng), *b = tensor(bv, N, 1, &rng);
    if (!cpu_fast_add_bf16(a, b, N)) cpu_act_add(a, b, N, 1);
    for (int i = 0; i < N; i++) ck_assert(a[i] == dt_f32_to_bf16(av[i] + bv[i])); /* one rounding, nearest even */
    free(a), free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fused kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, generic_f32);
    tcase_add_test(tc, generic_bf16);
    tcase_add_test(tc, fast_f32);
    tcase_add_test(tc, fast_bf16);
    tcase_add_test(tc, bf16_add);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
