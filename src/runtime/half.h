/* half.h: float32 <-> 16-bit conversions on the host, the one copy of each.
 *
 * Used wherever the host writes or reads fp16/bf16: activations kept in 16
 * bits (tensor.h's dt_precision; the injected overflow of the loss-scaling
 * test, the tests' references), the ring's compressed transport
 * (collectives/ring.c), and the CPU backend's bf16 operands (cpu/). Round
 * to nearest, ties to even, as CUDA's __float2half_rn and
 * __float2bfloat16_rn; infinities stay infinite and NaN stays NaN.
 *
 * The one design decision: fp16 is the compiler's _Float16 conversion, not
 * bit arithmetic, so a DT_MULTIVERSION loop becomes F16C's vcvtps2ph where
 * the CPU has it (and libgcc's exact software conversion where not). bf16
 * has no such type in C; its rounding is the branch-free bit arithmetic
 * below, which vectorizes. Static inline: these run per element in hot
 * loops. */
#ifndef DT_HALF_H
#define DT_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t dt_f32_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

static inline float dt_f16_to_f32(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, sizeof h);
    return (float)h;
}

/* Round to nearest even on the bit pattern; a NaN keeps its sign and top
 * payload bits and is made quiet, so it cannot round into an infinity. */
static inline uint16_t dt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline float dt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n floats into a buffer of element type `type` (enum dt_precision), and
 * back. dst and src of act_encode may be the same float32 buffer only when
 * type is DT_PREC_FP32. */
void dt_act_encode(int type, void *dst, const float *src, size_t n);
void dt_act_decode(int type, float *dst, const void *src, size_t n);

#endif
