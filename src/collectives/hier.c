/* hier.c: hierarchical all-reduce: shared memory inside the node, MPI
 * across nodes.
 *
 *  1. intra-node reduce-scatter through an MPI-3 shared window: local rank i
 *     sums slice i straight from its peers' regions (ranks 0..L-1 in order);
 *  2. cross-node all-reduce of slice i among the ranks with local index i
 *     (the pipelined ring on the cross communicator), all local ranks busy at
 *     once, as NCCL and Horovod do;
 *  3. intra-node all-gather: every rank copies the other slices from their
 *     owners' regions.
 * Buffers from dt_coll_alloc are already in a window and are used in place;
 * other buffers go through the staging window in cache-sized pieces. Data
 * inside the node moves through shared memory, never compressed; only the
 * cross-node hop carries 16-bit gradients. On GPUs steps 1 and 3 become NCCL
 * (the GPU issue) behind the same interface. Needs the same number of ranks
 * on every node. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "runtime/status.h"
#include "collectives/coll.h"
#include "simd.h"

#define MAX_LOCAL 256

static int hier_usable(const struct dt_coll *c, char *why, size_t len)
{
    char layout[128];
    if (c->topo.local_size > MAX_LOCAL) {
        snprintf(why, len, "supports up to %d ranks per node, this node has %d", MAX_LOCAL, c->topo.local_size);
        return 0;
    }
    if (c->topo.uniform) return 1;
    dt_topo_describe(&c->topo, layout, sizeof layout);
    snprintf(why, len, "needs the same number of ranks on every node, this job has %s; use ring or mpi", layout);
    return 0;
}

/* dst = sum over j of src[j][off..off+n), j in rank order: the same order on
 * every node, so the result does not depend on who computes it. dst is one
 * of the sources (my own slice): each element is read before it is written. */
DT_MULTIVERSION static void sum_peers(float *dst, float *const *src, int nsrc, size_t off, size_t n)
{
    const float *a = src[0] + off;
    if (nsrc == 2) {
        const float *b = src[1] + off;
        for (size_t k = 0; k < n; k++) dst[k] = a[k] + b[k];
        return;
    }
    for (size_t k = 0; k < n; k++) {
        float acc = a[k];
        for (int j = 1; j < nsrc; j++) acc += src[j][off + k];
        dst[k] = acc;
    }
}

/* One pass over n floats that sit at offset `at` of every local rank's region
 * of s; the result ends in `out` (my region, or elsewhere). */
static void hier_pass(struct dt_coll *c, const struct dt_shm *s, size_t at, size_t n, float *out)
{
    const int L = c->topo.local_size, me = c->topo.local_rank;
    float *region[MAX_LOCAL], *mine = s->peer[me] + at;
    size_t off, len;
    for (int j = 0; j < L; j++) region[j] = s->peer[j] + at;
    dt_segment(n, L, me, &off, &len);

    dt_shm_fence(c, s);                          /* everyone's input is in place */
    sum_peers(mine + off, region, L, off, len);  /* my slice of the node's sum */
    if (c->topo.nnodes > 1)
        dt_ring_allreduce(c, c->topo.cross, mine + off, len, c->cfg.compress, 0);
    dt_shm_fence(c, s);                          /* every slice is final */
    for (int j = 0; j < L; j++) {
        size_t o, l;
        dt_segment(n, L, j, &o, &l);
        if (j != me || out != mine) memcpy(out + o, region[j] + o, sizeof(float) * l);
    }
    dt_shm_fence(c, s);                          /* nobody reads my region any more */
}

static void hier_run(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    if (count == 0) return;
    const struct dt_shm *s = dt_coll_find_shm(c, recv, count);
    if (s && send == recv) { /* zero copy: the data already lives in the window */
        hier_pass(c, s, (size_t)(recv - s->peer[c->topo.local_rank]), count, recv);
        return;
    }
    s = &c->staging;
    float *mine = s->peer[c->topo.local_rank];
    for (size_t at = 0; at < count; at += s->count) {
        size_t n = count - at < s->count ? count - at : s->count;
        memcpy(mine, send + at, sizeof(float) * n);
        hier_pass(c, s, 0, n, recv + at);
    }
}

const struct dt_allreduce_algo dt_allreduce_hier = {.name = "hier", .usable = hier_usable, .run = hier_run};
