/* check_act16.c: 16-bit activation storage, on the CPU.
 *
 * The host conversions of src/runtime/half.h are checked against independent
 * references: for fp16 an integer-arithmetic conversion written here (half.h
 * uses the compiler's _Float16), both ways, and for bf16 the nearer of the
 * two neighbouring bf16 values worked out in double. Then models train through the reference backend of act16_ref.h,
 * which stores every activation in fp16 or bf16, beside the same models on
 * the CPU backend in float32: if a layer or the model sized, copied or
 * added an activation as a float where it holds 16-bit values, the runs
 * part ways at once (or ASan and Valgrind, which run this test too, see the
 * overrun). The two storages must track each other within what rounding
 * explains, and differ: bf16 (8 bits of mantissa) by more than fp16 (11). */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "act16_ref.h"
#include "backend.h"
#include "runtime/half.h"
#include "nn/model.h"
#include "optim/optim.h"

static uint32_t bits_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float float_of(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Float bit patterns to try: every exponent, mantissas spread over the
 * range with the low bits (where the rounding decides) all covered. */
static uint32_t pattern(uint32_t i) { return i * 2654435761u; }
#define NPATTERNS (1u << 18) /* about a thousand per exponent; Valgrind runs this too */

/* ---- fp16 ------------------------------------------------------------------ */

START_TEST(f16_round_trip_is_exact)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert_msg((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu), "0x%04x decodes to NaN", h);
            ck_assert(isnan(dt_f16_to_f32(dt_f32_to_f16(f))));
            continue;
        }
        ck_assert_msg(dt_f32_to_f16(f) == h, "0x%04x -> %a -> 0x%04x", h, (double)f, dt_f32_to_f16(f));
    }
    ck_assert(dt_f16_to_f32(0x3c00) == 1.0f && dt_f16_to_f32(0x7bff) == 65504.0f);
    ck_assert(dt_f16_to_f32(0x0001) == 0x1p-24f && dt_f16_to_f32(0x8400) == -0x1p-14f);
}
END_TEST

/* An fp16 reference in integer arithmetic, independent of the compiler's
 * _Float16 that runtime/half.h uses: the exponent rebiased, the mantissa
 * shifted with round to nearest, ties to even (a carry moves into the
 * exponent, up to infinity), subnormals below 2^-14. */
static uint32_t shift_rne(uint32_t x, int shift)
{
    uint32_t q = x >> shift, rem = x & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

static uint16_t f16_reference(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e >= 1) return (uint16_t)(sign | (((uint32_t)e << 10) + shift_rne(man, 13)));
    if (e < -10) return (uint16_t)sign;
    return (uint16_t)(sign | shift_rne(man | 0x800000u, 14 - e));
}

static float f16_decode_reference(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return float_of(sign | 0x7f800000u | (man << 13));
    if (exp) return float_of(sign | ((exp + 112) << 23) | (man << 13));
    float v = (float)man * 0x1p-24f; /* subnormal: exact in float */
    return sign ? -v : v;
}

START_TEST(f16_rounds_to_nearest_even)
{
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f + 0x1p-11f, 0x3c00},          /* a tie: down to even */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* a tie: up to even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* past the tie */
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},                /* below the midpoint to 2^16 */
        {65520.0f, 0x7c00},                 /* the midpoint: to even, infinity */
        {1e10f, 0x7c00},
        {0x1p-25f, 0x0000},                 /* half the smallest subnormal: to even, zero */
        {0x1p-25f * 1.0001f, 0x0001},
        {0x1.8p-24f, 0x0002},               /* 1.5 subnormal steps: a tie, to even */
        {0x1.ffcp-15f, 0x0400},             /* halfway past the largest subnormal: to even, the smallest normal */
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ck_assert_msg(dt_f32_to_f16(cases[i].f) == cases[i].h, "%a -> 0x%04x, want 0x%04x", (double)cases[i].f,
                      dt_f32_to_f16(cases[i].f), cases[i].h);
    ck_assert(isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))));
    for (uint32_t i = 0; i < NPATTERNS; i++) {
        float f = float_of(pattern(i));
        if (isnan(f)) continue;
        ck_assert_msg(dt_f32_to_f16(f) == f16_reference(f), "%a -> 0x%04x, the reference gives 0x%04x", (double)f,
                      dt_f32_to_f16(f), f16_reference(f));
    }
    for (uint32_t h = 0; h < 65536; h++) { /* and back, every non-NaN pattern */
        float want = f16_decode_reference((uint16_t)h);
        if (isnan(want)) continue;
        ck_assert_msg(memcmp(&(float){dt_f16_to_f32((uint16_t)h)}, &want, sizeof want) == 0, "0x%04x -> %a, want %a",
                      h, (double)dt_f16_to_f32((uint16_t)h), (double)want);
    }
}
END_TEST

/* ---- bf16 ------------------------------------------------------------------ */

/* The nearer of the bf16 values either side of f, ties to the even one,
 * worked out in double (exact for these magnitudes). */
static uint16_t bf16_reference(float f)
{
    uint32_t x = bits_of(f);
    uint16_t lo = (uint16_t)(x >> 16), hi = (uint16_t)(lo + 1);
    if ((x & 0xffffu) == 0) return lo;
    double dlo = fabs((double)f - (double)float_of((uint32_t)lo << 16));
    double dhi = fabs((double)float_of((uint32_t)hi << 16) - (double)f);
    if (isinf(float_of((uint32_t)hi << 16))) /* beyond the largest bf16: halfway to 2^128 and up overflow */
        dhi = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - (double)f);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

START_TEST(bf16_rounds_to_nearest_even)
{
    for (uint32_t i = 0; i < NPATTERNS; i++) {
        float f = float_of(pattern(i));
        if (isnan(f) || isinf(f)) continue;
        ck_assert_msg(dt_f32_to_bf16(f) == bf16_reference(f), "%a -> 0x%04x, want 0x%04x", (double)f,
                      dt_f32_to_bf16(f), bf16_reference(f));
    }
    ck_assert(dt_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);     /* a tie: down to even */
    ck_assert(dt_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82); /* a tie: up to even */
    ck_assert(dt_f32_to_bf16(INFINITY) == 0x7f80 && dt_f32_to_bf16(-INFINITY) == 0xff80);
    ck_assert(isnan(dt_bf16_to_f32(dt_f32_to_bf16(NAN))));
    ck_assert(isnan(dt_bf16_to_f32(dt_f32_to_bf16(float_of(0x7f800001u))))); /* a NaN that truncates to infinity */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) ck_assert(dt_f32_to_bf16(f) == h);
    }
}
END_TEST

/* The loss-scaling test's injected overflow (train/step.c) writes an infinity
 * through dt_act_encode: it must stay one in every type. */
START_TEST(encode_keeps_infinity)
{
    const float src[3] = {INFINITY, -2.5f, 1.0f};
    uint16_t h[3];
    float back[3];
    for (int type = DT_PREC_FP16; type <= DT_PREC_BF16; type++) {
        dt_act_encode(type, h, src, 3);
        dt_act_decode(type, back, h, 3);
        ck_assert(isinf(back[0]) && back[0] > 0);
        ck_assert(back[1] == -2.5f && back[2] == 1.0f);
    }
    ck_assert_int_eq(dt_act_size(DT_PREC_FP32), 4);
    ck_assert_int_eq(dt_act_size(DT_PREC_BF16), 2);
}
END_TEST

/* ---- models trained with 16-bit activations ----------------------------- */

/* Every residual-network layer (batchnorm with and without ReLU, add, route, strided
 * projection, average and global average pooling) and dropout. */
static const struct dt_layer_spec residual[] = {
    {.type = "conv2d", .filters = 8, .kernel = 3, .same = 1},
    {.type = "batchnorm", .activation = DT_ACT_RELU},
    {.type = "conv2d", .filters = 8, .kernel = 3, .same = 1},
    {.type = "batchnorm"},
    {.type = "add", .from = -3, .activation = DT_ACT_RELU},
    {.type = "route", .from = -1},
    {.type = "conv2d", .filters = 16, .kernel = 1, .stride = 2},
    {.type = "batchnorm"},
    {.type = "route", .from = -3},
    {.type = "conv2d", .filters = 16, .kernel = 3, .stride = 2, .same = 1},
    {.type = "batchnorm", .activation = DT_ACT_RELU},
    {.type = "add", .from = -4, .activation = DT_ACT_RELU},
    {.type = "avgpool", .kernel = 2},
    {.type = "dropout", .rate = 0.25f},
    {.type = "global_avgpool"},
    {.type = "dense", .filters = 10},
};

#define STEPS 4

struct run {
    double loss[STEPS];
    float *grad0;  /* the first step's gradient */
    float *update; /* parameters after training minus before */
    size_t n;
};

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Trains model `which` ("cnn", or the residual network above) for STEPS SGD
 * steps on be at precision prec with activations of type act, from fixed
 * parameters and data; the last batch is ragged. */
static struct run train_at(const char *which, const struct dt_backend *be, int prec, int act)
{
    const int batch = 8, steps = STEPS;
    /* the seed CNN on 16x16 images (its layers, a third of its work: Valgrind runs this) */
    struct dt_shape in = !strcmp(which, "cnn") ? (struct dt_shape){16, 16, 1} : (struct dt_shape){12, 12, 3};
    const int npix = (int)dt_shape_size(in);
    struct dt_model m;
    dt_status st = {0};
    char why[256];
    ck_assert_msg(be->setup(1, prec, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(be->set_act_type(act), act);
    int rc = !strcmp(which, "cnn") ? dt_model_build(&m, "cnn", in, 10, 0.5f, &st)
                                   : dt_model_build_specs(&m, which, in, 10, residual,
                                                          (int)(sizeof residual / sizeof *residual), &st);
    ck_assert_msg(rc == DT_OK, "%s", st.msg);
    dt_model_create(&m, be, batch);
    ck_assert_int_eq(m.act_type, act);
    dt_model_init_params(&m, 77);
    struct dt_optim_config cfg;
    dt_optim_defaults(&cfg, "sgd", &st);
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    struct dt_optim o;
    dt_optim_create(&o, be, &cfg, m.nparams);
    struct run r = {.n = m.nparams, .update = malloc(sizeof(float) * m.nparams)};
    memcpy(r.update, m.params, sizeof(float) * m.nparams);
    uint8_t *img = malloc((size_t)batch * npix), lab[8];
    dt_rng data, drop;
    dt_rng_seed(&data, 99, 1);
    dt_rng_seed(&drop, 5, 0);
    for (int s = 0; s < steps; s++) {
        int n = s == steps - 1 ? 5 : batch;
        for (int i = 0; i < n * npix; i++) img[i] = (uint8_t)dt_rng_below(&data, 256);
        for (int i = 0; i < n; i++) lab[i] = (uint8_t)dt_rng_below(&data, 10);
        be->images_to_float(m.act[0], img, (size_t)n * npix);
        dt_model_forward(&m, n, 1, &drop);
        r.loss[s] = dt_model_loss(&m, lab, n, 1.0f / (float)n).loss_sum / n;
        dt_model_backward(&m, n, &drop);
        for (size_t i = 0; i < m.nparams; i++) ck_assert_msg(isfinite(m.grads[i]), "step %d grad %zu", s, i);
        if (s == 0) {
            r.grad0 = malloc(sizeof(float) * m.nparams);
            memcpy(r.grad0, m.grads, sizeof(float) * m.nparams);
        }
        dt_optim_step(&o, m.params, m.grads);
    }
    for (size_t i = 0; i < m.nparams; i++) r.update[i] = m.params[i] - r.update[i];
    dt_optim_free(&o);
    dt_model_free(&m);
    free(img);
    be->set_act_type(DT_PREC_FP32);
    return r;
}

static struct run train(const char *which, const struct dt_backend *be, int act)
{
    return train_at(which, be, DT_PREC_FP32, act);
}

/* How far b is from a: the largest relative difference of the per-sample
 * losses, and the relative L2 differences of the first step's gradient and
 * of the parameters' total update. */
struct gap {
    double loss, grad0, update;
};

static struct gap compare(const struct run *a, const struct run *b)
{
    struct gap g = {0, rel_l2(b->grad0, a->grad0, a->n), rel_l2(b->update, a->update, a->n)};
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(b->loss[s] - a->loss[s]) / a->loss[s];
        if (e > g.loss) g.loss = e;
    }
    return g;
}

static void free_run(struct run *r)
{
    free(r->grad0);
    free(r->update);
}

/* Tolerances, from runs on this machine with a factor of 3 or more to
 * spare (cnn, then residual: fp16 1.0e-5 / 1.0e-4 loss, 1.9e-3 / 2.3e-2
 * first gradient, 1.6e-2 / 3.4e-2 update; bf16 4.2e-4 / 3.9e-4, 3.5e-2 /
 * 4.4e-2, 5.4e-2 / 5.2e-2; Valgrind's AVX2 code paths move them a little).
 * The losses move by what rounding each stored value explains; the
 * gradients move more: where two inputs of a max-pooling window round to
 * the same 16-bit value, the gradient goes to the other one, a whole value
 * moved for one in a few hundred windows. Adding a 16-bit stored tensor to
 * one read as float32 elsewhere, or copying half of one, moves them by
 * order 1. */
static const struct gap tol_fp16 = {5e-3, 8e-2, 0.25}, tol_bf16 = {1e-2, 0.2, 0.4};

static void check_gap(const char *which, const char *type, struct gap g, struct gap tol)
{
    fprintf(stderr, "%s, %s activations against float32: loss %.1e, first gradient %.1e, update %.1e\n", which, type,
            g.loss, g.grad0, g.update);
    ck_assert_msg(g.loss <= tol.loss && g.grad0 <= tol.grad0 && g.update <= tol.update,
                  "%s %s: loss rel %.1e (tol %.0e), first gradient rel L2 %.1e (tol %.0e), update rel L2 %.1e "
                  "(tol %.0e)",
                  which, type, g.loss, tol.loss, g.grad0, tol.grad0, g.update, tol.update);
}

/* The CPU backend without its pool-gradient fold (cpu_conv_poolgrad.c: the
 * same sums as the layers apart, in another order), so that the reference,
 * whose layers stay apart, matches it at float32 bit for bit. */
static const struct dt_backend *cpu_apart(void)
{
    static struct dt_backend be;
    if (!be.name) {
        be = dt_backend_cpu;
        be.conv_poolgrad_fits = NULL;
        be.conv_poolgrad_backward = NULL;
    }
    return &be;
}

static void storage_tracks_float32(const char *which)
{
    struct run f32 = train(which, cpu_apart(), DT_PREC_FP32);
    struct run same = train(which, dt_act16_ref(), DT_PREC_FP32);
    struct run h = train(which, dt_act16_ref(), DT_PREC_FP16);
    struct run b = train(which, dt_act16_ref(), DT_PREC_BF16);
    struct gap gs = compare(&f32, &same), gh = compare(&f32, &h), gb = compare(&f32, &b);
    ck_assert_msg(gs.loss == 0 && gs.grad0 == 0 && gs.update == 0,
                  "%s: the reference backend at float32 differs from the CPU backend", which);
    check_gap(which, "fp16", gh, tol_fp16);
    check_gap(which, "bf16", gb, tol_bf16);
    ck_assert_msg(gh.grad0 > 0 && gb.grad0 > 0, "%s: 16-bit storage changed nothing: nothing was rounded", which);
    ck_assert_msg(gb.grad0 > 1.3 * gh.grad0,
                  "%s: bf16 (8-bit mantissa) should move the gradient more than fp16 (11 bits): %.1e vs %.1e", which,
                  gb.grad0, gh.grad0);
    free_run(&f32);
    free_run(&same);
    free_run(&h);
    free_run(&b);
}

/* The CPU backend's own bf16 storage (--precision bf16: its kernels read
 * and write bf16, its convolutions too) against the reference's, which
 * stores bf16 around the CPU's float kernels at the same precision. Both
 * compute in float and round each stored value once, so they differ only
 * where oneDNN's bf16-output convolution sums in another order than its
 * float-output one, and by the max-pooling ties that follows: far less
 * than bf16 storage moves a run from float32 (tol_bf16, measured ~5e-2). */
static const struct gap tol_cpu_bf16 = {2e-3, 5e-2, 5e-2};

static void cpu_storage_matches_reference(const char *which)
{
    char why[256];
    if (dt_backend_cpu.setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        fprintf(stderr, "SKIP %s: CPU bf16 storage not checked: %s\n", which, why);
        return;
    }
    struct run ref = train_at(which, dt_act16_ref(), DT_PREC_BF16, DT_PREC_BF16);
    struct run cpu = train_at(which, &dt_backend_cpu, DT_PREC_BF16, DT_PREC_BF16);
    struct gap g = compare(&ref, &cpu);
    fprintf(stderr, "%s, CPU bf16 storage against the reference's: loss %.1e, first gradient %.1e, update %.1e\n",
            which, g.loss, g.grad0, g.update);
    ck_assert_msg(g.loss <= tol_cpu_bf16.loss && g.grad0 <= tol_cpu_bf16.grad0 && g.update <= tol_cpu_bf16.update,
                  "%s: CPU bf16 storage vs reference: loss %.1e, first gradient %.1e, update %.1e", which, g.loss,
                  g.grad0, g.update);
    free_run(&ref);
    free_run(&cpu);
    dt_backend_cpu.setup(1, DT_PREC_FP32, why, sizeof why);
}

START_TEST(cnn_cpu_bf16_storage) { cpu_storage_matches_reference("cnn"); }
END_TEST

START_TEST(residual_cpu_bf16_storage) { cpu_storage_matches_reference("residual"); }
END_TEST

START_TEST(cnn_with_16_bit_activations) { storage_tracks_float32("cnn"); }
END_TEST

START_TEST(residual_with_16_bit_activations) { storage_tracks_float32("residual"); }
END_TEST

int main(void)
{
    Suite *s = suite_create("16-bit activations");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, f16_round_trip_is_exact);
    tcase_add_test(tc, f16_rounds_to_nearest_even);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, encode_keeps_infinity);
    suite_add_tcase(s, tc);
    tc = tcase_create("training");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cnn_with_16_bit_activations);
    tcase_add_test(tc, residual_with_16_bit_activations);
    tcase_add_test(tc, cnn_cpu_bf16_storage);
    tcase_add_test(tc, residual_cpu_bf16_storage);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
