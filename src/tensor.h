/* tensor.h: what a tensor is, to everyone who hands one on.
 *
 * The shape of a sample (NHWC) and the element type of activations, the two
 * facts that layers, backends, datasets and checkpoints share. Pure
 * declarations and arithmetic: no MPI, no HDF5, no backend, so any file may
 * include it.
 *
 * The one design decision: an activation (dt_act) is untyped memory whose
 * element type is chosen at run time (--precision), so nobody outside a
 * backend indexes one; they size it with dt_act_size and hand it to the
 * backend's ops. Parameters, parameter gradients, optimizer state and
 * dropout masks are float everywhere. */
#ifndef DT_TENSOR_H
#define DT_TENSOR_H

#include <stddef.h>

/* A sample's shape, NHWC without the N. */
struct dt_shape { int h, w, c; };

static inline size_t dt_shape_size(struct dt_shape s) { return (size_t)s.h * s.w * s.c; }

/* Arithmetic of convolutions and matmuls (--precision). Parameters,
 * optimizer state and parameter gradients stay float32 in every mode (fp32
 * master weights); fp16/bf16 run the convolutions and matrix products with
 * 16-bit inputs and float32 accumulation (tensor cores on the GPU,
 * AVX512-BF16/AMX through oneDNN on the CPU). The same values name the
 * element type activations are stored in (backend.h's set_act_type). */
enum dt_precision { DT_PREC_FP32 = 0, DT_PREC_FP16 = 1, DT_PREC_BF16 = 2 };

static inline const char *dt_precision_name(int p)
{
    return p == DT_PREC_FP16 ? "fp16" : p == DT_PREC_BF16 ? "bf16" : "fp32";
}

/* An activation: the tensors between layers and their gradients. Their
 * element type is the backend's act_type() (float32, or a 16-bit type under
 * --precision fp16|bf16 where the backend stores 16 bits). */
typedef void dt_act;

/* Bytes per element of an activation of element type `type` (enum dt_precision). */
static inline size_t dt_act_size(int type) { return type == DT_PREC_FP32 ? 4 : 2; }

#endif
