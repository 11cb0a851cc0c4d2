/* gpu_attention.cu: causal flash attention on the device (backend.h's
 * attention_forward/backward), the CUDA side of src/cpu/cpu_attention.c.
 *
 * A block holds 16 query rows of one head of one sample (4 per warp) and
 * walks the key tiles (32 keys, one per lane) up to the diagonal through
 * shared memory, keeping a running maximum and sum per row (online
 * softmax), so no T x T matrix exists anywhere. The log-sum-exp of each row
 * is kept; backward recomputes the probabilities from it, bit for bit the
 * forward's scores, with Di = rowsum(dO * O), in two passes: one over key
 * tiles (dk, dv) and one over query tiles (dq), each writing only its own
 * rows, so no atomics and the same bits every run. Heads up to 256 wide (8
 * values per lane in registers). Activations are gpu.act's element type,
 * computed in float; lse and Di are float. */
#include "config.h"

#include <limits.h>
#include <math.h>

#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include "gpu/gpu_internal.h"
#include "gpu/gpu_warp.cuh"

namespace {

/* ---- attention ---------------------------------------------------------------- */

constexpr int ATT_WARPS = 4;
constexpr int ATT_ROWS = 4;                      /* rows (queries or keys) per warp */
constexpr int ATT_BR = ATT_WARPS * ATT_ROWS;     /* rows per block */
constexpr int ATT_BC = 32;                       /* a tile of the other side: one per lane */
constexpr int ATT_THREADS = 32 * ATT_WARPS;
constexpr int ATT_MAX_D = 256;                   /* 8 values per lane */

/* The row stride of a shared tile read one row per lane: odd, so that the
 * 32 lanes' rows fall in 32 different banks. */
__host__ __device__ __forceinline__ int att_pad(int D) { return D | 1; }

/* out [n][T][C], lse [n][H][T]; grid (query tiles, H, n). A row's state:
 * m (running maximum of its scaled scores), l (sum of exp(score - m)), o
 * (the exp-weighted sum of values, lanes over the head's columns d = lane +
 * 32 k, k < ND). A tile's keys beyond the row's query are -inf, exp 0. */
template <typename E, int ND>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(E *out, float *lse, const E *qkv, int T, int C, int H, float scale)
{
    extern __shared__ float att_smem[];
    const int D = C / H, DP = att_pad(D);
    float *sq = att_smem;        /* [ATT_BR][D] the block's queries */
    float *sk = sq + ATT_BR * D; /* [ATT_BC][DP] a tile of keys */
    float *sv = sk + ATT_BC * DP; /* [ATT_BC][D] their values */
    const int h = (int)blockIdx.y, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int q0 = (int)blockIdx.x * ATT_BR;
    const size_t stride = 3 * (size_t)C, s = blockIdx.z;
    const E *base = qkv + s * (size_t)T * stride + (size_t)h * D; /* head h's q of position 0 */

    for (int e = (int)threadIdx.x; e < ATT_BR * D; e += ATT_THREADS) {
        const int t = q0 + e / D;
        sq[e] = t < T ? to_f32(base[(size_t)t * stride + e % D]) : 0.0f;
    }
    float m[ATT_ROWS], l[ATT_ROWS], o[ATT_ROWS][ND];
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) o[r][k] = 0.0f;
    }
    const int kend = min(T, q0 + ATT_BR); /* keys any of the block's queries sees */
    for (int k0 = 0; k0 < kend; k0 += ATT_BC) {
        __syncthreads(); /* the last tile's readers are done */
        for (int e = (int)threadIdx.x; e < ATT_BC * D; e += ATT_THREADS) {
            const int j = e / D, d = e % D, key = k0 + j;
            const bool in = key < T;
            sk[j * DP + d] = in ? to_f32(base[(size_t)key * stride + C + d]) : 0.0f;
            sv[j * D + d] = in ? to_f32(base[(size_t)key * stride + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        float sc[ATT_ROWS]; /* lane's key against each of the warp's queries */
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) sc[r] = 0.0f;
        const float *kr = sk + lane * DP;
        for (int d = 0; d < D; d++) {
            const float kd = kr[d];
#pragma unroll
            for (int r = 0; r < ATT_ROWS; r++) sc[r] += sq[(warp * ATT_ROWS + r) * D + d] * kd;
        }
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) {
            const int t = q0 + warp * ATT_ROWS + r;
            if (t >= T) continue; /* the whole warp */
            const float x = k0 + lane <= t ? sc[r] * scale : -INFINITY;
            const float mt = warp_max(x);
            if (mt == -INFINITY) continue; /* no key of this tile is visible (the whole warp) */
            const float mn = fmaxf(m[r], mt), alpha = expf(m[r] - mn), p = expf(x - mn);
            l[r] = l[r] * alpha + warp_sum(p);
#pragma unroll
            for (int k = 0; k < ND; k++) o[r][k] *= alpha;
            const int jn = min(ATT_BC, t - k0 + 1);
            for (int j = 0; j < jn; j++) {
                const float pj = __shfl_sync(FULL_MASK, p, j);
                const float *vr = sv + j * D;
#pragma unroll
                for (int k = 0; k < ND; k++)
                    if (lane + 32 * k < D) o[r][k] += pj * vr[lane + 32 * k];
            }
            m[r] = mn;
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        const int t = q0 + warp * ATT_ROWS + r;
        if (t >= T) continue;
        E *y = out + (s * (size_t)T + (size_t)t) * C + (size_t)h * D;
#pragma unroll
        for (int k = 0; k < ND; k++)
            if (lane + 32 * k < D) y[lane + 32 * k] = from_f32<E>(o[r][k] / l[r]);
        if (lane == 0) lse[(s * H + (size_t)h) * T + (size_t)t] = m[r] + logf(l[r]);
    }
}

/* Di [n][H][T] = sum over the head's columns of dout * out; a warp per
 * (position, head). */
template <typename E>
__global__ void attention_di_kernel(float *di, const E *dout, const E *out, size_t rows, int T, int C, int H)
{
    const size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = (int)(threadIdx.x % 32), D = C / H;
    if (w >= rows) return;
    const size_t h = w % (size_t)H, p = w / (size_t)H; /* p = s*T + t */
    const E *g = dout + p * C + h * D, *y = out + p * C + h * D;
    float acc = 0.0f;
    for (int d = lane; d < D; d += 32) acc += to_f32(g[d]) * to_f32(y[d]);
    acc = warp_sum(acc);
    if (lane == 0) di[((p / (size_t)T) * H + h) * T + p % (size_t)T] = acc;
}

/* dq of a tile of queries (grid as forward's): P = exp(score - lse), dS =
 * P (dO . v - Di), dq = scale * sum dS k. The scores are the forward's, term
 * for term. */
template <typename E, int ND>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_dq_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *di, int T, int C, int H,
                        float scale)
{
    extern __shared__ float att_smem[];
    const int D = C / H, DP = att_pad(D);
    float *sq = att_smem;          /* [ATT_BR][D] the block's queries */
    float *sg = sq + ATT_BR * D;   /* [ATT_BR][D] their output gradients */
    float *sk = sg + ATT_BR * D;   /* [ATT_BC][DP] a tile of keys */
    float *sv = sk + ATT_BC * DP;  /* [ATT_BC][DP] their values */
    const int h = (int)blockIdx.y, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int q0 = (int)blockIdx.x * ATT_BR;
    const size_t stride = 3 * (size_t)C, s = blockIdx.z;
    const E *base = qkv + s * (size_t)T * stride + (size_t)h * D;
    const E *gbase = dout + s * (size_t)T * C + (size_t)h * D;
    const float *rlse = lse + (s * H + (size_t)h) * T, *rdi = di + (s * H + (size_t)h) * T;

    for (int e = (int)threadIdx.x; e < ATT_BR * D; e += ATT_THREADS) {
        const int t = q0 + e / D, d = e % D;
        sq[e] = t < T ? to_f32(base[(size_t)t * stride + d]) : 0.0f;
        sg[e] = t < T ? to_f32(gbase[(size_t)t * C + d]) : 0.0f;
    }
    float rl[ATT_ROWS], rd[ATT_ROWS], dq[ATT_ROWS][ND];
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        const int t = q0 + warp * ATT_ROWS + r;
        rl[r] = t < T ? rlse[t] : 0.0f;
        rd[r] = t < T ? rdi[t] : 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) dq[r][k] = 0.0f;
    }
    const int kend = min(T, q0 + ATT_BR);
    for (int k0 = 0; k0 < kend; k0 += ATT_BC) {
        __syncthreads();
        for (int e = (int)threadIdx.x; e < ATT_BC * D; e += ATT_THREADS) {
            const int j = e / D, d = e % D, key = k0 + j;
            const bool in = key < T;
            sk[j * DP + d] = in ? to_f32(base[(size_t)key * stride + C + d]) : 0.0f;
            sv[j * DP + d] = in ? to_f32(base[(size_t)key * stride + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        float sc[ATT_ROWS], dp[ATT_ROWS];
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) sc[r] = dp[r] = 0.0f;
        const float *kr = sk + lane * DP, *vr = sv + lane * DP;
        for (int d = 0; d < D; d++) {
            const float kd = kr[d], vd = vr[d];
#pragma unroll
            for (int r = 0; r < ATT_ROWS; r++) {
                sc[r] += sq[(warp * ATT_ROWS + r) * D + d] * kd;
                dp[r] += sg[(warp * ATT_ROWS + r) * D + d] * vd;
            }
        }
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) {
            const int t = q0 + warp * ATT_ROWS + r;
            if (t >= T) continue;
            const float p = k0 + lane <= t ? expf(sc[r] * scale - rl[r]) : 0.0f;
            const float ds = p * (dp[r] - rd[r]);
            const int jn = min(ATT_BC, t - k0 + 1);
            for (int j = 0; j < jn; j++) {
                const float dsj = __shfl_sync(FULL_MASK, ds, j);
                const float *kj = sk + j * DP;
#pragma unroll
                for (int k = 0; k < ND; k++)
                    if (lane + 32 * k < D) dq[r][k] += dsj * kj[lane + 32 * k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        const int t = q0 + warp * ATT_ROWS + r;
        if (t >= T) continue;
        E *g = dqkv + (s * (size_t)T + (size_t)t) * stride + (size_t)h * D;
#pragma unroll
        for (int k = 0; k < ND; k++)
            if (lane + 32 * k < D) g[lane + 32 * k] = from_f32<E>(dq[r][k] * scale);
    }
}

/* dk and dv of a tile of keys (grid (key tiles, H, n)), over the query
 * tiles that see them (queries i >= key j): dv = sum P dO, dk = scale *
 * sum dS q. Lanes hold queries for the scores, columns for the sums. */
template <typename E, int ND>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_dkv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *di, int T, int C,
                         int H, float scale)
{
    extern __shared__ float att_smem[];
    const int D = C / H, DP = att_pad(D);
    float *sk = att_smem;          /* [ATT_BR][D] the block's keys */
    float *sv = sk + ATT_BR * D;   /* [ATT_BR][D] their values */
    float *sq = sv + ATT_BR * D;   /* [ATT_BC][DP] a tile of queries */
    float *sg = sq + ATT_BC * DP;  /* [ATT_BC][DP] their output gradients */
    float *sl = sg + ATT_BC * DP;  /* [ATT_BC] their lse */
    float *sd = sl + ATT_BC;       /* [ATT_BC] their Di */
    const int h = (int)blockIdx.y, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int j0 = (int)blockIdx.x * ATT_BR;
    const size_t stride = 3 * (size_t)C, s = blockIdx.z;
    const E *base = qkv + s * (size_t)T * stride + (size_t)h * D;
    const E *gbase = dout + s * (size_t)T * C + (size_t)h * D;
    const float *rlse = lse + (s * H + (size_t)h) * T, *rdi = di + (s * H + (size_t)h) * T;

    for (int e = (int)threadIdx.x; e < ATT_BR * D; e += ATT_THREADS) {
        const int j = j0 + e / D, d = e % D;
        sk[e] = j < T ? to_f32(base[(size_t)j * stride + C + d]) : 0.0f;
        sv[e] = j < T ? to_f32(base[(size_t)j * stride + 2 * C + d]) : 0.0f;
    }
    float dk[ATT_ROWS][ND], dv[ATT_ROWS][ND];
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++)
#pragma unroll
        for (int k = 0; k < ND; k++) dk[r][k] = dv[r][k] = 0.0f;
    for (int i0 = j0 / ATT_BC * ATT_BC; i0 < T; i0 += ATT_BC) {
        __syncthreads();
        for (int e = (int)threadIdx.x; e < ATT_BC * D; e += ATT_THREADS) {
            const int qi = e / D, d = e % D, t = i0 + qi;
            sq[qi * DP + d] = t < T ? to_f32(base[(size_t)t * stride + d]) : 0.0f;
            sg[qi * DP + d] = t < T ? to_f32(gbase[(size_t)t * C + d]) : 0.0f;
        }
        if ((int)threadIdx.x < ATT_BC) {
            const int t = i0 + (int)threadIdx.x;
            sl[threadIdx.x] = t < T ? rlse[t] : 0.0f;
            sd[threadIdx.x] = t < T ? rdi[t] : 0.0f;
        }
        __syncthreads();
        float sc[ATT_ROWS], dp[ATT_ROWS]; /* lane's query against each of the warp's keys */
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) sc[r] = dp[r] = 0.0f;
        const float *qr = sq + lane * DP, *gr = sg + lane * DP;
        for (int d = 0; d < D; d++) {
            const float qd = qr[d], gd = gr[d];
#pragma unroll
            for (int r = 0; r < ATT_ROWS; r++) {
                sc[r] += qd * sk[(warp * ATT_ROWS + r) * D + d];
                dp[r] += gd * sv[(warp * ATT_ROWS + r) * D + d];
            }
        }
        const int t = i0 + lane;
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) {
            const int j = j0 + warp * ATT_ROWS + r;
            if (j >= T) continue;
            const float p = t >= j && t < T ? expf(sc[r] * scale - sl[lane]) : 0.0f;
            const float ds = p * (dp[r] - sd[lane]);
            const int lo = max(0, j - i0), hi = min(ATT_BC, T - i0);
            for (int qi = lo; qi < hi; qi++) {
                const float pq = __shfl_sync(FULL_MASK, p, qi), dsq = __shfl_sync(FULL_MASK, ds, qi);
                const float *gq = sg + qi * DP, *qq = sq + qi * DP;
#pragma unroll
                for (int k = 0; k < ND; k++)
                    if (lane + 32 * k < D) {
                        dv[r][k] += pq * gq[lane + 32 * k];
                        dk[r][k] += dsq * qq[lane + 32 * k];
                    }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        const int j = j0 + warp * ATT_ROWS + r;
        if (j >= T) continue;
        E *g = dqkv + (s * (size_t)T + (size_t)j) * stride + (size_t)h * D;
#pragma unroll
        for (int k = 0; k < ND; k++)
            if (lane + 32 * k < D) {
                g[C + lane + 32 * k] = from_f32<E>(dk[r][k] * scale);
                g[2 * C + lane + 32 * k] = from_f32<E>(dv[r][k]);
            }
    }
}

} // namespace

static struct gpu_buf di_scratch; /* attention's Di [n][H][T] */

/* ---- attention: shapes, shared memory, and the head-width dispatch ------- */

static int head_width(const char *op, int C, int H)
{
    if (H <= 0 || C % H != 0)
        dt_die(__FILE__, __LINE__, "%s: %d channels do not split into %d heads", op, C, H);
    const int D = C / H;
    if (D > ATT_MAX_D)
        dt_die(__FILE__, __LINE__, "%s: heads %d wide (%d channels, %d heads); the CUDA kernels hold at most %d",
               op, D, C, H, ATT_MAX_D);
    return D;
}

/* Dynamic shared memory of kernel k: beyond 48 KiB it must be asked for,
 * and the device must have it. */
template <typename K> static void want_shared(K *kernel, size_t bytes, const char *op, int D)
{
    if (bytes <= 48 * 1024) return;
    int most = 0;
    DT_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, gpu.dev));
    if (bytes > (size_t)most)
        dt_die(__FILE__, __LINE__, "%s: heads %d wide need %zu bytes of shared memory per block; %s has %d", op, D,
               bytes, gpu.name, most);
    DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* f(std::integral_constant<int, ND>()) for the registers per lane a head of
 * width D needs (ND values of 32 columns each, a power of two). */
template <typename F> static void by_width(int D, F f)
{
    if (D <= 64) f(std::integral_constant<int, 2>());
    else if (D <= 128) f(std::integral_constant<int, 4>());
    else f(std::integral_constant<int, 8>());
}

static void check_grid(const char *op, int n, int H)
{
    if (n > 65535 || H > 65535) dt_die(__FILE__, __LINE__, "%s: %d samples of %d heads: more than a grid holds", op, n, H);
}

void gpu_attention_forward(dt_act *out, float *lse, const dt_act *qkv, int n, int T, int C, int H)
{
    if (n <= 0 || T <= 0) return;
    const int D = head_width("attention_forward", C, H), DP = att_pad(D);
    check_grid("attention_forward", n, H);
    const float scale = 1.0f / sqrtf((float)D);
    const dim3 grid((unsigned)((T + ATT_BR - 1) / ATT_BR), (unsigned)H, (unsigned)n);
    const size_t shm = sizeof(float) * ((size_t)ATT_BR * D + (size_t)ATT_BC * DP + (size_t)ATT_BC * D);
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        by_width(D, [&](auto nd) {
            constexpr int ND = decltype(nd)::value;
            want_shared(attention_forward_kernel<E, ND>, shm, "attention_forward", D);
            attention_forward_kernel<E, ND><<<grid, ATT_THREADS, shm, gpu.stream>>>((E *)out, lse, (const E *)qkv, T,
                                                                                   C, H, scale);
        });
    });
    DT_KERNEL_CHECK();
}

void gpu_attention_backward(dt_act *dqkv, const dt_act *dout, const dt_act *qkv, const dt_act *out, const float *lse,
                            int n, int T, int C, int H)
{
    if (n <= 0 || T <= 0) return;
    const int D = head_width("attention_backward", C, H), DP = att_pad(D);
    check_grid("attention_backward", n, H);
    const float scale = 1.0f / sqrtf((float)D);
    const size_t rows = (size_t)n * T * H;
    float *di = (float *)gpu_buf_reserve(&di_scratch, sizeof(float) * rows);
    const dim3 grid((unsigned)((T + ATT_BR - 1) / ATT_BR), (unsigned)H, (unsigned)n);
    const size_t shm_q = sizeof(float) * (2 * (size_t)ATT_BR * D + 2 * (size_t)ATT_BC * DP);
    const size_t shm_kv = sizeof(float) * (2 * (size_t)ATT_BR * D + 2 * (size_t)ATT_BC * DP + 2 * (size_t)ATT_BC);
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        attention_di_kernel<E><<<(unsigned)((rows + 7) / 8), 256, 0, gpu.stream>>>(di, (const E *)dout, (const E *)out,
                                                                                  rows, T, C, H);
        DT_KERNEL_CHECK();
        by_width(D, [&](auto nd) {
            constexpr int ND = decltype(nd)::value;
            want_shared(attention_dkv_kernel<E, ND>, shm_kv, "attention_backward", D);
            want_shared(attention_dq_kernel<E, ND>, shm_q, "attention_backward", D);
            attention_dkv_kernel<E, ND><<<grid, ATT_THREADS, shm_kv, gpu.stream>>>(
                (E *)dqkv, (const E *)dout, (const E *)qkv, lse, di, T, C, H, scale);
            DT_KERNEL_CHECK();
            attention_dq_kernel<E, ND><<<grid, ATT_THREADS, shm_q, gpu.stream>>>(
                (E *)dqkv, (const E *)dout, (const E *)qkv, lse, di, T, C, H, scale);
        });
    });
    DT_KERNEL_CHECK();
}
