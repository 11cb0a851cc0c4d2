/* multi_worker.c: TF MultiWorkerMirroredStrategy: synchronous replicas
 * across nodes, gradients summed by the hierarchical all-reduce (shared
 * memory inside each node, a ring across nodes), buckets overlapped with
 * backward by default when the job spans nodes.
 *
 * There is no TF_CONFIG and no host list: the MPI launcher (mpirun, srun,
 * PBS's mpiexec) is the cluster specification; the "workers" are the ranks
 * and "chief" duties (printing, writing files) fall to rank 0. The machinery
 * is mirrored's (mirrored.c); only the layout check differs: any layout. */
#include "config.h"

#include "strategy/strategy.h"

const struct dt_strategy_ops dt_strategy_multi_worker = {
    .name = "multi-worker",
    .setup = dt_allreduce_strategy_setup,
    .begin = dt_allreduce_strategy_begin,
    .grads_ready = dt_allreduce_strategy_ready,
    .finish = dt_allreduce_strategy_finish,
    .teardown = dt_allreduce_strategy_teardown,
};
