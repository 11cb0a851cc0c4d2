/* check_transformer_ops.c: the CPU backend's transformer ops (backend.h's
 * embed, layernorm, gelu, linear_t and token_xent; AdamW, sum_squares and
 * scale), called through dt_backend_cpu's table.
 *
 * Forward passes are checked against plain double-precision loops written
 * here; gradients against central differences of a scalar objective, L =
 * sum(out * R) with a fixed random R (the summed loss itself for
 * token_xent), on float32 activations. These ops are smooth, so a central
 * difference with step h has truncation error O(h^2) ~ 1e-6 and rounding
 * error ~ (float rounding of the touched outputs, ~1e-7) / 2h ~ 1e-4 of the
 * gradient's scale at h = 1e-3: FD_OPS_TOL = 2e-3 covers that, and every
 * check also shows that 1.1 x the gradient fails it. The bf16 activations
 * (--precision bf16) are checked against the float32 results on the same,
 * bf16-rounded, inputs, with tolerances of a bf16 rounding (2^-8). */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "runtime/half.h"
#include "runtime/rng.h"

#include "layer_check.h"

#define FD_OPS_TOL 2e-3
#define FD_OPS_STEP 1e-3f
/* One bf16 rounding: half a unit in the 8th bit, at most 2^-8 of the value. */
#define BF16_TOL (1.0 / 256.0)

/* Sizes: C and V are not multiples of the kernels' 16-lane blocks, so the
 * remainder loops run too. */
enum { N = 2, T = 5, C = 40, V = 37, ROWS = N * T };

static void setup_fp32(void)
{
    char why[256];
    ck_assert_msg(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(be->set_act_type(DT_PREC_FP32), DT_PREC_FP32);
}

/* 1 when bf16 activations are on; 0 (and a note) where this CPU has none. */
static int setup_bf16(const char *what)
{
    char why[256];
    if (be->setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        printf("# SKIP %s in bf16: %s\n", what, why);
        return 0;
    }
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16);
    return 1;
}

static float *randv(size_t n, dt_rng *r, float lo, float hi)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    fill_uniform(x, n, r, lo, hi);
    return x;
}

static float *copyv(const float *x, size_t n)
{
    float *y = malloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
}

static uint16_t *to_bf16(const float *x, size_t n)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_bf16(x[i]);
    return h;
}

static float *from_bf16(const uint16_t *h, size_t n)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = dt_bf16_to_f32(h[i]);
    return x;
}

static void tokens_fill(int32_t *tok, dt_rng *r)
{
    for (int i = 0; i < N * (T + 1); i++) tok[i] = (int32_t)dt_rng_below(r, V);
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* Central differences of f over every coordinate of x, against an. */
static void fd_check(const char *what, objective_fn f, void *ctx, float *x, const float *an, size_t n)
{
    struct fd_stats s = fd_compare(f, ctx, x, an, NULL, n, FD_OPS_STEP);
    ck_assert_msg(s.maxan > 1e-3, "%s: analytic gradient is ~0 everywhere (max %g)", what, s.maxan);
    double rel = s.maxerr / s.maxan, wrong = s.maxwrong / s.maxan;
    printf("# %-28s fd rel err %.2e (1.1x grad: %.2e), %d probes\n", what, rel, wrong, s.checked);
    ck_assert_msg(rel < FD_OPS_TOL, "%s: |fd - analytic| / max|analytic| = %.3e", what, rel);
    ck_assert_msg(wrong > FD_OPS_TOL, "%s: the check cannot tell a 10%% gradient error (%.3e)", what, wrong);
}

/* max |a - b| / max |b|: norm-wise relative difference */
static double normwise(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0.0 ? d / m : d;
}

/* Element-wise: every |a - b| <= rel |b| + abs_tol. */
static void assert_close(const char *what, const float *a, const float *b, size_t n, double rel, double abs_tol)
{
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        ck_assert_msg(d <= rel * fabs((double)b[i]) + abs_tol, "%s[%zu] = %.9g, want %.9g (diff %.3g)", what, i,
                      (double)a[i], (double)b[i], d);
    }
}

/* ---- embedding ----------------------------------------------------------- */

struct embed_ctx {
    int32_t tok[N * (T + 1)];
    float *wte, *wpe, *out, *R;
};

static double embed_objective(void *p, uint64_t *sig)
{
    struct embed_ctx *e = p;
    *sig = 0;
    be->embed_forward(e->out, e->tok, e->wte, e->wpe, N, T, C);
    return dot(e->out, e->R, (size_t)ROWS * C);
}

START_TEST(embed_forward_backward)
{
    setup_fp32();
    dt_rng r;
    dt_rng_seed(&r, 11, 0);
    struct embed_ctx e;
    tokens_fill(e.tok, &r);
    e.tok[2] = e.tok[T + 2] = e.tok[0]; /* one token three times: the scatter adds */
    e.wte = randv((size_t)V * C, &r, -1, 1);
    e.wpe = randv((size_t)T * C, &r, -1, 1);
    e.out = randv((size_t)ROWS * C, &r, -1, 1);
    e.R = randv((size_t)ROWS * C, &r, -1, 1);

    be->embed_forward(e.out, e.tok, e.wte, e.wpe, N, T, C);
    for (int s = 0; s < N; s++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < C; j++) {
                float want = e.wte[(size_t)e.tok[s * (T + 1) + t] * C + j] + e.wpe[(size_t)t * C + j];
                ck_assert_msg(e.out[((size_t)s * T + t) * C + j] == want, "embed out[%d][%d][%d]", s, t, j);
            }

    /* dwte accumulates onto what is there; dwpe is overwritten */
    float *base = randv((size_t)V * C, &r, -1, 1), *dwte = copyv(base, (size_t)V * C);
    float *dwpe = malloc(sizeof(float) * T * C);
    for (int i = 0; i < T * C; i++) dwpe[i] = NAN;
    be->embed_backward(dwte, dwpe, e.R, e.tok, N, T, C);
    double *ref = calloc((size_t)V * C, sizeof(double));
    for (int s = 0; s < N; s++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < C; j++)
                ref[(size_t)e.tok[s * (T + 1) + t] * C + j] += (double)e.R[((size_t)s * T + t) * C + j];
    for (size_t i = 0; i < (size_t)V * C; i++)
        ck_assert_msg(fabs((double)dwte[i] - ((double)base[i] + ref[i])) < 1e-6, "dwte[%zu]", i);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < C; j++) {
            double want = 0.0;
            for (int s = 0; s < N; s++) want += (double)e.R[((size_t)s * T + t) * C + j];
            ck_assert_msg(fabs((double)dwpe[t * C + j] - want) < 1e-6, "dwpe[%d][%d]", t, j);
        }

    /* the gradients as finite differences (dwte from zero) */
    memset(dwte, 0, sizeof(float) * V * C);
    be->embed_backward(dwte, dwpe, e.R, e.tok, N, T, C);
    fd_check("embed d/dwte", embed_objective, &e, e.wte, dwte, (size_t)V * C);
    fd_check("embed d/dwpe", embed_objective, &e, e.wpe, dwpe, (size_t)T * C);
    free(base); free(dwte); free(dwpe); free(ref);
    free(e.wte); free(e.wpe); free(e.out); free(e.R);
}
END_TEST

START_TEST(embed_bf16)
{
    dt_rng r;
    dt_rng_seed(&r, 12, 0);
    int32_t tok[N * (T + 1)];
    tokens_fill(tok, &r);
    float *wte = randv((size_t)V * C, &r, -1, 1), *wpe = randv((size_t)T * C, &r, -1, 1);
    float *dout = randv((size_t)ROWS * C, &r, -1, 1), *out = malloc(sizeof(float) * ROWS * C);
    float *dwte = calloc((size_t)V * C, sizeof(float)), *dwpe = malloc(sizeof(float) * T * C);
    round_bf16(dout, (size_t)ROWS * C);
    setup_fp32();
    be->embed_forward(out, tok, wte, wpe, N, T, C);
    be->embed_backward(dwte, dwpe, dout, tok, N, T, C);
    if (setup_bf16("embed")) {
        uint16_t *o16 = malloc(sizeof(uint16_t) * ROWS * C), *d16 = to_bf16(dout, (size_t)ROWS * C);
        float *dwte16 = calloc((size_t)V * C, sizeof(float)), *dwpe16 = malloc(sizeof(float) * T * C);
        be->embed_forward(o16, tok, wte, wpe, N, T, C);
        be->embed_backward(dwte16, dwpe16, d16, tok, N, T, C);
        float *o = from_bf16(o16, (size_t)ROWS * C);
        assert_close("embed bf16 out", o, out, (size_t)ROWS * C, BF16_TOL, 0.0);
        /* the same bf16-valued dout summed in float: the same sums */
        assert_close("embed bf16 dwte", dwte16, dwte, (size_t)V * C, 0.0, 0.0);
        assert_close("embed bf16 dwpe", dwpe16, dwpe, (size_t)T * C, 0.0, 0.0);
        free(o16); free(d16); free(dwte16); free(dwpe16); free(o);
        setup_fp32();
    }
    free(wte); free(wpe); free(dout); free(out); free(dwte); free(dwpe);
}
END_TEST

/* ---- layer normalization ------------------------------------------------- */

struct ln_ctx {
    float *inp, *gamma, *beta, *out, *mean, *rstd, *R;
};

static double ln_objective(void *p, uint64_t *sig)
{
    struct ln_ctx *l = p;
    *sig = 0;
    be->layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->gamma, l->beta, ROWS, C, 1e-5f);
    return dot(l->out, l->R, (size_t)ROWS * C);
}

static void ln_make(struct ln_ctx *l, dt_rng *r)
{
    l->inp = randv((size_t)ROWS * C, r, -2, 3); /* not centred: the mean matters */
    l->gamma = randv(C, r, 0.5f, 1.5f);
    l->beta = randv(C, r, -0.5f, 0.5f);
    l->out = malloc(sizeof(float) * ROWS * C);
    l->mean = malloc(sizeof(float) * ROWS);
    l->rstd = malloc(sizeof(float) * ROWS);
    l->R = randv((size_t)ROWS * C, r, -1, 1);
}

static void ln_free(struct ln_ctx *l)
{
    free(l->inp); free(l->gamma); free(l->beta); free(l->out); free(l->mean); free(l->rstd); free(l->R);
}

START_TEST(layernorm_forward_backward)
{
    setup_fp32();
    dt_rng r;
    dt_rng_seed(&r, 21, 0);
    struct ln_ctx l;
    ln_make(&l, &r);
    ln_objective(&l, &(uint64_t){0});
    for (int i = 0; i < ROWS; i++) {
        const float *x = l.inp + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int j = 0; j < C; j++) m += (double)x[j];
        m /= C;
        for (int j = 0; j < C; j++) v += ((double)x[j] - m) * ((double)x[j] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        ck_assert_msg(fabs((double)l.mean[i] - m) < 1e-6 * (1.0 + fabs(m)), "mean[%d] %g vs %g", i,
                      (double)l.mean[i], m);
        ck_assert_msg(fabs((double)l.rstd[i] - s) < 1e-6 * s, "rstd[%d] %g vs %g", i, (double)l.rstd[i], s);
        for (int j = 0; j < C; j++) {
            double want = ((double)x[j] - m) * s * (double)l.gamma[j] + (double)l.beta[j];
            ck_assert_msg(fabs((double)l.out[(size_t)i * C + j] - want) < 1e-5, "ln out[%d][%d] %g vs %g", i, j,
                          (double)l.out[(size_t)i * C + j], want);
        }
    }

    float *dinp = malloc(sizeof(float) * ROWS * C), *dg = malloc(sizeof(float) * C), *db = malloc(sizeof(float) * C);
    for (int j = 0; j < C; j++) dg[j] = db[j] = NAN; /* overwritten */
    be->layernorm_backward(dinp, dg, db, l.R, l.inp, l.gamma, l.mean, l.rstd, ROWS, C);
    fd_check("layernorm d/dinp", ln_objective, &l, l.inp, dinp, (size_t)ROWS * C);
    fd_check("layernorm d/dgamma", ln_objective, &l, l.gamma, dg, C);
    fd_check("layernorm d/dbeta", ln_objective, &l, l.beta, db, C);

    /* dinp may be dout: the same values */
    float *d = copyv(l.R, (size_t)ROWS * C), *dg2 = malloc(sizeof(float) * C), *db2 = malloc(sizeof(float) * C);
    be->layernorm_backward(d, dg2, db2, d, l.inp, l.gamma, l.mean, l.rstd, ROWS, C);
    assert_close("layernorm in place dinp", d, dinp, (size_t)ROWS * C, 0.0, 0.0);
    assert_close("layernorm in place dgamma", dg2, dg, C, 0.0, 0.0);
    assert_close("layernorm in place dbeta", db2, db, C, 0.0, 0.0);
    free(dinp); free(dg); free(db); free(d); free(dg2); free(db2);
    ln_free(&l);
}
END_TEST

/* More rows than the kernel sums in float before folding into double (64),
 * against the backward formula evaluated in double. */
START_TEST(layernorm_backward_many_rows)
{
    setup_fp32();
    enum { LR = 150, LC = 24 };
    dt_rng r;
    dt_rng_seed(&r, 23, 0);
    float *x = randv((size_t)LR * LC, &r, -2, 3), *g = randv(LC, &r, 0.5f, 1.5f), *b = randv(LC, &r, -0.5f, 0.5f);
    float *dy = randv((size_t)LR * LC, &r, -1, 1), *y = malloc(sizeof(float) * LR * LC);
    float *mean = malloc(sizeof(float) * LR), *rstd = malloc(sizeof(float) * LR);
    float *dx = malloc(sizeof(float) * LR * LC), *dg = malloc(sizeof(float) * LC), *db = malloc(sizeof(float) * LC);
    be->layernorm_forward(y, mean, rstd, x, g, b, LR, LC, 1e-5f);
    be->layernorm_backward(dx, dg, db, dy, x, g, mean, rstd, LR, LC);
    double wg[LC] = {0}, wb[LC] = {0};
    for (int i = 0; i < LR; i++) {
        const float *xi = x + (size_t)i * LC, *di = dy + (size_t)i * LC;
        double m = 0.0, v = 0.0, a1 = 0.0, a2 = 0.0, xh[LC];
        for (int j = 0; j < LC; j++) m += (double)xi[j];
        m /= LC;
        for (int j = 0; j < LC; j++) v += ((double)xi[j] - m) * ((double)xi[j] - m);
        double s = 1.0 / sqrt(v / LC + 1e-5);
        for (int j = 0; j < LC; j++) {
            xh[j] = ((double)xi[j] - m) * s;
            a1 += (double)g[j] * (double)di[j];
            a2 += (double)g[j] * (double)di[j] * xh[j];
            wg[j] += (double)di[j] * xh[j];
            wb[j] += (double)di[j];
        }
        for (int j = 0; j < LC; j++) {
            double want = ((double)g[j] * (double)di[j] - a1 / LC - xh[j] * a2 / LC) * s;
            ck_assert_msg(fabs((double)dx[(size_t)i * LC + j] - want) < 1e-5, "dinp[%d][%d] %g vs %g", i, j,
                          (double)dx[(size_t)i * LC + j], want);
        }
    }
    for (int j = 0; j < LC; j++) {
        ck_assert_msg(fabs((double)dg[j] - wg[j]) < 1e-5 * (1.0 + fabs(wg[j])), "dgamma[%d] %g vs %g", j,
                      (double)dg[j], wg[j]);
        ck_assert_msg(fabs((double)db[j] - wb[j]) < 1e-5 * (1.0 + fabs(wb[j])), "dbeta[%d] %g vs %g", j,
                      (double)db[j], wb[j]);
    }
    free(x); free(g); free(b); free(dy); free(y); free(mean); free(rstd); free(dx); free(dg); free(db);
}
END_TEST

START_TEST(layernorm_bf16)
{
    dt_rng r;
    dt_rng_seed(&r, 22, 0);
    struct ln_ctx l;
    ln_make(&l, &r);
    round_bf16(l.inp, (size_t)ROWS * C);
    round_bf16(l.R, (size_t)ROWS * C);
    setup_fp32();
    float *dinp = malloc(sizeof(float) * ROWS * C), *dg = malloc(sizeof(float) * C), *db = malloc(sizeof(float) * C);
    ln_objective(&l, &(uint64_t){0});
    be->layernorm_backward(dinp, dg, db, l.R, l.inp, l.gamma, l.mean, l.rstd, ROWS, C);
    if (setup_bf16("layernorm")) {
        uint16_t *x16 = to_bf16(l.inp, (size_t)ROWS * C), *d16 = to_bf16(l.R, (size_t)ROWS * C);
        uint16_t *o16 = malloc(sizeof(uint16_t) * ROWS * C), *dx16 = malloc(sizeof(uint16_t) * ROWS * C);
        float *mean = malloc(sizeof(float) * ROWS), *rstd = malloc(sizeof(float) * ROWS);
        float *dg16 = malloc(sizeof(float) * C), *db16 = malloc(sizeof(float) * C);
        be->layernorm_forward(o16, mean, rstd, x16, l.gamma, l.beta, ROWS, C, 1e-5f);
        be->layernorm_backward(dx16, dg16, db16, d16, x16, l.gamma, mean, rstd, ROWS, C);
        float *o = from_bf16(o16, (size_t)ROWS * C), *dx = from_bf16(dx16, (size_t)ROWS * C);
        /* statistics in float from the same values */
        assert_close("layernorm bf16 mean", mean, l.mean, ROWS, 1e-6, 1e-7);
        assert_close("layernorm bf16 rstd", rstd, l.rstd, ROWS, 1e-6, 0.0);
        assert_close("layernorm bf16 out", o, l.out, (size_t)ROWS * C, BF16_TOL, 1e-6);
        assert_close("layernorm bf16 dinp", dx, dinp, (size_t)ROWS * C, BF16_TOL, 1e-5);
        assert_close("layernorm bf16 dgamma", dg16, dg, C, 1e-5, 1e-6);
        assert_close("layernorm bf16 dbeta", db16, db, C, 1e-5, 1e-6);
        /* in place under bf16 too */
        be->layernorm_backward(d16, dg16, db16, d16, x16, l.gamma, mean, rstd, ROWS, C);
        ck_assert(memcmp(d16, dx16, sizeof(uint16_t) * ROWS * C) == 0);
        free(x16); free(d16); free(o16); free(dx16); free(mean); free(rstd); free(dg16); free(db16);
        free(o); free(dx);
        setup_fp32();
    }
    free(dinp); free(dg); free(db);
    ln_free(&l);
}
END_TEST

/* ---- GELU ---------------------------------------------------------------- */

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

enum { NG = 300 };

struct gelu_ctx {
    float *inp, *out, *R;
};

static double gelu_objective(void *p, uint64_t *sig)
{
    struct gelu_ctx *g = p;
    *sig = 0;
    be->gelu_forward(g->out, g->inp, NG);
    return dot(g->out, g->R, NG);
}

START_TEST(gelu_forward_backward)
{
    setup_fp32();
    dt_rng r;
    dt_rng_seed(&r, 31, 0);
    struct gelu_ctx g = {randv(NG, &r, -6, 6), malloc(sizeof(float) * NG), randv(NG, &r, -1, 1)};
    /* the far tails, where exp over- and underflows, and 0 */
    const float tails[] = {-100.0f, -30.0f, -12.0f, 0.0f, -0.0f, 12.0f, 30.0f, 100.0f, 1e4f, -1e4f};
    memcpy(g.inp, tails, sizeof tails);
    gelu_objective(&g, &(uint64_t){0});
    for (int i = 0; i < NG; i++) {
        /* The sigmoid form's exp(-2u) carries the float rounding of its
         * argument, ~|2u| x 2^-24 relative, into the result. */
        double x = (double)g.inp[i], want = gelu_ref(x), u2 = 2.0 * sqrt(2.0 / M_PI) * fabs(x + 0.044715 * x * x * x);
        ck_assert_msg(fabs((double)g.out[i] - want) <= (1e-6 + 1.2e-7 * u2) * fabs(want) + 1e-30,
                      "gelu(%.9g) = %.9g, want %.9g", x, (double)g.out[i], want);
    }
    float *dinp = malloc(sizeof(float) * NG);
    be->gelu_backward(dinp, g.R, g.inp, NG);
    for (int i = 0; i < 10; i++) { /* the tails: slope 1 or 0 */
        double x = (double)g.inp[i], slope = x > 5.0 ? 1.0 : x < -5.0 ? 0.0 : 0.5;
        ck_assert_msg(fabs((double)dinp[i] - slope * (double)g.R[i]) < 1e-6, "gelu' at %g: %g", x,
                      (double)dinp[i]);
    }
    fd_check("gelu d/dinp", gelu_objective, &g, g.inp + 10, dinp + 10, NG - 10);
    float *d = copyv(g.R, NG);
    be->gelu_backward(d, d, g.inp, NG);
    assert_close("gelu in place dinp", d, dinp, NG, 0.0, 0.0);
    free(g.inp); free(g.out); free(g.R); free(dinp); free(d);
}
END_TEST

START_TEST(gelu_bf16)
{
    dt_rng r;
    dt_rng_seed(&r, 32, 0);
    float *x = randv(NG, &r, -6, 6), *dy = randv(NG, &r, -1, 1), *y = malloc(sizeof(float) * NG);
    float *dx = malloc(sizeof(float) * NG);
    round_bf16(x, NG);
    round_bf16(dy, NG);
    setup_fp32();
    be->gelu_forward(y, x, NG);
    be->gelu_backward(dx, dy, x, NG);
    if (setup_bf16("gelu")) {
        uint16_t *x16 = to_bf16(x, NG), *dy16 = to_bf16(dy, NG), *y16 = malloc(sizeof(uint16_t) * NG);
        uint16_t *dx16 = malloc(sizeof(uint16_t) * NG);
        be->gelu_forward(y16, x16, NG);
        be->gelu_backward(dx16, dy16, x16, NG);
        float *yb = from_bf16(y16, NG), *dxb = from_bf16(dx16, NG);
        assert_close("gelu bf16 out", yb, y, NG, BF16_TOL, 1e-30);
        assert_close("gelu bf16 dinp", dxb, dx, NG, BF16_TOL, 1e-30);
        be->gelu_backward(dy16, dy16, x16, NG);
        ck_assert(memcmp(dy16, dx16, sizeof(uint16_t) * NG) == 0);
        free(x16); free(dy16); free(y16); free(dx16); free(yb); free(dxb);
        setup_fp32();
    }
    free(x); free(dy); free(y); free(dx);
}
END_TEST

/* ---- linear_t: out = inp . w^T ------------------------------------------- */

enum { LV = 23 }; /* output width (the vocabulary of a tied head) */

struct lt_ctx {
    float *inp, *w, *out, *R;
};

static double lt_objective(void *p, uint64_t *sig)
{
    struct lt_ctx *l = p;
    *sig = 0;
    be->linear_t_forward(ROWS, C, LV, l->out, l->inp, l->w);
    return dot(l->out, l->R, (size_t)ROWS * LV);
}

START_TEST(linear_t_forward_backward)
{
    setup_fp32();
    dt_rng r;
    dt_rng_seed(&r, 41, 0);
    struct lt_ctx l = {randv((size_t)ROWS * C, &r, -1, 1), randv((size_t)LV * C, &r, -1, 1),
                       malloc(sizeof(float) * ROWS * LV), randv((size_t)ROWS * LV, &r, -1, 1)};
    lt_objective(&l, &(uint64_t){0});
    for (int i = 0; i < ROWS; i++)
        for (int v = 0; v < LV; v++) {
            double want = 0.0, bound = 0.0;
            for (int j = 0; j < C; j++) {
                double t = (double)l.inp[(size_t)i * C + j] * (double)l.w[(size_t)v * C + j];
                want += t;
                bound += fabs(t);
            }
            ck_assert_msg(fabs((double)l.out[(size_t)i * LV + v] - want) <= 1e-5 * bound, "linear_t out[%d][%d]", i,
                          v);
        }
    float *dinp = malloc(sizeof(float) * ROWS * C), *dw = malloc(sizeof(float) * LV * C);
    for (int i = 0; i < LV * C; i++) dw[i] = NAN; /* overwritten */
    be->linear_t_backward(ROWS, C, LV, dinp, dw, l.R, l.inp, l.w);
    fd_check("linear_t d/dinp", lt_objective, &l, l.inp, dinp, (size_t)ROWS * C);
    fd_check("linear_t d/dw", lt_objective, &l, l.w, dw, (size_t)LV * C);

    /* dinp NULL: dw alone, the same; no rows: dw = 0 */
    float *dw2 = malloc(sizeof(float) * LV * C);
    be->linear_t_backward(ROWS, C, LV, NULL, dw2, l.R, l.inp, l.w);
    assert_close("linear_t dw without dinp", dw2, dw, (size_t)LV * C, 0.0, 0.0);
    for (int i = 0; i < LV * C; i++) dw2[i] = NAN;
    be->linear_t_backward(0, C, LV, dinp, dw2, l.R, l.inp, l.w);
    for (int i = 0; i < LV * C; i++) ck_assert_msg(dw2[i] == 0.0f, "dw[%d] with no rows", i);
    free(l.inp); free(l.w); free(l.out); free(l.R); free(dinp); free(dw); free(dw2);
}
END_TEST

START_TEST(linear_t_bf16)
{
    dt_rng r;
    dt_rng_seed(&r, 42, 0);
    float *x = randv((size_t)ROWS * C, &r, -1, 1), *w = randv((size_t)LV * C, &r, -1, 1);
    float *dy = randv((size_t)ROWS * LV, &r, -1, 1), *y = malloc(sizeof(float) * ROWS * LV);
    float *dx = malloc(sizeof(float) * ROWS * C), *dw = malloc(sizeof(float) * LV * C);
    round_bf16(x, (size_t)ROWS * C);
    round_bf16(dy, (size_t)ROWS * LV);
    setup_fp32();
    be->linear_t_forward(ROWS, C, LV, y, x, w);
    be->linear_t_backward(ROWS, C, LV, dx, dw, dy, x, w);
    if (setup_bf16("linear_t")) {
        uint16_t *x16 = to_bf16(x, (size_t)ROWS * C), *dy16 = to_bf16(dy, (size_t)ROWS * LV);
        uint16_t *y16 = malloc(sizeof(uint16_t) * ROWS * LV), *dx16 = malloc(sizeof(uint16_t) * ROWS * C);
        float *dw16 = malloc(sizeof(float) * LV * C);
        be->linear_t_forward(ROWS, C, LV, y16, x16, w);
        be->linear_t_backward(ROWS, C, LV, dx16, dw16, dy16, x16, w);
        float *yb = from_bf16(y16, (size_t)ROWS * LV), *dxb = from_bf16(dx16, (size_t)ROWS * C);
        /* w is rounded to bf16 in the product (C terms), and the output once */
        double ey = normwise(yb, y, (size_t)ROWS * LV), ex = normwise(dxb, dx, (size_t)ROWS * C);
        double ew = normwise(dw16, dw, (size_t)LV * C);
        printf("# linear_t bf16 vs fp32: out %.2e, dinp %.2e, dw %.2e\n", ey, ex, ew);
        ck_assert_msg(ey < 2 * BF16_TOL && ex < 2 * BF16_TOL, "linear_t bf16: out %.3e dinp %.3e", ey, ex);
        ck_assert_msg(ew < 1e-5, "linear_t bf16 dw %.3e: bf16 operands are exact products", ew);
        free(x16); free(dy16); free(y16); free(dx16); free(dw16); free(yb); free(dxb);
        setup_fp32();
    }
    free(x); free(w); free(dy); free(y); free(dx); free(dw);
}
END_TEST

/* dense (a transformer's projections): bf16 activations read and written
 * in place, the bias added before the output's one rounding, against
 * float32 on the same bf16-valued inputs; an empty batch zeroes dw. */
START_TEST(dense_bf16)
{
    enum { DN = 70, DIN = 48, DU = 40 };
    dt_rng r;
    dt_rng_seed(&r, 44, 0);
    float *x = randv((size_t)DN * DIN, &r, -1, 1), *w = randv((size_t)DIN * DU, &r, -1, 1);
    float *b = randv(DU, &r, -1, 1), *dy = randv((size_t)DN * DU, &r, -1, 1);
    float *y = malloc(sizeof(float) * DN * DU), *dx = malloc(sizeof(float) * DN * DIN);
    float *dw = malloc(sizeof(float) * DIN * DU), *db = malloc(sizeof(float) * DU);
    round_bf16(x, (size_t)DN * DIN);
    round_bf16(dy, (size_t)DN * DU);
    setup_fp32();
    be->dense_forward(DN, DIN, DU, y, x, w, b);
    be->dense_backward(DN, DIN, DU, dx, dw, db, dy, x, w);
    if (setup_bf16("dense")) {
        uint16_t *x16 = to_bf16(x, (size_t)DN * DIN), *dy16 = to_bf16(dy, (size_t)DN * DU);
        uint16_t *y16 = malloc(sizeof(uint16_t) * DN * DU), *dx16 = malloc(sizeof(uint16_t) * DN * DIN);
        float *dw16 = malloc(sizeof(float) * DIN * DU), *db16 = malloc(sizeof(float) * DU);
        be->dense_forward(DN, DIN, DU, y16, x16, w, b);
        be->dense_backward(DN, DIN, DU, dx16, dw16, db16, dy16, x16, w);
        float *yb = from_bf16(y16, (size_t)DN * DU), *dxb = from_bf16(dx16, (size_t)DN * DIN);
        double ey = normwise(yb, y, (size_t)DN * DU), ex = normwise(dxb, dx, (size_t)DN * DIN);
        double ew = normwise(dw16, dw, (size_t)DIN * DU), eb = normwise(db16, db, DU);
        printf("# dense bf16 vs fp32: out %.2e, dinp %.2e, dw %.2e, db %.2e\n", ey, ex, ew, eb);
        ck_assert_msg(ey < 2 * BF16_TOL && ex < 2 * BF16_TOL, "dense bf16: out %.3e dinp %.3e", ey, ex);
        ck_assert_msg(ew < 1e-5 && eb < 1e-6, "dense bf16 dw %.3e db %.3e: bf16 operands are exact products", ew, eb);
        /* the bias is inside the product: a zero weight gives the bias, rounded once */
        float *w0 = calloc((size_t)DIN * DU, sizeof(float));
        be->dense_forward(DN, DIN, DU, y16, x16, w0, b);
        for (int i = 0; i < DN; i++)
            for (int j = 0; j < DU; j++)
                ck_assert_msg(y16[(size_t)i * DU + j] == dt_f32_to_bf16(b[j]), "dense bf16 bias at [%d][%d]", i, j);
        /* no samples: dw and db are zero */
        for (size_t i = 0; i < (size_t)DIN * DU; i++) dw16[i] = 1.0f;
        for (int j = 0; j < DU; j++) db16[j] = 1.0f;
        be->dense_backward(0, DIN, DU, NULL, dw16, db16, dy16, x16, w);
        for (size_t i = 0; i < (size_t)DIN * DU; i++) ck_assert_msg(dw16[i] == 0.0f, "dense bf16 empty batch dw");
        for (int j = 0; j < DU; j++) ck_assert_msg(db16[j] == 0.0f, "dense bf16 empty batch db");
        free(x16); free(dy16); free(y16); free(dx16); free(dw16); free(db16); free(yb); free(dxb); free(w0);
        setup_fp32();
    }
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db);
}
END_TEST

/* Logits of more than 2^23 elements (the bf16 path once converted them
 * in blocks of that size; it now reads bf16 in place): a long, thin
 * product whose dw sums over 8200 rows. */
START_TEST(linear_t_bf16_blocks)
{
    enum { BR = 8200, BC = 8, BV = 1031 };
    dt_rng r;
    dt_rng_seed(&r, 43, 0);
    float *x = randv((size_t)BR * BC, &r, -1, 1), *w = randv((size_t)BV * BC, &r, -1, 1);
    float *dy = randv((size_t)BR * BV, &r, -1, 1), *y = malloc(sizeof(float) * BR * BV);
    float *dx = malloc(sizeof(float) * BR * BC), *dw = malloc(sizeof(float) * BV * BC);
    round_bf16(x, (size_t)BR * BC);
    round_bf16(dy, (size_t)BR * BV);
    setup_fp32();
    be->linear_t_forward(BR, BC, BV, y, x, w);
    be->linear_t_backward(BR, BC, BV, dx, dw, dy, x, w);
    if (setup_bf16("linear_t in blocks")) {
        uint16_t *x16 = to_bf16(x, (size_t)BR * BC), *dy16 = to_bf16(dy, (size_t)BR * BV);
        uint16_t *y16 = malloc(sizeof(uint16_t) * BR * BV), *dx16 = malloc(sizeof(uint16_t) * BR * BC);
        float *dw16 = malloc(sizeof(float) * BV * BC);
        be->linear_t_forward(BR, BC, BV, y16, x16, w);
        be->linear_t_backward(BR, BC, BV, dx16, dw16, dy16, x16, w);
        float *yb = from_bf16(y16, (size_t)BR * BV), *dxb = from_bf16(dx16, (size_t)BR * BC);
        double ey = normwise(yb, y, (size_t)BR * BV), ex = normwise(dxb, dx, (size_t)BR * BC);
        double ew = normwise(dw16, dw, (size_t)BV * BC);
        printf("# linear_t bf16 in blocks vs fp32: out %.2e, dinp %.2e, dw %.2e\n", ey, ex, ew);
        ck_assert_msg(ey < 2 * BF16_TOL && ex < 2 * BF16_TOL, "linear_t bf16: out %.3e dinp %.3e", ey, ex);
        ck_assert_msg(ew < 1e-5, "linear_t bf16 dw %.3e", ew);
        free(x16); free(dy16); free(y16); free(dx16); free(dw16); free(yb); free(dxb);
        setup_fp32();
    }
    free(x); free(w); free(dy); free(y); free(dx); free(dw);
}
END_TEST

/* ---- token cross-entropy ------------------------------------------------- */

struct xent_ctx {
    int32_t tok[N * (T + 1)];
    float *logits;
    int vocab;
};

static double xent_objective(void *p, uint64_t *sig)
{
    struct xent_ctx *x = p;
    long nc;
    *sig = 0;
    return be->token_xent(NULL, &nc, x->logits, x->tok, N, T, x->vocab, 1.0f);
}

/* The loss, the correct count (argmax = the first maximum) and the
 * gradient times grad_scale, in double. */
static double xent_ref(double *dlogits, long *ncorrect, const float *logits, const int32_t *tok, int vocab,
                       float grad_scale)
{
    double loss = 0.0;
    *ncorrect = 0;
    for (int s = 0; s < N; s++)
        for (int t = 0; t < T; t++) {
            const float *z = logits + ((size_t)s * T + t) * vocab;
            int y = tok[s * (T + 1) + t + 1], arg = 0;
            for (int j = 1; j < vocab; j++)
                if (z[j] > z[arg]) arg = j;
            double sum = 0.0;
            for (int j = 0; j < vocab; j++) sum += exp((double)z[j] - (double)z[arg]);
            loss += log(sum) - ((double)z[y] - (double)z[arg]);
            *ncorrect += arg == y;
            for (int j = 0; j < vocab; j++)
                dlogits[((size_t)s * T + t) * vocab + j] =
                    (exp((double)z[j] - (double)z[arg]) / sum - (j == y)) * (double)grad_scale;
        }
    return loss;
}

static void xent_case(int vocab, uint64_t seed)
{
    setup_fp32();
    dt_rng r;
    dt_rng_seed(&r, seed, 0);
    struct xent_ctx x = {.vocab = vocab};
    for (int i = 0; i < N * (T + 1); i++) x.tok[i] = (int32_t)dt_rng_below(&r, (uint64_t)vocab);
    size_t nl = (size_t)ROWS * vocab;
    x.logits = randv(nl, &r, -4, 4);
    /* Ties: row 0's target is a maximum after an equal one (not correct);
     * row 1's target is the first maximum of two (correct); row 2's target
     * is the single maximum (correct). */
    int y0 = x.tok[1], y1 = x.tok[2], y2 = x.tok[3];
    if (y0 == 0) y0 = x.tok[1] = 1;
    if (y1 == vocab - 1) y1 = x.tok[2] = vocab - 2;
    x.logits[y0] = x.logits[y0 - 1] = 9.0f;
    x.logits[vocab + y1] = x.logits[vocab + y1 + 1] = 9.0f;
    x.logits[2 * (size_t)vocab + y2] = 9.0f;

    double *ref = malloc(sizeof(double) * nl);
    long want_nc, nc = -1;
    const float gs = 0.25f;
    double want = xent_ref(ref, &want_nc, x.logits, x.tok, vocab, gs);
    float *dl = malloc(sizeof(float) * nl);
    double loss = be->token_xent(dl, &nc, x.logits, x.tok, N, T, vocab, gs);
    printf("# token_xent V=%d: loss %.9g (ref %.9g), correct %ld (ref %ld)\n", vocab, loss, want, nc, want_nc);
    ck_assert_msg(fabs(loss - want) < 1e-6 * fabs(want), "token_xent loss %.9g vs %.9g", loss, want);
    ck_assert_int_eq(nc, want_nc);
    ck_assert_msg(want_nc >= 2, "the constructed correct rows count (%ld)", want_nc);
    for (size_t i = 0; i < nl; i++)
        ck_assert_msg(fabs((double)dl[i] - ref[i]) < 1e-7, "dlogits[%zu] %.9g vs %.9g", i, (double)dl[i], ref[i]);

    /* without dlogits: the same loss; dlogits = logits: the same gradient */
    ck_assert(be->token_xent(NULL, &nc, x.logits, x.tok, N, T, vocab, gs) == loss);
    float *inplace = copyv(x.logits, nl);
    ck_assert(be->token_xent(inplace, &nc, inplace, x.tok, N, T, vocab, gs) == loss);
    assert_close("token_xent in place", inplace, dl, nl, 0.0, 0.0);

    /* the gradient is that of the summed loss (grad_scale 1) */
    for (size_t i = 0; i < nl; i++) dl[i] /= gs;
    fd_check(vocab > 100 ? "token_xent d/dlogits (V>100)" : "token_xent d/dlogits", xent_objective, &x,
             x.logits, dl, nl);

    /* no samples: no loss, no correct ones */
    nc = 77;
    ck_assert(be->token_xent(dl, &nc, x.logits, x.tok, 0, T, vocab, gs) == 0.0);
    ck_assert_int_eq(nc, 0);
    free(x.logits); free(ref); free(dl); free(inplace);
}

START_TEST(token_xent_small) { xent_case(V, 51); }
END_TEST

START_TEST(token_xent_wide) { xent_case(300, 52); }
END_TEST

START_TEST(token_xent_bf16)
{
    dt_rng r;
    dt_rng_seed(&r, 53, 0);
    int32_t tok[N * (T + 1)];
    tokens_fill(tok, &r);
    size_t nl = (size_t)ROWS * V;
    float *z = randv(nl, &r, -4, 4), *dl = malloc(sizeof(float) * nl);
    round_bf16(z, nl);
    setup_fp32();
    long nc, nc16;
    double loss = be->token_xent(dl, &nc, z, tok, N, T, V, 0.5f);
    if (setup_bf16("token_xent")) {
        uint16_t *z16 = to_bf16(z, nl), *d16 = malloc(sizeof(uint16_t) * nl);
        double loss16 = be->token_xent(d16, &nc16, z16, tok, N, T, V, 0.5f);
        float *db = from_bf16(d16, nl);
        ck_assert_msg(fabs(loss16 - loss) < 1e-6 * fabs(loss), "token_xent bf16 loss %.9g vs %.9g", loss16, loss);
        ck_assert_int_eq(nc16, nc);
        assert_close("token_xent bf16 dlogits", db, dl, nl, BF16_TOL, 1e-9);
        free(z16); free(d16); free(db);
        setup_fp32();
    }
    free(z); free(dl);
}
END_TEST

/* ---- optimizer pieces ---------------------------------------------------- */

START_TEST(adamw_update)
{
    setup_fp32();
    enum { NP = 203 };
    dt_rng r;
    dt_rng_seed(&r, 61, 0);
    float *p = randv(NP, &r, -1, 1), *m = randv(NP, &r, -0.1f, 0.1f), *v = randv(NP, &r, 0, 0.01f);
    float *g = randv(NP, &r, -1, 1);
    const float alpha = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, decay = 1e-3f;
    float *p2 = copyv(p, NP), *m2 = copyv(m, NP), *v2 = copyv(v, NP);
    be->adamw_update(p2, m2, v2, g, NP, alpha, b1, b2, eps, decay);
    for (int i = 0; i < NP; i++) {
        double pp = (double)p[i] - (double)decay * (double)p[i];
        double mm = (double)m[i] + ((double)g[i] - (double)m[i]) * (1.0 - (double)b1);
        double vv = (double)v[i] + ((double)g[i] * (double)g[i] - (double)v[i]) * (1.0 - (double)b2);
        double step = mm * (double)alpha / (sqrt(vv) + (double)eps);
        pp -= step;
        /* a few float roundings of the terms (which may cancel) */
        ck_assert_msg(fabs((double)m2[i] - mm) <= 4e-7 * (fabs((double)m[i]) + fabs((double)g[i])), "adamw m[%d]", i);
        ck_assert_msg(fabs((double)v2[i] - vv) <= 4e-7 * (fabs((double)v[i]) + (double)g[i] * (double)g[i]),
                      "adamw v[%d]", i);
        ck_assert_msg(fabs((double)p2[i] - pp) <= 1e-6 * (fabs((double)p[i]) + fabs(step)),
                      "adamw param[%d] %.9g vs %.9g", i, (double)p2[i], pp);
    }
    /* no decay: exactly adam_update */
    float *p3 = copyv(p, NP), *m3 = copyv(m, NP), *v3 = copyv(v, NP);
    memcpy(p2, p, sizeof(float) * NP);
    memcpy(m2, m, sizeof(float) * NP);
    memcpy(v2, v, sizeof(float) * NP);
    be->adamw_update(p2, m2, v2, g, NP, alpha, b1, b2, eps, 0.0f);
    be->adam_update(p3, m3, v3, g, NP, alpha, b1, b2, eps);
    ck_assert(memcmp(p2, p3, sizeof(float) * NP) == 0 && memcmp(m2, m3, sizeof(float) * NP) == 0 &&
              memcmp(v2, v3, sizeof(float) * NP) == 0);
    free(p); free(m); free(v); free(g); free(p2); free(m2); free(v2); free(p3); free(m3); free(v3);
}
END_TEST

START_TEST(sum_squares_and_scale)
{
    setup_fp32();
    enum { NS = 1001 };
    float *x = malloc(sizeof(float) * NS);
    double want = 0.0;
    for (int i = 0; i < NS; i++) { /* multiples of 1/8: every partial sum exact in double */
        x[i] = (float)(i % 13 - 6) * 0.125f;
        want += (double)x[i] * (double)x[i];
    }
    ck_assert(be->sum_squares(x, NS) == want);
    ck_assert(be->sum_squares(x, 0) == 0.0);
    dt_rng r;
    dt_rng_seed(&r, 71, 0);
    fill_uniform(x, NS, &r, -3, 3);
    float *y = copyv(x, NS);
    const float s = 0.3f;
    be->scale(y, NS, s);
    for (int i = 0; i < NS; i++) ck_assert_msg(y[i] == x[i] * s, "scale[%d]", i);
    free(x); free(y);
}
END_TEST

static Suite *ops_suite(void)
{
    Suite *s = suite_create("transformer ops");
    TCase *tc = tcase_create("fp32");
    tcase_add_test(tc, embed_forward_backward);
    tcase_add_test(tc, layernorm_forward_backward);
    tcase_add_test(tc, layernorm_backward_many_rows);
    tcase_add_test(tc, gelu_forward_backward);
    tcase_add_test(tc, linear_t_forward_backward);
    tcase_add_test(tc, token_xent_small);
    tcase_add_test(tc, token_xent_wide);
    tcase_add_test(tc, adamw_update);
    tcase_add_test(tc, sum_squares_and_scale);
    suite_add_tcase(s, tc);
    tc = tcase_create("bf16");
    tcase_add_test(tc, embed_bf16);
    tcase_add_test(tc, layernorm_bf16);
    tcase_add_test(tc, gelu_bf16);
    tcase_add_test(tc, linear_t_bf16);
    tcase_add_test(tc, dense_bf16);
    tcase_add_test(tc, linear_t_bf16_blocks);
    tcase_add_test(tc, token_xent_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
