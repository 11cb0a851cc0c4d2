/* cpu_winograd_avx2.c: --winograd on CPUs with AVX2 + FMA and without
 * AVX-512, where oneDNN 2.6 has no Winograd kernel: F(2x2, 3x3) for the
 * forward, backward-data and backward-weights passes of the 3x3
 * convolutions that cpu_conv3x3_avx2.c takes (stride 1, padding 1 or 0,
 * float32, channels multiples of 8).
 *
 * F(2x2, 3x3) computes a 2x2 block of outputs from a 4x4 patch of input in
 * 16 multiplies per input channel and filter instead of 36 (2.25x fewer),
 * and its transforms use only 0, +-1 and +-1/2, so it rounds about as well as
 * the direct sum (F(4x4, 3x3), oneDNN's choice on AVX-512, saves 4x but
 * multiplies by up to 4 and 1/4 and rounds worse). The work runs in blocks
 * of TB tiles (2x2 output blocks along the flattened batch), sized so that a
 * block's transformed input and products stay in L2:
 *   1. V[xi][t][c] = (B' d B)[xi] for each tile t's 4x4 input patch d,
 *      vectorized over 8 channels (NHWC keeps them contiguous);
 *   2. M[xi] = V[xi] U[xi] for the 16 positions xi, U = G g G' the filters'
 *      transform (computed per call: 16 c k floats): 6 x 16 register tiles,
 *      as in cpu_conv3x3_avx2.c;
 *   3. the outputs y = A' m A (+ bias, ReLU), written where inside the image.
 * Threads: OpenMP over blocks, each with its own V and M.
 * Backward-data is the forward on flipped filters; backward-weights (below)
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

/* M[xi] (nt x Co) = V[xi] (nt x Ci) U[xi] (Ci x Co), for the 16 xi. */
FAST2 static void products(int nt, int Ci, int Co, const float *V, const float *U, float *M)
{
    for (int xi = 0; xi < 16; xi++)
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

/* U[xi][c][k] = (G g G')[xi] for each filter g = w[.][c][k] (3x3, HWIO). */
FAST2 static void filter_transform(int Ci, int Co, const float *w, float *U)
{
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int c = 0; c < Ci; c++)
        for (int k = 0; k < Co; k += 8) {
            __m256 g[3][3], t[4][3];
            for (int i = 0; i < 9; i++) g[i / 3][i % 3] = _mm256_loadu_ps(w + ((size_t)i * Ci + c) * Co + k);
            for (int j = 0; j < 3; j++) { /* t = G g: rows g0, (g0+g1+g2)/2, (g0-g1+g2)/2, g2 */
                const __m256 s = _mm256_add_ps(g[0][j], g[2][j]);
                t[0][j] = g[0][j];
                t[1][j] = _mm256_mul_ps(half, _mm256_add_ps(s, g[1][j]));
                t[2][j] = _mm256_mul_ps(half, _mm256_sub_ps(s, g[1][j]));
                t[3][j] = g[2][j];
            }
            for (int i = 0; i < 4; i++) { /* U = t G' */
                const __m256 s = _mm256_add_ps(t[i][0], t[i][2]);
                const __m256 u[4] = {t[i][0], _mm256_mul_ps(half, _mm256_add_ps(s, t[i][1])),
                                     _mm256_mul_ps(half, _mm256_sub_ps(s, t[i][1])), t[i][2]};
                for (int j = 0; j < 4; j++) _mm256_storeu_ps(U + ((size_t)(i * 4 + j) * Ci + c) * Co + k, u[j]);
            }
        }
}

/* As in cpu_conv3x3_avx2.c: input hi x wi, output ho x wo, output (y, x)
 * reading input (y + ky - pad, x + kx - pad). */
struct geom {
    int hi, wi, ho, wo, pad;
};

/* Tile number -> image, output row and column of its top-left corner. */
static INLINE void tile_at(long t, int th, int tw, int *n, int *y, int *x)
{
    *n = (int)(t / ((long)th * tw));
    const int r = (int)(t % ((long)th * tw));
    *y = 2 * (r / tw);
    *x = 2 * (r % tw);
}

/* V[xi][i][c] = (B' d B)[xi] of tile t0 + i's input patch, i < nt. */
FAST2 static void input_transform(const struct geom *g, long t0, int nt, int th, int tw, const float *inp,
                                  int Ci, float *V)
{
    const int H = g->hi, W = g->wi;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(t0 + i, th, tw, &n, &y, &x);
        const float *src[4][4];
        for (int r = 0; r < 4; r++)
            for (int q = 0; q < 4; q++) {
                const int iy = y - g->pad + r, ix = x - g->pad + q;
                src[r][q] = iy < 0 || iy >= H || ix < 0 || ix >= W
                                ? NULL
                                : inp + (((size_t)n * H + (size_t)iy) * W + (size_t)ix) * (size_t)Ci;
            }
        for (int c = 0; c < Ci; c += 8) {
            __m256 d[4][4], t[4][4];
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++) d[r][q] = src[r][q] ? _mm256_loadu_ps(src[r][q] + c) : _mm256_setzero_ps();
            for (int q = 0; q < 4; q++) { /* t = B' d: rows d0-d2, d1+d2, d2-d1, d1-d3 */
                t[0][q] = _mm256_sub_ps(d[0][q], d[2][q]);
                t[1][q] = _mm256_add_ps(d[1][q], d[2][q]);
                t[2][q] = _mm256_sub_ps(d[2][q], d[1][q]);
                t[3][q] = _mm256_sub_ps(d[1][q], d[3][q]);
            }
            for (int r = 0; r < 4; r++) { /* V = t B */
                float *v = V + ((size_t)(r * 4) * nt + (size_t)i) * Ci + c;
                const size_t st = (size_t)nt * Ci;
                _mm256_storeu_ps(v, _mm256_sub_ps(t[r][0], t[r][2]));
                _mm256_storeu_ps(v + st, _mm256_add_ps(t[r][1], t[r][2]));
                _mm256_storeu_ps(v + 2 * st, _mm256_sub_ps(t[r][2], t[r][1]));
                _mm256_storeu_ps(v + 3 * st, _mm256_sub_ps(t[r][1], t[r][3]));
            }
        }
    }
}

/* out's 2x2 block of tile t0 + i = A' m A (+ bias, ReLU), inside the image. */
FAST2 static void output_transform(const struct geom *g, long t0, int nt, int th, int tw, const float *M,
                                   int Co, const float *bias, int relu, float *out)
{
    const int H = g->ho, W = g->wo;
    const size_t st = (size_t)nt * Co;
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(t0 + i, th, tw, &n, &y, &x);
        for (int k = 0; k < Co; k += 8) {
            const float *m = M + (size_t)i * Co + k;
            __m256 t[2][4];
            for (int q = 0; q < 4; q++) { /* t = A' m: rows m0+m1+m2, m1-m2-m3 */
                const __m256 m0 = _mm256_loadu_ps(m + (size_t)q * st), m1 = _mm256_loadu_ps(m + (size_t)(4 + q) * st);
                const __m256 m2 = _mm256_loadu_ps(m + (size_t)(8 + q) * st), m3 = _mm256_loadu_ps(m + (size_t)(12 + q) * st);
                t[0][q] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
                t[1][q] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
            }
            const __m256 b = bias ? _mm256_loadu_ps(bias + k) : _mm256_setzero_ps();
            for (int r = 0; r < 2 && y + r < H; r++) { /* y = t A */
                __m256 o[2] = {_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(t[r][0], t[r][1]), t[r][2]), b),
                               _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(t[r][1], t[r][2]), t[r][3]), b)};
                for (int q = 0; q < 2 && x + q < W; q++) {
                    if (relu) o[q] = _mm256_max_ps(o[q], _mm256_setzero_ps());
                    _mm256_storeu_ps(out + (((size_t)n * H + (size_t)(y + r)) * W + (size_t)(x + q)) * Co + k, o[q]);
                }
            }
        }
    }
}

/* out = conv(inp, w) (+ bias, ReLU) with Ci channels in and Co out; w is
 * [9][Ci][Co]; U is 16 Ci Co floats of scratch. */
static void wino_core(const struct geom *g, int n, float *out, const float *inp, const float *w, int Ci, int Co,
                      const float *bias, int relu, float *U)
{
    filter_transform(Ci, Co, w, U);
    const int th = (g->ho + 1) / 2, tw = (g->wo + 1) / 2;
    const long tiles = (long)n * th * tw;
    /* V and M of a block in about 192 KiB: 96 tiles at 16 channels, 24 at 64 */
    int tb = 3072 / (Ci + Co) / RT * RT;
    if (tb < RT) tb = RT;
    const long blocks = (tiles + tb - 1) / tb;
#pragma omp parallel
    {
        float *V = dt_xmalloc(sizeof(float) * 16 * (size_t)tb * (size_t)Ci);
        float *M = dt_xmalloc(sizeof(float) * 16 * (size_t)tb * (size_t)Co);
#pragma omp for schedule(static)
        for (long b = 0; b < blocks; b++) {
            const long t0 = b * tb;
            const int nt = tiles - t0 < tb ? (int)(tiles - t0) : tb;
            input_transform(g, t0, nt, th, tw, inp, Ci, V);
            products(nt, Ci, Co, V, U, M);
            output_transform(g, t0, nt, th, tw, M, Co, bias, relu, out);
        }
        free(V);
        free(M);
    }
}

/* ---- backward-weights ----------------------------------------------------
 * With m = U . V per tile (U = G g G', V = B' d B) and y = A' m A, the
 * gradient of a filter is dg = G' [sum over tiles of (A dy A') . V] G: the
 * output gradients' 2x2 blocks are transformed to 4x4 (Z = A dy A'), the 16
 * positions' sums over tiles are 16 products Mw[xi] = V[xi]' Z[xi]
 * (Ci x Co, reduced over the tiles), and one transform G' Mw G at the end
 * gives the 3x3 filters: 16 multiplies per tile, channel and filter instead
 * of 36, as forward. */

/* Z[xi][i][k] = (A dy A')[xi] for the 2x2 block dy of output gradients of
 * tile t0 + i, zero where the block lies outside the output. */
FAST2 static void grad_transform(const struct geom *g, long t0, int nt, int th, int tw, const float *dout, int Co,
                                 float *Z)
{
    const int H = g->ho, W = g->wo;
    const size_t st = (size_t)nt * Co;
    const __m256 zero = _mm256_setzero_ps();
    for (int i = 0; i < nt; i++) {
        int n, y, x;
        tile_at(t0 + i, th, tw, &n, &y, &x);
        const float *src[2][2];
        for (int r = 0; r < 2; r++)
            for (int q = 0; q < 2; q++)
                src[r][q] = y + r >= H || x + q >= W
                                ? NULL
                                : dout + (((size_t)n * H + (size_t)(y + r)) * W + (size_t)(x + q)) * (size_t)Co;
        for (int k = 0; k < Co; k += 8) {
            __m256 d[2][2], t[4][2];
            for (int r = 0; r < 2; r++)
                for (int q = 0; q < 2; q++) d[r][q] = src[r][q] ? _mm256_loadu_ps(src[r][q] + k) : zero;
            for (int q = 0; q < 2; q++) { /* t = A dy: rows dy0, dy0+dy1, dy0-dy1, -dy1 */
                t[0][q] = d[0][q];
                t[1][q] = _mm256_add_ps(d[0][q], d[1][q]);
                t[2][q] = _mm256_sub_ps(d[0][q], d[1][q]);
                t[3][q] = _mm256_sub_ps(zero, d[1][q]);
            }
            for (int r = 0; r < 4; r++) { /* Z = t A': columns t0, t0+t1, t0-t1, -t1 */
                float *z = Z + ((size_t)(r * 4) * nt + (size_t)i) * Co + k;
                _mm256_storeu_ps(z, t[r][0]);
                _mm256_storeu_ps(z + st, _mm256_add_ps(t[r][0], t[r][1]));
                _mm256_storeu_ps(z + 2 * st, _mm256_sub_ps(t[r][0], t[r][1]));
                _mm256_storeu_ps(z + 3 * st, _mm256_sub_ps(zero, t[r][1]));
            }
        }
    }
}

/* Mw[xi] (Ci x Co) += V[xi]' (Ci x nt) Z[xi] (nt x Co), for the 16 xi. */
FAST2 static void weight_products(int nt, int Ci, int Co, const float *V, const float *Z, float *Mw)
{
    for (int xi = 0; xi < 16; xi++)
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

/* dw[ky][kx][c][k] = (G' Mw G)[ky][kx]: G' rows (1, 1/2, 1/2, 0),
 * (0, 1/2, -1/2, 0), (0, 1/2, 1/2, 1). */
FAST2 static void weight_transform(int Ci, int Co, const float *Mw, float *dw)
{
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int c = 0; c < Ci; c++)
        for (int k = 0; k < Co; k += 8) {
            __m256 m[4][4], s[3][4];
            for (int xi = 0; xi < 16; xi++) m[xi / 4][xi % 4] = _mm256_loadu_ps(Mw + ((size_t)xi * Ci + c) * Co + k);
            for (int j = 0; j < 4; j++) { /* s = G' m */
                const __m256 p = _mm256_mul_ps(half, _mm256_add_ps(m[1][j], m[2][j]));
                s[0][j] = _mm256_add_ps(m[0][j], p);
                s[1][j] = _mm256_mul_ps(half, _mm256_sub_ps(m[1][j], m[2][j]));
                s[2][j] = _mm256_add_ps(p, m[3][j]);
            }
            for (int i = 0; i < 3; i++) { /* dw = s G */
                const __m256 p = _mm256_mul_ps(half, _mm256_add_ps(s[i][1], s[i][2]));
                float *d = dw + ((size_t)(i * 3) * Ci + c) * Co + k;
                _mm256_storeu_ps(d, _mm256_add_ps(s[i][0], p));
                _mm256_storeu_ps(d + (size_t)Ci * Co, _mm256_mul_ps(half, _mm256_sub_ps(s[i][1], s[i][2])));
                _mm256_storeu_ps(d + (size_t)2 * Ci * Co, _mm256_add_ps(p, s[i][3]));
            }
        }
}

void cpu_wino_avx2_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                    const float *dout, const float *inp)
{
    const struct geom g = {s->h, s->w, s->oh, s->ow, s->pad};
    const int Ci = s->c, Co = s->k, th = (g.ho + 1) / 2, tw = (g.wo + 1) / 2;
    const long tiles = (long)n * th * tw;
    int tb = 3072 / (Ci + Co) / RT * RT; /* as wino_core: a block's V and Z in about 192 KiB */
    if (tb < RT) tb = RT;
    const long blocks = (tiles + tb - 1) / tb;
    const int nthr = omp_get_max_threads() < blocks ? omp_get_max_threads() : (int)blocks;
    const size_t nm = (size_t)16 * Ci * Co;
    float *Mw = dt_xcalloc((size_t)nthr * nm, sizeof(float));
#pragma omp parallel num_threads(nthr)
    {
        const int me = omp_get_thread_num(), nth = omp_get_num_threads();
        float *V = dt_xmalloc(sizeof(float) * 16 * (size_t)tb * (size_t)Ci);
        float *Z = dt_xmalloc(sizeof(float) * 16 * (size_t)tb * (size_t)Co);
        for (long b = me; b < blocks; b += nth) { /* round robin: the same sums for a thread count */
            const long t0 = b * tb;
            const int nt = tiles - t0 < tb ? (int)(tiles - t0) : tb;
            input_transform(&g, t0, nt, th, tw, inp, Ci, V);
            grad_transform(&g, t0, nt, th, tw, dout, Co, Z);
            weight_products(nt, Ci, Co, V, Z, Mw + (size_t)me * nm);
        }
        free(V);
        free(Z);
    }
    for (int i = 1; i < nthr; i++)
        for (size_t j = 0; j < nm; j++) Mw[j] += Mw[(size_t)i * nm + j];
    weight_transform(Ci, Co, Mw, dweight);
    free(Mw);
    cpu_bias_grad(dbias, dout, n * s->oh * s->ow, Co);
}

void cpu_wino_avx2_forward(const struct dt_conv_shape *s, int relu, int n, float *out, const float *inp,
                           const float *weight, const float *bias, float *U)
{
    const struct geom g = {s->h, s->w, s->oh, s->ow, s->pad};
    wino_core(&g, n, out, inp, weight, s->c, s->k, bias, relu, U);
}

void cpu_wino_avx2_backward_data(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                                 const float *wflip, float *U)
{
    const struct geom g = {s->oh, s->ow, s->h, s->w, 2 - s->pad};
    wino_core(&g, n, dinp, dout, wflip, s->k, s->c, NULL, 0, U);
}
#else
void cpu_wino_avx2_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                    const float *dout, const float *inp)
{
    (void)s, (void)n, (void)dweight, (void)dbias, (void)dout, (void)inp;
}

void cpu_wino_avx2_forward(const struct dt_conv_shape *s, int relu, int n, float *out, const float *inp,
                           const float *weight, const float *bias, float *U)
{
    (void)s, (void)relu, (void)n, (void)out, (void)inp, (void)weight, (void)bias, (void)U;
}

void cpu_wino_avx2_backward_data(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                                 const float *wflip, float *U)
{
    (void)s, (void)n, (void)dinp, (void)dout, (void)wflip, (void)U;
}
#endif
