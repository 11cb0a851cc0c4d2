/* cpu_wgrad_bf16.c: backward-weights of 3x3 convolutions on bf16
 * activations (stride 1 or 2, any padding; NHWC, channels in and out
 * multiples of 16) with AVX512-BF16's pairwise dot product, for CPUs that
 * have it and no AMX.
 *
 * Why: on such a CPU (Zen 4) oneDNN 2.6 runs bf16 backward-weights with its
 * jit_bf16 kernels at 60-78% of the dot product's peak, where its forward and
 * backward-data reach 89-110% (bench/resnet.sh's kernel table): a third of
 * ResNet-20's bf16 step. AMX CPUs keep oneDNN's tile kernels.
 *
 * The product: dW[ky][kx][ci][co] = sum over pixels p of X[p at tap][ci]
 * dY[p][co]. vdpbf16ps adds the products of two bf16 pairs into one float32
 * lane, so the pixels go in pairs: output columns j and j + h of a row, h =
 * ceil(OW / 2) (each input column then lies in one pair, not two). Per
 * chunk of images both operands are re-laid once (cheap against the 9 C K
 * multiply-adds each pixel feeds):
 *  - dY as [image][oy][j][co][2]: one 64-byte load is 16 output channels'
 *    pairs (a zero stands for column OW when OW is odd);
 *  - X as [image][iy][ix][ci] of 32-bit pairs (X[iy][ix], X[iy][ix + h s])
 *    in padded coordinates (zeros outside the image): the pair a tap
 *    (ky, kx) of columns (j, j + h) reads is one word at (oy s + ky,
 *    j s + kx), broadcast to all lanes.
 * Re-laying is 0.2 of 1.5 ms at 32x32x16 -> 16 (batch 64), where the
 * products alone run at the unit's peak; fetching the next chunk into L2
 * meanwhile (struct ahead) cut the kernel's time in ResNet-20 training by 9%.
 * A tile is 3 taps (kx) x RC input channels x NB blocks of 16 output
 * channels in 24 accumulators (RC NB = 8), kept in registers over the whole
 * chunk: per pixel pair NB loads, 3 RC broadcasts and 24 dot products.
 *
 * Sums run in a fixed order: bitwise reproducible run to run; threads (over
 * chunks of images) add their partial sums in thread order. Not oneDNN's
 * order: results differ from its in the last bits (check_layers). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <omp.h>

#define WG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define INLINE inline __attribute__((always_inline))
#define CHUNK_BYTES (256 * 1024) /* both re-laid operands of a chunk: within L2 */

/* One call's geometry. */
struct wg {
    int C, K, H, W, OH, OW, s, pad;
    int ip;  /* 1: a pixel pairs with its place in the next image (OW odd); 0: column x with x + OW2 */
    int OW2; /* pixel pairs per output row: OW (ip) or ceil(OW / 2) */
    int HP;  /* padded input rows the taps read: (OH - 1) s + 3 */
    int WP;  /* pair columns the taps read: (OW2 - 1) s + 3 */
    int G;   /* units per chunk: images, or pairs of images (ip) */
};

#define PART_BYTES (64u << 20) /* the threads' partial weight gradients, at most */

/* The geometry of n images (n >= 1) over at most `threads` threads: chunks
 * within L2, and at least one per thread; *nt: the threads to ask for, no
 * more than the chunks, nor than PART_BYTES of partial sums allow. Rows of
 * odd width pair images instead of columns: column pairs would leave one
 * pair a row half empty (1 in 12 products wasted at the seed CNN's 11). */
static struct wg geometry(const struct dt_conv_shape *s, int n, int threads, int *nt)
{
    const int ip = s->ow % 2;
    struct wg g = {s->c, s->k, s->h, s->w, s->oh, s->ow, s->stride, s->pad, ip, ip ? s->ow : (s->ow + 1) / 2,
                   0, 0, 0};
    n = ip ? (n + 1) / 2 : n; /* units */
    g.HP = (g.OH - 1) * g.s + 3;
    g.WP = (g.OW2 - 1) * g.s + 3;
    const size_t per = (size_t)g.HP * g.WP * g.C * 4 + (size_t)g.OH * g.OW2 * g.K * 4;
    const size_t nw = (size_t)9 * g.C * g.K;
    int t = threads < 1 ? 1 : threads;
    if ((size_t)(t - 1) * nw * 4 > PART_BYTES) t = 1 + (int)(PART_BYTES / (nw * 4));
    g.G = per >= CHUNK_BYTES ? 1 : (int)(CHUNK_BYTES / per);
    if (g.G > (n + t - 1) / t) g.G = (n + t - 1) / t;
    const int chunks = (n + g.G - 1) / g.G;
    *nt = t < chunks ? t : chunks;
    return g;
}

static size_t xp_words(const struct wg *g) { return (size_t)g->G * g->HP * g->WP * g->C; }
static size_t dyp_words(const struct wg *g) { return (size_t)g->G * g->OH * g->OW2 * g->K; }
/* A thread's slice of the scratch: its re-laid operands and bias sums. */
static size_t slice_words(const struct wg *g) { return xp_words(g) + dyp_words(g) + (size_t)g->K; }

/* 16 bf16 at p (NULL: zeros) widened into the low halves of 32-bit words. */
WG_TARGET static INLINE __m512i wide16(const uint16_t *p)
{
    return p ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)) : _mm512_setzero_si512();
}

/* The pairs (a[i], b[i]) of two widened rows: a in the low half, as
 * vdpbf16ps pairs them (two shifts and an or: vpermt2w is slower on Zen 4). */
WG_TARGET static INLINE __m512i pairs(__m512i a, __m512i b) { return _mm512_or_si512(a, _mm512_slli_epi32(b, 16)); }

/* Unit i's padded row yp of xp: NULL (and zeroed) where it is padding, the
 * image's row iy = yp - pad otherwise. */
WG_TARGET static INLINE uint32_t *x_row(const struct wg *g, uint32_t *xp, int i, int yp)
{
    uint32_t *o = xp + ((size_t)i * g->HP + yp) * g->WP * g->C;
    const int iy = yp - g->pad;
    if (iy >= 0 && iy < g->H) return o;
    memset(o, 0, sizeof(uint32_t) * (size_t)g->WP * g->C);
    return NULL;
}

/* X of units [i0, i0 + cnt) (pairs of images: images [2 i0, 2 (i0 + cnt))
 * up to the n-th) into xp's pairs: each place of an image with the same
 * place of the next (zero past the last), the padding's zeros around. */
WG_TARGET static void pack_x_images(const struct wg *g, int i0, int cnt, int n, uint32_t *restrict xp,
                                    const uint16_t *restrict x)
{
    const int C = g->C, H = g->H, W = g->W, HP = g->HP, WP = g->WP, pad = g->pad;
    for (int i = 0; i < cnt; i++) {
        const int ia = 2 * (i0 + i), ib = ia + 1 < n ? ia + 1 : -1;
        for (int yp = 0; yp < HP; yp++) {
            const int iy = yp - pad;
            uint32_t *restrict o = x_row(g, xp, i, yp);
            if (!o) continue;
            const uint16_t *ra = x + ((size_t)ia * H + iy) * W * C, *rb = ib < 0 ? NULL : x + ((size_t)ib * H + iy) * W * C;
            for (int xq = 0; xq < WP; xq++, o += C) {
                const int a = xq - pad;
                const int in = a >= 0 && a < W;
                for (int c = 0; c < C; c += 16)
                    _mm512_storeu_si512(o + c, pairs(wide16(in ? ra + (size_t)a * C + c : NULL),
                                                     wide16(in && rb ? rb + (size_t)a * C + c : NULL)));
            }
        }
    }
}

/* X of images [i0, i0 + cnt) into xp's pairs: columns whose pair lies
 * inside the image without a test, the padding's around them with one. */
WG_TARGET static void pack_x(const struct wg *g, int i0, int cnt, uint32_t *restrict xp, const uint16_t *restrict x)
{
    const int C = g->C, H = g->H, W = g->W, HP = g->HP, WP = g->WP, pad = g->pad, s = g->OW2 * g->s;
    const int in0 = pad, in1 = W - s + pad; /* [in0, in1): both of the pair inside */
    for (int i = 0; i < cnt; i++)
        for (int yp = 0; yp < HP; yp++) {
            const int iy = yp - pad;
            uint32_t *restrict o = x_row(g, xp, i, yp);
            if (!o) continue;
            const uint16_t *restrict row = x + ((size_t)(i0 + i) * H + iy) * W * C;
            for (int xq = 0; xq < WP; xq++, o += C) {
                const int a = xq - pad, b = a + s;
                if (xq >= in0 && xq < in1) {
                    const uint16_t *pa = row + (size_t)a * C, *pb = pa + (size_t)s * C;
                    for (int c = 0; c < C; c += 16) _mm512_storeu_si512(o + c, pairs(wide16(pa + c), wide16(pb + c)));
                    continue;
                }
                const uint16_t *pa = a >= 0 && a < W ? row + (size_t)a * C : NULL;
                const uint16_t *pb = b >= 0 && b < W ? row + (size_t)b * C : NULL;
                for (int c = 0; c < C; c += 16)
                    _mm512_storeu_si512(o + c, pairs(wide16(pa ? pa + c : NULL), wide16(pb ? pb + c : NULL)));
            }
        }
}

/* dY of units [i0, i0 + cnt) into dyp's pairs (as pack_x_images or
 * pack_x pairs X); their column sums into db. */
WG_TARGET static void pack_dy(const struct wg *g, int i0, int cnt, int n, uint32_t *restrict dyp,
                              const uint16_t *restrict dy, float *restrict db)
{
    const int K = g->K, OH = g->OH, OW = g->OW, OW2 = g->OW2;
    const size_t image = (size_t)OH * OW * K;
    for (int i = 0; i < cnt; i++)
        for (int oy = 0; oy < OH; oy++) {
            const int ia = g->ip ? 2 * (i0 + i) : i0 + i, other = g->ip && ia + 1 < n;
            const uint16_t *restrict row = dy + ((size_t)ia * OH + oy) * OW * K;
            uint32_t *restrict o = dyp + ((size_t)i * OH + oy) * OW2 * K;
            for (int j = 0; j < OW2; j++, o += K) {
                const uint16_t *pa = row + (size_t)j * K;
                const uint16_t *pb = g->ip ? (other ? pa + image : NULL) : j + OW2 < OW ? pa + (size_t)OW2 * K : NULL;
                for (int c = 0; c < K; c += 16) {
                    const __m512i a = wide16(pa + c), b = wide16(pb ? pb + c : NULL);
                    _mm512_storeu_si512(o + c, pairs(a, b));
                    const __m512 t = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)),
                                                   _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
                    _mm512_storeu_ps(db + c, _mm512_add_ps(_mm512_loadu_ps(db + c), t));
                }
            }
        }
}

/* The next chunk's operands, fetched into L2 a few lines at a time while
 * this chunk computes: re-laying them then reads from L2, not memory. */
struct ahead {
    const char *p[2], *end[2]; /* its images of X and of dY */
    long lines;                /* cache lines in both */
    int per;                   /* lines per call of ahead_some */
};

/* Units [u0, u0 + cnt) of n images: their images' bytes of X and dY. */
static void ahead_init(struct ahead *a, const struct wg *g, int u0, int cnt, int n, const uint16_t *x,
                       const uint16_t *dy)
{
    const int i0 = g->ip ? 2 * u0 : u0;
    if (g->ip && cnt > 0) cnt = 2 * (u0 + cnt) <= n ? 2 * cnt : n - i0;
    if (cnt <= 0) { /* no next chunk */
        memset(a, 0, sizeof *a);
        return;
    }
    const size_t xb = (size_t)g->H * g->W * g->C * 2, yb = (size_t)g->OH * g->OW * g->K * 2;
    a->p[0] = (const char *)x + (size_t)i0 * xb;
    a->end[0] = a->p[0] + (size_t)cnt * xb;
    a->p[1] = (const char *)dy + (size_t)i0 * yb;
    a->end[1] = a->p[1] + (size_t)cnt * yb;
    a->lines = (long)((size_t)cnt * (xb + yb) / 64 + 2);
    a->per = 0;
}

WG_TARGET static INLINE void ahead_some(struct ahead *a)
{
    for (int q = 0; q < a->per; q++) {
        const int k = a->p[0] < a->end[0] ? 0 : 1;
        if (a->p[k] >= a->end[k]) return; /* also with no next chunk: both NULL */
        _mm_prefetch(a->p[k], _MM_HINT_T1);
        a->p[k] += 64;
    }
}

/* acc + a . the pair at p broadcast, the broadcast folded into the
 * product's load ({1to16}): GCC 12 loads it into a register first, one more
 * instruction per product where a pair feeds only one. */
WG_TARGET static INLINE __m512 dp_bcast(__m512 acc, __m512bh a, const uint32_t *p)
{
    __asm__("vdpbf16ps %[m]%{1to16%}, %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [m] "m"(*p));
    return acc;
}

/* One tile over a chunk of cnt images: taps (ky, 0..2), input channels
 * [ci0, ci0 + RC), output channels [16 cb0, 16 (cb0 + NB)); added into dw
 * (HWIO). RC NB = 8, constants where inlined. */
WG_TARGET static INLINE void tile(const int NB, const int RC, const struct wg *g, int cnt, const uint32_t *xp,
                                  const uint32_t *dyp, int ky, int ci0, int cb0, float *dw, struct ahead *pf)
{
    __m512 acc[3][8 / 1][4];
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; kx++)
#pragma GCC unroll 8
        for (int r = 0; r < RC; r++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) acc[kx][r][b] = _mm512_setzero_ps();
    const int C = g->C, K = g->K;
    const size_t xstep = (size_t)g->s * C; /* words from one pair's taps to the next's */
    for (int i = 0; i < cnt; i++)
        for (int oy = 0; oy < g->OH; oy++) {
            ahead_some(pf);
            if ((unsigned)(oy * g->s + ky - g->pad) >= (unsigned)g->H) continue; /* a row of padding: zeros */
            const uint32_t *x0 = xp + ((size_t)i * g->HP + (size_t)oy * g->s + ky) * g->WP * C + ci0;
            const uint32_t *x1 = x0 + C, *x2 = x0 + 2 * C;
            const uint32_t *d = dyp + ((size_t)i * g->OH + oy) * g->OW2 * K + (size_t)cb0 * 16;
            for (int j = 0; j < g->OW2; j++, x0 += xstep, x1 += xstep, x2 += xstep, d += K) {
                __m512bh a[4];
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) a[b] = (__m512bh)_mm512_loadu_si512(d + 16 * b);
#pragma GCC unroll 8
                for (int r = 0; r < RC && NB == 1; r++) { /* each pair read once: folded into its product */
                    acc[0][r][0] = dp_bcast(acc[0][r][0], a[0], x0 + r);
                    acc[1][r][0] = dp_bcast(acc[1][r][0], a[0], x1 + r);
                    acc[2][r][0] = dp_bcast(acc[2][r][0], a[0], x2 + r);
                }
#pragma GCC unroll 8
                for (int r = 0; r < RC && NB > 1; r++) {
                    const __m512bh p0 = (__m512bh)_mm512_set1_epi32((int)x0[r]);
                    const __m512bh p1 = (__m512bh)_mm512_set1_epi32((int)x1[r]);
                    const __m512bh p2 = (__m512bh)_mm512_set1_epi32((int)x2[r]);
#pragma GCC unroll 4
                    for (int b = 0; b < NB; b++) {
                        acc[0][r][b] = _mm512_dpbf16_ps(acc[0][r][b], a[b], p0);
                        acc[1][r][b] = _mm512_dpbf16_ps(acc[1][r][b], a[b], p1);
                        acc[2][r][b] = _mm512_dpbf16_ps(acc[2][r][b], a[b], p2);
                    }
                }
            }
        }
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; kx++)
#pragma GCC unroll 8
        for (int r = 0; r < RC; r++) {
            float *o = dw + ((size_t)(ky * 3 + kx) * C + ci0 + r) * K + (size_t)cb0 * 16;
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                _mm512_storeu_ps(o + 16 * b, _mm512_add_ps(_mm512_loadu_ps(o + 16 * b), acc[kx][r][b]));
        }
}

/* Every tile of one chunk. */
WG_TARGET static void chunk(const struct wg *g, int cnt, const uint32_t *xp, const uint32_t *dyp, float *dw,
                            struct ahead *pf)
{
    const int blocks = g->K / 16, NB = blocks % 4 == 0 ? 4 : blocks % 2 == 0 ? 2 : 1;
    const long rows = 3L * (blocks / NB) * (g->C / (8 / NB)) * cnt * g->OH; /* tile rows, ahead_some's calls */
    pf->per = (int)((pf->lines + rows - 1) / rows);
    for (int ky = 0; ky < 3; ky++)
        for (int cb = 0; cb < blocks; cb += NB)
            for (int ci = 0; ci < g->C; ci += 8 / NB) {
                if (NB == 4) tile(4, 2, g, cnt, xp, dyp, ky, ci, cb, dw, pf);
                else if (NB == 2) tile(2, 4, g, cnt, xp, dyp, ky, ci, cb, dw, pf);
                else tile(1, 8, g, cnt, xp, dyp, ky, ci, cb, dw, pf);
            }
}

int cpu_wgrad_bf16_fits(const struct dt_conv_shape *s)
{
    if (cpu_fast_kernels() != CPU_FAST_ALL || !cpu_avx512_bf16() || __builtin_cpu_supports("amx-bf16")) return 0;
    return s->kh == 3 && s->kw == 3 && (s->stride == 1 || s->stride == 2) && s->c % 16 == 0 && s->k % 16 == 0 &&
           s->c <= 4096 && s->k <= 4096;
}

size_t cpu_wgrad_bf16_scratch(const struct dt_conv_shape *s, int n, int threads)
{
    int nt;
    const struct wg g = geometry(s, n > 0 ? n : 1, threads, &nt);
    return ((size_t)nt * slice_words(&g) + (size_t)(nt - 1) * 9 * g.C * g.K) * 4 + 64;
}

void cpu_wgrad_bf16(const struct dt_conv_shape *s, int n, float *dweight, float *dbias, const void *dout,
                    const void *inp, void *scratch, int threads)
{
    const size_t nw = (size_t)9 * s->c * s->k;
    memset(dweight, 0, nw * sizeof(float));
    memset(dbias, 0, sizeof(float) * (size_t)s->k);
    if (n <= 0) return;
    int nt, used = 1;
    const struct wg g = geometry(s, n, threads, &nt);
    const int units = g.ip ? (n + 1) / 2 : n, chunks = (units + g.G - 1) / g.G;
    const size_t per = slice_words(&g);
    uint32_t *base = (uint32_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *part = (float *)(base + (size_t)nt * per); /* threads 1.. nt-1's weight gradients */
#pragma omp parallel num_threads(nt)
    {
        /* the team may be smaller than asked (OMP_DYNAMIC, OMP_THREAD_LIMIT,
         * a call from a parallel region): only its threads' sums count */
        const int me = omp_get_thread_num(), th = omp_get_num_threads();
        if (me == 0) used = th;
        float *dw = me == 0 ? dweight : part + (size_t)(me - 1) * nw;
        uint32_t *xp = base + (size_t)me * per, *dyp = xp + xp_words(&g);
        float *db = (float *)(dyp + dyp_words(&g));
        memset(db, 0, sizeof(float) * (size_t)g.K);
        if (me > 0) memset(dw, 0, nw * sizeof(float));
        for (int c = me; c < chunks; c += th) { /* round robin: fixed per thread count */
            const int i0 = c * g.G, cnt = i0 + g.G <= units ? g.G : units - i0;
            const int j0 = i0 + th * g.G, jn = j0 >= units ? 0 : j0 + g.G <= units ? g.G : units - j0; /* my next */
            struct ahead pf;
            ahead_init(&pf, &g, j0, jn, n, inp, dout);
            if (g.ip) pack_x_images(&g, i0, cnt, n, xp, inp);
            else pack_x(&g, i0, cnt, xp, inp);
            pack_dy(&g, i0, cnt, n, dyp, dout, db);
            chunk(&g, cnt, xp, dyp, dw, &pf);
        }
    }
    for (int i = 0; i < used; i++) {
        const float *db = (const float *)(base + (size_t)i * per + xp_words(&g) + dyp_words(&g));
        for (int k = 0; k < g.K; k++) dbias[k] += db[k];
    }
    for (int i = 1; i < used; i++)
        for (size_t j = 0; j < nw; j++) dweight[j] += part[(size_t)(i - 1) * nw + j];
}
#else
int cpu_wgrad_bf16_fits(const struct dt_conv_shape *s)
{
    (void)s;
    return 0;
}
size_t cpu_wgrad_bf16_scratch(const struct dt_conv_shape *s, int n, int threads)
{
    (void)s, (void)n, (void)threads;
    return 0;
}
void cpu_wgrad_bf16(const struct dt_conv_shape *s, int n, float *dweight, float *dbias, const void *dout,
                    const void *inp, void *scratch, int threads)
{
    (void)s, (void)n, (void)dweight, (void)dbias, (void)dout, (void)inp, (void)scratch, (void)threads;
}
#endif
