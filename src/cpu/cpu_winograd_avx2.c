/* cpu_winograd_avx2.c: --winograd on CPUs with AVX2 + FMA and without
 * AVX-512, where oneDNN 2.6 has no Winograd kernel: F(2x2, 3x3) and
 * F(4x4, 3x3) for the forward, backward-data and backward-weights passes of
 * the 3x3 convolutions that cpu_conv3x3_avx2.c takes (stride 1, padding 1
 * or 0, float32, channels multiples of 8).
 *
 * F(m x m, 3x3) computes an m x m block of outputs from an (m+2) x (m+2)
 * patch of input in (m+2)^2 multiplies per input channel and filter instead
 * of 9 m^2: F(2x2) 16 for 36 (2.25x fewer), F(4x4) 36 for 144 (4x fewer).
 * F(2x2)'s transforms use only 0, +-1 and +-1/2 and round about as well as
 * the direct sum; F(4x4)'s (points 0, +-1, +-2) multiply by up to 8 and
 * 1/24 and round about 8x worse (check_layers: 5e-6 against 6e-7 relative
 * to direct). Each pass takes the one that needs fewer multiplies for its
 * output size, tiles sticking out of the image counted (cpu_wino_avx2_tile).
 * The work runs in blocks of TB tiles (m x m output blocks along the
 * flattened batch), sized so that a block's transformed input and products
 * stay in L2:
 *   1. V[xi][t][c] = (B' d B)[xi] for each tile t's input patch d,
 *      vectorized over 8 channels (NHWC keeps them contiguous);
 *   2. M[xi] = V[xi] U[xi] for the (m+2)^2 positions xi, U = G g G' the
 *      filters' transform (computed per call: (m+2)^2 c k floats): 6 x 16
 *      register tiles, as in cpu_conv3x3_avx2.c;
 *   3. the outputs y = A' m A (+ bias, ReLU), written where inside the image.
 * Threads: OpenMP over blocks, each with its own V and M.
 * Backward-data is the forward on flipped filters, or where that needs more
 * tiles than the forward pass (a 'valid' convolution's gradient is larger
 * than its output: 13x13 against 11x11 on the seed CNN), the forward's
 * adjoint on the forward's tiles (data_transposed4); backward-weights
 * transforms the output gradients instead of the filters. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <omp.h>

#define HAVE_WINO2 1
#define FAST2 __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))
#define RT 6 /* tiles per register tile */

/* m[r][0 .. 8 NV) = (acc ? m[r][..] : 0) + sum over l < L of a[r][l] b[l][..]:
 * a's element (r, l) at a + r ar + l al, b's rows ldb apart, m's ldb apart.
 * Forward's products run it with a's rows the tiles (ar = Ci, al = 1);
 * backward-weights' with a's rows the channels and the tiles reduced
 * (ar = 1, al = Ci), accumulating over blocks. */
FAST2 static INLINE void gemm_tile(const int R, const int NV, const int acc_in, int L, const float *a, int ar, int al,
                                   const float *b, int ldb, float *m)
{
    __m256 acc[RT][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[r][v] = acc_in ? _mm256_loadu_ps(m + (size_t)r * ldb + 8 * v) : _mm256_setzero_ps();
    for (int l = 0; l < L; l++) {
        __m256 bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_broadcast_ss(a + (size_t)r * ar);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
        }
        a += al;
        b += ldb;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(m + (size_t)r * ldb + 8 * v, acc[r][v]);
}

/* R (1..6) as a constant, for gemm_tile's other arguments. */
#define GEMM_CASES(NV, ACC, ...)                                                    \
    switch (R) {                                                                    \
    case 6: gemm_tile(6, NV, ACC, __VA_ARGS__); break;                              \
    case 5: gemm_tile(5, NV, ACC, __VA_ARGS__); break;                              \
    case 4: gemm_tile(4, NV, ACC, __VA_ARGS__); break;                              \
    case 3: gemm_tile(3, NV, ACC, __VA_ARGS__); break;                              \
    case 2: gemm_tile(2, NV, ACC, __VA_ARGS__); break;                              \
    default: gemm_tile(1, NV, ACC, __VA_ARGS__); break;                             \
    }

/* M[xi] (nt x Co) = V[xi] (nt x Ci) U[xi] (Ci x Co), for the P xi. */
FAST2 static void products(int P, int nt, int Ci, int Co, const float *V, const float *U, float *M)
{
    for (int xi = 0; xi < P; xi++)
        for (int t = 0; t < nt; t += RT) {
            const int R = nt - t < RT ? nt - t : RT;
            int co = 0;
            for (; co + 16 <= Co; co += 16) {
                const float *a = V + ((size_t)xi * nt + t) * Ci, *b = U + (size_t)xi * Ci * Co + co;
                float *m = M + ((size_t)xi * nt + t) * Co + co;
                GEMM_CASES(2, 0, Ci, a, Ci, 1, b, Co, m)
            }
            if (co < Co) {
                const float *a = V + ((size_t)xi * nt + t) * Ci, *b = U + (size_t)xi * Ci * Co + co;
                float *m = M + ((size_t)xi * nt + t) * Co + co;
                GEMM_CASES(1, 0, Ci, a, Ci, 1, b, Co, m)
            }
        }
}

/* As in cpu_conv3x3_avx2.c: input hi x wi, output ho x wo, output (y, x)
 * reading input (y + ky - pad, x + kx - pad); m x m output tiles, th x tw
 * of them per image. */
struct geom {
    int hi, wi, ho, wo, pad;
    int m, th, tw;
};

static struct geom geom_of(int hi, int wi, int ho, int wo, int pad, int m)
{
    return (struct geom){hi, wi, ho, wo, pad, m, (ho + m - 1) / m, (wo + m - 1) / m};
}

/* Tile number -> image, output row and column of its top-left corner. */
static INLINE void tile_at(const struct geom *g, long t, int *n, int *y, int *x)
{
    *n = (int)(t / ((long)g->th * g->tw));
    const int r = (int)(t % ((long)g->th * g->tw));
    *y = g->m * (r / g->tw);
    *x = g->m * (r % g->tw);
}

/* src[r * S + q] = the C values at (y0 + r, x0 + q) of image n (H x W,
 * NHWC at base), NULL outside it: a tile's S x S patch. */
static INLINE void patch_at(const float *base, int n, int H, int W, int C, int y0, int x0, const int S,
                            const float **src)
{
#pragma GCC unroll 6
    for (int r = 0; r < S; r++)
#pragma GCC unroll 6
        for (int q = 0; q < S; q++) {
            const int iy = y0 + r, ix = x0 + q;
            src[r * S + q] = iy < 0 || iy >= H || ix < 0 || ix >= W
                                 ? NULL
                                 : base + (((size_t)n * H + (size_t)iy) * W + (size_t)ix) * (size_t)C;
        }
}

/* ---- backward-weights ----------------------------------------------------
 * With m = U . V per tile (U = G g G', V = B' d B) and y = A' m A, the
 * gradient of a filter is dg = G' [sum over tiles of (A dy A') . V] G: the
 * output gradients' m x m blocks are transformed to (m+2) x (m+2)
 * (Z = A dy A'), the (m+2)^2 positions' sums over tiles are products
 * Mw[xi] = V[xi]' Z[xi] (Ci x Co, reduced over the tiles), and one
 * transform G' Mw G at the end gives the 3x3 filters: (m+2)^2 multiplies
 * per tile, channel and filter instead of 9 m^2, as forward. */

/* Mw[xi] (Ci x Co) += V[xi]' (Ci x nt) Z[xi] (nt x Co), for the P xi. */
FAST2 static void weight_products(int P, int nt, int Ci, int Co, const float *V, const float *Z, float *Mw)
{
    for (int xi = 0; xi < P; xi++)
        for (int c = 0; c < Ci; c += RT) {
            const int R = Ci - c < RT ? Ci - c : RT;
            const float *a = V + (size_t)xi * nt * Ci + c;
            int co = 0;
            for (; co + 16 <= Co; co += 16) {
                const float *b = Z + (size_t)xi * nt * Co + co;
                float *w = Mw + ((size_t)xi * Ci + c) * Co + co;
                GEMM_CASES(2, 1, nt, a, 1, Ci, b, Co, w)
            }
            if (co < Co) {
                const float *b = Z + (size_t)xi * nt * Co + co;
                float *w = Mw + ((size_t)xi * Ci + c) * Co + co;
                GEMM_CASES(1, 1, nt, a, 1, Ci, b, Co, w)
            }
        }
}

/* ---- the transforms ----------------------------------------------------
 * Each 2-D transform is its 1-D one down the columns, then along the rows
 * (sep2d), 8 channels a vector. F(2x2, 3x3):
 *   B' = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 *   A' = [1 1 1 0; 0 1 -1 -1].
 * F(4x4, 3x3), points 0, 1, -1, 2, -2 and infinity (Lavin and Gray's):
 *   B' = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;
 *         0 2 -1 -2 1 0; 0 4 0 -5 0 1],
 *   G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6;
 *        1/24 -1/12 1/6; 0 0 1],
 *   A' = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
 * Backward-weights needs A (A' transposed) and G' too; backward-data on
 * the forward's tiles B (B' transposed). */

/* F(2x2): t = B' d */
FAST2 static INLINE void bt4(const __m256 *d, __m256 *t)
{
    t[0] = _mm256_sub_ps(d[0], d[2]);
    t[1] = _mm256_add_ps(d[1], d[2]);
    t[2] = _mm256_sub_ps(d[2], d[1]);
    t[3] = _mm256_sub_ps(d[1], d[3]);
}

/* F(2x2): y = A' m (2 of 4) */
FAST2 static INLINE void at4(const __m256 *m, __m256 *y)
{
    y[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
    y[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
}

/* F(2x2): u = G g (4 of 3) */
FAST2 static INLINE void g4(const __m256 *g, __m256 *u)
{
    const __m256 half = _mm256_set1_ps(0.5f), s = _mm256_add_ps(g[0], g[2]);
    u[0] = g[0];
    u[1] = _mm256_mul_ps(half, _mm256_add_ps(s, g[1]));
    u[2] = _mm256_mul_ps(half, _mm256_sub_ps(s, g[1]));
    u[3] = g[2];
}

/* F(2x2): z = A d (4 of 2) */
FAST2 static INLINE void a4(const __m256 *d, __m256 *z)
{
    z[0] = d[0];
    z[1] = _mm256_add_ps(d[0], d[1]);
    z[2] = _mm256_sub_ps(d[0], d[1]);
    z[3] = _mm256_sub_ps(_mm256_setzero_ps(), d[1]);
}

/* F(2x2): g = G' m (3 of 4) */
FAST2 static INLINE void gt4(const __m256 *m, __m256 *g)
{
    const __m256 half = _mm256_set1_ps(0.5f), p = _mm256_mul_ps(half, _mm256_add_ps(m[1], m[2]));
    g[0] = _mm256_add_ps(m[0], p);
    g[1] = _mm256_mul_ps(half, _mm256_sub_ps(m[1], m[2]));
    g[2] = _mm256_add_ps(p, m[3]);
}

/* F(4x4): t = B' d */

FAST2 static INLINE void bt6(const __m256 *d, __m256 *t)
{
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
    const __m256 a = _mm256_fnmadd_ps(four, d[2], d[4]), b = _mm256_fnmadd_ps(four, d[1], d[3]);
    const __m256 c = _mm256_sub_ps(d[4], d[2]), e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    t[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
    t[1] = _mm256_add_ps(a, b);
    t[2] = _mm256_sub_ps(a, b);
    t[3] = _mm256_add_ps(c, e);
    t[4] = _mm256_sub_ps(c, e);
    t[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
}

/* F(4x4): z = B x (backward-data on the forward's tiles) */
FAST2 static INLINE void b6(const __m256 *x, __m256 *z)
{
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
    const __m256 p = _mm256_add_ps(x[1], x[2]), q = _mm256_add_ps(x[3], x[4]);
    const __m256 u = _mm256_sub_ps(x[1], x[2]), v = _mm256_sub_ps(x[3], x[4]);
    z[0] = _mm256_mul_ps(four, x[0]);
    z[1] = _mm256_fmsub_ps(four, x[5], _mm256_fmadd_ps(four, u, _mm256_mul_ps(two, v)));
    z[2] = _mm256_sub_ps(_mm256_fnmadd_ps(five, x[0], _mm256_fnmadd_ps(four, p, _mm256_setzero_ps())), q);
    z[3] = _mm256_fnmadd_ps(five, x[5], _mm256_fmadd_ps(two, v, u));
    z[4] = _mm256_add_ps(_mm256_add_ps(x[0], p), q);
    z[5] = x[5];
}

/* F(4x4): y = A' m (4 of 6) */
FAST2 static INLINE void at6(const __m256 *m, __m256 *y)
{
    const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
    const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
    y[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
    y[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d34, d12);
    y[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), s34, s12);
    y[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d34, d12), m[5]);
}

/* F(4x4): u = G g (6 of 3) */
FAST2 static INLINE void g6(const __m256 *g, __m256 *u)
{
    const __m256 p = _mm256_add_ps(g[0], g[2]), sixth = _mm256_set1_ps(-1.0f / 6.0f);
    const __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 24.0f), g[0], _mm256_mul_ps(_mm256_set1_ps(1.0f / 6.0f), g[2]));
    const __m256 r = _mm256_mul_ps(_mm256_set1_ps(1.0f / 12.0f), g[1]);
    u[0] = _mm256_mul_ps(_mm256_set1_ps(0.25f), g[0]);
    u[1] = _mm256_mul_ps(sixth, _mm256_add_ps(p, g[1]));
    u[2] = _mm256_mul_ps(sixth, _mm256_sub_ps(p, g[1]));
    u[3] = _mm256_add_ps(q, r);
    u[4] = _mm256_sub_ps(q, r);
    u[5] = g[2];
}

/* F(4x4): z = A d (6 of 4) */
FAST2 static INLINE void a6(const __m256 *d, __m256 *z)
{
    const __m256 e = _mm256_add_ps(d[0], d[2]), o = _mm256_add_ps(d[1], d[3]);
    const __m256 e2 = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), d[2], d[0]);
    const __m256 o2 = _mm256_fmadd_ps(_mm256_set1_ps(8.0f), d[3], _mm256_add_ps(d[1], d[1]));
    z[0] = d[0];
    z[1] = _mm256_add_ps(e, o);
    z[2] = _mm256_sub_ps(e, o);
    z[3] = _mm256_add_ps(e2, o2);
    z[4] = _mm256_sub_ps(e2, o2);
    z[5] = d[3];
}

/* F(4x4): g = G' m (3 of 6) */
FAST2 static INLINE void gt6(const __m256 *m, __m256 *g)
{
    const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
    const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
    const __m256 sixth = _mm256_set1_ps(1.0f / 6.0f);
    g[0] = _mm256_fmadd_ps(_mm256_set1_ps(0.25f), m[0],
                           _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 24.0f), s34, _mm256_mul_ps(_mm256_set1_ps(-1.0f / 6.0f), s12)));
    g[1] = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 12.0f), d34, _mm256_mul_ps(_mm256_set1_ps(-1.0f / 6.0f), d12));
    g[2] = _mm256_fmadd_ps(sixth, _mm256_sub_ps(s34, s12), m[5]);
}

/* y (O x O) = f x f' for the 1-D transform f taking I values to O, x
 * (I x I, row-major) read at x[i] + off (zeros where x[i] is NULL): f down
 * each column of x as it is loaded, then along each row. */
FAST2 static INLINE void sep2d(void (*f)(const __m256 *, __m256 *), const int I, const int O,
                               const float *const *x, size_t off, __m256 *y)
{
    __m256 t[6][6];
#pragma GCC unroll 6
    for (int j = 0; j < I; j++) {
        __m256 col[6], u[6];
#pragma GCC unroll 6
        for (int i = 0; i < I; i++) col[i] = x[i * I + j] ? _mm256_loadu_ps(x[i * I + j] + off) : _mm256_setzero_ps();
        f(col, u);
#pragma GCC unroll 6
        for (int r = 0; r < O; r++) t[r][j] = u[r];
    }
#pragma GCC unroll 6
    for (int r = 0; r < O; r++) f(t[r], y + r * O);
}

/* The 1-D transforms of F(m x m); m is a constant where these expand. */
#define BT(m) ((m) == 4 ? bt6 : bt4)
#define AT(m) ((m) == 4 ? at6 : at4)
#define GG(m) ((m) == 4 ? g6 : g4)
#define AA(m) ((m) == 4 ? a6 : a4)
#define GT(m) ((m) == 4 ? gt6 : gt4)

/* U[xi][c][k] = (G g G')[xi] for each filter g = w[.][c][k] (3x3, HWIO),
 * (m+2)^2 positions; flip: w is the filters turned half a circle (wflip:
 * [9][Ci][Co] with Ci and Co swapped), taken back. */
FAST2 static INLINE void filter_tf(const int m, int Ci, int Co, const float *w, int flip, float *U)
{
    const float *taps[9];
    for (int i = 0; i < 9; i++) taps[i] = w + (size_t)(flip ? 8 - i : i) * Ci * Co;
    for (int c = 0; c < Ci; c++)
        for (int k = 0; k < Co; k += 8) {
            __m256 u[36];
            sep2d(GG(m), 3, m + 2, taps, (size_t)c * Co + k, u);
#pragma GCC unroll 36
            for (int xi = 0; xi < (m + 2) * (m + 2); xi++) _mm256_storeu_ps(U + ((size_t)xi * Ci + c) * Co + k, u[xi]);
        }
}

/* V[xi][i][c] = (B' d B)[xi] of tile t0 + i's input patch, i < nt. */
FAST2 static INLINE void input_tf(const int m, const struct geom *g, long t0, int nt, const float *inp, int Ci,
                                  float *V)
{
    const int A = m + 2;
    const size_t st = (size_t)nt * Ci;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(g, t0 + i, &n, &y, &x);
        const float *src[36];
        patch_at(inp, n, g->hi, g->wi, Ci, y - g->pad, x - g->pad, A, src);
        for (int c = 0; c < Ci; c += 8) {
            __m256 v[36];
            sep2d(BT(m), A, A, src, (size_t)c, v);
            float *o = V + (size_t)i * Ci + c;
#pragma GCC unroll 36
            for (int xi = 0; xi < A * A; xi++) _mm256_storeu_ps(o + xi * st, v[xi]);
        }
    }
}

/* out's m x m block of tile t0 + i = A' m A (+ bias, ReLU), inside the image. */
FAST2 static INLINE void output_tf(const int m, const struct geom *g, long t0, int nt, const float *M, int Co,
                                   const float *bias, int relu, float *out)
{
    const int H = g->ho, W = g->wo, A = m + 2;
    const size_t st = (size_t)nt * Co;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(g, t0 + i, &n, &y, &x);
        const int rows = H - y < m ? H - y : m, cols = W - x < m ? W - x : m;
        const float *mp[36];
        for (int xi = 0; xi < A * A; xi++) mp[xi] = M + (size_t)xi * st + (size_t)i * Co;
        for (int k = 0; k < Co; k += 8) {
            __m256 o[16];
            sep2d(AT(m), A, m, mp, (size_t)k, o);
            const __m256 b = bias ? _mm256_loadu_ps(bias + k) : _mm256_setzero_ps();
            for (int r = 0; r < rows; r++) {
                float *dst = out + (((size_t)n * H + (size_t)(y + r)) * W + (size_t)x) * Co + k;
                for (int q = 0; q < cols; q++) {
                    __m256 v = _mm256_add_ps(o[r * m + q], b);
                    if (relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
                    _mm256_storeu_ps(dst + (size_t)q * Co, v);
                }
            }
        }
    }
}

/* Z[xi][i][k] = (A dy A')[xi] for the m x m block dy of output gradients
 * of tile t0 + i, zero where the block lies outside the output. */
FAST2 static INLINE void grad_tf(const int m, const struct geom *g, long t0, int nt, const float *dout, int Co,
                                 float *Z)
{
    const int A = m + 2;
    const size_t st = (size_t)nt * Co;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(g, t0 + i, &n, &y, &x);
        const float *src[16];
        patch_at(dout, n, g->ho, g->wo, Co, y, x, m, src);
        for (int k = 0; k < Co; k += 8) {
            __m256 z[36];
            sep2d(AA(m), m, A, src, (size_t)k, z);
            float *o = Z + (size_t)i * Co + k;
#pragma GCC unroll 36
            for (int xi = 0; xi < A * A; xi++) _mm256_storeu_ps(o + xi * st, z[xi]);
        }
    }
}

/* dw[ky][kx][c][k] = (G' Mw G)[ky][kx] over the (m+2)^2 positions. */
FAST2 static INLINE void weight_tf(const int m, int Ci, int Co, const float *Mw, float *dw)
{
    const float *mp[36];
    for (int xi = 0; xi < (m + 2) * (m + 2); xi++) mp[xi] = Mw + (size_t)xi * Ci * Co;
    for (int c = 0; c < Ci; c++)
        for (int k = 0; k < Co; k += 8) {
            __m256 d[9];
            sep2d(GT(m), m + 2, 3, mp, (size_t)c * Co + k, d);
#pragma GCC unroll 9
            for (int i = 0; i < 9; i++) _mm256_storeu_ps(dw + ((size_t)i * Ci + c) * Co + k, d[i]);
        }
}

/* Each of them for a run-time m (2 or 4), expanded with m a constant. */
FAST2 static void filter_transform(int m, int Ci, int Co, const float *w, int flip, float *U)
{
    if (m == 4) filter_tf(4, Ci, Co, w, flip, U);
    else filter_tf(2, Ci, Co, w, flip, U);
}

FAST2 static void input_transform(const struct geom *g, long t0, int nt, const float *inp, int Ci, float *V)
{
    if (g->m == 4) input_tf(4, g, t0, nt, inp, Ci, V);
    else input_tf(2, g, t0, nt, inp, Ci, V);
}

FAST2 static void output_transform(const struct geom *g, long t0, int nt, const float *M, int Co,
                                   const float *bias, int relu, float *out)
{
    if (g->m == 4) output_tf(4, g, t0, nt, M, Co, bias, relu, out);
    else output_tf(2, g, t0, nt, M, Co, bias, relu, out);
}

FAST2 static void grad_transform(const struct geom *g, long t0, int nt, const float *dout, int Co, float *Z)
{
    if (g->m == 4) grad_tf(4, g, t0, nt, dout, Co, Z);
    else grad_tf(2, g, t0, nt, dout, Co, Z);
}

FAST2 static void weight_transform(int m, int Ci, int Co, const float *Mw, float *dw)
{
    if (m == 4) weight_tf(4, Ci, Co, Mw, dw);
    else weight_tf(2, Ci, Co, Mw, dw);
}

/* dinp's 6x6 patch of tile t0 + i += B dV B' (backward-data transposed:
 * the adjoint of input_transform's F(4x4)), inside the image. */
FAST2 static void input_adjoint4(const struct geom *g, long t0, int nt, const float *dV, int Ci, float *dinp)
{
    const size_t st = (size_t)nt * Ci;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(g, t0 + i, &n, &y, &x);
        const float *v[36];
        float *dst[36];
        for (int xi = 0; xi < 36; xi++) v[xi] = dV + (size_t)xi * st + (size_t)i * Ci;
        patch_at(dinp, n, g->hi, g->wi, Ci, y - g->pad, x - g->pad, 6, (const float **)dst);
        for (int c = 0; c < Ci; c += 8) {
            __m256 d[36];
            sep2d(b6, 6, 6, v, (size_t)c, d);
#pragma GCC unroll 36
            for (int j = 0; j < 36; j++)
                if (dst[j]) _mm256_storeu_ps(dst[j] + c, _mm256_add_ps(_mm256_loadu_ps(dst[j] + c), d[j]));
        }
    }
}

/* ---- the passes ----------------------------------------------------------- */

/* Tiles per block: a block's V and M (or Z) in about 192 KiB, a multiple of
 * the register tile's rows: 96 tiles of F(2x2) at 16 channels, 12 of
 * F(4x4) at 32 in and 64 out. */
#ifndef WINO_BLOCK_FLOATS
#define WINO_BLOCK_FLOATS 49152
#endif
static int block_tiles(int P, int Ci, int Co)
{
    const int tb = WINO_BLOCK_FLOATS / P / (Ci + Co) / RT * RT;
    return tb < RT ? RT : tb;
}

/* out = conv(inp, w) (+ bias, ReLU) with Ci channels in and Co out; w is
 * [9][Ci][Co]; U is (m+2)^2 Ci Co floats of scratch. */
static void wino_core(const struct geom *g, int n, float *out, const float *inp, const float *w, int Ci, int Co,
                      const float *bias, int relu, float *U)
{
    const int P = (g->m + 2) * (g->m + 2);
    filter_transform(g->m, Ci, Co, w, 0, U);
    const long tiles = (long)n * g->th * g->tw;
    const int tb = block_tiles(P, Ci, Co);
    const long blocks = (tiles + tb - 1) / tb;
#pragma omp parallel
    {
        float *V = dt_xmalloc(sizeof(float) * (size_t)P * (size_t)tb * (size_t)Ci);
        float *M = dt_xmalloc(sizeof(float) * (size_t)P * (size_t)tb * (size_t)Co);
#pragma omp for schedule(static)
        for (long b = 0; b < blocks; b++) {
            const long t0 = b * tb;
            const int nt = tiles - t0 < tb ? (int)(tiles - t0) : tb;
            input_transform(g, t0, nt, inp, Ci, V);
            products(P, nt, Ci, Co, V, U, M);
            output_transform(g, t0, nt, M, Co, bias, relu, out);
        }
        free(V);
        free(M);
    }
}

/* Backward-data on the forward pass's F(4x4) tiles: dV = U' (A dy A') for
 * each tile, dinp's patch += B dV B', the patches overlapping by 2 rows and
 * columns. For the seed CNN's 'valid' 13x13 -> 11x11 these are 9 tiles an
 * image where the forward form on the 13x13 gradient needs 16. Blocks of at
 * least tw + 2 tiles overlap only their neighbours' patches, so threads run
 * the even blocks, then the odd ones. U: 36 Ci Co floats of scratch. */
static void data_transposed4(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                             const float *wflip, float *U)
{
    const struct geom g = geom_of(s->h, s->w, s->oh, s->ow, s->pad, 4);
    const int Ci = s->c, Co = s->k;
    filter_transform(4, Co, Ci, wflip, 1, U); /* U[xi][k][c] */
    memset(dinp, 0, sizeof(float) * (size_t)n * s->h * s->w * Ci);
    const long tiles = (long)n * g.th * g.tw;
    int tb = block_tiles(36, Ci, Co);
    if (tb < g.tw + 2) tb = (g.tw + 2 + RT - 1) / RT * RT;
    const long blocks = (tiles + tb - 1) / tb;
#pragma omp parallel
    {
        float *Z = dt_xmalloc(sizeof(float) * 36 * (size_t)tb * (size_t)Co);
        float *dV = dt_xmalloc(sizeof(float) * 36 * (size_t)tb * (size_t)Ci);
        for (int phase = 0; phase < 2; phase++) {
#pragma omp for schedule(static)
            for (long b = phase; b < blocks; b += 2) {
                const long t0 = b * tb;
                const int nt = tiles - t0 < tb ? (int)(tiles - t0) : tb;
                grad_transform(&g, t0, nt, dout, Co, Z);
                products(36, nt, Co, Ci, Z, U, dV);
                input_adjoint4(&g, t0, nt, dV, Ci, dinp);
            }
        }
        free(Z);
        free(dV);
    }
}

void cpu_wino_avx2_backward_weights(const struct dt_conv_shape *s, int m, int n, float *dweight, float *dbias,
                                    const float *dout, const float *inp)
{
    const struct geom g = geom_of(s->h, s->w, s->oh, s->ow, s->pad, m);
    const int Ci = s->c, Co = s->k, P = (m + 2) * (m + 2);
    const long tiles = (long)n * g.th * g.tw;
    const int tb = block_tiles(P, Ci, Co);
    const long blocks = (tiles + tb - 1) / tb;
    const int nthr = omp_get_max_threads() < blocks ? omp_get_max_threads() : (int)blocks;
    const size_t nm = (size_t)P * Ci * Co;
    float *Mw = dt_xcalloc((size_t)nthr * nm, sizeof(float));
#pragma omp parallel num_threads(nthr)
    {
        const int me = omp_get_thread_num(), nth = omp_get_num_threads();
        float *V = dt_xmalloc(sizeof(float) * (size_t)P * (size_t)tb * (size_t)Ci);
        float *Z = dt_xmalloc(sizeof(float) * (size_t)P * (size_t)tb * (size_t)Co);
        for (long b = me; b < blocks; b += nth) { /* round robin: the same sums for a thread count */
            const long t0 = b * tb;
            const int nt = tiles - t0 < tb ? (int)(tiles - t0) : tb;
            input_transform(&g, t0, nt, inp, Ci, V);
            grad_transform(&g, t0, nt, dout, Co, Z);
            weight_products(P, nt, Ci, Co, V, Z, Mw + (size_t)me * nm);
        }
        free(V);
        free(Z);
    }
    for (int i = 1; i < nthr; i++)
        for (size_t j = 0; j < nm; j++) Mw[j] += Mw[(size_t)i * nm + j];
    weight_transform(m, Ci, Co, Mw, dweight);
    free(Mw);
    cpu_bias_grad(dbias, dout, n * s->oh * s->ow, Co, 0);
}

void cpu_wino_avx2_forward(const struct dt_conv_shape *s, int m, int relu, int n, float *out, const float *inp,
                           const float *weight, const float *bias, float *U)
{
    const struct geom g = geom_of(s->h, s->w, s->oh, s->ow, s->pad, m);
    wino_core(&g, n, out, inp, weight, s->c, s->k, bias, relu, U);
}

void cpu_wino_avx2_backward_data(const struct dt_conv_shape *s, int m, int transposed, int n, float *dinp,
                                 const float *dout, const float *wflip, float *U)
{
    if (transposed) {
        data_transposed4(s, n, dinp, dout, wflip, U);
        return;
    }
    const struct geom g = geom_of(s->oh, s->ow, s->h, s->w, 2 - s->pad, m);
    wino_core(&g, n, dinp, dout, wflip, s->k, s->c, NULL, 0, U);
}
#else
void cpu_wino_avx2_backward_weights(const struct dt_conv_shape *s, int m, int n, float *dweight, float *dbias,
                                    const float *dout, const float *inp)
{
    (void)s, (void)m, (void)n, (void)dweight, (void)dbias, (void)dout, (void)inp;
}

void cpu_wino_avx2_forward(const struct dt_conv_shape *s, int m, int relu, int n, float *out, const float *inp,
                           const float *weight, const float *bias, float *U)
{
    (void)s, (void)m, (void)relu, (void)n, (void)out, (void)inp, (void)weight, (void)bias, (void)U;
}

void cpu_wino_avx2_backward_data(const struct dt_conv_shape *s, int m, int transposed, int n, float *dinp,
                                 const float *dout, const float *wflip, float *U)
{
    (void)s, (void)m, (void)transposed, (void)n, (void)dinp, (void)dout, (void)wflip, (void)U;
}
#endif

/* Whether backward-data runs transposed (data_transposed4): where the
 * forward pass's tiles are F(4x4) (m) and need fewer multiplies than
 * backward-data's own F(md x md) tiles on the input's h x w. */
int cpu_wino_avx2_data_transposed(const struct dt_conv_shape *s, int m, int md)
{
    const long fwd = 36L * ((s->oh + 3) / 4) * ((s->ow + 3) / 4);
    const long own = (long)(md + 2) * (md + 2) * ((s->h + md - 1) / md) * ((s->w + md - 1) / md);
    return m == 4 && fwd < own;
}

/* DTRAIN_WINO_TILE's tile: 2 or 4, 0 where unset or empty, -1 where it is
 * anything else (cpu_set_winograd refuses --winograd then). */
int cpu_wino_avx2_forced_tile(void)
{
    const char *e = getenv("DTRAIN_WINO_TILE");
    if (!e || !*e) return 0;
    return !strcmp(e, "2") ? 2 : !strcmp(e, "4") ? 4 : -1;
}

/* The tile for an ho x wo output: F(4x4) where it needs at least a fifth
 * fewer multiplies than F(2x2), tiles sticking out of the output counted
 * (F(2x2) for outputs 1, 2, 5, 6, 9 or 10 wide); DTRAIN_WINO_TILE=2 or 4
 * forces one. */
int cpu_wino_avx2_tile(int ho, int wo)
{
    const int forced = cpu_wino_avx2_forced_tile();
    if (forced < 0) DT_DIE("DTRAIN_WINO_TILE=%s: expected 2 or 4", getenv("DTRAIN_WINO_TILE"));
    if (forced) return forced;
    const long m2 = 16L * ((ho + 1) / 2) * ((wo + 1) / 2), m4 = 36L * ((ho + 3) / 4) * ((wo + 3) / 4);
    return 5 * m4 <= 4 * m2 ? 4 : 2;
}
