/* rng.c: xoshiro256** seeded through splitmix64 (see rng.h). */
#include "config.h"
#include "runtime/rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = *x;
    *x += 0x9e3779b97f4a7c15ULL;
    return dt_mix64(z);
}

void dt_rng_seed(dt_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dt_rng_u64(dt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dt_rng_uniform(dt_rng *r) { return (float)(dt_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

/* The same draws with the state in registers: a call per number kept the
 * state in memory and cost dropout 8 ns an element. */
void dt_rng_uniforms(dt_rng *r, float *out, size_t n)
{
    uint64_t s0 = r->s[0], s1 = r->s[1], s2 = r->s[2], s3 = r->s[3];
    for (size_t i = 0; i < n; i++) {
        const uint64_t result = rotl(s1 * 5, 7) * 9, t = s1 << 17;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = rotl(s3, 45);
        out[i] = (float)(result >> 40) * (1.0f / 16777216.0f);
    }
    r->s[0] = s0, r->s[1] = s1, r->s[2] = s2, r->s[3] = s3;
}

uint64_t dt_rng_below(dt_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
    do x = dt_rng_u64(r); while (x >= limit);
    return x % n;
}

void dt_rng_permutation(dt_rng *r, int64_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)dt_rng_below(r, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
