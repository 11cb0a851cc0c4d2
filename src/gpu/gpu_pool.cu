/* gpu_pool.cu: max pooling, own kernels, the CPU's rules exactly.
 *
 * 'Valid' windows over NHWC (Keras MaxPooling2D), as src/cpu/cpu_pool.c:
 * forward keeps, per output element, the first maximum of its window
 * (strictly greater replaces; the start is -FLT_MAX and the window's first
 * element), and in training the offset of it within the sample; backward
 * sends each output's gradient to that offset. Ties are common once
 * activations are 16 bits (two values of a window round to the same one),
 * so who wins one is not left to a library: cuDNN's pooling picks by its
 * own rules, and its legacy API does not document bf16.
 *
 * Backward is a gather, one thread per input element: it adds, over the
 * windows that cover it in row-major order, the gradients of those whose
 * maximum it is. That is the CPU scatter's order, so overlapping windows
 * sum in the same order, without atomics; an element no window covers, or
 * that is no window's maximum, gets zero. Elements are read as T and
 * summed in float; the result is rounded once. */
#include "config.h"

#include <float.h>
#include <stdlib.h>

#include "gpu/gpu_internal.h"

struct dt_pool_plan {
    struct dt_conv_shape s;
    struct gpu_buf argmax; /* int32 [n][oh][ow][c]: offsets within one sample */
    int n;                 /* the last training forward's batch, -1 before one */
};

template <typename T>
__global__ void maxpool_forward_kernel(T *out, int32_t *argmax, const T *inp, size_t total,
                                       struct dt_conv_shape s)
{
    GPU_FOR_EACH(i, total) {
        const int ch = (int)(i % (size_t)s.c);
        size_t r = i / (size_t)s.c;
        const int ox = (int)(r % (size_t)s.ow);
        r /= (size_t)s.ow;
        const int oy = (int)(r % (size_t)s.oh);
        const size_t b = r / (size_t)s.oh;
        const T *x = inp + b * (size_t)s.h * s.w * s.c;
        float o = -FLT_MAX;
        int32_t arg = (int32_t)(((size_t)oy * s.stride * s.w + (size_t)ox * s.stride) * s.c) + ch;
        for (int ky = 0; ky < s.kh; ky++)
            for (int kx = 0; kx < s.kw; kx++) {
                int32_t off = (int32_t)(((size_t)(oy * s.stride + ky) * s.w + (size_t)(ox * s.stride + kx)) * s.c) + ch;
                float v = to_f32(x[off]);
                if (v > o) {
                    o = v;
                    arg = off;
                }
            }
        out[i] = from_f32<T>(o);
        if (argmax) argmax[i] = arg;
    }
}

template <typename T>
__global__ void maxpool_backward_kernel(T *dinp, const T *dout, const T *relu_out, const int32_t *argmax,
                                        size_t total, struct dt_conv_shape s)
{
    GPU_FOR_EACH(i, total) {
        const int ch = (int)(i % (size_t)s.c);
        size_t r = i / (size_t)s.c;
        const int x = (int)(r % (size_t)s.w);
        r /= (size_t)s.w;
        const int y = (int)(r % (size_t)s.h);
        const size_t b = r / (size_t)s.h;
        const int32_t self = (int32_t)(((size_t)y * s.w + x) * s.c) + ch;
        /* windows oy with oy * stride <= y < oy * stride + kh, likewise ox */
        const int oy0 = y >= s.kh ? (y - s.kh + s.stride) / s.stride : 0;
        const int ox0 = x >= s.kw ? (x - s.kw + s.stride) / s.stride : 0;
        const int oy1 = min(y / s.stride, s.oh - 1), ox1 = min(x / s.stride, s.ow - 1);
        const size_t base = b * (size_t)s.oh * s.ow * s.c + (size_t)ch;
        float g = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                size_t o = base + ((size_t)oy * s.ow + ox) * s.c;
                if (argmax[o] == self && (!relu_out || to_f32(relu_out[o]) > 0.0f)) g += to_f32(dout[o]);
            }
        dinp[i] = from_f32<T>(g);
    }
}

dt_pool_plan *gpu_pool_create(const struct dt_conv_shape *shape)
{
    const struct dt_conv_shape *s = shape;
    if (s->oh < 1 || s->ow < 1 || (s->oh - 1) * s->stride + s->kh > s->h || (s->ow - 1) * s->stride + s->kw > s->w)
        dt_die(__FILE__, __LINE__, "max pool %dx%dx%d, %dx%d window, stride %d: an output of %dx%d reads past the input",
               s->h, s->w, s->c, s->kh, s->kw, s->stride, s->oh, s->ow);
    dt_pool_plan *p = (dt_pool_plan *)calloc(1, sizeof *p);
    if (!p) dt_die(__FILE__, __LINE__, "out of memory allocating a max-pool plan");
    p->s = *shape;
    p->n = -1;
    return p;
}

void gpu_pool_destroy(dt_pool_plan *p)
{
    if (!p) return;
    gpu_buf_release(&p->argmax);
    free(p);
}

void gpu_pool_forward(dt_pool_plan *p, int n, dt_act *out, const dt_act *inp, int train)
{
    const struct dt_conv_shape s = p->s;
    const size_t total = (size_t)(n > 0 ? n : 0) * s.oh * s.ow * s.c;
    int32_t *argmax = NULL;
    if (train) {
        argmax = (int32_t *)gpu_buf_reserve(&p->argmax, sizeof(int32_t) * (total ? total : 1));
        p->n = n;
    }
    if (!total) return;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        maxpool_forward_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)out, argmax, (const T *)inp, total, s);
    });
    DT_KERNEL_CHECK();
}

void gpu_pool_backward(dt_pool_plan *p, int n, dt_act *dinp, const dt_act *dout, const dt_act *relu_out)
{
    const struct dt_conv_shape s = p->s;
    if (n <= 0) return;
    if (n != p->n)
        dt_die(__FILE__, __LINE__, "max pool backward for %d samples, but the last training forward had %d", n, p->n);
    const size_t total = (size_t)n * s.h * s.w * s.c;
    const int32_t *argmax = (const int32_t *)p->argmax.p;
    gpu_by_type(gpu.act, [&](auto t) {
        using T = decltype(t);
        maxpool_backward_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
            (T *)dinp, (const T *)dout, (const T *)relu_out, argmax, total, s);
    });
    DT_KERNEL_CHECK();
}
