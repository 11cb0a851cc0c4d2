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
