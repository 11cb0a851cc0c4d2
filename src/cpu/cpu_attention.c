/* cpu_attention.c: causal scaled dot-product attention (backend.h's
 * attention_forward / attention_backward) on the CPU, flash-attention style.
 *
 * For each (sample, head) the head's q, k, v (and in backward dout, out)
 * are gathered once into contiguous float scratch (decoding bf16 there; q
 * pre-multiplied by log2(e)/sqrt(D), so scores are in base 2), k and v also
 * transposed into per-block [D][B] panels; meanwhile the next head's rows
 * are prefetched. Queries and keys are taken in blocks of B = 64: a block
 * pair's scores are one small product S = Q_i K_j^T, the softmax runs
 * online over the key blocks (running max and sum per query, the output
 * rows rescaled as the max grows), and blocks above the diagonal are never
 * touched, so no T x T matrix exists. Backward recomputes P = exp(S - lse)
 * block by block (FlashAttention-2's order: key blocks outer, dK_j and
 * dV_j accumulated over the query blocks below them, dQ for the whole head
 * in scratch) with Di = rowsum(dO * O) and dS = P * (dP - Di). All
 * arithmetic is float32 for both activation types, except that under bf16
 * activations on a CPU with AVX512-BF16 the AVX-512 set's products take
 * bf16 operands (cpu_attention_bf16.c, "bf16 products" below), as
 * dtrain's other products do.
 *
 * The one design decision: every product is one primitive, C [M][N] (+)=
 * A . B with A read through arbitrary row/column strides (so P^T and dS^T
 * need no transposes) and B row-major, driven in 6-row tiles that, on a
 * diagonal block, skip the columns or the inner terms the causal mask
 * zeroes. The primitive, the element-wise block passes (online softmax; P
 * and dS) and the panel transpose have a plain C version, the reference
 * that runs anywhere, an AVX-512 version (6 x 64 accumulators in
 * registers, a polynomial 2^x, 16 x 16 register transposes; the pieces it
 * shares with the bf16 products in cpu_attention_avx512.h) and an AVX2 +
 * FMA version (cpu_attention_avx2.c: 6 x 16 accumulators, strips of 16
 * columns; cpu_attention_kernels.h is the sets' interface); kernels() picks
 * the widest the CPU has, unless DTRAIN_NO_FAST_KERNELS says otherwise;
 * tests/check_attention.c checks each against a double reference. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attention_kernels.h"
#include "cpu/cpu_internal.h"

/* ---- the reference kernels: plain C ----------------------------------- */

DT_MULTIVERSION static void mm_tile_c(int R, int n, int K, const float *a, ptrdiff_t sam, ptrdiff_t sak,
                                      const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc,
                                      const float *rs)
{
    for (int r = 0; r < R; r++) {
        float *restrict cr = c + r * ldc;
        if (!acc) memset(cr, 0, sizeof(float) * (size_t)n);
        else if (rs)
            for (int j = 0; j < n; j++) cr[j] *= rs[r];
        for (int k = 0; k < K; k++) {
            const float av = a[r * sam + k * sak];
            const float *restrict bk = b + k * ldb;
            for (int j = 0; j < n; j++) cr[j] += av * bk[j];
        }
    }
}

static void softmax_c(float *s, int m, int kn, int diag, float *mx, float *sum, float *alpha)
{
    for (int r = 0; r < m; r++) {
        float *sr = s + (size_t)r * B;
        int nv = valid_keys(r, kn, diag);
        float mnew = mx[r];
        for (int c = 0; c < nv; c++) mnew = fmaxf(mnew, sr[c]);
        float t = 0.0f;
        for (int c = 0; c < nv; c++) {
            sr[c] = exp2f(sr[c] - mnew);
            t += sr[c];
        }
        for (int c = nv; c < kn; c++) sr[c] = 0.0f;
        alpha[r] = exp2f(mx[r] - mnew); /* 0 on the first block: mx = -inf */
        sum[r] = sum[r] * alpha[r] + t;
        mx[r] = mnew;
    }
}

static void probs_c(float *s, int m, int kn, int diag, const float *lse)
{
    for (int r = 0; r < m; r++) {
        float *sr = s + (size_t)r * B;
        int nv = valid_keys(r, kn, diag);
        const float l2 = lse[r] * LOG2E;
        for (int c = 0; c < nv; c++) sr[c] = exp2f(sr[c] - l2);
        for (int c = nv; c < kn; c++) sr[c] = 0.0f;
    }
}

static void dsoft_c(float *dp, const float *p, int m, int kn, int diag, const float *di)
{
    for (int r = 0; r < m; r++) {
        float *dr = dp + (size_t)r * B;
        const float *pr = p + (size_t)r * B;
        int nv = valid_keys(r, kn, diag);
        for (int c = 0; c < nv; c++) dr[c] = pr[c] * (dr[c] - di[r]);
        for (int c = nv; c < kn; c++) dr[c] = 0.0f;
    }
}


DT_MULTIVERSION static void panels_c(float *restrict pan, const float *restrict rows, int T, int D)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) pan[panel_at(t, d, D)] = rows[(size_t)t * D + d];
}

static const struct att_kernels kernels_c = {mm_tile_c, softmax_c, probs_c, dsoft_c, panels_c};

/* ---- the AVX-512 kernels ---------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_FAST 1
#include "cpu/cpu_attention_avx512.h"

/* One tile, R rows and NV vectors of columns (constants after inlining, so
 * the accumulators live in registers); `last` masks the last vector. */
FAST static INLINE void mm_tile_t(const int R, const int NV, int K, const float *a, ptrdiff_t sam,
                                  ptrdiff_t sak, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                                  const int MASKED, __mmask16 last, int acc, const float *rs)
{
    __m512 s[RT][4];
    tile_load(s, R, NV, c, ldc, MASKED, last, acc, rs);
    for (int k = 0; k < K; k++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(a[r * sam]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
        }
        a += sak;
        b += ldb;
    }
    tile_store(s, R, NV, c, ldc, MASKED, last);
}

/* Instances for R, NV and whether the last vector is partial (a mask
 * register read in the inner loop costs an FMA port's slot). */
FAST static void mm_tile_fast(int R, int n, int K, const float *a, ptrdiff_t sam, ptrdiff_t sak, const float *b,
                              ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    const int NV = (n + 15) / 16, masked = n % 16 != 0;
    const __mmask16 last = lanes(n - 16 * (NV - 1));
    switch ((R * 4 + NV - 1) * 2 + masked) {
        TILE_SWITCH(mm_tile_t, K, a, sam, sak, b, ldb, c, ldc)
    default:
        mm_tile_c(R, n, K, a, sam, sak, b, ldb, c, ldc, acc, rs);
    }
}

/* 2^x, 16 lanes: x = n + f, |f| <= 1/2, 2^f by Cephes' exp2f polynomial
 * (relative error ~2e-7), times 2^n by scalef. x is clamped at -200, where
 * the result (and that of -inf, the causal mask) is exactly 0; a NaN stays
 * NaN (max_ps returns its second operand when one is NaN). */
FAST static INLINE __m512 exp2_16(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 y = _mm512_set1_ps(1.535336188319500e-4f);
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.339887440266574e-3f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(9.618437357674640e-3f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(5.550332471162809e-2f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.402264791363012e-1f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(6.931472028550421e-1f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* The element-wise passes row by row; `full` (a whole block below the
 * diagonal) makes every mask constant, so the common case computes none. */
#define ROW_MASK(v, cnt) (full ? (__mmask16)0xffff : lanes_upto(v, cnt))

FAST static INLINE void softmax_row(float *sr, int nv, int kn, const int full, float *mx, float *rowsum)
{
    const int NV = full ? B / 16 : (kn + 15) / 16;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 x[4], vmax = _mm512_set1_ps(*mx);
    for (int v = 0; v < NV; v++) {
        x[v] = _mm512_mask_loadu_ps(ninf, ROW_MASK(v, nv), sr + 16 * v);
        vmax = _mm512_max_ps(vmax, x[v]);
    }
    const float mnew = _mm512_reduce_max_ps(vmax);
    __m512 vm = _mm512_set1_ps(mnew), vs = _mm512_setzero_ps();
    for (int v = 0; v < NV; v++) {
        __m512 p = exp2_16(_mm512_sub_ps(x[v], vm));
        vs = _mm512_add_ps(vs, p);
        _mm512_mask_storeu_ps(sr + 16 * v, ROW_MASK(v, kn), p);
    }
    *rowsum = _mm512_reduce_add_ps(vs);
    *mx = mnew;
}

FAST static void softmax_fast(float *s, int m, int kn, int diag, float *mx, float *sum, float *alpha)
{
    float rowsum[B];
    memcpy(alpha, mx, sizeof(float) * (size_t)m); /* the old maxima, until below */
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) softmax_row(s + (size_t)r * B, kn, kn, 1, mx + r, rowsum + r);
    else
        for (int r = 0; r < m; r++) softmax_row(s + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, mx + r, rowsum + r);
    /* 16 rows at a time: alpha = 2^(old - new) (0 on the first block, old = -inf) */
    for (int r = 0; r < m; r += 16) {
        const __mmask16 k = lanes_upto(0, m - r);
        __m512 a = exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, alpha + r), _mm512_maskz_loadu_ps(k, mx + r)));
        _mm512_mask_storeu_ps(alpha + r, k, a);
        _mm512_mask_storeu_ps(sum + r, k,
                              _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, sum + r), a, _mm512_maskz_loadu_ps(k, rowsum + r)));
    }
}

FAST static INLINE void probs_row(float *sr, int nv, int kn, const int full, float lse)
{
    const int NV = full ? B / 16 : (kn + 15) / 16;
    const __m512 ninf = _mm512_set1_ps(-INFINITY), l = _mm512_set1_ps(lse * LOG2E);
    for (int v = 0; v < NV; v++) {
        __m512 x = _mm512_mask_loadu_ps(ninf, ROW_MASK(v, nv), sr + 16 * v);
        _mm512_mask_storeu_ps(sr + 16 * v, ROW_MASK(v, kn), exp2_16(_mm512_sub_ps(x, l)));
    }
}

FAST static void probs_fast(float *s, int m, int kn, int diag, const float *lse)
{
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) probs_row(s + (size_t)r * B, kn, kn, 1, lse[r]);
    else
        for (int r = 0; r < m; r++) probs_row(s + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, lse[r]);
}

/* Masked lanes: P is 0 there and dp was never written (trimmed), so both
 * are read as 0. */
FAST static INLINE void dsoft_row(float *dr, const float *pr, int nv, int kn, const int full, float di)
{
    const int NV = full ? B / 16 : (kn + 15) / 16;
    const __m512 d = _mm512_set1_ps(di);
    for (int v = 0; v < NV; v++) {
        const __mmask16 k = ROW_MASK(v, nv);
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, pr + 16 * v),
                                 _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dr + 16 * v), d));
        _mm512_mask_storeu_ps(dr + 16 * v, ROW_MASK(v, kn), _mm512_maskz_mov_ps(k, g));
    }
}

FAST static void dsoft_fast(float *dp, const float *p, int m, int kn, int diag, const float *di)
{
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) dsoft_row(dp + (size_t)r * B, p + (size_t)r * B, kn, kn, 1, di[r]);
    else
        for (int r = 0; r < m; r++)
            dsoft_row(dp + (size_t)r * B, p + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, di[r]);
}
#undef ROW_MASK

/* 16 x 16 tiles by transpose16, the ragged edges (T or D not a multiple of
 * 16) element by element. */
FAST static void panels_fast(float *pan, const float *rows, int T, int D)
{
    const int D16 = D / 16 * 16;
    for (int t0 = 0; t0 < T; t0 += 16) {
        if (t0 + 16 <= T)
            for (int d0 = 0; d0 < D16; d0 += 16)
                transpose16(pan + panel_at(t0, d0, D), B, rows + (size_t)t0 * D + d0, D);
        for (int t = t0; t < imin(t0 + 16, T); t++)
            for (int d = t0 + 16 <= T ? D16 : 0; d < D; d++) pan[panel_at(t, d, D)] = rows[(size_t)t * D + d];
    }
}

static const struct att_kernels kernels_fast = {mm_tile_fast, softmax_fast, probs_fast, dsoft_fast, panels_fast};
/* The AVX2 set's panel transpose is plain C: a head's two panels cost
 * about 1% of its products. */
static const struct att_kernels kernels_avx2 = {cpu_att_mm_tile_avx2, cpu_att_softmax_avx2, cpu_att_probs_avx2,
                                                cpu_att_dsoft_avx2, panels_c};

#endif

/* The AVX-512 kernels where the CPU has them, else the AVX2 ones where it
 * has AVX2 and FMA, else plain C. DTRAIN_NO_FAST_KERNELS (read on every
 * call, so a test can run every set in one process): 1 runs plain C,
 * "avx512" skips only the AVX-512 set. */
static const struct att_kernels *kernels(void)
{
#ifdef HAVE_FAST
    const int fast = cpu_fast_kernels();
    if (fast == CPU_FAST_ALL && __builtin_cpu_supports("avx512f")) return &kernels_fast;
    if (fast != CPU_FAST_NONE && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kernels_avx2;
#endif
    return &kernels_c;
}

/* ---- prefetching ------------------------------------------------------ */

/* A head's rows are a page apart, which the hardware prefetcher does not
 * follow: unfetched, the gathers and scatters waited on memory for a fifth
 * of the time. So while a head computes, the next head's inputs and this
 * head's outputs are fetched toward L2, a few lines after each tile of
 * products (bursts of them stalled the core on its line fill buffers). */
enum { PF_STREAMS = 8 };
struct prefetch {
    const char *base[PF_STREAMS]; /* each stream's first row, rounded down to its line */
    size_t ld[PF_STREAMS];        /* bytes between its rows */
    int lines[PF_STREAMS];        /* lines per row */
    int write[PF_STREAMS];
    int nstreams, rows;           /* every stream: rows rows */
    long total, per_step;         /* lines in all, and per tile of products */
    int s, r, l;                  /* the next line: stream, row, line */
};

static void pf_init(struct prefetch *pf, int rows)
{
    memset(pf, 0, sizeof *pf);
    pf->rows = rows;
}

/* A stream of pf->rows rows of rowbytes, ld bytes apart from p (NULL: none). */
static void pf_add(struct prefetch *pf, const void *p, size_t ld, size_t rowbytes, int write)
{
    if (!p || pf->nstreams == PF_STREAMS) return;
    const size_t mis = (uintptr_t)p % 64;
    const int i = pf->nstreams++;
    pf->base[i] = (const char *)p - mis;
    pf->ld[i] = ld;
    /* rows all start at the same offset in their line, or anywhere */
    pf->lines[i] = ld % 64 == 0 ? (int)((mis + rowbytes + 63) / 64) : (int)(rowbytes / 64) + 2;
    pf->write[i] = write;
    pf->total += (long)pf->lines[i] * pf->rows;
}

/* Spread the lines over about `tiles` calls of pf_step (one per row tile of a product). */
static void pf_pace(struct prefetch *pf, long tiles) { pf->per_step = pf->total / (tiles > 0 ? tiles : 1) + 1; }

static void pf_lines(struct prefetch *pf, long count)
{
    for (long i = 0; i < count && pf->s < pf->nstreams; i++) {
        const char *at = pf->base[pf->s] + (size_t)pf->r * pf->ld[pf->s] + 64 * (size_t)pf->l;
        if (pf->write[pf->s]) __builtin_prefetch(at, 1, 2);
        else __builtin_prefetch(at, 0, 2);
        if (++pf->l == pf->lines[pf->s]) {
            pf->l = 0;
            if (++pf->r == pf->rows) pf->r = 0, pf->s++;
        }
    }
}

static inline void pf_step(struct prefetch *pf)
{
    if (pf) pf_lines(pf, pf->per_step);
}

/* Whatever the pacing left. */
static void pf_finish(struct prefetch *pf) { pf_lines(pf, pf->total); }

/* C [M][N] (+)= A . B in RT-row tiles, trimmed on a diagonal block. */
static void mm(const struct att_kernels *kk, struct prefetch *pf, enum trim trim, int M, int N, int K,
               const float *a, ptrdiff_t sam, ptrdiff_t sak, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
               int acc, const float *rs)
{
    for (int r0 = 0; r0 < M; r0 += RT) {
        int R = imin(RT, M - r0), n = N, k0 = 0, k1 = K;
        if (trim == N_UPTO) n = imin(N, r0 + R);
        if (trim == K_UPTO) k1 = imin(K, r0 + R);
        if (trim == K_FROM) k0 = r0;
        for (int c0 = 0; c0 < n; c0 += NC)
            kk->mm(R, imin(NC, n - c0), k1 - k0, a + r0 * sam + k0 * sak, sam, sak, b + k0 * ldb + c0, ldb,
                   c + r0 * ldc + c0, ldc, acc, rs ? rs + r0 : NULL);
        pf_step(pf);
    }
}

/* ---- bf16 products (cpu_attention_bf16.c, cpu_attention_amx.c) ------- */

/* Whether mmb runs on AMX tiles (cpu_attention_amx.c), set for the span of
 * one forward or backward call (between amx_begin and amx_end). */
static int amx_tiles;

static void amx_start(int on)
{
    amx_tiles = on;
    if (amx_tiles) cpu_att_amx_begin();
}

static void amx_stop(void)
{
    if (amx_tiles) cpu_att_amx_end();
    amx_tiles = 0;
}

/* C [M][N] (+)= A . B with bf16 operands in RT-row tiles, trimmed on a
 * diagonal block as mm() does; the inner range in whole pairs (an extra
 * term is a zero of the mask or of the padding). lda: bf16 elements; ldb:
 * pairs per pair-row; b at pair-row 0. */
static void mmb(struct prefetch *pf, enum trim trim, int M, int N, int K, const uint16_t *a, ptrdiff_t lda,
                const uint16_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    if (amx_tiles && cpu_att_mmb_amx(trim, M, N, K, a, lda, b, ldb, c, ldc, acc, rs)) {
        if (pf) pf_lines(pf, pf->per_step * ((M + RT - 1) / RT));
        return;
    }
    for (int r0 = 0; r0 < M; r0 += RT) {
        int R = imin(RT, M - r0), n = N, k0 = 0, k1 = K;
        if (trim == N_UPTO) n = imin(N, r0 + R);
        if (trim == K_UPTO) k1 = imin(K, r0 + R);
        if (trim == K_FROM) k0 = r0; /* even: RT is */
        k1 = (k1 + 1) & ~1;
        for (int c0 = 0; c0 < n; c0 += NC)
            cpu_att_mmb_tile(R, imin(NC, n - c0), (k1 - k0) / 2, a + r0 * lda + k0, lda, b + (k0 / 2) * 2 * ldb + 2 * c0,
                     ldb, c + r0 * ldc + c0, ldc, acc, rs ? rs + r0 : NULL);
        pf_step(pf);
    }
}


/* ---- scratch: one buffer, grown as needed (one calling thread) -------- */

static float *scratch_buf;
static size_t scratch_cap;

/* n floats, carved into 64-byte aligned pieces by take(). */
static float *scratch(size_t n)
{
    if (n > scratch_cap) {
        void *p = NULL;
        free(scratch_buf);
        if (posix_memalign(&p, 64, sizeof(float) * n) != 0)
            dt_die(__FILE__, __LINE__, "out of memory for %zu floats of attention scratch", n);
        scratch_buf = p;
        scratch_cap = n;
    }
    return scratch_buf;
}

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static float *take(float **p, size_t n)
{
    float *r = *p;
    *p += round16(n);
    return r;
}

/* n bf16 elements of the same scratch */
static uint16_t *take16(float **p, size_t n) { return (uint16_t *)(void *)take(p, (n + 1) / 2); }

/* What a call's products run on (bench/peak's names). Float FMAs unless
 * bf16 activations meet the AVX-512 set on a CPU with AVX512-BF16; then
 * AMX tiles where usable, else vdpbf16ps where it is the faster unit: on
 * AMD's Zen 4 it runs at twice the FMA rate (bench/peak 210-234 against
 * 112-117 GFLOP/s), on Intel's cores at half (Sapphire Rapids 123 against
 * 246, Emerald Rapids 85 against 172), where the float products win.
 * DTRAIN_ATTENTION_UNIT (read on every call, for tests and comparisons)
 * asks for fp32_fma or bf16_dot outright, or amx_bf16 where usable (else
 * bf16_dot). */
enum unit { UNIT_FP32, UNIT_BF16_DOT, UNIT_AMX };

static enum unit product_unit(const struct att_kernels *kk, int bf)
{
    const char *want = getenv("DTRAIN_ATTENTION_UNIT");
    if (want && *want && strcmp(want, "fp32_fma") && strcmp(want, "bf16_dot") && strcmp(want, "amx_bf16"))
        dt_die(__FILE__, __LINE__, "DTRAIN_ATTENTION_UNIT: expected fp32_fma, bf16_dot or amx_bf16, found '%s'",
               want);
#ifdef HAVE_FAST
    if (!bf || kk != &kernels_fast || !__builtin_cpu_supports("avx512bf16")) return UNIT_FP32;
    if (want && !strcmp(want, "fp32_fma")) return UNIT_FP32;
    if (want && !strcmp(want, "bf16_dot")) return UNIT_BF16_DOT;
    if (cpu_att_amx_usable()) return UNIT_AMX;
    return want && *want ? UNIT_BF16_DOT : __builtin_cpu_is("amd") ? UNIT_BF16_DOT : UNIT_FP32;
#else
    (void)kk;
    (void)bf;
    return UNIT_FP32;
#endif
}

const char *cpu_att_unit(int bf)
{
    static const char *const name[] = {"fp32_fma", "bf16_dot", "amx_bf16"};
    return name[product_unit(kernels(), bf)];
}

/* ---- one head in and out ---------------------------------------------- */

/* rows [T][D] = src[t*ld + 0:D] * mul */
static INLINE void gather_t(float *restrict rows, const void *src, size_t ld, int T, int D, float mul, const int bf)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) rows[(size_t)t * D + d] = cpu_ld(src, (size_t)t * ld + (size_t)d, bf) * mul;
}

DT_MULTIVERSION static void gather(float *rows, const void *src, size_t ld, int T, int D, float mul, int bf)
{
    if (bf) gather_t(rows, src, ld, T, D, mul, 1);
    else gather_t(rows, src, ld, T, D, mul, 0);
}

/* dst[t*ld + 0:D] = rows [T][D] * mul */
static INLINE void scatter_t(void *dst, size_t ld, const float *restrict rows, int T, int D, float mul, const int bf)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) cpu_st(dst, (size_t)t * ld + (size_t)d, rows[(size_t)t * D + d] * mul, bf);
}

DT_MULTIVERSION static void scatter(void *dst, size_t ld, const float *rows, int T, int D, float mul, int bf)
{
    if (bf) scatter_t(dst, ld, rows, T, D, mul, 1);
    else scatter_t(dst, ld, rows, T, D, mul, 0);
}

/* di[t] = a[t] . b[t] over rows [T][D], in 16 partial sums per row so the
 * compiler can vectorize it (one float sum would be one long dependency
 * chain: it cost as much as a GEMM). */
DT_MULTIVERSION static void rowdot(float *restrict di, const float *restrict a, const float *restrict b, int T,
                                   int D)
{
    for (int t = 0; t < T; t++) {
        const float *x = a + (size_t)t * D, *y = b + (size_t)t * D;
        float part[16] = {0};
        int d = 0;
        for (; d + 16 <= D; d += 16)
            for (int l = 0; l < 16; l++) part[l] += x[d + l] * y[d + l];
        for (; d < D; d++) part[0] += x[d] * y[d];
        float s = 0.0f;
        for (int l = 0; l < 16; l++) s += part[l];
        di[t] = s;
    }
}

static void check_shape(int T, int C, int H)
{
    if (H <= 0 || C % H != 0 || T < 0)
        dt_die(__FILE__, __LINE__, "attention: %d channels do not split into %d heads (T = %d)", C, H, T);
}

/* The head after (b, h) in the loops below: its sample and head, or b = n. */
static void next_head(int *b, int *h, int H)
{
    if (++*h == H) *h = 0, ++*b;
}

/* ---- forward ---------------------------------------------------------- */

void cpu_attention_forward(void *out, float *lse, const void *qkv, int n, int T, int C, int H, int bf)
{
    check_shape(T, C, H);
    if (n <= 0 || T == 0) return;
    const struct att_kernels *kk = kernels();
    const int D = C / H, nb = (T + B - 1) / B;
    const size_t ld = 3 * (size_t)C, TD = round16((size_t)nb * B * D);
    const float scale = 1.0f / sqrtf((float)D), qmul = scale * LOG2E;
    const enum unit unit = product_unit(kk, bf);
    const int bfp = unit != UNIT_FP32, Dp = (D + 1) & ~1;
    const size_t TDb = (size_t)nb * B * Dp; /* bf16 elements of a head's packed operand */
    float *p = scratch(4 * TD + round16((size_t)B * B) + round16((size_t)B * D) + 3 * round16(B) +
                       (bfp ? 4 * round16(TDb / 2 + 1) + round16((size_t)B * B / 2) : 0));
    /* a head's q (scaled), k, v [T][D]; its k^T panels [nb][D][B] */
    float *q = take(&p, TD), *k = take(&p, TD), *kt = take(&p, TD), *v = take(&p, TD);
    float *s = take(&p, (size_t)B * B), *o = take(&p, (size_t)B * D), *mx = take(&p, B), *sum = take(&p, B),
          *alpha = take(&p, B);
    /* bf16 products: q [T][Dp], k's panels [nb][Dp/2][B] of pairs (made from
     * kb [T][Dp]), v paired along t, a block's P [B][B] */
    uint16_t *qb = NULL, *kb = NULL, *ktp = NULL, *vp = NULL, *pb = NULL;
    if (bfp) {
        qb = take16(&p, TDb), kb = take16(&p, TDb), ktp = take16(&p, TDb), vp = take16(&p, TDb);
        pb = take16(&p, (size_t)B * B);
    }

    amx_start(unit == UNIT_AMX);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++) {
            const void *in = cpu_at(qkv, (size_t)b * T * ld + (size_t)h * D, bf);
            void *oh = cpu_at(out, (size_t)b * T * C + (size_t)h * D, bf);
            int nbx = b, nhx = h;
            next_head(&nbx, &nhx, H);
            const void *next = nbx < n ? cpu_at(qkv, (size_t)nbx * T * ld + (size_t)nhx * D, bf) : NULL;
            gather(q, in, ld, T, D, qmul, bf);
            gather(k, cpu_at(in, (size_t)C, bf), ld, T, D, 1.0f, bf);
            gather(v, cpu_at(in, 2 * (size_t)C, bf), ld, T, D, 1.0f, bf);
            if (bfp) cpu_att_pack_forward(qb, kb, ktp, vp, q, k, v, T, D, Dp);
            else kk->panels(kt, k, T, D);
            float *lrow = lse + ((size_t)b * H + h) * T;
            struct prefetch pf;
            const size_t esz = bf ? 2 : 4, rowbytes = (size_t)D * esz;
            pf_init(&pf, T);
            pf_add(&pf, oh, (size_t)C * esz, rowbytes, 1);
            for (int part = 0; part < 3 && next; part++)
                pf_add(&pf, cpu_at(next, (size_t)part * C, bf), ld * esz, rowbytes, 0);
            pf_pace(&pf, (long)nb * (nb + 1) / 2 * 2 * ((B + RT - 1) / RT)); /* 2 products a block pair */
            for (int i0 = 0; i0 < T; i0 += B) {
                const int m = imin(B, T - i0);
                for (int r = 0; r < m; r++) mx[r] = -INFINITY, sum[r] = 0.0f;
                for (int j0 = 0; j0 <= i0; j0 += B) {
                    const int diag = j0 == i0, kn = diag ? m : B;
                    if (bfp)
                        mmb(&pf, diag ? N_UPTO : FULL, m, kn, Dp, qb + (size_t)i0 * Dp, Dp, ktp + (size_t)j0 * Dp, B,
                            s, B, 0, NULL);
                    else
                        mm(kk, &pf, diag ? N_UPTO : FULL, m, kn, D, q + (size_t)i0 * D, D, 1, kt + (size_t)j0 * D,
                           B, s, B, 0, NULL);
                    kk->softmax(s, m, kn, diag, mx, sum, alpha);
                    if (bfp) {
                        cpu_att_block_bf16(pb, s, m, kn);
                        mmb(&pf, diag ? K_UPTO : FULL, m, D, kn, pb, B, vp + (size_t)j0 * D, D, o, D, j0 > 0, alpha);
                    } else
                        mm(kk, &pf, diag ? K_UPTO : FULL, m, D, kn, s, B, 1, v + (size_t)j0 * D, D, o, D, j0 > 0,
                           alpha);
                }
                for (int r = 0; r < m; r++) {
                    float inv = 1.0f / sum[r];
                    for (int d = 0; d < D; d++) o[(size_t)r * D + d] *= inv;
                    lrow[i0 + r] = (mx[r] + log2f(sum[r])) * LN2;
                }
                scatter(cpu_at(oh, (size_t)i0 * C, bf), (size_t)C, o, m, D, 1.0f, bf);
            }
            pf_finish(&pf);
        }
    amx_stop();
}

/* ---- backward --------------------------------------------------------- */

/* One block pair of backward with bf16 products, in the float loop's order. */
static void backward_block_bf16(struct prefetch *pf, int m, int kn, int diag, int i0, int j0, int D, int Dp,
                                const uint16_t *qb, const uint16_t *qp, const uint16_t *ktp, const uint16_t *kp,
                                const uint16_t *vtp, const uint16_t *dob, const uint16_t *dop, float *s, float *dp,
                                uint16_t *ptb, uint16_t *dsb, uint16_t *dstb, float *tmp, const float *lrow,
                                const float *di, float *dq, float *dkj, float *dvj, const struct att_kernels *kk)
{
    /* P = 2^(Q_i K_j^T - lse log2(e)); dV_j += P^T dO_i */
    mmb(pf, diag ? N_UPTO : FULL, m, kn, Dp, qb + (size_t)i0 * Dp, Dp, ktp + (size_t)j0 * Dp, B, s, B, 0, NULL);
    kk->probs(s, m, kn, diag, lrow + i0);
    cpu_att_block_t_bf16(ptb, tmp, s, m, kn);
    mmb(pf, diag ? K_FROM : FULL, kn, D, m, ptb, B, dop + (size_t)i0 * D, D, dvj, D, !diag, NULL);
    /* dS = P * (dO_i V_j^T - Di); dQ_i += dS K_j; dK_j += dS^T Q_i */
    mmb(pf, diag ? N_UPTO : FULL, m, kn, Dp, dob + (size_t)i0 * Dp, Dp, vtp + (size_t)j0 * Dp, B, dp, B, 0, NULL);
    kk->dsoft(dp, s, m, kn, diag, di + i0);
    cpu_att_block_bf16(dsb, dp, m, kn);
    mmb(pf, diag ? K_UPTO : FULL, m, D, kn, dsb, B, kp + (size_t)j0 * D, D, dq + (size_t)i0 * D, D, j0 > 0, NULL);
    cpu_att_block_t_bf16(dstb, tmp, dp, m, kn);
    mmb(pf, diag ? K_FROM : FULL, kn, D, m, dstb, B, qp + (size_t)i0 * D, D, dkj, D, !diag, NULL);
}

void cpu_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                            int n, int T, int C, int H, int bf)
{
    check_shape(T, C, H);
    if (n <= 0 || T == 0) return;
    const struct att_kernels *kk = kernels();
    const int D = C / H, nb = (T + B - 1) / B;
    const size_t ld = 3 * (size_t)C, TD = round16((size_t)nb * B * D);
    const float scale = 1.0f / sqrtf((float)D), qmul = scale * LOG2E;
    const enum unit unit = product_unit(kk, bf);
    const int bfp = unit != UNIT_FP32, Dp = (D + 1) & ~1;
    const size_t TDb = (size_t)nb * B * Dp; /* bf16 elements of a head's packed operand */
    float *p = scratch(8 * TD + 2 * round16((size_t)B * B) + round16((size_t)nb * B) +
                       (bfp ? 8 * round16(TDb / 2 + 1) + 4 * round16((size_t)B * B) : 0));
    /* a head's q (scaled), k, dout, dq, dk, dv [T][D]; k^T, v^T panels [nb][D][B] */
    float *q = take(&p, TD), *k = take(&p, TD), *kt = take(&p, TD), *vt = take(&p, TD);
    float *dO = take(&p, TD), *dq = take(&p, TD), *dk = take(&p, TD), *dv = take(&p, TD);
    float *s = take(&p, (size_t)B * B), *dp = take(&p, (size_t)B * B), *di = take(&p, (size_t)nb * B);
    /* bf16 products (pack_backward's forms), a block's P^T, dS, dS^T [B][B]
     * and a float block for the transposes */
    uint16_t *qb = NULL, *qp = NULL, *kb = NULL, *ktp = NULL, *kp = NULL, *vtp = NULL, *dob = NULL, *dop = NULL;
    uint16_t *ptb = NULL, *dsb = NULL, *dstb = NULL;
    float *tmp = NULL;
    if (bfp) {
        qb = take16(&p, TDb), qp = take16(&p, TDb), kb = take16(&p, TDb), ktp = take16(&p, TDb);
        kp = take16(&p, TDb), vtp = take16(&p, TDb), dob = take16(&p, TDb), dop = take16(&p, TDb);
        ptb = take16(&p, (size_t)B * B), dsb = take16(&p, (size_t)B * B), dstb = take16(&p, (size_t)B * B);
        tmp = take(&p, (size_t)B * B);
    }

    amx_start(unit == UNIT_AMX);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++) {
            const size_t off = (size_t)b * T * ld + (size_t)h * D, aoff = (size_t)b * T * C + (size_t)h * D;
            int nbx = b, nhx = h;
            next_head(&nbx, &nhx, H);
            const size_t noff = (size_t)nbx * T * ld + (size_t)nhx * D, naoff = (size_t)nbx * T * C + (size_t)nhx * D;
            /* v and out pass through dv and dq, which the first products overwrite */
            gather(q, cpu_at(qkv, off, bf), ld, T, D, qmul, bf);
            gather(k, cpu_at(qkv, off + (size_t)C, bf), ld, T, D, 1.0f, bf);
            gather(dv, cpu_at(qkv, off + 2 * (size_t)C, bf), ld, T, D, 1.0f, bf);
            gather(dO, cpu_at(dout, aoff, bf), (size_t)C, T, D, 1.0f, bf);
            if (bfp) cpu_att_pack_backward(qb, qp, kb, ktp, kp, vtp, dob, dop, q, k, dv, dO, T, D, Dp);
            else {
                kk->panels(kt, k, T, D);
                kk->panels(vt, dv, T, D);
            }
            gather(dq, cpu_at(out, aoff, bf), (size_t)C, T, D, 1.0f, bf);
            rowdot(di, dO, dq, T, D);
            const float *lrow = lse + ((size_t)b * H + h) * T;
            struct prefetch pf;
            const size_t esz = bf ? 2 : 4, rowbytes = (size_t)D * esz;
            pf_init(&pf, T);
            for (int part = 0; part < 3; part++) {
                pf_add(&pf, nbx < n ? cpu_at(qkv, noff + (size_t)part * C, bf) : NULL, ld * esz, rowbytes, 0);
                pf_add(&pf, cpu_at(dqkv, off + (size_t)part * C, bf), ld * esz, rowbytes, 1);
            }
            pf_add(&pf, nbx < n ? cpu_at(dout, naoff, bf) : NULL, (size_t)C * esz, rowbytes, 0);
            pf_add(&pf, nbx < n ? cpu_at(out, naoff, bf) : NULL, (size_t)C * esz, rowbytes, 0);
            pf_pace(&pf, (long)nb * (nb + 1) / 2 * 5 * ((B + RT - 1) / RT)); /* 5 products a block pair */
            for (int j0 = 0; j0 < T; j0 += B) {
                const int kn = imin(B, T - j0);
                float *dkj = dk + (size_t)j0 * D, *dvj = dv + (size_t)j0 * D;
                for (int i0 = j0; i0 < T; i0 += B) {
                    const int m = imin(B, T - i0), diag = i0 == j0;
                    const float *qi = q + (size_t)i0 * D, *doi = dO + (size_t)i0 * D;
                    /* P = 2^(Q_i K_j^T - lse log2(e)); dV_j += P^T dO_i */
                    if (bfp) {
                        backward_block_bf16(&pf, m, kn, diag, i0, j0, D, Dp, qb, qp, ktp, kp, vtp, dob, dop, s, dp,
                                            ptb, dsb, dstb, tmp, lrow, di, dq, dkj, dvj, kk);
                        continue;
                    }
                    mm(kk, &pf, diag ? N_UPTO : FULL, m, kn, D, qi, D, 1, kt + (size_t)j0 * D, B, s, B, 0, NULL);
                    kk->probs(s, m, kn, diag, lrow + i0);
                    mm(kk, &pf, diag ? K_FROM : FULL, kn, D, m, s, 1, B, doi, D, dvj, D, !diag, NULL);
                    /* dS = P * (dO_i V_j^T - Di); dQ_i += dS K_j; dK_j += dS^T Q_i */
                    mm(kk, &pf, diag ? N_UPTO : FULL, m, kn, D, doi, D, 1, vt + (size_t)j0 * D, B, dp, B, 0, NULL);
                    kk->dsoft(dp, s, m, kn, diag, di + i0);
                    mm(kk, &pf, diag ? K_UPTO : FULL, m, D, kn, dp, B, 1, k + (size_t)j0 * D, D, dq + (size_t)i0 * D,
                       D, j0 > 0, NULL);
                    mm(kk, &pf, diag ? K_FROM : FULL, kn, D, m, dp, 1, B, qi, D, dkj, D, !diag, NULL);
                }
            }
            pf_finish(&pf);
            scatter(cpu_at(dqkv, off, bf), ld, dq, T, D, scale, bf);
            scatter(cpu_at(dqkv, off + (size_t)C, bf), ld, dk, T, D, LN2, bf); /* q was scaled by log2(e) too */
            scatter(cpu_at(dqkv, off + 2 * (size_t)C, bf), ld, dv, T, D, 1.0f, bf);
        }
    amx_stop();
}
