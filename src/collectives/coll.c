/* coll.c: the all-reduce context and the registry of algorithms.
 *
 * dt_coll_init checks the configured algorithm against the layout, reads
 * auto's table and makes the first node-shared window (shm.c), which says
 * whether this MPI can make them at all; dt_allreduce runs the configured
 * algorithm. The one design decision: the registry names every algorithm,
 * and no algorithm calls back into this file (what they share lives in
 * shm.c and ring.c), so the dependencies run one way. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "runtime/checks.h"
#include "runtime/fault.h"

/* The ring's pieces (coll.h) */
#define SHM_CHUNK (256u * 1024u)
#define SHM_DEPTH 2
#define NET_CHUNK (63u * 1024u)
#define NET_DEPTH 8
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

int dt_coll_init(struct dt_coll *c, MPI_Comm comm, const struct dt_coll_config *cfg, dt_status *st)
{
    char why[256] = "";
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    if (!c->cfg.algorithm) c->cfg.algorithm = "auto";
    if (dt_topo_create(&c->topo, comm, cfg->ranks_per_node, st) != DT_OK) return st->code;
    int network = c->topo.nnodes > 1 && !c->topo.emulated;
    if (!c->cfg.chunk_bytes) c->cfg.chunk_bytes = network ? NET_CHUNK : SHM_CHUNK;
    if (c->cfg.chunk_bytes < sizeof(float)) c->cfg.chunk_bytes = sizeof(float);
    c->cfg.chunk_bytes -= c->cfg.chunk_bytes % sizeof(float);
    if (c->cfg.ring_depth < 1) c->cfg.ring_depth = network ? NET_DEPTH : SHM_DEPTH;
    if (c->cfg.ring_depth > DT_RING_MAX_DEPTH) c->cfg.ring_depth = DT_RING_MAX_DEPTH;
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
    int rc = dt_shm_create(c, &c->staging, STAGING_BYTES / sizeof(float), STAGING_BYTES / sizeof(float)), worst;
    DT_MPI_CHECK(MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, c->topo.world));
    if (worst != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "failed on another rank";
        int n = 0;
        if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &n);
        dt_fail(st, DT_ERUNTIME, "this MPI cannot make shared-memory windows inside a node (MPI_Win_allocate_shared: "
                "%s), which dtrain's all-reduce needs; with Open MPI, keep its sm one-sided component when you name "
                "others (--mca osc sm,ucx, not --mca osc ucx)", msg);
        dt_status_agree(st, c->topo.world);
        if (rc == MPI_SUCCESS) dt_shm_free(&c->staging); /* collective over the node: all its ranks made it */
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
        dt_shm_free(c->allocs[i]);
        free(c->allocs[i]);
    }
    free(c->allocs);
    dt_shm_free(&c->staging);
    free(c->tmp);
    free(c->packed[0]);
    free(c->packed[1]);
    free(c->rules);
    free(c->tuned);
    dt_topo_free(&c->topo);
    memset(c, 0, sizeof *c);
}

void dt_allreduce(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    dt_fault_slow_allreduce(c->algo->name); /* inert outside the tests */
    c->algo->run(c, send, recv, count);
}
