/* cpu_backend.c: the CPU backend's operation table (see backend.h).
 * Host memory is device memory here, so upload/download are copies.
 * Activations are float32, or bf16 under --precision bf16 (set_act_type):
 * the convolutions and the element-wise kernels read and write both types
 * (cpu_internal.h's cpu_ld/cpu_st, computing in float), and the small ops
 * (dropout, the loss) run their float kernels through float copies; the
 * dense products read and write bf16 in place (cpu_gemm_bf16). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/status.h"
#include "cpu/cpu_internal.h"

/* Large buffers (the activations) on 2 MiB pages where the kernel offers
 * them (transparent huge pages in "madvise" mode, Debian's default): a
 * model's activations span hundreds of MiB, and every pass over them
 * walks thousands of 4 KiB pages. */
static void *cpu_alloc(size_t bytes)
{
    enum { HUGE = 2u << 20 };
    if (bytes < HUGE) return dt_xmalloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, HUGE, bytes) != 0) return dt_xmalloc(bytes);
#ifdef MADV_HUGEPAGE
    /* whole huge pages only: a partly used one would be backed in full */
    if (!getenv("DTRAIN_NO_HUGEPAGES")) madvise(p, bytes / HUGE * HUGE, MADV_HUGEPAGE);
#endif
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

/* bf16 storage only under --precision bf16 (the conversions need the
 * instructions setup checked); fp16 and anything else stay float32. */
static int cpu_set_act_type(int type)
{
    cpu_act_bf16 = type == DT_PREC_BF16 && cpu_precision == DT_PREC_BF16;
    return cpu_act_bf16 ? DT_PREC_BF16 : DT_PREC_FP32;
}
static int cpu_act_type(void) { return cpu_act_bf16 ? DT_PREC_BF16 : DT_PREC_FP32; }

/* The small ops (dropout, the loss) run their float kernels on bf16
 * activations through float copies: decode the inputs, run, round the
 * output once. Their tensors are the model's smallest, so the copies cost
 * little next to the convolutions and products, which read and write bf16
 * directly. Slots grow as needed; the backend is called from one thread. */
enum { SLOTS = 3 };
static float *slot[SLOTS];
static size_t slot_cap[SLOTS];

static float *scratch(int i, size_t n)
{
    if (n > slot_cap[i]) {
        free(slot[i]);
        slot[i] = dt_xmalloc(sizeof(float) * (n ? n : 1));
        slot_cap[i] = n;
    }
    return slot[i];
}

/* An input as float: the buffer itself, or its bf16 values decoded into slot i. */
static const float *in(int i, const dt_act *p, size_t n)
{
    if (!cpu_act_bf16 || !p) return p;
    float *f = scratch(i, n);
    dt_act_decode(DT_PREC_BF16, f, p, n);
    return f;
}

/* Where a float kernel writes an output: the buffer itself, or slot i,
 * rounded into the buffer by store() afterwards. */
static float *out(int i, dt_act *p, size_t n)
{
    if (!cpu_act_bf16 || !p) return p;
    return scratch(i, n);
}

static void store(dt_act *p, const float *f, size_t n)
{
    if (cpu_act_bf16 && p) cpu_to_bf16(p, f, n);
}

static void conv_forward(dt_conv_plan *p, int n, dt_act *o, const dt_act *inp, const float *weight,
                         const float *bias)
{
    cpu_conv_forward(p, n, o, inp, weight, bias);
}
static void conv_backward(dt_conv_plan *p, int n, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                          const dt_act *inp, const float *weight)
{
    cpu_conv_backward(p, n, dinp, dweight, dbias, dout, inp, weight);
}
static void conv_pool_forward(dt_conv_plan *p, dt_pool_plan *pool, int n, dt_act *o, const dt_act *inp,
                              const float *weight, const float *bias, int train)
{
    cpu_conv_pool_forward(p, pool, n, o, inp, weight, bias, train);
}
static void conv_pool_backward(dt_conv_plan *p, dt_pool_plan *pool, int n, float *dweight, float *dbias,
                               const dt_act *dout, const dt_act *out, const dt_act *inp)
{
    cpu_conv_pool_backward(p, pool, n, dweight, dbias, dout, out, inp);
}
static void conv_poolgrad_backward(const struct dt_conv_shape *s, dt_pool_plan *pool, int n, dt_act *dinp,
                                   float *dweight, float *dbias, const dt_act *dout, const dt_act *pooled,
                                   const dt_act *inp, const float *weight)
{
    cpu_conv_poolgrad_backward(s, pool, n, dinp, dweight, dbias, dout, pooled, inp, weight);
}
static void pool_forward(dt_pool_plan *p, int n, dt_act *o, const dt_act *inp, int train)
{
    cpu_pool_forward(p, n, o, inp, train, cpu_act_bf16);
}
static void pool_backward(dt_pool_plan *p, int n, dt_act *dinp, const dt_act *dout, const dt_act *relu_out)
{
    cpu_pool_backward(p, n, dinp, dout, relu_out, cpu_act_bf16);
}

/* Under bf16 activations the dense products read and write bf16 where it
 * lies (cpu_gemm_bf16): no float copies. */
static void dense_forward(int n, int nin, int units, dt_act *o, const dt_act *inp, const float *weight,
                          const float *bias)
{
    if (cpu_act_bf16) {
        cpu_gemm_bf16(0, 0, n, units, nin, inp, 1, nin, weight, 0, units, bias, 0.0f, o, 1, units);
        return;
    }
    cpu_gemm(0, 0, n, units, nin, 1.0f, inp, nin, weight, units, 0.0f, o, units);
    cpu_bias_add(o, bias, n, units);
}
static void dense_backward(int n, int nin, int units, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                           const dt_act *inp, const float *weight)
{
    if (cpu_act_bf16) {
        /* with no samples k = 0, and dweight = 0 */
        cpu_gemm_bf16(1, 0, nin, units, n, inp, 1, nin, dout, 1, units, NULL, 0.0f, dweight, 0, units);
        cpu_bias_grad(dbias, dout, n, units, 1);
        if (dinp) cpu_gemm_bf16(0, 1, n, nin, units, dout, 1, units, weight, 0, units, NULL, 0.0f, dinp, 1, nin);
        return;
    }
    /* With no samples GEMM's beta = 0 still zeroes dweight. */
    cpu_gemm(1, 0, nin, units, n, 1.0f, inp, nin, dout, units, 0.0f, dweight, units);
    cpu_bias_grad(dbias, dout, n, units, 0);
    if (dinp && n > 0) cpu_gemm(0, 1, n, nin, units, 1.0f, dout, units, weight, units, 0.0f, dinp, nin);
}

static void bias_grad(float *dbias, const float *dout, int rows, int cols) { cpu_bias_grad(dbias, dout, rows, cols, 0); }

static void relu_forward(dt_act *o, const dt_act *inp, size_t n) { cpu_relu_forward(o, inp, n, cpu_act_bf16); }
static void relu_backward(dt_act *dinp, const dt_act *dout, const dt_act *o, size_t n)
{
    cpu_relu_backward(dinp, dout, o, n, cpu_act_bf16);
}
static void dropout_forward(dt_act *o, float *mask, const dt_act *inp, size_t n, float rate, dt_rng *rng)
{
    float *y = out(0, o, n);
    cpu_dropout_forward(y, mask, in(1, inp, n), n, rate, rng);
    store(o, y, n);
}
static void dropout_backward(dt_act *dinp, const dt_act *dout, const float *mask, size_t n)
{
    float *g = out(0, dinp, n);
    cpu_dropout_backward(g, in(1, dout, n), mask, n);
    store(dinp, g, n);
}
static double softmax_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const uint8_t *labels, int n,
                           int classes, float grad_scale)
{
    size_t nl = (size_t)n * classes;
    float *g = out(0, dlogits, nl);
    double loss = cpu_softmax_xent(g, ncorrect, in(1, logits, nl), labels, n, classes, grad_scale);
    store(dlogits, g, nl);
    return loss;
}
static void images_to_float(dt_act *dst, const uint8_t *src, size_t n) { cpu_images_to_float(dst, src, n, cpu_act_bf16); }
static void act_add(dt_act *dst, const dt_act *src, size_t n)
{
    if (!cpu_act_bf16 || !cpu_fast_add_bf16(dst, src, n)) cpu_act_add(dst, src, n, cpu_act_bf16);
}
static void channel_sums(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c)
{
    if (!cpu_fast_sums(s1, s2, (void *)(uintptr_t)a, b, NULL, rows, c, cpu_act_bf16)) /* a only read: no mask */
        cpu_channel_sums(s1, s2, a, b, rows, c, cpu_act_bf16);
}
static void channel_sums_relu(double *s1, double *s2, dt_act *a, const dt_act *b, const dt_act *relu_out,
                              size_t rows, int c)
{
    if (!cpu_fast_sums(s1, s2, a, b, relu_out, rows, c, cpu_act_bf16))
        cpu_channel_sums_relu(s1, s2, a, b, relu_out, rows, c, cpu_act_bf16);
}
static void channel_affine(dt_act *o, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                           const float *q, const float *r, int relu)
{
    if (!cpu_fast_affine(o, a, b, rows, c, p, q, r, relu, cpu_act_bf16))
        cpu_channel_affine(o, a, b, rows, c, p, q, r, relu, cpu_act_bf16);
}
static void avgpool_forward(const struct dt_conv_shape *s, int n, dt_act *o, const dt_act *inp)
{
    cpu_avgpool_forward(s, n, o, inp, cpu_act_bf16);
}
static void avgpool_backward(const struct dt_conv_shape *s, int n, dt_act *dinp, const dt_act *dout)
{
    cpu_avgpool_backward(s, n, dinp, dout, cpu_act_bf16);
}

static void embed_forward(dt_act *o, const int32_t *tok, const float *wte, const float *wpe, int n, int T, int C)
{
    cpu_embed_forward(o, tok, wte, wpe, n, T, C, cpu_act_bf16);
}
static void embed_backward(float *dwte, float *dwpe, const dt_act *dout, const int32_t *tok, int n, int T, int C)
{
    cpu_embed_backward(dwte, dwpe, dout, tok, n, T, C, cpu_act_bf16);
}
static void layernorm_forward(dt_act *o, float *mean, float *rstd, const dt_act *inp, const float *g, const float *b,
                              size_t rows, int C, float eps)
{
    cpu_layernorm_forward(o, mean, rstd, inp, g, b, rows, C, eps, cpu_act_bf16);
}
static void layernorm_backward(dt_act *dinp, float *dg, float *db, const dt_act *dout, const dt_act *inp,
                               const float *g, const float *mean, const float *rstd, size_t rows, int C)
{
    cpu_layernorm_backward(dinp, dg, db, dout, inp, g, mean, rstd, rows, C, cpu_act_bf16);
}
static void attention_forward(dt_act *o, float *lse, const dt_act *qkv, int n, int T, int C, int H)
{
    cpu_attention_forward(o, lse, qkv, n, T, C, H, cpu_act_bf16);
}
static void attention_backward(dt_act *dqkv, const dt_act *dout, const dt_act *qkv, const dt_act *o,
                               const float *lse, int n, int T, int C, int H)
{
    cpu_attention_backward(dqkv, dout, qkv, o, lse, n, T, C, H, cpu_act_bf16);
}
static void attention_decode(dt_act *o, const dt_act *qkv, int pos, int C, int H)
{
    cpu_attention_decode(o, qkv, pos, C, H, cpu_act_bf16);
}
static void gelu_forward(dt_act *o, const dt_act *inp, size_t n) { cpu_gelu_forward(o, inp, n, cpu_act_bf16); }
static void gelu_backward(dt_act *dinp, const dt_act *dout, const dt_act *inp, size_t n)
{
    cpu_gelu_backward(dinp, dout, inp, n, cpu_act_bf16);
}
static void linear_t_forward(size_t rows, int C, int V, dt_act *o, const dt_act *inp, const float *w)
{
    cpu_linear_t_forward(rows, C, V, o, inp, w, cpu_act_bf16);
}
static void linear_t_backward(size_t rows, int C, int V, dt_act *dinp, float *dw, const dt_act *dout,
                              const dt_act *inp, const float *w)
{
    cpu_linear_t_backward(rows, C, V, dinp, dw, dout, inp, w, cpu_act_bf16);
}
static double token_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const int32_t *tok, int n, int T,
                         int V, float grad_scale)
{
    return cpu_token_xent(dlogits, ncorrect, logits, tok, n, T, V, grad_scale, cpu_act_bf16);
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
    .set_winograd = cpu_set_winograd,
    .conv_create = cpu_conv_create,
    .conv_destroy = cpu_conv_destroy,
    .conv_forward = conv_forward,
    .conv_backward = conv_backward,
    .pool_create = cpu_pool_create,
    .pool_destroy = cpu_pool_destroy,
    .conv_pool_fits = cpu_conv_pool_fits,
    .conv_pool_forward = conv_pool_forward,
    .conv_pool_backward = conv_pool_backward,
    .conv_poolgrad_fits = cpu_conv_poolgrad_fits,
    .conv_poolgrad_backward = conv_poolgrad_backward,
    .pool_forward = pool_forward,
    .pool_backward = pool_backward,
    .dense_forward = dense_forward,
    .dense_backward = dense_backward,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = bias_grad,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .softmax_xent = softmax_xent,
    .images_to_float = images_to_float,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
    .adamw_update = cpu_adamw_update,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .unscale_check = cpu_unscale_check,
    .accumulate = cpu_accumulate,
    .act_add = act_add,
    .channel_sums = channel_sums,
    .channel_sums_relu = channel_sums_relu,
    .channel_affine = channel_affine,
    .avgpool_forward = avgpool_forward,
    .avgpool_backward = avgpool_backward,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_decode = attention_decode,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .linear_t_forward = linear_t_forward,
    .linear_t_backward = linear_t_backward,
    .token_xent = token_xent,
};
