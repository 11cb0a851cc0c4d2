/* cpu_internal.h: the CPU backend's functions, gathered into dt_backend_cpu
 * by cpu_backend.c. Outside src/cpu/ only white-box tests (check_layers,
 * check_fused) and benchmarks (bench/conv_layouts) include it. */
#ifndef DT_CPU_INTERNAL_H
#define DT_CPU_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "runtime/status.h" /* dt_die */
#include "runtime/half.h"
#include "simd.h" /* DT_MULTIVERSION on the element-wise kernels */

/* cpu_setup.c: 1 when activations are stored in bf16 (set_act_type under
 * --precision bf16), 0 when float32. Kernels that read or write
 * activations take it as their last argument, bf. */
extern int cpu_act_bf16;

/* cpu_setup.c: under --winograd (set_conv_algo), float32 3x3 stride-1
 * convolutions take Winograd kernels: 1 oneDNN's (32 channels or more), 2
 * dtrain's own (16 or more; cpu_set_winograd picks). */
extern int cpu_winograd;

/* Element i of an activation: bf16 or float32, computed in float. The
 * kernels are written once with these and instantiated for both types
 * (bf a constant after inlining), so the float32 instance is the plain
 * float loop and the bf16 one converts in registers. */
static inline __attribute__((always_inline)) float cpu_ld(const void *p, size_t i, const int bf)
{
    return bf ? dt_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline __attribute__((always_inline)) void cpu_st(void *p, size_t i, float v, const int bf)
{
    if (bf) ((uint16_t *)p)[i] = dt_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* cpu_st for a maximum of stored activations (a max pool's): for bf16 a
 * bf16 value already, so its top 16 bits without rounding; or -FLT_MAX
 * where every input was NaN, which rounds to -inf (0xff80). */
static inline __attribute__((always_inline)) void cpu_st_max(void *p, size_t i, float m, const int bf)
{
    if (!bf) {
        ((float *)p)[i] = m;
        return;
    }
    uint32_t u;
    memcpy(&u, &m, sizeof u);
    ((uint16_t *)p)[i] = m == -FLT_MAX ? 0xff80u : (uint16_t)(u >> 16);
}

/* Element i of an activation as a pointer (bf16 or float32), for kernels
 * that hand on restrict pointers to rows: without restrict the compiler
 * must assume a store may change what it is reading, and keeps reloading. */
static inline __attribute__((always_inline)) void *cpu_at(const void *p, size_t i, const int bf)
{
    return (char *)(uintptr_t)p + i * (bf ? 2 : 4);
}

/* oneDNN calls return dnnl_status_t; a failure is not the user's. */
#define DT_DNNL_CHECK(call)                                                  \
    do {                                                                     \
        int dt_rc_ = (int)(call);                                            \
        if (dt_rc_ != 0)                                                     \
            dt_die(__FILE__, __LINE__, "%s failed: oneDNN status %d", #call, dt_rc_); \
    } while (0)

/* cpu_conv2d.c (oneDNN). A plan takes its arithmetic from cpu_precision
 * when it is created: bf16 plans convert inputs and weights to bf16 and
 * accumulate and write float32. */
dt_conv_plan *cpu_conv_create(const struct dt_conv_shape *shape, int relu);
/* set_winograd: sets cpu_winograd (1: oneDNN's kernels, 2: dtrain's
 * cpu_winograd_avx2.c: where oneDNN has none, on Zen 4, or as
 * DTRAIN_WINOGRAD_KERNELS says), or -1 where neither runs here */
int cpu_set_winograd(int on, char *why, size_t whylen);
void cpu_conv_destroy(dt_conv_plan *plan);
void cpu_conv_forward(dt_conv_plan *plan, int n, void *out, const void *inp, const float *weight,
                      const float *bias);
void cpu_conv_backward(dt_conv_plan *plan, int n, void *dinp, float *dweight, float *dbias,
                       const void *dout, const void *inp, const float *weight);

/* cpu_conv_direct.c: one input channel, vectorized over output channels */
int cpu_conv_direct_fits(const struct dt_conv_shape *s);
void cpu_conv_direct_forward(const struct dt_conv_shape *s, int relu, int n, void *out,
                             const void *inp, const float *weight, const float *bias, int bf);
void cpu_conv_direct_backward_weights(const struct dt_conv_shape *s, int n, float *dweight,
                                      float *dbias, const void *dout, const void *inp, int bf);
/* The same with ReLU and a 2x2 stride-2 max pool folded in: out and dout
 * are the pool's ([n][oh/2][ow/2][k]), am the maxima's places (as
 * cpu_pool_places keeps them; forward writes them unless NULL). */
void cpu_conv_direct_pool_forward(const struct dt_conv_shape *s, int n, void *out, int32_t *am, const void *inp,
                                  const float *weight, const float *bias, int bf);
void cpu_conv_direct_pool_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                           const void *dout, const void *out, const int32_t *am, const void *inp,
                                           int bf);
/* 1 where those two take their AVX-512 versions for shape s (AVX512-BF16,
 * K a multiple of 16, fast kernels on, and the versions equal to the
 * generic loops bit for bit in this build: a check on first use). */
int cpu_conv_direct_pool_fast(const struct dt_conv_shape *s);
/* cpu_conv2d.c: the conv_pool ops (backend.h) on a direct plan */
int cpu_conv_pool_fits(const struct dt_conv_shape *s);
void cpu_conv_pool_forward(dt_conv_plan *plan, dt_pool_plan *pool, int n, void *out, const void *inp,
                           const float *weight, const float *bias, int train);
void cpu_conv_pool_backward(dt_conv_plan *plan, dt_pool_plan *pool, int n, float *dweight, float *dbias,
                            const void *dout, const void *out, const void *inp);

/* cpu_conv2d.c: DTRAIN_KERNEL_VERBOSE's line for one call of a dtrain
 * convolution kernel (oneDNN's verbose format; t0 from the clock below). */
void cpu_conv_verbose(const struct dt_conv_shape *s, const char *kernel, const char *alg, const char *dir, int n,
                      double t0);
double cpu_conv_verbose_clock(void);
int cpu_kernel_verbose(void); /* DTRAIN_KERNEL_VERBOSE set, and not 0 */

/* cpu_conv_poolgrad.c: backend.h's conv_poolgrad ops (AVX-512; float32 or bf16 activations) */
int cpu_conv_poolgrad_fits(const struct dt_conv_shape *s, const struct dt_conv_shape *ps);
void cpu_conv_poolgrad_backward(const struct dt_conv_shape *s, dt_pool_plan *pool, int n, void *dinp,
                                float *dweight, float *dbias, const void *dout, const void *pooled,
                                const void *inp, const float *weight);

/* cpu_conv3x3_avx2.c: 3x3, stride 1, padding 1, float32, channels in and
 * out multiples of 8, on CPUs with AVX2 + FMA and without AVX-512 (or with
 * DTRAIN_NO_FAST_KERNELS=avx512); DTRAIN_NO_FAST_KERNELS=1 leaves them to
 * oneDNN. wflip: 9 c k floats of scratch. */
int cpu_conv3x3_fits(const struct dt_conv_shape *s);
/* ... the shape and the CPU suit these kernels, AVX-512 or not (what
 * --winograd's own kernels need) */
int cpu_conv3x3_runs(const struct dt_conv_shape *s);
void cpu_conv3x3_forward(const struct dt_conv_shape *s, int relu, int n, float *out, const float *inp,
                         const float *weight, const float *bias);
void cpu_conv3x3_backward_data(const struct dt_conv_shape *s, int n, float *dinp, const float *dout,
                               const float *weight, float *wflip);
void cpu_conv3x3_backward_weights(const struct dt_conv_shape *s, int n, float *dweight, float *dbias,
                                  const float *dout, const float *inp);
void cpu_conv3x3_flip(const struct dt_conv_shape *s, const float *weight, float *wflip);
/* cpu_winograd_avx2.c: --winograd's F(2x2, 3x3) and F(4x4, 3x3) on the
 * same shapes (where oneDNN has no Winograd kernel), forward,
 * backward-data and backward-weights; m: the output tile (2 or 4),
 * cpu_wino_avx2_tile's choice for the pass's output size; U:
 * (m+2)^2 c k floats of scratch. */
int cpu_wino_avx2_tile(int ho, int wo);
int cpu_wino_avx2_forced_tile(void); /* DTRAIN_WINO_TILE: 2, 4, 0 unset, -1 bad */
void cpu_wino_avx2_forward(const struct dt_conv_shape *s, int m, int relu, int n, float *out, const float *inp,
                           const float *weight, const float *bias, float *U);
/* backward-data: transposed (cpu_wino_avx2_data_transposed's choice) runs
 * it on the forward pass's F(4x4) tiles, else the forward on wflip with
 * F(m x m) tiles of its h x w output. */
int cpu_wino_avx2_data_transposed(const struct dt_conv_shape *s, int m, int md);
void cpu_wino_avx2_backward_data(const struct dt_conv_shape *s, int m, int transposed, int n, float *dinp,
                                 const float *dout, const float *wflip, float *U);
void cpu_wino_avx2_backward_weights(const struct dt_conv_shape *s, int m, int n, float *dweight, float *dbias,
                                    const float *dout, const float *inp);

/* cpu_wgrad_bf16.c: backward-weights of 3x3 convolutions (stride 1 or 2,
 * channels in and out multiples of 16) on bf16 activations with
 * AVX512-BF16 dot products, on CPUs without AMX (unless
 * DTRAIN_NO_FAST_KERNELS is set and not 0). dout and inp are bf16 NHWC;
 * scratch holds cpu_wgrad_bf16_scratch(s, n, threads) bytes for this
 * call's n and threads: not monotonic in n (chunks are sized per call), so
 * ask for each call rather than once for the largest batch. */
int cpu_wgrad_bf16_fits(const struct dt_conv_shape *s);
size_t cpu_wgrad_bf16_scratch(const struct dt_conv_shape *s, int n, int threads);
void cpu_wgrad_bf16(const struct dt_conv_shape *s, int n, float *dweight, float *dbias, const void *dout,
                    const void *inp, void *scratch, int threads);

/* cpu_pool.c */
dt_pool_plan *cpu_pool_create(const struct dt_conv_shape *shape);
void cpu_pool_destroy(dt_pool_plan *plan);
void cpu_pool_forward(dt_pool_plan *plan, int n, void *out, const void *inp, int train, int bf);
/* The plan's maxima's places for n samples (grown to hold them). */
int32_t *cpu_pool_places(dt_pool_plan *plan, int n);
/* The plan's shape: its windows (oh x ow) may be fewer than fit (nn/crop.c). */
const struct dt_conv_shape *cpu_pool_shape(const dt_pool_plan *plan);
void cpu_pool_backward(dt_pool_plan *plan, int n, void *dinp, const void *dout,
                       const void *relu_out, int bf);

/* cpu_gemm_avx512.c: C = op(A) op(B) (alpha 1, beta 0; not both
 * transposed) in OpenBLAS's order on AVX-512, for the products it takes
 * (1 when it ran; 0: leave it to cblas_sgemm). */
int cpu_gemm_avx512(int transa, int transb, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc);

/* cpu_kernels.c: element-wise kernels, loss, optimizers, GEMM.
 * In bf16 mode cpu_gemm rounds A and B to bf16 and accumulates in float32. */
void cpu_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
/* The same product on bf16 activations where they lie, through oneDNN's
 * matmul (only under --precision bf16): A and B are float (abf, bbf 0:
 * rounded to bf16 on the way) or bf16 (read in place, a leading dimension
 * or a transpose is a stride), C float or bf16 (cbf: rounded once, after
 * the bias, which may be NULL); beta as BLAS's. */
void cpu_gemm_bf16(int transa, int transb, int m, int n, int k, const void *a, int abf, int lda, const void *b,
                   int bbf, int ldb, const float *bias, float beta, void *c, int cbf, int ldc);
void cpu_bias_add(float *out, const float *bias, int rows, int cols);
/* dbias = the column sums of dout (float, or bf16 when bf) */
void cpu_bias_grad(float *dbias, const void *dout, int rows, int cols, int bf);
void cpu_relu_forward(void *out, const void *inp, size_t n, int bf);
void cpu_relu_backward(void *dinp, const void *dout, const void *out, size_t n, int bf);
void cpu_dropout_forward(float *out, float *mask, const float *inp, size_t n, float rate,
                         dt_rng *rng);
void cpu_dropout_backward(float *dinp, const float *dout, const float *mask, size_t n);
double cpu_softmax_xent(float *dlogits, long *ncorrect, const float *logits,
                        const uint8_t *labels, int n, int classes, float grad_scale);
void cpu_images_to_float(void *dst, const uint8_t *src, size_t n, int bf);
void cpu_adam_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                     float beta1, float beta2, float eps);
void cpu_sgd_update(float *param, float *velocity, const float *grad, size_t n, float lr,
                    float momentum);
int cpu_unscale_check(float *grad, size_t n, float inv_scale);
void cpu_accumulate(float *dst, const float *src, size_t n);
void cpu_act_add(void *dst, const void *src, size_t n, int bf);

/* cpu_norm.c: batch normalization's per-channel sums and maps, average pooling */
void cpu_channel_sums(double *s1, double *s2, const void *a, const void *b, size_t rows, int c, int bf);
void cpu_channel_sums_relu(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows,
                           int c, int bf);
void cpu_channel_affine(void *out, const void *a, const void *b, size_t rows, int c, const float *p,
                        const float *q, const float *r, int relu, int bf);
void cpu_avgpool_forward(const struct dt_conv_shape *s, int n, void *out, const void *inp, int bf);
void cpu_avgpool_backward(const struct dt_conv_shape *s, int n, void *dinp, const void *dout, int bf);

/* cpu_avx512.c: AVX-512 fast paths of cpu_channel_affine, cpu_channel_sums
 * and cpu_channel_sums_relu (relu_out NULL: unmasked) for both activation
 * types (bf), and of cpu_act_add on bf16. Each returns 1 when it ran, 0
 * when it does not apply (no AVX-512 with BF16 here, channels not a
 * multiple of 16, DTRAIN_NO_FAST_KERNELS=1): then the generic kernel runs. */
int cpu_fast_affine(void *out, const void *a, const void *b, size_t rows, int c, const float *p, const float *q,
                    const float *r, int relu, int bf);
int cpu_fast_sums(double *s1, double *s2, void *a, const void *b, const void *relu_out, size_t rows, int c, int bf);
int cpu_fast_add_bf16(void *dst, const void *src, size_t n);

/* cpu_transformer.c: the transformer's row-wise ops (backend.h), on both
 * activation types (bf): embedding, layer normalization, GELU, the
 * transposed-weight product of the tied head, token cross-entropy. */
void cpu_embed_forward(void *out, const int32_t *tokens, const float *wte, const float *wpe, int n, int T, int C,
                       int bf);
void cpu_embed_backward(float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int n, int T, int C,
                        int bf);
void cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *gamma,
                           const float *beta, size_t rows, int C, float eps, int bf);
void cpu_layernorm_backward(void *dinp, float *dgamma, float *dbeta, const void *dout, const void *inp,
                            const float *gamma, const float *mean, const float *rstd, size_t rows, int C, int bf);
void cpu_gelu_forward(void *out, const void *inp, size_t n, int bf);
void cpu_gelu_backward(void *dinp, const void *dout, const void *inp, size_t n, int bf);
void cpu_linear_t_forward(size_t rows, int C, int V, void *out, const void *inp, const float *w, int bf);
void cpu_linear_t_backward(size_t rows, int C, int V, void *dinp, float *dw, const void *dout, const void *inp,
                           const float *w, int bf);
double cpu_token_xent(void *dlogits, long *ncorrect, const void *logits, const int32_t *tokens, int n, int T,
                      int V, float grad_scale, int bf);

/* cpu_attention.c: causal flash attention (backend.h), both activation types. */
void cpu_attention_forward(void *out, float *lse, const void *qkv, int n, int T, int C, int H, int bf);
void cpu_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                            int n, int T, int C, int H, int bf);
/* cpu_decode.c: one query against the key/value cache (backend.h's attention_decode). */
void cpu_attention_decode(void *out, const void *qkv, int pos, int C, int H, int bf);

/* cpu_kernels.c: AdamW, and the sum of squares and scaling of gradient clipping. */
void cpu_adamw_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha, float beta1,
                      float beta2, float eps, float decay);
double cpu_sum_squares(const float *x, size_t n);
void cpu_scale(float *x, size_t n, float s);

/* cpu_setup.c: setup(); the precision it chose (enum dt_precision), and
 * whether this CPU has bf16 dot-product instructions; the process's one
 * oneDNN engine and stream, made on first use (the convolutions and the
 * bf16 GEMM run on them). */
int cpu_setup(int nthreads, int precision, char *why, size_t whylen);
extern int cpu_precision;
int cpu_has_bf16(void);
/* DTRAIN_NO_FAST_KERNELS, read on every call (tests switch it between
 * plans): unset, empty or 0 all of dtrain's fast kernels; avx512 its AVX2
 * ones where AVX-512 ones exist; any other value none of them. */
enum { CPU_FAST_ALL, CPU_FAST_NO512, CPU_FAST_NONE };
int cpu_fast_kernels(void);
/* AVX-512 F, BW and VL with AVX512-BF16: what the bf16 fast paths need */
int cpu_avx512_bf16(void);
dnnl_engine_t cpu_dnnl_engine(void);
dnnl_stream_t cpu_dnnl_stream(void);

/* cpu_kernels.c: dst[i] = src[i] rounded to bf16 (runtime/half.h's rounding,
 * or AVX512-BF16's instruction where the CPU has it). */
void cpu_to_bf16(uint16_t *dst, const float *src, size_t n);

#endif
