/* half.c: activations to and from their 16-bit element types (see half.h,
 * which holds the conversions themselves). */
#include "config.h"

#include <string.h>

#include "runtime/half.h"
#include "tensor.h"

void dt_act_encode(int type, void *dst, const float *src, size_t n)
{
    uint16_t *d = dst;
    if (type == DT_PREC_FP32) memmove(dst, src, n * sizeof(float));
    else if (type == DT_PREC_FP16)
        for (size_t i = 0; i < n; i++) d[i] = dt_f32_to_f16(src[i]);
    else
        for (size_t i = 0; i < n; i++) d[i] = dt_f32_to_bf16(src[i]);
}

void dt_act_decode(int type, float *dst, const void *src, size_t n)
{
    const uint16_t *s = src;
    if (type == DT_PREC_FP32) memmove(dst, src, n * sizeof(float));
    else if (type == DT_PREC_FP16)
        for (size_t i = 0; i < n; i++) dst[i] = dt_f16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(s[i]);
}
