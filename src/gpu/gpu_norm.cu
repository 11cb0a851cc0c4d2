/* gpu_norm.cu: per-channel sums and affine maps (batch normalization) and
 * average pooling over NHWC tensors on the device: the CUDA side of
 * src/cpu/cpu_norm.c, with the same contracts (backend.h).
 *
 * channel_sums is deterministic: each block sums a fixed slice of rows for
 * 32 channels in double and writes its partial; a second kernel folds the
 * partials in block order. No atomics, so a run repeats bit for bit (the
 * moving statistics are checkpointed and compared on resume). The results
 * go to host memory, so the call waits for the stream: batch normalization
 * needs them on the host anyway (--sync-bn reduces them over MPI there).
 *
 * channel_affine's per-channel vectors arrive in host memory; they are
 * queued to the device with the kernel (an asynchronous copy from pageable
 * memory is staged before it returns, so the caller may reuse them).
 * Neither op can be recorded into a graph: --cuda-graphs refuses models with
 * batchnorm up front (its layer also downloads gamma and the statistics,
 * which stops the run if recorded); called while recording, these two fail
 * the recording (gpu_graph.cu).
 *
 * Average pooling keeps the CPU's order of additions: forward sums the
 * window row by row, then scales; backward gathers, for each input element,
 * the windows that cover it in the order the CPU scatters them.
 *
 * The tensors are activations (gpu.act's element type, gpu_internal.h):
 * each kernel reads them as float, computes as it would for float tensors,
 * and rounds its output once; the sums stay double, the vectors float. */
#include "config.h"

#include "gpu/gpu_internal.h"

/* ---- channel_sums ----------------------------------------------------------- */

#define SUM_TX 32 /* channels per block (one warp's worth of contiguous floats) */
#define SUM_TY 8  /* row lanes per block */

static struct gpu_buf sums_partial; /* [R][2][c] doubles, then [2][c] results */

/* Block (bx, by): channels bx*32 .. +31, rows [by*chunk, (by+1)*chunk). */
template <typename T>
__global__ void channel_sums_partial_kernel(double *partial, const T *a, const T *b, size_t rows, int c,
                                            size_t chunk)
{
    __shared__ double sa[SUM_TY][SUM_TX], sb[SUM_TY][SUM_TX];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, j = (int)blockIdx.x * SUM_TX + tx;
    size_t r0 = (size_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double s1 = 0.0, s2 = 0.0;
    if (j < c)
        for (size_t r = r0 + (size_t)ty; r < r1; r += SUM_TY) {
            float x = to_f32(a[r * (size_t)c + j]), y = to_f32(b[r * (size_t)c + j]);
            s1 += (double)x;
            s2 += (double)x * (double)y;
        }
    sa[ty][tx] = s1;
    sb[ty][tx] = s2;
    __syncthreads();
    if (ty == 0 && j < c) {
        for (int k = 1; k < SUM_TY; k++) {
            s1 += sa[k][tx];
            s2 += sb[k][tx];
        }
        double *p = partial + (size_t)blockIdx.y * 2 * (size_t)c;
        p[j] = s1;
        p[c + j] = s2;
    }
}

__global__ void channel_sums_fold_kernel(double *out, const double *partial, int nparts, int c)
{
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= c) return;
    double s1 = 0.0, s2 = 0.0;
    for (int p = 0; p < nparts; p++) {
        s1 += partial[(size_t)p * 2 * (size_t)c + j];
        s2 += partial[(size_t)p * 2 * (size_t)c + c + j];
    }
    out[j] = s1;
    out[c + j] = s2;
}

void gpu_channel_sums(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c)
{
    if (c <= 0) return;
    if (rows == 0 || gpu.cap) { /* a recording cannot bring values to the host: it fails (gpu_graph.cu) */
        if (gpu.cap) gpu_capture_fail("batchnorm brings its batch statistics to the host at every step");
        for (int j = 0; j < c; j++) s1[j] = s2[j] = 0.0;
        return;
    }
    const unsigned cblocks = (unsigned)((c + SUM_TX - 1) / SUM_TX);
    /* Enough row slices to give every multiprocessor a few blocks, each
     * slice at least 64 rows (8 per lane). */
    size_t want = (size_t)(gpu.sms > 0 ? gpu.sms : 80) * 4 / cblocks;
    size_t maxparts = (rows + 63) / 64;
    size_t nparts = want < 1 ? 1 : want > maxparts ? maxparts : want;
    if (nparts > 65535) nparts = 65535;
    size_t chunk = (rows + nparts - 1) / nparts;
    nparts = (rows + chunk - 1) / chunk;
    double *partial = (double *)gpu_buf_reserve(&sums_partial, sizeof(double) * 2 * (size_t)c * (nparts + 1));
    double *out = partial + nparts * 2 * (size_t)c;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        channel_sums_partial_kernel<T><<<dim3(cblocks, (unsigned)nparts), dim3(SUM_TX, SUM_TY), 0, gpu.stream>>>(
            partial, (const T *)a, (const T *)b, rows, c, chunk);
    });
    DT_KERNEL_CHECK();
    channel_sums_fold_kernel<<<(unsigned)((c + 127) / 128), 128, 0, gpu.stream>>>(out, partial, (int)nparts, c);
    DT_KERNEL_CHECK();
    DT_CUDA_CHECK(cudaMemcpyAsync(s1, out, sizeof(double) * (size_t)c, cudaMemcpyDeviceToHost, gpu.stream));
    DT_CUDA_CHECK(cudaMemcpyAsync(s2, out + c, sizeof(double) * (size_t)c, cudaMemcpyDeviceToHost, gpu.stream));
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
}

/* ---- channel_affine --------------------------------------------------------- */

static struct gpu_buf affine_vec; /* p, q, r: 3 x c floats */

/* out may alias a (each element is read before it is written). */
template <typename T>
__global__ void channel_affine_kernel(T *out, const T *a, const T *b, size_t n, int c, const float *p,
                                      const float *q, const float *r, int relu)
{
    GPU_FOR_EACH(i, n) {
        int j = (int)(i % (size_t)c);
        float o = b ? p[j] * to_f32(a[i]) + q[j] * to_f32(b[i]) + r[j] : p[j] * to_f32(a[i]) + r[j];
        out[i] = from_f32<T>(relu ? (o > 0.0f ? o : 0.0f) : o);
    }
}

void gpu_channel_affine(dt_act *out, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                        const float *q, const float *r, int relu)
{
    size_t n = rows * (size_t)c;
    if (!n) return;
    if (gpu.cap) { /* its vectors come from pageable host memory, which a recording cannot copy */
        gpu_capture_fail("batchnorm's per-channel factors come from the host at every step");
        return;
    }
    float *v = (float *)gpu_buf_reserve(&affine_vec, sizeof(float) * 3 * (size_t)c);
    DT_CUDA_CHECK(cudaMemcpyAsync(v, p, sizeof(float) * (size_t)c, cudaMemcpyHostToDevice, gpu.stream));
    if (b) DT_CUDA_CHECK(cudaMemcpyAsync(v + c, q, sizeof(float) * (size_t)c, cudaMemcpyHostToDevice, gpu.stream));
    DT_CUDA_CHECK(cudaMemcpyAsync(v + 2 * c, r, sizeof(float) * (size_t)c, cudaMemcpyHostToDevice, gpu.stream));
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        channel_affine_kernel<T><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)out, (const T *)a, (const T *)b, n, c, v, v + c, v + 2 * c, relu);
    });
    DT_KERNEL_CHECK();
}

/* ---- average pooling -------------------------------------------------------- */

struct avg_geom {
    int h, w, c, kh, kw, stride, oh, ow;
};

static struct avg_geom geom(const struct dt_conv_shape *s)
{
    return (struct avg_geom){s->h, s->w, s->c, s->kh, s->kw, s->stride, s->oh, s->ow};
}

/* One thread per output element (b, oy, ox, j). */
template <typename T> __global__ void avgpool_forward_kernel(struct avg_geom g, size_t total, T *out, const T *inp)
{
    const float inv = 1.0f / (float)(g.kh * g.kw);
    GPU_FOR_EACH(i, total) {
        int j = (int)(i % (size_t)g.c);
        size_t t = i / (size_t)g.c;
        int ox = (int)(t % (size_t)g.ow);
        t /= (size_t)g.ow;
        int oy = (int)(t % (size_t)g.oh);
        size_t b = t / (size_t)g.oh;
        const T *x = inp + b * (size_t)g.h * g.w * g.c;
        float s = 0.0f;
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++)
                s += to_f32(x[((size_t)(oy * g.stride + ky) * g.w + ox * g.stride + kx) * g.c + j]);
        out[i] = from_f32<T>(s * inv);
    }
}

/* One thread per input element (b, y, x, j): the windows covering (y, x)
 * are oy in [ceil((y - kh + 1) / stride), y / stride] (clipped to the
 * output), likewise ox; visited in ascending (oy, ox), the CPU's order. */
template <typename T> __global__ void avgpool_backward_kernel(struct avg_geom g, size_t total, T *dinp, const T *dout)
{
    const float inv = 1.0f / (float)(g.kh * g.kw);
    GPU_FOR_EACH(i, total) {
        int j = (int)(i % (size_t)g.c);
        size_t t = i / (size_t)g.c;
        int x = (int)(t % (size_t)g.w);
        t /= (size_t)g.w;
        int y = (int)(t % (size_t)g.h);
        size_t b = t / (size_t)g.h;
        int oy0 = y - g.kh + 1 > 0 ? (y - g.kh + 1 + g.stride - 1) / g.stride : 0;
        int ox0 = x - g.kw + 1 > 0 ? (x - g.kw + 1 + g.stride - 1) / g.stride : 0;
        int oy1 = y / g.stride < g.oh - 1 ? y / g.stride : g.oh - 1;
        int ox1 = x / g.stride < g.ow - 1 ? x / g.stride : g.ow - 1;
        const T *d = dout + b * (size_t)g.oh * g.ow * g.c;
        float s = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) s += to_f32(d[((size_t)oy * g.ow + ox) * g.c + j]) * inv;
        dinp[i] = from_f32<T>(s);
    }
}

void gpu_avgpool_forward(const struct dt_conv_shape *s, int n, dt_act *out, const dt_act *inp)
{
    size_t total = (size_t)n * s->oh * s->ow * s->c;
    if (!total) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        avgpool_forward_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            geom(s), total, (T *)out, (const T *)inp);
    });
    DT_KERNEL_CHECK();
}

void gpu_avgpool_backward(const struct dt_conv_shape *s, int n, dt_act *dinp, const dt_act *dout)
{
    size_t total = (size_t)n * s->h * s->w * s->c;
    if (!total) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        avgpool_backward_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            geom(s), total, (T *)dinp, (const T *)dout);
    });
    DT_KERNEL_CHECK();
}
