/* init.c: Keras's default initialiser for the layers' kernels, in one place.
 *
 * Apart from model.c because the layers call it and model.c lists the
 * layers: with it there, each layer and the model would depend on each
 * other. */
#include "config.h"

#include <math.h>

#include "nn/layer.h"

void dt_glorot_uniform(float *w, size_t n, int fan_in, int fan_out, dt_rng *rng)
{
    float limit = sqrtf(6.0f / (float)(fan_in + fan_out));
    for (size_t i = 0; i < n; i++) w[i] = (2.0f * dt_rng_uniform(rng) - 1.0f) * limit;
}

/* Box-Muller from two uniforms: a pure function of the stream, so the same
 * seed gives the same weights on every machine. */
void dt_normal_init(float *w, size_t n, float std, dt_rng *rng)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - (double)dt_rng_uniform(rng), u2 = (double)dt_rng_uniform(rng);
        double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        w[i] = (float)((double)std * r * cos(a));
        if (i + 1 < n) w[i + 1] = (float)((double)std * r * sin(a));
    }
}
