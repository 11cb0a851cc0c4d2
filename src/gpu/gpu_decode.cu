/* gpu_decode.cu: one query of generation against the key/value cache on
 * the device (backend.h's attention_decode), the CUDA side of
 * src/cpu/cpu_decode.c.
 *
 * One block per head, 4 warps. The warps take the keys 0..pos in turn
 * (warp w keys w, w + 4, ...); a key's score is a warp's dot product over
 * the head's D columns (lanes over columns d = lane + 32 k), and each warp
 * keeps its own running maximum, sum and exp-weighted sum of values (an
 * online softmax, nothing of size pos kept). The four partial softmaxes
 * are then merged in shared memory, rescaled to the common maximum:
 * o = sum_w o_w e^(m_w - m) / sum_w l_w e^(m_w - m). The cache is
 * attention_forward's qkv layout ([t][3C]), so the layer's 1-row
 * projection writes straight into it. Heads up to 256 wide (8 values a
 * lane); activations are gpu.act's element type, computed in float. */
#include "config.h"

#include <math.h>

#include "gpu/gpu_internal.h"
#include "gpu/gpu_warp.cuh"

namespace {

constexpr int DEC_WARPS = 4;
constexpr int DEC_MAX_D = 256;

template <typename E, int ND>
__global__ void __launch_bounds__(32 * DEC_WARPS)
    attention_decode_kernel(E *out, const E *qkv, int pos, int C, int D, float scale)
{
    __shared__ float sm[DEC_WARPS], sl[DEC_WARPS];
    __shared__ float so[DEC_WARPS][DEC_MAX_D];
    const int h = (int)blockIdx.x, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const size_t stride = 3 * (size_t)C;
    const E *q = qkv + (size_t)pos * stride + (size_t)h * D;
    float qr[ND], o[ND];
#pragma unroll
    for (int k = 0; k < ND; k++) {
        const int d = lane + 32 * k;
        qr[k] = d < D ? to_f32(q[d]) * scale : 0.0f;
        o[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t = warp; t <= pos; t += DEC_WARPS) {
        const E *kt = qkv + (size_t)t * stride + C + (size_t)h * D, *vt = kt + C;
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            const int d = lane + 32 * k;
            if (d < D) s += qr[k] * to_f32(kt[d]);
        }
        s = warp_sum(s); /* the same on every lane */
        if (s > m) {     /* a new maximum: what was summed so far shrinks by e^(m - s) (0 at the first key) */
            const float a = expf(m - s);
            l *= a;
#pragma unroll
            for (int k = 0; k < ND; k++) o[k] *= a;
            m = s;
        }
        const float p = expf(s - m);
        l += p;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            const int d = lane + 32 * k;
            if (d < D) o[k] += p * to_f32(vt[d]);
        }
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int k = 0; k < ND; k++) {
        const int d = lane + 32 * k;
        if (d < D) so[warp][d] = o[k];
    }
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY, L = 0.0f, f[DEC_WARPS];
    for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, sm[w]);
    for (int w = 0; w < DEC_WARPS; w++) {
        f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M); /* a warp with no key adds nothing */
        L += sl[w] * f[w];
    }
    const float inv = 1.0f / L;
#pragma unroll
    for (int k = 0; k < ND; k++) {
        const int d = lane + 32 * k;
        if (d >= D) continue;
        float acc = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) acc += so[w][d] * f[w];
        out[(size_t)h * D + d] = from_f32<E>(acc * inv);
    }
}

template <typename E, int ND> void launch(dt_act *out, const dt_act *qkv, int pos, int C, int H, int D)
{
    attention_decode_kernel<E, ND><<<(unsigned)H, 32 * DEC_WARPS, 0, gpu.stream>>>(
        (E *)out, (const E *)qkv, pos, C, D, 1.0f / sqrtf((float)D));
}

} // namespace

void gpu_attention_decode(dt_act *out, const dt_act *qkv, int pos, int C, int H)
{
    if (pos < 0 || H < 1) return;
    if (C % H != 0 || C / H > DEC_MAX_D)
        dt_die(__FILE__, __LINE__, "attention_decode: width %d in %d heads (heads of at most %d)", C, H, DEC_MAX_D);
    const int D = C / H;
    gpu_by_type(gpu.act, [&](auto e) {
        using E = decltype(e);
        if (D <= 32) launch<E, 1>(out, qkv, pos, C, H, D);
        else if (D <= 64) launch<E, 2>(out, qkv, pos, C, H, D);
        else if (D <= 128) launch<E, 4>(out, qkv, pos, C, H, D);
        else launch<E, 8>(out, qkv, pos, C, H, D);
    });
    DT_KERNEL_CHECK();
}
