/* mpi.c: the baseline, MPI_Allreduce. Its reduction order is the library's,
 * fixed for a communicator, so every rank gets the same bits. It has no
 * 16-bit transport, so it refuses compression. */
#include "config.h"

#include <limits.h>
#include <stdio.h>

#include "runtime/checks.h"
#include "collectives/coll.h"

static int mpi_usable(const struct dt_coll *c, char *why, size_t len)
{
    if (c->cfg.compress == DT_COMPRESS_NONE) return 1;
    snprintf(why, len, "MPI_Allreduce cannot carry 16-bit gradients; use ring, hier or auto with --grad-compression");
    return 0;
}

static void mpi_run(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    const float *s = send;
    float *r = recv;
    while (count > 0) { /* MPI counts are int */
        int n = count > INT_MAX ? INT_MAX : (int)count;
        DT_MPI_CHECK(MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, n, MPI_FLOAT, MPI_SUM, c->topo.world));
        s += n;
        r += n;
        count -= (size_t)n;
    }
}

const struct dt_allreduce_algo dt_allreduce_mpi = {.name = "mpi", .usable = mpi_usable, .run = mpi_run};
