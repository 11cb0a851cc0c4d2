/* gpu_internal.h: what the CUDA backend's .cu files share, and nothing else
 * includes: the one device's state, the error checks, growable device
 * buffers, the element-type conversions and dispatch, and the ops gathered
 * into dt_backend_cuda by gpu_backend.cu.
 *
 * One device per process: dt_gpu_select() (gpu_device.cu) fills the single
 * `gpu` struct, and every op queues its work on gpu.stream in order, so a
 * buffer written by one op is ready for the next without events.
 *
 * Activations (dt_act, backend.h) are float, or 16-bit (__half or
 * __nv_bfloat16) under --precision fp16|bf16 once set_act_type asked for
 * it: gpu.act says which. Each op on activations is written once, as a
 * template over the element type T, and picks T from gpu.act at run time
 * (gpu_by_type); an element-wise kernel reads T, computes in float and
 * rounds once to T, so at T = float it is the float kernel exactly. (A
 * 16-bit convolution or dense output is rounded twice: cuDNN's or cuBLAS's
 * 16-bit result, then the sum with the bias.) Parameters, their gradients, optimizer state and dropout masks stay
 * float whatever gpu.act is. */
#ifndef DT_GPU_INTERNAL_H
#define DT_GPU_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "backend.h"
#include "gpu/gpu.h"
#include "runtime/log.h"
#include "runtime/status.h" /* dt_die; no MPI, as nvcc compiles without MPI's include path */
}

/* The checks of checks.h for the CUDA libraries: file:line and the
 * library's own message, then abort every rank (dt_die). While a step is
 * being recorded (gpu.cap, gpu_graph.cu), a failure fails the recording
 * instead: nothing recorded has run, and the caller runs the step plainly,
 * where a real error then stops the run with its message. */
#define DT_CUDA_CHECK(call)                                                              \
    do {                                                                                 \
        cudaError_t dt_e_ = (call);                                                      \
        if (dt_e_ != cudaSuccess) gpu_failed(__FILE__, __LINE__, #call, cudaGetErrorString(dt_e_)); \
    } while (0)
#define DT_CUDNN_CHECK(call)                                                             \
    do {                                                                                 \
        cudnnStatus_t dt_e_ = (call);                                                    \
        if (dt_e_ != CUDNN_STATUS_SUCCESS) gpu_failed(__FILE__, __LINE__, #call, cudnnGetErrorString(dt_e_)); \
    } while (0)
#define DT_CUBLAS_CHECK(call)                                                            \
    do {                                                                                 \
        cublasStatus_t dt_e_ = (call);                                                   \
        if (dt_e_ != CUBLAS_STATUS_SUCCESS) gpu_failed(__FILE__, __LINE__, #call, cublasGetStatusString(dt_e_)); \
    } while (0)
/* gpu_graph.cu: dt_die, or while recording gpu_capture_fail. */
void gpu_failed(const char *file, int line, const char *call, const char *msg);
/* After every kernel launch (bad configurations are reported here; faults
 * inside the kernel surface at the next synchronizing call). */
#define DT_KERNEL_CHECK() DT_CUDA_CHECK(cudaGetLastError())

struct gpu_state {
    int dev;                /* -1 until dt_gpu_select() */
    int major, minor;       /* compute capability */
    int sms;                /* multiprocessors, for sizing grids */
    char name[96];
    cudaStream_t stream;    /* every op of dt_backend_cuda runs here */
    cublasHandle_t blas;    /* bound to stream */
    cudnnHandle_t dnn;      /* bound to stream */
    int precision;          /* enum dt_precision, from setup() */
    int act;                /* enum dt_precision: the activations' element type (set_act_type) */
    void *host_result;      /* 64 pinned bytes: values an op returns to the host */
    struct gpu_capture *cap; /* gpu_graph.cu: non-NULL while ops are being recorded */
    unsigned long generation; /* bumped whenever a gpu_buf is reallocated or freed */
};
/* In a namespace so that the symbol cannot meet a C global called gpu. */
namespace dt_cuda {
extern struct gpu_state gpu;
}
using dt_cuda::gpu;

/* A device buffer that grows on demand and never shrinks (workspaces and
 * scratch that depend on the batch size). */
struct gpu_buf {
    void *p;
    size_t bytes;
};
/* At least `bytes` bytes. Growing waits for the stream first, since queued
 * work may still use the old allocation (while recording, it fails the
 * recording and keeps the old allocation until the recording ends). Any
 * reallocation or release bumps gpu.generation. */
void *gpu_buf_reserve(struct gpu_buf *b, size_t bytes);
void gpu_buf_release(struct gpu_buf *b);

/* Blocks for a grid-stride loop over n elements: enough to fill the device,
 * no more (each thread then handles several elements). */
static inline unsigned gpu_blocks(size_t n, unsigned threads)
{
    size_t want = (n + threads - 1) / threads, cap = (size_t)(gpu.sms > 0 ? gpu.sms : 80) * 16;
    if (want < 1) want = 1;
    return (unsigned)(want < cap ? want : cap);
}
#define GPU_THREADS 256u

#define GPU_FOR_EACH(i, n)                                                                  \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (size_t)gridDim.x * blockDim.x)

/* Element types: float, __half (DT_PREC_FP16) and __nv_bfloat16
 * (DT_PREC_BF16); conversions round to nearest even. */
static __device__ __forceinline__ float to_f32(float x) { return x; }
static __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Runs f(T()) with T the element type of `type` (enum dt_precision): float,
 * __half or __nv_bfloat16. f is a generic lambda, [&](auto t) { using T =
 * decltype(t); ... }, so an op is written once for all three types. */
template <typename F> static inline void gpu_by_type(int type, F f)
{
    if (type == DT_PREC_FP16) f(__half());
    else if (type == DT_PREC_BF16) f(__nv_bfloat16());
    else f(0.0f);
}

/* The element type as cuBLAS names it. */
static inline cudaDataType gpu_blas_type(int type)
{
    return type == DT_PREC_FP16 ? CUDA_R_16F : type == DT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static inline size_t gpu_elem_size(int type) { return type == DT_PREC_FP32 ? sizeof(float) : 2; }

/* gpu_graph.cu: recording (backend.h's capture_begin ... graph_destroy).
 * While gpu.cap is set: dropout_forward takes its seed from the device
 * slot gpu_capture_seed() gives (the value for this recording is drawn
 * from rng now, later ones at each replay); softmax_xent records its copy
 * into gpu.host_result and calls gpu_capture_loss() instead of waiting;
 * an op that would have to wait for the stream calls gpu_capture_fail()
 * (the recording is then thrown away) and goes on without waiting. */
const uint64_t *gpu_capture_seed(dt_rng *rng);
void gpu_capture_loss(void);
void gpu_capture_fail(const char *why);
void gpu_capture_defer_free(void *p); /* cudaFree(p) once the recording ends */
int gpu_capture_begin(char *why, size_t whylen);
dt_graph *gpu_capture_end(char *why, size_t whylen);
double gpu_graph_run(dt_graph *g, long *ncorrect);
int gpu_graph_valid(const dt_graph *g);
void gpu_graph_destroy(dt_graph *g);

/* What softmax_xent leaves in gpu.host_result. */
struct gpu_xent_result {
    double loss;
    long long correct;
};

/* gpu_kernels.cu: element-wise kernels, loss, optimizers, GEMM and the
 * dense layer. Pointers typed dt_act hold gpu.act elements; float ones
 * are float whatever gpu.act is. */
void gpu_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
void gpu_bias_add(float *out, const float *bias, int rows, int cols);
void gpu_bias_grad(float *dbias, const float *dout, int rows, int cols);
/* bias_grad of an activation gradient (gpu.act elements), summed in float. */
void gpu_act_bias_grad(float *dbias, const dt_act *dout, int rows, int cols);
void gpu_dense_forward(int n, int in, int units, dt_act *out, const dt_act *inp, const float *weight,
                       const float *bias);
void gpu_dense_backward(int n, int in, int units, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                        const dt_act *inp, const float *weight);
void gpu_relu_forward(dt_act *out, const dt_act *inp, size_t n);
void gpu_relu_backward(dt_act *dinp, const dt_act *dout, const dt_act *out, size_t n);
void gpu_dropout_forward(dt_act *out, float *mask, const dt_act *inp, size_t n, float rate, dt_rng *rng);
void gpu_dropout_backward(dt_act *dinp, const dt_act *dout, const float *mask, size_t n);
double gpu_softmax_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const uint8_t *labels, int n,
                        int classes, float grad_scale);
void gpu_images_to_float(dt_act *dst, const uint8_t *src, size_t n);
void gpu_adam_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                     float beta1, float beta2, float eps);
void gpu_sgd_update(float *param, float *velocity, const float *grad, size_t n, float lr,
                    float momentum);
int gpu_unscale_check(float *grad, size_t n, float inv_scale);
void gpu_accumulate(float *dst, const float *src, size_t n);
void gpu_act_add(dt_act *dst, const dt_act *src, size_t n);

/* gpu_conv.cu: convolution through cuDNN */
dt_conv_plan *gpu_conv_create(const struct dt_conv_shape *shape, int relu);
void gpu_conv_destroy(dt_conv_plan *plan);
void gpu_conv_forward(dt_conv_plan *plan, int n, dt_act *out, const dt_act *inp, const float *weight,
                      const float *bias);
void gpu_conv_backward(dt_conv_plan *plan, int n, dt_act *dinp, float *dweight, float *dbias,
                       const dt_act *dout, const dt_act *inp, const float *weight);
/* gpu_pool.cu: max pooling (own kernels, the CPU's tie rule) */
dt_pool_plan *gpu_pool_create(const struct dt_conv_shape *shape);
void gpu_pool_destroy(dt_pool_plan *plan);
void gpu_pool_forward(dt_pool_plan *plan, int n, dt_act *out, const dt_act *inp, int train);
void gpu_pool_backward(dt_pool_plan *plan, int n, dt_act *dinp, const dt_act *dout, const dt_act *relu_out);

/* gpu_norm.cu: per-channel sums and affine maps (batchnorm), average pooling */
void gpu_channel_sums(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c);
void gpu_channel_affine(dt_act *out, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                        const float *q, const float *r, int relu);
void gpu_avgpool_forward(const struct dt_conv_shape *s, int n, dt_act *out, const dt_act *inp);
void gpu_avgpool_backward(const struct dt_conv_shape *s, int n, dt_act *dinp, const dt_act *dout);

/* gpu_transformer.cu: the transformer's ops (backend.h), AdamW and the
 * pieces of gradient clipping */
void gpu_embed_forward(dt_act *out, const int32_t *tokens, const float *wte, const float *wpe, int n, int T, int C);
void gpu_embed_backward(float *dwte, float *dwpe, const dt_act *dout, const int32_t *tokens, int n, int T, int C);
void gpu_layernorm_forward(dt_act *out, float *mean, float *rstd, const dt_act *inp, const float *gamma,
                           const float *beta, size_t rows, int C, float eps);
void gpu_layernorm_backward(dt_act *dinp, float *dgamma, float *dbeta, const dt_act *dout, const dt_act *inp,
                            const float *gamma, const float *mean, const float *rstd, size_t rows, int C);
void gpu_attention_forward(dt_act *out, float *lse, const dt_act *qkv, int n, int T, int C, int H);
void gpu_attention_backward(dt_act *dqkv, const dt_act *dout, const dt_act *qkv, const dt_act *out, const float *lse,
                            int n, int T, int C, int H);
/* gpu_decode.cu: one query against the key/value cache (backend.h's attention_decode) */
void gpu_attention_decode(dt_act *out, const dt_act *qkv, int pos, int C, int H);
void gpu_gelu_forward(dt_act *out, const dt_act *inp, size_t n);
void gpu_gelu_backward(dt_act *dinp, const dt_act *dout, const dt_act *inp, size_t n);
void gpu_linear_t_forward(size_t rows, int C, int V, dt_act *out, const dt_act *inp, const float *w);
void gpu_linear_t_backward(size_t rows, int C, int V, dt_act *dinp, float *dw, const dt_act *dout, const dt_act *inp,
                           const float *w);
double gpu_token_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const int32_t *tokens, int n, int T,
                      int V, float grad_scale);
void gpu_adamw_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha, float beta1,
                      float beta2, float eps, float decay);
double gpu_sum_squares(const float *x, size_t n);
void gpu_scale(float *x, size_t n, float s);

#endif
