/* gpu_backend.cu: the CUDA backend's operation table (see backend.h), its
 * memory operations, setup() and the activations' element type.
 *
 * Everything is queued on the one compute stream (gpu_internal.h), so ops
 * return before their work is done; download() and the ops that return a
 * value (softmax_xent, token_xent, sum_squares, unscale_check) wait for the
 * stream.
 *
 * upload() is cudaMemcpyAsync on the stream. From pageable memory CUDA
 * copies the source into a staging buffer before returning, so the caller
 * may reuse it at once. From host_alloc()'d (pinned) memory the copy is
 * truly asynchronous: such a source must not change until the next
 * synchronize() or value-returning op.
 *
 * Activations are float until set_act_type asks for the 16-bit type that
 * --precision computes in: then they are stored in it (half the memory and
 * traffic), which every op on dt_act honours (gpu_internal.h). */
#include "config.h"

#include <stdio.h>

#include "gpu/gpu_internal.h"

static void *gpu_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess)
        dt_die(__FILE__, __LINE__, "cudaMalloc of %zu bytes on %s failed: %s", bytes, gpu.name,
               cudaGetErrorString(e));
    return p;
}

/* Queued work may still read or write p. */
static void gpu_free(void *p)
{
    if (!p) return;
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    DT_CUDA_CHECK(cudaFree(p));
}

static void gpu_zero(void *p, size_t bytes)
{
    if (bytes) DT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gpu.stream));
}

static void gpu_upload(void *dst, const void *host_src, size_t bytes)
{
    if (bytes)
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, gpu.stream));
}

/* Ops that wait for the stream have no place in a recording (gpu_graph.cu). */
static void not_recording(const char *op)
{
    if (gpu.cap) dt_die(__FILE__, __LINE__, "%s cannot be recorded into a graph (it waits for the device)", op);
}

static void gpu_download(void *host_dst, const void *src, size_t bytes)
{
    not_recording("download");
    if (!bytes) return;
    DT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, gpu.stream));
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
}

static void gpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu.stream));
}

static void *gpu_host_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 64);
    if (e != cudaSuccess)
        dt_die(__FILE__, __LINE__, "cudaMallocHost of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    return p;
}

/* A queued upload may still read p. */
static void gpu_host_free(void *p)
{
    if (!p) return;
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    DT_CUDA_CHECK(cudaFreeHost(p));
}

static void gpu_synchronize(void)
{
    not_recording("synchronize");
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
}

/* 16 bits only in the type the arithmetic uses (the convolutions and GEMMs
 * then read activations without converting them); anything else stays
 * float. Graphs recorded with the other type are stale. */
static int gpu_set_act_type(int type)
{
    int t = type != DT_PREC_FP32 && type == gpu.precision ? type : DT_PREC_FP32;
    if (t != gpu.act) {
        gpu.act = t;
        gpu.generation++;
    }
    return t;
}

static int gpu_act_type(void) { return gpu.act; }

/* nthreads is the CPU's business; the device needs no floating-point mode. */
/* A kernel of this file, to ask whether the binary holds code this device
 * can run (machine code for its architecture, or PTX it can compile). */
__global__ void probe_kernel(void) {}

static int gpu_setup(int nthreads, int precision, char *why, size_t whylen)
{
    (void)nthreads;
    if (gpu.dev < 0) {
        snprintf(why, whylen, "the CUDA backend needs dt_gpu_select() before setup()");
        return -1;
    }
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, probe_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it */
        snprintf(why, whylen, "%s (compute capability %d.%d) cannot run this build's code (%s); rebuild "
                 "with NVCC_GENCODE=\"-gencode arch=compute_%d%d,code=sm_%d%d\"", gpu.name, gpu.major,
                 gpu.minor, cudaGetErrorString(e), gpu.major, gpu.minor, gpu.major, gpu.minor);
        return -1;
    }
    if (precision != DT_PREC_FP32 && precision != DT_PREC_FP16 && precision != DT_PREC_BF16) {
        snprintf(why, whylen, "unknown precision %d", precision);
        return -1;
    }
    if (precision == DT_PREC_BF16 && gpu.major < 8) {
        snprintf(why, whylen, "--precision bf16 needs compute capability 8.0 or newer (Ampere); "
                 "%s is %d.%d; use fp16 or fp32", gpu.name, gpu.major, gpu.minor);
        return -1;
    }
    if (precision == DT_PREC_FP16 && gpu.major < 7) {
        snprintf(why, whylen, "--precision fp16 needs compute capability 7.0 or newer (tensor cores); "
                 "%s is %d.%d; use fp32", gpu.name, gpu.major, gpu.minor);
        return -1;
    }
    gpu.precision = precision;
    gpu_set_act_type(DT_PREC_FP32);
    return 0;
}

extern "C" const struct dt_backend dt_backend_cuda = {
    .name = "cuda",
    .alloc = gpu_alloc,
    .free = gpu_free,
    .zero = gpu_zero,
    .upload = gpu_upload,
    .download = gpu_download,
    .copy = gpu_copy,
    .host_alloc = gpu_host_alloc,
    .host_free = gpu_host_free,
    .synchronize = gpu_synchronize,
    .setup = gpu_setup,
    .set_act_type = gpu_set_act_type,
    .act_type = gpu_act_type,
    .conv_create = gpu_conv_create,
    .conv_destroy = gpu_conv_destroy,
    .conv_forward = gpu_conv_forward,
    .conv_backward = gpu_conv_backward,
    .pool_create = gpu_pool_create,
    .pool_destroy = gpu_pool_destroy,
    .pool_forward = gpu_pool_forward,
    .pool_backward = gpu_pool_backward,
    .dense_forward = gpu_dense_forward,
    .dense_backward = gpu_dense_backward,
    .gemm = gpu_gemm,
    .bias_add = gpu_bias_add,
    .bias_grad = gpu_bias_grad,
    .relu_forward = gpu_relu_forward,
    .relu_backward = gpu_relu_backward,
    .dropout_forward = gpu_dropout_forward,
    .dropout_backward = gpu_dropout_backward,
    .softmax_xent = gpu_softmax_xent,
    .images_to_float = gpu_images_to_float,
    .adam_update = gpu_adam_update,
    .sgd_update = gpu_sgd_update,
    .adamw_update = gpu_adamw_update,
    .sum_squares = gpu_sum_squares,
    .scale = gpu_scale,
    .unscale_check = gpu_unscale_check,
    .accumulate = gpu_accumulate,
    .act_add = gpu_act_add,
    .channel_sums = gpu_channel_sums,
    .channel_sums_relu = nullptr, /* batchnorm runs relu_backward, then channel_sums */
    .channel_affine = gpu_channel_affine,
    .avgpool_forward = gpu_avgpool_forward,
    .avgpool_backward = gpu_avgpool_backward,
    .embed_forward = gpu_embed_forward,
    .embed_backward = gpu_embed_backward,
    .layernorm_forward = gpu_layernorm_forward,
    .layernorm_backward = gpu_layernorm_backward,
    .attention_forward = gpu_attention_forward,
    .attention_backward = gpu_attention_backward,
    .attention_decode = gpu_attention_decode,
    .gelu_forward = gpu_gelu_forward,
    .gelu_backward = gpu_gelu_backward,
    .linear_t_forward = gpu_linear_t_forward,
    .linear_t_backward = gpu_linear_t_backward,
    .token_xent = gpu_token_xent,
    .capture_begin = gpu_capture_begin,
    .capture_end = gpu_capture_end,
    .graph_run = gpu_graph_run,
    .graph_valid = gpu_graph_valid,
    .graph_destroy = gpu_graph_destroy,
};
