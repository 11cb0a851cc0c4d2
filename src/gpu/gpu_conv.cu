/* gpu_conv.cu: convolution and max pooling through cuDNN's legacy API.
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
 * Precision: fp32 runs true fp32 (CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH would
 * let Ampere and newer use TF32). fp16/bf16 convert the operands to 16 bits
 * in plan buffers and run with float accumulation (tensor cores); cuDNN's
 * legacy API wants x, w and y of one type, so the filter gradient also comes
 * back in 16 bits before it is widened into HWIO floats. A layer cuDNN has
 * no 16-bit algorithm for (say, one input channel) falls back to fp32, with
 * a warning.
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

static size_t elem_size(int prec) { return prec == DT_PREC_FP32 ? sizeof(float) : 2; }

static int not_supported(cudnnStatus_t st)
{
    return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED;
}

/* ---- kernels ------------------------------------------------------------- */

/* dst [n][hp][wp][c] = src [n][h][w][c] shifted down/right by (pt, pl),
 * zero outside; rows/columns past hp/wp are not needed by any window. */
template <typename T>
__global__ void pad_kernel(T *dst, const float *src, int n, int h, int w, int c, int hp, int wp, int pt, int pl)
{
    GPU_FOR_EACH(i, (size_t)n * hp * wp * c) {
        size_t r = i / (size_t)c;
        int ci = (int)(i % (size_t)c), x = (int)(r % (size_t)wp);
        r /= (size_t)wp;
        int y = (int)(r % (size_t)hp);
        size_t b = r / (size_t)hp;
        int sy = y - pt, sx = x - pl;
        float v = sy >= 0 && sy < h && sx >= 0 && sx < w ? src[((b * h + sy) * w + sx) * c + ci] : 0.0f;
        dst[i] = from_f32<T>(v);
    }
}

/* The inverse for gradients: dst [n][h][w][c] from the padded src; input
 * pixels no window reached get zero. */
template <typename T>
__global__ void crop_kernel(float *dst, const T *src, int n, int h, int w, int c, int hp, int wp, int pt, int pl)
{
    GPU_FOR_EACH(i, (size_t)n * h * w * c) {
        size_t r = i / (size_t)c;
        int ci = (int)(i % (size_t)c), x = (int)(r % (size_t)w);
        r /= (size_t)w;
        int y = (int)(r % (size_t)h);
        size_t b = r / (size_t)h;
        int sy = y + pt, sx = x + pl;
        dst[i] = sy < hp && sx < wp ? to_f32(src[((b * hp + sy) * wp + sx) * c + ci]) : 0.0f;
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

/* out = act(y + bias) per channel; y may be out itself (fp32). */
template <typename T>
__global__ void bias_act_kernel(float *out, const T *y, const float *bias, size_t total, int k, int relu)
{
    GPU_FOR_EACH(i, total) {
        float v = to_f32(y[i]) + bias[i % (size_t)k];
        out[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
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
    struct gpu_buf x;                /* input, padded and/or 16-bit */
    struct gpu_buf w;                /* weights, KRSC, in the compute type */
    struct gpu_buf y;                /* 16-bit output (forward) or output gradient (backward) */
    struct gpu_buf dw;               /* filter gradient, KRSC, in the compute type */
    struct gpu_buf dx;               /* input gradient, padded and/or 16-bit */
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

template <typename T> static void pad_input(const struct dt_conv_plan *p, void *dst, const float *src, int n)
{
    const struct dt_conv_shape *s = &p->s;
    size_t total = (size_t)n * p->hp * p->wp * s->c;
    pad_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
        (T *)dst, src, n, s->h, s->w, s->c, p->hp, p->wp, s->pad, s->pad);
    DT_KERNEL_CHECK();
}

/* The input as cuDNN reads it: the caller's, or padded and/or converted. */
static const void *input_operand(struct dt_conv_plan *p, int n, const float *inp)
{
    const struct dt_conv_shape *s = &p->s;
    if (!p->padded && p->prec == DT_PREC_FP32) return inp;
    size_t total = (size_t)n * p->hp * p->wp * s->c;
    void *x = gpu_buf_reserve(&p->x, total * elem_size(p->prec));
    if (!p->padded) dt_gpu_to16(x, inp, total, p->prec, gpu.stream);
    else if (p->prec == DT_PREC_FP16) pad_input<__half>(p, x, inp, n);
    else if (p->prec == DT_PREC_BF16) pad_input<__nv_bfloat16>(p, x, inp, n);
    else pad_input<float>(p, x, inp, n);
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
    void *w = gpu_buf_reserve(&p->w, (size_t)r * s->k * elem_size(p->prec));
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

template <typename T> static void crop_input(const struct dt_conv_plan *p, float *dst, const void *src, int n)
{
    const struct dt_conv_shape *s = &p->s;
    size_t total = (size_t)n * s->h * s->w * s->c;
    crop_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
        dst, (const T *)src, n, s->h, s->w, s->c, p->hp, p->wp, s->pad, s->pad);
    DT_KERNEL_CHECK();
}

/* The input gradient cuDNN wrote (dx) into the caller's dinp. */
static void store_input_grad(const struct dt_conv_plan *p, float *dinp, const void *dx, int n)
{
    const struct dt_conv_shape *s = &p->s;
    if (dx == dinp) return;
    if (!p->padded) dt_gpu_from16(dinp, dx, (size_t)n * s->h * s->w * s->c, p->prec, gpu.stream);
    else if (p->prec == DT_PREC_FP16) crop_input<__half>(p, dinp, dx, n);
    else if (p->prec == DT_PREC_BF16) crop_input<__nv_bfloat16>(p, dinp, dx, n);
    else crop_input<float>(p, dinp, dx, n);
}

template <typename T> static void bias_act(const struct dt_conv_plan *p, float *out, const void *y,
                                           const float *bias, size_t total)
{
    bias_act_kernel<T><<<gpu_blocks(total, GPU_THREADS), GPU_THREADS, 0, gpu.stream>>>(
        out, (const T *)y, bias, total, p->s.k, p->relu);
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

static cudnnStatus_t forward(struct dt_conv_plan *p, int n, float *out, const float *inp, const float *weight,
                             const float *bias)
{
    const struct dt_conv_shape *s = &p->s;
    struct algos *a = lookup(p, n);
    size_t ny = (size_t)n * s->oh * s->ow * s->k;
    const void *x = input_operand(p, n, inp);
    const void *w = weight_operand(p, weight);
    void *y = p->prec == DT_PREC_FP32 ? (void *)out : gpu_buf_reserve(&p->y, ny * 2);
    cudnnStatus_t st = run(p, &a->fwd, [&](int algo, void *ws, size_t bytes) {
        return cudnnConvolutionForward(gpu.dnn, &one, p->xd, x, p->wd, w, p->cd, (cudnnConvolutionFwdAlgo_t)algo,
                                       ws, bytes, &zero, p->yd, y);
    });
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (p->prec == DT_PREC_FP16) bias_act<__half>(p, out, y, bias, ny);
    else if (p->prec == DT_PREC_BF16) bias_act<__nv_bfloat16>(p, out, y, bias, ny);
    else bias_act<float>(p, out, y, bias, ny);
    return CUDNN_STATUS_SUCCESS;
}

void gpu_conv_forward(dt_conv_plan *p, int n, float *out, const float *inp, const float *weight,
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
static cudnnStatus_t backward(struct dt_conv_plan *p, int n, float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp, const float *weight, const char **op)
{
    const struct dt_conv_shape *s = &p->s;
    struct algos *a = lookup(p, n);
    size_t ny = (size_t)n * s->oh * s->ow * s->k, nw = (size_t)s->kh * s->kw * s->c * s->k;
    size_t nx = (size_t)n * p->hp * p->wp * s->c;
    gpu_bias_grad(dbias, dout, n * s->oh * s->ow, s->k);
    const void *x = input_operand(p, n, inp);
    const void *dy = dout;
    if (p->prec != DT_PREC_FP32) {
        void *dy16 = gpu_buf_reserve(&p->y, ny * 2);
        dt_gpu_to16(dy16, dout, ny, p->prec, gpu.stream);
        dy = dy16;
    }
    void *dw = gpu_buf_reserve(&p->dw, nw * elem_size(p->prec));
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
    void *dx = !p->padded && p->prec == DT_PREC_FP32 ? (void *)dinp : gpu_buf_reserve(&p->dx, nx * elem_size(p->prec));
    st = run(p, &a->data, [&](int algo, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardData(gpu.dnn, &one, p->wd, w, p->yd, dy, p->cd,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws, bytes, &zero, p->xd, dx);
    });
    if (st != CUDNN_STATUS_SUCCESS) return st;
    store_input_grad(p, dinp, dx, n);
    return CUDNN_STATUS_SUCCESS;
}

void gpu_conv_backward(dt_conv_plan *p, int n, float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight)
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

/* ---- max pooling ------------------------------------------------------------ */

/* cuDNN's backward recomputes each window's maximum from the forward's
 * input and output, so the plan remembers those (the model's activation
 * buffers, untouched until this layer's backward). */
struct dt_pool_plan {
    struct dt_conv_shape s;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    int desc_n;
    const float *x, *y;  /* the last training forward's input and output */
    int n;               /* and its batch size */
    struct gpu_buf dy;   /* dout masked by relu_out */
};

static void pool_set_batch(struct dt_pool_plan *p, int n)
{
    const struct dt_conv_shape *s = &p->s;
    if (p->desc_n == n) return;
    DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, s->c, s->h, s->w));
    DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, s->c, s->oh, s->ow));
    p->desc_n = n;
}

/* 'valid' windows, no padding (the layer's pad is unused, as on the CPU). */
dt_pool_plan *gpu_pool_create(const struct dt_conv_shape *shape)
{
    dt_pool_plan *p = (dt_pool_plan *)xcalloc(sizeof *p);
    const struct dt_conv_shape *s = &p->s;
    p->s = *shape;
    DT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&p->pd));
    DT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pd, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
                                               s->kh, s->kw, 0, 0, s->stride, s->stride));
    DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->xd));
    DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->yd));
    pool_set_batch(p, 1);
    int on, oc, oh, ow;
    DT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pd, p->xd, &on, &oc, &oh, &ow));
    if (oh != s->oh || ow != s->ow)
        dt_die(__FILE__, __LINE__, "max pool %dx%dx%d, %dx%d window, stride %d: cuDNN gives %dx%d, the layer "
               "wants %dx%d", s->h, s->w, s->c, s->kh, s->kw, s->stride, oh, ow, s->oh, s->ow);
    return p;
}

void gpu_pool_destroy(dt_pool_plan *p)
{
    if (!p) return;
    gpu_buf_release(&p->dy);
    DT_CUDNN_CHECK(cudnnDestroyPoolingDescriptor(p->pd));
    DT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->xd));
    DT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->yd));
    free(p);
}

void gpu_pool_forward(dt_pool_plan *p, int n, float *out, const float *inp, int train)
{
    if (train) {
        p->x = inp;
        p->y = out;
        p->n = n;
    }
    if (n <= 0) return;
    pool_set_batch(p, n);
    DT_CUDNN_CHECK(cudnnPoolingForward(gpu.dnn, p->pd, &one, p->xd, inp, &zero, p->yd, out));
}

void gpu_pool_backward(dt_pool_plan *p, int n, float *dinp, const float *dout, const float *relu_out)
{
    const struct dt_conv_shape *s = &p->s;
    if (n <= 0) return;
    if (n != p->n || !p->x)
        dt_die(__FILE__, __LINE__, "max pool backward for %d samples, but the last training forward had %d",
               n, p->n);
    pool_set_batch(p, n);
    const float *dy = dout;
    if (relu_out) { /* the ReLU before the pool passes gradient only where its output > 0 */
        size_t ny = (size_t)n * s->oh * s->ow * s->c;
        float *masked = (float *)gpu_buf_reserve(&p->dy, sizeof(float) * ny);
        gpu_relu_backward(masked, dout, relu_out, ny);
        dy = masked;
    }
    /* Input pixels no window covers get zero gradient; clear them in case
     * cuDNN only writes what windows reach: edges past the last window, and
     * the gaps between windows when the stride exceeds the window. */
    if ((s->oh - 1) * s->stride + s->kh < s->h || (s->ow - 1) * s->stride + s->kw < s->w ||
        s->stride > s->kh || s->stride > s->kw)
        DT_CUDA_CHECK(cudaMemsetAsync(dinp, 0, sizeof(float) * (size_t)n * s->h * s->w * s->c, gpu.stream));
    DT_CUDNN_CHECK(cudnnPoolingBackward(gpu.dnn, p->pd, &one, p->yd, p->y, p->yd, dy, p->xd, p->x, &zero, p->xd,
                                       dinp));
}
