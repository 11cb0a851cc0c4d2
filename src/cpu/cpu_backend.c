/* cpu_backend.c: the CPU backend's operation table (see backend.h).
 * Host memory is device memory here, so upload/download are copies. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "cpu/cpu_internal.h"

static void *cpu_alloc(size_t bytes) { return dt_xmalloc(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

const struct dt_backend dt_backend_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .synchronize = cpu_synchronize,
    .setup = cpu_setup,
    .conv_create = cpu_conv_create,
    .conv_destroy = cpu_conv_destroy,
    .conv_forward = cpu_conv_forward,
    .conv_backward = cpu_conv_backward,
    .pool_create = cpu_pool_create,
    .pool_destroy = cpu_pool_destroy,
    .pool_forward = cpu_pool_forward,
    .pool_backward = cpu_pool_backward,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .softmax_xent = cpu_softmax_xent,
    .images_to_float = cpu_images_to_float,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
    .unscale_check = cpu_unscale_check,
    .accumulate = cpu_accumulate,
    .channel_sums = cpu_channel_sums,
    .channel_affine = cpu_channel_affine,
    .avgpool_forward = cpu_avgpool_forward,
    .avgpool_backward = cpu_avgpool_backward,
};
