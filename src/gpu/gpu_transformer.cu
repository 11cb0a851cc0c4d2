/* gpu_transformer.cu: the transformer's ops on the device (backend.h):
 * embedding, layer normalization, GELU, the
 * transposed-weight product of the tied LM head, token cross-entropy, and
 * the optimizer's AdamW and gradient-clipping pieces. The CUDA side of
 * src/cpu/cpu_transformer.c, cpu_attention.c and cpu_kernels.c.
 *
 * The one design decision: nothing here uses floating-point atomics, so a
 * step repeats bit for bit on the same device (as gpu_kernels.cu and
 * gpu_norm.cu do). Sums run in a fixed order: the embedding's scatter-add
 * sorts the positions by token (a stable radix sort, so each token's rows
 * stay in position order) and sums each token's run of rows in fixed chunks;
 * column sums (dgamma, dbeta) fold fixed row slices.
 *
 * Attention is in gpu_attention.cu.
 *
 * Activations are gpu.act's element type E (float, __half or
 * __nv_bfloat16; gpu_internal.h): each kernel reads E, computes in float
 * and rounds its outputs once; statistics, lse and Di are float, loss sums
 * double. Parameters and their gradients are float. */
#include "config.h"

#include <limits.h>
#include <math.h>

#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include "gpu/gpu_internal.h"
#include "gpu/gpu_warp.cuh"

namespace {

/* ---- embedding -------------------------------------------------------------- */

template <typename E>
__global__ void embed_forward_kernel(E *out, const int32_t *tokens, const float *wte, const float *wpe, int T,
                                     int C, size_t total)
{
    GPU_FOR_EACH(i, total) {
        const size_t c = i % (size_t)C, p = i / (size_t)C, s = p / (size_t)T, t = p % (size_t)T;
        const size_t tok = (size_t)tokens[s * (size_t)(T + 1) + t];
        out[i] = from_f32<E>(wte[tok * (size_t)C + c] + wpe[t * (size_t)C + c]);
    }
}

/* dwpe[t][c] = sum over the samples in order (overwrites). */
template <typename E>
__global__ void embed_dwpe_kernel(float *dwpe, const E *dout, int n, int T, int C)
{
    const size_t total = (size_t)T * C;
    GPU_FOR_EACH(i, total) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc += to_f32(dout[(size_t)s * total + i]);
        dwpe[i] = acc;
    }
}

/* Sort keys (the input tokens) and values (their positions p = s*T + t). */
__global__ void embed_keys_kernel(int32_t *keys, int32_t *pos, const int32_t *tokens, int T, int npos)
{
    GPU_FOR_EACH(i, (size_t)npos) {
        const size_t s = i / (size_t)T, t = i % (size_t)T;
        keys[i] = tokens[s * (size_t)(T + 1) + t];
        pos[i] = (int32_t)i;
    }
}

/* After the sort, a token's positions are a run of the sorted order. The
 * order is cut into chunks of EMB_CHUNK; a block sums each run's piece in
 * its chunk for a slice of columns. A run inside one chunk is added to
 * dwte at once; the piece of a run that began in an earlier chunk goes to
 * head[chunk] (one whole chunk long when the run also goes on), the piece
 * of a run that goes on into the next chunk to tail[chunk]; embed_join
 * then adds those runs up chunk by chunk. Each token's row of dwte is
 * written by one thread per column, once. */
constexpr int EMB_CHUNK = 32;
constexpr int EMB_COLS = 128; /* threads per block, one column each */

template <typename E>
__global__ void embed_pieces_kernel(float *dwte, float *head, float *tail, const E *dout, const int32_t *key,
                                    const int32_t *pos, int npos, int C)
{
    const int c = (int)(blockIdx.y * EMB_COLS + threadIdx.x);
    if (c >= C) return;
    const int i0 = (int)blockIdx.x * EMB_CHUNK, i1 = min(npos, i0 + EMB_CHUNK);
    const bool began_before = i0 > 0 && key[i0 - 1] == key[i0];
    float acc = 0.0f;
    int lo = i0;
    for (int i = i0; i < i1; i++) {
        acc += to_f32(dout[(size_t)pos[i] * C + c]);
        if (i + 1 < i1 && key[i + 1] == key[i]) continue;
        const bool earlier = lo == i0 && began_before, goes_on = i + 1 == i1 && i1 < npos && key[i1] == key[i];
        if (earlier) head[(size_t)blockIdx.x * C + c] = acc;
        else if (goes_on) tail[(size_t)blockIdx.x * C + c] = acc;
        else dwte[(size_t)key[i] * C + c] += acc;
        acc = 0.0f;
        lo = i + 1;
    }
}

/* One thread per (chunk with a tail piece, column): that run's pieces in
 * chunk order. */
__global__ void embed_join_kernel(float *dwte, const float *head, const float *tail, const int32_t *key, int npos,
                                  int C)
{
    const int c = (int)(blockIdx.y * EMB_COLS + threadIdx.x);
    if (c >= C) return;
    const int b = (int)blockIdx.x, i0 = b * EMB_CHUNK, i1 = min(npos, i0 + EMB_CHUNK);
    const int32_t v = key[i1 - 1];
    const bool goes_on = i1 < npos && key[i1] == v;
    const bool whole = i0 > 0 && key[i0 - 1] == v && key[i0] == v; /* a middle piece of a longer run */
    if (!goes_on || whole) return;
    float acc = tail[(size_t)b * C + c];
    for (int k = b + 1;; k++) {
        acc += head[(size_t)k * C + c];
        const int end = (k + 1) * EMB_CHUNK;
        if (end >= npos || key[end] != v) break;
    }
    dwte[(size_t)v * C + c] += acc;
}

/* ---- layer normalization ---------------------------------------------------- */

constexpr int LN_WARPS = 8; /* rows per block, one per warp */

template <typename E>
__global__ void layernorm_forward_kernel(E *out, float *mean, float *rstd, const E *inp, const float *gamma,
                                         const float *beta, size_t rows, int C, float eps)
{
    const size_t row = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32;
    const int lane = (int)(threadIdx.x % 32);
    if (row >= rows) return; /* the whole warp */
    const E *x = inp + row * C;
    E *y = out + row * C;
    const float invc = 1.0f / (float)C; /* as the CPU: a product, not a division */
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
    const float m = warp_sum(sum) * invc;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = to_f32(x[c]) - m;
        var += d * d;
    }
    const float s = 1.0f / sqrtf(warp_sum(var) * invc + eps);
    for (int c = lane; c < C; c += 32) y[c] = from_f32<E>((to_f32(x[c]) - m) * s * gamma[c] + beta[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* dinp = rstd * (dn - mean(dn) - norm * mean(dn * norm)), dn = dout * gamma.
 * Every lane reads its elements of dout before writing them, so dinp may
 * be dout. */
template <typename E>
__global__ void layernorm_dinp_kernel(E *dinp, const E *dout, const E *inp, const float *gamma, const float *mean,
                                      const float *rstd, size_t rows, int C)
{
    const size_t row = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32;
    const int lane = (int)(threadIdx.x % 32);
    if (row >= rows) return;
    const E *x = inp + row * C, *g = dout + row * C;
    E *dx = dinp + row * C;
    const float m = mean[row], s = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float dn = to_f32(g[c]) * gamma[c];
        a += dn;
        b += dn * ((to_f32(x[c]) - m) * s);
    }
    a = warp_sum(a) / (float)C;
    b = warp_sum(b) / (float)C;
    for (int c = lane; c < C; c += 32) {
        const float dn = to_f32(g[c]) * gamma[c];
        dx[c] = from_f32<E>((dn - a - (to_f32(x[c]) - m) * s * b) * s);
    }
}

/* dgamma, dbeta as bias_grad's column sums: a block covers 32 columns and a
 * slice of rows, its 8 thread rows striding through it; slices are folded
 * in order by layernorm_params_fold. */
constexpr int LN_COLS = 32, LN_LANES = 8;

template <typename E>
__global__ void layernorm_params_kernel(float *pg, float *pb, const E *dout, const E *inp, const float *mean,
                                        const float *rstd, size_t rows, int C, size_t chunk)
{
    __shared__ float sg[LN_LANES][LN_COLS + 1], sb[LN_LANES][LN_COLS + 1];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, c = (int)blockIdx.x * LN_COLS + tx;
    const size_t r0 = (size_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float g = 0.0f, b = 0.0f;
    if (c < C)
        for (size_t r = r0 + (size_t)ty; r < r1; r += LN_LANES) {
            const float d = to_f32(dout[r * C + c]);
            g += d * ((to_f32(inp[r * C + c]) - mean[r]) * rstd[r]);
            b += d;
        }
    sg[ty][tx] = g;
    sb[ty][tx] = b;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < LN_LANES; k++) {
            g += sg[k][tx];
            b += sb[k][tx];
        }
        pg[(size_t)blockIdx.y * C + c] = g;
        pb[(size_t)blockIdx.y * C + c] = b;
    }
}

__global__ void layernorm_params_fold(float *dgamma, float *dbeta, const float *pg, const float *pb, int parts, int C)
{
    GPU_FOR_EACH(c, (size_t)C) {
        float g = 0.0f, b = 0.0f;
        for (int k = 0; k < parts; k++) {
            g += pg[(size_t)k * C + c];
            b += pb[(size_t)k * C + c];
        }
        dgamma[c] = g;
        dbeta[c] = b;
    }
}

/* ---- GELU ------------------------------------------------------------------- */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

template <typename E> __global__ void gelu_forward_kernel(E *out, const E *inp, size_t n)
{
    GPU_FOR_EACH(i, n) {
        const float x = to_f32(inp[i]), cube = 0.044715f * x * x * x;
        out[i] = from_f32<E>(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube))));
    }
}

/* dinp may be dout (each element is read before it is written). */
template <typename E> __global__ void gelu_backward_kernel(E *dinp, const E *dout, const E *inp, size_t n)
{
    GPU_FOR_EACH(i, n) {
        const float x = to_f32(inp[i]), cube = 0.044715f * x * x * x, arg = GELU_SCALE * (x + cube);
        const float th = tanhf(arg), ch = coshf(arg), sech2 = 1.0f / (ch * ch);
        const float grad = 0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = from_f32<E>(grad * to_f32(dout[i]));
    }
}

/* ---- token cross-entropy ---------------------------------------------------- */

constexpr int XT_THREADS = 256;

/* A block per position (s, t): the first maximal logit, the sum of exp(z -
 * max) in float, the row's loss in double, then dlogits. The target is read
 * before any dlogits are written, so dlogits may be logits. */
template <typename E>
__global__ void __launch_bounds__(XT_THREADS)
    token_xent_rows_kernel(E *dlogits, double *row_loss, int *row_hit, const E *logits, const int32_t *tokens, int T,
                           int V, float grad_scale)
{
    __shared__ float sbest[XT_THREADS / 32], ssum[XT_THREADS / 32];
    __shared__ int sarg[XT_THREADS / 32];
    const size_t row = blockIdx.x;
    const int tid = (int)threadIdx.x, lane = tid % 32;
    const E *z = logits + row * V;
    const int y = tokens[(row / (size_t)T) * (size_t)(T + 1) + row % (size_t)T + 1];
    float best = 0.0f;
    int arg = V; /* none yet */
    for (int j = tid; j < V; j += XT_THREADS) {
        const float v = to_f32(z[j]);
        if (arg == V || v > best) {
            best = v;
            arg = j;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float ob = __shfl_xor_sync(FULL_MASK, best, off);
        const int oa = __shfl_xor_sync(FULL_MASK, arg, off);
        if (oa != V && (arg == V || ob > best || (ob == best && oa < arg))) {
            best = ob;
            arg = oa;
        }
    }
    if (lane == 0) {
        sbest[tid / 32] = best;
        sarg[tid / 32] = arg;
    }
    __syncthreads();
    best = 0.0f;
    arg = V;
    for (int w = 0; w < XT_THREADS / 32; w++)
        if (sarg[w] != V && (arg == V || sbest[w] > best || (sbest[w] == best && sarg[w] < arg))) {
            best = sbest[w];
            arg = sarg[w];
        }
    const float zmax = best;
    float sum = 0.0f;
    for (int j = tid; j < V; j += XT_THREADS) sum += expf(to_f32(z[j]) - zmax);
    sum = block_sum(sum, ssum);
    const bool valid = y >= 0 && y < V;
    if (tid == 0) {
        /* A target outside the vocabulary gives NaN, not a stray read. */
        row_loss[row] = valid ? log((double)sum) - (double)(to_f32(z[y]) - zmax) : (double)NAN;
        row_hit[row] = arg == y;
    }
    if (!dlogits) return;
    __syncthreads(); /* z[y] read before dlogits (maybe z) is written */
    E *d = dlogits + row * V;
    for (int j = tid; j < V; j += XT_THREADS) {
        const float p = expf(to_f32(z[j]) - zmax) / sum;
        d[j] = from_f32<E>((p - (j == y ? 1.0f : 0.0f)) * grad_scale);
    }
}

/* The rows' losses and hits summed by one block in a fixed tree. */
__global__ void __launch_bounds__(XT_THREADS)
    token_xent_sum_kernel(struct gpu_xent_result *res, const double *row_loss, const int *row_hit, size_t rows)
{
    __shared__ double sl[XT_THREADS];
    __shared__ long long sc[XT_THREADS];
    const int t = (int)threadIdx.x;
    double l = 0.0;
    long long c = 0;
    for (size_t i = (size_t)t; i < rows; i += XT_THREADS) {
        l += row_loss[i];
        c += row_hit[i];
    }
    sl[t] = l;
    sc[t] = c;
    __syncthreads();
    for (int k = XT_THREADS / 2; k > 0; k >>= 1) {
        if (t < k) {
            sl[t] += sl[t + k];
            sc[t] += sc[t + k];
        }
        __syncthreads();
    }
    if (t == 0) {
        res->loss = sl[0];
        res->correct = sc[0];
    }
}

/* ---- AdamW and gradient clipping ------------------------------------------ */

/* The decoupled decay, then gpu_kernels.cu's adam step (Keras 3's Adam,
 * alpha = lr * sqrt(1 - b2^t) / (1 - b1^t) from the caller). */
__global__ void adamw_kernel(float *param, float *m, float *v, const float *grad, size_t n, float alpha, float c1,
                             float c2, float eps, float decay)
{
    GPU_FOR_EACH(i, n) {
        const float g = grad[i];
        float p = param[i], mi = m[i], vi = v[i];
        p -= decay * p;
        mi += (g - mi) * c1;
        vi += (g * g - vi) * c2;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - mi * alpha / (sqrtf(vi) + eps);
    }
}

constexpr int SQ_THREADS = 256;

/* Per block, the double sum of squares of its grid-stride share, folded in
 * a fixed tree; the partials then by one block (sumsq_fold). */
__global__ void __launch_bounds__(SQ_THREADS) sumsq_partial_kernel(double *partial, const float *x, size_t n)
{
    __shared__ double s[SQ_THREADS];
    double acc = 0.0;
    GPU_FOR_EACH(i, n) acc += (double)x[i] * (double)x[i];
    const int t = (int)threadIdx.x;
    s[t] = acc;
    __syncthreads();
    for (int k = SQ_THREADS / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}

__global__ void __launch_bounds__(SQ_THREADS) sumsq_fold_kernel(double *out, const double *partial, int parts)
{
    __shared__ double s[SQ_THREADS];
    const int t = (int)threadIdx.x;
    double acc = 0.0;
    for (int i = t; i < parts; i += SQ_THREADS) acc += partial[i];
    s[t] = acc;
    __syncthreads();
    for (int k = SQ_THREADS / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) *out = s[0];
}

} // namespace

/* ---- host side -------------------------------------------------------------- */

static struct gpu_buf embed_scratch; /* sort keys and values (in, out), cub's workspace, chunk pieces */
static struct gpu_buf ln_scratch;    /* layernorm's [slices][C] partial dgamma, dbeta */
static struct gpu_buf w16_scratch;   /* linear_t's weights [V][C] in the activations' 16-bit type */
static struct gpu_buf xent_scratch;  /* token_xent's result, [rows] losses, [rows] hits */
static struct gpu_buf sumsq_scratch; /* sum_squares' per-block partials and result */

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

void gpu_embed_forward(dt_act *out, const int32_t *tokens, const float *wte, const float *wpe, int n, int T, int C)
{
    const size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(T > 0 ? T : 0) * (size_t)(C > 0 ? C : 0);
    if (!total) return;
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        embed_forward_kernel<E><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (E *)out, tokens, wte, wpe, T, C, total);
    });
    DT_KERNEL_CHECK();
}

void gpu_embed_backward(float *dwte, float *dwpe, const dt_act *dout, const int32_t *tokens, int n, int T, int C)
{
    if (T <= 0 || C <= 0) return;
    if (n <= 0) { /* no samples: dwpe is zero, dwte keeps what it holds */
        DT_CUDA_CHECK(cudaMemsetAsync(dwpe, 0, sizeof(float) * (size_t)T * C, gpu.stream));
        return;
    }
    if ((size_t)n * T > (size_t)INT_MAX / 2)
        dt_die(__FILE__, __LINE__, "embed_backward: %d x %d positions are more than the sort handles", n, T);
    const int npos = n * T, chunks = (npos + EMB_CHUNK - 1) / EMB_CHUNK;
    size_t sort_bytes = 0;
    DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                                  (const int32_t *)nullptr, (int32_t *)nullptr, npos, 0, 32,
                                                  gpu.stream));
    const size_t ints = round256(sizeof(int32_t) * (size_t)npos), pieces = round256(sizeof(float) * (size_t)chunks * C);
    char *b = (char *)gpu_buf_reserve(&embed_scratch, 4 * ints + 2 * pieces + round256(sort_bytes));
    int32_t *keys_in = (int32_t *)b, *pos_in = (int32_t *)(b + ints);
    int32_t *keys = (int32_t *)(b + 2 * ints), *pos = (int32_t *)(b + 3 * ints);
    float *head = (float *)(b + 4 * ints), *tail = (float *)(b + 4 * ints + pieces);
    void *work = b + 4 * ints + 2 * pieces;

    const size_t nwpe = (size_t)T * C;
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        embed_dwpe_kernel<E><<<gpu_blocks(nwpe, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(dwpe, (const E *)dout, n,
                                                                                          T, C);
    });
    DT_KERNEL_CHECK();
    embed_keys_kernel<<<gpu_blocks((size_t)npos, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(keys_in, pos_in, tokens,
                                                                                           T, npos);
    DT_KERNEL_CHECK();
    DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(work, sort_bytes, keys_in, keys, pos_in, pos, npos, 0, 32,
                                                  gpu.stream));
    const dim3 grid((unsigned)chunks, (unsigned)((C + EMB_COLS - 1) / EMB_COLS));
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        embed_pieces_kernel<E><<<grid, EMB_COLS, 0, gpu.stream>>>(dwte, head, tail, (const E *)dout, keys, pos, npos, C);
    });
    DT_KERNEL_CHECK();
    embed_join_kernel<<<grid, EMB_COLS, 0, gpu.stream>>>(dwte, head, tail, keys, npos, C);
    DT_KERNEL_CHECK();
}

void gpu_layernorm_forward(dt_act *out, float *mean, float *rstd, const dt_act *inp, const float *gamma,
                           const float *beta, size_t rows, int C, float eps)
{
    if (!rows || C <= 0) return;
    const unsigned blocks = (unsigned)((rows + LN_WARPS - 1) / LN_WARPS);
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        layernorm_forward_kernel<E><<<blocks, 32 * LN_WARPS, 0, gpu.stream>>>((E *)out, mean, rstd, (const E *)inp,
                                                                             gamma, beta, rows, C, eps);
    });
    DT_KERNEL_CHECK();
}

void gpu_layernorm_backward(dt_act *dinp, float *dgamma, float *dbeta, const dt_act *dout, const dt_act *inp,
                            const float *gamma, const float *mean, const float *rstd, size_t rows, int C)
{
    if (C <= 0) return;
    if (!rows) {
        DT_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, sizeof(float) * (size_t)C, gpu.stream));
        DT_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, sizeof(float) * (size_t)C, gpu.stream));
        return;
    }
    /* The parameters' sums first: dinp may overwrite dout. About four
     * blocks per multiprocessor, each slice at least 64 rows. */
    const int colblocks = (C + LN_COLS - 1) / LN_COLS;
    size_t parts = (size_t)(4 * (gpu.sms > 0 ? gpu.sms : 80)) / (size_t)colblocks;
    if (parts > (rows + 63) / 64) parts = (rows + 63) / 64;
    if (parts < 1) parts = 1;
    const size_t chunk = (rows + parts - 1) / parts;
    parts = (rows + chunk - 1) / chunk;
    float *pg = dgamma, *pb = dbeta;
    if (parts > 1) {
        pg = (float *)gpu_buf_reserve(&ln_scratch, sizeof(float) * 2 * parts * (size_t)C);
        pb = pg + parts * (size_t)C;
    }
    const dim3 grid((unsigned)colblocks, (unsigned)parts), block(LN_COLS, LN_LANES);
    const unsigned blocks = (unsigned)((rows + LN_WARPS - 1) / LN_WARPS);
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        layernorm_params_kernel<E><<<grid, block, 0, gpu.stream>>>(pg, pb, (const E *)dout, (const E *)inp, mean,
                                                                   rstd, rows, C, chunk);
        DT_KERNEL_CHECK();
        if (parts > 1) {
            layernorm_params_fold<<<gpu_blocks((size_t)C, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
                dgamma, dbeta, pg, pb, (int)parts, C);
            DT_KERNEL_CHECK();
        }
        layernorm_dinp_kernel<E><<<blocks, 32 * LN_WARPS, 0, gpu.stream>>>((E *)dinp, (const E *)dout, (const E *)inp,
                                                                          gamma, mean, rstd, rows, C);
    });
    DT_KERNEL_CHECK();
}

void gpu_gelu_forward(dt_act *out, const dt_act *inp, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        gelu_forward_kernel<E><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>((E *)out, (const E *)inp, n);
    });
    DT_KERNEL_CHECK();
}

void gpu_gelu_backward(dt_act *dinp, const dt_act *dout, const dt_act *inp, size_t n)
{
    if (!n) return;
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        gelu_backward_kernel<E><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (E *)dinp, (const E *)dout, (const E *)inp, n);
    });
    DT_KERNEL_CHECK();
}

/* ---- linear_t: a product against weights stored [V][C] ------------------- */

/* With float activations the products are gpu_gemm's (16-bit operands
 * under --precision fp16|bf16), as dense does; with 16-bit ones cuBLAS
 * reads the activations where they are and only the float weights are
 * converted (into w16_scratch). Products accumulate in float. */
static const float lt_one = 1.0f, lt_zero = 0.0f;

static int rows_int(const char *op, size_t rows)
{
    if (rows > (size_t)INT_MAX) dt_die(__FILE__, __LINE__, "%s: %zu rows are more than cuBLAS takes", op, rows);
    return (int)rows;
}

static const void *weights16(const float *w, size_t count)
{
    void *p = gpu_buf_reserve(&w16_scratch, count * 2);
    dt_gpu_to16(p, w, count, gpu.act, gpu.stream);
    return p;
}

/* out [rows][V] = inp [rows][C] . w^T, w [V][C]. */
void gpu_linear_t_forward(size_t rows, int C, int V, dt_act *out, const dt_act *inp, const float *w)
{
    if (!rows || V <= 0) return;
    const int m = rows_int("linear_t_forward", rows);
    if (gpu.act == DT_PREC_FP32) {
        gpu_gemm(0, 1, m, V, C, 1.0f, (const float *)inp, C, w, C, 0.0f, (float *)out, V);
        return;
    }
    const cudaDataType t = gpu_blas_type(gpu.act);
    const void *w16 = weights16(w, (size_t)V * C);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_T, CUBLAS_OP_N, V, m, C, &lt_one, w16, t, C, inp, t, C, &lt_zero,
                                 out, t, V, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* dw [V][C] = dout^T . inp (overwritten, zero for no rows); dinp [rows][C]
 * = dout . w unless dinp is NULL. */
void gpu_linear_t_backward(size_t rows, int C, int V, dt_act *dinp, float *dw, const dt_act *dout, const dt_act *inp,
                           const float *w)
{
    if (C <= 0 || V <= 0) return;
    const int m = rows_int("linear_t_backward", rows);
    if (gpu.act == DT_PREC_FP32) {
        /* rows = 0: GEMM's k = 0 with beta = 0 clears dw */
        gpu_gemm(1, 0, V, C, m, 1.0f, (const float *)dout, V, (const float *)inp, C, 0.0f, dw, C);
        if (dinp && m > 0) gpu_gemm(0, 0, m, C, V, 1.0f, (const float *)dout, V, w, C, 0.0f, (float *)dinp, C);
        return;
    }
    if (!m) {
        DT_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)V * C, gpu.stream));
        return;
    }
    const cudaDataType t = gpu_blas_type(gpu.act);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, V, m, &lt_one, inp, t, C, dout, t, V, &lt_zero,
                                 dw, CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (!dinp) return;
    const void *w16 = weights16(w, (size_t)V * C);
    DT_CUBLAS_CHECK(cublasGemmEx(gpu.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, m, V, &lt_one, w16, t, C, dout, t, V, &lt_zero,
                                 dinp, t, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- token cross-entropy ------------------------------------------------------ */

/* As softmax_xent: the result reaches the host through gpu.host_result,
 * and while recording the copy is recorded and graph_run returns it (and
 * adds the count to its *ncorrect). */
double gpu_token_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const int32_t *tokens, int n, int T,
                      int V, float grad_scale)
{
    if (n <= 0 || T <= 0 || V <= 0) {
        if (ncorrect) *ncorrect = 0;
        return 0.0;
    }
    const size_t rows = (size_t)n * T;
    if (rows > (size_t)INT_MAX) dt_die(__FILE__, __LINE__, "token_xent: %zu positions are more than a grid holds", rows);
    const size_t loss_off = 256, hit_off = loss_off + round256(sizeof(double) * rows);
    char *b = (char *)gpu_buf_reserve(&xent_scratch, hit_off + sizeof(int) * rows);
    struct gpu_xent_result *res = (struct gpu_xent_result *)b;
    double *row_loss = (double *)(b + loss_off);
    int *row_hit = (int *)(b + hit_off);
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        token_xent_rows_kernel<E><<<(unsigned)rows, XT_THREADS, 0, gpu.stream>>>(
            (E *)dlogits, row_loss, row_hit, (const E *)logits, tokens, T, V, grad_scale);
    });
    DT_KERNEL_CHECK();
    token_xent_sum_kernel<<<1, XT_THREADS, 0, gpu.stream>>>(res, row_loss, row_hit, rows);
    DT_KERNEL_CHECK();
    DT_CUDA_CHECK(cudaMemcpyAsync(gpu.host_result, res, sizeof *res, cudaMemcpyDeviceToHost, gpu.stream));
    if (gpu.cap) {
        gpu_capture_loss();
        return 0.0;
    }
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    const struct gpu_xent_result *h = (const struct gpu_xent_result *)gpu.host_result;
    if (ncorrect) *ncorrect = (long)h->correct; /* backend.h: set, where softmax_xent adds */
    return h->loss;
}

/* ---- AdamW and gradient clipping ------------------------------------------ */

void gpu_adamw_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha, float beta1,
                      float beta2, float eps, float decay)
{
    if (!n) return;
    adamw_kernel<<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(param, m, v, grad, n, alpha,
                                                                          1.0f - beta1, 1.0f - beta2, eps, decay);
    DT_KERNEL_CHECK();
}

/* Waits for its result, so it cannot be recorded: while recording it fails
 * the recording (gpu_graph.cu) and returns 0. */
double gpu_sum_squares(const float *x, size_t n)
{
    if (!n) return 0.0;
    const unsigned blocks = gpu_blocks(n, SQ_THREADS);
    double *partial = (double *)gpu_buf_reserve(&sumsq_scratch, sizeof(double) * ((size_t)blocks + 1));
    double *out = partial + blocks;
    sumsq_partial_kernel<<<blocks, SQ_THREADS, 0, gpu.stream>>>(partial, x, n);
    DT_KERNEL_CHECK();
    sumsq_fold_kernel<<<1, SQ_THREADS, 0, gpu.stream>>>(out, partial, (int)blocks);
    DT_KERNEL_CHECK();
    if (gpu.cap) {
        gpu_capture_fail("gradient clipping brings the gradients' norm to the host");
        return 0.0;
    }
    DT_CUDA_CHECK(cudaMemcpyAsync(gpu.host_result, out, sizeof(double), cudaMemcpyDeviceToHost, gpu.stream));
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    return *(const volatile double *)gpu.host_result;
}

void gpu_scale(float *x, size_t n, float s) { dt_gpu_scale(x, n, s, NULL); }
