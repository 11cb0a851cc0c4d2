/* cpu_attention_bf16.c: cpu_attention.c's block products on bf16 operands
 * (its "bf16 products"): the tile primitive on vdpbf16ps and the packing
 * of a head's operands and of a block's P and dS into the forms it reads.
 *
 * Under bf16 activations, on a CPU with AVX512-BF16, the products take
 * bf16 operands and accumulate in float, as the matrix products around
 * them do: vdpbf16ps multiplies pairs along k, so A is bf16 rows whose k
 * index is contiguous (one 32-bit word holds a[k], a[k + 1]) and B is
 * pair-interleaved (word j of pair-row kp holds b[2 kp][j], b[2 kp + 1][j]).
 * A head's q (scaled), k, v and dout are packed once in the forms their
 * products read; a block's P and dS are rounded to bf16 rows (or their
 * transposes) after the float pass that makes them. Half the instructions
 * of the float products, twice the work per instruction on this unit. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_attention_kernels.h"
#include "runtime/status.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include "cpu/cpu_attention_avx512.h"

#define FASTBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
typedef uint32_t u32a __attribute__((may_alias));

FASTBF static INLINE void mmb_tile_t(const int R, const int NV, int KP, const uint16_t *a, ptrdiff_t lda,
                                     const uint16_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, const int MASKED,
                                     __mmask16 last, int acc, const float *rs)
{
    __m512 s[RT][4];
    tile_load(s, R, NV, c, ldc, MASKED, last, acc, rs);
    for (int kp = 0; kp < KP; kp++) {
        __m512bh bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = (__m512bh)(MASKED && v == NV - 1 ? _mm512_maskz_loadu_epi32(last, b + 32 * v)
                                                     : _mm512_loadu_si512(b + 32 * v));
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)*(const u32a *)(a + r * lda));
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) s[r][v] = _mm512_dpbf16_ps(s[r][v], av, bv[v]);
        }
        a += 2;
        b += 2 * ldb;
    }
    tile_store(s, R, NV, c, ldc, MASKED, last);
}

/* c[r][0:n] (+)= sum over pairs kp < KP of a[r][2kp:2kp+2] . b[kp][0:n][0:2],
 * R <= RT, n <= NC; lda in bf16 elements, ldb in pairs per pair-row. */
FASTBF void cpu_att_mmb_tile(int R, int n, int KP, const uint16_t *a, ptrdiff_t lda, const uint16_t *b, ptrdiff_t ldb,
                            float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    const int NV = (n + 15) / 16, masked = n % 16 != 0;
    const __mmask16 last = lanes(n - 16 * (NV - 1));
    switch ((R * 4 + NV - 1) * 2 + masked) {
        TILE_SWITCH(mmb_tile_t, KP, a, lda, b, ldb, c, ldc)
    default:
        dt_die(__FILE__, __LINE__, "attention: a bf16 tile of %d x %d", R, n);
    }
}

/* dst [T][ldd] = bf16(src [T][D]), columns D..ldd-1 zero (ldd: D rounded up
 * to even, so a row is whole pairs). */
FASTBF static void rows_bf16(uint16_t *dst, ptrdiff_t ldd, const float *src, int T, int D)
{
    for (int t = 0; t < T; t++) {
        const float *x = src + (size_t)t * D;
        uint16_t *y = dst + (size_t)t * ldd;
        for (int d = 0; d < ldd; d += 16) {
            const __mmask16 k = lanes_upto(0, D - d), kd = lanes_upto(0, (int)ldd - d);
            _mm256_mask_storeu_epi16(y + d, kd, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, x + d)));
        }
    }
}

/* dst [ceil(T/2)][D][2] = the rows of src [T][D] paired along t (the last
 * pair's second row zero where T is odd): word (tp, d) holds rows 2 tp and
 * 2 tp + 1 of column d. */
FASTBF static void rows_pairs(uint16_t *dst, const float *src, int T, int D)
{
    /* lane i of the result takes 16-bit element i/2 of the first row's
     * half (i even) or of the second's (i odd, 16 + i/2) */
    static const uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(inter);
    for (int t = 0; t < T; t += 2) {
        const float *x0 = src + (size_t)t * D, *x1 = t + 1 < T ? x0 + D : NULL;
        uint16_t *y = dst + (size_t)t * D; /* pair-row t/2: 2 D elements */
        for (int d = 0; d < D; d += 16) {
            const __mmask16 k = lanes_upto(0, D - d);
            const __m512 a = _mm512_maskz_loadu_ps(k, x0 + d);
            const __m512 b = x1 ? _mm512_maskz_loadu_ps(k, x1 + d) : _mm512_setzero_ps();
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* a in the low half */
            _mm512_mask_storeu_epi32(y + 2 * d, k, _mm512_permutexvar_epi16(idx, both));
        }
    }
}

/* dst [m][B] = bf16(s [m][B]) over columns [0, kn rounded up to even),
 * column kn zero where kn is odd (s there is stale): a block's P or dS as
 * the A of a product over keys. */
FASTBF void cpu_att_block_bf16(uint16_t *dst, const float *s, int m, int kn)
{
    const int ke = (kn + 1) & ~1;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < ke; c += 16) {
            const __mmask16 k = lanes_upto(0, kn - c), ks = lanes_upto(0, ke - c);
            _mm256_mask_storeu_epi16(dst + (size_t)r * B + c, ks,
                                     (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, s + (size_t)r * B + c)));
        }
}

/* dst [kn][B] = bf16 of the transpose of s [m][B] (dst[c][r] = s[r][c]) over
 * r < m rounded up to even, column m zero where m is odd: P^T or dS^T as
 * the A of a product over queries. tmp: B x B floats. */
FASTBF void cpu_att_block_t_bf16(uint16_t *dst, float *tmp, const float *s, int m, int kn)
{
    if (m == B && kn == B) {
        for (int r0 = 0; r0 < B; r0 += 16)
            for (int c0 = 0; c0 < B; c0 += 16) transpose16(tmp + (size_t)c0 * B + r0, B, s + (size_t)r0 * B + c0, B);
    } else {
        for (int r = 0; r < m; r++)
            for (int c = 0; c < kn; c++) tmp[(size_t)c * B + r] = s[(size_t)r * B + c];
    }
    cpu_att_block_bf16(dst, tmp, kn, m);
}

/* panels_fast's transpose for 32-bit words (a bf16 pair each): rows [T][W]
 * into [T/B][W][B], moved, never computed on. */
FASTBF static void panels_u32(uint16_t *pan16, const uint16_t *rows16, int T, int W)
{
    u32a *pan = (u32a *)(void *)pan16;
    const u32a *rows = (const u32a *)(const void *)rows16;
    const int W16 = W / 16 * 16;
    for (int t0 = 0; t0 < T; t0 += 16) {
        if (t0 + 16 <= T)
            for (int w0 = 0; w0 < W16; w0 += 16)
                transpose16((float *)(void *)(pan + panel_at(t0, w0, W)), B,
                            (const float *)(const void *)(rows + (size_t)t0 * W + w0), W);
        for (int t = t0; t < imin(t0 + 16, T); t++)
            for (int w = t0 + 16 <= T ? W16 : 0; w < W; w++) pan[panel_at(t, w, W)] = rows[(size_t)t * W + w];
    }
}

/* A head's forward operands as the bf16 products read them: q [T][Dp], k^T
 * as panels of pairs along d (through kb [T][Dp]), v paired along t. */
void cpu_att_pack_forward(uint16_t *qb, uint16_t *kb, uint16_t *ktp, uint16_t *vp, const float *q, const float *k,
                         const float *v, int T, int D, int Dp)
{
    rows_bf16(qb, Dp, q, T, D);
    rows_bf16(kb, Dp, k, T, D);
    panels_u32(ktp, kb, T, Dp / 2);
    rows_pairs(vp, v, T, D);
}

/* Backward's: q as rows and paired along t, k as panels and paired along t,
 * v as panels, dout as rows and paired along t (kb: scratch [T][Dp]). */
void cpu_att_pack_backward(uint16_t *qb, uint16_t *qp, uint16_t *kb, uint16_t *ktp, uint16_t *kp, uint16_t *vtp,
                          uint16_t *dob, uint16_t *dop, const float *q, const float *k, const float *v,
                          const float *dO, int T, int D, int Dp)
{
    rows_bf16(qb, Dp, q, T, D);
    rows_pairs(qp, q, T, D);
    rows_bf16(kb, Dp, k, T, D);
    panels_u32(ktp, kb, T, Dp / 2);
    rows_pairs(kp, k, T, D);
    rows_bf16(kb, Dp, v, T, D);
    panels_u32(vtp, kb, T, Dp / 2);
    rows_bf16(dob, Dp, dO, T, D);
    rows_pairs(dop, dO, T, D);
}
#else
/* Not built here: cpu_attention.c's bf16_products() is 0, so never called. */
#define NONE dt_die(__FILE__, __LINE__, "attention: no bf16 products in this build")
void cpu_att_mmb_tile(int R, int n, int KP, const uint16_t *a, ptrdiff_t lda, const uint16_t *b, ptrdiff_t ldb,
                      float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    (void)R; (void)n; (void)KP; (void)a; (void)lda; (void)b; (void)ldb; (void)c; (void)ldc; (void)acc; (void)rs;
    NONE;
}
void cpu_att_block_bf16(uint16_t *dst, const float *s, int m, int kn)
{
    (void)dst; (void)s; (void)m; (void)kn;
    NONE;
}
void cpu_att_block_t_bf16(uint16_t *dst, float *tmp, const float *s, int m, int kn)
{
    (void)dst; (void)tmp; (void)s; (void)m; (void)kn;
    NONE;
}
void cpu_att_pack_forward(uint16_t *qb, uint16_t *kb, uint16_t *ktp, uint16_t *vp, const float *q, const float *k,
                          const float *v, int T, int D, int Dp)
{
    (void)qb; (void)kb; (void)ktp; (void)vp; (void)q; (void)k; (void)v; (void)T; (void)D; (void)Dp;
    NONE;
}
void cpu_att_pack_backward(uint16_t *qb, uint16_t *qp, uint16_t *kb, uint16_t *ktp, uint16_t *kp, uint16_t *vtp,
                           uint16_t *dob, uint16_t *dop, const float *q, const float *k, const float *v,
                           const float *dO, int T, int D, int Dp)
{
    (void)qb; (void)qp; (void)kb; (void)ktp; (void)kp; (void)vtp; (void)dob; (void)dop; (void)q; (void)k; (void)v;
    (void)dO; (void)T; (void)D; (void)Dp;
    NONE;
}
#endif
