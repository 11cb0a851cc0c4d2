/* topology.c: node and cross-node communicators (see topology.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "collectives/topology.h"

/* Collective. An emulated node must lie on one host: its ranks share
 * memory windows (collectives/shm.c), which MPI cannot make across hosts. */
static int check_emulated_node(struct dt_topo *t, int ranks_per_node, dt_status *st)
{
    MPI_Comm shared;
    int n, len = 0;
    DT_MPI_CHECK(MPI_Comm_split_type(t->node, MPI_COMM_TYPE_SHARED, t->local_rank, MPI_INFO_NULL, &shared));
    MPI_Comm_size(shared, &n);
    MPI_Comm_free(&shared);
    if (n != t->local_size) {
        char *names = dt_xcalloc((size_t)t->local_size, MPI_MAX_PROCESSOR_NAME);
        char mine[MPI_MAX_PROCESSOR_NAME] = "";
        MPI_Get_processor_name(mine, &len);
        DT_MPI_CHECK(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                                   t->node));
        int other = 1;
        while (other < t->local_size && !strcmp(names, names + (size_t)other * MPI_MAX_PROCESSOR_NAME)) other++;
        int first = t->rank - t->local_rank;
        dt_fail(st, DT_EUSAGE, "--ranks-per-node %d: ranks %d-%d, one emulated node, run on more than one host "
                "(rank %d on %.64s, rank %d on %.64s), which share no memory; an emulated node must fit in one host: "
                "leave --ranks-per-node out (the layout is then detected), or make it divide each host's ranks",
                ranks_per_node, first, first + t->local_size - 1, first, names,
                first + (other < t->local_size ? other : 0),
                names + (size_t)(other < t->local_size ? other : 0) * MPI_MAX_PROCESSOR_NAME);
        free(names);
    }
    return dt_status_agree(st, t->world);
}

int dt_topo_create(struct dt_topo *t, MPI_Comm comm, int ranks_per_node, dt_status *st)
{
    memset(t, 0, sizeof *t);
    st->code = DT_OK;
    DT_MPI_CHECK(MPI_Comm_dup(comm, &t->world));
    MPI_Comm_rank(t->world, &t->rank);
    MPI_Comm_size(t->world, &t->size);
    if (ranks_per_node == 0) {
        const char *env = getenv("DTRAIN_RANKS_PER_NODE");
        if (env && *env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end != '\0' || v < 1 || v > 1 << 20)
                dt_fail(st, DT_EUSAGE, "DTRAIN_RANKS_PER_NODE: expected a positive integer, found '%s'", env);
            else ranks_per_node = (int)v;
        }
    }
    if (st->code == DT_OK && ranks_per_node > t->size)
        dt_fail(st, DT_EUSAGE, "--ranks-per-node: %d is more than the %d ranks of the job", ranks_per_node, t->size);
    if (dt_status_agree(st, t->world) != DT_OK) {
        MPI_Comm_free(&t->world);
        memset(t, 0, sizeof *t); /* so dt_topo_free has nothing to do */
        return st->code;
    }
    if (ranks_per_node > 0) {
        t->emulated = 1;
        DT_MPI_CHECK(MPI_Comm_split(t->world, t->rank / ranks_per_node, t->rank, &t->node));
    } else {
        DT_MPI_CHECK(MPI_Comm_split_type(t->world, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &t->node));
    }
    MPI_Comm_rank(t->node, &t->local_rank);
    MPI_Comm_size(t->node, &t->local_size);
    if (t->emulated && check_emulated_node(t, ranks_per_node, st) != DT_OK) {
        MPI_Comm_free(&t->node);
        MPI_Comm_free(&t->world);
        memset(t, 0, sizeof *t);
        return st->code;
    }
    DT_MPI_CHECK(MPI_Comm_split(t->world, t->local_rank, t->rank, &t->cross));
    MPI_Comm_size(t->cross, &t->nnodes); /* local rank 0 exists on every node */
    MPI_Comm_rank(t->cross, &t->node_index);
    /* Local rank 0's cross communicator spans all nodes: its index is the node's. */
    int leader_index = t->local_rank == 0 ? t->node_index : 0;
    DT_MPI_CHECK(MPI_Bcast(&leader_index, 1, MPI_INT, 0, t->node));
    t->node_index = leader_index;
    DT_MPI_CHECK(MPI_Allreduce(&t->local_size, &t->min_local, 1, MPI_INT, MPI_MIN, t->world));
    DT_MPI_CHECK(MPI_Allreduce(&t->local_size, &t->max_local, 1, MPI_INT, MPI_MAX, t->world));
    int leaders = t->local_rank == 0, nodes;
    DT_MPI_CHECK(MPI_Allreduce(&leaders, &nodes, 1, MPI_INT, MPI_SUM, t->world));
    t->nnodes = nodes;
    t->uniform = t->min_local == t->max_local;
    t->node_of = dt_xcalloc((size_t)t->size, sizeof(int));
    t->node_size = dt_xcalloc((size_t)t->nnodes, sizeof(int));
    DT_MPI_CHECK(MPI_Allgather(&t->node_index, 1, MPI_INT, t->node_of, 1, MPI_INT, t->world));
    for (int r = 0; r < t->size; r++) t->node_size[t->node_of[r]]++;
    return DT_OK;
}

void dt_topo_free(struct dt_topo *t)
{
    if (!t->world) return;
    MPI_Comm_free(&t->cross);
    MPI_Comm_free(&t->node);
    MPI_Comm_free(&t->world);
    free(t->node_of);
    free(t->node_size);
    memset(t, 0, sizeof *t);
}

void dt_topo_describe(const struct dt_topo *t, char *buf, int len)
{
    if (t->uniform)
        snprintf(buf, (size_t)len, "%d node%s x %d rank%s%s", t->nnodes, t->nnodes == 1 ? "" : "s",
                 t->local_size, t->local_size == 1 ? "" : "s", t->emulated ? " (emulated)" : "");
    else {
        int k = snprintf(buf, (size_t)len, "%d nodes of ", t->nnodes);
        for (int i = 0; i < t->nnodes && k < len; i++)
            k += snprintf(buf + k, (size_t)(len - k), "%s%d", i ? "+" : "", t->node_size[i]);
        if (k < len) snprintf(buf + k, (size_t)(len - k), " ranks%s", t->emulated ? " (emulated)" : "");
    }
}
