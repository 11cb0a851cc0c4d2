/* nccl.c: the device all-reduce (see nccl.h). */
#include "config.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif

#include "runtime/checks.h"
#include "collectives/coll.h"
#include "collectives/nccl.h"
#include "collectives/reducer.h"
#include "gpu/gpu.h"

#define CUDA_OK(call)                                                                                  \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) DT_DIE("%s: %s", #call, cudaGetErrorString(e_));                        \
    } while (0)
#define NCCL_OK(call)                                                                                  \
    do {                                                                                               \
        ncclResult_t r_ = (call);                                                                      \
        if (r_ != ncclSuccess) DT_DIE("%s: %s", #call, ncclGetErrorString(r_));                        \
    } while (0)

struct dt_nccl {
    const struct dt_topo *topo;
    int L, lr, nnodes;          /* ranks on my node, my index there, nodes */
    ncclComm_t comm;            /* the node's ranks; NULL when alone on the node */
    cudaStream_t stream, compute;
    cudaEvent_t *ready;         /* [nbuckets] recorded on the compute stream */
    cudaEvent_t done;
    float *buf, *tail;
    size_t count;
    int ntail;
    int nbuckets, launched;
    size_t *start;              /* bucket b is [start[b+1], start[b]), as in reducer.c */
    size_t *woff;               /* [nbuckets] element offset of bucket b in work (padded to L) */
    void *work;                 /* device: padded copy of the buckets (fp32 or 16-bit) */
    float *scratch;             /* device: fp32 shard of a 16-bit bucket for the cross-node sum */
    float *host;                /* pinned staging for a non-CUDA-aware MPI */
    size_t max_shard;
    int compress, elem, cuda_aware;
    int active;                 /* more than one rank: there is something to sum */
};

static int query_cuda_aware(void)
{
    const char *env = getenv("DTRAIN_CUDA_AWARE_MPI");
    if (env && *env) return atoi(env) != 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support();
#else
    return 0;
#endif
}

/* Sum n floats at dev (device memory) over the cross-node communicator. The
 * stream must have finished writing dev: the caller synchronized it. */
static void cross_sum_f32(struct dt_nccl *r, float *dev, size_t n)
{
    if (r->cuda_aware) {
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, dev, (int)n, MPI_FLOAT, MPI_SUM, r->topo->cross));
        return;
    }
    CUDA_OK(cudaMemcpyAsync(r->host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, r->stream));
    CUDA_OK(cudaStreamSynchronize(r->stream));
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, r->host, (int)n, MPI_FLOAT, MPI_SUM, r->topo->cross));
    CUDA_OK(cudaMemcpyAsync(dev, r->host, n * sizeof(float), cudaMemcpyHostToDevice, r->stream));
}

static void launch(struct dt_nccl *r, int b)
{
    size_t a = r->start[b + 1], m = r->start[b] - a;
    size_t chunk = (m + (size_t)r->L - 1) / (size_t)r->L;
    char *w = (char *)r->work + r->woff[b] * (size_t)r->elem;
    char *mine = w + (size_t)r->lr * chunk * (size_t)r->elem;
    ncclDataType_t type = r->compress == DT_COMPRESS_FP16 ? ncclHalf
                          : r->compress == DT_COMPRESS_BF16 ? ncclBfloat16 : ncclFloat;
    CUDA_OK(cudaStreamWaitEvent(r->stream, r->ready[b], 0));
    if (r->compress) dt_gpu_to16(w, r->buf + a, m, r->compress, r->stream);
    else CUDA_OK(cudaMemcpyAsync(w, r->buf + a, m * sizeof(float), cudaMemcpyDeviceToDevice, r->stream));
    if (r->comm) NCCL_OK(ncclReduceScatter(w, mine, chunk, type, ncclSum, r->comm, r->stream));
    if (r->nnodes > 1) {
        if (r->compress) dt_gpu_from16(r->scratch, mine, chunk, r->compress, r->stream);
        CUDA_OK(cudaStreamSynchronize(r->stream)); /* MPI reads what the stream wrote */
        cross_sum_f32(r, r->compress ? r->scratch : (float *)mine, chunk);
        if (r->compress) dt_gpu_to16(mine, r->scratch, chunk, r->compress, r->stream);
    }
    if (r->comm) NCCL_OK(ncclAllGather(mine, w, chunk, type, r->comm, r->stream));
    if (r->compress) dt_gpu_from16(r->buf + a, w, m, r->compress, r->stream);
    else CUDA_OK(cudaMemcpyAsync(r->buf + a, w, m * sizeof(float), cudaMemcpyDeviceToDevice, r->stream));
}

struct dt_nccl *dt_nccl_create(const struct dt_topo *topo, float *buf, size_t count, float *tail,
                               int ntail, const size_t *bounds, int nbounds, size_t bucket_bytes,
                               int compress, dt_status *st)
{
    struct dt_nccl *r = dt_xcalloc(1, sizeof *r);
    r->topo = topo;
    r->L = topo->local_size;
    r->lr = topo->local_rank;
    r->nnodes = topo->nnodes;
    r->buf = buf;
    r->count = count;
    r->tail = tail;
    r->ntail = ntail;
    /* 16-bit only where NCCL moves it: alone on a node, the cross-node sum
     * is fp32 anyway and a 16-bit round trip would only lose precision. */
    r->compress = topo->local_size > 1 ? compress : DT_COMPRESS_NONE;
    r->elem = r->compress ? 2 : 4;
    r->cuda_aware = query_cuda_aware();
    r->compute = (cudaStream_t)dt_gpu_stream();
    st->code = DT_OK;
    if (!topo->uniform)
        dt_fail(st, DT_EUSAGE, "--device cuda: nodes have different rank counts (%d to %d); the device "
                "all-reduce needs the same number of ranks (GPUs) on every node", topo->min_local, topo->max_local);
    if (dt_status_agree(st, topo->world) != DT_OK) {
        free(r);
        return NULL;
    }

    /* Buckets exactly as the CPU reducer cuts them. */
    int n = dt_buckets_cut(count, bounds, nbounds, bucket_bytes, &r->start);
    r->active = topo->size > 1; /* alone, a sum is the identity */
    r->nbuckets = r->active ? n : 0;
    r->launched = r->nbuckets;
    r->woff = dt_xcalloc((size_t)n + 1, sizeof(size_t));
    size_t total = 0;
    for (int b = 0; b < r->nbuckets; b++) {
        size_t chunk = (r->start[b] - r->start[b + 1] + (size_t)r->L - 1) / (size_t)r->L;
        r->woff[b] = total;
        total += chunk * (size_t)r->L;
        if (chunk > r->max_shard) r->max_shard = chunk;
    }
    if (r->ntail > 0 && (size_t)r->ntail > r->max_shard) r->max_shard = (size_t)r->ntail;
    if (!r->active) return r;

    CUDA_OK(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    r->ready = dt_xcalloc((size_t)r->nbuckets, sizeof *r->ready);
    for (int b = 0; b < r->nbuckets; b++) CUDA_OK(cudaEventCreateWithFlags(&r->ready[b], cudaEventDisableTiming));
    if (total > 0) { /* none when the model has no parameters: only the tail is summed */
        CUDA_OK(cudaMalloc(&r->work, total * (size_t)r->elem));
        /* On the communication stream: it is non-blocking, so a cudaMemset on the
         * legacy default stream would not be ordered before the first bucket. */
        CUDA_OK(cudaMemsetAsync(r->work, 0, total * (size_t)r->elem, r->stream)); /* padding stays zero */
    }
    if (r->nnodes > 1) {
        if (r->compress) CUDA_OK(cudaMalloc((void **)&r->scratch, r->max_shard * sizeof(float)));
        if (!r->cuda_aware) CUDA_OK(cudaMallocHost((void **)&r->host, r->max_shard * sizeof(float)));
    }
    if (r->L > 1) {
        ncclUniqueId id;
        if (r->lr == 0) NCCL_OK(ncclGetUniqueId(&id));
        DT_MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, topo->node));
        /* A rank that fails here cannot tell its peers, which wait inside
         * the same call: abort the job (with the reason) rather than hang. */
        ncclResult_t rc = ncclCommInitRank(&r->comm, r->L, id, r->lr);
        if (rc != ncclSuccess)
            DT_DIE("--device cuda: NCCL setup on node %d (%d ranks) failed: %s", topo->node_index, r->L,
                   ncclGetErrorString(rc));
    }
    if (dt_status_agree(st, topo->world) != DT_OK) {
        dt_nccl_free(r);
        return NULL;
    }
    return r;
}

void dt_nccl_free(struct dt_nccl *r)
{
    if (!r) return;
    if (r->comm) ncclCommDestroy(r->comm);
    if (r->stream) {
        cudaStreamSynchronize(r->stream);
        for (int b = 0; b < r->nbuckets; b++) cudaEventDestroy(r->ready[b]);
        cudaEventDestroy(r->done);
        cudaStreamDestroy(r->stream);
    }
    cudaFree(r->work);
    cudaFree(r->scratch);
    cudaFreeHost(r->host);
    free(r->ready);
    free(r->start);
    free(r->woff);
    free(r);
}

void dt_nccl_begin(struct dt_nccl *r) { r->launched = 0; }

void dt_nccl_ready(struct dt_nccl *r, size_t offset)
{
    while (r->launched < r->nbuckets && offset <= r->start[r->launched + 1]) {
        CUDA_OK(cudaEventRecord(r->ready[r->launched], r->compute));
        launch(r, r->launched++);
    }
}

void dt_nccl_finish(struct dt_nccl *r)
{
    if (!r->active) return;
    dt_nccl_ready(r, 0);
    if (r->ntail > 0) { /* after the last bucket, so its event covers the tail's writes too */
        if (r->comm) NCCL_OK(ncclAllReduce(r->tail, r->tail, (size_t)r->ntail, ncclFloat, ncclSum, r->comm, r->stream));
        if (r->nnodes > 1) {
            CUDA_OK(cudaStreamSynchronize(r->stream));
            cross_sum_f32(r, r->tail, (size_t)r->ntail);
        }
    }
    CUDA_OK(cudaEventRecord(r->done, r->stream));
    CUDA_OK(cudaStreamWaitEvent(r->compute, r->done, 0));
}

int dt_nccl_buckets(const struct dt_nccl *r) { return r ? r->nbuckets : 0; }
int dt_nccl_cuda_aware(const struct dt_nccl *r) { return r ? r->cuda_aware : 0; }
