/* gpu_device.cu: finding, describing and selecting the one device this
 * process drives, and the stream and library handles every op uses.
 *
 * Failures here are the user's environment (no driver, no device, a
 * CUDA_VISIBLE_DEVICES that hides it), so they come back as a reason string
 * for the caller to report, never as an abort. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "gpu/gpu_internal.h"

/* Device names are up to 255 bytes; ours hold 95 (as printf's %.95s would). */
static void copy_name(char *dst, size_t len, const char *src)
{
    size_t n = strnlen(src, len - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

extern "C" int dt_gpu_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why && whylen) snprintf(why, whylen, "%s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* not sticky; clear it for later calls */
        return 0;
    }
    if (n == 0 && why && whylen) snprintf(why, whylen, "the CUDA runtime sees no device");
    return n;
}

extern "C" int dt_gpu_describe(int dev, struct dt_gpu_info *info)
{
    cudaDeviceProp p;
    memset(info, 0, sizeof *info);
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    copy_name(info->name, sizeof info->name, p.name);
    info->memory = p.totalGlobalMem;
    info->major = p.major;
    info->minor = p.minor;
    info->multiprocessors = p.multiProcessorCount;
    if (cudaDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "?");
    }
    return 0;
}

static int fail(char *why, size_t whylen, const char *what, const char *msg)
{
    if (why && whylen) snprintf(why, whylen, "%s: %s", what, msg);
    return -1;
}

extern "C" int dt_gpu_select(int dev, char *why, size_t whylen)
{
    cudaError_t e;
    cudnnStatus_t ds;
    cublasStatus_t bs;
    cudaDeviceProp p;
    if (gpu.dev >= 0) {
        if (gpu.dev == dev) return 0;
        char msg[64];
        snprintf(msg, sizeof msg, "device %d is already selected", gpu.dev);
        return fail(why, whylen, "dt_gpu_select", msg);
    }
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        char what[48];
        snprintf(what, sizeof what, "CUDA device %d", dev);
        return fail(why, whylen, what, cudaGetErrorString(e));
    }
    if ((e = cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail(why, whylen, "cudaStreamCreateWithFlags", cudaGetErrorString(e));
    if ((e = cudaMallocHost(&gpu.host_result, 64)) != cudaSuccess)
        return fail(why, whylen, "cudaMallocHost", cudaGetErrorString(e));
    if ((bs = cublasCreate(&gpu.blas)) != CUBLAS_STATUS_SUCCESS)
        return fail(why, whylen, "cublasCreate", cublasGetStatusString(bs));
    if ((bs = cublasSetStream(gpu.blas, gpu.stream)) != CUBLAS_STATUS_SUCCESS)
        return fail(why, whylen, "cublasSetStream", cublasGetStatusString(bs));
    /* fp32 GEMMs stay true fp32: no TF32 tensor-core rounding. */
    if ((bs = cublasSetMathMode(gpu.blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        return fail(why, whylen, "cublasSetMathMode", cublasGetStatusString(bs));
    /* cuBLAS's workspace, given once (32 MiB, NVIDIA's advice for Hopper):
     * left to itself cuBLAS may allocate one, which a graph recording
     * (gpu_graph.cu) cannot hold. */
    void *blas_ws = NULL;
    if ((e = cudaMalloc(&blas_ws, (size_t)32 << 20)) != cudaSuccess)
        return fail(why, whylen, "cudaMalloc (cuBLAS workspace)", cudaGetErrorString(e));
    if ((bs = cublasSetWorkspace(gpu.blas, blas_ws, (size_t)32 << 20)) != CUBLAS_STATUS_SUCCESS)
        return fail(why, whylen, "cublasSetWorkspace", cublasGetStatusString(bs));
    if ((ds = cudnnCreate(&gpu.dnn)) != CUDNN_STATUS_SUCCESS)
        return fail(why, whylen, "cudnnCreate", cudnnGetErrorString(ds));
    if ((ds = cudnnSetStream(gpu.dnn, gpu.stream)) != CUDNN_STATUS_SUCCESS)
        return fail(why, whylen, "cudnnSetStream", cudnnGetErrorString(ds));
    gpu.dev = dev;
    gpu.major = p.major;
    gpu.minor = p.minor;
    gpu.sms = p.multiProcessorCount;
    copy_name(gpu.name, sizeof gpu.name, p.name);
    gpu.precision = DT_PREC_FP32;
    gpu.act = DT_PREC_FP32;
    return 0;
}

extern "C" void *dt_gpu_stream(void) { return (void *)gpu.stream; }

void *gpu_buf_reserve(struct gpu_buf *b, size_t bytes)
{
    if (bytes <= b->bytes && b->p) return b->p;
    if (gpu.cap) gpu_capture_fail("a device buffer had to grow");
    gpu_buf_release(b);
    size_t want = (bytes + 255) / 256 * 256;
    if (want == 0) want = 256;
    DT_CUDA_CHECK(cudaMalloc(&b->p, want)); /* allowed while recording (relaxed capture mode) */
    b->bytes = want;
    return b->p;
}

void gpu_buf_release(struct gpu_buf *b)
{
    if (b->p) {
        gpu.generation++;
        if (gpu.cap) gpu_capture_defer_free(b->p); /* the stream cannot be waited for now */
        else {
            DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
            DT_CUDA_CHECK(cudaFree(b->p));
        }
    }
    b->p = NULL;
    b->bytes = 0;
}
