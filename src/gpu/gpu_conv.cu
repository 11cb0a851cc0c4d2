/* gpu_conv.cu: convolution through cuDNN's legacy API (max pooling:
 * gpu_pool.cu).
 *
 * Activations are NHWC, as cuDNN's NHWC tensors. Weights live in the flat
 * parameter block as HWIO (Keras's layout) while cuDNN's NHWC filters are
 * KRSC ([k][kh][kw][c]): a plan transposes the weights into its own buffer
 * at each call (a few thousand values against millions of multiply-adds)
 * and the filter gradient back into HWIO. Keras's 'same' padding puts an
 * odd padding pixel bottom/right, which cuDNN's symmetric padding cannot
 * say; such a layer pads its input explicitly into a plan buffer and crops
 * the input gradient back.
 *
 * Precision: a plan computes in its own type (p->prec, --precision) and
 * reads and writes activations in gpu.act's (float, or 16 bits under
 * set_act_type; gpu_internal.h), converting between the two where they
 * differ. fp32 runs true fp32 (CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH would let
 * Ampere and newer use TF32). fp16/bf16 run with float accumulation (tensor
 * cores) on 16-bit operands: activations already stored in that type go to
 * cuDNN as they are (unless padded), float ones are converted into plan
 * buffers, and the output is rounded to 16 bits by cuDNN, then biased (and
 * ReLU'd) in float and rounded once more to the activations' type. cuDNN's
 * legacy API wants x, w and y of one type, so the filter gradient also comes
 * back in 16 bits before it is widened into HWIO floats. A layer cuDNN has
 * no 16-bit algorithm for (say, one input channel) falls back to fp32, with
 * a warning; with 16-bit activations it then converts its input to float
 * and its output back. Nothing a plan caches depends on gpu.act: each call
 * reads it.
 *
 * Algorithms come from cuDNN's heuristics (_v7), deterministic ones first,
 * each with a workspace within WORKSPACE_CAP; they are cached per batch
 * size (the last batch of an epoch is smaller), and one cuDNN refuses at
 * run time gives way to the next. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_internal.h"

#define CONV_CACHE 6
#define WORKSPACE_CAP ((size_t)256 << 20)

static const float one = 1.0f, zero = 0.0f;

static void *xcalloc(size_t size)
{
    void *p = calloc(1, size);
    if (!p) dt_die(__FILE__, __LINE__, "out of memory allocating %zu bytes", size);
    return p;
}

static cudnnDataType_t data_type(int prec)
{
    return prec == DT_PREC_FP16 ? CUDNN_DATA_HALF : prec == DT_PREC_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static int not_supported(cudnnStatus_t st)
{
    return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED;
}

/* ---- kernels ------------------------------------------------------------- */

/* Kernels moving activations take the source element type Tin and the
 * destination's Tout, each float, __half or __nv_bfloat16. */

template <typename Tin, typename Tout> __global__ void convert_kernel(Tout *dst, const Tin *src, size_t n)
{
    GPU_FOR_EACH(i, n) dst[i] = from_f32<Tout>(to_f32(src[i]));
}

/* dst [n][hp][wp][c] = src [n][h][w][c] shifted down/right by (pt, pl),
 * zero outside; rows/columns past hp/wp are not needed by any window. */
template <typename Tin, typename Tout>
__global__ void pad_kernel(Tout *dst, const Tin *src, int n, int h, int w, int c, int hp, int wp, int pt, int pl)
{
    GPU_FOR_EACH(i, (size_t)n * hp * wp * c) {
        size_t r = i / (size_t)c;
        int ci = (int)(i % (size_t)c), x = (int)(r % (size_t)wp);
        r /= (size_t)wp;
        int y = (int)(r % (size_t)hp);
        size_t b = r / (size_t)hp;
        int sy = y - pt, sx = x - pl;
        float v = sy >= 0 && sy < h && sx >= 0 && sx < w ? to_f32(src[((b * h + sy) * w + sx) * c + ci]) : 0.0f;
        dst[i] = from_f32<Tout>(v);
    }
}

/* The inverse for gradients: dst [n][h][w][c] from the padded src; input
 * pixels no window reached get zero. */
template <typename Tin, typename Tout>
__global__ void crop_kernel(Tout *dst, const Tin *src, int n, int h, int w, int c, int hp, int wp, int pt, int pl)
{
    GPU_FOR_EACH(i, (size_t)n * h * w * c) {
        size_t r = i / (size_t)c;
        int ci = (int)(i % (size_t)c), x = (int)(r % (size_t)w);
        r /= (size_t)w;
        int y = (int)(r % (size_t)h);
        size_t b = r / (size_t)h;
        int sy = y + pt, sx = x + pl;
        dst[i] = from_f32<Tout>(sy < hp && sx < wp ? to_f32(src[((b * hp + sy) * wp + sx) * c + ci]) : 0.0f);
    }
}

/* dst [cols][rows] = src [rows][cols], converting the element type. HWIO is
 * [kh*kw*c][k] and KRSC is [k][kh*kw*c]. */
template <typename Tin, typename Tout>
__global__ void transpose_kernel(Tout *dst, const Tin *src, int rows, int cols)
{
    GPU_FOR_EACH(i, (size_t)rows * cols) {
        size_t r = i % (size_t)rows, c = i / (size_t)rows;
        dst[i] = from_f32<Tout>(to_f32(src[r * cols + c]));
    }
}

/* out = act(y + bias) per channel; y may be out itself (same type). */
template <typename Tin, typename Tout>
__global__ void bias_act_kernel(Tout *out, const Tin *y, const float *bias, size_t total, int k, int relu)
{
    GPU_FOR_EACH(i, total) {
        float v = to_f32(y[i]) + bias[i % (size_t)k];
        out[i] = from_f32<Tout>(relu ? (v > 0.0f ? v : 0.0f) : v);
    }
}

/* ---- the plan ------------------------------------------------------------ */

/* The algorithms usable for one operation, best first; cur is the one in
 * use (an algorithm cuDNN refuses at run time is skipped for the next). */
#define MAX_CANDIDATES 8
struct candidates {
    int count, cur;
    struct {
        int algo;              /* a cudnnConvolution*Algo_t */
        cudnnMathType_t math;
        size_t ws;             /* workspace bytes */
    } c[MAX_CANDIDATES];
};

struct algos {
    int n;          /* batch size; 0 marks a free slot */
    unsigned used;  /* LRU clock */
    struct candidates fwd, data, filter;
};

struct dt_conv_plan {
    struct dt_conv_shape s;
    int relu;
    int prec;                        /* enum dt_precision this layer runs in */
    int padded;                      /* input padded explicitly (uneven padding) */
    int hp, wp;                      /* input height, width as cuDNN sees it */
    cudnnTensorDescriptor_t xd, yd;  /* [n][hp][wp][c], [n][oh][ow][k] */
    cudnnFilterDescriptor_t wd;      /* KRSC */
    cudnnConvolutionDescriptor_t cd;
    int desc_n;                      /* batch size xd, yd describe; 0: none */
    unsigned clock;
    struct algos cache[CONV_CACHE];
    struct gpu_buf ws;               /* cuDNN workspace */
    struct gpu_buf x;                /* input, padded and/or in the compute type */
    struct gpu_buf w;                /* weights, KRSC, in the compute type */
    struct gpu_buf y;                /* output (forward) or output gradient (backward) in the compute type */
    struct gpu_buf dw;               /* filter gradient, KRSC, in the compute type */
    struct gpu_buf dx;               /* input gradient, padded and/or in the compute type */
};

/* Descriptors that depend on the precision; forgets cached algorithms. */
static void set_types(struct dt_conv_plan *p)
{
    const struct dt_conv_shape *s = &p->s;
    int pad = p->padded ? 0 : s->pad;
    DT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->wd, data_type(p->prec), CUDNN_TENSOR_NHWC, s->k, s->c, s->kh, s->kw));
    DT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->cd, pad, pad, s->stride, s->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    p->desc_n = 0;
    memset(p->cache, 0, sizeof p->cache);
}

static void set_batch(struct dt_conv_plan *p, int n)
{
    const struct dt_conv_shape *s = &p->s;
    if (p->desc_n == n) return;
    cudnnDataType_t t = data_type(p->prec);
    DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, t, n, s->c, p->hp, p->wp));
    DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, t, n, s->k, s->oh, s->ow));
    p->desc_n = n;
}

dt_conv_plan *gpu_conv_create(const struct dt_conv_shape *shape, int relu)
{
    dt_conv_plan *p = (dt_conv_plan *)xcalloc(sizeof *p);
    const struct dt_conv_shape *s = &p->s;
    p->s = *shape;
    p->relu = relu;
    p->prec = gpu.precision;
    /* Symmetric padding reproduces the layer when it yields the same output
     * size: the windows then start at the same places. */
    int eh = s->h + 2 * s->pad - s->kh, ew = s->w + 2 * s->pad - s->kw;
    p->padded = eh < 0 || ew < 0 || eh / s->stride + 1 != s->oh || ew / s->stride + 1 != s->ow;
    p->hp = p->padded ? (s->oh - 1) * s->stride + s->kh : s->h;
    p->wp = p->padded ? (s->ow - 1) * s->stride + s->kw : s->w;
    DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->xd));
    DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->yd));
    DT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->wd));
    DT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->cd));
    set_types(p);
    set_batch(p, 1);
    int on, oc, oh, ow;
    DT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh, &ow));
    if (on != 1 || oc != s->k || oh != s->oh || ow != s->ow)
        dt_die(__FILE__, __LINE__, "conv %dx%dx%d, %dx%d window, stride %d, pad %d: cuDNN gives %dx%dx%d, "
               "the layer wants %dx%dx%d", s->h, s->w, s->c, s->kh, s->kw, s->stride, s->pad, oh, ow, oc,
               s->oh, s->ow, s->k);
    return p;
}

void gpu_conv_destroy(dt_conv_plan *p)
{
    if (!p) return;
    struct gpu_buf *bufs[] = {&p->ws, &p->x, &p->w, &p->y, &p->dw, &p->dx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_buf_release(bufs[i]);
    DT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->xd));
    DT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->yd));
    DT_CUDNN_CHECK(cudnnDestroyFilterDescriptor(p->wd));
    DT_CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(p->cd));
    free(p);
}

/* ---- choosing algorithms --------------------------------------------------- */

/* fp32 stays FMA whatever the heuristic reports; 16-bit takes the math
 * type the heuristic found the algorithm with. */
static cudnnMathType_t math_for(const struct dt_conv_plan *p, cudnnMathType_t suggested)
{
    return p->prec == DT_PREC_FP32 ? CUDNN_FMA_MATH : suggested;
}

/* The usable results: status success and a workspace within the cap (the
 * workspace query also rejects what these descriptors cannot run);
 * deterministic algorithms first, so runs repeat bit for bit. Returns the
 * count. */
template <typename Perf, typename WsQuery>
static int pick(struct dt_conv_plan *p, const Perf *perf, int got, struct candidates *out, WsQuery query)
{
    out->count = out->cur = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < got && out->count < MAX_CANDIDATES; i++) {
            int det = perf[i].determinism == CUDNN_DETERMINISTIC;
            if (perf[i].status != CUDNN_STATUS_SUCCESS || det != (pass == 0)) continue;
            cudnnMathType_t mt = math_for(p, perf[i].mathType);
            size_t bytes = 0;
            DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, mt));
            if (query(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > WORKSPACE_CAP) continue;
            out->c[out->count].algo = (int)perf[i].algo;
            out->c[out->count].math = mt;
            out->c[out->count].ws = bytes;
            out->count++;
        }
    return out->count;
}

/* Fills a for the current batch descriptors; returns the operation that
 * has no algorithm, or NULL. */
static const char *choose(struct dt_conv_plan *p, struct algos *a)
{
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const cudnnMathType_t base = p->prec == DT_PREC_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    int got = 0;

    DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, base));
    if (cudnnGetConvolutionForwardAlgorithm_v7(gpu.dnn, p->xd, p->wd, p->cd, p->yd,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fp) != CUDNN_STATUS_SUCCESS ||
        !pick(p, fp, got, &a->fwd, [p](cudnnConvolutionFwdAlgo_t algo, size_t *b) {
            return cudnnGetConvolutionForwardWorkspaceSize(gpu.dnn, p->xd, p->wd, p->cd, p->yd, algo, b);
        }))
        return "forward";

    DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, base));
    if (cudnnGetConvolutionBackwardDataAlgorithm_v7(gpu.dnn, p->wd, p->yd, p->cd, p->xd,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, dp) != CUDNN_STATUS_SUCCESS ||
        !pick(p, dp, got, &a->data, [p](cudnnConvolutionBwdDataAlgo_t algo, size_t *b) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(gpu.dnn, p->wd, p->yd, p->cd, p->xd, algo, b);
        }))
        return "backward data";

    DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, base));
    if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(gpu.dnn, p->xd, p->yd, p->cd, p->wd,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, wp) != CUDNN_STATUS_SUCCESS ||
        !pick(p, wp, got, &a->filter, [p](cudnnConvolutionBwdFilterAlgo_t algo, size_t *b) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(gpu.dnn, p->xd, p->yd, p->cd, p->wd, algo, b);
        }))
        return "backward filter";
    return NULL;
}

static const char *prec_name(int prec) { return prec == DT_PREC_FP16 ? "fp16" : prec == DT_PREC_BF16 ? "bf16" : "fp32"; }

/* This layer runs in fp32 from now on. */
static void demote(struct dt_conv_plan *p, const char *op, int n)
{
    const struct dt_conv_shape *s = &p->s;
    DT_LOG(DT_LOG_WARN, "conv %dx%dx%d -> %d (%dx%d window, stride %d), batch %d: cuDNN cannot run the %s "
           "convolution in %s here; this layer runs in fp32", s->h, s->w, s->c, s->k, s->kh, s->kw, s->stride,
           n, op, prec_name(p->prec));
    p->prec = DT_PREC_FP32;
    set_types(p);
}

static struct algos *lookup(struct dt_conv_plan *p, int n)
{
    set_batch(p, n);
    struct algos *victim = &p->cache[0];
    for (int i = 0; i < CONV_CACHE; i++) {
        struct algos *a = &p->cache[i];
        if (a->n == n) {
            a->used = ++p->clock;
            return a;
        }
        if (a->used < victim->used) victim = a;
    }
    const char *op;
    while ((op = choose(p, victim)) != NULL) {
        if (p->prec == DT_PREC_FP32) {
            const struct dt_conv_shape *s = &p->s;
            dt_die(__FILE__, __LINE__, "conv %dx%dx%d -> %d (%dx%d window, stride %d), batch %d: cuDNN has no "
                   "fp32 %s algorithm within a %zu MiB workspace", s->h, s->w, s->c, s->k, s->kh, s->kw,
                   s->stride, n, op, WORKSPACE_CAP >> 20);
        }
        demote(p, op, n);
        set_batch(p, n);
        victim = &p->cache[0];
    }
    victim->n = n;
    victim->used = ++p->clock;
    return victim;
}

/* ---- operands in the compute type ---------------------------------------- */

/* n elements of type src_type (enum dt_precision) into dst_type. */
static void convert(void *dst, int dst_type, const void *src, int src_type, size_t n)
{
    gpu_by_type(src_type, [&](auto ti) {
        using Tin = decltype(ti);
        gpu_by_type(dst_type, [&](auto to) {
            using Tout = decltype(to);
            convert_kernel<Tin, Tout><<<gpu_blocks(n, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
                (Tout *)dst, (const Tin *)src, n);
        });
    });
    DT_KERNEL_CHECK();
}

/* The input as cuDNN reads it: the caller's, or padded and/or converted
 * from the activations' type into the compute type. */
static const void *input_operand(struct dt_conv_plan *p, int n, const dt_act *inp)
{
    const struct dt_conv_shape *s = &p->s;
    if (!p->padded && p->prec == gpu.act) return inp;
    size_t total = (size_t)n * p->hp * p->wp * s->c;
    void *x = gpu_buf_reserve(&p->x, total * gpu_elem_size(p->prec));
    if (!p->padded) {
        convert(x, p->prec, inp, gpu.act, total);
        return x;
    }
    gpu_by_type(gpu.act, [&](auto ti) {
        using Tin = decltype(ti);
        gpu_by_type(p->prec, [&](auto to) {
            using Tout = decltype(to);
            pad_kernel<Tin, Tout><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
                (Tout *)x, (const Tin *)inp, n, s->h, s->w, s->c, p->hp, p->wp, s->pad, s->pad);
        });
    });
    DT_KERNEL_CHECK();
    return x;
}

template <typename Tin, typename Tout> static void transpose(Tout *dst, const Tin *src, int rows, int cols)
{
    size_t total = (size_t)rows * cols;
    transpose_kernel<Tin, Tout><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(dst, src, rows, cols);
    DT_KERNEL_CHECK();
}

/* HWIO floats -> KRSC in the compute type. */
static const void *weight_operand(struct dt_conv_plan *p, const float *weight)
{
    const struct dt_conv_shape *s = &p->s;
    int r = s->kh * s->kw * s->c;
    void *w = gpu_buf_reserve(&p->w, (size_t)r * s->k * gpu_elem_size(p->prec));
    if (p->prec == DT_PREC_FP16) transpose((__half *)w, weight, r, s->k);
    else if (p->prec == DT_PREC_BF16) transpose((__nv_bfloat16 *)w, weight, r, s->k);
    else transpose((float *)w, weight, r, s->k);
    return w;
}

/* KRSC in the compute type -> HWIO floats. */
static void store_filter_grad(const struct dt_conv_plan *p, float *dweight, const void *dw)
{
    const struct dt_conv_shape *s = &p->s;
    int r = s->kh * s->kw * s->c;
    if (p->prec == DT_PREC_FP16) transpose(dweight, (const __half *)dw, s->k, r);
    else if (p->prec == DT_PREC_BF16) transpose(dweight, (const __nv_bfloat16 *)dw, s->k, r);
    else transpose(dweight, (const float *)dw, s->k, r);
}

/* The input gradient cuDNN wrote (dx, compute type, padded or not) into the
 * caller's dinp (the activations' type). */
static void store_input_grad(const struct dt_conv_plan *p, dt_act *dinp, const void *dx, int n)
{
    const struct dt_conv_shape *s = &p->s;
    if (dx == dinp) return;
    size_t total = (size_t)n * s->h * s->w * s->c;
    if (!p->padded) {
        convert(dinp, gpu.act, dx, p->prec, total);
        return;
    }
    gpu_by_type(p->prec, [&](auto ti) {
        using Tin = decltype(ti);
        gpu_by_type(gpu.act, [&](auto to) {
            using Tout = decltype(to);
            crop_kernel<Tin, Tout><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
                (Tout *)dinp, (const Tin *)dx, n, s->h, s->w, s->c, p->hp, p->wp, s->pad, s->pad);
        });
    });
    DT_KERNEL_CHECK();
}

/* out (the activations' type) = act(y (the compute type) + bias). */
static void bias_act(const struct dt_conv_plan *p, dt_act *out, const void *y, const float *bias, size_t total)
{
    gpu_by_type(p->prec, [&](auto ti) {
        using Tin = decltype(ti);
        gpu_by_type(gpu.act, [&](auto to) {
            using Tout = decltype(to);
            bias_act_kernel<Tin, Tout><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
                (Tout *)out, (const Tin *)y, bias, total, p->s.k, p->relu);
        });
    });
    DT_KERNEL_CHECK();
}

/* ---- forward and backward ---------------------------------------------- */

/* Runs one cuDNN call, call(algo, workspace, bytes), with the current
 * candidate; one cuDNN refuses at run time is dropped for the next. */
template <typename Call> static cudnnStatus_t run(struct dt_conv_plan *p, struct candidates *cs, Call call)
{
    for (;;) {
        int algo = cs->c[cs->cur].algo;
        size_t bytes = cs->c[cs->cur].ws;
        void *ws = bytes ? gpu_buf_reserve(&p->ws, bytes) : NULL;
        DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, cs->c[cs->cur].math));
        cudnnStatus_t st = call(algo, ws, bytes);
        if (!not_supported(st) || cs->cur + 1 >= cs->count) return st;
        cs->cur++;
    }
}

static cudnnStatus_t forward(struct dt_conv_plan *p, int n, dt_act *out, const dt_act *inp, const float *weight,
                             const float *bias)
{
    const struct dt_conv_shape *s = &p->s;
    struct algos *a = lookup(p, n);
    size_t ny = (size_t)n * s->oh * s->ow * s->k;
    const void *x = input_operand(p, n, inp);
    const void *w = weight_operand(p, weight);
    /* cuDNN writes out itself when it is of the compute type; bias_act then works in place */
    void *y = p->prec == gpu.act ? out : gpu_buf_reserve(&p->y, ny * gpu_elem_size(p->prec));
    cudnnStatus_t st = run(p, &a->fwd, [&](int algo, void *ws, size_t bytes) {
        return cudnnConvolutionForward(gpu.dnn, &one, p->xd, x, p->wd, w, p->cd, (cudnnConvolutionFwdAlgo_t)algo,
                                       ws, bytes, &zero, p->yd, y);
    });
    if (st != CUDNN_STATUS_SUCCESS) return st;
    bias_act(p, out, y, bias, ny);
    return CUDNN_STATUS_SUCCESS;
}

void gpu_conv_forward(dt_conv_plan *p, int n, dt_act *out, const dt_act *inp, const float *weight,
                      const float *bias)
{
    if (n <= 0) return;
    cudnnStatus_t st = forward(p, n, out, inp, weight, bias);
    if (not_supported(st) && p->prec != DT_PREC_FP32) {
        demote(p, "forward", n);
        st = forward(p, n, out, inp, weight, bias);
    }
    if (st != CUDNN_STATUS_SUCCESS && gpu.cap) gpu_capture_fail("cudnnConvolutionForward could not be recorded");
    else if (st != CUDNN_STATUS_SUCCESS)
        dt_die(__FILE__, __LINE__, "cudnnConvolutionForward (%s, batch %d) failed: %s", prec_name(p->prec), n,
               cudnnGetErrorString(st));
}

/* No ReLU here: the layer (or the max pool after it) has already masked
 * dout by the ReLU's output, as for the CPU backend. */
static cudnnStatus_t backward(struct dt_conv_plan *p, int n, dt_act *dinp, float *dweight, float *dbias,
                              const dt_act *dout, const dt_act *inp, const float *weight, const char **op)
{
    const struct dt_conv_shape *s = &p->s;
    struct algos *a = lookup(p, n);
    size_t ny = (size_t)n * s->oh * s->ow * s->k, nw = (size_t)s->kh * s->kw * s->c * s->k;
    size_t nx = (size_t)n * p->hp * p->wp * s->c;
    gpu_act_bias_grad(dbias, dout, n * s->oh * s->ow, s->k);
    const void *x = input_operand(p, n, inp);
    const void *dy = dout;
    if (p->prec != gpu.act) {
        void *c = gpu_buf_reserve(&p->y, ny * gpu_elem_size(p->prec));
        convert(c, p->prec, dout, gpu.act, ny);
        dy = c;
    }
    void *dw = gpu_buf_reserve(&p->dw, nw * gpu_elem_size(p->prec));
    *op = "backward filter";
    cudnnStatus_t st = run(p, &a->filter, [&](int algo, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(gpu.dnn, &one, p->xd, x, p->yd, dy, p->cd,
                                              (cudnnConvolutionBwdFilterAlgo_t)algo, ws, bytes, &zero, p->wd, dw);
    });
    if (st != CUDNN_STATUS_SUCCESS) return st;
    store_filter_grad(p, dweight, dw);
    if (!dinp) return CUDNN_STATUS_SUCCESS;

    *op = "backward data";
    const void *w = weight_operand(p, weight);
    void *dx = !p->padded && p->prec == gpu.act ? dinp : gpu_buf_reserve(&p->dx, nx * gpu_elem_size(p->prec));
    st = run(p, &a->data, [&](int algo, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardData(gpu.dnn, &one, p->wd, w, p->yd, dy, p->cd,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws, bytes, &zero, p->xd, dx);
    });
    if (st != CUDNN_STATUS_SUCCESS) return st;
    store_input_grad(p, dinp, dx, n);
    return CUDNN_STATUS_SUCCESS;
}

void gpu_conv_backward(dt_conv_plan *p, int n, dt_act *dinp, float *dweight, float *dbias, const dt_act *dout,
                       const dt_act *inp, const float *weight)
{
    const struct dt_conv_shape *s = &p->s;
    if (n <= 0) { /* no samples, no gradient */
        DT_CUDA_CHECK(cudaMemsetAsync(dweight, 0, sizeof(float) * (size_t)s->kh * s->kw * s->c * s->k, gpu.stream));
        DT_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * (size_t)s->k, gpu.stream));
        return;
    }
    const char *op = "";
    cudnnStatus_t st = backward(p, n, dinp, dweight, dbias, dout, inp, weight, &op);
    if (not_supported(st) && p->prec != DT_PREC_FP32) {
        demote(p, op, n);
        st = backward(p, n, dinp, dweight, dbias, dout, inp, weight, &op);
    }
    if (st != CUDNN_STATUS_SUCCESS && gpu.cap) gpu_capture_fail("a cuDNN convolution backward call could not be recorded");
    else if (st != CUDNN_STATUS_SUCCESS)
        dt_die(__FILE__, __LINE__, "cuDNN convolution %s (%s, batch %d) failed: %s", op, prec_name(p->prec), n,
               cudnnGetErrorString(st));
}
