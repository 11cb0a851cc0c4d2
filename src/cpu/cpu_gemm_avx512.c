/* cpu_gemm_avx512.c: float32 GEMM, C = op(A) op(B) (alpha 1, beta 0), on
 * AVX-512 without packing A: the products of the dense layers and the
 * transformer's linear layers, where OpenBLAS would run its level-3 driver.
 *
 * Why: OpenBLAS 0.3.21's level-3 path copies both operands into its panel
 * layout before every product. At the seed CNN's Dense(128) (batch 64,
 * 1600 inputs) its three products took 268, 268 and 284 us on a Zen 4 core
 * (97, 98, 92 GFLOP/s); these kernels, which read A where it lies and copy
 * only the transposed B of A B^T, 16 KB at a time, 224, 230 and 244 us.
 *
 * The one design decision: the same sums in the same order as the OpenBLAS
 * this program runs beside, so that no result moves by a bit. Each element
 * of C is one chain of fused multiply-adds over k, restarted at every chunk
 * of k as OpenBLAS's driver cuts it (GEMM_Q: 320 on its Cooperlake kernels,
 * 448 on SkylakeX; a remainder between Q and 2Q cut in half, rounded up to
 * 16 on one thread, not on more), and the chunks' sums are added to C in
 * order, from a zeroed C. Where the running OpenBLAS is neither of those
 * cores (it has no AVX-512 kernels, or a user named another with
 * OPENBLAS_CORETYPE), or the product is small enough for its small-matrix
 * or direct kernels (another order), OpenBLAS keeps it: cpu_gemm asks here
 * first and calls cblas_sgemm when this returns 0. DTRAIN_NO_FAST_KERNELS
 * set (to anything) leaves every product to OpenBLAS. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu/cpu_internal.h"

#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
int openblas_get_num_threads(void);
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline))

enum { TILE_R = 8, TILE_C = 32, PF_ROWS = 12 };

/* OpenBLAS's GEMM_Q for the core it runs, or 0 where these kernels do not
 * stand in for it. */
static int blas_q(void)
{
    static int q = -1;
    if (q < 0) {
        q = 0;
#ifdef HAVE_OPENBLAS_GET_CORENAME
        const char *core = openblas_get_corename();
        if (__builtin_cpu_supports("avx512f") && core) {
            if (!strcasecmp(core, "cooperlake")) q = 320;
            else if (!strcasecmp(core, "skylakex")) q = 448;
        }
#endif
    }
    return q;
}

static int blas_threads(void)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    return openblas_get_num_threads();
#else
    return 1;
#endif
}

/* The next chunk of k, `left` of it still to sum (OpenBLAS's level3.c and
 * level3_thread.c). */
static int chunk_of(int left, int q, int threaded)
{
    if (left >= 2 * q) return q;
    if (left <= q) return left;
    return threaded ? (left + 1) / 2 : (left / 2 + 15) / 16 * 16;
}

/* One tile of C, R rows by up to 32 columns (masks m0, m1), over kc values
 * of k: element (r, k) of op(A) at a[r * ars + k * aks], row k of op(B) at
 * b + k * ldb. C = acc + C, from +0 on the first chunk (as OpenBLAS adds
 * alpha times its sum to the C it zeroed). */
T512 INLINE void tile(const int R, const int acols, const int full, const int pf, int kc, const float *a, size_t lda, const float *b,
                      size_t ldb, float *c, size_t ldc, __mmask16 m0, __mmask16 m1, int first)
{
    __m512 acc[TILE_R][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * ldb;
        if (pf) {
            _mm_prefetch((const char *)(bk + PF_ROWS * ldb), _MM_HINT_T0);
            _mm_prefetch((const char *)(bk + PF_ROWS * ldb + 16), _MM_HINT_T0);
        }
        const __m512 b0 = full ? _mm512_loadu_ps(bk) : _mm512_maskz_loadu_ps(m0, bk);
        const __m512 b1 = full ? _mm512_loadu_ps(bk + 16) : _mm512_maskz_loadu_ps(m1, bk + 16);
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_set1_ps(acols ? a[(size_t)k * lda + r] : a[(size_t)r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *cr = c + (size_t)r * ldc;
        const __m512 c0 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, cr);
        const __m512 c1 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, cr + 16);
        _mm512_mask_storeu_ps(cr, m0, _mm512_add_ps(acc[r][0], c0));
        _mm512_mask_storeu_ps(cr + 16, m1, _mm512_add_ps(acc[r][1], c1));
    }
}

/* Every row of one column block: tiles of 8, one of 4, then one row at a time. */
T512 INLINE void rows(const int acols, const int full, int m, int kc, const float *a, size_t lda, const float *b, size_t ldb,
                      float *c, size_t ldc, __mmask16 m0, __mmask16 m1, int first)
{
    int i = 0;
    for (; i + TILE_R <= m; i += TILE_R) {
        const float *ai = acols ? a + i : a + (size_t)i * lda;
        if (i == 0) tile(TILE_R, acols, full, 1, kc, ai, lda, b, ldb, c, ldc, m0, m1, first);
        else tile(TILE_R, acols, full, 0, kc, ai, lda, b, ldb, c + (size_t)i * ldc, ldc, m0, m1, first);
    }
    if (i + 4 <= m) {
        tile(4, acols, full, 0, kc, acols ? a + i : a + (size_t)i * lda, lda, b, ldb, c + (size_t)i * ldc, ldc, m0, m1,
             first);
        i += 4;
    }
    for (; i < m; i++) {
        const float *ai = acols ? a + i : a + (size_t)i * lda;
        tile(1, acols, full, 0, kc, ai, lda, b, ldb, c + (size_t)i * ldc, ldc, m0, m1, first);
    }
}

/* In-register transpose of a 16x16 block: r[i] row i in, column i out. */
T512 INLINE void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* r[4i + q]: rows 4i..4i+3, element q of each 128-bit lane */
    for (int q = 0; q < 4; q++) {
        const __m512 a0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x44), a1 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xee);
        const __m512 b0 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x44);
        const __m512 b1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xee);
        t[q] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        t[4 + q] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
        t[8 + q] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        t[12 + q] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* pack[kk][0..31] = b[j][kk] for the nc <= 32 rows j of b and kc values
 * kk (b already offset to the chunk); columns past nc are zero. */
T512 static void pack_bt(float *restrict pack, const float *restrict b, size_t ldb, int nc, int kc)
{
    int k0 = 0;
    if (nc == TILE_C)
        for (; k0 + 16 <= kc; k0 += 16)
            for (int h = 0; h < 2; h++) {
                __m512 r[16];
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(b + (size_t)(16 * h + i) * ldb + k0);
                transpose16(r);
                for (int i = 0; i < 16; i++) _mm512_storeu_ps(pack + (size_t)(k0 + i) * TILE_C + 16 * h, r[i]);
            }
    for (int kk = k0; kk < kc; kk++)
        for (int j = 0; j < TILE_C; j++) pack[(size_t)kk * TILE_C + j] = j < nc ? b[(size_t)j * ldb + kk] : 0.0f;
}

static __mmask16 mask_of(int cols) { return cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1u); }

/* Column block jb (32 columns) of rows i0..i0+mc of C, over the chunk of k
 * from k0, kc long. */
T512 static void block(int transa, int transb, int i0, int mc, int n, int k0, int kc, const float *a, int lda,
                       const float *b, int ldb, float *c, int ldc, int jb, float *pack)
{
    const int j = jb * TILE_C, nc = n - j < TILE_C ? n - j : TILE_C;
    const __mmask16 m0 = mask_of(nc), m1 = mask_of(nc > 16 ? nc - 16 : 0);
    const float *ak = transa ? a + (size_t)k0 * lda + i0 : a + (size_t)i0 * lda + k0;
    const float *bk = b + (size_t)k0 * ldb + j;
    size_t bld = (size_t)ldb;
    if (transb) {
        pack_bt(pack, b + (size_t)j * ldb + k0, (size_t)ldb, nc, kc);
        bk = pack, bld = TILE_C;
    }
    float *cb = c + (size_t)i0 * ldc + j;
    const int first = k0 == 0;
    /* one copy of the loops for each layout of A, and for whole blocks */
    if (transa && nc == TILE_C) rows(1, 1, mc, kc, ak, (size_t)lda, bk, bld, cb, (size_t)ldc, m0, m1, first);
    else if (transa) rows(1, 0, mc, kc, ak, (size_t)lda, bk, bld, cb, (size_t)ldc, m0, m1, first);
    else if (nc == TILE_C) rows(0, 1, mc, kc, ak, (size_t)lda, bk, bld, cb, (size_t)ldc, m0, m1, first);
    else rows(0, 0, mc, kc, ak, (size_t)lda, bk, bld, cb, (size_t)ldc, m0, m1, first);
}

/* Panels of rows whose slice of A (rows x chunk) stays in a 256 KB share
 * of L2 while every column block passes over it; in each, the chunks of k
 * in order, and in each chunk the column blocks (shared among threads:
 * a block's thread is the same in every chunk, so its sums stay in order). */
T512 static void product(int transa, int transb, int m, int n, int k, const float *a, int lda, const float *b,
                         int ldb, float *c, int ldc, int q, int threaded)
{
    const int blocks = (n + TILE_C - 1) / TILE_C, panel = (256 * 1024 / (4 * q)) & ~(TILE_R - 1);
    _Alignas(64) float pack[448 * TILE_C];
    for (int i0 = 0; i0 < m; i0 += panel) {
        const int mc = m - i0 < panel ? m - i0 : panel;
        for (int k0 = 0; k0 < k;) {
            const int kc = chunk_of(k - k0, q, threaded);
#pragma omp for schedule(static) nowait
            for (int jb = 0; jb < blocks; jb++) block(transa, transb, i0, mc, n, k0, kc, a, lda, b, ldb, c, ldc, jb, pack);
            k0 += kc;
        }
    }
}

int cpu_gemm_avx512(int transa, int transb, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc)
{
    /* Below 28 * 512^2 multiply-adds OpenBLAS may run its direct or
     * small-matrix kernels instead of the level-3 driver. Where A is larger
     * than half an L2, OpenBLAS's packing pays for itself (2048 x 1152 x
     * 384, NN: 0.90 of its speed here; TN 0.95, NT 1.06). */
    if (m <= 0 || n <= 0 || k <= 0 || (transa && transb) || (double)m * n * k < 28.0 * 512 * 512 ||
        (double)m * k * sizeof(float) > 512.0 * 1024)
        return 0;
    if (cpu_fast_kernels() != CPU_FAST_ALL) return 0;
    const int q = blas_q();
    if (!q) return 0;
    const int nt = blas_threads();
    if (nt <= 1) product(transa, transb, m, n, k, a, lda, b, ldb, c, ldc, q, 0);
    else {
#pragma omp parallel num_threads(nt)
        product(transa, transb, m, n, k, a, lda, b, ldb, c, ldc, q, 1);
    }
    return 1;
}

#else /* no AVX-512 intrinsics in this build */

int cpu_gemm_avx512(int transa, int transb, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc)
{
    (void)transa, (void)transb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    return 0;
}

#endif
