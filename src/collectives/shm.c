/* shm.c: the node-shared MPI-3 windows of a dt_coll: made, handed out by
 * dt_coll_alloc, found again by address, fenced and freed.
 *
 * Every local rank maps every other's region, so the hierarchical
 * algorithm reads peers' data in place and the central-storage strategy
 * keeps one copy of the model per node. The one design decision: a window
 * is made with errors returned (runtime/rma.h), so dt_coll_init can tell a
 * site whose MPI cannot make them at all (a message naming the fix) from a
 * failure once the first one worked (DT_DIE). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "runtime/checks.h"
#include "runtime/rma.h"

int dt_shm_create(struct dt_coll *c, struct dt_shm *s, size_t count, size_t mine_count)
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
    int rc = dt_shm_create(c, s, count, mine_count);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, msg, &n);
        DT_DIE("MPI_Win_allocate_shared of %zu floats failed: %s", mine_count, msg);
    }
}

void dt_shm_free(struct dt_shm *s)
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
