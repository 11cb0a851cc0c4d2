/* act16_ref.h: a reference backend that stores activations in 16 bits.
 *
 * It wraps the CPU backend: set_act_type honours fp16, bf16 and fp32, and
 * every op on activations decodes its 16-bit inputs to float32, runs the
 * CPU's float op, and rounds its outputs to the 16-bit type (nearest, ties
 * to even: src/runtime/half.h). That is the arithmetic 16-bit storage promises on
 * any backend: float math inside an op, one rounding when a result is
 * stored. It is slow and only for tests: check_act16 trains models through
 * it to check that the layers and the model size, copy and add activations
 * by their type, and check_gpu compares the GPU's 16-bit kernels with it.
 * setup accepts fp16 (the CPU has no fp16 arithmetic: such a run computes
 * in float32 and stores fp16). Single-threaded: its scratch is static. */
#ifndef DT_ACT16_REF_H
#define DT_ACT16_REF_H

#include "backend.h"

/* The table (made on first call from dt_backend_cpu). */
const struct dt_backend *dt_act16_ref(void);

#endif
