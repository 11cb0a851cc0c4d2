/* attention.c: the CPU backend's causal attention kernel (backend.h's
 * attention_forward / attention_backward, src/cpu/cpu_attention.c) in
 * GFLOP/s, against bench/peak's one-core figures (bench/README.md, "GPT").
 *
 *   bench/attention [--n N] [--T T] [--C C] [--H H] [--repeats R]
 *                   [--precision fp32|bf16|both] [--threads K]
 *
 * Defaults: gpt-mini's attention at batch 8 (n 8, T 256, C 384, H 6), 7
 * repeats, both precisions where the CPU runs bf16, one thread. Each
 * precision is warmed up once, then forward and backward are timed R times
 * each; one line per precision, machine-readable:
 *   attention fp32 n=8 T=256 C=384 H=6 fwd_ms=4.1 bwd_ms=10.2 fwd_gflops=98.6 bwd_gflops=99.0 fwdbwd_gflops=98.9 repeats=7 unit=fp32_fma
 * (medians; min and max of the fwd+bwd time are in a '#' line after it;
 * unit: bench/peak's name for what the products ran on, fp32_fma, bf16_dot
 * or amx_bf16).
 * The FLOP counted are the products the kernel computes, causal half
 * included: per (sample, head) forward S = Q K^T and O = P V over the
 * T (T + 1) / 2 query-key pairs, 2 D FLOP a pair each, so forward is
 * 2 n C T (T + 1); backward recomputes S and computes dV, dP, dQ and dK,
 * five products, 2.5 x forward (fwd+bwd: 3.5 x forward). Softmax, exp and
 * the gathers are not counted.
 *
 * The design decision: it checks what it times. Before timing, one (sample,
 * head)'s output and the gradient of its q are compared with a plain
 * double-precision reference computed here (relative error within 1e-4 for
 * fp32, 2e-2 for bf16; otherwise exit 1), so a fast wrong kernel cannot
 * pass. Exit 0; 1 on a wrong result; 2 for a bad command line; a precision
 * the CPU cannot run (bf16 without AVX512-BF16) is reported unavailable. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu/cpu_attention_kernels.h" /* cpu_att_unit */
#include "runtime/half.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sample 0, head 0 in double: out [T][D] and dq [T][D] (the gradient of q
 * for the loss sum(dout . out)), from float copies of qkv [T][3C] and dout
 * [T][C] (their first sample). */
static void reference(double *out, double *dq, const float *qkv, const float *dout, int T, int C, int H)
{
    const int D = C / H;
    const double scale = 1.0 / sqrt((double)D);
    double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
    for (int i = 0; i < T; i++) {
        const float *q = qkv + (size_t)i * 3 * C;
        double mx = -INFINITY, sum = 0.0, di = 0.0;
        for (int j = 0; j <= i; j++) {
            const float *k = qkv + (size_t)j * 3 * C + C;
            double s = 0.0;
            for (int d = 0; d < D; d++) s += (double)q[d] * (double)k[d];
            p[j] = s * scale;
            if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
        for (int d = 0; d < D; d++) out[(size_t)i * D + d] = 0.0;
        for (int j = 0; j <= i; j++) {
            p[j] /= sum;
            const float *v = qkv + (size_t)j * 3 * C + 2 * C;
            for (int d = 0; d < D; d++) out[(size_t)i * D + d] += p[j] * (double)v[d];
        }
        /* dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), dP_ij = dout_i . v_j; dq_i = scale sum_j dS_ij k_j */
        for (int j = 0; j <= i; j++) {
            const float *v = qkv + (size_t)j * 3 * C + 2 * C;
            double s = 0.0;
            for (int d = 0; d < D; d++) s += (double)dout[(size_t)i * C + d] * (double)v[d];
            dp[j] = s;
            di += p[j] * s;
        }
        for (int d = 0; d < D; d++) dq[(size_t)i * D + d] = 0.0;
        for (int j = 0; j <= i; j++) {
            const float *k = qkv + (size_t)j * 3 * C + C;
            const double ds = p[j] * (dp[j] - di) * scale;
            for (int d = 0; d < D; d++) dq[(size_t)i * D + d] += ds * (double)k[d];
        }
    }
    free(p);
    free(dp);
}

/* Largest |got - want| over the largest |want|, head 0 of sample 0. */
static double rel_error(const float *got, int ld, const double *want, int T, int D)
{
    double err = 0.0, big = 0.0;
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++) {
            double w = want[(size_t)i * D + d], e = fabs((double)got[(size_t)i * ld + d] - w);
            if (e > err) err = e;
            if (fabs(w) > big) big = fabs(w);
        }
    return big > 0.0 ? err / big : err;
}

/* One precision: returns 0, 1 on a wrong result, -1 when unavailable. */
static int run(const char *name, int prec, int n, int T, int C, int H, int repeats, int threads)
{
    const struct dt_backend *be = &dt_backend_cpu;
    char why[256] = "";
    if (be->setup(threads, prec, why, sizeof why) != 0) {
        printf("attention %s unavailable: %s\n", name, why);
        return -1;
    }
    const int type = be->set_act_type(prec);
    const size_t rows = (size_t)n * T, as = dt_act_size(type), D = (size_t)(C / H);
    float *h_qkv = malloc(sizeof(float) * rows * 3 * C), *h_dout = malloc(sizeof(float) * rows * C);
    float *h_out = malloc(sizeof(float) * rows * C), *h_dqkv = malloc(sizeof(float) * rows * 3 * C);
    dt_rng rng;
    dt_rng_seed(&rng, 7, 0);
    for (size_t i = 0; i < rows * 3 * C; i++) h_qkv[i] = 2.0f * (float)dt_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < rows * C; i++) h_dout[i] = 2.0f * (float)dt_rng_uniform(&rng) - 1.0f;
    /* The buffers in the activation type; the reference reads the values
     * as stored (rounded to bf16 under bf16). */
    void *enc = malloc(as * rows * 3 * C);
    dt_act *qkv = be->alloc(as * rows * 3 * C), *dout = be->alloc(as * rows * C);
    dt_act *out = be->alloc(as * rows * C), *dqkv = be->alloc(as * rows * 3 * C);
    float *lse = be->alloc(sizeof(float) * (size_t)n * H * T);
    dt_act_encode(type, enc, h_qkv, rows * 3 * C);
    be->upload(qkv, enc, as * rows * 3 * C);
    dt_act_decode(type, h_qkv, enc, rows * 3 * C);
    dt_act_encode(type, enc, h_dout, rows * C);
    be->upload(dout, enc, as * rows * C);
    dt_act_decode(type, h_dout, enc, rows * C);

    be->attention_forward(out, lse, qkv, n, T, C, H); /* also the warm-up */
    be->attention_backward(dqkv, dout, qkv, out, lse, n, T, C, H);
    be->download(enc, out, as * rows * C);
    dt_act_decode(type, h_out, enc, rows * C);
    be->download(enc, dqkv, as * rows * 3 * C);
    dt_act_decode(type, h_dqkv, enc, rows * 3 * C);
    double *want_out = malloc(sizeof(double) * T * D), *want_dq = malloc(sizeof(double) * T * D);
    reference(want_out, want_dq, h_qkv, h_dout, T, C, H);
    const double tol = prec == DT_PREC_FP32 ? 1e-4 : 2e-2;
    const double e_out = rel_error(h_out, C, want_out, T, (int)D), e_dq = rel_error(h_dqkv, 3 * C, want_dq, T, (int)D);
    int bad = !(e_out <= tol && e_dq <= tol);
    printf("# %s check against a double reference (sample 0, head 0): out %.2g, dq %.2g relative (tol %.0e)%s\n", name,
           e_out, e_dq, tol, bad ? ": WRONG" : "");

    double *tf = malloc(sizeof(double) * (size_t)repeats), *tb = malloc(sizeof(double) * (size_t)repeats);
    double *tt = malloc(sizeof(double) * (size_t)repeats);
    for (int r = 0; r < repeats && !bad; r++) {
        double t0 = now();
        be->attention_forward(out, lse, qkv, n, T, C, H);
        double t1 = now();
        be->attention_backward(dqkv, dout, qkv, out, lse, n, T, C, H);
        double t2 = now();
        tf[r] = t1 - t0, tb[r] = t2 - t1, tt[r] = t2 - t0;
    }
    if (!bad) {
        qsort(tf, (size_t)repeats, sizeof *tf, cmp_double);
        qsort(tb, (size_t)repeats, sizeof *tb, cmp_double);
        qsort(tt, (size_t)repeats, sizeof *tt, cmp_double);
        const double fwd = 2.0 * n * C * (double)T * (T + 1), mf = tf[repeats / 2], mb = tb[repeats / 2],
                     mt = tt[repeats / 2];
        printf("attention %s n=%d T=%d C=%d H=%d fwd_ms=%.2f bwd_ms=%.2f fwd_gflops=%.1f bwd_gflops=%.1f "
               "fwdbwd_gflops=%.1f repeats=%d unit=%s\n", name, n, T, C, H, 1e3 * mf, 1e3 * mb, fwd / mf / 1e9,
               2.5 * fwd / mb / 1e9, 3.5 * fwd / mt / 1e9, repeats, cpu_att_unit(prec != DT_PREC_FP32));
        printf("# %s fwd+bwd ms: min %.2f median %.2f max %.2f\n", name, 1e3 * tt[0], 1e3 * mt,
               1e3 * tt[repeats - 1]);
    }
    free(tf), free(tb), free(tt), free(want_out), free(want_dq);
    be->free(qkv), be->free(dout), be->free(out), be->free(dqkv), be->free(lse);
    free(enc), free(h_qkv), free(h_dout), free(h_out), free(h_dqkv);
    return bad;
}

static int whole(const char *flag, const char *arg, long lo, long hi, int *v)
{
    char *end;
    long x = strtol(arg, &end, 10);
    if (end == arg || *end || x < lo || x > hi) {
        fprintf(stderr, "attention: %s: expected a whole number in %ld..%ld, found '%s'\n", flag, lo, hi, arg);
        return -1;
    }
    *v = (int)x;
    return 0;
}

int main(int argc, char **argv)
{
    int n = 8, T = 256, C = 384, H = 6, repeats = 7, threads = 1, want = 3; /* bits: fp32, bf16 */
    static const struct option opts[] = {{"n", required_argument, 0, 'n'}, {"T", required_argument, 0, 'T'},
                                         {"C", required_argument, 0, 'C'}, {"H", required_argument, 0, 'H'},
                                         {"repeats", required_argument, 0, 'r'},
                                         {"precision", required_argument, 0, 'p'},
                                         {"threads", required_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': bad |= whole("--n", optarg, 1, 1 << 16, &n); break;
        case 'T': bad |= whole("--T", optarg, 1, 1 << 16, &T); break;
        case 'C': bad |= whole("--C", optarg, 1, 1 << 16, &C); break;
        case 'H': bad |= whole("--H", optarg, 1, 1 << 12, &H); break;
        case 'r': bad |= whole("--repeats", optarg, 1, 1000, &repeats); break;
        case 't': bad |= whole("--threads", optarg, 1, 1024, &threads); break;
        case 'p':
            if (!strcmp(optarg, "fp32")) want = 1;
            else if (!strcmp(optarg, "bf16")) want = 2;
            else if (!strcmp(optarg, "both")) want = 3;
            else {
                fprintf(stderr, "attention: --precision: expected fp32, bf16 or both, found '%s'\n", optarg);
                bad = -1;
            }
            break;
        case 'h':
            puts("Usage: bench/attention [--n N] [--T T] [--C C] [--H H] [--repeats R] "
                 "[--precision fp32|bf16|both] [--threads K]");
            return 0;
        default: return 2;
        }
    }
    if (bad) return 2;
    if (optind < argc) {
        fprintf(stderr, "attention: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (C % H) {
        fprintf(stderr, "attention: --H %d does not divide --C %d\n", H, C);
        return 2;
    }
    printf("# attention: causal, n %d x T %d, C %d, H %d heads of %d, %d thread(s), %d repeats; FLOP: forward "
           "2 n C T (T+1), backward 2.5 x that (5 products, S recomputed)\n", n, T, C, H, C / H, threads, repeats);
    int rc = 0;
    if (want & 1) rc |= run("fp32", DT_PREC_FP32, n, T, C, H, repeats, threads) == 1;
    if (want & 2) rc |= run("bf16", DT_PREC_BF16, n, T, C, H, repeats, threads) == 1;
    return rc;
}
