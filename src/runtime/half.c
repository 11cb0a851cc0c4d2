/* half.c: float32 <-> fp16/bf16 on the host (see half.h). */
#include "config.h"

#include <string.h>

#include "backend.h"
#include "runtime/half.h"

static uint32_t bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* x >> shift, rounded to nearest with ties to even (1 <= shift <= 31). */
static uint32_t shift_rne(uint32_t x, int shift)
{
    uint32_t q = x >> shift, rem = x & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t dt_f32_to_f16(float f)
{
    uint32_t x = bits(f), sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15; /* the fp16 exponent field */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e >= 1) /* a carry out of the mantissa moves into the exponent, up to infinity */
        return (uint16_t)(sign | (((uint32_t)e << 10) + shift_rne(man, 13)));
    if (e < -10) return (uint16_t)sign; /* below half the smallest subnormal */
    return (uint16_t)(sign | shift_rne(man | 0x800000u, 14 - e)); /* subnormal (or the smallest normal) */
}

float dt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return from_bits(sign | 0x7f800000u | (man << 13));
    if (exp) return from_bits(sign | ((exp + 112) << 23) | (man << 13));
    float v = (float)man * 0x1p-24f; /* subnormal: exact in float */
    return sign ? -v : v;
}

uint16_t dt_f32_to_bf16(float f)
{
    uint32_t x = bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float dt_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

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
