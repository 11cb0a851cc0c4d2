/* coll.c: the all-reduce context, shared windows, scratch, 16-bit packing,
 * and the pipelined ring that ring.c and hier.c's cross-node hop share. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "collectives/coll.h"
#include "runtime/rma.h"
#include "simd.h"

#define DEFAULT_CHUNK (256u * 1024u)
#define STAGING_BYTES (1u << 20) /* per rank: pieces stay in cache */

static const struct dt_allreduce_algo *const algos[] = {
    &dt_allreduce_auto, &dt_allreduce_mpi, &dt_allreduce_ring, &dt_allreduce_hier,
};

const struct dt_allreduce_algo *dt_allreduce_find(const char *name)
{
    for (size_t i = 0; i < sizeof algos / sizeof *algos; i++)
        if (strcmp(algos[i]->name, name) == 0) return algos[i];
    return NULL;
}

/* mine: floats in my region (count everywhere, or count on local rank 0 only).
 * Returns MPI's error code (rma.h: errors returned while the window is made);
 * 0 when it worked. */
static int shm_create_sized(struct dt_coll *c, struct dt_shm *s, size_t count, size_t mine_count)
{
    MPI_Info info;
    float *mine;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each region on its owner's NUMA node */
    memset(s, 0, sizeof *s);
    s->count = count;
    int rc = dt_rma_allocate_shared((MPI_Aint)(mine_count * sizeof(float)), (int)sizeof(float), info, c->topo.node,
                                    &mine, &s->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        memset(s, 0, sizeof *s);
        return rc;
    }
    s->peer = dt_xcalloc((size_t)c->topo.local_size, sizeof *s->peer);
    for (int j = 0; j < c->topo.local_size; j++) {
        MPI_Aint size;
        int disp;
        DT_MPI_CHECK(MPI_Win_shared_query(s->win, j, &size, &disp, &s->peer[j]));
    }
    /* One passive epoch for the window's life; MPI_Win_sync + barriers order
     * the loads and stores (the MPI-3 shared-memory idiom). */
    DT_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win));
    return 0;
}

/* After the first window worked (dt_coll_init), a failure is not the site's. */
static void shm_create_checked(struct dt_coll *c, struct dt_shm *s, size_t count, size_t mine_count)
{
    int rc = shm_create_sized(c, s, count, mine_count);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, msg, &n);
        DT_DIE("MPI_Win_allocate_shared of %zu floats failed: %s", mine_count, msg);
    }
}

static void shm_free(struct dt_shm *s)
{
    if (!s->peer) return;
    MPI_Win_unlock_all(s->win);
    MPI_Win_free(&s->win);
    free(s->peer);
    memset(s, 0, sizeof *s);
}

void dt_shm_fence(struct dt_coll *c, const struct dt_shm *s)
{
    MPI_Win_sync(s->win);
    DT_MPI_CHECK(MPI_Barrier(c->topo.node));
    MPI_Win_sync(s->win);
}

int dt_coll_init(struct dt_coll *c, MPI_Comm comm, const struct dt_coll_config *cfg, dt_status *st)
{
    char why[256] = "";
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    if (!c->cfg.algorithm) c->cfg.algorithm = "auto";
    if (!c->cfg.chunk_bytes) c->cfg.chunk_bytes = DEFAULT_CHUNK;
    if (c->cfg.chunk_bytes < sizeof(float)) c->cfg.chunk_bytes = sizeof(float);
    if (dt_topo_create(&c->topo, comm, cfg->ranks_per_node, st) != DT_OK) return st->code;
    c->algo = dt_allreduce_find(c->cfg.algorithm);
    if (!c->algo)
        dt_fail(st, DT_EUSAGE, "--allreduce: expected auto, mpi, ring or hier, found '%s'", c->cfg.algorithm);
    else if (dt_auto_load(c, st) == DT_OK && !c->algo->usable(c, why, sizeof why))
        dt_fail(st, DT_EUSAGE, "--allreduce %s: %s", c->algo->name, why);
    if (st->code == DT_OK) dt_auto_resolve(c);
    if (dt_status_agree(st, c->topo.world) != DT_OK) {
        dt_topo_free(&c->topo);
        free(c->rules);
        c->rules = NULL;
        return st->code;
    }
    /* The first shared window says whether the MPI can make them at all. */
    int rc = shm_create_sized(c, &c->staging, STAGING_BYTES / sizeof(float), STAGING_BYTES / sizeof(float)), worst;
    DT_MPI_CHECK(MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, c->topo.world));
    if (worst != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "failed on another rank";
        int n = 0;
        if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &n);
        dt_fail(st, DT_ERUNTIME, "this MPI cannot make shared-memory windows inside a node (MPI_Win_allocate_shared: "
                "%s), which dtrain's all-reduce needs; with Open MPI, keep its sm one-sided component when you name "
                "others (--mca osc sm,ucx, not --mca osc ucx)", msg);
        dt_status_agree(st, c->topo.world);
        if (rc == MPI_SUCCESS) shm_free(&c->staging); /* collective over the node: all its ranks made it */
        free(c->rules);
        c->rules = NULL;
        dt_topo_free(&c->topo);
        return st->code;
    }
    return DT_OK;
}

void dt_coll_free(struct dt_coll *c)
{
    if (!c->topo.world) return;
    for (int i = 0; i < c->nallocs; i++) {
        shm_free(c->allocs[i]);
        free(c->allocs[i]);
    }
    free(c->allocs);
    shm_free(&c->staging);
    free(c->tmp);
    free(c->packed[0]);
    free(c->packed[1]);
    free(c->rules);
    free(c->tuned);
    dt_topo_free(&c->topo);
    memset(c, 0, sizeof *c);
}

static struct dt_shm *new_alloc(struct dt_coll *c)
{
    c->allocs = realloc(c->allocs, sizeof *c->allocs * (size_t)(c->nallocs + 1));
    if (!c->allocs) DT_DIE("out of memory");
    return c->allocs[c->nallocs++] = dt_xcalloc(1, sizeof(struct dt_shm));
}

float *dt_coll_alloc(struct dt_coll *c, size_t count)
{
    struct dt_shm *s = new_alloc(c);
    shm_create_checked(c, s, count, count);
    return s->peer[c->topo.local_rank];
}

const struct dt_shm *dt_coll_alloc_node_shared(struct dt_coll *c, size_t count)
{
    struct dt_shm *s = new_alloc(c);
    shm_create_checked(c, s, count, c->topo.local_rank == 0 ? count : 0);
    s->node_shared = 1;
    return s;
}

const struct dt_shm *dt_coll_find_shm(const struct dt_coll *c, const float *p, size_t count)
{
    for (int i = 0; i < c->nallocs; i++) {
        const struct dt_shm *s = c->allocs[i];
        if (s->node_shared) continue;
        const float *base = s->peer[c->topo.local_rank];
        if (p >= base && p + count <= base + s->count) return s;
    }
    return NULL;
}

float *dt_coll_scratch(struct dt_coll *c, size_t count)
{
    if (count > c->tmp_count) {
        free(c->tmp);
        c->tmp = dt_xmalloc(sizeof(float) * count);
        c->tmp_count = count;
    }
    return c->tmp;
}

uint16_t *dt_coll_packed(struct dt_coll *c, int which, size_t count)
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

void dt_allreduce(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    c->algo->run(c, send, recv, count);
}

/* ---- 16-bit formats: round to nearest even, NaN stays NaN ------------------ */

static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t to_fp16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static inline float from_fp16(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

DT_MULTIVERSION void dt_pack16(uint16_t *restrict dst, const float *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = to_fp16(src[i]);
}

DT_MULTIVERSION void dt_unpack16_add(float *restrict dst, const uint16_t *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] += from_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] += from_fp16(src[i]);
}

DT_MULTIVERSION void dt_unpack16(float *restrict dst, const uint16_t *restrict src, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = from_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = from_fp16(src[i]);
}

DT_MULTIVERSION void dt_round16(float *buf, size_t n, int compress)
{
    if (compress == DT_COMPRESS_BF16)
        for (size_t i = 0; i < n; i++) buf[i] = from_bf16(to_bf16(buf[i]));
    else
        for (size_t i = 0; i < n; i++) buf[i] = from_fp16(to_fp16(buf[i]));
}

DT_MULTIVERSION static void add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ---- the pipelined ring ----------------------------------------------------- */

/* One ring step: send piece-by-piece segment `so` of buf to the right while
 * receiving segment `ro` from the left; reduce (add) or store what arrives.
 * Pieces are double-buffered: piece j+1 is in flight while piece j is added. */
static void ring_step(struct dt_coll *c, MPI_Comm comm, int left, int right, float *buf,
                      size_t soff, size_t slen, size_t roff, size_t rlen, size_t seg_max, int reduce,
                      int scomp, int rcomp)
{
    /* Every rank sends and receives the same number of pieces (from the
     * longest segment), so messages pair up even where segments differ by one. */
    size_t piece = c->cfg.chunk_bytes / sizeof(float);
    size_t pieces = (seg_max + piece - 1) / piece;
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}, sq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    float *tmp = reduce && !rcomp ? dt_coll_scratch(c, 2 * piece) : NULL;
    uint16_t *pin = rcomp ? dt_coll_packed(c, 0, 2 * piece) : NULL;
    uint16_t *pout = scomp ? dt_coll_packed(c, 1, 2 * piece) : NULL;

    for (size_t j = 0; j <= pieces; j++) {
        int b = (int)(j & 1);
        if (j < pieces) { /* post piece j */
            size_t ro = j * piece, so = j * piece;
            int rn = ro < rlen ? (int)(rlen - ro < piece ? rlen - ro : piece) : 0;
            int sn = so < slen ? (int)(slen - so < piece ? slen - so : piece) : 0;
            void *rbuf = rcomp ? (void *)(pin + (size_t)b * piece)
                         : reduce ? (void *)(tmp + (size_t)b * piece) : (void *)(buf + roff + ro);
            const void *sbuf = buf + soff + so;
            if (scomp) {
                dt_pack16(pout + (size_t)b * piece, buf + soff + so, (size_t)sn, scomp);
                sbuf = pout + (size_t)b * piece;
            }
            DT_MPI_CHECK(MPI_Irecv(rbuf, rn, rcomp ? MPI_UINT16_T : MPI_FLOAT, left, 77, comm, &rq[b]));
            DT_MPI_CHECK(MPI_Isend(sbuf, sn, scomp ? MPI_UINT16_T : MPI_FLOAT, right, 77, comm, &sq[b]));
        }
        if (j > 0) { /* finish piece j-1 */
            int pb = (int)((j - 1) & 1);
            size_t ro = (j - 1) * piece;
            size_t rn = ro < rlen ? (rlen - ro < piece ? rlen - ro : piece) : 0;
            DT_MPI_CHECK(MPI_Wait(&rq[pb], MPI_STATUS_IGNORE));
            if (rcomp) {
                if (reduce) dt_unpack16_add(buf + roff + ro, pin + (size_t)pb * piece, rn, rcomp);
                else dt_unpack16(buf + roff + ro, pin + (size_t)pb * piece, rn, rcomp);
            } else if (reduce) {
                add(buf + roff + ro, tmp + (size_t)pb * piece, rn);
            }
            DT_MPI_CHECK(MPI_Wait(&sq[pb], MPI_STATUS_IGNORE));
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
        dt_round16(buf + so, sl, compress);
    }
    /* All-gather: pass the owned sums around. */
    for (int s = 0; s < n - 1; s++) {
        dt_segment(count, n, ((r + 1 - s) % n + n) % n, &so, &sl);
        dt_segment(count, n, ((r - s) % n + n) % n, &ro, &rl);
        ring_step(c, comm, left, right, buf, so, sl, ro, rl, seg_max, 0, scomp, rcomp);
    }
}
