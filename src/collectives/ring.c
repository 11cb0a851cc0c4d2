/* ring.c: reduce-scatter then all-gather around a ring of all ranks, over
 * point-to-point MPI, chunked and pipelined (coll.c's dt_ring_allreduce).
 * Each segment is summed by one path and then copied, so all ranks hold the
 * same bits. Moves 2(n-1)/n of the buffer per rank: bandwidth-optimal. */
#include "config.h"

#include <string.h>

#include "collectives/coll.h"

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
