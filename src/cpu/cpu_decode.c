/* cpu_decode.c: one query of generation against the key/value cache
 * (backend.h's attention_decode) on the CPU.
 *
 * Per head, the query row pos is scored against keys 0..pos and the values
 * are summed with an online softmax (a running maximum m and sum l; the
 * output row rescaled by exp(m_old - m_new) when the maximum grows), so the
 * work is O(pos * D) and nothing of size pos is kept: the same arithmetic
 * as attention_forward's row pos, one row at a time. All float32; bf16
 * activations are decoded on load.
 *
 * The one design decision: the cache is attention_forward's own qkv layout
 * ([t][3C] rows, q | k | v), so the layer's 1-row q/k/v projection writes
 * straight into row pos and no copy or second layout exists. */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "cpu/cpu_internal.h"

enum { MAX_D = 1024 }; /* a head's width held on the stack (GPT-2 XL: 64) */

static inline __attribute__((always_inline)) void decode_head(void *out, const void *qkv, int pos, int C, int D,
                                                             int h, float scale, const int bf)
{
    const size_t stride = 3 * (size_t)C, q0 = (size_t)pos * stride + (size_t)h * D;
    float q[MAX_D], o[MAX_D];
    for (int d = 0; d < D; d++) {
        q[d] = cpu_ld(qkv, q0 + (size_t)d, bf) * scale;
        o[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t = 0; t <= pos; t++) {
        const size_t k0 = (size_t)t * stride + (size_t)C + (size_t)h * D, v0 = k0 + (size_t)C;
        float s = 0.0f;
        for (int d = 0; d < D; d++) s += q[d] * cpu_ld(qkv, k0 + (size_t)d, bf);
        if (s > m) { /* a new maximum: what was summed so far shrinks by exp(m - s) */
            const float a = expf(m - s); /* 0 on the first key: m = -inf */
            l *= a;
            for (int d = 0; d < D; d++) o[d] *= a;
            m = s;
        }
        const float p = expf(s - m);
        l += p;
        for (int d = 0; d < D; d++) o[d] += p * cpu_ld(qkv, v0 + (size_t)d, bf);
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < D; d++) cpu_st(out, (size_t)h * D + (size_t)d, o[d] * inv, bf);
}

void cpu_attention_decode(void *out, const void *qkv, int pos, int C, int H, int bf)
{
    const int D = C / H;
    if (D > MAX_D) dt_die(__FILE__, __LINE__, "attention_decode: heads of width %d (at most %d)", D, MAX_D);
    const float scale = 1.0f / sqrtf((float)D);
    for (int h = 0; h < H; h++) {
        if (bf) decode_head(out, qkv, pos, C, D, h, scale, 1);
        else decode_head(out, qkv, pos, C, D, h, scale, 0);
    }
}
