/* topology.h: where the ranks are: nodes, and ranks per node.
 *
 * The world splits into a node communicator (ranks sharing memory, from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) and a cross-node communicator
 * (the ranks with the same local index on every node). --ranks-per-node K
 * (or DTRAIN_RANKS_PER_NODE) overrides the detection: consecutive blocks of K
 * ranks act as nodes, so one host can emulate several for tests and scaling
 * studies. An emulated "node" is still one host, so shared memory works. */
#ifndef DT_TOPOLOGY_H
#define DT_TOPOLOGY_H

#include <mpi.h>

#include "runtime/status.h"

struct dt_topo {
    MPI_Comm world;      /* duplicate of the communicator given */
    MPI_Comm node;       /* ranks on my node */
    MPI_Comm cross;      /* ranks with my local index, one per node */
    int rank, size;
    int local_rank, local_size;
    int node_index, nnodes;
    int uniform;         /* every node has the same number of ranks */
    int emulated;        /* layout from --ranks-per-node, not detected */
    int min_local, max_local;
    int *node_of;        /* [size] node index of every world rank */
    int *node_size;      /* [nnodes] ranks on each node */
};

/* Collective. ranks_per_node 0 = detect (or DTRAIN_RANKS_PER_NODE). */
int dt_topo_create(struct dt_topo *t, MPI_Comm comm, int ranks_per_node, dt_status *st);
void dt_topo_free(struct dt_topo *t);
/* "2 nodes x 2 ranks" or "2 nodes of 4+2 ranks", "(emulated)" when so */
void dt_topo_describe(const struct dt_topo *t, char *buf, int len);

#endif
