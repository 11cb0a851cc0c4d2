/* rng.h: small, fast, reproducible random numbers (splitmix64 seeding into
 * xoshiro256**). The state is plain data so checkpoints can store it. */
#ifndef DT_RNG_H
#define DT_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct dt_rng { uint64_t s[4]; } dt_rng;

/* splitmix64's step and finaliser: a well-mixed 64-bit hash of z. The
 * stateless generators (synthetic data, augmentation draws, dtrain-prep)
 * hash (seed, index) with it, so any rank can produce any row. */
static inline uint64_t dt_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Independent streams: (seed, stream) pairs give unrelated sequences. */
void dt_rng_seed(dt_rng *r, uint64_t seed, uint64_t stream);
uint64_t dt_rng_u64(dt_rng *r);
float dt_rng_uniform(dt_rng *r);                  /* [0, 1) */
void dt_rng_uniforms(dt_rng *r, float *out, size_t n); /* n of them, as n calls would give */
uint64_t dt_rng_below(dt_rng *r, uint64_t n);     /* [0, n), unbiased */
void dt_rng_permutation(dt_rng *r, int64_t *perm, int64_t n);

#endif
