/* gpu_warp.cuh: warp and block reductions shared by the transformer's
 * kernels (gpu_transformer.cu, gpu_attention.cu). Every lane or thread ends
 * with the same value, summed in a fixed order, so results repeat bit for
 * bit. Included only by .cu files. */
#ifndef DT_GPU_WARP_CUH
#define DT_GPU_WARP_CUH

static constexpr unsigned FULL_MASK = 0xffffffffu;

/* Butterfly reductions: every lane ends with the same value (each step adds
 * the same two numbers on both lanes of a pair). */
static __device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

/* The sum over a block of `threads` threads, the same value in every
 * thread (warp sums folded in warp order); buf holds threads / 32 floats. */
static __device__ __forceinline__ float block_sum(float v, float *buf)
{
    const int warps = (int)(blockDim.x / 32);
    v = warp_sum(v);
    __syncthreads(); /* buf may still be read from the last call */
    if (threadIdx.x % 32 == 0) buf[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < warps; w++) t += buf[w];
    return t;
}

#endif
