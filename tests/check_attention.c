/* check_attention.c: the CPU backend's causal attention (backend.h's
 * attention_forward / attention_backward, src/cpu/cpu_attention.c), called
 * through the backend table.
 *
 * Forward (out and lse) is checked against a naive double-precision
 * reference that forms each query's whole causal score row; backward
 * against the same reference's analytic gradients, and against central
 * finite differences of L = sum(out * R) (dout = R), which also proves the
 * comparison can fail (layer_check.h's 1.1 x gradient test). Shapes are
 * picked so T is not a multiple of the kernel's 64-row blocks, heads are
 * narrower than a vector or not a multiple of 16 wide, and there are one or
 * several samples and heads. Each check runs on every kernel set: the
 * AVX-512 one and the AVX2 one (each where the CPU has it; a line says
 * when it is skipped) and the plain C one (DTRAIN_NO_FAST_KERNELS=1). bf16 activations are compared with float32
 * runs on the same (bf16-representable) inputs: where the products stay
 * float32 (the AVX2 and plain C sets) what differs is the rounding of the
 * outputs alone, half a bf16 ulp; where they take bf16 operands (the
 * AVX-512 set on a CPU with AVX512-BF16) the outputs are held to the double
 * reference within 2% of their largest value, and must differ from
 * float32's somewhere (so the bf16 products did run). The AVX-512 set runs
 * again on each unit it can take, asked for by DTRAIN_ATTENTION_UNIT (float
 * FMAs, AVX512-BF16 dot products, and AMX tiles where usable), and the
 * tiles' lse must differ from the dot products' somewhere (so the tiles
 * did run). Skipped with a message on a CPU without bf16 instructions. */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_attention_kernels.h" /* cpu_att_unit */
#include "runtime/half.h"
#include "runtime/rng.h"

#include "layer_check.h"

struct shape {
    int n, T, H, D;
};

static const struct shape shapes[] = {
    {1, 1, 1, 8},   {2, 7, 2, 8},    {1, 70, 3, 16},   {2, 130, 2, 64}, {1, 64, 1, 64},
    {1, 129, 1, 24}, {1, 100, 2, 80}, {1, 65, 1, 128}, {1, 256, 6, 64}, {1, 112, 2, 48}, {1, 176, 1, 96},
};
enum { NSHAPES = sizeof shapes / sizeof *shapes };

/* Scores q.k / sqrt(D) of about unit spread, so the softmax is neither
 * uniform nor one-hot. */
#define AMP 2.0f

/* The kernel sets, widest first: the one the CPU runs by default, the AVX2
 * one where it has AVX-512 too (DTRAIN_NO_FAST_KERNELS=avx512), plain C. */
enum { KSETS = 3 };
static const char *const kset_env[KSETS] = {"0", "avx512", "1"};
static const char *const kset_name[KSETS] = {"avx512", "avx2", "plain C"};

/* Whether this CPU runs set k; a set it lacks is skipped with a line
 * saying so (once per test), since the default would silently run another. */
static int kset_usable(int k)
{
    if (k == 0) return __builtin_cpu_supports("avx512f");
    if (k == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return 1;
}

static int use_kernels(int k, const char *test)
{
    if (!kset_usable(k)) {
        printf("# %s: SKIP the %s kernels: this CPU lacks %s\n", test, kset_name[k], k == 0 ? "AVX-512F" : "AVX2/FMA");
        return 0;
    }
    setenv("DTRAIN_NO_FAST_KERNELS", kset_env[k], 1);
    return 1;
}
static const char *kernel_name(int k) { return kset_name[k]; }

static float *nan_buffer(size_t n)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

static size_t qkv_size(struct shape s) { return (size_t)s.n * s.T * 3 * s.H * s.D; }
static size_t act_size(struct shape s) { return (size_t)s.n * s.T * s.H * s.D; }
static size_t lse_size(struct shape s) { return (size_t)s.n * s.H * s.T; }

/* ---- the naive reference, in double ----------------------------------- */

/* Forward (out, lse) and, when dout is not NULL, the gradient dqkv of
 * sum(out * dout). Each query's causal row of scores is formed whole. */
static void ref_attention(double *out, double *lse, double *dqkv, const float *qkv, const float *dout,
                          struct shape s)
{
    const int T = s.T, D = s.D, C = s.H * s.D;
    const size_t ld = 3 * (size_t)C;
    const double scale = 1.0 / sqrt((double)D);
    double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
    if (dqkv) memset(dqkv, 0, sizeof(double) * qkv_size(s));
    for (int b = 0; b < s.n; b++)
        for (int h = 0; h < s.H; h++) {
            const float *base = qkv + (size_t)b * T * ld + (size_t)h * D;
            for (int t = 0; t < T; t++) {
                const float *q = base + (size_t)t * ld;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float *k = base + (size_t)j * ld + C;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++) dot += (double)q[d] * (double)k[d];
                    p[j] = dot * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(p[j] - mx);
                double l = mx + log(sum);
                lse[((size_t)b * s.H + h) * T + t] = l;
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * D;
                for (int d = 0; d < D; d++) o[d] = 0.0;
                for (int j = 0; j <= t; j++) {
                    p[j] = exp(p[j] - l);
                    const float *v = base + (size_t)j * ld + 2 * C;
                    for (int d = 0; d < D; d++) o[d] += p[j] * (double)v[d];
                }
                if (!dqkv) continue;
                /* dP = dO . v_j, dS = P (dP - sum_j P dP), dq = scale dS . k, dk += scale dS q, dv += P dO */
                const float *g = dout + ((size_t)b * T + t) * C + (size_t)h * D;
                double di = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float *v = base + (size_t)j * ld + 2 * C;
                    dp[j] = 0.0;
                    for (int d = 0; d < D; d++) dp[j] += (double)g[d] * (double)v[d];
                    di += p[j] * dp[j];
                }
                double *dbase = dqkv + (size_t)b * T * ld + (size_t)h * D;
                for (int j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - di) * scale;
                    const float *k = base + (size_t)j * ld + C;
                    double *dq = dbase + (size_t)t * ld, *dk = dbase + (size_t)j * ld + C,
                           *dv = dbase + (size_t)j * ld + 2 * C;
                    for (int d = 0; d < D; d++) {
                        dq[d] += ds * (double)k[d];
                        dk[d] += ds * (double)q[d];
                        dv[d] += p[j] * (double)g[d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

/* ---- float32 against the reference ------------------------------------ */

static void setup_fp32(void)
{
    char why[256];
    ck_assert_msg(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(be->set_act_type(DT_PREC_FP32), DT_PREC_FP32);
}

static void random_inputs(float *qkv, float *R, struct shape s, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed, 1);
    fill_uniform(qkv, qkv_size(s), &r, -AMP, AMP);
    if (R) fill_uniform(R, act_size(s), &r, -1.0f, 1.0f);
}

static void check_forward(struct shape s, int k)
{
    const size_t nq = qkv_size(s), na = act_size(s), nl = lse_size(s);
    const int C = s.H * s.D;
    float *qkv = malloc(sizeof(float) * nq), *out = nan_buffer(na), *lse = nan_buffer(nl);
    double *rout = malloc(sizeof(double) * na), *rlse = malloc(sizeof(double) * nl);
    random_inputs(qkv, NULL, s, 1000 + (uint64_t)(s.T * 7 + s.H * 3 + s.D));
    be->attention_forward(out, lse, qkv, s.n, s.T, C, s.H);
    ref_attention(rout, rlse, NULL, qkv, NULL, s);
    /* Float rounding over <= T terms of O(1) (softmax weights sum to 1,
     * |v| <= AMP): ~1e-6; 2e-5 still catches a wrong weight or mask. */
    double eo = 0.0, el = 0.0;
    for (size_t i = 0; i < na; i++) eo = fmax(eo, fabs((double)out[i] - rout[i]));
    for (size_t i = 0; i < nl; i++) el = fmax(el, fabs((double)lse[i] - rlse[i]) / (1.0 + fabs(rlse[i])));
    printf("# forward %-7s n=%d T=%3d H=%d D=%2d: max |out - ref| %.1e, lse rel %.1e\n", kernel_name(k), s.n,
           s.T, s.H, s.D, eo, el);
    ck_assert_msg(eo < 2e-5, "out n=%d T=%d H=%d D=%d (%s): max error %.3e", s.n, s.T, s.H, s.D,
                  kernel_name(k), eo);
    ck_assert_msg(el < 2e-6, "lse n=%d T=%d H=%d D=%d (%s): max relative error %.3e", s.n, s.T, s.H, s.D,
                  kernel_name(k), el);
    free(qkv), free(out), free(lse), free(rout), free(rlse);
}

/* max |a - ref| / max |ref| over the q, k or v third (part) of dqkv. */
static double part_error(const float *a, const double *ref, struct shape s, int part, double *refmax)
{
    const int C = s.H * s.D;
    double e = 0.0, m = 0.0;
    for (size_t row = 0; row < (size_t)s.n * s.T; row++)
        for (int c = 0; c < C; c++) {
            size_t i = row * 3 * C + (size_t)part * C + c;
            e = fmax(e, fabs((double)a[i] - ref[i]));
            m = fmax(m, fabs(ref[i]));
        }
    *refmax = m;
    return m > 0.0 ? e / m : e;
}

static void check_backward(struct shape s, int k)
{
    const size_t nq = qkv_size(s), na = act_size(s), nl = lse_size(s);
    const int C = s.H * s.D;
    float *qkv = malloc(sizeof(float) * nq), *R = malloc(sizeof(float) * na), *out = nan_buffer(na),
          *lse = nan_buffer(nl), *dqkv = nan_buffer(nq);
    double *rout = malloc(sizeof(double) * na), *rlse = malloc(sizeof(double) * nl),
           *rd = malloc(sizeof(double) * nq);
    random_inputs(qkv, R, s, 2000 + (uint64_t)(s.T * 7 + s.H * 3 + s.D));
    be->attention_forward(out, lse, qkv, s.n, s.T, C, s.H);
    be->attention_backward(dqkv, R, qkv, out, lse, s.n, s.T, C, s.H);
    ref_attention(rout, rlse, rd, qkv, R, s);
    static const char part_name[] = "qkv";
    for (int part = 0; part < 3; part++) {
        double m, e = part_error(dqkv, rd, s, part, &m);
        printf("# backward %-7s n=%d T=%3d H=%d D=%2d: d%c rel err %.1e (max |d%c| %.2f)\n", kernel_name(k), s.n,
               s.T, s.H, s.D, part_name[part], e, part_name[part], m);
        /* T = 1: a query sees only itself, so dq = dk = 0 exactly. */
        if (s.T == 1 && part < 2) ck_assert_msg(e == 0.0, "d%c T = 1 must be 0", part_name[part]);
        ck_assert_msg(e < 1e-4, "d%c n=%d T=%d H=%d D=%d (%s): norm-wise error %.3e", part_name[part], s.n, s.T,
                      s.H, s.D, kernel_name(k), e);
    }
    free(qkv), free(R), free(out), free(lse), free(dqkv), free(rout), free(rlse), free(rd);
}

START_TEST(forward_matches_reference)
{
    setup_fp32();
    for (int k = 0; k < KSETS; k++)
        for (int i = 0; i < NSHAPES && use_kernels(k, "forward"); i++) check_forward(shapes[i], k);
}
END_TEST

START_TEST(backward_matches_reference)
{
    setup_fp32();
    for (int k = 0; k < KSETS; k++)
        for (int i = 0; i < NSHAPES && use_kernels(k, "backward"); i++) check_backward(shapes[i], k);
}
END_TEST

/* ---- finite differences ------------------------------------------------ */

struct fd_ctx {
    struct shape s;
    float *qkv, *R, *out, *lse;
};

static double fd_objective(void *ctx, uint64_t *signature)
{
    struct fd_ctx *x = ctx;
    const size_t na = act_size(x->s);
    be->attention_forward(x->out, x->lse, x->qkv, x->s.n, x->s.T, x->s.H * x->s.D, x->s.H);
    double L = 0.0;
    for (size_t i = 0; i < na; i++) L += (double)x->out[i] * (double)x->R[i];
    *signature = 0; /* smooth everywhere: one piece */
    return L;
}

static void check_fd(struct shape s, int k, int probes)
{
    const size_t nq = qkv_size(s), na = act_size(s);
    const int C = s.H * s.D;
    struct fd_ctx x = {s, malloc(sizeof(float) * nq), malloc(sizeof(float) * na), nan_buffer(na),
                       nan_buffer(lse_size(s))};
    float *dqkv = nan_buffer(nq);
    size_t *idx = malloc(sizeof(size_t) * (size_t)probes);
    dt_rng r;
    random_inputs(x.qkv, x.R, s, 3000 + (uint64_t)s.T);
    dt_rng_seed(&r, 3001, 2);
    for (int i = 0; i < probes; i++) idx[i] = (size_t)((double)dt_rng_uniform(&r) * (double)nq) % nq;
    be->attention_forward(x.out, x.lse, x.qkv, s.n, s.T, C, s.H);
    be->attention_backward(dqkv, x.R, x.qkv, x.out, x.lse, s.n, s.T, C, s.H);
    char what[96];
    snprintf(what, sizeof what, "attention %s T=%d H=%d D=%d", kernel_name(k), s.T, s.H, s.D);
    /* Smooth: truncation error ~h^2 |L'''|, ~1e-4 relative at h = 1e-2. */
    fd_assert(what, fd_compare(fd_objective, &x, x.qkv, dqkv, idx, (size_t)probes, 1e-2f), (size_t)probes);
    free(x.qkv), free(x.R), free(x.out), free(x.lse), free(dqkv), free(idx);
}

START_TEST(backward_matches_finite_differences)
{
    setup_fp32();
    for (int k = 0; k < KSETS; k++) {
        if (!use_kernels(k, "finite differences")) continue;
        check_fd((struct shape){1, 7, 2, 8}, k, 60);
        check_fd((struct shape){2, 70, 2, 16}, k, 60);
    }
}
END_TEST

/* ---- bf16 activations -------------------------------------------------- */

static float bf16_round(float x) { return dt_bf16_to_f32(dt_f32_to_bf16(x)); }

static uint16_t *to_bf16(const float *x, size_t n)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_bf16(x[i]);
    return h;
}

/* |got - want| <= half a bf16 ulp of want (2^-8 relative, the rounding of
 * the stored output), plus float noise. */
static void expect_bf16_rounding(const char *what, const uint16_t *got, const float *want, size_t n,
                                 double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)dt_bf16_to_f32(got[i]), w = (double)want[i];
        double ex = fabs(g - w) / (0x1p-8 * fabs(w) + floor);
        ck_assert_msg(ex <= 1.0, "%s [%zu]: bf16 %.6g, float32 %.6g", what, i, g, w);
        worst = fmax(worst, ex);
    }
    printf("# %-40s worst error %.2f of the bf16 bound\n", what, worst);
}

/* The bf16 products (k = 0, where cpu_attention.c picks AVX512-BF16 dot
 * products or AMX tiles for them): q k^T, P, dS and the scaled q rounded to
 * bf16, sums in float. Against the double reference on the same inputs:
 * the measured errors are 0.1-0.5% of the largest value. */
static const char *const units[] = {"fp32_fma", "bf16_dot", "amx_bf16"};
enum { NUNITS = 3 };
static int unit_now(void)
{
    const char *u = cpu_att_unit(1);
    for (int i = 0; i < NUNITS; i++)
        if (!strcmp(u, units[i])) return i;
    ck_abort_msg("cpu_att_unit gave '%s'", u);
    return 0;
}
static int bf16_products(int k) { return k == 0 && unit_now() != 0; }
static long lse_differ; /* lse entries where the bf16 products' run differs from float32's */
/* A weighted sum of each unit's lse: runs on different units must differ. */
static double lse_sig[NUNITS];

static void check_bf16_products(struct shape s, const float *qkv, const float *R, const uint16_t *out16,
                                const float *lse16, const uint16_t *dqkv16, const float *lse)
{
    const size_t nq = qkv_size(s), na = act_size(s), nl = lse_size(s);
    double *rout = malloc(sizeof(double) * na), *rlse = malloc(sizeof(double) * nl), *rd = malloc(sizeof(double) * nq);
    float *d = malloc(sizeof(float) * nq);
    ref_attention(rout, rlse, rd, qkv, R, s);
    double eo = 0.0, om = 0.0, el = 0.0;
    for (size_t i = 0; i < na; i++) {
        eo = fmax(eo, fabs((double)dt_bf16_to_f32(out16[i]) - rout[i]));
        om = fmax(om, fabs(rout[i]));
    }
    for (size_t i = 0; i < nl; i++) {
        el = fmax(el, fabs((double)lse16[i] - rlse[i]) / (1.0 + fabs(rlse[i])));
        lse_differ += lse16[i] != lse[i];
        lse_sig[unit_now()] += (double)lse16[i] * (double)(i % 97 + 1);
    }
    for (size_t i = 0; i < nq; i++) d[i] = dt_bf16_to_f32(dqkv16[i]);
    double m, eq = part_error(d, rd, s, 0, &m), ek = part_error(d, rd, s, 1, &m), ev = part_error(d, rd, s, 2, &m);
    eo = om > 0.0 ? eo / om : eo;
    printf("# bf16 products (%s) T=%3d H=%d D=%3d: out %.1e, lse %.1e, dq %.1e, dk %.1e, dv %.1e of the largest\n",
           units[unit_now()], s.T, s.H, s.D, eo, el, eq, ek, ev);
    ck_assert_msg(eo < 2e-2 && el < 2e-2 && eq < 2e-2 && ek < 2e-2 && ev < 2e-2,
                  "bf16 products T=%d H=%d D=%d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e (tolerance 2e-2)", s.T, s.H,
                  s.D, eo, el, eq, ek, ev);
    free(rout), free(rlse), free(rd), free(d);
}

static void check_bf16(struct shape s, int k)
{
    const size_t nq = qkv_size(s), na = act_size(s), nl = lse_size(s);
    const int C = s.H * s.D;
    char why[256], what[96];
    float *qkv = malloc(sizeof(float) * nq), *R = malloc(sizeof(float) * na), *out = nan_buffer(na),
          *lse = nan_buffer(nl), *dqkv = nan_buffer(nq), *lse16 = nan_buffer(nl);
    random_inputs(qkv, R, s, 4000 + (uint64_t)(s.T * 7 + s.H * 3 + s.D));
    for (size_t i = 0; i < nq; i++) qkv[i] = bf16_round(qkv[i]);
    for (size_t i = 0; i < na; i++) R[i] = bf16_round(R[i]);
    uint16_t *qkv16 = to_bf16(qkv, nq), *R16 = to_bf16(R, na), *out16 = malloc(sizeof(uint16_t) * na),
             *dqkv16 = malloc(sizeof(uint16_t) * nq);
    memset(out16, 0xff, sizeof(uint16_t) * na); /* NaN */
    memset(dqkv16, 0xff, sizeof(uint16_t) * nq);

    ck_assert_msg(be->setup(1, DT_PREC_BF16, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(be->set_act_type(DT_PREC_BF16), DT_PREC_BF16);
    be->attention_forward(out16, lse16, qkv16, s.n, s.T, C, s.H);
    be->attention_backward(dqkv16, R16, qkv16, out16, lse16, s.n, s.T, C, s.H);

    /* float32 on the same inputs, and backward from the same (rounded) out */
    setup_fp32();
    be->attention_forward(out, lse, qkv, s.n, s.T, C, s.H);
    if (bf16_products(k)) {
        check_bf16_products(s, qkv, R, out16, lse16, dqkv16, lse);
        free(qkv), free(R), free(out), free(lse), free(dqkv), free(lse16);
        free(qkv16), free(R16), free(out16), free(dqkv16);
        return;
    }
    for (size_t i = 0; i < nl; i++)
        ck_assert_msg(lse16[i] == lse[i], "lse [%zu]: bf16 run %.9g, float32 run %.9g (same inputs)", i,
                      (double)lse16[i], (double)lse[i]);
    snprintf(what, sizeof what, "bf16 out %s T=%d H=%d D=%d", kernel_name(k), s.T, s.H, s.D);
    expect_bf16_rounding(what, out16, out, na, 1e-6);
    for (size_t i = 0; i < na; i++) out[i] = dt_bf16_to_f32(out16[i]);
    be->attention_backward(dqkv, R, qkv, out, lse, s.n, s.T, C, s.H);
    double gmax = 0.0;
    for (size_t i = 0; i < nq; i++) gmax = fmax(gmax, fabs((double)dqkv[i]));
    snprintf(what, sizeof what, "bf16 dqkv %s T=%d H=%d D=%d", kernel_name(k), s.T, s.H, s.D);
    expect_bf16_rounding(what, dqkv16, dqkv, nq, 1e-6 * gmax);
    free(qkv), free(R), free(out), free(lse), free(dqkv), free(lse16);
    free(qkv16), free(R16), free(out16), free(dqkv16);
}

START_TEST(bf16_matches_fp32)
{
    char why[256];
    if (be->setup(1, DT_PREC_BF16, why, sizeof why) != 0) {
        printf("SKIP bf16 attention: %s\n", why);
        setup_fp32();
        return;
    }
    lse_differ = 0;
    unsetenv("DTRAIN_ATTENTION_UNIT");
    for (int k = 0; k < KSETS; k++)
        for (int i = 0; i < NSHAPES && use_kernels(k, "bf16"); i++) check_bf16(shapes[i], k);
    if (!kset_usable(0) || !__builtin_cpu_supports("avx512bf16")) {
        printf("# bf16 products not checked: this CPU lacks AVX-512F or AVX512-BF16\n");
        setup_fp32();
        return;
    }
    /* The AVX-512 set on each unit it can take here, asked for by name */
    int ran[NUNITS] = {0};
    setenv("DTRAIN_NO_FAST_KERNELS", "0", 1);
    for (int u = 0; u < NUNITS; u++) {
        setenv("DTRAIN_ATTENTION_UNIT", units[u], 1);
        if (unit_now() != u) {
            printf("# bf16 attention on %s: SKIP, not usable here (%s runs instead)\n", units[u], units[unit_now()]);
            continue;
        }
        lse_sig[u] = 0.0;
        for (int i = 0; i < NSHAPES; i++) check_bf16(shapes[i], 0);
        ran[u] = 1;
    }
    unsetenv("DTRAIN_ATTENTION_UNIT");
    printf("# bf16 products: lse differs from float32's in %ld entries\n", lse_differ);
    ck_assert_msg(ran[0] && ran[1], "fp32_fma and bf16_dot must be usable wherever AVX512-BF16 is");
    ck_assert_msg(lse_differ > 0, "the AVX-512 set under bf16 gave float32's lse everywhere: no bf16 products ran");
    if (ran[2]) {
        printf("# bf16 products: lse signature %.17g on AMX tiles, %.17g on bf16 dot products\n", lse_sig[2],
               lse_sig[1]);
        ck_assert_msg(lse_sig[2] != lse_sig[1], "AMX tiles and bf16 dot products gave the same lse: no tiles ran");
    }
    setup_fp32();
}
END_TEST

/* An empty batch writes nothing. */
START_TEST(empty_batch)
{
    setup_fp32();
    float sentinel = 7.0f;
    be->attention_forward(&sentinel, &sentinel, &sentinel, 0, 16, 16, 2);
    be->attention_backward(&sentinel, &sentinel, &sentinel, &sentinel, &sentinel, 0, 16, 16, 2);
    ck_assert(sentinel == 7.0f);
}
END_TEST

/* A unit the kernels do not know is refused by name (dt_die: abort()
 * outside MPI), before any product runs. */
START_TEST(bad_unit)
{
    setup_fp32();
    float qkv[3 * 16] = {0}, out[16], lse[1];
    setenv("DTRAIN_ATTENTION_UNIT", "tensor_core", 1);
    be->attention_forward(out, lse, qkv, 1, 1, 16, 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300); /* the double reference on a shared, loaded machine */
    tcase_add_test(tc, forward_matches_reference);
    tcase_add_test(tc, backward_matches_reference);
    tcase_add_test(tc, backward_matches_finite_differences);
    tcase_add_test(tc, bf16_matches_fp32);
    tcase_add_test(tc, empty_batch);
    /* a test that must die needs its own process (not under CK_FORK=no) */
    const char *fork = getenv("CK_FORK");
    if (!fork || strcmp(fork, "no")) tcase_add_test_raise_signal(tc, bad_unit, SIGABRT);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
