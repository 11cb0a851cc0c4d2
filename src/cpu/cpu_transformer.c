/* cpu_transformer.c: the transformer's row-wise ops on the CPU (backend.h):
 * token + position embedding, layer normalization, GELU, the product with a
 * [V][C] weight (the tied LM head) and the token cross-entropy, on float32
 * and bf16 activations alike.
 *
 * Each kernel is written once over cpu_ld/cpu_st and instantiated for both
 * types (bf a constant) inside DT_MULTIVERSION entry points, so its loops
 * are compiled for AVX-512, AVX2 and the baseline. Kernels that make
 * several passes over a row (layer norm, cross-entropy) first decode a
 * bf16 row into a float copy in L1 and run the passes on float.
 *
 * The one design decision: GCC vectorizes no float reduction (a row's sum
 * or max) without -ffast-math, which would reorder every sum in the
 * program. Sums here therefore run in LANES independent partial sums (a
 * block loop with a constant trip count: one vector per block), folded at
 * the end of the row; a row's max is an integer max over order-preserving
 * keys; and exp() is a polynomial written in C (vexpf), since libm's is a
 * call per element. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#define AI __attribute__((always_inline))

/* Partial sums per row; 16 float lanes is one AVX-512 vector, two AVX2 ones. */
#define LANES 16

/* Rows of dgamma/dbeta summed in float before they are folded into double
 * (as cpu_norm.c's channel sums): the float error stays that of a short sum
 * however many rows there are. */
#define SUM_BLOCK 64

/* ---- helpers ------------------------------------------------------------ */

/* x limited to [lo, hi] (NaN passes), as a blend of bit patterns: written
 * as a ternary it is a branch, and GCC's jump threading copies everything
 * after it into each side with the bound folded in, which vectorized as
 * three masked copies of vexpf and of GELU's division per vector. */
static inline AI float clampf(float x, float lo, float hi)
{
    uint32_t ux, ulo, uhi;
    memcpy(&ux, &x, sizeof ux);
    memcpy(&ulo, &lo, sizeof ulo);
    memcpy(&uhi, &hi, sizeof uhi);
    const uint32_t below = 0u - (uint32_t)(x < lo), above = 0u - (uint32_t)(x > hi);
    ux = (ux & ~(below | above)) | (ulo & below) | (uhi & above);
    memcpy(&x, &ux, sizeof x);
    return x;
}

/* e^x, vectorizable: Cephes's expf (x = n ln2 + r, |r| <= ln2 / 2, a
 * degree-5 polynomial for e^r, 2^n put in the exponent bits), within 2 ulp.
 * x is clamped to [-87, 88], so the result is finite and normal: e^-87 ~
 * 1.6e-38 stands for 0 where it is added to 1 (softmax, sigmoid). */
static inline AI float vexpf(float x)
{
    x = clampf(x, -87.0f, 88.0f);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* nearest integer: 1.5 x 2^23 */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* The lanes' sum, pairwise: a tree of shuffles, not a chain of 16 adds. */
static inline AI float fold(float *acc)
{
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* A row of n activations as float: the row itself (float32), or decoded
 * into buf (bf16). The passes over a row then run on float in L1 for both
 * types: on bf16 rows GCC vectorizes them at half width. */
static inline AI const float *row_f32(float *restrict buf, const void *restrict p, size_t o, int n, const int bf)
{
    if (!bf) return (const float *)p + o;
    const uint16_t *restrict h = (const uint16_t *)p + o;
    for (int j = 0; j < n; j++) buf[j] = dt_bf16_to_f32(h[j]);
    return buf;
}

/* The sum of a row, and of its squared deviations from mean. */
static inline AI float row_sum(const float *restrict x, int C)
{
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= C; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[j + l];
    float s = fold(acc);
    for (; j < C; j++) s += x[j];
    return s;
}

static inline AI float row_sq_dev(const float *restrict x, float mean, int C)
{
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= C; j += LANES)
        for (int l = 0; l < LANES; l++) {
            const float d = x[j + l] - mean;
            acc[l] += d * d;
        }
    float s = fold(acc);
    for (; j < C; j++) {
        const float d = x[j] - mean;
        s += d * d;
    }
    return s;
}

/* ---- embedding ---------------------------------------------------------- */

static inline AI void embed_fwd(void *restrict out, const int32_t *restrict tokens, const float *restrict wte,
                                const float *restrict wpe, int n, int T, int C, const int bf)
{
    for (int s = 0; s < n; s++)
        for (int t = 0; t < T; t++) {
            const float *restrict e = wte + (size_t)tokens[(size_t)s * (T + 1) + t] * C;
            const float *restrict p = wpe + (size_t)t * C;
            void *restrict o = cpu_at(out, ((size_t)s * T + t) * C, bf);
            for (int j = 0; j < C; j++) cpu_st(o, (size_t)j, e[j] + p[j], bf);
        }
}

DT_MULTIVERSION void cpu_embed_forward(void *out, const int32_t *tokens, const float *wte, const float *wpe, int n,
                                       int T, int C, int bf)
{
    if (bf) embed_fwd(out, tokens, wte, wpe, n, T, C, 1);
    else embed_fwd(out, tokens, wte, wpe, n, T, C, 0);
}

/* Token ids are trusted: the data layer checked them against V. */
static inline AI void embed_bwd(float *restrict dwte, float *restrict dwpe, const void *restrict dout,
                                const int32_t *restrict tokens, int n, int T, int C, const int bf)
{
    memset(dwpe, 0, sizeof(float) * (size_t)T * C);
    for (int s = 0; s < n; s++)
        for (int t = 0; t < T; t++) {
            float *restrict de = dwte + (size_t)tokens[(size_t)s * (T + 1) + t] * C;
            float *restrict dp = dwpe + (size_t)t * C;
            const void *restrict d = cpu_at(dout, ((size_t)s * T + t) * C, bf);
            for (int j = 0; j < C; j++) {
                float g = cpu_ld(d, (size_t)j, bf);
                de[j] += g;
                dp[j] += g;
            }
        }
}

DT_MULTIVERSION void cpu_embed_backward(float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int n,
                                        int T, int C, int bf)
{
    if (bf) embed_bwd(dwte, dwpe, dout, tokens, n, T, C, 1);
    else embed_bwd(dwte, dwpe, dout, tokens, n, T, C, 0);
}

/* ---- layer normalization ------------------------------------------------ */

static inline AI void ln_write(void *restrict o, const float *restrict x, const float *restrict gamma,
                               const float *restrict beta, float mean, float rstd, int C, const int bf)
{
    for (int j = 0; j < C; j++) cpu_st(o, (size_t)j, (x[j] - mean) * rstd * gamma[j] + beta[j], bf);
}

/* Two passes for the statistics (the mean, then the squared deviations
 * from it: no cancellation), a third writes; the row stays in L1. */
static inline AI void layernorm_fwd(void *restrict out, float *restrict mean, float *restrict rstd,
                                    const void *restrict inp, const float *restrict gamma,
                                    const float *restrict beta, size_t rows, int C, float eps, float *restrict buf,
                                    const int bf)
{
    const float invc = 1.0f / (float)C;
    for (size_t r = 0; r < rows; r++) {
        const float *x = row_f32(buf, inp, r * (size_t)C, C, bf);
        const float m = row_sum(x, C) * invc;
        const float s = 1.0f / sqrtf(row_sq_dev(x, m, C) * invc + eps);
        ln_write(cpu_at(out, r * (size_t)C, bf), x, gamma, beta, m, s, C, bf);
        mean[r] = m;
        rstd[r] = s;
    }
}

DT_MULTIVERSION void cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *gamma,
                                           const float *beta, size_t rows, int C, float eps, int bf)
{
    float *buf = dt_xmalloc(sizeof(float) * (size_t)C);
    if (bf) layernorm_fwd(out, mean, rstd, inp, gamma, beta, rows, C, eps, buf, 1);
    else layernorm_fwd(out, mean, rstd, inp, gamma, beta, rows, C, eps, buf, 0);
    free(buf);
}

/* One row's first pass: the means of dxhat = gamma * dout and of dxhat *
 * xhat (into m1, m2), and dout * xhat, dout added to the block's dgamma,
 * dbeta partial sums. */
static inline AI void ln_bwd_sums(float *restrict m1, float *restrict m2, float *restrict dg, float *restrict db,
                                  const float *restrict d, const float *restrict x, const float *restrict gamma,
                                  float mean, float rstd, int C)
{
    float a1[LANES] = {0}, a2[LANES] = {0};
    int j = 0;
    for (; j + LANES <= C; j += LANES)
        for (int l = 0; l < LANES; l++) {
            const int i = j + l;
            const float xh = (x[i] - mean) * rstd, dn = gamma[i] * d[i];
            a1[l] += dn;
            a2[l] += dn * xh;
            dg[i] += d[i] * xh;
            db[i] += d[i];
        }
    float s1 = fold(a1), s2 = fold(a2);
    for (; j < C; j++) {
        const float xh = (x[j] - mean) * rstd, dn = gamma[j] * d[j];
        s1 += dn;
        s2 += dn * xh;
        dg[j] += d[j] * xh;
        db[j] += d[j];
    }
    *m1 = s1 / (float)C;
    *m2 = s2 / (float)C;
}

/* The second pass: dinp. inplace (a constant, float32 only): d is this
 * row of dx, read through dx so that restrict stays true. */
static inline AI void ln_bwd_write(void *restrict dx, const float *restrict d, const float *restrict x,
                                   const float *restrict gamma, float mean, float rstd, float m1, float m2, int C,
                                   const int bf, const int inplace)
{
    const float *dd = inplace ? (const float *)dx : d;
    for (int j = 0; j < C; j++) {
        const float xh = (x[j] - mean) * rstd;
        cpu_st(dx, (size_t)j, (gamma[j] * dd[j] - m1 - xh * m2) * rstd, bf);
    }
}

/* dinp may be dout (not restrict here): under bf16 a row of dout is
 * decoded into buf before dinp's row is written; under float32 in place
 * is the inplace instance. */
static inline AI void layernorm_bwd(void *dinp, float *restrict dgamma, float *restrict dbeta, const void *dout,
                                    const void *restrict inp, const float *restrict gamma,
                                    const float *restrict mean, const float *restrict rstd, size_t rows, int C,
                                    float *restrict dg, double *restrict dgd, float *restrict buf, const int bf,
                                    const int inplace)
{
    float *restrict db = dg + C;
    double *restrict dbd = dgd + C;
    for (int j = 0; j < C; j++) dgd[j] = dbd[j] = 0.0;
    for (size_t r0 = 0; r0 < rows; r0 += SUM_BLOCK) {
        const size_t r1 = r0 + SUM_BLOCK < rows ? r0 + SUM_BLOCK : rows;
        memset(dg, 0, sizeof(float) * 2 * (size_t)C);
        for (size_t r = r0; r < r1; r++) {
            const size_t o = r * (size_t)C;
            const float *x = row_f32(buf, inp, o, C, bf), *d = row_f32(buf + C, dout, o, C, bf);
            float m1, m2;
            ln_bwd_sums(&m1, &m2, dg, db, d, x, gamma, mean[r], rstd[r], C);
            ln_bwd_write(cpu_at(dinp, o, bf), d, x, gamma, mean[r], rstd[r], m1, m2, C, bf, inplace);
        }
        for (int j = 0; j < C; j++) {
            dgd[j] += (double)dg[j];
            dbd[j] += (double)db[j];
        }
    }
    for (int j = 0; j < C; j++) {
        dgamma[j] = (float)dgd[j];
        dbeta[j] = (float)dbd[j];
    }
}

DT_MULTIVERSION void cpu_layernorm_backward(void *dinp, float *dgamma, float *dbeta, const void *dout,
                                            const void *inp, const float *gamma, const float *mean,
                                            const float *rstd, size_t rows, int C, int bf)
{
    float *dg = dt_xmalloc(sizeof(float) * 4 * (size_t)C); /* dgamma, dbeta partial sums; 2 rows as float */
    double *dgd = dt_xmalloc(sizeof(double) * 2 * (size_t)C);
    if (bf) layernorm_bwd(dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, rows, C, dg, dgd, dg + 2 * C, 1, 0);
    else if (dinp == dout)
        layernorm_bwd(dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, rows, C, dg, dgd, dg + 2 * C, 0, 1);
    else layernorm_bwd(dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, rows, C, dg, dgd, dg + 2 * C, 0, 0);
    free(dg);
    free(dgd);
}

/* ---- GELU --------------------------------------------------------------- */

/* GPT-2's tanh approximation, through 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u):
 * the same function, with no cancellation near tanh(u) = -1 and one exp. */
#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f
/* -2u = x (A + B x^2): the constants folded, which strict float rules
 * leave to the source */
#define GELU_A (-2.0f * GELU_K0)
#define GELU_B (-2.0f * GELU_K0 * GELU_K1)

static inline AI void gelu_fwd(void *restrict out, const void *restrict inp, size_t n, const int bf)
{
    for (size_t i = 0; i < n; i++) {
        const float x = cpu_ld(inp, i, bf);
        cpu_st(out, i, x / (1.0f + vexpf(x * (GELU_A + GELU_B * x * x))), bf);
    }
}

DT_MULTIVERSION void cpu_gelu_forward(void *out, const void *inp, size_t n, int bf)
{
    if (bf) gelu_fwd(out, inp, n, 1);
    else gelu_fwd(out, inp, n, 0);
}

/* gelu = x s with s = 1 / (1 + e), e = e^-2u: d/dx = s + x s' where s' =
 * 2 s (1 - s) du/dx and 1 - s = e s (no cancellation as s -> 1). */
static inline AI void gelu_bwd(void *restrict dinp, const void *restrict dout, const void *restrict inp, size_t n,
                               const int bf, const int inplace)
{
    const void *dy = inplace ? (const void *)dinp : dout;
    for (size_t i = 0; i < n; i++) {
        const float x = cpu_ld(inp, i, bf), x2 = x * x;
        const float e = vexpf(x * (GELU_A + GELU_B * x2));
        const float s = 1.0f / (1.0f + e);
        const float du2 = 2.0f * GELU_K0 + (6.0f * GELU_K0 * GELU_K1) * x2; /* 2 du/dx */
        /* s (e s) = s (1 - s) first: in the far negative tail x e overflows
         * where s is 0 */
        cpu_st(dinp, i, cpu_ld(dy, i, bf) * (s + s * (e * s) * x * du2), bf);
    }
}

DT_MULTIVERSION void cpu_gelu_backward(void *dinp, const void *dout, const void *inp, size_t n, int bf)
{
    const int inplace = dinp == dout;
    if (bf && inplace) gelu_bwd(dinp, dout, inp, n, 1, 1);
    else if (bf) gelu_bwd(dinp, dout, inp, n, 1, 0);
    else if (inplace) gelu_bwd(dinp, dout, inp, n, 0, 1);
    else gelu_bwd(dinp, dout, inp, n, 0, 0);
}

/* ---- product with a [V][C] weight --------------------------------------- */

/* bf16 activations are read and written where they lie (cpu_gemm_bf16:
 * the weight rounded to bf16, float accumulation, the output rounded
 * once), with no float copies of the logits. */
void cpu_linear_t_forward(size_t rows, int C, int V, void *out, const void *inp, const float *w, int bf)
{
    if (rows == 0) return;
    if (!bf) cpu_gemm(0, 1, (int)rows, V, C, 1.0f, inp, C, w, C, 0.0f, out, V);
    else cpu_gemm_bf16(0, 1, (int)rows, V, C, inp, 1, C, w, 0, C, NULL, 0.0f, out, 1, V);
}

void cpu_linear_t_backward(size_t rows, int C, int V, void *dinp, float *dw, const void *dout, const void *inp,
                           const float *w, int bf)
{
    if (rows == 0) {
        memset(dw, 0, sizeof(float) * (size_t)V * C);
        return;
    }
    if (!bf) {
        cpu_gemm(1, 0, V, C, (int)rows, 1.0f, dout, V, inp, C, 0.0f, dw, C);
        if (dinp) cpu_gemm(0, 0, (int)rows, C, V, 1.0f, dout, V, w, C, 0.0f, dinp, C);
        return;
    }
    cpu_gemm_bf16(1, 0, V, C, (int)rows, dout, 1, V, inp, 1, C, NULL, 0.0f, dw, 0, C);
    if (dinp) cpu_gemm_bf16(0, 0, (int)rows, C, V, dout, 1, V, w, 0, C, NULL, 0.0f, dinp, 1, C);
}

/* ---- token cross-entropy ------------------------------------------------ */

/* A float's bits as an int32 of the same order (a negative float's
 * magnitude bits flipped), and back (the map is its own inverse): a row's
 * maximum as an integer max, which vectorizes under strict float rules
 * (GCC left a float max over 16 lanes as 16 scalar chains, 2.5x slower).
 * A NaN stays a NaN, and so reaches the loss. */
static inline AI int32_t order_flip(int32_t b)
{
    const uint32_t neg = 0u - ((uint32_t)b >> 31);
    return b ^ (int32_t)(neg >> 1);
}

static inline AI float row_max(const float *restrict z, int V)
{
    int32_t m = INT32_MIN;
    for (int j = 0; j < V; j++) {
        int32_t b;
        memcpy(&b, &z[j], sizeof b);
        b = order_flip(b);
        m = b > m ? b : m;
    }
    m = order_flip(m);
    float f;
    memcpy(&f, &m, sizeof f);
    return f;
}

/* e[j] = exp(e[j] - zmax), in place; returns their sum. The next row's
 * logits and gradient (next, next_d: nbytes each, or NULL) are fetched
 * meanwhile, a line per block, so the memory is busy while this row is
 * computed on in L1. */
static inline AI float row_exp(float *restrict e, float zmax, int V, const char *next, const char *next_d,
                               size_t nbytes)
{
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= V; j += LANES) {
        const size_t at = (size_t)j * sizeof(float);
        if (next && at < nbytes) __builtin_prefetch(next + at, 0, 3);
        if (next_d && at < nbytes) __builtin_prefetch(next_d + at, 1, 3); /* for writing */
        for (int l = 0; l < LANES; l++) {
            const float v = vexpf(e[j + l] - zmax);
            e[j + l] = v;
            acc[l] += v;
        }
    }
    float s = fold(acc);
    for (; j < V; j++) {
        e[j] = vexpf(e[j] - zmax);
        s += e[j];
    }
    return s;
}

/* How many of z[0..y-1] equal zmax: the argmax is the first maximum, so the
 * target is it when z[y] is the maximum and this is 0. */
static inline AI int count_max_before(const float *restrict z, int y, float zmax)
{
    int c = 0;
    for (int j = 0; j < y; j++) c += z[j] == zmax;
    return c;
}

static inline AI void row_load(float *restrict e, const void *restrict z, int V, const int bf)
{
    for (int j = 0; j < V; j++) e[j] = cpu_ld(z, (size_t)j, bf);
}

static inline AI void row_grad(void *restrict d, const float *restrict e, float scale, int V, const int bf)
{
    for (int j = 0; j < V; j++) cpu_st(d, (size_t)j, e[j] * scale, bf);
}

/* Each row is first copied into e as float: the passes over it (max, the
 * argmax test, exps) then run on float in L1 for both activation types
 * (on bf16 rows GCC otherwise vectorizes the exps at half width), and
 * dlogits may be logits: a row is read whole before its gradient is
 * written. */
static inline AI double token_xent_rows(void *dlogits, long *correct, const void *logits, const int32_t *tokens,
                                        int n, int T, int V, float grad_scale, float *restrict e, const int bf)
{
    double loss = 0.0;
    long ok = 0;
    for (int s = 0; s < n; s++)
        for (int t = 0; t < T; t++) {
            const size_t o = ((size_t)s * T + t) * (size_t)V;
            const int y = tokens[(size_t)s * (T + 1) + t + 1];
            row_load(e, cpu_at(logits, o, bf), V, bf);
            const float zmax = row_max(e, V), zy = e[y];
            ok += zy == zmax && count_max_before(e, y, zmax) == 0;
            const int last = s == n - 1 && t == T - 1, own_d = dlogits && dlogits != logits;
            const char *next = last ? NULL : cpu_at(logits, o + V, bf);
            const char *next_d = last || !own_d ? NULL : cpu_at(dlogits, o + V, bf);
            const float sum = row_exp(e, zmax, V, next, next_d, (size_t)V * (bf ? 2 : 4));
            loss += (double)logf(sum) - (double)(zy - zmax);
            if (dlogits) {
                void *d = cpu_at(dlogits, o, bf);
                row_grad(d, e, grad_scale / sum, V, bf);
                cpu_st(d, (size_t)y, (e[y] / sum - 1.0f) * grad_scale, bf);
            }
        }
    *correct = ok;
    return loss;
}

DT_MULTIVERSION double cpu_token_xent(void *dlogits, long *ncorrect, const void *logits, const int32_t *tokens,
                                      int n, int T, int V, float grad_scale, int bf)
{
    long ok = 0;
    double loss = 0.0;
    if (n > 0 && T > 0) {
        float *e = dt_xmalloc(sizeof(float) * (size_t)V);
        if (bf) loss = token_xent_rows(dlogits, &ok, logits, tokens, n, T, V, grad_scale, e, 1);
        else loss = token_xent_rows(dlogits, &ok, logits, tokens, n, T, V, grad_scale, e, 0);
        free(e);
    }
    if (ncorrect) *ncorrect = ok;
    return loss;
}
