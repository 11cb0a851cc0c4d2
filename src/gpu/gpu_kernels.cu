/* gpu_kernels.cu: the CUDA backend's element-wise kernels, loss, optimizer
 * updates, GEMM, the dense layer and the 16-bit conversions of gpu.h.
 *
 * Each kernel is the CPU reference (cpu_kernels.c) written as a grid-stride
 * loop, with the same formulas in the same order. Reductions (bias gradient,
 * loss sum) go through fixed-shape trees instead of atomics, so a run
 * repeats bit for bit on the same device. Dropout draws its mask on the
 * device from a counter-based hash of one host draw per call: the host
 * dt_rng advances by exactly one step, whatever n is.
 *
 * Kernels on activations are templates over their element type T (float,
 * or 16 bits under set_act_type; gpu_internal.h): they read T, compute in
 * float as the CPU does and round once to T, so with float activations
 * they are the float kernels exactly. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "gpu/gpu_internal.h"

#define FULL_WARP 0xffffffffu

static cudaStream_t stream_or_compute(void *stream)
{
    return stream ? (cudaStream_t)stream : gpu.stream;
}

/* ---- 16-bit conversions and scaling (gpu.h) ---------------------------- */

template <typename T> __global__ void to16_kernel(T *dst, const float *src, size_t n)
{
    GPU_FOR_EACH(i, n) dst[i] = from_f32<T>(src[i]);
}

template <typename T> __global__ void from16_kernel(float *dst, const T *src, size_t n)
{
    GPU_FOR_EACH(i, n) dst[i] = to_f32(src[i]);
}

extern "C" void dt_gpu_to16(void *dst, const float *src, size_t n, int kind, void *stream)
{
    if (!n) return;
    cudaStream_t s = stream_or_compute(stream);
    if (kind == DT_PREC_FP16)
        to16_kernel<__half><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, s>>>((__half *)dst, src, n);
    else if (kind == DT_PREC_BF16)
        to16_kernel<__nv_bfloat16><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, s>>>((__nv_bfloat16 *)dst, src, n);
    else
        dt_die(__FILE__, __LINE__, "dt_gpu_to16: kind %d is neither fp16 (1) nor bf16 (2)", kind);
    DT_KERNEL_CHECK();
}

extern "C" void dt_gpu_from16(float *dst, const void *src, size_t n, int kind, void *stream)
{
    if (!n) return;
    cudaStream_t s = stream_or_compute(stream);
    if (kind == DT_PREC_FP16)
        from16_kernel<__half><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, s>>>(dst, (const __half *)src, n);
    else if (kind == DT_PREC_BF16)
        from16_kernel<__nv_bfloat16><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, s>>>(dst, (const __nv_bfloat16 *)src, n);
    else
        dt_die(__FILE__, __LINE__, "dt_gpu_from16: kind %d is neither fp16 (1) nor bf16 (2)", kind);
    DT_KERNEL_CHECK();
}

__global__ void scale_kernel(float *x, size_t n, float s)
{
    GPU_FOR_EACH(i, n) x[i] *= s;
}

extern "C" void dt_gpu_scale(float *x, size_t n, float s, void *stream)
{
    if (!n) return;
    scale_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, stream_or_compute(stream)>>>(x, n, s);
    DT_KERNEL_CHECK();
}

__global__ void accumulate_kernel(float *dst, const float *src, size_t n)
{
    GPU_FOR_EACH(i, n) dst[i] += src[i];
}

void gpu_accumulate(float *dst, const float *src, size_t n)
{
    if (!n) return;
    accumulate_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, stream_or_compute(NULL)>>>(dst, src, n);
    DT_KERNEL_CHECK();
}

template <typename T> __global__ void act_add_kernel(T *dst, const T *src, size_t n)
{
    GPU_FOR_EACH(i, n) dst[i] = from_f32<T>(to_f32(dst[i]) + to_f32(src[i]));
}

void gpu_act_add(dt_act *dst, const dt_act *src, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        act_add_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>((T *)dst, (const T *)src, n);
    });
    DT_KERNEL_CHECK();
}

/* ---- GEMM ---------------------------------------------------------------- */

static struct gpu_buf gemm_scratch; /* 16-bit copies of A and B */

/* C = beta * C for k = 0 (BLAS semantics: beta = 0 clears, even NaN). */
__global__ void scale_rows_kernel(float *c, int m, int n, int ldc, float beta)
{
    GPU_FOR_EACH(i, (size_t)m * n) {
        float *p = c + (i / (size_t)n) * ldc + i % (size_t)n;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

/* Elements a row-major rows x cols matrix with leading dimension ld spans. */
static size_t span(int rows, int cols, int ld) { return (size_t)(rows - 1) * ld + (size_t)cols; }

/* Row-major C is column-major C^T = op(B)^T op(A)^T, so cuBLAS gets the
 * operands swapped and m, n exchanged; no data moves. */
void gpu_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        size_t total = (size_t)m * n;
        scale_rows_kernel<<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(c, m, n, ldc, beta);
        DT_KERNEL_CHECK();
        return;
    }
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (gpu.precision == DT_PREC_FP32) {
        DT_CUBLAS_CHECK(cublasSgemm(gpu.blas, opb, opa, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
        return;
    }
    size_t na = span(transa ? k : m, transa ? m : k, lda), nb = span(transb ? n : k, transb ? k : n, ldb);
    size_t boff = (na * 2 + 255) / 256 * 256;
    char *s = (char *)gpu_buf_reserve(&gemm_scratch, boff + nb * 2);
    dt_gpu_to16(s, a, na, gpu.precision, gpu.stream);
    dt_gpu_to16(s + boff, b, nb, gpu.precision, gpu.stream);
    cudaDataType t = gpu.precision == DT_PREC_FP16 ? CUDA_R_16F : CUDA_R_16BF;
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, opb, opa, n, m, k, &alpha, s + boff, t, ldb, s, t, lda, &beta,
                                 c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- bias ---------------------------------------------------------------- */

template <typename T> __global__ void bias_add_kernel(T *out, const float *bias, size_t total, int cols)
{
    GPU_FOR_EACH(i, total) out[i] = from_f32<T>(to_f32(out[i]) + bias[i % (size_t)cols]);
}

template <typename T> static void bias_add(T *out, const float *bias, int rows, int cols)
{
    size_t total = (size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0);
    if (!total) return;
    bias_add_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(out, bias, total, cols);
    DT_KERNEL_CHECK();
}

void gpu_bias_add(float *out, const float *bias, int rows, int cols) { bias_add(out, bias, rows, cols); }

/* Column sums: a block covers 32 columns (coalesced) and a chunk of rows,
 * its 8 thread rows striding through the chunk; chunk partials are then
 * summed in order by a second kernel. */
#define BG_COLS 32
#define BG_ROWS 8

static struct gpu_buf bias_scratch; /* [chunks][cols] partial sums */

template <typename T>
__global__ void bias_grad_partial(float *partial, const T *dout, int rows, int cols, int chunk)
{
    __shared__ float s[BG_ROWS][BG_COLS + 1];
    int col = blockIdx.x * BG_COLS + threadIdx.x;
    int r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
    float sum = 0.0f;
    if (col < cols)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += BG_ROWS) sum += to_f32(dout[(size_t)r * cols + col]);
    s[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float t = 0.0f;
        for (int y = 0; y < BG_ROWS; y++) t += s[y][threadIdx.x];
        partial[(size_t)blockIdx.y * cols + col] = t;
    }
}

__global__ void bias_grad_final(float *dbias, const float *partial, int chunks, int cols)
{
    GPU_FOR_EACH(j, (size_t)cols) {
        float t = 0.0f;
        for (int c = 0; c < chunks; c++) t += partial[(size_t)c * cols + j];
        dbias[j] = t;
    }
}

/* dout in any element type; the sums are float in every case. */
template <typename T> static void bias_grad(float *dbias, const T *dout, int rows, int cols)
{
    if (cols <= 0) return;
    if (rows <= 0) {
        DT_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * (size_t)cols, gpu.stream));
        return;
    }
    int colblocks = (cols + BG_COLS - 1) / BG_COLS;
    /* About four blocks per multiprocessor, and at least 64 rows per chunk. */
    int chunks = (4 * (gpu.sms > 0 ? gpu.sms : 80)) / colblocks;
    if (chunks > (rows + 63) / 64) chunks = (rows + 63) / 64;
    if (chunks < 1) chunks = 1;
    int chunk = (rows + chunks - 1) / chunks;
    chunks = (rows + chunk - 1) / chunk;
    dim3 grid((unsigned)colblocks, (unsigned)chunks), block(BG_COLS, BG_ROWS);
    if (chunks == 1) {
        bias_grad_partial<T><<<grid, block, 0, gpu.stream>>>(dbias, dout, rows, cols, chunk);
        DT_KERNEL_CHECK();
        return;
    }
    float *partial = (float *)gpu_buf_reserve(&bias_scratch, sizeof(float) * (size_t)chunks * cols);
    bias_grad_partial<T><<<grid, block, 0, gpu.stream>>>(partial, dout, rows, cols, chunk);
    DT_KERNEL_CHECK();
    bias_grad_final<<<gpu_blocks((size_t)cols, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(dbias, partial,
                                                                                        chunks, cols);
    DT_KERNEL_CHECK();
}

void gpu_bias_grad(float *dbias, const float *dout, int rows, int cols) { bias_grad(dbias, dout, rows, cols); }

void gpu_act_bias_grad(float *dbias, const dt_act *dout, int rows, int cols)
{
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        bias_grad(dbias, (const T *)dout, rows, cols);
    });
}

/* ---- the dense layer ------------------------------------------------------- */

/* With float activations the layer is the float pieces above, as the layer
 * called them before dense_forward existed (so fp32 runs do not change,
 * bit for bit; gpu_gemm may still multiply in 16 bits). With 16-bit
 * activations cuBLAS reads them where they are: only the float weights are
 * converted, into dense_w16. Products accumulate in float; out and dinp
 * are rounded to 16 bits by cuBLAS (out once more after its bias, as a
 * 16-bit convolution's output), dweight stays float. */
static struct gpu_buf dense_w16; /* the weights [in][units] in gpu.act's type */

static const void *weights16(const float *weight, size_t count)
{
    void *w = gpu_buf_reserve(&dense_w16, count * 2);
    dt_gpu_to16(w, weight, count, gpu.act, gpu.stream);
    return w;
}

static const float f_one = 1.0f, f_zero = 0.0f;

/* out [n][units] = inp [n][in] . weight [in][units] + bias. The cuBLAS calls
 * are gpu_gemm's for the same transposes (row-major operands swapped). */
void gpu_dense_forward(int n, int in, int units, dt_act *out, const dt_act *inp, const float *weight,
                       const float *bias)
{
    if (n <= 0 || units <= 0) return;
    if (gpu.act == DT_PREC_FP32) {
        gpu_gemm(0, 0, n, units, in, 1.0f, (const float *)inp, in, weight, units, 0.0f, (float *)out, units);
        gpu_bias_add((float *)out, bias, n, units);
        return;
    }
    const cudaDataType t = gpu_blas_type(gpu.act);
    const void *w = weights16(weight, (size_t)in * units);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_N, CUBLAS_OP_N, units, n, in, &f_one, w, t, units, inp, t, in,
                                 &f_zero, out, t, units, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    gpu_by_type(gpu.act, [&](auto ty) {
        using T = decltype(ty);
        bias_add((T *)out, bias, n, units);
    });
}

/* dweight [in][units] = inp^T . dout and dbias (column sums of dout), both
 * overwritten and zero for n = 0; dinp [n][in] = dout . weight^T. */
void gpu_dense_backward(int n, int in, int units, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                        const dt_act *inp, const float *weight)
{
    if (gpu.act == DT_PREC_FP32) {
        /* n = 0: GEMM's k = 0 with beta = 0 clears dweight, bias_grad dbias */
        gpu_gemm(1, 0, in, units, n, 1.0f, (const float *)inp, in, (const float *)dout, units, 0.0f, dweight, units);
        gpu_bias_grad(dbias, (const float *)dout, n, units);
        if (dinp && n > 0)
            gpu_gemm(0, 1, n, in, units, 1.0f, (const float *)dout, units, weight, units, 0.0f, (float *)dinp, in);
        return;
    }
    if (in <= 0 || units <= 0) return;
    if (n <= 0) { /* no samples, no gradient */
        DT_CUDA_CHECK(cudaMemsetAsync(dweight, 0, sizeof(float) * (size_t)in * units, gpu.stream));
        DT_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * (size_t)units, gpu.stream));
        return;
    }
    const cudaDataType t = gpu_blas_type(gpu.act);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_N, CUBLAS_OP_T, units, in, n, &f_one, dout, t, units, inp, t, in,
                                 &f_zero, dweight, CUDA_R_32F, units, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    gpu_act_bias_grad(dbias, dout, n, units);
    if (!dinp) return;
    const void *w = weights16(weight, (size_t)in * units);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_T, CUBLAS_OP_N, in, n, units, &f_one, w, t, units, dout, t, units,
                                 &f_zero, dinp, t, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- ReLU and dropout ---------------------------------------------------- */

template <typename T> __global__ void relu_forward_kernel(T *out, const T *inp, size_t n)
{
    GPU_FOR_EACH(i, n) {
        float x = to_f32(inp[i]);
        out[i] = from_f32<T>(x > 0.0f ? x : 0.0f);
    }
}

/* dinp may alias dout (each element is read before it is written). */
template <typename T> __global__ void relu_backward_kernel(T *dinp, const T *dout, const T *out, size_t n)
{
    GPU_FOR_EACH(i, n) {
        float d = to_f32(dout[i]);
        dinp[i] = from_f32<T>(to_f32(out[i]) > 0.0f ? d : 0.0f);
    }
}

void gpu_relu_forward(dt_act *out, const dt_act *inp, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        relu_forward_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>((T *)out, (const T *)inp, n);
    });
    DT_KERNEL_CHECK();
}

void gpu_relu_backward(dt_act *dinp, const dt_act *dout, const dt_act *out, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        relu_backward_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)dinp, (const T *)dout, (const T *)out, n);
    });
    DT_KERNEL_CHECK();
}

/* splitmix64's output function: a different, well-mixed 64-bit value for
 * every (seed + i), so element i's draw needs no state. */
static __device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The seed is an argument, or (while recording, gpu_graph.cu) read from
 * the device slot seedp, which each replay refills. */
template <typename T>
__global__ void dropout_forward_kernel(T *out, float *mask, const T *inp, size_t n, float rate, float scale,
                                       uint64_t seed, const uint64_t *seedp)
{
    if (seedp) seed = *seedp;
    GPU_FOR_EACH(i, n) {
        float u = (float)(mix64(seed + i) >> 40) * (1.0f / 16777216.0f); /* [0, 1), as dt_rng_uniform */
        float m = u >= rate ? scale : 0.0f;
        mask[i] = m;
        out[i] = from_f32<T>(to_f32(inp[i]) * m);
    }
}

template <typename T> __global__ void dropout_backward_kernel(T *dinp, const T *dout, const float *mask, size_t n)
{
    GPU_FOR_EACH(i, n) dinp[i] = from_f32<T>(to_f32(dout[i]) * mask[i]);
}

void gpu_dropout_forward(dt_act *out, float *mask, const dt_act *inp, size_t n, float rate, dt_rng *rng)
{
    if (!n) return; /* no samples, no draw (the CPU draws none either) */
    const float scale = 1.0f / (1.0f - rate);
    const uint64_t *seedp = gpu.cap ? gpu_capture_seed(rng) : NULL;
    uint64_t seed = seedp ? 0 : dt_rng_u64(rng);
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        dropout_forward_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)out, mask, (const T *)inp, n, rate, scale, seed, seedp);
    });
    DT_KERNEL_CHECK();
}

void gpu_dropout_backward(dt_act *dinp, const dt_act *dout, const float *mask, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        dropout_backward_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)dinp, (const T *)dout, mask, n);
    });
    DT_KERNEL_CHECK();
}

/* ---- softmax cross-entropy ---------------------------------------------- */

static struct gpu_buf xent_scratch; /* result, then [n] row losses, [n] hits */

/* One warp per row. The row maximum is the first maximal element (the CPU's
 * argmax); exp and the sum are in double, like the CPU's. */
template <typename T>
__global__ void xent_rows_kernel(T *dlogits, double *row_loss, int *row_hit, const T *logits,
                                 const uint8_t *labels, int n, int classes, float grad_scale)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = (int)(threadIdx.x % 32);
    if (row >= n) return; /* the whole warp leaves together */
    const T *z = logits + (size_t)row * classes;
    float best = 0.0f;
    int arg = classes; /* none yet */
    for (int j = lane; j < classes; j += 32) {
        float v = to_f32(z[j]);
        if (arg == classes || v > best) { best = v; arg = j; }
    }
    for (int off = 16; off > 0; off >>= 1) {
        float ob = __shfl_xor_sync(FULL_WARP, best, off);
        int oa = __shfl_xor_sync(FULL_WARP, arg, off);
        if (oa != classes && (arg == classes || ob > best || (ob == best && oa < arg))) { best = ob; arg = oa; }
    }
    const float zmax = best;
    double sum = 0.0;
    for (int j = lane; j < classes; j += 32) sum += exp((double)(to_f32(z[j]) - zmax));
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(FULL_WARP, sum, off);
    const int y = labels[row];
    if (lane == 0) {
        /* A label outside the classes gives NaN, not a stray read. */
        row_loss[row] = y < classes ? log(sum) - (double)(to_f32(z[y]) - zmax) : (double)NAN;
        row_hit[row] = arg == y;
    }
    if (dlogits) {
        T *d = dlogits + (size_t)row * classes;
        for (int j = lane; j < classes; j += 32) {
            float p = (float)(exp((double)(to_f32(z[j]) - zmax)) / sum);
            d[j] = from_f32<T>((p - (j == y ? 1.0f : 0.0f)) * grad_scale);
        }
    }
}

#define XENT_THREADS 256
__global__ void xent_sum_kernel(struct gpu_xent_result *out, const double *row_loss, const int *row_hit, int n)
{
    __shared__ double sl[XENT_THREADS];
    __shared__ long long sc[XENT_THREADS];
    int t = (int)threadIdx.x;
    double l = 0.0;
    long long c = 0;
    for (int i = t; i < n; i += XENT_THREADS) {
        l += row_loss[i];
        c += row_hit[i];
    }
    sl[t] = l;
    sc[t] = c;
    __syncthreads();
    for (int s = XENT_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            sl[t] += sl[t + s];
            sc[t] += sc[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        out->loss = sl[0];
        out->correct = sc[0];
    }
}

double gpu_softmax_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const uint8_t *labels,
                        int n, int classes, float grad_scale)
{
    if (n <= 0 || classes <= 0) return 0.0;
    size_t rows_off = 256, hits_off = rows_off + (sizeof(double) * (size_t)n + 255) / 256 * 256;
    char *s = (char *)gpu_buf_reserve(&xent_scratch, hits_off + sizeof(int) * (size_t)n);
    struct gpu_xent_result *res = (struct gpu_xent_result *)s;
    double *row_loss = (double *)(s + rows_off);
    int *row_hit = (int *)(s + hits_off);
    const unsigned warps_per_block = 4;
    unsigned blocks = (unsigned)(((size_t)n + warps_per_block - 1) / warps_per_block);
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        xent_rows_kernel<T><<<blocks, 32 * warps_per_block, 0, gpu.stream>>>((T *)dlogits, row_loss, row_hit,
                                                                            (const T *)logits, labels, n, classes,
                                                                            grad_scale);
    });
    DT_KERNEL_CHECK();
    xent_sum_kernel<<<1, XENT_THREADS, 0, gpu.stream>>>(res, row_loss, row_hit, n);
    DT_KERNEL_CHECK();
    DT_CUDA_CHECK(cudaMemcpyAsync(gpu.host_result, res, sizeof *res, cudaMemcpyDeviceToHost, gpu.stream));
    if (gpu.cap) { /* recorded: graph_run reads the result after the replay */
        gpu_capture_loss();
        return 0.0;
    }
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    const struct gpu_xent_result *h = (const struct gpu_xent_result *)gpu.host_result;
    if (ncorrect) *ncorrect += (long)h->correct;
    return h->loss;
}

/* ---- input conversion ----------------------------------------------------- */

template <typename T> __global__ void images_to_float_kernel(T *dst, const uint8_t *src, size_t n)
{
    const float s = 1.0f / 255.0f;
    GPU_FOR_EACH(i, n) dst[i] = from_f32<T>((float)src[i] * s);
}

void gpu_images_to_float(dt_act *dst, const uint8_t *src, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        images_to_float_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>((T *)dst, src, n);
    });
    DT_KERNEL_CHECK();
}

/* ---- optimizers ----------------------------------------------------------- */

/* Keras 3's Adam; alpha = lr * sqrt(1 - b2^t) / (1 - b1^t) from the caller. */
__global__ void adam_kernel(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                            float c1, float c2, float eps)
{
    GPU_FOR_EACH(i, n) {
        float g = grad[i], mi = m[i], vi = v[i];
        mi += (g - mi) * c1;
        vi += (g * g - vi) * c2;
        m[i] = mi;
        v[i] = vi;
        param[i] -= mi * alpha / (sqrtf(vi) + eps);
    }
}

void gpu_adam_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                     float beta1, float beta2, float eps)
{
    if (!n) return;
    adam_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(param, m, v, grad, n, alpha,
                                                                         1.0f - beta1, 1.0f - beta2, eps);
    DT_KERNEL_CHECK();
}

__global__ void sgd_kernel(float *param, const float *grad, size_t n, float lr)
{
    GPU_FOR_EACH(i, n) param[i] -= lr * grad[i];
}

/* Keras's SGD: velocity = momentum * velocity - lr * g; param += velocity. */
__global__ void sgd_momentum_kernel(float *param, float *velocity, const float *grad, size_t n, float lr,
                                    float momentum)
{
    GPU_FOR_EACH(i, n) {
        float vel = momentum * velocity[i] - lr * grad[i];
        velocity[i] = vel;
        param[i] += vel;
    }
}

void gpu_sgd_update(float *param, float *velocity, const float *grad, size_t n, float lr, float momentum)
{
    if (!n) return;
    if (momentum == 0.0f || !velocity)
        sgd_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(param, grad, n, lr);
    else
        sgd_momentum_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(param, velocity, grad,
                                                                                    n, lr, momentum);
    DT_KERNEL_CHECK();
}

/* ---- loss scaling --------------------------------------------------------- */

static struct gpu_buf flag_scratch;

__global__ void nonfinite_kernel(int *flag, const float *x, size_t n)
{
    int bad = 0;
    GPU_FOR_EACH(i, n) bad |= !isfinite(x[i]);
    if (bad) *flag = 1; /* every writer writes the same value */
}

int gpu_unscale_check(float *grad, size_t n, float inv_scale)
{
    if (!n) return 1;
    if (gpu.cap) dt_die(__FILE__, __LINE__, "unscale_check cannot be recorded into a graph (it waits for its result)");
    int *flag = (int *)gpu_buf_reserve(&flag_scratch, sizeof(int));
    DT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), gpu.stream));
    nonfinite_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(flag, grad, n);
    DT_KERNEL_CHECK();
    DT_CUDA_CHECK(cudaMemcpyAsync(gpu.host_result, flag, sizeof(int), cudaMemcpyDeviceToHost, gpu.stream));
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    if (*(const volatile int *)gpu.host_result) return 0;
    dt_gpu_scale(grad, n, inv_scale, NULL);
    return 1;
}
