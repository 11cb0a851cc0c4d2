/* cpu_kernels.c: the CPU backend's element-wise kernels, loss, optimizer
 * updates and GEMM. Plain loops written so the compiler vectorizes them;
 * GEMM goes to CBLAS. */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "cpu/cpu_internal.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int);
#endif

int cpu_precision = DT_PREC_FP32;

int cpu_has_bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
    return 0;
#endif
}

int cpu_setup(int nthreads, int precision, char *why, size_t whylen)
{
#if defined(__SSE__) || defined(__x86_64__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) and DAZ (bit 6) */
#endif
    omp_set_num_threads(nthreads);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(nthreads);
#endif
    if (precision == DT_PREC_FP16) {
        snprintf(why, whylen, "the CPU backend has no fp16 arithmetic; use --precision bf16 (or fp32), "
                 "or fp16 with --device cuda");
        return -1;
    }
    if (precision == DT_PREC_BF16 && !cpu_has_bf16()) {
        snprintf(why, whylen, "this CPU has neither AVX512-BF16 nor AMX-BF16 instructions; "
                 "--precision bf16 would be emulated and slower than fp32");
        return -1;
    }
    cpu_precision = precision;
    return 0;
}

DT_MULTIVERSION int cpu_unscale_check(float *grad, size_t n, float inv_scale)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= !isfinite(grad[i]);
    if (bad) return 0;
    for (size_t i = 0; i < n; i++) grad[i] *= inv_scale;
    return 1;
}

void cpu_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

DT_MULTIVERSION void cpu_bias_add(float *out, const float *bias, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * cols;
        for (int j = 0; j < cols; j++) o[j] += bias[j];
    }
}

DT_MULTIVERSION void cpu_bias_grad(float *dbias, const float *dout, int rows, int cols)
{
    memset(dbias, 0, sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        const float *d = dout + (size_t)r * cols;
        for (int j = 0; j < cols; j++) dbias[j] += d[j];
    }
}

DT_MULTIVERSION void cpu_relu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

/* dinp may alias dout: each element is read before it is written. */
DT_MULTIVERSION void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = dout[i]; /* loaded unconditionally, so the loop vectorizes */
        dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

void cpu_dropout_forward(float *out, float *mask, const float *inp, size_t n, float rate,
                         dt_rng *rng)
{
    const float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < n; i++) {
        mask[i] = dt_rng_uniform(rng) >= rate ? scale : 0.0f;
        out[i] = inp[i] * mask[i];
    }
}

DT_MULTIVERSION void cpu_dropout_backward(float *dinp, const float *dout, const float *mask, size_t n)
{
    for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * mask[i];
}

/* Numerically stable: log-sum-exp around the row maximum, in double for the
 * loss so a long epoch's sum does not lose digits. */
double cpu_softmax_xent(float *dlogits, long *ncorrect, const float *logits,
                        const uint8_t *labels, int n, int classes, float grad_scale)
{
    double loss = 0.0;
    long correct = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        int y = labels[i], arg = 0;
        float zmax = z[0];
        for (int j = 1; j < classes; j++)
            if (z[j] > zmax) { zmax = z[j]; arg = j; }
        double sum = 0.0;
        for (int j = 0; j < classes; j++) sum += exp((double)(z[j] - zmax));
        loss += log(sum) - (double)(z[y] - zmax);
        correct += arg == y;
        if (dlogits) {
            float *d = dlogits + (size_t)i * classes;
            for (int j = 0; j < classes; j++) {
                float p = (float)(exp((double)(z[j] - zmax)) / sum);
                d[j] = (p - (j == y ? 1.0f : 0.0f)) * grad_scale;
            }
        }
    }
    if (ncorrect) *ncorrect += correct;
    return loss;
}

DT_MULTIVERSION void cpu_images_to_float(float *dst, const uint8_t *src, size_t n)
{
    const float s = 1.0f / 255.0f;
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i] * s;
}

/* Keras 3's Adam: alpha = lr * sqrt(1 - b2^t) / (1 - b1^t), computed by the caller. */
DT_MULTIVERSION void cpu_adam_update(float *param, float *m, float *v, const float *grad, size_t n, float alpha,
                     float beta1, float beta2, float eps)
{
    const float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        m[i] += (g - m[i]) * c1;
        v[i] += (g * g - v[i]) * c2;
        param[i] -= m[i] * alpha / (sqrtf(v[i]) + eps);
    }
}

/* Keras's SGD: velocity = momentum * velocity - lr * g; param += velocity. */
DT_MULTIVERSION void cpu_sgd_update(float *param, float *velocity, const float *grad, size_t n, float lr,
                    float momentum)
{
    if (momentum == 0.0f || !velocity) {
        for (size_t i = 0; i < n; i++) param[i] -= lr * grad[i];
        return;
    }
    for (size_t i = 0; i < n; i++) {
        velocity[i] = momentum * velocity[i] - lr * grad[i];
        param[i] += velocity[i];
    }
}
