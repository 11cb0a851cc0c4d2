/* check_optim.c: unit tests for the optimizers (src/optim/) on the CPU
 * backend.
 *
 * Each test runs a few steps on a small block with fixed gradients and
 * compares with the same update computed here, in double, from the formulas
 * Keras 3 documents (adam, sgd) or PyTorch's torch.optim.AdamW computes
 * (adamw), written out below, not taken from src/. Parameters start near
 * zero so that float32 storage of the parameter does not swamp the ~1e-3
 * updates being checked: the comparison is relative to the total update,
 * which is what the optimizer computes. Gradient clipping's arithmetic
 * (torch.nn.utils.clip_grad_norm_) is checked on the backend's sum of
 * squares and scaling. */
#include "config.h"

#include "ck_fast.h"
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

/* torch.optim.AdamW (torch/optim/adamw.py, the single-tensor loop), in
 * double, per step t with lr, wd, b1, b2, eps:
 *   p *= 1 - lr wd                                  (decayed elements only)
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The optimizer's block is [LO, LO + NB) of an NM-parameter model; the
 * decayed ranges are given in model offsets, out of order, overlapping,
 * touching and running past the block's ends. */
enum { NM = 16, LO = 3, NB = 10 };

/* Errors are measured against how far each element moved (the decays and
 * the Adam steps added up, as they may cancel in the net update). A step
 * rounds the parameter ~4 times (the decay's product and difference, the
 * Adam step's quotient and difference), each <= 2^-24 |p|; with lr wd =
 * 0.05 a decayed element moves >= 0.05 |p| a step, so each rounding is
 * <= 1.2e-6 of one step's movement, and the three steps' ~12 stay under
 * 5e-6 (the Adam step's own ~8 roundings are 2^-24 of it). Measured: 3e-7.
 * A lost or misplaced decay, Keras's eps placement or a wrong bias
 * correction moves some element by >= 1e-2 of its movement. */
#define ADAMW_TOL 5e-6

START_TEST(adamw_torch_masked)
{
    static const size_t off[] = {12, 4, 0, 5, 2}, len[] = {6, 2, 4, 1, 1};
    /* The model's decayed set is [0, 6) and [12, 16): in the block, [0, 3) and [9, 10). */
    static const int decayed[NB] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 1};
    /* Block element 1: decayed, no gradient (moves by the decay alone);
     * 5: neither (must not move); 7: a gradient far below eps, where
     * PyTorch's eps (added to sqrt(v_hat)) and Keras's (to sqrt(v))
     * differ; 9: decayed, past a touching pair of ranges' merge. */
    static const float q0[NB] = {0.05f, 0.04f, -0.03f, 0.02f, -0.05f, 0.01f, 0.03f, 0.0f, -0.02f, 0.06f};
    static const float g[STEPS][NB] = {
        {0.1f, 0.0f, -0.3f, 0.2f, 0.05f, 0.0f, -0.1f, 1e-9f, 0.4f, -0.2f},
        {0.3f, 0.0f, 0.1f, -0.1f, 0.02f, 0.0f, -0.2f, 1e-9f, 0.3f, 0.1f},
        {-0.2f, 0.0f, 0.2f, 0.05f, -0.4f, 0.0f, 0.1f, -1e-9f, -0.1f, 0.3f},
    };
    struct dt_optim_config cfg;
    struct dt_optim o;
    dt_status st = {0};
    float p[NB];
    ck_assert_int_eq(dt_optim_defaults(&cfg, "adamw", &st), DT_OK);
    cfg.lr = 0.01f;         /* not the defaults, so hard-coded ones cannot pass */
    cfg.weight_decay = 5.0f;
    dt_optim_create(&o, be, &cfg, NB);
    dt_optim_set_decay(&o, LO, off, len, 5);
    ck_assert_int_eq(o.ndecay, 2);
    ck_assert(o.decay_off[0] == 0 && o.decay_len[0] == 3 && o.decay_off[1] == 9 && o.decay_len[1] == 1);
    memcpy(p, q0, sizeof p);
    const double lr = (double)cfg.lr, wd = (double)cfg.weight_decay, b1 = (double)cfg.beta1,
                 b2 = (double)cfg.beta2, eps = (double)cfg.eps;
    double m[NB] = {0}, v[NB] = {0}, want[NB], keras[NB], moved[NB] = {0};
    for (int i = 0; i < NB; i++) want[i] = keras[i] = (double)q0[i];
    for (int t = 1; t <= STEPS; t++) {
        dt_optim_step(&o, p, g[t - 1]);
        const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int i = 0; i < NB; i++) {
            const double gi = (double)g[t - 1][i];
            if (decayed[i]) {
                moved[i] += fabs(lr * wd * want[i]);
                want[i] *= 1.0 - lr * wd;
                keras[i] *= 1.0 - lr * wd;
            }
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            const double step = lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
            want[i] -= step;
            moved[i] += fabs(step);
            keras[i] -= lr * sqrt(bc2) / bc1 * m[i] / (sqrt(v[i]) + eps);
        }
    }
    /* Relative to how far the parameter moved, decay and Adam steps apart
     * (they may cancel in the net update, their roundings do not). */
    double worst = 0.0;
    for (int i = 0; i < NB; i++) {
        const double err = fabs((double)p[i] - want[i]);
        if (moved[i] > 0.0) worst = fmax(worst, err / moved[i]);
        ck_assert_msg(err <= ADAMW_TOL * moved[i], "adamw: p[%d] = %.10g, want %.10g (moved %.3g, rel err %.3g)", i,
                      (double)p[i], want[i], moved[i], moved[i] > 0.0 ? err / moved[i] : err);
    }
    printf("# %-12s max error relative to the movement: %.2e (tolerance %.0e)\n", "adamw", worst, ADAMW_TOL);
    ck_assert(p[5] == q0[5]);
    ck_assert(p[1] != q0[1]); /* moved by the decay alone, checked above */
    /* The tiny gradient tells PyTorch's eps from Keras's. */
    ck_assert_msg(fabs(keras[7] - want[7]) > 100.0 * ADAMW_TOL * fabs(want[7]), "torch %g vs keras %g", want[7],
                  keras[7]);
    ck_assert_int_eq(o.step, STEPS);
    dt_optim_free(&o);
}
END_TEST

/* The decayed ranges of a block: clipped to it, sorted, merged where they
 * touch or overlap; none at all without a call or outside the block. */
START_TEST(decay_ranges)
{
    struct dt_optim_config cfg;
    struct dt_optim o;
    dt_status st = {0};
    ck_assert_int_eq(dt_optim_defaults(&cfg, "adamw", &st), DT_OK);
    dt_optim_create(&o, be, &cfg, 100);
    ck_assert_int_eq(o.ndecay, 0);
    static const size_t off[] = {500, 130, 100, 155, 150, 0}, len[] = {10, 20, 10, 10, 5, 50};
    dt_optim_set_decay(&o, 100, off, len, 6); /* the block is [100, 200) of the model */
    ck_assert_int_eq(o.ndecay, 2);            /* [100, 110) and [130, 165); 0..50 and 500.. outside */
    ck_assert(o.decay_off[0] == 0 && o.decay_len[0] == 10);
    ck_assert(o.decay_off[1] == 30 && o.decay_len[1] == 35);
    dt_optim_set_decay(&o, 0, off, len, 0); /* again: replaces */
    ck_assert_int_eq(o.ndecay, 0);
    static const size_t all_off[] = {0}, all_len[] = {1000};
    dt_optim_set_decay(&o, 100, all_off, all_len, 1);
    ck_assert(o.ndecay == 1 && o.decay_off[0] == 0 && o.decay_len[0] == 100);
    dt_optim_free(&o);
}
END_TEST

/* torch.nn.utils.clip_grad_norm_(max_norm): total_norm = the L2 norm of
 * every gradient together; clip_coef = max_norm / (total_norm + 1e-6),
 * applied when below 1. Here a 1000-float gradient cut into three parts (as
 * shards or stages hold it): the parts' sums of squares add up to the whole
 * one, and the scaled gradient has norm max_norm (to the 1e-6). */
START_TEST(clip_arithmetic)
{
    enum { NG = 1000 };
    float *gr = malloc(sizeof(float) * NG), *orig = malloc(sizeof(float) * NG);
    double sq = 0.0;
    for (int i = 0; i < NG; i++) {
        gr[i] = orig[i] = (float)sin(0.37 * i) * (i % 7 == 0 ? 3.0f : 0.25f);
        sq += (double)gr[i] * (double)gr[i];
    }
    /* Summed in double: within a float32 rounding of each square (1e-7). */
    const double whole = be->sum_squares(gr, NG);
    ck_assert_msg(fabs(whole - sq) <= 1e-7 * sq, "sum_squares %.17g, want %.17g", whole, sq);
    const double parts = be->sum_squares(gr, 333) + be->sum_squares(gr + 333, 334) + be->sum_squares(gr + 667, 333);
    ck_assert(fabs(parts - sq) <= 1e-7 * sq);
    ck_assert(be->sum_squares(gr, 0) == 0.0);
    const double norm = sqrt(sq), max_norm = 1.5;
    ck_assert(norm > 10.0 * max_norm); /* the case is a clipping one */
    const double f = dt_clip_factor(norm, max_norm);
    ck_assert(fabs(f - max_norm / (norm + 1e-6)) <= 1e-15 * f);
    be->scale(gr, NG, (float)f);
    for (int i = 0; i < NG; i++) ck_assert(gr[i] == orig[i] * (float)f);
    const double after = sqrt(be->sum_squares(gr, NG));
    ck_assert_msg(fabs(after - max_norm) <= 1e-6 * max_norm, "norm after clipping %.9g, want %g", after, max_norm);
    /* Below the limit nothing changes: the factor is exactly 1. */
    ck_assert(dt_clip_factor(norm, 2.0 * norm) == 1.0);
    ck_assert(dt_clip_factor(0.0, 1.0) == 1.0);
    /* At the limit torch still scales, by max_norm / (max_norm + 1e-6). */
    ck_assert(dt_clip_factor(max_norm, max_norm) < 1.0);
    free(gr);
    free(orig);
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

    ck_assert_int_eq(dt_optim_defaults(&cfg, "adamw", &st), DT_OK); /* torch.optim.AdamW's */
    ck_assert_str_eq(cfg.name, "adamw");
    ck_assert(cfg.lr == 1e-3f);
    ck_assert(cfg.beta1 == 0.9f && cfg.beta2 == 0.999f);
    ck_assert(cfg.eps == 1e-8f);
    ck_assert(cfg.weight_decay == 0.01f);

    ck_assert_int_eq(dt_optim_nslots("adam", 0.0f), 2);
    ck_assert_int_eq(dt_optim_nslots("adamw", 0.0f), 2);
    ck_assert_int_eq(dt_optim_nslots("sgd", 0.9f), 1);
    ck_assert_int_eq(dt_optim_nslots("sgd", 0.0f), 0);
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
    static const char *const names[] = {"adam", "adamw", "sgd"};
    for (int k = 0; k < 3; k++) {
        struct dt_optim_config cfg;
        struct dt_optim o;
        dt_status st = {0};
        float p = 1.0f, g = 1.0f;
        ck_assert_int_eq(dt_optim_defaults(&cfg, names[k], &st), DT_OK);
        cfg.momentum = 0.9f;
        dt_optim_create(&o, be, &cfg, 0);
        static const size_t off[] = {0}, len[] = {10};
        dt_optim_set_decay(&o, 0, off, len, 1);
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
    tcase_add_test(tc, adamw_torch_masked);
    tcase_add_test(tc, decay_ranges);
    tcase_add_test(tc, clip_arithmetic);
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
