/* ring.c: reduce-scatter then all-gather around a ring of ranks, over
 * point-to-point MPI, chunked and pipelined; the "ring" algorithm runs it
 * over all ranks and hier.c over one rank per node.
 *
 * Each segment is summed by one path and then copied, so all ranks hold the
 * same bits. Moves 2(n-1)/n of the buffer per rank: bandwidth-optimal.
 * Pieces are double-buffered so one is in flight while the other is added.
 * With --allreduce-compress a hop carries fp16 or bf16 (runtime/half.h's
 * rounding) and sums stay float32; the owner of a segment rounds its sum
 * as its peers receive it, so compressed and plain hops deliver the same
 * bits. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll.h"
#include "runtime/checks.h"
#include "runtime/half.h"
#include "simd.h"

/* ---- scratch for the pieces in flight ------------------------------------- */

static float *scratch(struct dt_coll *c, size_t count)
{
    if (count > c->tmp_count) {
        free(c->tmp);
        c->tmp = dt_xmalloc(sizeof(float) * count);
        c->tmp_count = count;
    }
    return c->tmp;
}

static uint16_t *packed(struct dt_coll *c, int which, size_t count)
{
    if (count > c->packed_count) {
        for (int i = 0; i < 2; i++) {
            free(c->packed[i]);
            c->packed[i] = dt_xmalloc(sizeof(uint16_t) * count);
        }
        c->packed_count = count;
    }
    return c->packed[which];
}

/* ---- 16-bit transport: round to nearest even, NaN stays NaN -------------- */

DT_MULTIVERSION static void pack16(uint16_t *restrict dst, const float *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = dt_f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = dt_f32_to_f16(src[i]);
}

DT_MULTIVERSION static void unpack16_add(float *restrict dst, const uint16_t *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] += dt_bf16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] += dt_f16_to_f32(src[i]);
}

DT_MULTIVERSION static void unpack16(float *restrict dst, const uint16_t *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = dt_f16_to_f32(src[i]);
}

DT_MULTIVERSION static void round16(float *buf, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) buf[i] = dt_bf16_to_f32(dt_f32_to_bf16(buf[i]));
    else
        for (size_t i = 0; i < n; i++) buf[i] = dt_f16_to_f32(dt_f32_to_f16(buf[i]));
}

DT_MULTIVERSION static void add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Wait for one request: MPI_Wait, or with c->polite MPI_Test with sleeps
 * growing from 2 to 100 us (a slow link moves little in 100 us; the core
 * meanwhile runs backward). */
static void wait_one(const struct dt_coll *c, MPI_Request *req)
{
    if (!c->polite) {
        DT_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
        return;
    }
    long ns = 2000;
    for (;;) {
        int done = 0;
        DT_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = ns < 50000 ? 2 * ns : 100000;
    }
}

/* ---- the pipelined ring ----------------------------------------------------- */

/* One ring step: send piece-by-piece segment `so` of buf to the right while
 * receiving segment `ro` from the left; reduce (add) or store what arrives.
 * c->cfg.ring_depth pieces are in flight while the oldest is added (coll.h
 * says why across nodes they are small and many). The order of additions
 * per element is the same at any piece size and depth, so the bits are too. */
static void ring_step(struct dt_coll *c, MPI_Comm comm, int left, int right, float *buf,
                      size_t soff, size_t slen, size_t roff, size_t rlen, size_t seg_max, int reduce,
                      int scomp, int rcomp)
{
    /* Every rank sends and receives the same number of pieces (from the
     * longest segment), so messages pair up even where segments differ by one. */
    const size_t D = (size_t)c->cfg.ring_depth;
    size_t piece = c->cfg.chunk_bytes / sizeof(float);
    size_t pieces = (seg_max + piece - 1) / piece;
    MPI_Request rq[DT_RING_MAX_DEPTH], sq[DT_RING_MAX_DEPTH];
    for (size_t i = 0; i < D; i++) rq[i] = sq[i] = MPI_REQUEST_NULL;
    float *tmp = reduce && !rcomp ? scratch(c, D * piece) : NULL;
    uint16_t *pin = rcomp ? packed(c, 0, D * piece) : NULL;
    uint16_t *pout = scomp ? packed(c, 1, D * piece) : NULL;

    for (size_t j = 0; j < pieces + D - 1; j++) {
        if (j < pieces) { /* post piece j */
            size_t b = j % D, ro = j * piece, so = j * piece;
            int rn = ro < rlen ? (int)(rlen - ro < piece ? rlen - ro : piece) : 0;
            int sn = so < slen ? (int)(slen - so < piece ? slen - so : piece) : 0;
            void *rbuf = rcomp ? (void *)(pin + b * piece)
                         : reduce ? (void *)(tmp + b * piece) : (void *)(buf + roff + ro);
            const void *sbuf = buf + soff + so;
            if (scomp) {
                pack16(pout + b * piece, buf + soff + so, (size_t)sn, scomp);
                sbuf = pout + b * piece;
            }
            DT_MPI_CHECK(MPI_Irecv(rbuf, rn, rcomp ? MPI_UINT16_T : MPI_FLOAT, left, 77, comm, &rq[b]));
            DT_MPI_CHECK(MPI_Isend(sbuf, sn, scomp ? MPI_UINT16_T : MPI_FLOAT, right, 77, comm, &sq[b]));
        }
        if (j + 1 >= D) { /* finish piece j-D+1 */
            size_t k = j + 1 - D, pb = k % D, ro = k * piece;
            size_t rn = ro < rlen ? (rlen - ro < piece ? rlen - ro : piece) : 0;
            wait_one(c, &rq[pb]);
            if (rcomp) {
                if (reduce) unpack16_add(buf + roff + ro, pin + pb * piece, rn, rcomp);
                else unpack16(buf + roff + ro, pin + pb * piece, rn, rcomp);
            } else if (reduce) {
                add(buf + roff + ro, tmp + pb * piece, rn);
            }
            wait_one(c, &sq[pb]);
        }
    }
}

void dt_ring_allreduce(struct dt_coll *c, MPI_Comm comm, float *buf, size_t count, int compress,
                       int cross_only)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    if (n == 1 || count == 0) return;
    int left = (r - 1 + n) % n, right = (r + 1) % n;
    /* Per hop: compressed unless cross_only and the neighbour shares my node
     * (comm is then the world, whose ranks topo.node_of maps). */
    int scomp = compress, rcomp = compress;
    if (cross_only && compress) {
        const int *node = c->topo.node_of;
        scomp = node[right] != node[r] ? compress : 0;
        rcomp = node[left] != node[r] ? compress : 0;
    }
    size_t so, sl, ro, rl, seg_max = (count + (size_t)n - 1) / (size_t)n;
    /* Reduce-scatter: after n-1 steps rank r owns the sum of segment r+1. */
    for (int s = 0; s < n - 1; s++) {
        dt_segment(count, n, ((r - s) % n + n) % n, &so, &sl);
        dt_segment(count, n, ((r - s - 1) % n + n) % n, &ro, &rl);
        ring_step(c, comm, left, right, buf, so, sl, ro, rl, seg_max, 1, scomp, rcomp);
    }
    if (compress) { /* the owner keeps exactly what its peers will receive, so
                     * compressed and plain hops alike deliver the same bits */
        dt_segment(count, n, (r + 1) % n, &so, &sl);
        round16(buf + so, sl, compress);
    }
    /* All-gather: pass the owned sums around. */
    for (int s = 0; s < n - 1; s++) {
        dt_segment(count, n, ((r + 1 - s) % n + n) % n, &so, &sl);
        dt_segment(count, n, ((r - s) % n + n) % n, &ro, &rl);
        ring_step(c, comm, left, right, buf, so, sl, ro, rl, seg_max, 0, scomp, rcomp);
    }
}

/* ---- the algorithm --------------------------------------------------------- */

static int ring_usable(const struct dt_coll *c, char *why, size_t len)
{
    (void)c; (void)why; (void)len;
    return 1;
}

static void ring_run(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    if (send != recv && count) memcpy(recv, send, sizeof(float) * count);
    dt_ring_allreduce(c, c->topo.world, recv, count, c->cfg.compress, c->cfg.compress_cross_only);
}

const struct dt_allreduce_algo dt_allreduce_ring = {.name = "ring", .usable = ring_usable, .run = ring_run};
