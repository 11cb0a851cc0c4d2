/* gpu_state.cu: the one gpu_state every op of the CUDA backend reads (the
 * device, its stream and library handles, the recording in progress).
 *
 * A file of its own so that both the device setup (gpu_device.cu) and the
 * recording (gpu_graph.cu), which call each other's functions the one way,
 * depend on it rather than on each other. */
#include "config.h"

#include "gpu/gpu_internal.h"

struct gpu_state dt_cuda::gpu = {-1, 0, 0, 0, "", NULL, NULL, NULL, DT_PREC_FP32, DT_PREC_FP32, NULL, NULL, 0};
