/* cpu_attention_kernels.h: the block kernels behind cpu_attention.c's
 * flash attention, as a set of function pointers (the primitive product,
 * the three element-wise block passes, the panel transpose), so that the
 * driver never asks which ISA it runs on. cpu_attention.c holds the plain C
 * set (the reference) and the AVX-512 one, cpu_attention_avx2.c the
 * functions of the AVX2 + FMA one; kernels() in cpu_attention.c picks among
 * them. Internal to src/cpu/. */
#ifndef DT_CPU_ATTENTION_KERNELS_H
#define DT_CPU_ATTENTION_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Queries and keys per block. Equal and aligned, so every block pair below
 * the diagonal is unmasked and each diagonal block is square. */
enum { B = 64 };
/* Rows of C per call of the primitive, and at most this many columns: 6 x 4
 * vectors of 16 floats are the AVX-512 version's accumulators. */
enum { RT = 6, NC = 64 };

/* How a diagonal block's causal mask trims a product on the tile of rows
 * [r0, r0 + R): N_UPTO only columns < r0 + R (scores: query rows against
 * keys), K_UPTO only inner terms k < r0 + R (query rows summed over keys),
 * K_FROM only k >= r0 (key rows summed over queries). */
enum trim { FULL, N_UPTO, K_UPTO, K_FROM };

/* The primitive on one tile: c[r][0:n] = (acc ? c[r][0:n] * (rs ? rs[r] :
 * 1) : 0) + sum over k < K of a[r*sam + k*sak] * b[k*ldb + 0:n], for r < R
 * <= RT, n <= NC. rs rescales the online softmax's output rows for free. */
typedef void mm_tile_fn(int R, int n, int K, const float *a, ptrdiff_t sam, ptrdiff_t sak, const float *b,
                        ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs);

/* Scores are kept in base 2 (q is scaled by log2(e) / sqrt(D)), so the
 * softmax's exponentials are 2^x, which the AVX-512 kernels compute in
 * fewer instructions than e^x; lse is converted back to base e. */
#define LOG2E 1.44269504088896341f
#define LN2 0.693147180559945309f

/* One forward key block of the online softmax, on s [m][B] (ld B), kn keys:
 * where diag, row r keeps keys c <= r only. mx/sum [m] are the running max
 * and sum; s becomes P = 2^(s - new max) (0 where masked); alpha [m] =
 * 2^(old max - new max), by which the output rows so far are rescaled. */
typedef void softmax_fn(float *s, int m, int kn, int diag, float *mx, float *sum, float *alpha);
/* Backward: s [m][B] becomes P = 2^(s - lse[r] log2(e)) (0 where masked);
 * then dp [m][B] becomes dS = P * (dp - di[r]) (0 where masked). */
typedef void probs_fn(float *s, int m, int kn, int diag, const float *lse);
typedef void dsoft_fn(float *dp, const float *p, int m, int kn, int diag, const float *di);
/* rows [T][D] transposed per key block into panels [T/B][D][B] (element
 * [t/B][d][t%B]), so a block's k^T is a [D][B] matrix with a short row
 * stride (one [D][T] transpose, T a multiple of 256, would put every row of
 * a block in the same few L1 sets). */
typedef void panels_fn(float *panels, const float *rows, int T, int D);

struct att_kernels {
    mm_tile_fn *mm;
    softmax_fn *softmax;
    probs_fn *probs;
    dsoft_fn *dsoft;
    panels_fn *panels;
};

#define INLINE inline __attribute__((always_inline))

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Keys row r of a block keeps: all kn, or r + 1 on the diagonal. */
static inline int valid_keys(int r, int kn, int diag) { return diag ? imin(r + 1, kn) : kn; }

/* Element (t, d) of the panels of a head of width D. */
static inline size_t panel_at(int t, int d, int D) { return ((size_t)(t / B) * D + (size_t)d) * B + (size_t)(t % B); }

/* The bf16 products (cpu_attention_bf16.c; call only under bf16
 * activations on a CPU with AVX512-BF16). The tile: c[r][0:n] (+)= (rs
 * scaling as mm_tile_fn) sum over pairs kp < KP of a[r][2kp:2kp+2] .
 * b[kp][0:n][0:2], R <= RT, n <= NC; a bf16 rows (lda elements), b
 * pair-interleaved rows of ldb pairs. block_bf16: a block's s [m][B] as
 * bf16 rows over its kn columns rounded up to even (the extra one zero);
 * block_t_bf16: its transpose [kn][B] over m rounded up (tmp: B x B
 * floats). pack_forward: q [T][Dp] (Dp = D rounded up to even, zero
 * padded), k as panels [T/B][Dp/2][B] of pairs along d (through kb [T][Dp]),
 * v paired along t ([ceil(T/2)][D][2], the odd row's partner zero);
 * pack_backward: q as rows and paired, k as panels and paired, v as panels,
 * dout as rows and paired. */
void cpu_att_mmb_tile(int R, int n, int KP, const uint16_t *a, ptrdiff_t lda, const uint16_t *b, ptrdiff_t ldb,
                      float *c, ptrdiff_t ldc, int acc, const float *rs);
void cpu_att_block_bf16(uint16_t *dst, const float *s, int m, int kn);
void cpu_att_block_t_bf16(uint16_t *dst, float *tmp, const float *s, int m, int kn);
void cpu_att_pack_forward(uint16_t *qb, uint16_t *kb, uint16_t *ktp, uint16_t *vp, const float *q, const float *k,
                          const float *v, int T, int D, int Dp);
void cpu_att_pack_backward(uint16_t *qb, uint16_t *qp, uint16_t *kb, uint16_t *ktp, uint16_t *kp, uint16_t *vtp,
                           uint16_t *dob, uint16_t *dop, const float *q, const float *k, const float *v,
                           const float *dO, int T, int D, int Dp);

/* The same products on AMX tiles (cpu_attention_amx.c). amx_usable: the
 * CPU has AMX-BF16 and Linux granted the tile state. Between amx_begin (loads the tile
 * configuration) and amx_end (releases it), mmb_amx computes C [M][N] (+)=
 * A . B as the vector tiles would over a whole block, trim as above (rs
 * scaling as mm_tile_fn); it returns 0, computing nothing, where M or N is not a multiple of 16 or K
 * not one of 32. */
int cpu_att_amx_usable(void);
/* The unit the products would run on now (cpu_attention.c's choice, under
 * DTRAIN_ATTENTION_UNIT), by bench/peak's name: amx_bf16, bf16_dot, or
 * fp32_fma (vector FMA, or the plain C set's compiled code). */
const char *cpu_att_unit(int bf);
void cpu_att_amx_begin(void);
void cpu_att_amx_end(void);
int cpu_att_mmb_amx(int trim, int M, int N, int K, const uint16_t *a, ptrdiff_t lda, const uint16_t *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int acc, const float *rs);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* The AVX2 + FMA set (cpu_attention_avx2.c); call only where the CPU has
 * both. Its panel transpose is the plain C one. */
mm_tile_fn cpu_att_mm_tile_avx2;
softmax_fn cpu_att_softmax_avx2;
probs_fn cpu_att_probs_avx2;
dsoft_fn cpu_att_dsoft_avx2;
#endif

#endif
