/* check_optim.c: unit tests for the optimizers (src/optim/) on the CPU
 * backend.
 *
 * Each test runs a few steps on a 4-element block with fixed gradients and
 * compares with the same update computed here, in double, from the formulas
 * Keras 3 documents (written out below, not taken from src/). Parameters
 * start near zero so that float32 storage of the parameter does not swamp
 * the ~1e-3 updates being checked: the comparison is relative to the total
 * update, which is what the optimizer computes. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "optim/loss_scale.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "runtime/status.h"

static const struct dt_backend *const be = &dt_backend_cpu;

enum { N = 4, STEPS = 3 };

/* Element 2 gets no gradient (must not move); element 3 a gradient far
 * below eps, where Keras's "eps added to sqrt(v) before bias correction"
 * and the textbook "eps added to sqrt(v_hat)" differ by 15x. */
static const float p0[N] = {0.0f, 1e-3f, -2e-3f, 0.0f};
static const float grads[STEPS][N] = {
    {0.1f, -0.2f, 0.0f, 1e-7f},
    {0.3f, -0.05f, 0.0f, 1e-7f},
    {-0.2f, -0.1f, 0.0f, -1e-7f},
};

/* Per step the float32 update goes through ~8 roundings (m, v, alpha,
 * sqrt, +eps, *, /, the parameter itself), each <= 2^-24 relative, so the
 * step is within ~5e-7 of exact in the worst case and errors of three
 * steps partly cancel; measured on these fixed inputs: <= 8e-8. 1e-6 keeps
 * a >10x margin; every mistake worth catching (a swapped beta, an
 * off-by-one t, eps in the wrong place, a lost momentum term) moves the
 * result by >= 1e-3 relative. */
#define UPDATE_TOL 1e-6

/* |got - want| <= tol * |want - start| per element, i.e. relative to the
 * update; an element whose update is 0 must not move at all. */
static void check_updates(const char *what, const float *got, const double *want, double tol)
{
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double upd = fabs(want[i] - (double)p0[i]), err = fabs((double)got[i] - want[i]);
        if (upd > 0.0) worst = fmax(worst, err / upd);
        ck_assert_msg(err <= tol * upd, "%s: p[%d] = %.10g, want %.10g (update %.3g, rel err %.3g)", what,
                      i, (double)got[i], want[i], upd, upd > 0.0 ? err / upd : err);
    }
    printf("# %-12s max error relative to the update: %.2e (tolerance %.0e)\n", what, worst, tol);
}

START_TEST(adam_three_steps)
{
    struct dt_optim_config cfg;
    struct dt_optim o;
    dt_status st = {0};
    float p[N];
    ck_assert_int_eq(dt_optim_defaults(&cfg, "adam", &st), DT_OK);
    dt_optim_create(&o, be, &cfg, N);
    memcpy(p, p0, sizeof p);

    /* Keras 3 Adam, with the hyperparameters as the optimizer holds them
     * (float32, widened):
     *   m_t = b1 m + (1 - b1) g,   v_t = b2 v + (1 - b2) g^2
     *   alpha_t = lr sqrt(1 - b2^t) / (1 - b1^t)
     *   p_t = p - alpha_t m_t / (sqrt(v_t) + eps)
     * and, for contrast, the textbook form with bias-corrected m, v and
     * eps added to sqrt(v_hat). */
    const double lr = (double)cfg.lr, b1 = (double)cfg.beta1, b2 = (double)cfg.beta2, eps = (double)cfg.eps;
    double m[N] = {0}, v[N] = {0}, want[N], textbook[N];
    for (int i = 0; i < N; i++) want[i] = textbook[i] = (double)p0[i];
    for (int t = 1; t <= STEPS; t++) {
        dt_optim_step(&o, p, grads[t - 1]);
        double alpha = lr * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t));
        for (int i = 0; i < N; i++) {
            double g = (double)grads[t - 1][i];
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            want[i] -= alpha * m[i] / (sqrt(v[i]) + eps);
            double mh = m[i] / (1.0 - pow(b1, t)), vh = v[i] / (1.0 - pow(b2, t));
            textbook[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    ck_assert_int_eq(o.step, STEPS);
    check_updates("adam", p, want, UPDATE_TOL);
    ck_assert(p[2] == p0[2]);
    /* The tiny-gradient element separates the two forms: the test could not
     * pass with the textbook update. */
    ck_assert_msg(fabs(textbook[3] - want[3]) > 100.0 * UPDATE_TOL * fabs(want[3] - (double)p0[3]),
                  "keras %g vs textbook %g", want[3], textbook[3]);
    dt_optim_free(&o);
}
END_TEST

START_TEST(sgd_plain)
{
    struct dt_optim_config cfg;
    struct dt_optim o;
    dt_status st = {0};
    float p[N];
    ck_assert_int_eq(dt_optim_defaults(&cfg, "sgd", &st), DT_OK);
    dt_optim_create(&o, be, &cfg, N);
    memcpy(p, p0, sizeof p);
    /* p -= lr * g */
    double want[N];
    for (int i = 0; i < N; i++) want[i] = (double)p0[i];
    for (int t = 0; t < STEPS; t++) {
        dt_optim_step(&o, p, grads[t]);
        for (int i = 0; i < N; i++) want[i] -= (double)cfg.lr * (double)grads[t][i];
    }
    check_updates("sgd", p, want, UPDATE_TOL);
    dt_optim_free(&o);
}
END_TEST

START_TEST(sgd_momentum)
{
    struct dt_optim_config cfg;
    struct dt_optim o;
    dt_status st = {0};
    float p[N];
    ck_assert_int_eq(dt_optim_defaults(&cfg, "sgd", &st), DT_OK);
    cfg.momentum = 0.9f;
    cfg.lr = 0.05f; /* not the default, so a hard-coded lr cannot pass */
    dt_optim_create(&o, be, &cfg, N);
    memcpy(p, p0, sizeof p);
    /* Keras: v = momentum v - lr g; p += v (v starts at 0) */
    double want[N], vel[N] = {0}, plain[N];
    for (int i = 0; i < N; i++) want[i] = plain[i] = (double)p0[i];
    for (int t = 0; t < STEPS; t++) {
        dt_optim_step(&o, p, grads[t]);
        for (int i = 0; i < N; i++) {
            vel[i] = (double)cfg.momentum * vel[i] - (double)cfg.lr * (double)grads[t][i];
            want[i] += vel[i];
            plain[i] -= (double)cfg.lr * (double)grads[t][i];
        }
    }
    check_updates("sgd momentum", p, want, UPDATE_TOL);
    /* momentum must matter here: element 0's path differs from plain SGD */
    ck_assert(fabs(plain[0] - want[0]) > 0.1 * fabs(want[0] - (double)p0[0]));
    dt_optim_free(&o);
}
END_TEST

START_TEST(defaults)
{
    struct dt_optim_config cfg;
    dt_status st = {0};
    ck_assert_int_eq(dt_optim_defaults(&cfg, "adam", &st), DT_OK);
    ck_assert_str_eq(cfg.name, "adam");
    ck_assert(cfg.lr == 1e-3f);
    ck_assert(cfg.beta1 == 0.9f);
    ck_assert(cfg.beta2 == 0.999f);
    ck_assert(cfg.eps == 1e-7f);
    ck_assert(cfg.momentum == 0.0f);

    ck_assert_int_eq(dt_optim_defaults(&cfg, "sgd", &st), DT_OK);
    ck_assert_str_eq(cfg.name, "sgd");
    ck_assert(cfg.lr == 1e-2f);
    ck_assert(cfg.momentum == 0.0f); /* Keras SGD's default */
}
END_TEST

START_TEST(unknown_name)
{
    struct dt_optim_config cfg;
    dt_status st = {0};
    ck_assert_int_eq(dt_optim_defaults(&cfg, "rmsprop", &st), DT_EUSAGE);
    ck_assert_int_eq(st.code, DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "rmsprop") != NULL, "message does not name the optimizer: %s", st.msg);
}
END_TEST

/* A rank whose ZeRO shard is empty still steps: nothing to do, no crash. */
START_TEST(empty_block)
{
    static const char *const names[] = {"adam", "sgd"};
    for (int k = 0; k < 2; k++) {
        struct dt_optim_config cfg;
        struct dt_optim o;
        dt_status st = {0};
        float p = 1.0f, g = 1.0f;
        ck_assert_int_eq(dt_optim_defaults(&cfg, names[k], &st), DT_OK);
        cfg.momentum = 0.9f;
        dt_optim_create(&o, be, &cfg, 0);
        dt_optim_step(&o, &p, &g);
        ck_assert(p == 1.0f);
        dt_optim_free(&o);
    }
}
END_TEST

/* Keras' LossScaleOptimizer: 2^15 to start, halve and skip on overflow,
 * double after 2000 clean steps in a row (an overflow restarts the count). */
START_TEST(loss_scale_dynamic)
{
    struct dt_loss_scale ls;
    dt_loss_scale_init(&ls, -1.0f);
    ck_assert(ls.on && ls.dynamic);
    ck_assert(ls.scale == 32768.0f);
    ck_assert_int_eq(dt_loss_scale_update(&ls, 0), 0);
    ck_assert(ls.scale == 16384.0f);
    ck_assert_int_eq(ls.skipped, 1);
    for (int i = 0; i < 1999; i++) ck_assert_int_eq(dt_loss_scale_update(&ls, 1), 1);
    ck_assert(ls.scale == 16384.0f); /* one clean step short */
    ck_assert_int_eq(dt_loss_scale_update(&ls, 1), 1);
    ck_assert(ls.scale == 32768.0f);
    for (int i = 0; i < 1500; i++) dt_loss_scale_update(&ls, 1);
    ck_assert_int_eq(dt_loss_scale_update(&ls, 0), 0); /* restarts the count */
    ck_assert(ls.scale == 16384.0f);
    for (int i = 0; i < 1999; i++) dt_loss_scale_update(&ls, 1);
    ck_assert(ls.scale == 16384.0f);
    ck_assert_int_eq(ls.skipped, 2);
    for (int i = 0; i < 200; i++) dt_loss_scale_update(&ls, 0); /* bounded below */
    ck_assert(ls.scale > 0.0f && ls.scale <= 0x1p-24f);
}
END_TEST

START_TEST(loss_scale_fixed_and_off)
{
    struct dt_loss_scale ls;
    dt_loss_scale_init(&ls, 128.0f);
    ck_assert(ls.on && !ls.dynamic);
    ck_assert_int_eq(dt_loss_scale_update(&ls, 0), 0); /* skipped, scale kept */
    for (int i = 0; i < 2500; i++) ck_assert_int_eq(dt_loss_scale_update(&ls, 1), 1);
    ck_assert(ls.scale == 128.0f);
    ck_assert_int_eq(ls.skipped, 1);
    dt_loss_scale_init(&ls, 0.0f);
    ck_assert(!ls.on);
    ck_assert(ls.scale == 1.0f);
    ck_assert_int_eq(dt_loss_scale_update(&ls, 0), 1); /* off: never skips */
}
END_TEST

/* The backend's unscale: all finite -> scaled, any NaN/Inf -> untouched. */
START_TEST(unscale_check)
{
    float g[37], orig[37];
    for (int i = 0; i < 37; i++) g[i] = orig[i] = (float)(i - 18) * 0.25f;
    ck_assert_int_eq(be->unscale_check(g, 37, 0.5f), 1);
    for (int i = 0; i < 37; i++) ck_assert(g[i] == orig[i] * 0.5f);
    for (int bad = 0; bad < 3; bad++) {
        memcpy(g, orig, sizeof g);
        g[bad * 17] = bad == 1 ? NAN : bad == 0 ? INFINITY : -INFINITY;
        ck_assert_int_eq(be->unscale_check(g, 37, 0.5f), 0);
        for (int i = 0; i < 37; i++)
            if (i != bad * 17) ck_assert(g[i] == orig[i]);
    }
}
END_TEST

/* Learning-rate schedules against the formulas written out here. */
START_TEST(lr_schedules)
{
    const int bounds[2] = {2, 4}; /* 0-based epochs 2 and 4 */
    struct dt_lr_schedule c = {.kind = DT_LR_CONSTANT, .peak = 0.01f, .steps_per_epoch = 10, .total = 60};
    ck_assert(dt_lr_at(&c, 0) == 0.01f && dt_lr_at(&c, 59) == 0.01f);
    struct dt_lr_schedule st = {.kind = DT_LR_STEP, .peak = 1.0f, .factor = 0.1f, .steps_per_epoch = 10, .total = 60,
                                .nboundaries = 2, .boundaries = bounds};
    ck_assert(dt_lr_at(&st, 19) == 1.0f);                       /* epoch 1 */
    ck_assert(fabsf(dt_lr_at(&st, 20) - 0.1f) < 1e-7f);         /* epoch 2 */
    ck_assert(fabsf(dt_lr_at(&st, 39) - 0.1f) < 1e-7f);
    ck_assert(fabsf(dt_lr_at(&st, 40) - 0.01f) < 1e-8f);        /* epoch 4 */
    struct dt_lr_schedule cs = {.kind = DT_LR_COSINE, .peak = 0.002f, .min_lr = 0.0002f, .warmup = 10,
                                .start = 0.001f, .steps_per_epoch = 10, .total = 40};
    /* warm-up: linear from start, the peak at step warmup - 1 */
    ck_assert(fabsf(dt_lr_at(&cs, 0) - (0.001f + 0.001f * 1.0f / 10.0f)) < 1e-9f);
    ck_assert(fabsf(dt_lr_at(&cs, 9) - 0.002f) < 1e-9f);
    for (long k = 10; k < 40; k++) {
        double x = (double)(k - 10) / 30.0, want = 0.0002 + 0.0018 * 0.5 * (1.0 + cos(acos(-1.0) * x));
        ck_assert(fabs((double)dt_lr_at(&cs, k) - want) < 1e-9);
    }
    ck_assert(fabsf(dt_lr_at(&cs, 500) - 0.0002f) < 1e-9f); /* past the end: the floor */
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, adam_three_steps);
    tcase_add_test(tc, sgd_plain);
    tcase_add_test(tc, sgd_momentum);
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, unknown_name);
    tcase_add_test(tc, empty_block);
    tcase_add_test(tc, loss_scale_dynamic);
    tcase_add_test(tc, loss_scale_fixed_and_off);
    tcase_add_test(tc, unscale_check);
    tcase_add_test(tc, lr_schedules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(optim_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
