/* act16_ref.c: the CPU backend with 16-bit activation storage (see
 * act16_ref.h). Each op decodes its activation inputs into scratch slots,
 * calls the CPU op on floats, and encodes what it wrote. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "act16_ref.h"
#include "runtime/half.h"

static int act = DT_PREC_FP32;
static const struct dt_backend *const cpu = &dt_backend_cpu;

enum { SLOTS = 4 };
static float *slot[SLOTS];
static size_t slot_cap[SLOTS];

static float *scratch(int i, size_t n)
{
    if (n > slot_cap[i]) {
        free(slot[i]);
        slot[i] = malloc(sizeof(float) * n);
        if (!slot[i]) abort();
        slot_cap[i] = n;
    }
    return slot[i];
}

/* An input: the float32 buffer itself, or its values decoded into slot i. */
static const float *in(int i, const dt_act *p, size_t n)
{
    if (act == DT_PREC_FP32 || !p) return p;
    float *s = scratch(i, n ? n : 1);
    dt_act_decode(act, s, p, n);
    return s;
}

/* An output: where the CPU op writes (the buffer itself at fp32), and the
 * store of it into the 16-bit buffer afterwards. */
static float *out(int i, dt_act *p, size_t n)
{
    if (act == DT_PREC_FP32 || !p) return p;
    return scratch(i, n ? n : 1);
}

static void store(dt_act *p, const float *s, size_t n)
{
    if (act != DT_PREC_FP32 && p) dt_act_encode(act, p, s, n);
}

static int ref_setup(int nthreads, int precision, char *why, size_t whylen)
{
    act = DT_PREC_FP32;
    return cpu->setup(nthreads, precision == DT_PREC_FP16 ? DT_PREC_FP32 : precision, why, whylen);
}

static int ref_set_act_type(int type) { return act = type; }
static int ref_act_type(void) { return act; }

/* A plan of the CPU's, with the shape the wrapper needs for sizes. */
struct ref_plan {
    struct dt_conv_shape s;
    void *base; /* dt_conv_plan * or dt_pool_plan * of the CPU */
};

static dt_conv_plan *conv_create(const struct dt_conv_shape *s, int relu)
{
    struct ref_plan *p = calloc(1, sizeof *p);
    if (!p) abort();
    p->s = *s;
    p->base = cpu->conv_create(s, relu);
    return (dt_conv_plan *)p;
}

static void conv_destroy(dt_conv_plan *plan)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    cpu->conv_destroy(p->base);
    free(p);
}

static size_t in_size(const struct dt_conv_shape *s, int n) { return (size_t)n * s->h * s->w * s->c; }
static size_t out_size(const struct dt_conv_shape *s, int n, int ch) { return (size_t)n * s->oh * s->ow * ch; }

static void conv_forward(dt_conv_plan *plan, int n, dt_act *o, const dt_act *x, const float *w, const float *b)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    size_t no = out_size(&p->s, n, p->s.k);
    float *y = out(0, o, no);
    cpu->conv_forward(p->base, n, y, in(1, x, in_size(&p->s, n)), w, b);
    store(o, y, no);
}

static void conv_backward(dt_conv_plan *plan, int n, dt_act *dx, float *dw, float *db, const dt_act *dy,
                          const dt_act *x, const float *w)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    size_t ni = in_size(&p->s, n);
    float *g = out(0, dx, ni);
    cpu->conv_backward(p->base, n, g, dw, db, in(1, dy, out_size(&p->s, n, p->s.k)), in(2, x, ni), w);
    store(dx, g, ni);
}

static dt_pool_plan *pool_create(const struct dt_conv_shape *s)
{
    struct ref_plan *p = calloc(1, sizeof *p);
    if (!p) abort();
    p->s = *s;
    p->base = cpu->pool_create(s);
    return (dt_pool_plan *)p;
}

static void pool_destroy(dt_pool_plan *plan)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    cpu->pool_destroy(p->base);
    free(p);
}

static void pool_forward(dt_pool_plan *plan, int n, dt_act *o, const dt_act *x, int train)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    size_t no = out_size(&p->s, n, p->s.c);
    float *y = out(0, o, no);
    cpu->pool_forward(p->base, n, y, in(1, x, in_size(&p->s, n)), train);
    store(o, y, no);
}

static void pool_backward(dt_pool_plan *plan, int n, dt_act *dx, const dt_act *dy, const dt_act *relu_out)
{
    struct ref_plan *p = (struct ref_plan *)plan;
    size_t ni = in_size(&p->s, n), no = out_size(&p->s, n, p->s.c);
    float *g = out(0, dx, ni);
    cpu->pool_backward(p->base, n, g, in(1, dy, no), in(2, relu_out, no));
    store(dx, g, ni);
}

static void dense_forward(int n, int nin, int units, dt_act *o, const dt_act *x, const float *w, const float *b)
{
    size_t no = (size_t)n * units;
    float *y = out(0, o, no);
    cpu->dense_forward(n, nin, units, y, in(1, x, (size_t)n * nin), w, b);
    store(o, y, no);
}

static void dense_backward(int n, int nin, int units, dt_act *dx, float *dw, float *db, const dt_act *dy,
                           const dt_act *x, const float *w)
{
    size_t ni = (size_t)n * nin;
    float *g = out(0, dx, ni);
    cpu->dense_backward(n, nin, units, g, dw, db, in(1, dy, (size_t)n * units), in(2, x, ni), w);
    store(dx, g, ni);
}

static void relu_forward(dt_act *o, const dt_act *x, size_t n)
{
    float *y = out(0, o, n);
    cpu->relu_forward(y, in(1, x, n), n);
    store(o, y, n);
}

static void relu_backward(dt_act *dx, const dt_act *dy, const dt_act *y, size_t n)
{
    float *g = out(0, dx, n);
    cpu->relu_backward(g, in(1, dy, n), in(2, y, n), n);
    store(dx, g, n);
}

static void dropout_forward(dt_act *o, float *mask, const dt_act *x, size_t n, float rate, dt_rng *rng)
{
    float *y = out(0, o, n);
    cpu->dropout_forward(y, mask, in(1, x, n), n, rate, rng);
    store(o, y, n);
}

static void dropout_backward(dt_act *dx, const dt_act *dy, const float *mask, size_t n)
{
    float *g = out(0, dx, n);
    cpu->dropout_backward(g, in(1, dy, n), mask, n);
    store(dx, g, n);
}

static double softmax_xent(dt_act *dlogits, long *ncorrect, const dt_act *logits, const uint8_t *labels, int n,
                           int classes, float grad_scale)
{
    size_t nl = (size_t)n * classes;
    float *g = out(0, dlogits, nl);
    double loss = cpu->softmax_xent(g, ncorrect, in(1, logits, nl), labels, n, classes, grad_scale);
    store(dlogits, g, nl);
    return loss;
}

static void images_to_float(dt_act *dst, const uint8_t *src, size_t n)
{
    float *y = out(0, dst, n);
    cpu->images_to_float(y, src, n);
    store(dst, y, n);
}

static void act_add(dt_act *dst, const dt_act *src, size_t n)
{
    float *y = out(0, dst, n);
    if (y != dst) memcpy(y, in(1, dst, n), sizeof(float) * n);
    cpu->act_add(y, in(2, src, n), n);
    store(dst, y, n);
}

static void channel_sums(double *s1, double *s2, const dt_act *a, const dt_act *b, size_t rows, int c)
{
    size_t n = rows * (size_t)c;
    cpu->channel_sums(s1, s2, in(1, a, n), in(2, b, n), rows, c);
}

static void channel_sums_relu(double *s1, double *s2, dt_act *a, const dt_act *b, const dt_act *relu_out,
                              size_t rows, int c)
{
    size_t n = rows * (size_t)c;
    float *y = out(0, a, n);
    if (y != a) memcpy(y, in(1, a, n), sizeof(float) * n);
    cpu->channel_sums_relu(s1, s2, y, in(2, b, n), in(3, relu_out, n), rows, c);
    store(a, y, n);
}

static void channel_affine(dt_act *o, const dt_act *a, const dt_act *b, size_t rows, int c, const float *p,
                           const float *q, const float *r, int relu)
{
    size_t n = rows * (size_t)c;
    float *y = out(0, o, n);
    cpu->channel_affine(y, in(1, a, n), in(2, b, n), rows, c, p, q, r, relu);
    store(o, y, n);
}

static void avgpool_forward(const struct dt_conv_shape *s, int n, dt_act *o, const dt_act *x)
{
    size_t no = out_size(s, n, s->c);
    float *y = out(0, o, no);
    cpu->avgpool_forward(s, n, y, in(1, x, in_size(s, n)));
    store(o, y, no);
}

static void avgpool_backward(const struct dt_conv_shape *s, int n, dt_act *dx, const dt_act *dy)
{
    size_t ni = in_size(s, n);
    float *g = out(0, dx, ni);
    cpu->avgpool_backward(s, n, g, in(1, dy, out_size(s, n, s->c)));
    store(dx, g, ni);
}

const struct dt_backend *dt_act16_ref(void)
{
    static struct dt_backend be;
    if (!be.name) {
        be = dt_backend_cpu; /* memory, GEMM, optimizers and the rest: the CPU's own */
        be.name = "act16-ref";
        be.setup = ref_setup;
        be.set_act_type = ref_set_act_type;
        be.act_type = ref_act_type;
        be.conv_create = conv_create;
        be.conv_destroy = conv_destroy;
        be.conv_forward = conv_forward;
        be.conv_backward = conv_backward;
        be.pool_create = pool_create;
        be.pool_destroy = pool_destroy;
        be.pool_forward = pool_forward;
        be.pool_backward = pool_backward;
        /* no conv-pool folds: they would run the CPU's kernels on this
         * backend's buffers and pool plans, past the conversions above */
        be.conv_pool_fits = NULL;
        be.conv_pool_forward = NULL;
        be.conv_pool_backward = NULL;
        be.conv_poolgrad_fits = NULL;
        be.conv_poolgrad_backward = NULL;
        be.dense_forward = dense_forward;
        be.dense_backward = dense_backward;
        be.relu_forward = relu_forward;
        be.relu_backward = relu_backward;
        be.dropout_forward = dropout_forward;
        be.dropout_backward = dropout_backward;
        be.softmax_xent = softmax_xent;
        be.images_to_float = images_to_float;
        be.act_add = act_add;
        be.channel_sums = channel_sums;
        be.channel_sums_relu = channel_sums_relu;
        be.channel_affine = channel_affine;
        be.avgpool_forward = avgpool_forward;
        be.avgpool_backward = avgpool_backward;
    }
    return &be;
}
