/* cpu_attention_avx512.h: the AVX-512 pieces that cpu_attention.c's AVX-512
 * kernel set and cpu_attention_bf16.c's bf16 products share: lane masks,
 * a tile's accumulators in and out, the switch over a tile function's
 * instances, and the 16 x 16 register transpose. Static inline, each file
 * compiles its own; include only on x86-64 with GCC. Internal to src/cpu/. */
#ifndef DT_CPU_ATTENTION_AVX512_H
#define DT_CPU_ATTENTION_AVX512_H

#include <immintrin.h>
#include <stddef.h>

#include "cpu/cpu_attention_kernels.h"

#define FAST __attribute__((target("avx512f")))

/* Lanes [0, n) of a vector, n <= 16. */
FAST static INLINE __mmask16 lanes(int n) { return (__mmask16)(0xffffu >> (16 - n)); }

/* A tile's accumulators: c's rows (times rs[r] where given) or zero
 * (!acc), and back; R, NV and MASKED constants after inlining. */
FAST static INLINE void tile_load(__m512 s[RT][4], const int R, const int NV, const float *c, ptrdiff_t ldc,
                                  const int MASKED, __mmask16 last, int acc, const float *rs)
{
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        const __m512 scale = _mm512_set1_ps(rs ? rs[r] : 1.0f);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            s[r][v] = !acc ? _mm512_setzero_ps()
                      : _mm512_mul_ps(scale, MASKED && v == NV - 1 ? _mm512_maskz_loadu_ps(last, c + r * ldc + 16 * v)
                                                                   : _mm512_loadu_ps(c + r * ldc + 16 * v));
    }
}

FAST static INLINE void tile_store(__m512 s[RT][4], const int R, const int NV, float *c, ptrdiff_t ldc,
                                   const int MASKED, __mmask16 last)
{
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (MASKED && v == NV - 1) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, last, s[r][v]);
            else _mm512_storeu_ps(c + r * ldc + 16 * v, s[r][v]);
        }
}

/* The instances of a tile function F for R, NV and whether the last vector
 * is partial (a mask register read in the inner loop costs an FMA port's
 * slot): a switch over them, ARGS F's arguments after those three. */
#define TILE_CASE(F, r, v, ...)                                                                       \
    case ((r) * 4 + (v) - 1) * 2:                                                                     \
        F(r, v, __VA_ARGS__, 0, last, acc, rs);                                                       \
        return;                                                                                       \
    case ((r) * 4 + (v) - 1) * 2 + 1:                                                                 \
        F(r, v, __VA_ARGS__, 1, last, acc, rs);                                                       \
        return;
#define TILE_CASES(F, r, ...)                                                                          \
    TILE_CASE(F, r, 1, __VA_ARGS__) TILE_CASE(F, r, 2, __VA_ARGS__) TILE_CASE(F, r, 3, __VA_ARGS__)      \
    TILE_CASE(F, r, 4, __VA_ARGS__)
#define TILE_SWITCH(F, ...)                                                                            \
    TILE_CASES(F, 1, __VA_ARGS__) TILE_CASES(F, 2, __VA_ARGS__) TILE_CASES(F, 3, __VA_ARGS__)          \
    TILE_CASES(F, 4, __VA_ARGS__) TILE_CASES(F, 5, __VA_ARGS__) TILE_CASES(F, 6, __VA_ARGS__)

/* Lanes of vector v (of a row of kn, nv of them valid) that are valid and
 * that exist. */
FAST static INLINE __mmask16 lanes_upto(int v, int cnt)
{
    int left = cnt - 16 * v;
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : lanes(left);
}

/* dst[j*ldd + i] = src[i*lds + j], i, j < 16: unpack pairs of rows, then
 * pairs of pairs (each 128-bit lane then holds a 4 x 4 block, lane L of
 * vector 4g + e: rows 4g..4g+3 of column 4L + e), then a 4 x 4 transpose of
 * the lanes by two rounds of shuffle_f32x4. */
FAST static INLINE void transpose16(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds)
{
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#define PD(x) _mm512_castps_pd(x)
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(t[i]), PD(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(t[i]), PD(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(t[i + 1]), PD(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(t[i + 1]), PD(t[i + 3])));
    }
#undef PD
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        __m512 u0 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88), u1 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xdd);
        __m512 u2 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
        __m512 u3 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xdd);
        _mm512_storeu_ps(dst + (0 + e) * ldd, _mm512_shuffle_f32x4(u0, u2, 0x88));
        _mm512_storeu_ps(dst + (4 + e) * ldd, _mm512_shuffle_f32x4(u1, u3, 0x88));
        _mm512_storeu_ps(dst + (8 + e) * ldd, _mm512_shuffle_f32x4(u0, u2, 0xdd));
        _mm512_storeu_ps(dst + (12 + e) * ldd, _mm512_shuffle_f32x4(u1, u3, 0xdd));
    }
}

#endif
