/* check_gpu.c: the CUDA backend against the CPU reference.
 *
 * Every op of dt_backend_cuda runs on the same random inputs as
 * dt_backend_cpu (set up in fp32) and the results are compared: exactly
 * where both sides do the same single rounding (ReLU, bias add, pixel
 * conversion, dropout's scaling, unscaling), else as a norm-wise relative
 * error max|gpu - cpu| / max|cpu| against a tolerance sized for the
 * precision: the GEMM, dense and convolution checks run once per precision
 * the device accepts (fp32, bf16, fp16). Dropout draws its own mask on the
 * device, so it is checked statistically. Batchnorm's per-channel ops and
 * average pooling are compared op by op, and so are the transformer's
 * (embedding, layer normalization, attention, GELU, the tied head's
 * product, token cross-entropy) with float and 16-bit activations, and
 * AdamW and gradient clipping's sum of squares and scaling. Then the seed CNN and a small
 * residual network (batchnorm, add, route, average pooling) train a few
 * steps on both backends from the same parameters and data (dropout 0), and
 * losses, first-step gradients, moving statistics and parameter updates
 * are compared. With activations stored in 16 bits (set_act_type, under
 * bf16 and fp16), every op on activations and the same training runs are
 * compared with act16_ref.c, the CPU's float ops on the same 16-bit
 * inputs, element by element against bounds on the 16-bit roundings. Last,
 * recorded steps (--cuda-graphs) must equal plain ones bit for bit, with
 * float and with bf16 activations.
 *
 * Plain C, no MPI, no Check: it runs wherever a GPU is, and exits 77
 * ("SKIP: no GPU: <reason>") where none is. One line per check, a summary,
 * exit 1 on any failure. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "act16_ref.h"
#include "backend.h"
#include "gpu/gpu.h"
#include "runtime/half.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "runtime/rng.h"
#include "runtime/status.h"
#include "train/step_graph.h"

static const struct dt_backend *const G = &dt_backend_cuda;
static const struct dt_backend *const C = &dt_backend_cpu;
static const struct dt_backend *R; /* dt_act16_ref(): the CPU's ops on 16-bit activations */

/* Tolerances per precision, as norm-wise relative errors. fp32: cuBLAS and
 * cuDNN sum in other orders than OpenBLAS and oneDNN (~1e-6 for these
 * sizes). 16-bit: each operand is rounded to 8 (bf16) or 11 (fp16)
 * significant bits before float accumulation, ~2^-8 or 2^-10 relative per
 * product. Training is looser at every precision: where two values are
 * nearly tied, a ReLU mask or a max-pool winner can differ between the
 * backends, and each such flip moves a few hundred gradient elements by a
 * whole term. A few flips per step are expected with fp32's errors, a few
 * percent of all windows and units with 16-bit ones (~sqrt(3%) = 0.17 in
 * the 2-norm), so training is compared in 2-norms, which a few elements
 * barely move. A wiring error (a wrong layout, padding or transpose) gives
 * differences of order one (~1.4 for unrelated values), so these still
 * catch it; the op checks hold the arithmetic itself tight. */
struct tol {
    const char *name;
    int prec;
    double gemm, conv;
    double loss;   /* per-step loss (continuous: no flips) */
    double train;  /* first-step gradients and the parameters' total update */
};
static const struct tol tolerances[] = {
    {"fp32", DT_PREC_FP32, 1e-4, 1e-4, 1e-4, 1e-2},
    {"bf16", DT_PREC_BF16, 2e-2, 2e-2, 3e-2, 5e-1},
    {"fp16", DT_PREC_FP16, 5e-3, 5e-3, 1e-2, 3e-1},
};

static const struct tol *tol_for(int prec)
{
    size_t i = 0;
    while (tolerances[i].prec != prec) i++; /* every precision has its row */
    return &tolerances[i];
}

static int nchecks, nfailed;
static dt_rng rng;

__attribute__((format(printf, 2, 3))) static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    nchecks++;
    if (!ok) nfailed++;
}

/* ---- helpers ------------------------------------------------------------- */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static float uniform(float lo, float hi) { return lo + (hi - lo) * dt_rng_uniform(&rng); }

static float *fill(size_t n, float lo, float hi)
{
    float *x = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = uniform(lo, hi);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = xmalloc(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static float *to_dev(const float *h, size_t n)
{
    float *d = G->alloc(sizeof(float) * n);
    G->upload(d, h, sizeof(float) * n);
    return d;
}

static float *from_dev(const float *d, size_t n)
{
    float *h = xmalloc(sizeof(float) * n);
    G->download(h, d, sizeof(float) * n);
    return h;
}

/* max|a - ref| / max|ref|; NaN or infinity in either gives infinity. */
static double rel_err(const float *a, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!isfinite(d)) return INFINITY;
        if (d > num) num = d;
        if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ||a - ref|| / ||ref|| (2-norms): the training checks' measure, which a
 * few flipped elements (see the tolerances) move only a little. */
static double rel_l2(const float *a, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Elements that differ (NaN equals NaN). */
static size_t ndiff(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += !(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])));
    return d;
}

/* ---- memory -------------------------------------------------------------- */

static void test_memory(void)
{
    const size_t n = 1001;
    float *h = fill(n, -1.0f, 1.0f), *back = xmalloc(sizeof(float) * n);
    float *d = to_dev(h, n), *d2 = G->alloc(sizeof(float) * n);
    G->copy(d2, d, sizeof(float) * n);
    G->download(back, d2, sizeof(float) * n);
    check(ndiff(back, h, n) == 0, "memory: upload, copy, download give the data back (%zu floats)", n);
    G->zero(d2, sizeof(float) * n);
    G->download(back, d2, sizeof(float) * n);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += back[i] != 0.0f;
    check(nz == 0, "memory: zero clears every byte (%zu left)", nz);
    float *pin = G->host_alloc(sizeof(float) * n);
    memcpy(pin, h, sizeof(float) * n);
    G->upload(d2, pin, sizeof(float) * n);
    G->synchronize();
    G->download(back, d2, sizeof(float) * n);
    check(ndiff(back, h, n) == 0, "memory: upload from host_alloc'd (pinned) memory");
    G->host_free(pin);
    G->free(d);
    G->free(d2);
    free(h);
    free(back);
}

/* ---- GEMM ---------------------------------------------------------------- */

static void gemm_case(const struct tol *t, int ta, int tb, int m, int n, int k, int pad, float alpha, float beta)
{
    int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    int lda = ca + pad, ldb = cb + pad, ldc = n + pad;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)m * ldc;
    float *a = fill(na, -1.0f, 1.0f), *b = fill(nb, -1.0f, 1.0f), *c = fill(nc, -1.0f, 1.0f);
    float *da = to_dev(a, na), *db = to_dev(b, nb), *dc = to_dev(c, nc);
    C->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    G->gemm(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    float *g = from_dev(dc, nc);
    double e = rel_err(g, c, nc);
    check(e <= t->gemm, "gemm %s ta=%d tb=%d m=%d n=%d k=%d ld+%d alpha=%g beta=%g: rel err %.2e (tol %.0e)",
          t->name, ta, tb, m, n, k, pad, (double)alpha, (double)beta, e, t->gemm);
    G->free(da);
    G->free(db);
    G->free(dc);
    free(a);
    free(b);
    free(c);
    free(g);
}

static void test_gemm(const struct tol *t)
{
    static const struct { int m, n, k, pad; float alpha, beta; } cases[] = {
        {64, 128, 1600, 0, 1.0f, 0.0f},   /* the seed CNN's dense layer, forward */
        {1600, 128, 64, 0, 1.0f, 0.0f},   /* its weight gradient */
        {64, 1600, 128, 0, 1.0f, 0.0f},   /* its input gradient */
        {7, 10, 128, 0, 1.0f, 0.0f},      /* a ragged last batch */
        {13, 17, 29, 3, 0.7f, 0.3f},      /* odd sizes, strided, alpha and beta */
        {1, 1, 1, 0, 1.0f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                gemm_case(t, ta, tb, cases[i].m, cases[i].n, cases[i].k, cases[i].pad, cases[i].alpha,
                          cases[i].beta);

    /* k = 0: C = beta * C, and beta = 0 clears even NaN (BLAS semantics;
     * a layer's weight gradient for an empty batch relies on it). */
    const int m = 5, n = 6;
    float *c = xmalloc(sizeof(float) * m * n);
    for (int i = 0; i < m * n; i++) c[i] = i == 3 ? NAN : (float)i;
    float *dc = to_dev(c, (size_t)m * n), *dummy = G->alloc(64);
    G->gemm(0, 0, m, n, 0, 1.0f, dummy, 1, dummy, n, 0.0f, dc, n);
    float *g = from_dev(dc, (size_t)m * n);
    size_t bad = 0;
    for (int i = 0; i < m * n; i++) bad += g[i] != 0.0f;
    check(bad == 0, "gemm %s k=0 beta=0 clears C (%zu not zero)", t->name, bad);
    for (int i = 0; i < m * n; i++) c[i] = (float)i;
    G->upload(dc, c, sizeof(float) * m * n);
    G->gemm(1, 1, m, n, 0, 1.0f, dummy, m, dummy, 1, 0.5f, dc, n);
    free(g);
    g = from_dev(dc, (size_t)m * n);
    bad = 0;
    for (int i = 0; i < m * n; i++) bad += g[i] != 0.5f * (float)i;
    check(bad == 0, "gemm %s k=0 beta=0.5 scales C (%zu wrong)", t->name, bad);
    G->free(dc);
    G->free(dummy);
    free(c);
    free(g);
}

/* ---- dense ------------------------------------------------------------------ */

/* dense_forward/backward with float activations: against the CPU's (the
 * GEMM tolerance; dbias is a float sum at every precision), and bit for
 * bit against the float pieces they are made of on the GPU (gemm,
 * bias_add, bias_grad), which is what the layer called before them. */
struct dense_case {
    int n, in, units;
};
static const struct dense_case dense_cases[] = {
    {64, 1600, 128}, /* the seed CNN's dense layer */
    {64, 128, 10},   /* its output layer */
    {7, 128, 10},    /* a ragged last batch */
    {13, 29, 17},    /* odd sizes */
};

static void dense_run(const struct tol *t, const struct dense_case *dc, int with_dinp)
{
    const int n = dc->n, in = dc->in, units = dc->units;
    size_t nx = (size_t)n * in, ny = (size_t)n * units, nw = (size_t)in * units, nb = (size_t)units;
    float *x = fill(nx, -1.0f, 1.0f), *w = fill(nw, -0.1f, 0.1f), *b = fill(nb, -0.5f, 0.5f);
    float *dy = fill(ny, -1.0f, 1.0f);
    float *y = xmalloc(sizeof(float) * ny), *dx = xmalloc(sizeof(float) * nx);
    float *dw = xmalloc(sizeof(float) * nw), *db = xmalloc(sizeof(float) * nb);
    float *x_d = to_dev(x, nx), *w_d = to_dev(w, nw), *b_d = to_dev(b, nb), *dy_d = to_dev(dy, ny);
    float *y_d = G->alloc(sizeof(float) * ny), *dx_d = G->alloc(sizeof(float) * nx);
    float *dw_d = G->alloc(sizeof(float) * nw), *db_d = G->alloc(sizeof(float) * nb);
    float *y2_d = G->alloc(sizeof(float) * ny), *dx2_d = G->alloc(sizeof(float) * nx);
    float *dw2_d = G->alloc(sizeof(float) * nw), *db2_d = G->alloc(sizeof(float) * nb);

    C->dense_forward(n, in, units, y, x, w, b);
    G->dense_forward(n, in, units, y_d, x_d, w_d, b_d);
    C->dense_backward(n, in, units, with_dinp ? dx : NULL, dw, db, dy, x, w);
    G->dense_backward(n, in, units, with_dinp ? dx_d : NULL, dw_d, db_d, dy_d, x_d, w_d);
    G->gemm(0, 0, n, units, in, 1.0f, x_d, in, w_d, units, 0.0f, y2_d, units);
    G->bias_add(y2_d, b_d, n, units);
    G->gemm(1, 0, in, units, n, 1.0f, x_d, in, dy_d, units, 0.0f, dw2_d, units);
    G->bias_grad(db2_d, dy_d, n, units);
    G->gemm(0, 1, n, in, units, 1.0f, dy_d, units, w_d, units, 0.0f, dx2_d, in);

    float *gy = from_dev(y_d, ny), *gdx = from_dev(dx_d, nx), *gdw = from_dev(dw_d, nw), *gdb = from_dev(db_d, nb);
    float *py = from_dev(y2_d, ny), *pdx = from_dev(dx2_d, nx), *pdw = from_dev(dw2_d, nw), *pdb = from_dev(db2_d, nb);
    double ey = rel_err(gy, y, ny), edx = with_dinp ? rel_err(gdx, dx, nx) : 0.0;
    double edw = rel_err(gdw, dw, nw), edb = rel_err(gdb, db, nb);
    double tb = 1e-6 + 3e-7 * sqrt((double)n); /* as test_bias */
    check(ey <= t->gemm && edx <= t->gemm && edw <= t->gemm && edb <= tb,
          "dense %s n=%d in=%d units=%d%s: rel err out %.1e, dinp %.1e, dweight %.1e (tol %.0e), dbias %.1e (tol %.0e)",
          t->name, n, in, units, with_dinp ? "" : " (no dinp)", ey, edx, edw, t->gemm, edb, tb);
    size_t d = ndiff(gy, py, ny) + ndiff(gdw, pdw, nw) + ndiff(gdb, pdb, nb) + (with_dinp ? ndiff(gdx, pdx, nx) : 0);
    check(d == 0, "dense %s n=%d in=%d units=%d%s: bit for bit gemm + bias_add, gemm + bias_grad + gemm (%zu differ)",
          t->name, n, in, units, with_dinp ? "" : " (no dinp)", d);

    float *bufs_d[] = {x_d, w_d, b_d, dy_d, y_d, dx_d, dw_d, db_d, y2_d, dx2_d, dw2_d, db2_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    float *bufs[] = {x, w, b, dy, y, dx, dw, db, gy, gdx, gdw, gdb, py, pdx, pdw, pdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* No samples: dweight and dbias are overwritten with zeros (the garbage
 * ones here must go), nothing else is touched. */
static void dense_empty(const char *name)
{
    const int in = 29, units = 17;
    size_t nw = (size_t)in * units;
    float *ones = fill(nw + (size_t)units, 1.0f, 1.0f), *g_d = to_dev(ones, nw + (size_t)units);
    void *dummy = G->alloc(64);
    G->dense_forward(0, in, units, dummy, dummy, dummy, dummy);
    G->dense_backward(0, in, units, NULL, g_d, g_d + nw, dummy, dummy, dummy);
    float *g = from_dev(g_d, nw + (size_t)units);
    size_t nz = 0;
    for (size_t j = 0; j < nw + (size_t)units; j++) nz += g[j] != 0.0f;
    check(nz == 0, "dense %s n=0: dweight and dbias cleared (%zu not zero)", name, nz);
    G->free(g_d);
    G->free(dummy);
    free(ones);
    free(g);
}

static void test_dense(const struct tol *t)
{
    for (size_t i = 0; i < sizeof dense_cases / sizeof *dense_cases; i++) dense_run(t, &dense_cases[i], 1);
    dense_run(t, &dense_cases[2], 0);
    dense_empty(t->name);
}

/* ---- bias, ReLU, dropout, pixels ---------------------------------------- */

static void test_bias(void)
{
    static const int shapes[][2] = {{7, 10}, {64 * 26 * 26, 32}, {1000, 129}, {3, 1}, {0, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *out = fill(n, -1.0f, 1.0f), *bias = fill((size_t)cols, -1.0f, 1.0f);
        float *dout = fill(n, 0.0f, 1.0f); /* same sign: the sums are well conditioned */
        float *dout_d = to_dev(dout, n), *out_d = to_dev(out, n), *bias_d = to_dev(bias, (size_t)cols);
        float *db_d = G->alloc(sizeof(float) * cols), *db = fill((size_t)cols, 5.0f, 6.0f);
        G->upload(db_d, db, sizeof(float) * cols); /* garbage that must be overwritten */
        C->bias_add(out, bias, rows, cols);
        G->bias_add(out_d, bias_d, rows, cols);
        C->bias_grad(db, dout, rows, cols);
        G->bias_grad(db_d, dout_d, rows, cols);
        float *g = from_dev(out_d, n), *gdb = from_dev(db_d, (size_t)cols);
        check(ndiff(g, out, n) == 0, "bias_add %dx%d: exact (%zu differ)", rows, cols, ndiff(g, out, n));
        double e = rel_err(gdb, db, (size_t)cols);
        /* The CPU sums each column in order: ~sqrt(rows) roundings. */
        double tol = 1e-6 + 3e-7 * sqrt((double)rows);
        check(rows == 0 ? ndiff(gdb, db, (size_t)cols) == 0 : e <= tol, "bias_grad %dx%d: rel err %.2e (tol %.0e)",
              rows, cols, e, tol);
        G->free(dout_d);
        G->free(out_d);
        G->free(bias_d);
        G->free(db_d);
        free(out);
        free(bias);
        free(dout);
        free(db);
        free(g);
        free(gdb);
    }
}

static void test_relu(void)
{
    const size_t n = 100003;
    float *x = fill(n, -1.0f, 1.0f), *dout = fill(n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i += 97) x[i] = 0.0f;
    float *y = xmalloc(sizeof(float) * n), *dx = xmalloc(sizeof(float) * n);
    float *x_d = to_dev(x, n), *y_d = G->alloc(sizeof(float) * n), *dout_d = to_dev(dout, n);
    C->relu_forward(y, x, n);
    G->relu_forward(y_d, x_d, n);
    float *g = from_dev(y_d, n);
    check(ndiff(g, y, n) == 0, "relu_forward: exact (%zu differ)", ndiff(g, y, n));
    C->relu_backward(dx, dout, y, n);
    G->relu_backward(dout_d, dout_d, y_d, n); /* in place, as the layers call it */
    free(g);
    g = from_dev(dout_d, n);
    check(ndiff(g, dx, n) == 0, "relu_backward in place: exact (%zu differ)", ndiff(g, dx, n));
    G->free(x_d);
    G->free(y_d);
    G->free(dout_d);
    free(x);
    free(dout);
    free(y);
    free(dx);
    free(g);
}

static void test_dropout(void)
{
    const size_t n = (size_t)1 << 20;
    const float rate = 0.3f, scale = 1.0f / (1.0f - rate);
    float *x = fill(n, 0.5f, 1.5f), *dout = fill(n, -1.0f, 1.0f);
    float *x_d = to_dev(x, n), *dout_d = to_dev(dout, n);
    float *y_d = G->alloc(sizeof(float) * n), *mask_d = G->alloc(sizeof(float) * n);
    dt_rng r, expect;
    dt_rng_seed(&r, 7, 3);
    expect = r;
    (void)dt_rng_u64(&expect);
    G->dropout_forward(y_d, mask_d, x_d, n, rate, &r);
    check(memcmp(&r, &expect, sizeof r) == 0, "dropout_forward advances the host rng by one draw");
    float *y = from_dev(y_d, n), *mask = from_dev(mask_d, n);
    size_t kept = 0, badmask = 0, badout = 0, both = 0;
    for (size_t i = 0; i < n; i++) {
        kept += mask[i] == scale;
        badmask += mask[i] != scale && mask[i] != 0.0f;
        badout += y[i] != x[i] * mask[i];
        both += i + 1 < n && mask[i] != 0.0f && mask[i + 1] != 0.0f;
    }
    double p = 1.0 - (double)rate, mean = (double)n * p, sigma = sqrt((double)n * p * (1.0 - p));
    check(fabs((double)kept - mean) <= 5.0 * sigma, "dropout_forward keeps %zu of %zu (expected %.0f +- 5 x %.0f)",
          kept, n, mean, sigma);
    /* Neighbours independent: both kept with probability p^2. */
    double mean2 = (double)(n - 1) * p * p, sigma2 = sqrt((double)(n - 1) * p * p * (1.0 - p * p));
    check(fabs((double)both - mean2) <= 5.0 * sigma2, "dropout_forward: neighbours kept together %zu times "
          "(expected %.0f +- 5 x %.0f)", both, mean2, sigma2);
    check(badmask == 0 && badout == 0, "dropout_forward: mask is 0 or 1/(1-rate), out = inp * mask exactly "
          "(%zu bad masks, %zu bad outputs)", badmask, badout);
    float *dx_d = G->alloc(sizeof(float) * n);
    G->dropout_backward(dx_d, dout_d, mask_d, n);
    float *dx = from_dev(dx_d, n);
    size_t baddx = 0;
    for (size_t i = 0; i < n; i++) baddx += dx[i] != dout[i] * mask[i];
    check(baddx == 0, "dropout_backward: dinp = dout * mask exactly (%zu differ)", baddx);
    G->dropout_forward(y_d, mask_d, x_d, n, rate, &r);
    float *mask2 = from_dev(mask_d, n);
    size_t changed = ndiff(mask, mask2, n);
    check((double)changed > 0.3 * (double)n, "dropout_forward: the next call draws a new mask (%zu of %zu differ)",
          changed, n);
    G->free(x_d);
    G->free(dout_d);
    G->free(y_d);
    G->free(mask_d);
    G->free(dx_d);
    free(x);
    free(dout);
    free(y);
    free(mask);
    free(mask2);
    free(dx);
}

static void test_images(void)
{
    const size_t n = 64 * 784 + 13;
    uint8_t *px = xmalloc(n);
    for (size_t i = 0; i < n; i++) px[i] = (uint8_t)dt_rng_below(&rng, 256);
    px[0] = 0;
    px[1] = 255;
    uint8_t *px_d = G->alloc(n);
    G->upload(px_d, px, n);
    float *f = xmalloc(sizeof(float) * n), *f_d = G->alloc(sizeof(float) * n);
    C->images_to_float(f, px, n);
    G->images_to_float(f_d, px_d, n);
    float *g = from_dev(f_d, n);
    check(ndiff(g, f, n) == 0, "images_to_float: exact (%zu differ)", ndiff(g, f, n));
    G->free(px_d);
    G->free(f_d);
    free(px);
    free(f);
    free(g);
}

/* ---- softmax cross-entropy ---------------------------------------------- */

static void test_softmax(void)
{
    static const struct { int n, classes; float scale; } cases[] = {
        {64, 10, 1.0f / 64.0f}, {7, 1000, 1.0f / 7.0f}, {33, 3, 1.0f}, {5, 1, 0.2f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int n = cases[c].n, k = cases[c].classes;
        size_t nz = (size_t)n * k;
        float *z = fill(nz, -5.0f, 5.0f);
        uint8_t *lab = xmalloc((size_t)n);
        for (int i = 0; i < n; i++) lab[i] = (uint8_t)dt_rng_below(&rng, (uint64_t)(k < 256 ? k : 256));
        if (k >= 3) { /* ties: the first maximal class is the prediction */
            z[1 * (size_t)k + 0] = z[1 * (size_t)k + 2] = 6.0f;
            lab[1] = 0; /* correct */
            z[2 * (size_t)k + 1] = z[2 * (size_t)k + 2] = 6.0f;
            lab[2] = 2; /* wrong */
        }
        float *d = xmalloc(sizeof(float) * nz), *z_d = to_dev(z, nz), *d_d = G->alloc(sizeof(float) * nz);
        uint8_t *lab_d = G->alloc((size_t)n);
        G->upload(lab_d, lab, (size_t)n);
        long cc = 5, gc = 5; /* ncorrect accumulates */
        double lc = C->softmax_xent(d, &cc, z, lab, n, k, cases[c].scale);
        double lg = G->softmax_xent(d_d, &gc, z_d, lab_d, n, k, cases[c].scale);
        float *g = from_dev(d_d, nz);
        double el = fabs(lg - lc) / fmax(1.0, fabs(lc)), ed = rel_err(g, d, nz);
        check(el <= 1e-10 && gc == cc && ed <= 1e-6, "softmax_xent n=%d classes=%d: loss %.10g vs %.10g (rel %.1e), "
              "correct %ld vs %ld, dlogits rel err %.1e (tol 1e-6)", n, k, lg, lc, el, gc, cc, ed);
        double lg2 = G->softmax_xent(NULL, NULL, z_d, lab_d, n, k, 0.0f);
        check(fabs(lg2 - lc) / fmax(1.0, fabs(lc)) <= 1e-10, "softmax_xent n=%d classes=%d without dlogits: loss %.10g",
              n, k, lg2);
        G->free(z_d);
        G->free(d_d);
        G->free(lab_d);
        free(z);
        free(lab);
        free(d);
        free(g);
    }
}

/* ---- optimizers and loss scaling ---------------------------------------- */

static void test_optim(void)
{
    const size_t n = 10007;
    float *p = fill(n, -1.0f, 1.0f), *m = fill(n, -1e-3f, 1e-3f), *v = fill(n, 0.0f, 1e-5f);
    float *g = fill(n, -1e-2f, 1e-2f), *p0 = dup(p, n);
    float *p_d = to_dev(p, n), *m_d = to_dev(m, n), *v_d = to_dev(v, n), *g_d = to_dev(g, n);
    C->adam_update(p, m, v, g, n, 3e-4f, 0.9f, 0.999f, 1e-7f);
    G->adam_update(p_d, m_d, v_d, g_d, n, 3e-4f, 0.9f, 0.999f, 1e-7f);
    float *gp = from_dev(p_d, n), *gm = from_dev(m_d, n), *gv = from_dev(v_d, n);
    for (size_t i = 0; i < n; i++) {
        gp[i] -= p0[i]; /* compare the updates, not the parameters they ride on */
        p[i] -= p0[i];
    }
    double ep = rel_err(gp, p, n), em = rel_err(gm, m, n), ev = rel_err(gv, v, n);
    check(ep <= 1e-3 && em <= 1e-6 && ev <= 1e-6, "adam_update: rel err update %.1e (tol 1e-3), m %.1e, v %.1e (tol 1e-6)",
          ep, em, ev);
    free(gp);
    free(gm);
    free(gv);

    /* SGD with momentum (velocity = m), then plain (no velocity). */
    memcpy(p, p0, sizeof(float) * n);
    G->upload(p_d, p, sizeof(float) * n);
    G->upload(m_d, m, sizeof(float) * n);
    C->sgd_update(p, m, g, n, 0.05f, 0.9f);
    G->sgd_update(p_d, m_d, g_d, n, 0.05f, 0.9f);
    gp = from_dev(p_d, n);
    gm = from_dev(m_d, n);
    ep = rel_err(gp, p, n);
    em = rel_err(gm, m, n);
    check(ep <= 1e-6 && em <= 1e-6, "sgd_update momentum 0.9: rel err param %.1e, velocity %.1e (tol 1e-6)", ep, em);
    free(gp);
    C->sgd_update(p, NULL, g, n, 0.05f, 0.0f);
    G->sgd_update(p_d, NULL, g_d, n, 0.05f, 0.0f);
    gp = from_dev(p_d, n);
    ep = rel_err(gp, p, n);
    check(ep <= 1e-6, "sgd_update plain: rel err %.1e (tol 1e-6)", ep);
    G->free(p_d);
    G->free(m_d);
    G->free(v_d);
    G->free(g_d);
    free(p);
    free(m);
    free(v);
    free(g);
    free(p0);
    free(gp);
    free(gm);
}

static void test_unscale(void)
{
    const size_t n = 10007;
    const float inv = 1.0f / 1024.0f;
    float *x = fill(n, -100.0f, 100.0f), *x_d = to_dev(x, n);
    int r = G->unscale_check(x_d, n, inv);
    float *g = from_dev(x_d, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += g[i] != x[i] * inv;
    check(r == 1 && bad == 0, "unscale_check all finite: returns %d (want 1), %zu values not scaled", r, bad);
    static const float poison[] = {NAN, INFINITY, -INFINITY};
    static const size_t where[] = {5000, 0, 10006};
    for (int k = 0; k < 3; k++) {
        float *y = dup(x, n);
        y[where[k]] = poison[k];
        G->upload(x_d, y, sizeof(float) * n);
        r = G->unscale_check(x_d, n, inv);
        free(g);
        g = from_dev(x_d, n);
        check(r == 0 && ndiff(g, y, n) == 0, "unscale_check with %g at %zu: returns %d (want 0), %zu values changed",
              (double)poison[k], where[k], r, ndiff(g, y, n));
        free(y);
    }
    G->free(x_d);
    free(x);
    free(g);
}

/* ---- gpu.h's element kernels -------------------------------------------- */

static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) return x;
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even on the upper 16 bits */
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* fp16 rounding of |x| <= 65504: 11 significant bits, or the subnormal
 * quantum 2^-24 below 2^-14; rintf rounds to nearest even. */
static float fp16_round(float x)
{
    if (x == 0.0f || !isfinite(x)) return x;
    if (fabsf(x) < 6.103515625e-05f) return ldexpf(rintf(ldexpf(x, 24)), -24);
    int e;
    float m = frexpf(x, &e);
    return ldexpf(rintf(ldexpf(m, 11)), e - 11);
}

static void test_convert(void)
{
    const size_t n = 4099;
    float *x = fill(n, -2.0f, 2.0f);
    for (size_t i = 0; i < 64; i++) x[i] = (float)((int)i - 32);           /* exact in both */
    for (size_t i = 64; i < 128; i++) x[i] = uniform(-1e-6f, 1e-6f);     /* fp16 subnormals */
    for (size_t i = 128; i < 192; i++) x[i] = uniform(-60000.0f, 60000.0f);
    x[192] = 1.0f + 1.0f / 2048.0f; /* a tie for fp16: rounds to even, 1 */
    x[193] = 1.0f + 3.0f / 2048.0f; /* a tie for fp16: rounds to even, 1 + 2^-9 */
    x[194] = 1.0f + 1.0f / 256.0f;  /* a tie for bf16 */
    float *x_d = to_dev(x, n), *y_d = G->alloc(sizeof(float) * n);
    void *h_d = G->alloc(2 * n);
    for (int kind = DT_PREC_FP16; kind <= DT_PREC_BF16; kind++) {
        dt_gpu_to16(h_d, x_d, n, kind, dt_gpu_stream());
        dt_gpu_from16(y_d, h_d, n, kind, NULL);
        float *y = from_dev(y_d, n);
        size_t bad = 0, first = n;
        for (size_t i = 0; i < n; i++) {
            float want = kind == DT_PREC_BF16 ? bf16_round(x[i]) : fp16_round(x[i]);
            if (y[i] != want) {
                bad++;
                if (first == n) first = i;
            }
        }
        check(bad == 0, "dt_gpu_to16/from16 %s: round to nearest even (%zu differ; first at %.9g)",
              kind == DT_PREC_BF16 ? "bf16" : "fp16", bad, first < n ? (double)x[first] : 0.0);
        free(y);
    }
    dt_gpu_scale(x_d, n, 0.37f, NULL);
    float *y = from_dev(x_d, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != x[i] * 0.37f;
    check(bad == 0, "dt_gpu_scale: exact (%zu differ)", bad);
    G->free(x_d);
    G->free(y_d);
    G->free(h_d);
    free(x);
    free(y);
}

/* ---- convolution ----------------------------------------------------------- */

struct conv_case {
    const char *name;
    int h, w, c, k, kernel, stride, same, relu;
};
static const struct conv_case conv_cases[] = {
    {"seed conv2d", 28, 28, 1, 32, 3, 1, 0, 1},
    {"seed conv2d_1", 13, 13, 32, 64, 3, 1, 0, 1},
    {"same 3x3", 9, 11, 3, 5, 3, 1, 1, 0},
    {"same 3x3 stride 2 (uneven pad)", 10, 9, 4, 6, 3, 2, 1, 1},
    {"same 4x4 (uneven pad)", 8, 8, 2, 3, 4, 1, 1, 0},
    {"valid 3x3 stride 2", 12, 11, 3, 4, 3, 2, 0, 0},
    {"valid 5x5 stride 3", 16, 14, 6, 7, 5, 3, 0, 1},
    {"1x1", 5, 5, 8, 8, 1, 1, 1, 0},
};

/* As src/nn/conv2d.c derives it. */
static struct dt_conv_shape conv_shape(const struct conv_case *cc)
{
    int k = cc->kernel, s = cc->stride;
    struct dt_conv_shape cs = {.h = cc->h, .w = cc->w, .c = cc->c, .k = cc->k, .kh = k, .kw = k, .stride = s};
    if (cc->same) {
        cs.oh = (cs.h + s - 1) / s;
        cs.ow = (cs.w + s - 1) / s;
        int ph = (cs.oh - 1) * s + k - cs.h;
        cs.pad = ph > 0 ? ph / 2 : 0;
    } else {
        cs.oh = (cs.h - k) / s + 1;
        cs.ow = (cs.w - k) / s + 1;
    }
    return cs;
}

static void conv_run(const struct tol *t, const struct conv_case *cc, dt_conv_plan *pc, dt_conv_plan *pg,
                     const struct dt_conv_shape *s, int n, int with_dinp)
{
    size_t nx = (size_t)n * s->h * s->w * s->c, ny = (size_t)n * s->oh * s->ow * s->k;
    size_t nw = (size_t)s->kh * s->kw * s->c * s->k, nb = (size_t)s->k;
    float *x = fill(nx, -1.0f, 1.0f), *w = fill(nw, -0.5f, 0.5f), *b = fill(nb, -0.5f, 0.5f);
    float *dy = fill(ny, -1.0f, 1.0f);
    float *y = xmalloc(sizeof(float) * ny), *dx = xmalloc(sizeof(float) * nx);
    float *dw = xmalloc(sizeof(float) * nw), *db = xmalloc(sizeof(float) * nb);
    float *x_d = to_dev(x, nx), *w_d = to_dev(w, nw), *b_d = to_dev(b, nb), *dy_d = to_dev(dy, ny);
    float *y_d = G->alloc(sizeof(float) * ny), *dx_d = G->alloc(sizeof(float) * nx);
    float *dw_d = G->alloc(sizeof(float) * nw), *db_d = G->alloc(sizeof(float) * nb);

    C->conv_forward(pc, n, y, x, w, b);
    G->conv_forward(pg, n, y_d, x_d, w_d, b_d);
    C->conv_backward(pc, n, with_dinp ? dx : NULL, dw, db, dy, x, w);
    G->conv_backward(pg, n, with_dinp ? dx_d : NULL, dw_d, db_d, dy_d, x_d, w_d);
    float *gy = from_dev(y_d, ny), *gdx = from_dev(dx_d, nx), *gdw = from_dev(dw_d, nw), *gdb = from_dev(db_d, nb);
    double ey = rel_err(gy, y, ny), edx = with_dinp ? rel_err(gdx, dx, nx) : 0.0;
    double edw = rel_err(gdw, dw, nw), edb = rel_err(gdb, db, nb);
    double tb = t->conv > 1e-4 ? t->conv : 1e-4; /* dbias is summed in fp32 at every precision */
    check(ey <= t->conv && edx <= t->conv && edw <= t->conv && edb <= tb,
          "conv %s %s n=%d%s: rel err out %.1e, dinp %.1e, dweight %.1e, dbias %.1e (tol %.0e)", t->name, cc->name,
          n, with_dinp ? "" : " (no dinp)", ey, edx, edw, edb, t->conv);
    G->free(x_d);
    G->free(w_d);
    G->free(b_d);
    G->free(dy_d);
    G->free(y_d);
    G->free(dx_d);
    G->free(dw_d);
    G->free(db_d);
    free(x);
    free(w);
    free(b);
    free(dy);
    free(y);
    free(dx);
    free(dw);
    free(db);
    free(gy);
    free(gdx);
    free(gdw);
    free(gdb);
}

static void test_conv(const struct tol *t)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        const struct conv_case *cc = &conv_cases[i];
        struct dt_conv_shape s = conv_shape(cc);
        dt_conv_plan *pc = C->conv_create(&s, cc->relu), *pg = G->conv_create(&s, cc->relu);
        if (i < 2) { /* the seed's layers: the full batch, the ragged last one, and the full one again */
            conv_run(t, cc, pc, pg, &s, 64, 1);
            conv_run(t, cc, pc, pg, &s, 7, 1);
            conv_run(t, cc, pc, pg, &s, 64, i != 0);
        } else {
            conv_run(t, cc, pc, pg, &s, 7, 1);
        }
        if (i == 0) { /* no samples: the gradients are zero */
            size_t nw = (size_t)s.kh * s.kw * s.c * s.k;
            float *ones = fill(nw + (size_t)s.k, 1.0f, 1.0f), *g_d = to_dev(ones, nw + (size_t)s.k);
            float *dummy = G->alloc(64);
            G->conv_backward(pg, 0, NULL, g_d, g_d + nw, dummy, dummy, dummy);
            float *g = from_dev(g_d, nw + (size_t)s.k);
            size_t nz = 0;
            for (size_t j = 0; j < nw + (size_t)s.k; j++) nz += g[j] != 0.0f;
            check(nz == 0, "conv %s %s n=0: dweight and dbias cleared (%zu not zero)", t->name, cc->name, nz);
            G->free(g_d);
            G->free(dummy);
            free(ones);
            free(g);
        }
        C->conv_destroy(pc);
        G->conv_destroy(pg);
    }
}

/* ---- max pooling ----------------------------------------------------------- */

struct pool_case {
    const char *name;
    int h, w, c, k, stride, n;
};
static const struct pool_case pool_cases[] = {
    {"seed max_pooling2d", 26, 26, 32, 2, 2, 64},
    {"seed max_pooling2d ragged", 26, 26, 32, 2, 2, 7},
    {"seed max_pooling2d_1 (odd edge)", 11, 11, 64, 2, 2, 7},
    {"3x3 stride 2 (overlapping)", 13, 13, 5, 3, 2, 7},
    {"2x2 stride 1 (overlapping)", 9, 10, 3, 2, 1, 5},
    {"3x3 stride 3 (odd edges)", 7, 8, 4, 3, 3, 3},
    {"2x2 stride 3 (gaps no window covers)", 11, 10, 3, 2, 3, 4},
};

static void pool_run(const struct pool_case *pcase, int relu)
{
    struct dt_conv_shape s = {.h = pcase->h, .w = pcase->w, .c = pcase->c, .k = pcase->c, .kh = pcase->k,
                              .kw = pcase->k, .stride = pcase->stride,
                              .oh = (pcase->h - pcase->k) / pcase->stride + 1,
                              .ow = (pcase->w - pcase->k) / pcase->stride + 1};
    int n = pcase->n;
    size_t nx = (size_t)n * s.h * s.w * s.c, ny = (size_t)n * s.oh * s.ow * s.c;
    float *x = fill(nx, -1.0f, 1.0f), *z = fill(nx, -1.0f, 1.0f), *dy = fill(ny, -1.0f, 1.0f);
    if (relu) /* a ReLU's output: about half zeros, ties the mask must settle */
        for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    float *y = xmalloc(sizeof(float) * ny), *yz = xmalloc(sizeof(float) * ny), *dx = xmalloc(sizeof(float) * nx);
    float *x_d = to_dev(x, nx), *z_d = to_dev(z, nx), *dy_d = to_dev(dy, ny);
    float *y_d = G->alloc(sizeof(float) * ny), *yz_d = G->alloc(sizeof(float) * ny), *dx_d = G->alloc(sizeof(float) * nx);
    dt_pool_plan *pc = C->pool_create(&s), *pg = G->pool_create(&s);
    C->pool_forward(pc, n, y, x, 1);
    G->pool_forward(pg, n, y_d, x_d, 1);
    /* An inference forward in between must not change what backward uses. */
    C->pool_forward(pc, n, yz, z, 0);
    G->pool_forward(pg, n, yz_d, z_d, 0);
    C->pool_backward(pc, n, dx, dy, relu ? y : NULL);
    G->pool_backward(pg, n, dx_d, dy_d, relu ? y_d : NULL);
    float *gy = from_dev(y_d, ny), *gyz = from_dev(yz_d, ny), *gdx = from_dev(dx_d, nx);
    double e = rel_err(gdx, dx, nx);
    size_t d1 = ndiff(gy, y, ny), d2 = ndiff(gyz, yz, ny);
    check(d1 == 0 && d2 == 0 && e <= 1e-6, "max pool %s n=%d%s: forward exact (%zu, %zu differ), dinp rel err %.1e "
          "(tol 1e-6)", pcase->name, n, relu ? " after ReLU" : "", d1, d2, e);
    C->pool_destroy(pc);
    G->pool_destroy(pg);
    G->free(x_d);
    G->free(z_d);
    G->free(dy_d);
    G->free(y_d);
    G->free(yz_d);
    G->free(dx_d);
    free(x);
    free(z);
    free(dy);
    free(y);
    free(yz);
    free(dx);
    free(gy);
    free(gyz);
    free(gdx);
}

static void test_pool(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
        pool_run(&pool_cases[i], 0);
        pool_run(&pool_cases[i], 1);
    }
}

/* ---- batchnorm's per-channel ops and average pooling ----------------------- */

/* The largest difference of the GPU's channel sums (g1, g2) from the
 * reference's (c1, c2), relative to the largest reference sum. */
static double sums_err(const double *c1, const double *c2, const double *g1, const double *g2, int c)
{
    double e = 0.0, den = 0.0;
    for (int j = 0; j < c; j++) {
        e = fmax(e, fmax(fabs(g1[j] - c1[j]), fabs(g2[j] - c2[j])));
        den = fmax(den, fmax(fabs(c1[j]), fabs(c2[j])));
    }
    return den > 0.0 ? e / den : e;
}

/* channel_sums: the GPU sums in double throughout, the CPU in float blocks
 * of 64 rows folded into double (~4e-6 relative), so 1e-5. channel_affine:
 * one fused multiply-add more or less, so 1e-6. Shapes: fewer channels than
 * a warp, a ragged channel tile, and rows beyond one slice per block. */
static void test_channel_ops(void)
{
    static const struct { size_t rows; int c; } cases[] = {{1, 3}, {97, 16}, {4096, 37}, {200000, 64}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t rows = cases[k].rows, n = rows * (size_t)cases[k].c;
        int c = cases[k].c;
        float *a = fill(n, -1.0f, 3.0f), *b = fill(n, -2.0f, 2.0f);
        float *a_d = to_dev(a, n), *b_d = to_dev(b, n);
        double *c1 = xmalloc(sizeof(double) * 4 * (size_t)c), *c2 = c1 + c, *g1 = c2 + c, *g2 = g1 + c;
        for (int same = 1; same >= 0; same--) {
            C->channel_sums(c1, c2, a, same ? a : b, rows, c);
            G->channel_sums(g1, g2, a_d, same ? a_d : b_d, rows, c);
            double e = sums_err(c1, c2, g1, g2, c);
            check(e <= 1e-5, "channel_sums rows=%zu c=%d %s: rel err %.1e (tol 1e-5)", rows, c,
                  same ? "(sum, sum of squares)" : "(sum a, sum a*b)", e);
        }
        float *p = fill((size_t)c, -2.0f, 2.0f), *q = fill((size_t)c, -2.0f, 2.0f), *r = fill((size_t)c, -1.0f, 1.0f);
        float *y = xmalloc(sizeof(float) * n), *y_d = G->alloc(sizeof(float) * n);
        for (int form = 0; form < 3; form++) { /* p*a + r; p*a + q*b + r; then ReLU, in place */
            const float *bb = form == 1 ? b : NULL, *bb_d = form == 1 ? b_d : NULL;
            float *out = form == 2 ? dup(a, n) : y, *out_d = form == 2 ? to_dev(a, n) : y_d;
            C->channel_affine(out, form == 2 ? out : a, bb, rows, c, p, q, r, form == 2);
            G->channel_affine(out_d, form == 2 ? out_d : a_d, bb_d, rows, c, p, q, r, form == 2);
            float *g = from_dev(out_d, n);
            double e = rel_err(g, out, n);
            size_t neg = 0;
            for (size_t i = 0; i < n && form == 2; i++) neg += g[i] < 0.0f;
            check(e <= 1e-6 && neg == 0, "channel_affine rows=%zu c=%d %s: rel err %.1e (tol 1e-6)%s", rows, c,
                  form == 0 ? "p*a + r" : form == 1 ? "p*a + q*b + r" : "p*a + r, ReLU, in place", e,
                  neg ? ", negative outputs after ReLU" : "");
            free(g);
            if (form == 2) {
                free(out);
                G->free(out_d);
            }
        }
        G->free(a_d);
        G->free(b_d);
        G->free(y_d);
        free(a);
        free(b);
        free(c1);
        free(p);
        free(q);
        free(r);
        free(y);
    }
}

/* Average pooling keeps the CPU's order of additions, so 1e-6 covers the
 * contraction of a multiply-add at most. The global case is one window
 * over the whole input (global_avgpool's plan). */
static void test_avgpool(void)
{
    static const struct pool_case cases[] = {
        {"2x2 stride 2", 16, 16, 32, 2, 2, 8},
        {"2x2 stride 2, odd edge (uncovered row and column)", 9, 9, 5, 2, 2, 3},
        {"3x3 stride 2 (overlapping)", 13, 11, 7, 3, 2, 4},
        {"2x3 window stride 3 (gaps)", 8, 9, 3, 3, 3, 2},
        {"global 8x8", 8, 8, 64, 8, 1, 16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const struct pool_case *pc = &cases[k];
        int kh = k == 3 ? 2 : pc->k;
        struct dt_conv_shape s = {.h = pc->h, .w = pc->w, .c = pc->c, .k = pc->c, .kh = kh, .kw = pc->k,
                                  .stride = pc->stride, .oh = (pc->h - kh) / pc->stride + 1,
                                  .ow = (pc->w - pc->k) / pc->stride + 1};
        size_t nx = (size_t)pc->n * s.h * s.w * s.c, ny = (size_t)pc->n * s.oh * s.ow * s.c;
        float *x = fill(nx, -1.0f, 1.0f), *dy = fill(ny, -1.0f, 1.0f);
        float *y = xmalloc(sizeof(float) * ny), *dx = xmalloc(sizeof(float) * nx);
        float *x_d = to_dev(x, nx), *dy_d = to_dev(dy, ny), *y_d = G->alloc(sizeof(float) * ny);
        float *dx_d = to_dev(x, nx); /* garbage that backward must overwrite */
        C->avgpool_forward(&s, pc->n, y, x);
        G->avgpool_forward(&s, pc->n, y_d, x_d);
        C->avgpool_backward(&s, pc->n, dx, dy);
        G->avgpool_backward(&s, pc->n, dx_d, dy_d);
        float *gy = from_dev(y_d, ny), *gdx = from_dev(dx_d, nx);
        double ey = rel_err(gy, y, ny), ed = rel_err(gdx, dx, nx);
        check(ey <= 1e-6 && ed <= 1e-6, "avgpool %s n=%d: forward rel err %.1e, dinp rel err %.1e (tol 1e-6)",
              pc->name, pc->n, ey, ed);
        G->free(x_d);
        G->free(dy_d);
        G->free(y_d);
        G->free(dx_d);
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(gy);
        free(gdx);
    }
}

/* ---- 16-bit activations: the ops against the reference backend ------------- */

/* Under --precision fp16|bf16 the GPU stores activations in that type once
 * set_act_type asks for it. Its ops are compared with act16_ref.c (R): the
 * CPU's float ops between a decode and an encode (round to nearest even),
 * fed the same 16-bit inputs. Element-wise ops round the same float result
 * on both sides: exact (ReLU, dropout's scaling, pixels, act_add, max
 * pooling forward), or an ulp apart where the CPU and the GPU contract a
 * multiply-add differently or sum overlapping windows in another order.
 * Sums of products (convolution, dense) differ more, element by element:
 * the GPU rounds the weights to 16 bits (so does the reference in bf16,
 * through oneDNN, but not in fp16, which the CPU computes in float), and
 * rounds a convolution's or dense layer's output twice (cuDNN's or
 * cuBLAS's 16-bit result, then its bias); each rounding costs at most half
 * a unit of the 16-bit type, of the sum of absolute products S = sum |a b|
 * or of the result. An element passes when |gpu - ref| <= 2 eps |ref| +
 * 1.5 eps S (eps: the type's spacing at 1, 2^-7 in bf16, 2^-10 in fp16),
 * which a wiring error (a wrong layout, padding or transpose) misses by
 * far on most elements. Float sums of 16-bit values (dbias) differ only in
 * the order of float additions. */
struct act16 {
    const char *name;
    int type;
    double eps;  /* spacing of the type's numbers in [1, 2) */
    double tiny; /* its smallest step (fp16's subnormals), for results near zero */
    const struct tol *t; /* its training tolerances */
};

/* x rounded to the type in place; returns the encoding (host memory). */
static void *encode(int type, float *x, size_t n)
{
    void *e = xmalloc(dt_act_size(type) * n);
    dt_act_encode(type, e, x, n);
    dt_act_decode(type, x, e, n);
    return e;
}

static float *decode(int type, const void *e, size_t n)
{
    float *x = xmalloc(sizeof(float) * n);
    dt_act_decode(type, x, e, n);
    return x;
}

static void *to_dev_bytes(const void *h, size_t bytes)
{
    void *d = G->alloc(bytes);
    G->upload(d, h, bytes);
    return d;
}

/* n activations of the type, from the device, decoded. */
static float *from_dev_act(int type, const void *d, size_t n)
{
    void *h = xmalloc(dt_act_size(type) * n);
    G->download(h, d, dt_act_size(type) * n);
    float *x = decode(type, h, n);
    free(h);
    return x;
}

/* Elements outside |got - ref| <= rel |ref| + abs mag + tiny (no mag term
 * when mag is NULL); *worst gets the largest |got - ref| / bound. NaN or
 * infinity counts as outside. */
static size_t outside(const float *got, const float *ref, const float *mag, size_t n, double rel, double abs,
                      double tiny, double *worst)
{
    size_t bad = 0;
    *worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double bound = rel * fabs((double)ref[i]) + (mag ? abs * (double)mag[i] : 0.0) + tiny;
        if (!isfinite(d)) {
            bad++;
            *worst = INFINITY;
            continue;
        }
        bad += d > bound;
        if (d / bound > *worst) *worst = d / bound;
    }
    return bad;
}

static float *absolute(const float *x, size_t n)
{
    float *y = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
    return y;
}

/* The S of a convolution's results, directly from the definition (NHWC
 * input, HWIO weights, the window at (o * stride - pad)): my = |b| + sum
 * |x| |w| per output, mdx and mdw the same products summed into the input
 * and the weight they came from with |dy| in place of |w| or |x|, mdb =
 * sum |dy| per channel. */
static void conv_mags(const struct dt_conv_shape *s, int n, const float *x, const float *w, const float *b,
                      const float *dy, float *my, float *mdx, float *mdw, float *mdb)
{
    memset(mdx, 0, sizeof(float) * (size_t)n * s->h * s->w * s->c);
    memset(mdw, 0, sizeof(float) * (size_t)s->kh * s->kw * s->c * s->k);
    memset(mdb, 0, sizeof(float) * (size_t)s->k);
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int k = 0; k < s->k; k++) {
                    size_t yi = (((size_t)bi * s->oh + oy) * s->ow + ox) * s->k + k;
                    float acc = fabsf(b[k]), g = fabsf(dy[yi]);
                    mdb[k] += g;
                    for (int ky = 0; ky < s->kh; ky++)
                        for (int kx = 0; kx < s->kw; kx++) {
                            int iy = oy * s->stride + ky - s->pad, ix = ox * s->stride + kx - s->pad;
                            if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                            for (int c = 0; c < s->c; c++) {
                                size_t xi = (((size_t)bi * s->h + iy) * s->w + ix) * s->c + c;
                                size_t wi = (((size_t)ky * s->kw + kx) * s->c + c) * s->k + k;
                                acc += fabsf(x[xi]) * fabsf(w[wi]);
                                mdx[xi] += g * fabsf(w[wi]);
                                mdw[wi] += fabsf(x[xi]) * g;
                            }
                        }
                    my[yi] = acc;
                }
}

/* A weighted layer's operands at 16-bit storage (convolution or dense):
 * x [nx], weights [nw], bias [nb] and an output gradient dy [ny] drawn in
 * that order; their 16-bit copies, on the host for the reference and on
 * the device for the GPU; both sides' results; and the S magnitudes (my,
 * mdx, mdw, mdb, zeroed) the bounds scale with. */
struct wop16 {
    int ty;
    size_t nx, ny, nw, nb;
    float *x, *w, *b, *dy;
    void *x16, *dy16, *y16, *dx16; /* the reference's: host */
    float *dw, *db;
    void *x_d, *dy_d, *y_d, *dx_d; /* the GPU's: device */
    float *w_d, *b_d, *dw_d, *db_d;
    float *my, *mdx, *mdw, *mdb;
};

static float *zeros(size_t n)
{
    float *z = xmalloc(sizeof(float) * n);
    memset(z, 0, sizeof(float) * n);
    return z;
}

static void wop16_make(struct wop16 *o, int ty, size_t nx, size_t ny, size_t nw, size_t nb, float wscale)
{
    const size_t es = dt_act_size(ty);
    *o = (struct wop16){.ty = ty, .nx = nx, .ny = ny, .nw = nw, .nb = nb};
    o->x = fill(nx, -1.0f, 1.0f);
    o->w = fill(nw, -wscale, wscale);
    o->b = fill(nb, -0.5f, 0.5f);
    o->dy = fill(ny, -1.0f, 1.0f);
    o->x16 = encode(ty, o->x, nx);
    o->dy16 = encode(ty, o->dy, ny);
    o->y16 = xmalloc(es * ny);
    o->dx16 = xmalloc(es * nx);
    o->dw = xmalloc(sizeof(float) * nw);
    o->db = xmalloc(sizeof(float) * nb);
    o->x_d = to_dev_bytes(o->x16, es * nx);
    o->dy_d = to_dev_bytes(o->dy16, es * ny);
    o->y_d = G->alloc(es * ny);
    o->dx_d = G->alloc(es * nx);
    o->w_d = to_dev(o->w, nw);
    o->b_d = to_dev(o->b, nb);
    o->dw_d = G->alloc(sizeof(float) * nw);
    o->db_d = G->alloc(sizeof(float) * nb);
    memset(o->dx16, 0, es * nx); /* read back (not compared) when there is no dinp */
    G->zero(o->dx_d, es * nx);
    o->my = zeros(ny);
    o->mdx = zeros(nx);
    o->mdw = zeros(nw);
    o->mdb = zeros(nb);
}

/* Both sides' results within 2 eps |ref| + 1.5 eps S per element (the
 * bias gradient, float sums of 16-bit values: 1e-6 relative plus `sums`
 * times S); what names the case in the message. Frees everything. */
static void wop16_check(struct wop16 *o, const struct act16 *a, int with_dinp, double sums, const char *what)
{
    const int ty = o->ty;
    float *ry = decode(ty, o->y16, o->ny), *gy = from_dev_act(ty, o->y_d, o->ny);
    float *rdx = decode(ty, o->dx16, o->nx), *gdx = from_dev_act(ty, o->dx_d, o->nx);
    float *gdw = from_dev(o->dw_d, o->nw), *gdb = from_dev(o->db_d, o->nb);
    const double rel = 2.0 * a->eps, abs = 1.5 * a->eps;
    double wy, wdx = 0.0, wdw, wdb;
    size_t by = outside(gy, ry, o->my, o->ny, rel, abs, a->tiny, &wy);
    size_t bdx = with_dinp ? outside(gdx, rdx, o->mdx, o->nx, rel, abs, a->tiny, &wdx) : 0;
    size_t bdw = outside(gdw, o->dw, o->mdw, o->nw, rel, abs, a->tiny, &wdw);
    size_t bdb = outside(gdb, o->db, o->mdb, o->nb, 1e-6, sums, 1e-30, &wdb);
    check(by + bdx + bdw + bdb == 0,
          "act %s %s%s: outside the bound: out %zu (worst %.2f of it), dinp %zu (%.2f), dweight %zu (%.2f), "
          "dbias %zu (%.2f)", a->name, what, with_dinp ? "" : " (no dinp)", by, wy, bdx, wdx, bdw, wdw, bdb, wdb);
    void *bufs_d[] = {o->x_d, o->dy_d, o->y_d, o->dx_d, o->w_d, o->b_d, o->dw_d, o->db_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {o->x, o->w, o->b, o->dy, o->x16, o->dy16, o->y16, o->dx16, o->dw, o->db, ry, gy, rdx, gdx,
                    gdw, gdb, o->my, o->mdx, o->mdw, o->mdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

static void conv16_run(const struct act16 *a, const struct conv_case *cc, dt_conv_plan *pr, dt_conv_plan *pg,
                       const struct dt_conv_shape *s, int n, int with_dinp)
{
    struct wop16 o;
    wop16_make(&o, a->type, (size_t)n * s->h * s->w * s->c, (size_t)n * s->oh * s->ow * s->k,
               (size_t)s->kh * s->kw * s->c * s->k, (size_t)s->k, 0.5f);
    R->conv_forward(pr, n, o.y16, o.x16, o.w, o.b);
    G->conv_forward(pg, n, o.y_d, o.x_d, o.w_d, o.b_d);
    R->conv_backward(pr, n, with_dinp ? o.dx16 : NULL, o.dw, o.db, o.dy16, o.x16, o.w);
    G->conv_backward(pg, n, with_dinp ? o.dx_d : NULL, o.dw_d, o.db_d, o.dy_d, o.x_d, o.w_d);
    conv_mags(s, n, o.x, o.w, o.b, o.dy, o.my, o.mdx, o.mdw, o.mdb);
    char what[96];
    snprintf(what, sizeof what, "conv %s n=%d", cc->name, n);
    wop16_check(&o, a, with_dinp, 1e-6 * sqrt((double)n * s->oh * s->ow), what);
}

static void test_conv16(const struct act16 *a)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        const struct conv_case *cc = &conv_cases[i];
        struct dt_conv_shape s = conv_shape(cc);
        dt_conv_plan *pr = R->conv_create(&s, cc->relu), *pg = G->conv_create(&s, cc->relu);
        conv16_run(a, cc, pr, pg, &s, 7, 1);
        if (i < 2) { /* the seed's layers: a larger batch, and the first layer's backward without dinp */
            conv16_run(a, cc, pr, pg, &s, 32, 1);
            if (i == 0) conv16_run(a, cc, pr, pg, &s, 32, 0);
        }
        R->conv_destroy(pr);
        G->conv_destroy(pg);
    }
}

static void dense16_run(const struct act16 *a, const struct dense_case *dc, int with_dinp)
{
    const int n = dc->n, in = dc->in, units = dc->units;
    struct wop16 o;
    wop16_make(&o, a->type, (size_t)n * in, (size_t)n * units, (size_t)in * units, (size_t)units, 0.1f);
    R->dense_forward(n, in, units, o.y16, o.x16, o.w, o.b);
    G->dense_forward(n, in, units, o.y_d, o.x_d, o.w_d, o.b_d);
    R->dense_backward(n, in, units, with_dinp ? o.dx16 : NULL, o.dw, o.db, o.dy16, o.x16, o.w);
    G->dense_backward(n, in, units, with_dinp ? o.dx_d : NULL, o.dw_d, o.db_d, o.dy_d, o.x_d, o.w_d);
    /* S per element, as conv_mags does for convolutions */
    for (int i = 0; i < n; i++)
        for (int u = 0; u < units; u++) {
            size_t yi = (size_t)i * units + u;
            float acc = fabsf(o.b[u]), g = fabsf(o.dy[yi]);
            o.mdb[u] += g;
            for (int k = 0; k < in; k++) {
                size_t xi = (size_t)i * in + k, wi = (size_t)k * units + u;
                acc += fabsf(o.x[xi]) * fabsf(o.w[wi]);
                o.mdx[xi] += g * fabsf(o.w[wi]);
                o.mdw[wi] += fabsf(o.x[xi]) * g;
            }
            o.my[yi] = acc;
        }
    char what[96];
    snprintf(what, sizeof what, "dense n=%d in=%d units=%d", n, in, units);
    wop16_check(&o, a, with_dinp, 1e-6 * sqrt((double)n), what);
}

static void test_dense16(const struct act16 *a)
{
    for (size_t i = 0; i < sizeof dense_cases / sizeof *dense_cases; i++) dense16_run(a, &dense_cases[i], 1);
    dense16_run(a, &dense_cases[2], 0);
    dense_empty(a->name);
}

static void pool16_run(const struct act16 *a, const struct pool_case *pcase, int relu)
{
    struct dt_conv_shape s = {.h = pcase->h, .w = pcase->w, .c = pcase->c, .k = pcase->c, .kh = pcase->k,
                              .kw = pcase->k, .stride = pcase->stride,
                              .oh = (pcase->h - pcase->k) / pcase->stride + 1,
                              .ow = (pcase->w - pcase->k) / pcase->stride + 1};
    const int ty = a->type, n = pcase->n;
    const size_t es = dt_act_size(ty);
    size_t nx = (size_t)n * s.h * s.w * s.c, ny = (size_t)n * s.oh * s.ow * s.c;
    float *x = fill(nx, -1.0f, 1.0f), *z = fill(nx, -1.0f, 1.0f), *dy = fill(ny, -1.0f, 1.0f);
    if (relu) /* a ReLU's output: about half zeros, ties the mask must settle */
        for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    void *x16 = encode(ty, x, nx), *z16 = encode(ty, z, nx), *dy16 = encode(ty, dy, ny);
    float *ady = absolute(dy, ny);
    void *ady16 = encode(ty, ady, ny);
    void *y16 = xmalloc(es * ny), *yz16 = xmalloc(es * ny), *dx16 = xmalloc(es * nx), *m16 = xmalloc(es * nx);
    void *x_d = to_dev_bytes(x16, es * nx), *z_d = to_dev_bytes(z16, es * nx), *dy_d = to_dev_bytes(dy16, es * ny);
    void *y_d = G->alloc(es * ny), *yz_d = G->alloc(es * ny), *dx_d = G->alloc(es * nx);
    dt_pool_plan *pr = R->pool_create(&s), *pg = G->pool_create(&s);
    R->pool_forward(pr, n, y16, x16, 1);
    G->pool_forward(pg, n, y_d, x_d, 1);
    R->pool_forward(pr, n, yz16, z16, 0); /* an inference forward in between changes nothing for backward */
    G->pool_forward(pg, n, yz_d, z_d, 0);
    R->pool_backward(pr, n, dx16, dy16, relu ? y16 : NULL);
    G->pool_backward(pg, n, dx_d, dy_d, relu ? y_d : NULL);
    R->pool_backward(pr, n, m16, ady16, relu ? y16 : NULL); /* S: the |dy| each input gathers */
    float *ry = decode(ty, y16, ny), *ryz = decode(ty, yz16, ny), *rdx = decode(ty, dx16, nx), *m = decode(ty, m16, nx);
    float *gy = from_dev_act(ty, y_d, ny), *gyz = from_dev_act(ty, yz_d, ny), *gdx = from_dev_act(ty, dx_d, nx);
    size_t d1 = ndiff(gy, ry, ny), d2 = ndiff(gyz, ryz, ny);
    double worst;
    size_t bad = outside(gdx, rdx, m, nx, 2.0 * a->eps, a->eps, a->tiny, &worst);
    check(d1 == 0 && d2 == 0 && bad == 0, "act %s max pool %s n=%d%s: forward exact (%zu, %zu differ), dinp %zu "
          "outside an ulp of the gathered sum (worst %.2f)", a->name, pcase->name, n, relu ? " after ReLU" : "", d1, d2,
          bad, worst);
    R->pool_destroy(pr);
    G->pool_destroy(pg);
    void *bufs_d[] = {x_d, z_d, dy_d, y_d, yz_d, dx_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {x, z, dy, x16, z16, dy16, ady, ady16, y16, yz16, dx16, m16, ry, ryz, rdx, m, gy, gyz, gdx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* ReLU, dropout, pixels and act_add: one rounding of the same float value
 * on both sides, so exact. The GPU draws its own dropout mask (a hash of
 * one host draw, where the CPU draws per element), so the reference
 * applies the GPU's mask: its dropout_backward is the same product. */
static void test_elementwise16(const struct act16 *a)
{
    const int ty = a->type;
    const size_t n = 100003, es = dt_act_size(ty);
    float *x = fill(n, -3.0f, 3.0f), *u = fill(n, -3.0f, 3.0f);
    for (size_t i = 0; i < n; i += 97) x[i] = 0.0f;
    void *x16 = encode(ty, x, n), *u16 = encode(ty, u, n);
    void *x_d = to_dev_bytes(x16, es * n), *u_d = to_dev_bytes(u16, es * n), *y_d = G->alloc(es * n);
    void *y16 = xmalloc(es * n);

    R->relu_forward(y16, x16, n);
    G->relu_forward(y_d, x_d, n);
    float *r = decode(ty, y16, n), *g = from_dev_act(ty, y_d, n);
    check(ndiff(g, r, n) == 0, "act %s relu_forward: exact (%zu differ)", a->name, ndiff(g, r, n));
    free(r);
    free(g);
    void *d16 = xmalloc(es * n);
    memcpy(d16, u16, es * n);
    void *d_d = to_dev_bytes(u16, es * n);
    R->relu_backward(d16, d16, y16, n); /* in place, as the layers call it */
    G->relu_backward(d_d, d_d, y_d, n);
    r = decode(ty, d16, n);
    g = from_dev_act(ty, d_d, n);
    check(ndiff(g, r, n) == 0, "act %s relu_backward in place: exact (%zu differ)", a->name, ndiff(g, r, n));
    free(r);
    free(g);

    const float rate = 0.3f;
    float *mask_d = G->alloc(sizeof(float) * n);
    dt_rng dr;
    dt_rng_seed(&dr, 7, 3);
    G->dropout_forward(y_d, mask_d, x_d, n, rate, &dr);
    float *mask = from_dev(mask_d, n);
    R->dropout_backward(y16, x16, mask, n); /* x * mask, rounded */
    r = decode(ty, y16, n);
    g = from_dev_act(ty, y_d, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += mask[i] != 0.0f;
    check(ndiff(g, r, n) == 0 && kept > n / 2 && kept < n - n / 5, "act %s dropout_forward: out = inp * mask rounded "
          "once, exact (%zu differ; %zu of %zu kept)", a->name, ndiff(g, r, n), kept, n);
    free(r);
    free(g);
    R->dropout_backward(d16, u16, mask, n);
    G->dropout_backward(d_d, u_d, mask_d, n);
    r = decode(ty, d16, n);
    g = from_dev_act(ty, d_d, n);
    check(ndiff(g, r, n) == 0, "act %s dropout_backward: exact (%zu differ)", a->name, ndiff(g, r, n));
    free(r);
    free(g);

    memcpy(d16, x16, es * n);
    G->upload(d_d, x16, es * n);
    R->act_add(d16, u16, n);
    G->act_add(d_d, u_d, n);
    r = decode(ty, d16, n);
    g = from_dev_act(ty, d_d, n);
    check(ndiff(g, r, n) == 0, "act %s act_add: exact (%zu differ)", a->name, ndiff(g, r, n));
    free(r);
    free(g);

    const size_t np = 64 * 784 + 13;
    uint8_t *px = xmalloc(np);
    for (size_t i = 0; i < np; i++) px[i] = (uint8_t)dt_rng_below(&rng, 256);
    px[0] = 0;
    px[1] = 255;
    uint8_t *px_d = G->alloc(np);
    G->upload(px_d, px, np);
    void *p16 = xmalloc(es * np), *p_d = G->alloc(es * np);
    R->images_to_float(p16, px, np);
    G->images_to_float(p_d, px_d, np);
    r = decode(ty, p16, np);
    g = from_dev_act(ty, p_d, np);
    check(ndiff(g, r, np) == 0, "act %s images_to_float: exact (%zu differ)", a->name, ndiff(g, r, np));
    free(r);
    free(g);

    void *bufs_d[] = {x_d, u_d, y_d, d_d, mask_d, px_d, p_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {x, u, x16, u16, y16, d16, mask, px, p16};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* The loss is computed in double from the same logits on both sides
 * (1e-10); dlogits is the same float value rounded once, but p comes from
 * exp in double on the device and on the host, which may differ in the
 * last bit: an ulp of the type, and a little absolute slack where p - 1
 * cancels. 16-bit logits tie more often than float ones: both sides take
 * the first maximal class. */
static void test_softmax16(const struct act16 *a)
{
    static const struct { int n, classes; float scale; } cases[] = {
        {64, 10, 1.0f / 64.0f}, {7, 1000, 1.0f / 7.0f}, {33, 3, 1.0f}, {5, 1, 0.2f}};
    const int ty = a->type;
    const size_t es = dt_act_size(ty);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int n = cases[c].n, k = cases[c].classes;
        size_t nz = (size_t)n * k;
        float *z = fill(nz, -5.0f, 5.0f);
        uint8_t *lab = xmalloc((size_t)n);
        for (int i = 0; i < n; i++) lab[i] = (uint8_t)dt_rng_below(&rng, (uint64_t)(k < 256 ? k : 256));
        if (k >= 3) {
            z[1 * (size_t)k + 0] = z[1 * (size_t)k + 2] = 6.0f;
            lab[1] = 0;
            z[2 * (size_t)k + 1] = z[2 * (size_t)k + 2] = 6.0f;
            lab[2] = 2;
        }
        void *z16 = encode(ty, z, nz), *d16 = xmalloc(es * nz);
        void *z_d = to_dev_bytes(z16, es * nz), *d_d = G->alloc(es * nz);
        uint8_t *lab_d = G->alloc((size_t)n);
        G->upload(lab_d, lab, (size_t)n);
        long rc = 5, gc = 5;
        double lr = R->softmax_xent(d16, &rc, z16, lab, n, k, cases[c].scale);
        double lg = G->softmax_xent(d_d, &gc, z_d, lab_d, n, k, cases[c].scale);
        float *r = decode(ty, d16, nz), *g = from_dev_act(ty, d_d, nz);
        double el = fabs(lg - lr) / fmax(1.0, fabs(lr)), worst;
        size_t bad = outside(g, r, NULL, nz, a->eps, 0.0, a->tiny + 1e-6 * (double)cases[c].scale, &worst);
        check(el <= 1e-10 && gc == rc && bad == 0, "act %s softmax_xent n=%d classes=%d: loss %.10g vs %.10g (rel "
              "%.1e), correct %ld vs %ld, dlogits %zu outside an ulp (worst %.2f)", a->name, n, k, lg, lr, el, gc, rc,
              bad, worst);
        G->free(z_d);
        G->free(d_d);
        G->free(lab_d);
        void *bufs[] = {z, lab, z16, d16, r, g};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

/* channel_sums: double sums of the same values (the CPU's float blocks
 * give 1e-5, as in fp32). channel_affine and average pooling: the same
 * float formula rounded once, up to a contracted multiply-add: an ulp,
 * and absolute slack of float rounding on the terms' magnitude. */
static void test_norm16(const struct act16 *a)
{
    static const struct { size_t rows; int c; } cases[] = {{1, 3}, {97, 16}, {4096, 37}, {200000, 64}};
    const int ty = a->type;
    const size_t es = dt_act_size(ty);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t rows = cases[k].rows, n = rows * (size_t)cases[k].c;
        int c = cases[k].c;
        float *av = fill(n, -1.0f, 3.0f), *bv = fill(n, -2.0f, 2.0f);
        void *a16 = encode(ty, av, n), *b16 = encode(ty, bv, n);
        void *a_d = to_dev_bytes(a16, es * n), *b_d = to_dev_bytes(b16, es * n);
        double *c1 = xmalloc(sizeof(double) * 4 * (size_t)c), *c2 = c1 + c, *g1 = c2 + c, *g2 = g1 + c;
        for (int same = 1; same >= 0; same--) {
            R->channel_sums(c1, c2, a16, same ? a16 : b16, rows, c);
            G->channel_sums(g1, g2, a_d, same ? a_d : b_d, rows, c);
            double e = sums_err(c1, c2, g1, g2, c);
            check(e <= 1e-5, "act %s channel_sums rows=%zu c=%d %s: rel err %.1e (tol 1e-5)", a->name, rows, c,
                  same ? "(sum, sum of squares)" : "(sum a, sum a*b)", e);
        }
        float *p = fill((size_t)c, -2.0f, 2.0f), *q = fill((size_t)c, -2.0f, 2.0f), *r = fill((size_t)c, -1.0f, 1.0f);
        float *mag = xmalloc(sizeof(float) * n);
        void *o16 = xmalloc(es * n), *o_d = G->alloc(es * n);
        for (int form = 0; form < 3; form++) { /* p*a + r; p*a + q*b + r; then ReLU, in place */
            const void *bb = form == 1 ? b16 : NULL, *bb_d = form == 1 ? b_d : NULL;
            if (form == 2) {
                memcpy(o16, a16, es * n);
                G->upload(o_d, a16, es * n);
            }
            R->channel_affine(o16, form == 2 ? o16 : a16, bb, rows, c, p, q, r, form == 2);
            G->channel_affine(o_d, form == 2 ? o_d : a_d, bb_d, rows, c, p, q, r, form == 2);
            for (size_t i = 0; i < n; i++) {
                int j = (int)(i % (size_t)c);
                mag[i] = fabsf(p[j] * av[i]) + (form == 1 ? fabsf(q[j] * bv[i]) : 0.0f) + fabsf(r[j]);
            }
            float *ro = decode(ty, o16, n), *go = from_dev_act(ty, o_d, n);
            double worst;
            size_t bad = outside(go, ro, mag, n, a->eps, 1e-6, a->tiny, &worst);
            check(bad == 0, "act %s channel_affine rows=%zu c=%d %s: %zu outside an ulp (worst %.2f)", a->name, rows, c,
                  form == 0 ? "p*a + r" : form == 1 ? "p*a + q*b + r" : "p*a + r, ReLU, in place", bad, worst);
            free(ro);
            free(go);
        }
        G->free(a_d);
        G->free(b_d);
        G->free(o_d);
        void *bufs[] = {av, bv, a16, b16, c1, p, q, r, mag, o16};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }

    static const struct pool_case pcases[] = {
        {"2x2 stride 2", 16, 16, 32, 2, 2, 8},
        {"3x3 stride 2 (overlapping)", 13, 11, 7, 3, 2, 4},
        {"global 8x8", 8, 8, 64, 8, 1, 16},
    };
    for (size_t k = 0; k < sizeof pcases / sizeof *pcases; k++) {
        const struct pool_case *pc = &pcases[k];
        struct dt_conv_shape s = {.h = pc->h, .w = pc->w, .c = pc->c, .k = pc->c, .kh = pc->k, .kw = pc->k,
                                  .stride = pc->stride, .oh = (pc->h - pc->k) / pc->stride + 1,
                                  .ow = (pc->w - pc->k) / pc->stride + 1};
        size_t nx = (size_t)pc->n * s.h * s.w * s.c, ny = (size_t)pc->n * s.oh * s.ow * s.c;
        float *x = fill(nx, -1.0f, 1.0f), *dy = fill(ny, -1.0f, 1.0f);
        void *x16 = encode(ty, x, nx), *dy16 = encode(ty, dy, ny), *y16 = xmalloc(es * ny), *dx16 = xmalloc(es * nx);
        void *x_d = to_dev_bytes(x16, es * nx), *dy_d = to_dev_bytes(dy16, es * ny), *y_d = G->alloc(es * ny);
        void *dx_d = to_dev_bytes(x16, es * nx); /* garbage that backward must overwrite */
        R->avgpool_forward(&s, pc->n, y16, x16);
        G->avgpool_forward(&s, pc->n, y_d, x_d);
        R->avgpool_backward(&s, pc->n, dx16, dy16);
        G->avgpool_backward(&s, pc->n, dx_d, dy_d);
        float *ry = decode(ty, y16, ny), *gy = from_dev_act(ty, y_d, ny);
        float *rdx = decode(ty, dx16, nx), *gdx = from_dev_act(ty, dx_d, nx);
        double wy, wd; /* inputs are within [-1, 1]: float slack 1e-5 */
        size_t by = outside(gy, ry, NULL, ny, a->eps, 0.0, a->tiny + 1e-5, &wy);
        size_t bd = outside(gdx, rdx, NULL, nx, a->eps, 0.0, a->tiny + 1e-5, &wd);
        check(by == 0 && bd == 0, "act %s avgpool %s n=%d: outside an ulp: forward %zu (worst %.2f), dinp %zu (%.2f)",
              a->name, pc->name, pc->n, by, wy, bd, wd);
        void *bufs_d[] = {x_d, dy_d, y_d, dx_d};
        for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
        void *bufs[] = {x, dy, x16, dy16, y16, dx16, ry, gy, rdx, gdx};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

/* What set_act_type grants: the precision's 16-bit type, or float. */
static void test_act_type(const struct act16 *a)
{
    const int other = a->type == DT_PREC_BF16 ? DT_PREC_FP16 : DT_PREC_BF16;
    int o = G->set_act_type(other), f = G->set_act_type(DT_PREC_FP32), t = G->set_act_type(a->type);
    check(o == DT_PREC_FP32 && f == DT_PREC_FP32 && t == a->type && G->act_type() == a->type,
          "act %s: set_act_type grants %s (%s), fp32 (%s), not %s (gives %s)", a->name, a->name, dt_precision_name(t),
          dt_precision_name(f), dt_precision_name(other), dt_precision_name(o));
}

static void test_act16_ops(const struct act16 *a)
{
    test_act_type(a);
    test_elementwise16(a);
    test_softmax16(a);
    test_dense16(a);
    test_conv16(a);
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
        pool16_run(a, &pool_cases[i], 0);
        pool16_run(a, &pool_cases[i], 1);
    }
    test_norm16(a);
}

/* ---- the transformer's ops ------------------------------------------------- */

/* Each op runs on the GPU and on the CPU backend (float activations) from
 * the same inputs. With 16-bit activations the inputs are rounded to the
 * type first and the CPU computes in float on those values, so the sides
 * differ by the GPU's one rounding of each output (half a unit of the type:
 * aeps, the type's spacing at 1, bounds it norm-wise) and by float sums
 * taken in another order (the float tolerances: ~1e-5, 1e-4 where
 * attention's backward sums products over the keys); at fp32 aeps is 0.
 * Errors are norm-wise (rel_err). The embedding's forward is one float
 * addition rounded once on both sides: exact. The GPU's backward ops run in
 * place where the layers call them so (layernorm, GELU, token_xent). */
struct tf_case {
    int n, T, ch, nh, V; /* samples, positions, channels, heads, vocabulary */
};
static const struct tf_case tf_cases[] = {
    {2, 67, 96, 3, 300}, /* heads 32 wide; T past the CPU's 64-row blocks and over several GPU tiles */
    {3, 40, 128, 2, 5},  /* heads 64 wide; 5 tokens: long runs of one token in embed_backward */
    {1, 33, 72, 3, 1000}, /* heads 24 wide: lanes past the head's columns */
    {1, 29, 80, 1, 77},  /* one head 80 wide (the kernels' 128-wide variant) */
};

/* x rounded to the type in place (nothing at fp32) and its device copy. */
static void *act_to_dev(int ty, float *x, size_t n)
{
    if (ty == DT_PREC_FP32) return to_dev(x, n);
    void *e = encode(ty, x, n), *d = to_dev_bytes(e, dt_act_size(ty) * n);
    free(e);
    return d;
}

static float *act_from_dev(int ty, const void *d, size_t n)
{
    return ty == DT_PREC_FP32 ? from_dev(d, n) : from_dev_act(ty, d, n);
}

static void round_to(int ty, float *x, size_t n)
{
    if (ty != DT_PREC_FP32) free(encode(ty, x, n));
}

static int32_t *tf_tokens(int n, int T, int V, int32_t **dev)
{
    const size_t nt = (size_t)n * (T + 1);
    int32_t *tok = xmalloc(sizeof(int32_t) * nt);
    for (size_t i = 0; i < nt; i++) tok[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V);
    *dev = G->alloc(sizeof(int32_t) * nt);
    G->upload(*dev, tok, sizeof(int32_t) * nt);
    return tok;
}

static void tf_embed(int ty, const char *name, const struct tf_case *k, const int32_t *tok, const int32_t *tok_d)
{
    const int n = k->n, T = k->T, ch = k->ch, V = k->V;
    const size_t ny = (size_t)n * T * ch, nte = (size_t)V * ch, npe = (size_t)T * ch;
    float *wte = fill(nte, -1.0f, 1.0f), *wpe = fill(npe, -1.0f, 1.0f), *y = xmalloc(sizeof(float) * ny);
    float *wte_d = to_dev(wte, nte), *wpe_d = to_dev(wpe, npe);
    void *y_d = G->alloc(dt_act_size(ty) * ny);
    C->embed_forward(y, tok, wte, wpe, n, T, ch);
    G->embed_forward(y_d, tok_d, wte_d, wpe_d, n, T, ch);
    round_to(ty, y, ny);
    float *gy = act_from_dev(ty, y_d, ny);
    check(ndiff(gy, y, ny) == 0, "tf %s embed_forward n=%d T=%d C=%d V=%d: exact (%zu differ)", name, n, T, ch, V,
          ndiff(gy, y, ny));

    /* dwte accumulates onto what it holds; dwpe is overwritten (garbage here) */
    float *dy = fill(ny, -1.0f, 1.0f), *dwte = fill(nte, -1.0f, 1.0f), *dwpe = fill(npe, 5.0f, 6.0f);
    void *dy_d = act_to_dev(ty, dy, ny);
    float *dwte_d = to_dev(dwte, nte), *dwpe_d = to_dev(dwpe, npe);
    C->embed_backward(dwte, dwpe, dy, tok, n, T, ch);
    G->embed_backward(dwte_d, dwpe_d, dy_d, tok_d, n, T, ch);
    float *gte = from_dev(dwte_d, nte), *gpe = from_dev(dwpe_d, npe);
    double e1 = rel_err(gte, dwte, nte), e2 = rel_err(gpe, dwpe, npe);
    check(e1 <= 1e-5 && e2 <= 1e-5, "tf %s embed_backward n=%d T=%d C=%d V=%d: rel err dwte (accumulated) %.1e, "
          "dwpe %.1e (tol 1e-5)", name, n, T, ch, V, e1, e2);
    /* no samples: dwpe cleared, dwte untouched */
    G->embed_backward(dwte_d, dwpe_d, dy_d, tok_d, 0, T, ch);
    float *gte0 = from_dev(dwte_d, nte), *gpe0 = from_dev(dwpe_d, npe);
    size_t nz = 0;
    for (size_t i = 0; i < npe; i++) nz += gpe0[i] != 0.0f;
    check(nz == 0 && ndiff(gte0, gte, nte) == 0, "tf %s embed_backward n=0: dwpe cleared (%zu not zero), dwte "
          "kept (%zu changed)", name, nz, ndiff(gte0, gte, nte));
    void *bufs_d[] = {wte_d, wpe_d, y_d, dy_d, dwte_d, dwpe_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {wte, wpe, y, gy, dy, dwte, dwpe, gte, gpe, gte0, gpe0};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

static void tf_layernorm(int ty, const char *name, double aeps, size_t rows, int ch)
{
    const size_t nx = rows * (size_t)ch;
    const float eps = 1e-5f;
    float *x = fill(nx, -2.0f, 3.0f), *gam = fill((size_t)ch, 0.5f, 1.5f), *bet = fill((size_t)ch, -0.5f, 0.5f);
    float *y = xmalloc(sizeof(float) * nx), *mean = xmalloc(sizeof(float) * rows), *rstd = xmalloc(sizeof(float) * rows);
    void *x_d = act_to_dev(ty, x, nx), *y_d = G->alloc(dt_act_size(ty) * nx);
    float *gam_d = to_dev(gam, (size_t)ch), *bet_d = to_dev(bet, (size_t)ch);
    float *mean_d = G->alloc(sizeof(float) * rows), *rstd_d = G->alloc(sizeof(float) * rows);
    C->layernorm_forward(y, mean, rstd, x, gam, bet, rows, ch, eps);
    G->layernorm_forward(y_d, mean_d, rstd_d, x_d, gam_d, bet_d, rows, ch, eps);
    float *gy = act_from_dev(ty, y_d, nx), *gm = from_dev(mean_d, rows), *gr = from_dev(rstd_d, rows);
    double ey = rel_err(gy, y, nx), em = rel_err(gm, mean, rows), er = rel_err(gr, rstd, rows);
    check(ey <= 1e-5 + aeps && em <= 1e-5 && er <= 1e-5, "tf %s layernorm_forward rows=%zu C=%d: rel err out %.1e "
          "(tol %.0e), mean %.1e, rstd %.1e (tol 1e-5)", name, rows, ch, ey, 1e-5 + aeps, em, er);

    float *dy = fill(nx, -1.0f, 1.0f), *dx = xmalloc(sizeof(float) * nx);
    float *dg = xmalloc(sizeof(float) * ch), *db = xmalloc(sizeof(float) * ch);
    void *dy_d = act_to_dev(ty, dy, nx);
    float *dg_d = to_dev(gam, (size_t)ch), *db_d = to_dev(gam, (size_t)ch); /* garbage to overwrite */
    C->layernorm_backward(dx, dg, db, dy, x, gam, mean, rstd, rows, ch);
    G->layernorm_backward(dy_d, dg_d, db_d, dy_d, x_d, gam_d, mean_d, rstd_d, rows, ch); /* in place */
    float *gdx = act_from_dev(ty, dy_d, nx), *gdg = from_dev(dg_d, (size_t)ch), *gdb = from_dev(db_d, (size_t)ch);
    double ex = rel_err(gdx, dx, nx), eg = rel_err(gdg, dg, (size_t)ch), eb = rel_err(gdb, db, (size_t)ch);
    check(ex <= 2e-5 + aeps && eg <= 1e-5 && eb <= 1e-5, "tf %s layernorm_backward rows=%zu C=%d in place: rel err "
          "dinp %.1e (tol %.0e), dgamma %.1e, dbeta %.1e (tol 1e-5)", name, rows, ch, ex, 2e-5 + aeps, eg, eb);
    void *bufs_d[] = {x_d, y_d, gam_d, bet_d, mean_d, rstd_d, dy_d, dg_d, db_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {x, gam, bet, y, mean, rstd, gy, gm, gr, dy, dx, dg, db, gdx, gdg, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* The CPU's backward gets the GPU's (rounded) forward output, so that both
 * take Di = rowsum(dO * O) from the same values; lse is each side's own. */
static void tf_attention(int ty, const char *name, double aeps, const struct tf_case *k)
{
    const int n = k->n, T = k->T, ch = k->ch, nh = k->nh;
    const size_t nq = (size_t)n * T * 3 * ch, no = (size_t)n * T * ch, nl = (size_t)n * nh * T;
    float *qkv = fill(nq, -2.0f, 2.0f), *o = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * nl);
    void *qkv_d = act_to_dev(ty, qkv, nq), *o_d = G->alloc(dt_act_size(ty) * no);
    float *lse_d = G->alloc(sizeof(float) * nl);
    C->attention_forward(o, lse, qkv, n, T, ch, nh);
    G->attention_forward(o_d, lse_d, qkv_d, n, T, ch, nh);
    float *go = act_from_dev(ty, o_d, no), *gl = from_dev(lse_d, nl);
    double eo = rel_err(go, o, no), el = rel_err(gl, lse, nl);
    check(eo <= 1e-5 + aeps && el <= 1e-5, "tf %s attention_forward n=%d T=%d C=%d H=%d: rel err out %.1e (tol %.0e), "
          "lse %.1e (tol 1e-5)", name, n, T, ch, nh, eo, 1e-5 + aeps, el);

    float *dy = fill(no, -1.0f, 1.0f), *dq = fill(nq, 5.0f, 6.0f);
    void *dy_d = act_to_dev(ty, dy, no), *dq_d = act_to_dev(ty, dq, nq); /* garbage to overwrite */
    C->attention_backward(dq, dy, qkv, go, lse, n, T, ch, nh);
    G->attention_backward(dq_d, dy_d, qkv_d, o_d, lse_d, n, T, ch, nh);
    float *gdq = act_from_dev(ty, dq_d, nq);
    double ed = rel_err(gdq, dq, nq);
    check(ed <= 1e-4 + aeps, "tf %s attention_backward n=%d T=%d C=%d H=%d: rel err dqkv %.1e (tol %.0e)", name, n, T,
          ch, nh, ed, 1e-4 + aeps);
    void *bufs_d[] = {qkv_d, o_d, lse_d, dy_d, dq_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {qkv, o, lse, go, gl, dy, dq, gdq};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* The two sides write the same function differently (tanh on the GPU,
 * 1 / (1 + e^-2u) on the CPU): float-level differences. */
static void tf_gelu(int ty, const char *name, double aeps)
{
    const size_t n = 100003;
    float *x = fill(n, -6.0f, 6.0f), *dy = fill(n, -1.0f, 1.0f);
    float *y = xmalloc(sizeof(float) * n), *dx = xmalloc(sizeof(float) * n);
    void *x_d = act_to_dev(ty, x, n), *dy_d = act_to_dev(ty, dy, n), *y_d = G->alloc(dt_act_size(ty) * n);
    C->gelu_forward(y, x, n);
    G->gelu_forward(y_d, x_d, n);
    C->gelu_backward(dx, dy, x, n);
    G->gelu_backward(dy_d, dy_d, x_d, n); /* in place */
    float *gy = act_from_dev(ty, y_d, n), *gdx = act_from_dev(ty, dy_d, n);
    double ey = rel_err(gy, y, n), ed = rel_err(gdx, dx, n);
    check(ey <= 1e-5 + aeps && ed <= 1e-5 + aeps, "tf %s gelu n=%zu: rel err forward %.1e, backward in place %.1e "
          "(tol %.0e)", name, n, ey, ed, 1e-5 + aeps);
    G->free(x_d);
    G->free(dy_d);
    G->free(y_d);
    void *bufs[] = {x, dy, y, dx, gy, gdx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* A product: the GEMM tolerance of the precision (16-bit operands). */
static void tf_linear_t(int ty, const char *name, double aeps, double gemm_tol, size_t rows, int ch, int V)
{
    const size_t nx = rows * (size_t)ch, ny = rows * (size_t)V, nw = (size_t)V * ch;
    float *x = fill(nx, -1.0f, 1.0f), *w = fill(nw, -0.2f, 0.2f), *dy = fill(ny, -1.0f, 1.0f);
    float *y = xmalloc(sizeof(float) * ny), *dx = xmalloc(sizeof(float) * nx), *dw = xmalloc(sizeof(float) * nw);
    void *x_d = act_to_dev(ty, x, nx), *dy_d = act_to_dev(ty, dy, ny);
    void *y_d = G->alloc(dt_act_size(ty) * ny), *dx_d = G->alloc(dt_act_size(ty) * nx);
    float *w_d = to_dev(w, nw), *dw_d = to_dev(w, nw); /* garbage to overwrite */
    C->linear_t_forward(rows, ch, V, y, x, w);
    G->linear_t_forward(rows, ch, V, y_d, x_d, w_d);
    C->linear_t_backward(rows, ch, V, dx, dw, dy, x, w);
    G->linear_t_backward(rows, ch, V, dx_d, dw_d, dy_d, x_d, w_d);
    float *gy = act_from_dev(ty, y_d, ny), *gdx = act_from_dev(ty, dx_d, nx), *gdw = from_dev(dw_d, nw);
    double ey = rel_err(gy, y, ny), ex = rel_err(gdx, dx, nx), ew = rel_err(gdw, dw, nw);
    check(ey <= gemm_tol + aeps && ex <= gemm_tol + aeps && ew <= gemm_tol, "tf %s linear_t rows=%zu C=%d V=%d: rel "
          "err out %.1e, dinp %.1e (tol %.0e), dw %.1e (tol %.0e)", name, rows, ch, V, ey, ex, gemm_tol + aeps, ew,
          gemm_tol);
    /* without dinp; then no rows: dw cleared */
    G->upload(dw_d, w, sizeof(float) * nw);
    G->linear_t_backward(rows, ch, V, NULL, dw_d, dy_d, x_d, w_d);
    float *gdw2 = from_dev(dw_d, nw);
    G->linear_t_backward(0, ch, V, NULL, dw_d, dy_d, x_d, w_d);
    float *gdw0 = from_dev(dw_d, nw);
    size_t nz = 0;
    for (size_t i = 0; i < nw; i++) nz += gdw0[i] != 0.0f;
    check(ndiff(gdw2, gdw, nw) == 0 && nz == 0, "tf %s linear_t_backward without dinp: dw the same (%zu differ); "
          "rows=0: dw cleared (%zu not zero)", name, ndiff(gdw2, gdw, nw), nz);
    void *bufs_d[] = {x_d, dy_d, y_d, dx_d, w_d, dw_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {x, w, dy, y, dx, dw, gy, gdx, gdw, gdw2, gdw0};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* Loss and counts from the same logits on both sides; a tie (the first
 * maximal class predicts) at position 1 of sample 0, whose target is the
 * first of the tied classes. Without dlogits and in place (dlogits =
 * logits) the GPU gives the same numbers, bit for bit. */
static void tf_token_xent(int ty, const char *name, double aeps, const struct tf_case *k, int32_t *tok,
                          int32_t *tok_d)
{
    const int n = k->n, T = k->T, V = k->V;
    const size_t rows = (size_t)n * T, nz = rows * (size_t)V, es = dt_act_size(ty);
    const float scale = 1.0f / (float)rows;
    float *z = fill(nz, -5.0f, 5.0f), *dz = xmalloc(sizeof(float) * nz);
    const int32_t keep = tok[2];
    if (V >= 3) {
        z[(size_t)V + 0] = z[(size_t)V + 2] = 6.0f;
        tok[2] = 0;
        G->upload(tok_d + 2, tok + 2, sizeof(int32_t));
    }
    void *z_d = act_to_dev(ty, z, nz), *dz_d = G->alloc(es * nz);
    long cc = 7, gc = 7, gc2 = 7, gc3 = 7;
    double lc = C->token_xent(dz, &cc, z, tok, n, T, V, scale);
    double lg = G->token_xent(dz_d, &gc, z_d, tok_d, n, T, V, scale);
    float *gdz = act_from_dev(ty, dz_d, nz);
    double el = fabs(lg - lc) / fmax(1.0, fabs(lc)), ed = rel_err(gdz, dz, nz);
    check(el <= 1e-5 && gc == cc && ed <= 1e-5 + aeps, "tf %s token_xent n=%d T=%d V=%d: loss %.8g vs %.8g (rel "
          "%.1e, tol 1e-5), correct %ld vs %ld, dlogits rel err %.1e (tol %.0e)", name, n, T, V, lg, lc, el, gc, cc, ed,
          1e-5 + aeps);
    double lg2 = G->token_xent(NULL, &gc2, z_d, tok_d, n, T, V, scale);
    double lg3 = G->token_xent(z_d, &gc3, z_d, tok_d, n, T, V, scale); /* in place */
    float *gdz3 = act_from_dev(ty, z_d, nz);
    check(lg2 == lg && lg3 == lg && gc2 == gc && gc3 == gc && ndiff(gdz3, gdz, nz) == 0, "tf %s token_xent without "
          "dlogits and in place: the same loss (%s), counts (%ld, %ld) and dlogits (%zu differ)", name,
          lg2 == lg && lg3 == lg ? "yes" : "no", gc2, gc3, ndiff(gdz3, gdz, nz));
    if (V >= 3) {
        tok[2] = keep;
        G->upload(tok_d + 2, tok + 2, sizeof(int32_t));
    }
    G->free(z_d);
    G->free(dz_d);
    void *bufs[] = {z, dz, gdz, gdz3};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* Every op with activations of type ty (the device's act_type() now). */
static void test_transformer(int ty, const char *name, double aeps, double gemm_tol)
{
    for (size_t i = 0; i < sizeof tf_cases / sizeof *tf_cases; i++) {
        const struct tf_case *k = &tf_cases[i];
        int32_t *tok_d;
        int32_t *tok = tf_tokens(k->n, k->T, k->V, &tok_d);
        const size_t rows = (size_t)k->n * k->T;
        tf_embed(ty, name, k, tok, tok_d);
        tf_layernorm(ty, name, aeps, rows, k->ch);
        tf_attention(ty, name, aeps, k);
        tf_linear_t(ty, name, aeps, gemm_tol, rows, k->ch, k->V);
        tf_token_xent(ty, name, aeps, k, tok, tok_d);
        G->free(tok_d);
        free(tok);
    }
    tf_layernorm(ty, name, aeps, 4096, 768); /* dgamma, dbeta folded from many row slices */
    tf_gelu(ty, name, aeps);
}

/* AdamW against the CPU's (compared as adam_update is: the updates, not the
 * parameters); the sum of squares in double (the same products, summed in
 * another order); scale exact. */
static void test_adamw(void)
{
    const size_t n = 10007;
    float *p = fill(n, -1.0f, 1.0f), *m = fill(n, -1e-3f, 1e-3f), *v = fill(n, 0.0f, 1e-5f);
    float *g = fill(n, -1e-2f, 1e-2f), *p0 = dup(p, n);
    float *p_d = to_dev(p, n), *m_d = to_dev(m, n), *v_d = to_dev(v, n), *g_d = to_dev(g, n);
    C->adamw_update(p, m, v, g, n, 3e-4f, 0.9f, 0.999f, 1e-7f, 3e-5f);
    G->adamw_update(p_d, m_d, v_d, g_d, n, 3e-4f, 0.9f, 0.999f, 1e-7f, 3e-5f);
    float *gp = from_dev(p_d, n), *gm = from_dev(m_d, n), *gv = from_dev(v_d, n);
    for (size_t i = 0; i < n; i++) {
        gp[i] -= p0[i];
        p[i] -= p0[i];
    }
    double ep = rel_err(gp, p, n), em = rel_err(gm, m, n), ev = rel_err(gv, v, n);
    check(ep <= 1e-3 && em <= 1e-6 && ev <= 1e-6, "adamw_update: rel err update %.1e (tol 1e-3), m %.1e, v %.1e "
          "(tol 1e-6)", ep, em, ev);
    const size_t sizes[] = {1, 1000, 10007, (size_t)1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const size_t ns = sizes[k];
        float *x = fill(ns, -3.0f, 3.0f), *x_d = to_dev(x, ns);
        double sc = C->sum_squares(x, ns), sg = G->sum_squares(x_d, ns), e = fabs(sg - sc) / sc;
        check(e <= 1e-12, "sum_squares n=%zu: %.15g vs %.15g (rel %.1e, tol 1e-12)", ns, sg, sc, e);
        C->scale(x, ns, 0.37f);
        G->scale(x_d, ns, 0.37f);
        float *gx = from_dev(x_d, ns);
        check(ndiff(gx, x, ns) == 0, "scale n=%zu: exact (%zu differ)", ns, ndiff(gx, x, ns));
        G->free(x_d);
        free(x);
        free(gx);
    }
    check(G->sum_squares(g_d, 0) == 0.0, "sum_squares n=0: 0");
    void *bufs_d[] = {p_d, m_d, v_d, g_d};
    for (size_t i = 0; i < sizeof bufs_d / sizeof *bufs_d; i++) G->free(bufs_d[i]);
    void *bufs[] = {p, m, v, g, p0, gp, gm, gv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

/* ---- training: the seed CNN and a residual network ------------------------- */

/* A residual network with every residual-network layer (batchnorm with and without
 * ReLU, add, route, a strided projection, average and global average
 * pooling) trains a few steps on both backends from the same start:
 * losses, first-step gradients, the moving statistics and the parameters'
 * total update are compared, with the seed CNN's tolerances. */
static const struct dt_layer_spec residual_specs[] = {
    {.type = "conv2d", .filters = 16, .kernel = 3, .same = 1},
    {.type = "batchnorm", .activation = DT_ACT_RELU}, /* act2 */
    {.type = "conv2d", .filters = 16, .kernel = 3, .same = 1},
    {.type = "batchnorm", .activation = DT_ACT_RELU},
    {.type = "conv2d", .filters = 16, .kernel = 3, .same = 1},
    {.type = "batchnorm"},
    {.type = "add", .from = -5, .activation = DT_ACT_RELU}, /* + act2 */
    {.type = "route", .from = -1},
    {.type = "conv2d", .filters = 32, .kernel = 1, .stride = 2}, /* projection: 8x8x32 */
    {.type = "batchnorm"},
    {.type = "route", .from = -4}, /* the add's output again */
    {.type = "conv2d", .filters = 32, .kernel = 3, .stride = 2, .same = 1},
    {.type = "batchnorm", .activation = DT_ACT_RELU},
    {.type = "add", .from = -4, .activation = DT_ACT_RELU},
    {.type = "avgpool", .kernel = 2},
    {.type = "global_avgpool"},
    {.type = "dense", .filters = 10},
};

/* Trains mc (on ref: the CPU, or act16_ref for 16-bit activations) and mg
 * (GPU), built alike, for `steps` steps from the same parameters and data,
 * the last batch ragged, and compares per-step losses, first-step
 * gradients per layer, the moving statistics (models with batchnorm) and
 * the parameters' total update. Each model stores activations in its
 * backend's act_type() as it is now. Frees both models.
 *
 * Adam divides each gradient by its own running magnitude, so where a
 * gradient is tiny (or flipped, see the tolerances) its update follows the
 * noise: Adam's updates are compared in fp32 only (update_tol). */
static void train_both(const struct tol *t, const struct dt_backend *ref, const char *what, const char *optname,
                       struct dt_model *mc, struct dt_model *mg, int steps, int batch, double update_tol)
{
    const int npix = mc->input.h * mc->input.w * mc->input.c;
    dt_status st = {0};
    dt_model_create(mc, ref, batch);
    dt_model_create(mg, G, batch);
    dt_model_init_params(mc, 1234);
    dt_model_init_params(mg, 1234);
    struct dt_optim_config cfg;
    dt_optim_defaults(&cfg, optname, &st);
    if (strcmp(optname, "sgd") == 0) {
        cfg.lr = 0.05f;
        cfg.momentum = 0.9f;
    }
    struct dt_optim oc, og;
    dt_optim_create(&oc, ref, &cfg, mc->nparams);
    dt_optim_create(&og, G, &cfg, mg->nparams);
    const size_t np = mc->nparams, nb = mc->nbuffers;
    float *p0 = dup(mc->params, np);
    uint8_t *img = xmalloc((size_t)batch * npix), *lab = xmalloc((size_t)batch);
    uint8_t *img_d = G->alloc((size_t)batch * npix), *lab_d = G->alloc((size_t)batch);
    dt_rng data, drop_c, drop_g;
    dt_rng_seed(&data, 99, 1);
    dt_rng_seed(&drop_c, 5, 0);
    drop_g = drop_c;
    for (int step = 0; step < steps; step++) {
        int n = step == steps - 1 ? 7 : batch; /* a ragged last batch */
        for (int i = 0; i < n * npix; i++) img[i] = (uint8_t)dt_rng_below(&data, 256);
        for (int i = 0; i < n; i++) lab[i] = (uint8_t)dt_rng_below(&data, 10);
        ref->images_to_float(mc->act[0], img, (size_t)n * npix);
        G->upload(img_d, img, (size_t)n * npix);
        G->upload(lab_d, lab, (size_t)n);
        G->images_to_float(mg->act[0], img_d, (size_t)n * npix);
        dt_model_forward(mc, n, 1, &drop_c);
        dt_model_forward(mg, n, 1, &drop_g);
        struct dt_loss_result lc = dt_model_loss(mc, lab, n, 1.0f / (float)n);
        struct dt_loss_result lg = dt_model_loss(mg, lab_d, n, 1.0f / (float)n);
        dt_model_backward(mc, n, &drop_c);
        dt_model_backward(mg, n, &drop_g);
        double el = fabs(lg.loss_sum - lc.loss_sum) / fabs(lc.loss_sum);
        long dc = (long)(lg.correct - lc.correct);
        check(el <= t->loss && labs(dc) <= (t->prec == DT_PREC_FP32 ? 1 : n / 8 + 1),
              "train %s %s %s step %d n=%d: loss %.6f vs %.6f (rel %.1e, tol %.0e), correct %.0f vs %.0f", what,
              t->name, optname, step, n, lg.loss_sum, lc.loss_sum, el, t->loss, lg.correct, lc.correct);
        if (step == 0) {
            float *gg = from_dev(mg->grads, np);
            for (int l = 0; l < mc->nlayers; l++) {
                const struct dt_layer *ly = &mc->layers[l];
                if (!ly->nparams) continue;
                double e = rel_l2(gg + ly->param_offset, mc->grads + ly->param_offset, ly->nparams);
                check(e <= t->train, "train %s %s %s step 0: %s gradient rel L2 err %.1e (tol %.0e)", what, t->name,
                      optname, ly->name, e, t->train);
            }
            free(gg);
        }
        dt_optim_step(&oc, mc->params, mc->grads);
        dt_optim_step(&og, mg->params, mg->grads);
    }
    if (nb) { /* continuous in the data: no flips, the loss's tolerance */
        float *bg = from_dev(mg->buffers, nb);
        double eb = rel_l2(bg, mc->buffers, nb);
        check(eb <= t->loss, "train %s %s %s: moving mean and variance after %d steps rel L2 err %.1e (tol %.0e)",
              what, t->name, optname, steps, eb, t->loss);
        free(bg);
    }
    float *pg = from_dev(mg->params, np);
    float *uc = dup(mc->params, np);
    for (size_t i = 0; i < np; i++) {
        pg[i] -= p0[i];
        uc[i] -= p0[i];
    }
    double e = rel_l2(pg, uc, np);
    check(e <= update_tol, "train %s %s %s: parameter updates after %d steps rel L2 err %.1e (tol %.0e)", what,
          t->name, optname, steps, e, update_tol);
    dt_optim_free(&oc);
    dt_optim_free(&og);
    dt_model_free(mc);
    dt_model_free(mg);
    G->free(img_d);
    G->free(lab_d);
    free(p0);
    free(img);
    free(lab);
    free(pg);
    free(uc);
}

static void test_training(const struct tol *t, const struct dt_backend *ref, const char *what, const char *optname,
                          double update_tol)
{
    const struct dt_shape in = {28, 28, 1};
    struct dt_model mc, mg;
    dt_status st = {0};
    if (dt_model_build(&mc, "cnn", in, 10, 0.0f, &st) != DT_OK || dt_model_build(&mg, "cnn", in, 10, 0.0f, &st) != DT_OK) {
        check(0, "train: building the seed CNN: %s", st.msg);
        return;
    }
    train_both(t, ref, what, optname, &mc, &mg, 5, 64, update_tol);
}

static void test_residual_training(const struct tol *t, const struct dt_backend *ref, const char *what)
{
    const struct dt_shape in = {16, 16, 3};
    const int nspecs = (int)(sizeof residual_specs / sizeof *residual_specs);
    struct dt_model mc, mg;
    dt_status st = {0};
    if (dt_model_build_specs(&mc, "residual", in, 10, residual_specs, nspecs, &st) != DT_OK ||
        dt_model_build_specs(&mg, "residual", in, 10, residual_specs, nspecs, &st) != DT_OK) {
        check(0, "train: building the residual model: %s", st.msg);
        return;
    }
    check(dt_model_check_backend(&mg, G, &st) == DT_OK, "residual: the CUDA backend runs every layer%s%s",
          st.code ? ": " : "", st.code ? st.msg : "");
    train_both(t, ref, what, "sgd", &mc, &mg, 4, 32, t->train);
}

/* ---- CUDA graphs (--cuda-graphs) ---------------------------------------- */

/* The seed CNN with dropout 0.5 trains the same steps twice on the GPU:
 * plainly, and through dt_step_graphs_run (plain first step, then recorded
 * and replayed). The same kernels run in the same order on the same random
 * draws, so losses, gradients and the random stream must be identical, bit
 * for bit; a ragged batch takes its own plain step and recording. Run with
 * float activations and again with 16-bit ones (G's act_type() now). */
static void test_graph_steps(void)
{
    const char *act = dt_precision_name(G->act_type());
    const struct dt_shape in = {28, 28, 1};
    const int batch = 64, npix = 28 * 28, steps = 7;
    struct dt_model ma, mb;
    dt_status st = {0};
    if (dt_model_build(&ma, "cnn", in, 10, 0.5f, &st) != DT_OK || dt_model_build(&mb, "cnn", in, 10, 0.5f, &st) != DT_OK) {
        check(0, "graph %s: building the seed CNN: %s", act, st.msg);
        return;
    }
    struct dt_step_graphs sg;
    check(dt_step_graphs_init(&sg, &mb, G, &st) == DT_OK, "graph %s: the seed CNN can be recorded%s%s", act,
          st.code ? ": " : "", st.code ? st.msg : "");
    dt_model_create(&ma, G, batch);
    dt_model_create(&mb, G, batch);
    dt_model_init_params(&ma, 77);
    dt_model_init_params(&mb, 77);
    const size_t np = ma.nparams;
    uint8_t *img = xmalloc((size_t)batch * npix), *lab = xmalloc((size_t)batch);
    uint8_t *img_d = G->alloc((size_t)batch * npix), *lab_d = G->alloc((size_t)batch);
    dt_rng data, ra, rb;
    dt_rng_seed(&data, 31, 1);
    dt_rng_seed(&ra, 32, 0);
    rb = ra;
    for (int step = 0; step < steps; step++) {
        int n = step == 4 || step == 5 ? 9 : batch; /* plain, then recorded, at 9 too */
        for (int i = 0; i < n * npix; i++) img[i] = (uint8_t)dt_rng_below(&data, 256);
        for (int i = 0; i < n; i++) lab[i] = (uint8_t)dt_rng_below(&data, 10);
        G->upload(img_d, img, (size_t)n * npix);
        G->upload(lab_d, lab, (size_t)n);
        G->images_to_float(ma.act[0], img_d, (size_t)n * npix);
        G->images_to_float(mb.act[0], img_d, (size_t)n * npix);
        dt_model_forward(&ma, n, 1, &ra);
        struct dt_loss_result la = dt_model_loss(&ma, lab_d, n, 1.0f / (float)n);
        dt_model_backward(&ma, n, &ra);
        long replays = sg.replayed;
        struct dt_loss_result lb = dt_step_graphs_run(&sg, &mb, lab_d, n, 1.0f / (float)n, &rb, NULL);
        float *ga = from_dev(ma.grads, np), *gb = from_dev(mb.grads, np);
        size_t d = ndiff(ga, gb, np);
        check(la.loss_sum == lb.loss_sum && la.correct == lb.correct && d == 0 && !memcmp(&ra, &rb, sizeof ra),
              "graph %s step %d n=%d (%s): loss %.9g vs %.9g, correct %.0f vs %.0f, %zu of %zu gradients differ, "
              "random streams %s", act, step, n, sg.replayed > replays ? "replayed" : "plain", lb.loss_sum,
              la.loss_sum, lb.correct, la.correct, d, np, memcmp(&ra, &rb, sizeof ra) ? "differ" : "agree");
        free(ga);
        free(gb);
    }
    /* Steps 0 and 4 plain (new shapes); 1-3, 5 and 6 replays; 2 recordings,
     * or 3 if the plain step at 9 grew a workspace the first graph uses
     * (any reallocation makes every graph stale). */
    check(sg.recorded >= 2 && sg.recorded <= 3 && sg.replayed == 5 && sg.plain == 2 && sg.failed == 0,
          "graph %s: %ld recordings, %ld replays, %ld plain, %ld failed (want 2 or 3, 5, 2, 0)%s%s", act, sg.recorded,
          sg.replayed, sg.plain, sg.failed, sg.failed ? ": " : "", sg.why);
    dt_step_graphs_free(&sg, G);
    dt_model_free(&ma);
    dt_model_free(&mb);
    G->free(img_d);
    G->free(lab_d);
    free(img);
    free(lab);
}

/* The recording API itself: a buffer that must grow fails the recording
 * (with its reason), nothing recorded runs, and the random draws made while
 * recording are put back; a clean recording replays what it holds. */
static void test_capture_api(void)
{
    char why[200] = "";
    const size_t n = 1 << 16;
    float *x = fill(n, -1.0f, 1.0f);
    float *x_d = to_dev(x, n), *y_d = G->alloc(sizeof(float) * n), *m_d = G->alloc(sizeof(float) * n);
    G->zero(y_d, sizeof(float) * n);
    dt_rng r, before;
    dt_rng_seed(&r, 9, 9);
    before = r;
    /* The softmax's scratch grows with the rows: far more than any before. */
    int rows = 1 << 15;
    float *logits = G->alloc(sizeof(float) * (size_t)rows * 20);
    uint8_t *lab = G->alloc((size_t)rows * 2);
    G->zero(logits, sizeof(float) * (size_t)rows * 20);
    G->zero(lab, (size_t)rows * 2);
    check(G->capture_begin(why, sizeof why) == 0, "capture_begin%s%s", why[0] ? ": " : "", why);
    G->dropout_forward(y_d, m_d, x_d, n, 0.5f, &r);
    long correct = 0;
    G->softmax_xent(NULL, &correct, logits, lab, rows, 10, 1.0f);
    dt_graph *g = G->capture_end(why, sizeof why);
    float *y = from_dev(y_d, n);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += y[i] != 0.0f;
    check(g == NULL && strstr(why, "a device buffer had to grow") && !memcmp(&r, &before, sizeof r) && nz == 0,
          "capture: a growing buffer fails the recording (%s), nothing ran (%zu outputs written), the draws are put "
          "back (%s)", why, nz, memcmp(&r, &before, sizeof r) ? "not" : "yes");
    if (g) G->graph_destroy(g);
    /* Now the buffers are large enough: recorded, replayed twice with new
     * draws each time (the second replay's mask differs from the first's). */
    correct = 0;
    check(G->capture_begin(why, sizeof why) == 0, "capture_begin again");
    G->dropout_forward(y_d, m_d, x_d, n, 0.5f, &r);
    G->softmax_xent(NULL, &correct, logits, lab, rows, 10, 1.0f);
    g = G->capture_end(why, sizeof why);
    check(g != NULL && G->graph_valid(g), "capture: recorded%s%s", g ? "" : ": ", g ? "" : why);
    if (g) {
        long c1 = 0, c2 = 0;
        double l1 = G->graph_run(g, &c1);
        float *m1 = from_dev(m_d, n);
        double l2 = G->graph_run(g, &c2);
        float *m2 = from_dev(m_d, n);
        double want = (double)rows * log(10.0); /* zero logits: log(10) per row */
        size_t d = ndiff(m1, m2, n), kept = 0;
        for (size_t i = 0; i < n; i++) kept += m1[i] != 0.0f;
        check(fabs(l1 - want) <= 1e-6 * want && l1 == l2 && c1 == c2 && d > n / 4 && kept > n / 3 && kept < 2 * n / 3,
              "capture: replays give the loss %.6f (want %.6f), %ld correct, fresh masks (%zu of %zu differ, %zu kept)",
              l1, want, c1, d, n, kept);
        /* Twice the rows, run plainly, grows the scratch the graph uses: stale. */
        G->softmax_xent(NULL, &c1, logits, lab, 2 * rows, 10, 1.0f);
        check(!G->graph_valid(g), "capture: a reallocated buffer makes the graph stale");
        free(m1);
        free(m2);
        G->graph_destroy(g);
    }
    free(x);
    free(y);
    G->free(x_d);
    G->free(y_d);
    G->free(m_d);
    G->free(logits);
    G->free(lab);
}

int main(void)
{
    char why[512] = "";
    int ndev = dt_gpu_count(why, sizeof why);
    if (ndev <= 0) {
        printf("SKIP: no GPU: %s\n", why);
        return 77;
    }
    if (dt_gpu_select(0, why, sizeof why) != 0) {
        printf("FAIL dt_gpu_select(0): %s\n", why);
        return 1;
    }
    struct dt_gpu_info info;
    check(dt_gpu_describe(0, &info) == 0, "dt_gpu_describe(0)");
    printf("# %d device(s); device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB, PCI %s\n", ndev, info.name,
           info.major, info.minor, info.multiprocessors, (double)info.memory / (double)(1u << 30), info.pci_bus_id);
    check(dt_gpu_select(0, why, sizeof why) == 0, "dt_gpu_select(0) again is harmless");
    if (C->setup(1, DT_PREC_FP32, why, sizeof why) != 0 || G->setup(1, DT_PREC_FP32, why, sizeof why) != 0) {
        printf("FAIL setup fp32: %s\n", why);
        return 1;
    }
    dt_rng_seed(&rng, 2024, 7);

    test_memory();
    test_bias();
    test_relu();
    test_dropout();
    test_images();
    test_softmax();
    test_optim();
    test_unscale();
    test_convert();
    test_pool();
    test_channel_ops();
    test_avgpool();
    test_transformer(DT_PREC_FP32, "fp32", 0.0, tol_for(DT_PREC_FP32)->gemm);
    test_adamw();

    for (size_t i = 0; i < sizeof tolerances / sizeof *tolerances; i++) {
        const struct tol *t = &tolerances[i];
        if (G->setup(1, t->prec, why, sizeof why) != 0) {
            printf("# %s: not run here: %s\n", t->name, why);
            continue;
        }
        test_gemm(t);
        test_dense(t);
        test_conv(t);
        test_training(t, C, "cnn", "sgd", t->train);
        test_residual_training(t, C, "residual");
        if (t->prec != DT_PREC_FP32) { /* the tied head's products with float activations, 16-bit operands */
            char nm[48];
            snprintf(nm, sizeof nm, "fp32 act, %s GEMM", t->name);
            tf_linear_t(DT_PREC_FP32, nm, 0.0, t->gemm, 67, 96, 300);
        }
        if (t->prec == DT_PREC_FP32) test_training(t, C, "cnn", "adam", 5e-2);
    }

    /* 16-bit activations, against act16_ref on the same 16-bit inputs; its
     * setup moves the CPU backend's precision too, so C is set up again
     * after. Training keeps the precision's tolerances (the arithmetic is
     * the same 16-bit arithmetic as above). */
    R = dt_act16_ref();
    const struct act16 acts[] = {
        {"bf16", DT_PREC_BF16, 0x1p-7, 0x1p-133, tol_for(DT_PREC_BF16)},
        {"fp16", DT_PREC_FP16, 0x1p-10, 0x1p-24, tol_for(DT_PREC_FP16)},
    };
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        const struct act16 *a = &acts[i];
        if (G->setup(1, a->type, why, sizeof why) != 0) {
            printf("# %s activations: not run here: %s\n", a->name, why);
            continue;
        }
        /* A CPU without bf16 instructions computes in float: the bounds allow that too (as in fp16). */
        if (R->setup(1, a->type, why, sizeof why) != 0) {
            printf("# %s activations: the reference computes in fp32 here (%s)\n", a->name, why);
            if (R->setup(1, DT_PREC_FP32, why, sizeof why) != 0) {
                printf("# %s activations: not run here: %s\n", a->name, why);
                continue;
            }
        }
        int gt = G->set_act_type(a->type), rt = R->set_act_type(a->type);
        check(gt == a->type && rt == a->type, "act %s: set_act_type gives %s on the GPU, %s on the reference", a->name,
              dt_precision_name(gt), dt_precision_name(rt));
        if (gt != a->type || rt != a->type) continue;
        test_act16_ops(a);
        char nm[48];
        snprintf(nm, sizeof nm, "%s act", a->name);
        test_transformer(a->type, nm, a->eps, a->t->gemm);
        test_training(a->t, R, "cnn, 16-bit activations", "sgd", a->t->train);
        test_residual_training(a->t, R, "residual, 16-bit activations");
    }
    if (C->setup(1, DT_PREC_FP32, why, sizeof why) != 0) {
        printf("FAIL setup fp32 again: %s\n", why);
        return 1;
    }

    G->setup(1, DT_PREC_FP32, why, sizeof why);
    test_capture_api();
    test_graph_steps();
    if (G->setup(1, DT_PREC_BF16, why, sizeof why) != 0)
        printf("# graph with bf16 activations: not run here: %s\n", why);
    else if (G->set_act_type(DT_PREC_BF16) == DT_PREC_BF16)
        test_graph_steps();
    else
        check(0, "graph: set_act_type(bf16) refused under --precision bf16");

    printf("# %d checks, %d failed\n", nchecks, nfailed);
    return nfailed ? 1 : 0;
}
