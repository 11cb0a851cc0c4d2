/* backend.h: the seam between layers and the device that runs them.
 *
 * Layers in src/nn/ never touch a loop over elements or a library handle:
 * they call the operations in this table. The CPU backend (src/cpu/, oneDNN +
 * CBLAS + plain C) and the CUDA backend (src/gpu/, cuDNN + cuBLAS + own
 * kernels) fill the same table, so the layers know neither. Every pointer
 * argument is device memory of the backend that owns the table. Layouts are
 * fixed: activations NHWC, conv kernels HWIO, dense kernels [in][out]
 * (Keras's). */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rng.h"
#include "tensor.h" /* dt_act, enum dt_precision */

/* A 2-D convolution (or pooling window) over NHWC tensors. */
struct dt_conv_shape {
    int h, w, c;       /* input height, width, channels */
    int k;             /* output channels (conv) */
    int kh, kw;        /* window */
    int stride, pad;   /* same in both dimensions */
    int oh, ow;        /* output height, width (derived by the layer) */
};

/* Backend-private per-layer state (primitive caches, workspaces). */
typedef struct dt_conv_plan dt_conv_plan;
typedef struct dt_pool_plan dt_pool_plan;
/* A recorded sequence of ops, replayed as one launch (CUDA Graphs). */
typedef struct dt_graph dt_graph;

struct dt_backend {
    const char *name;

    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* device to device */
    /* Host memory the backend copies from fastest (pinned on the GPU). */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Wait until every operation queued so far has finished (a no-op on the
     * CPU, whose operations finish before they return). */
    void (*synchronize)(void);
    /* Threads per rank, the precision (enum dt_precision), and the calling
     * thread's floating-point mode (on the CPU: denormals flushed to zero, as
     * TensorFlow does: tiny gradients otherwise cost up to a third of the
     * step time). Call before starting threads: they inherit the mode.
     * Returns 0, or -1 with the reason in why when the backend cannot run
     * that precision here (fp16 on the CPU, bf16 without bf16 instructions). */
    int (*setup)(int nthreads, int precision, char *why, size_t whylen);
    /* The element type of activations (enum dt_precision): float32 after
     * setup. set_act_type asks for type (the precision's 16-bit type, or
     * float32) before any activation is allocated and returns the type now
     * in effect: the GPU stores 16 bits when asked; the CPU stores bf16
     * under --precision bf16 and float32 otherwise (no fp16 on the CPU). */
    int (*set_act_type)(int type);
    int (*act_type)(void);
    /* --winograd: on = 1 gives the convolutions created after the call
     * Winograd kernels where they are faster than direct ones (the CPU:
     * oneDNN's, float32 3x3 stride-1 convolutions of 32 or more channels;
     * not bitwise equal to direct), 0 takes them back. Returns 0, or -1 with
     * the reason in why where the backend has none here. NULL on a backend
     * without the choice (CUDA: cuDNN picks its own algorithms). */
    int (*set_winograd)(int on, char *why, size_t whylen);

    /* Convolution with bias, optionally followed by ReLU in the same pass
     * (relu != 0). Batch size n may vary from call to call. */
    dt_conv_plan *(*conv_create)(const struct dt_conv_shape *shape, int relu);
    void (*conv_destroy)(dt_conv_plan *plan);
    void (*conv_forward)(dt_conv_plan *plan, int n, dt_act *out, const dt_act *inp,
                         const float *weight, const float *bias);
    /* dinp may be NULL (first layer). dweight/dbias are overwritten. */
    void (*conv_backward)(dt_conv_plan *plan, int n, dt_act *dinp, float *dweight, float *dbias,
                          const dt_act *dout, const dt_act *inp, const float *weight);

    /* Max pooling; the plan keeps what backward needs from the last forward. */
    dt_pool_plan *(*pool_create)(const struct dt_conv_shape *shape);
    void (*pool_destroy)(dt_pool_plan *plan);
    void (*pool_forward)(dt_pool_plan *plan, int n, dt_act *out, const dt_act *inp, int train);
    /* relu_out != NULL: the pooled input was a ReLU's output, and relu_out is
     * this pool's output; the ReLU's backward is applied here (on the small
     * side) by passing gradient only where relu_out > 0. */
    void (*pool_backward)(dt_pool_plan *plan, int n, dt_act *dinp, const dt_act *dout,
                          const dt_act *relu_out);
    /* A convolution with its ReLU and the 2x2 stride-2 max pool after it in
     * one pass, bit for bit what conv_forward and pool_forward give (NULL
     * where the backend has none: CUDA). fits: whether a convolution of this
     * shape can (the CPU: its direct one-input-channel kernel). forward
     * writes the pool's output (out: [n][oh/2][ow/2][k]) and keeps the
     * maxima's places in pool (pool_create's plan for that pool); backward
     * overwrites dweight and dbias from the pool's output gradient dout and
     * output out, as conv_backward after pool_backward with relu_out would.
     * No input gradient: the model folds only a first layer. */
    int (*conv_pool_fits)(const struct dt_conv_shape *shape);
    /* The backward of a convolution (shape) whose ReLU output feeds a 2x2
     * stride-2 max pool (pool_shape; its plan pool, as its forward left
     * it), from that pool's output gradient dout, with the pool's backward
     * folded in: only the gradients the pool passes are multiplied.
     * pooled is the pool's output (the ReLU's where it passes gradient);
     * overwrites dweight, dbias and
     * dinp (NULL: none). Not bit for bit conv_backward after pool_backward
     * (another order of summing). fits: whether this backend does it for
     * those shapes at the precision set (NULL: never; CUDA). */
    int (*conv_poolgrad_fits)(const struct dt_conv_shape *shape, const struct dt_conv_shape *pool_shape);
    void (*conv_poolgrad_backward)(const struct dt_conv_shape *shape, dt_pool_plan *pool, int n, dt_act *dinp,
                                   float *dweight, float *dbias, const dt_act *dout, const dt_act *pooled,
                                   const dt_act *inp, const float *weight);
    void (*conv_pool_forward)(dt_conv_plan *plan, dt_pool_plan *pool, int n, dt_act *out, const dt_act *inp,
                              const float *weight, const float *bias, int train);
    void (*conv_pool_backward)(dt_conv_plan *plan, dt_pool_plan *pool, int n, float *dweight, float *dbias,
                               const dt_act *dout, const dt_act *out, const dt_act *inp);

    /* A dense layer over n rows: out [n][units] = inp [n][in] . weight
     * [in][units] + bias. backward overwrites dweight (inp^T . dout, zero
     * when n is 0) and dbias (column sums of dout), and writes dinp = dout .
     * weight^T unless dinp is NULL. */
    void (*dense_forward)(int n, int in, int units, dt_act *out, const dt_act *inp, const float *weight,
                          const float *bias);
    void (*dense_backward)(int n, int in, int units, dt_act *dinp, float *dweight, float *dbias,
                           const dt_act *dout, const dt_act *inp, const float *weight);
    /* The float32 pieces the dense ops are made of, on float buffers:
     * row-major C = alpha * op(A) op(B) + beta * C as cblas_sgemm (16-bit
     * operands under --precision fp16|bf16), and the bias's forward and
     * gradient (overwrites). */
    void (*gemm)(int transa, int transb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
    void (*bias_add)(float *out, const float *bias, int rows, int cols);
    void (*bias_grad)(float *dbias, const float *dout, int rows, int cols);

    void (*relu_forward)(dt_act *out, const dt_act *inp, size_t n);
    void (*relu_backward)(dt_act *dinp, const dt_act *dout, const dt_act *out, size_t n);

    /* Inverted dropout: keep with probability 1-rate, scale kept by 1/(1-rate).
     * mask holds the scale (0 or 1/(1-rate)) per element for backward. */
    void (*dropout_forward)(dt_act *out, float *mask, const dt_act *inp, size_t n, float rate,
                            dt_rng *rng);
    void (*dropout_backward)(dt_act *dinp, const dt_act *dout, const float *mask, size_t n);

    /* Softmax cross-entropy over logits [n][classes] with integer labels.
     * Returns the summed loss (double); counts correct argmax predictions;
     * writes dlogits = (softmax - onehot) * grad_scale when dlogits != NULL. */
    double (*softmax_xent)(dt_act *dlogits, long *ncorrect, const dt_act *logits,
                           const uint8_t *labels, int n, int classes, float grad_scale);

    /* uint8 pixels to activations scaled by 1/255 (the seed's x / 255.0). */
    void (*images_to_float)(dt_act *dst, const uint8_t *src, size_t n);

    /* Fused optimizer updates over a whole flat block. */
    void (*adam_update)(float *param, float *m, float *v, const float *grad, size_t n,
                        float alpha, float beta1, float beta2, float eps);
    void (*sgd_update)(float *param, float *velocity, const float *grad, size_t n, float lr,
                       float momentum);
    /* AdamW (Loshchilov & Hutter): the decoupled weight decay param -=
     * decay * param (decay = lr x weight decay; 0 for the parts not
     * decayed), then adam_update's step. */
    void (*adamw_update)(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                         float beta1, float beta2, float eps, float decay);
    /* Gradient clipping by global norm: the sum of squares of n floats (in
     * double), and x *= s. */
    double (*sum_squares)(const float *x, size_t n);
    void (*scale)(float *x, size_t n, float s);

    /* Loss scaling: returns 1 when all n values are finite, and then
     * multiplies them by inv_scale; returns 0 (values left as they were) when
     * any is NaN or infinite. */
    int (*unscale_check)(float *grad, size_t n, float inv_scale);

    /* dst += src, element-wise: accumulate on float buffers (gradient
     * accumulation over micro-batches), act_add on activations (residual
     * additions and the gradients of tensors used twice). */
    void (*accumulate)(float *dst, const float *src, size_t n);
    void (*act_add)(dt_act *dst, const dt_act *src, size_t n);

    /* Per-channel arithmetic over [rows][c] tensors (NHWC with rows = n*h*w),
     * for batch normalization. The per-channel vectors (s1, s2, p, q, r) are
     * host memory: c values, against rows * c in the tensors.
     * channel_sums: s1[j] = sum of a, s2[j] = sum of a * b (b == a gives the
     * sum of squares), accumulated in double; both overwritten. */
    void (*channel_sums)(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c);
    /* The same after a ReLU's backward on a, in place and in the same pass:
     * a = 0 where relu_out <= 0 (batch norm's backward, the gradient
     * arriving through a fused ReLU). NULL where the backend has none: the
     * caller runs relu_backward, then channel_sums. */
    void (*channel_sums_relu)(double *s1, double *s2, dt_act *a, const dt_act *b, const dt_act *relu_out,
                              size_t rows, int c);
    /* out = p[j] * a + q[j] * b + r[j] for channel j (b == NULL: no b term),
     * then max(0, .) when relu. out may be a. */
    void (*channel_affine)(dt_act *out, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                           const float *q, const float *r, int relu);
    /* Average pooling over 'valid' windows (kh x kw, stride); every window is
     * whole, so each output is the plain mean of kh * kw inputs. backward
     * overwrites dinp. */
    void (*avgpool_forward)(const struct dt_conv_shape *s, int n, dt_act *out, const dt_act *inp);
    void (*avgpool_backward)(const struct dt_conv_shape *s, int n, dt_act *dinp, const dt_act *dout);

    /* ---- Transformer ops (nn/embedding.c, layernorm.c, attention.c, gelu.c,
     * lm_head.c, loss.c). A sequence is an activation [n][T][C], rows = n*T.
     * Tokens are int32 device memory, T + 1 per sample (a window of the
     * token stream, row stride T + 1): tokens 0..T-1 are its inputs,
     * tokens 1..T its targets. */
    /* out[s][t][:] = wte[tok[s][t]][:] + wpe[t][:]; wte [V][C], wpe [T][C]. */
    void (*embed_forward)(dt_act *out, const int32_t *tokens, const float *wte, const float *wpe, int n, int T,
                          int C);
    /* dwte += dout scattered by token (accumulates: a tied head's gradient
     * may be there already; the caller zeroes it otherwise); dwpe = dout
     * summed over the samples (overwrites). */
    void (*embed_backward)(float *dwte, float *dwpe, const dt_act *dout, const int32_t *tokens, int n, int T,
                           int C);
    /* Layer normalization over each row of C: out = (inp - mean) * rstd *
     * gamma + beta, the statistics in float32 (also under bf16), mean and
     * rstd [rows] kept for backward. backward overwrites dinp, dgamma, dbeta;
     * dinp may be dout. */
    void (*layernorm_forward)(dt_act *out, float *mean, float *rstd, const dt_act *inp, const float *gamma,
                              const float *beta, size_t rows, int C, float eps);
    void (*layernorm_backward)(dt_act *dinp, float *dgamma, float *dbeta, const dt_act *dout, const dt_act *inp,
                               const float *gamma, const float *mean, const float *rstd, size_t rows, int C);
    /* Causal scaled dot-product attention of H heads of width D = C / H:
     * qkv [n][T][3C] holds q | k | v per position (head h at columns h*D
     * of each third); out [n][T][C] (head h at columns h*D); lse [n][H][T]
     * the log-sum-exp of each query's scaled scores (q.k / sqrt(D), keys
     * 0..t). Softmax is computed online over blocks of keys (flash
     * attention): no T x T matrix is kept; backward recomputes the scores
     * from qkv and lse, and overwrites dqkv. */
    void (*attention_forward)(dt_act *out, float *lse, const dt_act *qkv, int n, int T, int C, int H);
    void (*attention_backward)(dt_act *dqkv, const dt_act *dout, const dt_act *qkv, const dt_act *out,
                               const float *lse, int n, int T, int C, int H);
    /* One query of generation against a key/value cache (dtrain-generate):
     * qkv [pos+1][3C] holds the rows of positions 0..pos of one sequence
     * (attention_forward's qkv of one sample, q | k | v); out [C] is
     * attention_forward's output row pos: per head, softmax over t <= pos
     * of q_pos . k_t / sqrt(D), times v_t, the softmax computed online over
     * the keys (nothing of size pos kept), in float32. */
    void (*attention_decode)(dt_act *out, const dt_act *qkv, int pos, int C, int H);
    /* GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x +
     * 0.044715 x^3))). backward overwrites dinp (may be dout) from inp. */
    void (*gelu_forward)(dt_act *out, const dt_act *inp, size_t n);
    void (*gelu_backward)(dt_act *dinp, const dt_act *dout, const dt_act *inp, size_t n);
    /* A matrix product against a weight stored [V][C] (PyTorch's Linear
     * layout; the tied LM head's embedding table): out [rows][V] = inp
     * [rows][C] . w^T. backward overwrites dw (dout^T . inp, [V][C]) and
     * writes dinp = dout . w unless dinp is NULL. */
    void (*linear_t_forward)(size_t rows, int C, int V, dt_act *out, const dt_act *inp, const float *w);
    void (*linear_t_backward)(size_t rows, int C, int V, dt_act *dinp, float *dw, const dt_act *dout,
                              const dt_act *inp, const float *w);
    /* Token-level softmax cross-entropy over logits [n][T][V] against the
     * targets in tokens (sample s, position t: tokens[s*(T+1) + t + 1]).
     * Returns the loss summed over the n*T positions (double); *ncorrect =
     * positions whose argmax is the target; dlogits = (softmax - onehot) *
     * grad_scale when dlogits != NULL. */
    double (*token_xent)(dt_act *dlogits, long *ncorrect, const dt_act *logits, const int32_t *tokens, int n,
                         int T, int V, float grad_scale);

    /* Recording (--cuda-graphs); all NULL where the backend has none (CPU).
     * After capture_begin the ops are recorded, not run, until capture_end,
     * which returns the graph, or NULL with the reason in why: then nothing
     * recorded ran, and the caller runs the ops again the usual way. While
     * recording, softmax_xent returns 0 and its result comes from graph_run;
     * dropout_forward records that it draws from rng, and every graph_run
     * draws as much again from the same rng, in the same order, so a replay
     * uses the random stream exactly as running the ops does. Ops that bring
     * values to the host between kernels (channel_sums) must not be
     * recorded. graph_run launches g and returns its softmax_xent's loss sum
     * (adding its correct count to *ncorrect), waiting for it. graph_valid is
     * 0 once a buffer g uses was reallocated: destroy g and record again. */
    int (*capture_begin)(char *why, size_t whylen);
    dt_graph *(*capture_end)(char *why, size_t whylen);
    double (*graph_run)(dt_graph *g, long *ncorrect);
    int (*graph_valid)(const dt_graph *g);
    void (*graph_destroy)(dt_graph *g);
};

extern const struct dt_backend dt_backend_cpu;

/* Before MPI_Init, first thing in main: where OpenBLAS took this CPU for a
 * generic one (SSE3 kernels on a CPU newer than the library), restart the
 * program once with OPENBLAS_CORETYPE naming the kernels its flags allow
 * (cpu/cpu_blas_core.c). Returns only when nothing needed changing. */
void dt_cpu_blas_prepare(char **argv);
/* OpenBLAS's kernel set now ("SkylakeX"; NULL without OpenBLAS), the one the
 * CPU's flags allow (NULL: no AVX2), and what OpenBLAS had chosen by itself
 * before dt_cpu_blas_prepare restarted (NULL: it did not). */
const char *dt_cpu_blas_core(void);
const char *dt_cpu_blas_wanted(void);
const char *dt_cpu_blas_from(void);

#endif
