/* cpu_attention_amx.c: cpu_attention.c's bf16 block products on AMX tiles
 * (tdpbf16ps), where the CPU has AMX-BF16 and Linux grants the tile state.
 *
 * Under bf16 activations the attention's products read bf16 operands in
 * the forms cpu_attention_bf16.c packs: A as bf16 rows (k contiguous), B as
 * rows of pairs interleaved along k. Those are exactly what tdpbf16ps reads
 * (A a 16 x 32 bf16 tile, B a 16 pair-row x 16 column tile of pairs), so
 * the same packed operands feed either unit. On a core where vdpbf16ps runs
 * at half the fp32 FMA rate (measured on a Sapphire Rapids class Xeon: 123
 * against 246 GFLOP/s, AMX 3,781) the vector bf16 products were slower than
 * float ones; on the tiles they stop being the attention's cost.
 *
 * A product is taken as 32 x 32 blocks of C (2 x 2 accumulator tiles,
 * tmm0-3), A in tmm4-5, B in tmm6-7, K in steps of 32. Shapes whose M, N
 * are not multiples of 16 or whose K range is not a multiple of 32 are
 * refused (the caller runs the vector tiles instead); a diagonal block's
 * trim is widened to whole tiles, the extra terms being zeros of the causal
 * mask (P and dS are 0 above the diagonal) or entries the softmax does not
 * read (S above the diagonal). Accumulation is float, as the vector path;
 * tdpbf16ps flushes denormal inputs and results to zero. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attention_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#include <immintrin.h>

#include "cpu/cpu_amx.h"

/* Tiles as literals, so the assembler names them; "memory" so that C's
 * stores and loads are ordered with the tiles' (GCC's own macros lack it). */
#define TLOAD(t, p, s) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(s)) : "memory")
#define TSTORE(t, p, s) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(s)) : "memory")
#define TZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* Asked once (cpu_amx.h). */
int cpu_att_amx_usable(void)
{
    static int known = -1;
    if (known < 0) known = dt_amx_why_not() == NULL;
    return known;
}

/* The tiles: C's four (tmm0-3), A's two, B's two, each 16 rows x 64 bytes. */
void cpu_att_amx_begin(void)
{
    const struct dt_amx_tilecfg cfg = dt_amx_tilecfg_16x64(); /* once a forward or backward call: 64 bytes */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

void cpu_att_amx_end(void) { __asm__ volatile("tilerelease" ::: "memory"); }

/* c rows [0, rows) x [0, n) *= rs[r]. */
__attribute__((target("avx512f"))) static void scale_rows(float *c, ptrdiff_t ldc, int rows, int n, const float *rs)
{
    for (int r = 0; r < rows; r++) {
        const __m512 s = _mm512_set1_ps(rs[r]);
        for (int j = 0; j < n; j += 16)
            _mm512_storeu_ps(c + r * ldc + j, _mm512_mul_ps(s, _mm512_loadu_ps(c + r * ldc + j)));
    }
}

/* C's block of nr x nc tiles (each 1 or 2) at c, over pair-rows of B from
 * k0 / 2 and A's columns [k0, k1). */
static void block(int nr, int nc, int k0, int k1, const uint16_t *a, ptrdiff_t lda, const uint16_t *b, ptrdiff_t ldb,
                  float *c, ptrdiff_t ldc, int acc)
{
    const long sa = 2 * lda, sb = 4 * ldb, sc = 4 * ldc;
    float *c1 = c + 16, *c2 = c + 16 * ldc, *c3 = c2 + 16;
    if (acc) {
        TLOAD(0, c, sc);
        if (nc > 1) TLOAD(1, c1, sc);
        if (nr > 1) TLOAD(2, c2, sc);
        if (nr > 1 && nc > 1) TLOAD(3, c3, sc);
    } else {
        TZERO(0);
        TZERO(1);
        TZERO(2);
        TZERO(3);
    }
    if (nr > 1 && nc > 1)
        for (int k = k0; k < k1; k += 32) {
            TLOAD(4, a + k, sa);
            TLOAD(6, b + k * ldb, sb);
            TLOAD(5, a + 16 * lda + k, sa);
            TLOAD(7, b + k * ldb + 32, sb);
            TDP(0, 4, 6);
            TDP(1, 4, 7);
            TDP(2, 5, 6);
            TDP(3, 5, 7);
        }
    else
        for (int k = k0; k < k1; k += 32) {
            TLOAD(4, a + k, sa);
            TLOAD(6, b + k * ldb, sb);
            TDP(0, 4, 6);
            if (nc > 1) {
                TLOAD(7, b + k * ldb + 32, sb);
                TDP(1, 4, 7);
            }
            if (nr > 1) {
                TLOAD(5, a + 16 * lda + k, sa);
                TDP(2, 5, 6);
            }
        }
    TSTORE(0, c, sc);
    if (nc > 1) TSTORE(1, c1, sc);
    if (nr > 1) TSTORE(2, c2, sc);
    if (nr > 1 && nc > 1) TSTORE(3, c3, sc);
}

int cpu_att_mmb_amx(int trim, int M, int N, int K, const uint16_t *a, ptrdiff_t lda, const uint16_t *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    if (M % 16 || N % 16 || K % 32) return 0;
    for (int r0 = 0; r0 < M; r0 += 32) {
        const int nr = imin(2, (M - r0) / 16), rows = 16 * nr;
        int n = N, k0 = 0, k1 = K;
        if (trim == N_UPTO) n = imin(N, r0 + rows);
        if (trim == K_UPTO) k1 = imin(K, (r0 + rows + 31) & ~31);
        if (trim == K_FROM) k0 = r0 & ~31;
        if (acc && rs) scale_rows(c + r0 * ldc, ldc, rows, n, rs + r0);
        for (int c0 = 0; c0 < n; c0 += 32)
            block(nr, imin(2, (n - c0) / 16), k0, k1, a + r0 * lda, lda, b + 2 * c0, ldb, c + r0 * ldc + c0, ldc, acc);
    }
    return 1;
}

#else

int cpu_att_amx_usable(void) { return 0; }
void cpu_att_amx_begin(void) {}
void cpu_att_amx_end(void) {}
int cpu_att_mmb_amx(int trim, int M, int N, int K, const uint16_t *a, ptrdiff_t lda, const uint16_t *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs)
{
    (void)trim; (void)M; (void)N; (void)K; (void)a; (void)lda; (void)b; (void)ldb; (void)c; (void)ldc; (void)acc;
    (void)rs;
    return 0;
}

#endif
