/* cpu_avx512.c: the batch norm's hot kernels (per-channel sums and map, and
 * the residual add) written with AVX-512 intrinsics, for float32 and bf16
 * activations.
 *
 * The generic kernels (cpu_norm.c, cpu_kernels.c) are vectorized by GCC,
 * but 8 lanes wide (its default for these loops), channel block by channel
 * block; and on bf16 it rounds float to bf16 with the bit arithmetic of
 * runtime/half.h, eight instructions and a NaN test per vector, which made
 * the bf16 map cost more than the float32 one whose memory traffic it
 * halves. Here a row is walked 16 channels at a time in 512-bit registers,
 * and bf16 is rounded by vcvtneps2bf16 (nearest even, as half.h; it also
 * flushes denormals, which cpu_setup's DAZ does to every input anyway).
 *
 * The one design decision: these are fast paths, not the definition. Each
 * returns 0 when it does not apply (no AVX-512 with BF16, channels not a
 * multiple of 16, or DTRAIN_NO_FAST_KERNELS=1) and the
 * caller runs the generic kernel, which stays the readable reference;
 * tests/check_fused.c compares the two. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* Whether the fast paths run here: one target for both types keeps the
 * code one template (GCC will not inline a bf16-target helper into a
 * plainer function), so a CPU with AVX-512 but no BF16 (Skylake-X, Ice
 * Lake) runs the generic kernels. */
static int usable(void)
{
    static int have = -1;
    if (have < 0) {
        have = cpu_fast_kernels() == CPU_FAST_ALL && cpu_avx512_bf16();
    }
    return have;
}

/* 16 activations at element offset o, as floats, and back. */
FAST_TARGET static inline __m512 ld16(const void *p, size_t o, const int bf)
{
    if (!bf) return _mm512_loadu_ps((const float *)p + o);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + o));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

FAST_TARGET static inline void st16(void *p, size_t o, __m512 v, const int bf)
{
    if (!bf) _mm512_storeu_ps((float *)p + o, v);
    else _mm256_storeu_si256((__m256i *)((uint16_t *)p + o), (__m256i)_mm512_cvtneps_pbh(v));
}

FAST_TARGET static inline __attribute__((always_inline)) void affine_t(void *out, const void *a, const void *b,
                                                                        size_t rows, int c, const float *p,
                                                                        const float *q, const float *r, int relu,
                                                                        const int bf)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t i = 0; i < rows; i++) /* row by row: each cache line once; p, q, r stay in L1 */
        for (int j = 0; j < c; j += 16) {
            const size_t o = i * (size_t)c + j;
            __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(p + j), ld16(a, o, bf), _mm512_loadu_ps(r + j));
            if (b) v = _mm512_fmadd_ps(_mm512_loadu_ps(q + j), ld16(b, o, bf), v);
            if (relu) v = _mm512_max_ps(v, zero);
            st16(out, o, v, bf);
        }
}

FAST_TARGET static void affine_bf16(void *out, const void *a, const void *b, size_t rows, int c, const float *p,
                                    const float *q, const float *r, int relu)
{
    affine_t(out, a, b, rows, c, p, q, r, relu, 1);
}

FAST_TARGET static void affine_f32(void *out, const void *a, const void *b, size_t rows, int c, const float *p,
                                   const float *q, const float *r, int relu)
{
    affine_t(out, a, b, rows, c, p, q, r, relu, 0);
}

int cpu_fast_affine(void *out, const void *a, const void *b, size_t rows, int c, const float *p, const float *q,
                    const float *r, int relu, int bf)
{
    if (!usable() || c % 16) return 0;
    if (bf) affine_bf16(out, a, b, rows, c, p, q, r, relu);
    else affine_f32(out, a, b, rows, c, p, q, r, relu);
    return 1;
}

/* Sums in float over blocks of 64 rows, folded into double (cpu_norm.c's
 * scheme), row by row with one pair of accumulators per 16 channels; the
 * masked form zeroes a where m <= 0, in place, first. */
#define MAX_BLOCKS 16 /* channels up to 256 */

FAST_TARGET static inline __attribute__((always_inline)) void sums_nb(double *s1, double *s2, void *a,
                                                                       const void *b, const void *m, size_t rows,
                                                                       const int nb, const int bf)
{
    const __m512 zero = _mm512_setzero_ps();
    const size_t c = 16 * (size_t)nb;
    __m512 p1[MAX_BLOCKS], p2[MAX_BLOCKS];
    for (size_t j = 0; j < c; j++) s1[j] = s2[j] = 0.0;
    for (size_t r0 = 0; r0 < rows; r0 += 64) {
        size_t r1 = r0 + 64 < rows ? r0 + 64 : rows;
        for (int k = 0; k < nb; k++) p1[k] = p2[k] = zero;
        for (size_t i = r0; i < r1; i++)
            for (int k = 0; k < nb; k++) {
                const size_t o = i * c + 16 * (size_t)k;
                __m512 x = ld16(a, o, bf);
                if (m) {
                    __mmask16 keep = _mm512_cmp_ps_mask(ld16(m, o, bf), zero, _CMP_GT_OQ);
                    x = _mm512_maskz_mov_ps(keep, x);
                    st16(a, o, x, bf); /* exact: a stored value or zero */
                }
                p1[k] = _mm512_add_ps(p1[k], x);
                p2[k] = _mm512_fmadd_ps(x, ld16(b, o, bf), p2[k]);
            }
        for (int k = 0; k < nb; k++) {
            float f1[16], f2[16];
            _mm512_storeu_ps(f1, p1[k]);
            _mm512_storeu_ps(f2, p2[k]);
            for (int l = 0; l < 16; l++) {
                s1[16 * k + l] += (double)f1[l];
                s2[16 * k + l] += (double)f2[l];
            }
        }
    }
}

/* The channel counts of ResNets with constants, so the accumulators live
 * in registers; any other multiple of 16 with a variable count. */
#define SUMS_CASES(bf)                                                        \
    switch (c / 16) {                                                         \
    case 1: sums_nb(s1, s2, a, b, relu_out, rows, 1, bf); break;              \
    case 2: sums_nb(s1, s2, a, b, relu_out, rows, 2, bf); break;              \
    case 4: sums_nb(s1, s2, a, b, relu_out, rows, 4, bf); break;              \
    default: sums_nb(s1, s2, a, b, relu_out, rows, c / 16, bf); break;        \
    }

FAST_TARGET static void sums_bf16(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows,
                                  int c)
{
    SUMS_CASES(1)
}

FAST_TARGET static void sums_f32(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows,
                                 int c)
{
    SUMS_CASES(0)
}

int cpu_fast_sums(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows, int c, int bf)
{
    if (!usable() || c % 16 || c > 16 * MAX_BLOCKS) return 0;
    if (bf) sums_bf16(s1, s2, a, b, relu_out, rows, c);
    else sums_f32(s1, s2, a, b, relu_out, rows, c);
    return 1;
}

/* dst += src over n bf16 values, the tail masked (float32's generic loop
 * is as fast as this). */
FAST_TARGET static void add(uint16_t *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) st16(dst, i, _mm512_add_ps(ld16(dst, i, 1), ld16(src, i, 1)), 1);
    for (; i < n; i++) dst[i] = dt_f32_to_bf16(dt_bf16_to_f32(dst[i]) + dt_bf16_to_f32(src[i]));
}

int cpu_fast_add_bf16(void *dst, const void *src, size_t n)
{
    if (!usable()) return 0;
    add(dst, src, n);
    return 1;
}

#else

int cpu_fast_affine(void *out, const void *a, const void *b, size_t rows, int c, const float *p, const float *q,
                    const float *r, int relu, int bf)
{
    (void)out, (void)a, (void)b, (void)rows, (void)c, (void)p, (void)q, (void)r, (void)relu, (void)bf;
    return 0;
}

int cpu_fast_sums(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows, int c, int bf)
{
    (void)s1, (void)s2, (void)a, (void)b, (void)relu_out, (void)rows, (void)c, (void)bf;
    return 0;
}

int cpu_fast_add_bf16(void *dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    return 0;
}

#endif
