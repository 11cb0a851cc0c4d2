/* half.h: float32 <-> 16-bit conversions on the host, for activations kept
 * in 16 bits (backend.h's act_type): a value the host writes into such a
 * buffer (the injected overflow of the loss-scaling test), and the tests'
 * references. Round to nearest, ties to even, as CUDA's __float2half_rn and
 * __float2bfloat16_rn; infinities stay infinite and NaN stays NaN. */
#ifndef DT_HALF_H
#define DT_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t dt_f32_to_f16(float f);
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);
float dt_bf16_to_f32(uint16_t h);

/* n floats into a buffer of element type `type` (enum dt_precision), and
 * back. dst and src of act_encode may be the same float32 buffer only when
 * type is DT_PREC_FP32. */
void dt_act_encode(int type, void *dst, const float *src, size_t n);
void dt_act_decode(int type, float *dst, const void *src, size_t n);

#endif
