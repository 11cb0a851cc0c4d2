/* nccl.h: the device all-reduce of the CUDA backend (built with --with-cuda).
 *
 * The gradient block lives in GPU memory and is reduced in buckets, as
 * reducer.h does on the CPU, but without a thread: every bucket is queued on
 * a dedicated communication stream that waits (cudaStreamWaitEvent) for the
 * event the compute stream recorded when backward finished the bucket, and
 * the compute stream waits for the communication stream before the
 * optimizer. Inside a node: NCCL reduce-scatter, then all-gather, in a padded
 * work buffer (16-bit with --grad-compression). Across nodes, between the
 * two: MPI_Allreduce of each rank's shard over the cross-node communicator,
 * on device memory when the MPI library is CUDA-aware (MPIX_Query_cuda_support,
 * or DTRAIN_CUDA_AWARE_MPI=0/1), otherwise staged through pinned host memory.
 * A small fp32 tail (the step's loss and accuracy sums) is reduced exactly.
 * NCCL is set up by broadcasting rank 0's unique id over the node. */
#ifndef DT_NCCL_H
#define DT_NCCL_H

#include <stddef.h>

#include "collectives/topology.h"
#include "runtime/status.h"

struct dt_nccl;

/* Collective over topo->world. buf[count] is the gradient block on the device,
 * tail[ntail] the exact fp32 sums; bounds as dt_reducer_init's; compress is
 * enum dt_compress (16-bit inside the node; fp32 across nodes). Returns NULL
 * with st filled on failure (agreed on by all ranks). */
struct dt_nccl *dt_nccl_create(const struct dt_topo *topo, float *buf, size_t count, float *tail,
                               int ntail, const size_t *bounds, int nbounds, size_t bucket_bytes,
                               int compress, dt_status *st);
void dt_nccl_free(struct dt_nccl *r);
void dt_nccl_begin(struct dt_nccl *r);
/* Gradients from offset to the end are final on the compute stream. */
void dt_nccl_ready(struct dt_nccl *r, size_t offset);
/* Queue what is left; the compute stream then waits for the sums. */
void dt_nccl_finish(struct dt_nccl *r);
int dt_nccl_buckets(const struct dt_nccl *r);
/* 1 when cross-node transfers use device memory directly. */
int dt_nccl_cuda_aware(const struct dt_nccl *r);

#endif
