/* cpu_attention_avx2.c: the AVX2 + FMA set of cpu_attention.c's block
 * kernels (cpu_attention_kernels.h), for CPUs without AVX-512 (AMD Zen 1-3,
 * Intel Haswell to Comet Lake, Alder Lake): the same tiles, passes and
 * polynomial as the AVX-512 set, on 8-float vectors. On a Zen 3 core they
 * run gpt-mini's attention about 7x faster than the plain C set.
 *
 * The one design decision: 16 vector registers of 8 floats, so a tile is
 * at most 6 rows x 2 vectors (12 accumulators, 2 of B and the broadcast of
 * A) and the primitive walks its up-to-64 columns in strips of 16; there
 * are no mask registers, so ragged edges use maskload/maskstore (which touch
 * no masked lane: Valgrind sees no read of an unwritten score) and 2^x
 * builds 2^n in the exponent bits. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cpu/cpu_attention_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define FAST2 __attribute__((target("avx2,fma")))

/* Lanes [0, n) of a vector, n <= 8, as maskload/maskstore want them. */
FAST2 static INLINE __m256i lanes8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

FAST2 static INLINE void mm2_tile_t(const int R, const int NV, int K, const float *a, ptrdiff_t sam, ptrdiff_t sak,
                                    const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, const int MASKED,
                                    __m256i last, int acc, const float *rs)
{
    __m256 s[RT][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        const __m256 scale = _mm256_set1_ps(rs ? rs[r] : 1.0f);
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            s[r][v] = !acc ? _mm256_setzero_ps()
                      : _mm256_mul_ps(scale, MASKED && v == NV - 1 ? _mm256_maskload_ps(c + r * ldc + 8 * v, last)
                                                                   : _mm256_loadu_ps(c + r * ldc + 8 * v));
    }
    for (int k = 0; k < K; k++) {
        __m256 bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? _mm256_maskload_ps(b + 8 * v, last) : _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_broadcast_ss(a + r * sam);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) s[r][v] = _mm256_fmadd_ps(av, bv[v], s[r][v]);
        }
        a += sak;
        b += ldb;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            if (MASKED && v == NV - 1) _mm256_maskstore_ps(c + r * ldc + 8 * v, last, s[r][v]);
            else _mm256_storeu_ps(c + r * ldc + 8 * v, s[r][v]);
        }
}

FAST2 void cpu_att_mm_tile_avx2(int R, int n, int K, const float *a, ptrdiff_t sam, ptrdiff_t sak, const float *b,
                               ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    for (int c0 = 0; c0 < n; c0 += 16) {
        const int w = imin(16, n - c0), NV = (w + 7) / 8, masked = w % 8 != 0;
        const __m256i last = lanes8(w - 8 * (NV - 1));
        const float *bs = b + c0;
        float *cs = c + c0;
#define TILE(r, v)                                                                                    \
    case ((r) * 2 + (v) - 1) * 2:                                                                     \
        mm2_tile_t(r, v, K, a, sam, sak, bs, ldb, cs, ldc, 0, last, acc, rs);                         \
        break;                                                                                        \
    case ((r) * 2 + (v) - 1) * 2 + 1:                                                                 \
        mm2_tile_t(r, v, K, a, sam, sak, bs, ldb, cs, ldc, 1, last, acc, rs);                         \
        break;
#define TILES(r) TILE(r, 1) TILE(r, 2)
        switch ((R * 2 + NV - 1) * 2 + masked) {
            TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6)
        default: /* not reached: R <= RT, w <= 16 */
            mm2_tile_t(R, NV, K, a, sam, sak, bs, ldb, cs, ldc, masked, last, acc, rs);
        }
#undef TILES
#undef TILE
    }
}

/* 2^x, 8 lanes: x = n + f, |f| <= 1/2, 2^f by the same polynomial as
 * exp2_16, 2^n put in the exponent bits. x is clamped to [-127, 127]; at
 * n = -127 the biased exponent is 0 and the result exactly 0 (so is that
 * of -inf, the causal mask); a NaN stays NaN (min/max return their second
 * operand when one is NaN). */
FAST2 static INLINE __m256 exp2_8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), x));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 y = _mm256_set1_ps(1.535336188319500e-4f);
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.339887440266574e-3f));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(9.618437357674640e-3f));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(5.550332471162809e-2f));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(2.402264791363012e-1f));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(6.931472028550421e-1f));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

FAST2 static INLINE float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

FAST2 static INLINE float hsum8(__m256 v)
{
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Vector v of a row, its lanes below cnt loaded and the others `fill`;
 * `full` (a whole block below the diagonal) loads every lane. */
FAST2 static INLINE __m256 load_upto(const float *row, int v, int cnt, const int full, __m256 fill)
{
    const int left = cnt - 8 * v;
    if (full || left >= 8) return _mm256_loadu_ps(row + 8 * v);
    if (left <= 0) return fill;
    const __m256i k = lanes8(left);
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(row + 8 * v, k), _mm256_castsi256_ps(k));
}

/* Lanes below cnt of vector v stored. */
FAST2 static INLINE void store_upto(float *row, int v, int cnt, const int full, __m256 x)
{
    const int left = cnt - 8 * v;
    if (full || left >= 8) _mm256_storeu_ps(row + 8 * v, x);
    else if (left > 0) _mm256_maskstore_ps(row + 8 * v, lanes8(left), x);
}

FAST2 static INLINE void softmax_row2(float *sr, int nv, int kn, const int full, float *mx, float *rowsum)
{
    const int NV = full ? B / 8 : (kn + 7) / 8;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 x[B / 8], vmax = _mm256_set1_ps(*mx);
    for (int v = 0; v < NV; v++) {
        x[v] = load_upto(sr, v, nv, full, ninf);
        vmax = _mm256_max_ps(vmax, x[v]);
    }
    const float mnew = hmax8(vmax);
    const __m256 vm = _mm256_set1_ps(mnew);
    __m256 vs = _mm256_setzero_ps();
    for (int v = 0; v < NV; v++) {
        const __m256 p = exp2_8(_mm256_sub_ps(x[v], vm));
        vs = _mm256_add_ps(vs, p);
        store_upto(sr, v, kn, full, p);
    }
    *rowsum = hsum8(vs);
    *mx = mnew;
}

FAST2 void cpu_att_softmax_avx2(float *s, int m, int kn, int diag, float *mx, float *sum, float *alpha)
{
    float rowsum[B];
    memcpy(alpha, mx, sizeof(float) * (size_t)m); /* the old maxima, until below */
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) softmax_row2(s + (size_t)r * B, kn, kn, 1, mx + r, rowsum + r);
    else
        for (int r = 0; r < m; r++) softmax_row2(s + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, mx + r, rowsum + r);
    /* 8 rows at a time: alpha = 2^(old - new) (0 on the first block, old = -inf) */
    const __m256 zero = _mm256_setzero_ps();
    for (int v = 0; 8 * v < m; v++) {
        const __m256 a = exp2_8(_mm256_sub_ps(load_upto(alpha, v, m, 0, zero), load_upto(mx, v, m, 0, zero)));
        store_upto(alpha, v, m, 0, a);
        store_upto(sum, v, m, 0, _mm256_fmadd_ps(load_upto(sum, v, m, 0, zero), a, load_upto(rowsum, v, m, 0, zero)));
    }
}

FAST2 static INLINE void probs_row2(float *sr, int nv, int kn, const int full, float lse)
{
    const int NV = full ? B / 8 : (kn + 7) / 8;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), l = _mm256_set1_ps(lse * LOG2E);
    for (int v = 0; v < NV; v++)
        store_upto(sr, v, kn, full, exp2_8(_mm256_sub_ps(load_upto(sr, v, nv, full, ninf), l)));
}

FAST2 void cpu_att_probs_avx2(float *s, int m, int kn, int diag, const float *lse)
{
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) probs_row2(s + (size_t)r * B, kn, kn, 1, lse[r]);
    else
        for (int r = 0; r < m; r++) probs_row2(s + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, lse[r]);
}

/* Masked lanes: P is 0 there and dp was never written (trimmed), so both
 * are read as 0. */
FAST2 static INLINE void dsoft_row2(float *dr, const float *pr, int nv, int kn, const int full, float di)
{
    const int NV = full ? B / 8 : (kn + 7) / 8;
    const __m256 d = _mm256_set1_ps(di), zero = _mm256_setzero_ps();
    for (int v = 0; v < NV; v++) {
        const __m256 g = _mm256_mul_ps(load_upto(pr, v, nv, full, zero),
                                       _mm256_sub_ps(load_upto(dr, v, nv, full, d), d));
        store_upto(dr, v, kn, full, g);
    }
}

FAST2 void cpu_att_dsoft_avx2(float *dp, const float *p, int m, int kn, int diag, const float *di)
{
    if (!diag && kn == B)
        for (int r = 0; r < m; r++) dsoft_row2(dp + (size_t)r * B, p + (size_t)r * B, kn, kn, 1, di[r]);
    else
        for (int r = 0; r < m; r++)
            dsoft_row2(dp + (size_t)r * B, p + (size_t)r * B, valid_keys(r, kn, diag), kn, 0, di[r]);
}
#endif
