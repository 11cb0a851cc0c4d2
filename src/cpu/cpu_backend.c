/* cpu_backend.c: the CPU backend's operation table (see backend.h).
 * Host memory is device memory here, so upload/download are copies. The CPU
 * stores activations as float32 in every precision (its bf16 arithmetic
 * converts inside oneDNN's convolutions and GEMMs), so the table's dt_act
 * ops are the float kernels under their seam types, and a dense layer is
 * the GEMMs and bias kernels it always was. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

static void *cpu_alloc(size_t bytes) { return dt_xmalloc(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

static int cpu_set_act_type(int type)
{
    (void)type;
    return DT_PREC_FP32;
}
static int cpu_act_type(void) { return DT_PREC_FP32; }

static void conv_forward(dt_conv_plan *p, int n, dt_act *out, const dt_act *inp, const float *weight,
                         const float *bias)
{
    cpu_conv_forward(p, n, out, inp, weight, bias);
}
static void conv_backward(dt_conv_plan *p, int n, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                          const dt_act *inp, const float *weight)
{
    cpu_conv_backward(p, n, dinp, dweight, dbias, dout, inp, weight);
}
static void pool_forward(dt_pool_plan *p, int n, dt_act *out, const dt_act *inp, int train)
{
    cpu_pool_forward(p, n, out, inp, train);
}
static void pool_backward(dt_pool_plan *p, int n, dt_act *dinp, const dt_act *dout, const dt_act *relu_out)
{
    cpu_pool_backward(p, n, dinp, dout, relu_out);
}

static void dense_forward(int n, int in, int units, dt_act *out, const dt_act *inp, const float *weight,
                          const float *bias)
{
    cpu_gemm(0, 0, n, units, in, 1.0f, inp, in, weight, units, 0.0f, out, units);
    cpu_bias_add(out, bias, n, units);
}
static void dense_backward(int n, int in, int units, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                           const dt_act *inp, const float *weight)
{
    /* With no samples GEMM's beta = 0 still zeroes dweight. */
    cpu_gemm(1, 0, in, units, n, 1.0f, inp, in, dout, units, 0.0f, dweight, units);
    cpu_bias_grad(dbias, dout, n, units);
    if (dinp && n > 0) cpu_gemm(0, 1, n, in, units, 1.0f, dout, units, weight, units, 0.0f, dinp, in);
}

static void relu_forward(dt_act *out, const dt_act *inp, size_t n) { cpu_relu_forward(out, inp, n); }
static void relu_backward(dt_act *dinp, const dt_act *dout, const dt_act *out, size_t n)
{
    cpu_relu_backward(dinp, dout, out, n);
}
static void dropout_forward(dt_act *out, float *mask, const dt_act *inp, size_t n, float rate, dt_rng *rng)
{
    cpu_dropout_forward(out, mask, inp, n, rate, rng);
}
static void dropout_backward(dt_act *dinp, const dt_act *dout, const float *mask, size_t n)
{
    cpu_dropout_backward(dinp, dout, mask, n);
}
static double softmax_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const uint8_t *labels, int n,
                           int classes, float grad_scale)
{
    return cpu_softmax_xent(dlogits, ncorrect, logits, labels, n, classes, grad_scale);
}
static void images_to_float(dt_act *dst, const uint8_t *src, size_t n) { cpu_images_to_float(dst, src, n); }
static void act_add(dt_act *dst, const dt_act *src, size_t n) { cpu_accumulate(dst, src, n); }
static void channel_sums(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c)
{
    cpu_channel_sums(s1, s2, a, b, rows, c);
}
static void channel_affine(dt_act *out, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                           const float *q, const float *r, int relu)
{
    cpu_channel_affine(out, a, b, rows, c, p, q, r, relu);
}
static void avgpool_forward(const struct dt_conv_shape *s, int n, dt_act *out, const dt_act *inp)
{
    cpu_avgpool_forward(s, n, out, inp);
}
static void avgpool_backward(const struct dt_conv_shape *s, int n, dt_act *dinp, const dt_act *dout)
{
    cpu_avgpool_backward(s, n, dinp, dout);
}

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
    .set_act_type = cpu_set_act_type,
    .act_type = cpu_act_type,
    .conv_create = cpu_conv_create,
    .conv_destroy = cpu_conv_destroy,
    .conv_forward = conv_forward,
    .conv_backward = conv_backward,
    .pool_create = cpu_pool_create,
    .pool_destroy = cpu_pool_destroy,
    .pool_forward = pool_forward,
    .pool_backward = pool_backward,
    .dense_forward = dense_forward,
    .dense_backward = dense_backward,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .softmax_xent = softmax_xent,
    .images_to_float = images_to_float,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
    .unscale_check = cpu_unscale_check,
    .accumulate = cpu_accumulate,
    .act_add = act_add,
    .channel_sums = channel_sums,
    .channel_affine = channel_affine,
    .avgpool_forward = avgpool_forward,
    .avgpool_backward = avgpool_backward,
};
