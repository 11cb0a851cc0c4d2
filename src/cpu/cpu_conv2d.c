/* cpu_conv2d.c: 2-D convolution on the CPU through oneDNN.
 *
 * Activations stay in dtrain's NHWC layout (no reorders between layers);
 * weights live in the flat parameter block as HWIO (Keras's layout), and are
 * reordered into whatever blocked layout oneDNN's kernel prefers at each
 * call: a few thousand floats against millions of multiply-adds. Primitives
 * depend on the batch size, so a plan keeps a small cache of them per size
 * (training uses the full batch and perhaps one remainder size).
 *
 * bf16 plans (cpu_precision == DT_PREC_BF16 at creation) give the primitives
 * bf16 src, weights and diff_dst, and float32 diff_weights and bias; the
 * weight reorder converts as it re-lays. Where activations are stored in
 * bf16 (cpu_act_bf16, the default under --precision bf16) the primitives
 * read and write them as they are: dst and diff_src are bf16 too, rounded
 * once from oneDNN's float32 accumulators. With --fp32-activations dst and
 * diff_src are float32, and src and diff_dst are rounded into plan-owned
 * bf16 copies at each call. */
#include "config.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "runtime/log.h"
#include "runtime/status.h"
#include "cpu/cpu_internal.h"

#define CONV_CACHE 6

/* A weights-shaped buffer in a primitive's preferred layout, and the
 * reorder that fills it from (or empties it into) the user's HWIO. */
struct wbuf {
    dnnl_memory_t mem;        /* in the primitive's layout */
    void *data;               /* owned, when the layout differs from HWIO */
    dnnl_primitive_t reorder; /* NULL when the layouts are the same */
};

struct entry {
    int n, used;
    dnnl_primitive_t fwd, bwd_data, bwd_w;
    /* src and diff_dst as the primitives read them: the caller's float32
     * (handles set per call), or in bf16 plans a bf16 copy in src_bf /
     * diff_dst_bf, which the entry owns. */
    dnnl_memory_t src, dst, bias, diff_src, diff_dst, diff_bias;
    uint16_t *src_bf, *diff_dst_bf; /* [n][h][w][c], [n][oh][ow][k]; NULL in f32 plans */
    dnnl_memory_t user_w, user_dw; /* HWIO, handles set per call */
    struct wbuf w_fwd, w_bwd, dw;
    /* Winograd entries: the activations re-laid into the kernels' blocked
     * layout and back, around each call (the user memories above stay NHWC);
     * in other entries these have no reorder and stand for the user's. */
    int wino, wddst_same; /* wddst_same: backward-weights reads backward-data's diff_dst layout */
    int own_dbias;        /* backward-weights made without the bias: cpu_bias_grad sums it */
    struct wbuf x_src, x_dst, x_dsrc, x_ddst, x_wsrc, x_wddst;
};

struct dt_conv_plan {
    struct dt_conv_shape s;
    int relu;
    int bf16;           /* bf16 src/weights/diff_dst, float32 accumulation */
    int act16;          /* activations stored in bf16 (cpu_act_bf16): read and written as they are */
    int direct;         /* cpu_conv_direct.c handles forward and backward-weights */
    int wino;           /* try oneDNN's Winograd kernels (cpu_winograd and the shape fits) */
    int avx2;           /* cpu_conv3x3_avx2.c handles forward and both backward passes */
    int wino2;          /* ... and cpu_winograd_avx2.c all three passes instead (--winograd) */
    int wm, wmd;        /* ... their output tiles (2 or 4): forward and backward-weights, backward-data */
    int wtd;            /* ... backward-data transposed, on the forward's tiles */
    float *U;           /* its filters' transform, [(m+2)^2][c][k] (or [..][k][c] for backward-data) */
    int verbose;        /* DTRAIN_KERNEL_VERBOSE: a line per call of those kernels */
    float *wflip;       /* its backward-data weights, [9][k][c] */
    int wg16;           /* cpu_wgrad_bf16.c handles backward-weights (bf16 activations, no AMX) */
    void *wg_scratch;   /* ... its re-laid operands, wg_bytes long */
    size_t wg_bytes;
    unsigned clock;
    struct entry cache[CONV_CACHE];
};

static void md_nhwc(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int n, int c, int h, int w)
{
    dnnl_dims_t d = {n, c, h, w};
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, 4, d, dt, dnnl_nhwc));
}

/* A memory for md over a buffer it owns (freed with it by the caller). */
static dnnl_memory_t mem_owned(const dnnl_memory_desc_t *md, uint16_t **data)
{
    dnnl_memory_t m;
    *data = dt_xmalloc(dnnl_memory_desc_get_size(md));
    DT_DNNL_CHECK(dnnl_memory_create(&m, md, cpu_dnnl_engine(), *data));
    return m;
}

/* Where --winograd takes oneDNN's Winograd kernels (F(4x4, 3x3), float32):
 * 3x3 windows at stride 1 with at least 32 channels in and out. Measured
 * (bench/conv_layouts, batch 64, one core): 1.3-2x faster than direct on
 * ResNet-20's 32- and 64-channel stages, the activations' reorders
 * included; slower on its 16-channel stage. */
static int wino_fits(const struct dt_conv_shape *s)
{
    return s->kh == 3 && s->kw == 3 && s->stride == 1 && s->c >= 32 && s->k >= 32;
}

/* Where --winograd takes dtrain's own (cpu_winograd_avx2.c) among the
 * shapes cpu_conv3x3_avx2.c takes: 16 channels and more in and out.
 * Measured (one core, batch 64, the three passes together): F(4x4) 1.46x
 * the direct kernels on ResNet-20's 16-channel stage, 2.4-2.6x on its 32-
 * and 64-channel ones, 1.95x on the seed CNN's 'valid' 13x13x32 -> 64;
 * 8 channels untried. */
static int wino2_fits(const struct dt_conv_shape *s)
{
    return s->c >= 16 && s->k >= 16;
}

/* A primitive descriptor, or for a bf16 plan a clear message: oneDNN
 * refuses bf16 where the CPU lacks it, and the user's fix is fp32. A
 * reference (unvectorized) implementation is legal but tens of times
 * slower, so it is named once in the log. */
static void pd_create(dnnl_primitive_desc_t *pd, const void *desc, const_dnnl_primitive_attr_t attr,
                      const_dnnl_primitive_desc_t hint, const struct dt_conv_plan *p, const char *what)
{
    const struct dt_conv_shape *s = &p->s;
    int rc = (int)dnnl_primitive_desc_create(pd, desc, attr, cpu_dnnl_engine(), hint);
    if (rc != 0 && p->bf16)
        DT_DIE("oneDNN %d.%d has no bf16 %s convolution for %dx%dx%d input, %d %dx%d filters, stride %d, "
               "pad %d on this CPU (status %d); run with --precision fp32", DNNL_VERSION_MAJOR,
               DNNL_VERSION_MINOR, what, s->h, s->w, s->c, s->k, s->kh, s->kw, s->stride, s->pad, rc);
    if (rc != 0)
        DT_DIE("oneDNN refused the float32 %s convolution for %dx%dx%d input, %d %dx%d filters (status %d)",
               what, s->h, s->w, s->c, s->k, s->kh, s->kw, rc);
    /* oneDNN's jit_1x1 backward-weights kernels, for a stride above 1, copy
     * the strided source into a workspace sized for whole blocks of input
     * channels ("reduce to unit stride") and, from an NHWC source with
     * fewer channels than a block (8 on AVX2, 16 on AVX-512), write past it:
     * a corrupted heap at one thread, wrong weight gradients or a hang at
     * more (oneDNN issue 6035). Such shapes take the next implementation
     * oneDNN offers (a GEMM-based one); any channel count not a multiple of
     * 16 counts, as only whole blocks are known good.
     * tests/check_layers.c's conv1x1_s2_* fail without this. */
    const char *impl = NULL;
    if (strcmp(what, "backward-weights") == 0 && s->kh == 1 && s->kw == 1 && s->stride > 1 && s->c % 16 != 0 &&
        dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
        strncmp(impl, "jit_1x1", 7) == 0) {
        dnnl_primitive_desc_iterator_t it;
        DT_DNNL_CHECK(dnnl_primitive_desc_iterator_create(&it, desc, attr, cpu_dnnl_engine(), hint));
        dnnl_primitive_desc_t alt = NULL;
        while (!alt && dnnl_primitive_desc_iterator_next(it) == dnnl_success) {
            alt = dnnl_primitive_desc_iterator_fetch(it);
            if (alt && dnnl_primitive_desc_query(alt, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
                impl && strncmp(impl, "jit_1x1", 7) == 0) {
                dnnl_primitive_desc_destroy(alt);
                alt = NULL;
            }
        }
        dnnl_primitive_desc_iterator_destroy(it);
        if (!alt)
            DT_DIE("oneDNN offers only 'jit_1x1' kernels for the 1x1 stride-%d backward-weights convolution of a "
                   "%dx%dx%d input, and they overrun their buffers unless the input channels are a multiple of "
                   "16 (oneDNN issue 6035): give the layer 16 input channels, or stride 1",
                   s->stride, s->h, s->w, s->c);
        dnnl_primitive_desc_destroy(*pd);
        *pd = alt;
    }
    static int warned;
    impl = NULL;
    if (p->bf16 && !warned && dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && strstr(impl, "ref")) {
        DT_LOG(DT_LOG_WARN, "oneDNN runs the bf16 %s convolution of a %dx%dx%d input with '%s', a reference "
               "implementation: expect it slower than --precision fp32", what, s->h, s->w, s->c, impl);
        warned = 1;
    }
}

static dnnl_memory_t mem_none(const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    DT_DNNL_CHECK(dnnl_memory_create(&m, md, cpu_dnnl_engine(), DNNL_MEMORY_NONE));
    return m;
}

/* Prepare a buffer in layout `want`; `to_want` says which way data flows. */
static void wbuf_init(struct wbuf *b, const dnnl_memory_desc_t *want, dnnl_memory_t user, int to_want)
{
    const dnnl_memory_desc_t *user_md;
    DT_DNNL_CHECK(dnnl_memory_get_memory_desc(user, &user_md));
    memset(b, 0, sizeof *b);
    if (dnnl_memory_desc_equal(want, user_md)) return; /* use the user's buffer directly */
    b->data = dt_xmalloc(dnnl_memory_desc_get_size(want));
    DT_DNNL_CHECK(dnnl_memory_create(&b->mem, want, cpu_dnnl_engine(), b->data));
    dnnl_primitive_desc_t rpd;
    dnnl_engine_t e = cpu_dnnl_engine();
    if (to_want)
        DT_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, user_md, e, want, e, NULL));
    else
        DT_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, want, e, user_md, e, NULL));
    DT_DNNL_CHECK(dnnl_primitive_create(&b->reorder, rpd));
    dnnl_primitive_desc_destroy(rpd);
}

static void wbuf_destroy(struct wbuf *b)
{
    if (b->reorder) dnnl_primitive_destroy(b->reorder);
    if (b->mem) dnnl_memory_destroy(b->mem);
    free(b->data);
    memset(b, 0, sizeof *b);
}

static void exec(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args)
{
    DT_DNNL_CHECK(dnnl_primitive_execute(p, cpu_dnnl_stream(), nargs, args));
}

static void reorder(dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    exec(r, 2, a);
}

/* The three Winograd primitive descriptors for an fp32 plan, activations
 * in whatever layout the kernels want; 0 when oneDNN has none for the
 * shape (the caller then builds the direct ones). */
static int wino_pds(const struct dt_conv_plan *p, int n, const_dnnl_primitive_attr_t attr, const dnnl_memory_desc_t *bias,
                    const dnnl_dims_t strides, const dnnl_dims_t pad, const dnnl_dims_t pad_r,
                    dnnl_primitive_desc_t *fpd, dnnl_primitive_desc_t *bdpd, dnnl_primitive_desc_t *bwpd)
{
    const struct dt_conv_shape *s = &p->s;
    dnnl_memory_desc_t src, dst, w;
    dnnl_dims_t sd = {n, s->c, s->h, s->w}, dd = {n, s->k, s->oh, s->ow}, wd = {s->k, s->c, s->kh, s->kw};
    dnnl_convolution_desc_t cd;
    dnnl_engine_t eng = cpu_dnnl_engine();
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_format_tag_any));
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_format_tag_any));
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any));
    *fpd = *bdpd = *bwpd = NULL;
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_winograd, &src, &w, bias,
                                           &dst, strides, pad, pad_r) != dnnl_success ||
        dnnl_primitive_desc_create(fpd, &cd, attr, eng, NULL) != dnnl_success)
        goto none;
    if (dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_winograd, &src, &w, &dst, strides, pad,
                                                 pad_r) != dnnl_success ||
        dnnl_primitive_desc_create(bdpd, &cd, NULL, eng, *fpd) != dnnl_success)
        goto none;
    if (dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_winograd, &src, &w, bias, &dst, strides,
                                                    pad, pad_r) != dnnl_success ||
        dnnl_primitive_desc_create(bwpd, &cd, NULL, eng, *fpd) != dnnl_success)
        goto none;
    return 1;
none:
    if (*fpd) dnnl_primitive_desc_destroy(*fpd);
    if (*bdpd) dnnl_primitive_desc_destroy(*bdpd);
    *fpd = *bdpd = *bwpd = NULL;
    return 0;
}

static void entry_build(struct dt_conv_plan *p, struct entry *e, int n)
{
    const struct dt_conv_shape *s = &p->s;
    /* lp: what the multiplies read (bf16 in a bf16 plan); outputs stay f32 */
    const dnnl_data_type_t lp = p->bf16 ? dnnl_bf16 : dnnl_f32;
    /* at: the stored activations (dst, diff_src); copies only where lp differs */
    const dnnl_data_type_t at = p->act16 ? dnnl_bf16 : dnnl_f32;
    const int copy = lp != at;
    dnnl_memory_desc_t src, dst, bias, w_any, w_user, src_lp, dst_lp, w_any_lp;
    dnnl_dims_t wd = {s->k, s->c, s->kh, s->kw}, bd = {s->k};
    dnnl_dims_t strides = {s->stride, s->stride}, pad = {s->pad, s->pad};
    /* Right padding makes the output size exact (Keras 'same' pads the
     * remainder on the bottom/right). */
    dnnl_dims_t pad_r = {(s->oh - 1) * s->stride + s->kh - s->h - s->pad,
                         (s->ow - 1) * s->stride + s->kw - s->w - s->pad};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t fpd, bdpd, bwpd;
    dnnl_primitive_attr_t attr;

    memset(e, 0, sizeof *e);
    e->n = n;
    md_nhwc(&src, at, n, s->c, s->h, s->w);
    md_nhwc(&dst, at, n, s->k, s->oh, s->ow);
    md_nhwc(&src_lp, lp, n, s->c, s->h, s->w);
    md_nhwc(&dst_lp, lp, n, s->k, s->oh, s->ow);
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x));
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_any_lp, 4, wd, lp, dnnl_format_tag_any));
    DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_hwio));

    DT_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    if (p->relu) {
        dnnl_post_ops_t po;
        DT_DNNL_CHECK(dnnl_post_ops_create(&po));
        DT_DNNL_CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        DT_DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    e->wino = p->wino && wino_pds(p, n, attr, &bias, strides, pad, pad_r, &fpd, &bdpd, &bwpd);
    if (!e->wino) {
        DT_DNNL_CHECK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                                         &src_lp, &w_any_lp, &bias, &dst, strides, pad, pad_r));
        pd_create(&fpd, &cd, attr, NULL, p, "forward");
        DT_DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &src, &w_any_lp,
                                                               &dst_lp, strides, pad, pad_r));
        pd_create(&bdpd, &cd, NULL, fpd, p, "backward-data");
        bwpd = NULL; /* none where cpu_wgrad_bf16.c's kernel runs that pass */
        if (!p->wg16) {
            /* float32: the bias gradient is ours. oneDNN 2.6 sums it over
             * NHWC in a 4-wide loop (1.5% of the seed CNN's step); the same
             * sums in the same order (each channel's from +0, sample by
             * sample, pixel by pixel), 16 channels at a time. */
            e->own_dbias = !p->bf16;
            DT_DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &src_lp, &w_any,
                                                                      e->own_dbias ? NULL : &bias, &dst_lp, strides,
                                                                      pad, pad_r));
            pd_create(&bwpd, &cd, NULL, fpd, p, "backward-weights");
        }
    }
    dnnl_primitive_attr_destroy(attr);

    DT_DNNL_CHECK(dnnl_primitive_create(&e->fwd, fpd));
    DT_DNNL_CHECK(dnnl_primitive_create(&e->bwd_data, bdpd));
    if (bwpd) DT_DNNL_CHECK(dnnl_primitive_create(&e->bwd_w, bwpd));

    /* The backward-weights kernel may want src/diff_dst in other layouts than
     * NHWC; we ask for NHWC in the descriptor, so they match. */
    e->src = copy ? mem_owned(&src_lp, &e->src_bf) : mem_none(&src_lp);
    e->dst = mem_none(&dst);
    e->bias = mem_none(&bias);
    e->diff_src = mem_none(&src);
    e->diff_dst = copy ? mem_owned(&dst_lp, &e->diff_dst_bf) : mem_none(&dst_lp);
    e->diff_bias = mem_none(&bias);
    e->user_w = mem_none(&w_user);
    e->user_dw = mem_none(&w_user);
    wbuf_init(&e->w_fwd, dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0), e->user_w, 1);
    wbuf_init(&e->w_bwd, dnnl_primitive_desc_query_md(bdpd, dnnl_query_weights_md, 0), e->user_w, 1);
    if (bwpd) wbuf_init(&e->dw, dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0), e->user_dw, 0);
    if (e->wino) {
        wbuf_init(&e->x_src, dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0), e->src, 1);
        wbuf_init(&e->x_dst, dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0), e->dst, 0);
        wbuf_init(&e->x_dsrc, dnnl_primitive_desc_query_md(bdpd, dnnl_query_diff_src_md, 0), e->diff_src, 0);
        wbuf_init(&e->x_ddst, dnnl_primitive_desc_query_md(bdpd, dnnl_query_diff_dst_md, 0), e->diff_dst, 1);
        wbuf_init(&e->x_wsrc, dnnl_primitive_desc_query_md(bwpd, dnnl_query_src_md, 0), e->src, 1);
        const dnnl_memory_desc_t *a = dnnl_primitive_desc_query_md(bdpd, dnnl_query_diff_dst_md, 0),
                                 *b = dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_dst_md, 0);
        e->wddst_same = dnnl_memory_desc_equal(a, b);
        if (!e->wddst_same) wbuf_init(&e->x_wddst, b, e->diff_dst, 1);
    }
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bdpd);
    if (bwpd) dnnl_primitive_desc_destroy(bwpd);
}

static void entry_destroy(struct entry *e)
{
    if (!e->n) return;
    dnnl_primitive_destroy(e->fwd);
    dnnl_primitive_destroy(e->bwd_data);
    if (e->bwd_w) dnnl_primitive_destroy(e->bwd_w);
    dnnl_memory_t *mems[] = {&e->src, &e->dst, &e->bias, &e->diff_src, &e->diff_dst,
                             &e->diff_bias, &e->user_w, &e->user_dw};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) dnnl_memory_destroy(*mems[i]);
    wbuf_destroy(&e->w_fwd);
    wbuf_destroy(&e->w_bwd);
    wbuf_destroy(&e->dw);
    struct wbuf *xs[] = {&e->x_src, &e->x_dst, &e->x_dsrc, &e->x_ddst, &e->x_wsrc, &e->x_wddst};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) wbuf_destroy(xs[i]);
    free(e->src_bf);
    free(e->diff_dst_bf);
    memset(e, 0, sizeof *e);
}

static struct entry *lookup(struct dt_conv_plan *p, int n)
{
    struct entry *victim = &p->cache[0];
    for (int i = 0; i < CONV_CACHE; i++) {
        struct entry *e = &p->cache[i];
        if (e->n == n) { e->used = (int)++p->clock; return e; }
        if (e->used < victim->used) victim = e;
    }
    entry_destroy(victim);
    entry_build(p, victim, n);
    victim->used = (int)++p->clock;
    return victim;
}

/* The direct one-channel kernel takes this convolution (unless
 * DTRAIN_NO_DIRECT_CONV); what backend.h's conv_pool needs too. */
int cpu_conv_pool_fits(const struct dt_conv_shape *s)
{
    return cpu_conv_direct_fits(s) && !getenv("DTRAIN_NO_DIRECT_CONV");
}

/* Under --winograd with dtrain's kernels: whether oneDNN's run here too,
 * for the shapes dtrain's do not take (cpu_set_winograd). */
static int onednn_wino_too;

dt_conv_plan *cpu_conv_create(const struct dt_conv_shape *shape, int relu)
{
    dt_conv_plan *p = dt_xcalloc(1, sizeof *p);
    p->s = *shape;
    p->relu = relu;
    p->bf16 = cpu_precision == DT_PREC_BF16;
    p->act16 = cpu_act_bf16;
    /* The direct one-channel kernel stays float32 in bf16 plans: it is the
     * first layer's small share of the work (8% of the seed CNN's FLOPs),
     * bound by its loads rather than its multiply-adds, and it already beats
     * oneDNN there; its backward-data (rarely needed) is a bf16 primitive. */
    p->direct = cpu_conv_pool_fits(shape);
    const int f32 = !p->bf16 && !p->act16 && !p->direct;
    /* dtrain's own Winograd kernels (also on an AVX-512 CPU: Zen 4); a
     * shape they do not take (channels not a multiple of 8, padding 2) to
     * oneDNN's where it has them, else to the direct kernels */
    p->wino2 = f32 && cpu_winograd == 2 && cpu_conv3x3_runs(shape) && wino2_fits(shape);
    p->wino = f32 && (cpu_winograd == 1 || (cpu_winograd == 2 && onednn_wino_too && !p->wino2)) && wino_fits(shape);
    p->avx2 = p->wino2 || (f32 && !p->wino && cpu_conv3x3_fits(shape));
    if (p->avx2) p->wflip = dt_xmalloc(sizeof(float) * 9 * (size_t)shape->c * (size_t)shape->k);
    if (p->wino2) {
        p->wm = cpu_wino_avx2_tile(shape->oh, shape->ow);
        p->wmd = cpu_wino_avx2_tile(shape->h, shape->w);
        p->wtd = cpu_wino_avx2_data_transposed(shape, p->wm, p->wmd);
        if (p->wtd) p->wmd = 4;
        const size_t a = (size_t)(p->wm > p->wmd ? p->wm : p->wmd) + 2; /* the larger tile's (m+2)^2 */
        p->U = dt_xmalloc(sizeof(float) * a * a * (size_t)shape->c * (size_t)shape->k);
    }
    /* bf16 backward-weights: dtrain's AVX512-BF16 kernel where oneDNN has
     * only its jit_bf16 one (no AMX), on bf16 activations as they lie */
    p->wg16 = p->bf16 && p->act16 && !p->direct && cpu_wgrad_bf16_fits(shape);
    p->verbose = (p->avx2 || p->direct || p->wg16) && cpu_kernel_verbose();
    return p;
}

/* Whether a 512-bit multiply-add runs as two 256-bit halves here: AMD
 * family 0x19 with AVX-512 (Zen 4). There dtrain's AVX2 Winograd kernels
 * have the AVX-512 peak, and beat oneDNN's (measured on the seed CNN's
 * second convolution: the three passes 3.9-4.5 ms a step against 5.8;
 * 1.41x the whole step; ResNet-20 1.17x). Intel's AVX-512 cores run 256-bit code at half their
 * peak, so oneDNN's kernels stay there (and on Zen 5, unmeasured). */
static int split_512(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__builtin_cpu_is("amd") || !__builtin_cpu_supports("avx512f") || !__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned base = (a >> 8) & 0xf, family = base + (base == 0xf ? (a >> 20) & 0xff : 0);
    return family == 0x19;
#else
    return 0;
#endif
}

/* Whose Winograd kernels: dtrain's own where its AVX2 3x3 kernels run
 * (CPUs without AVX-512, or DTRAIN_NO_FAST_KERNELS=avx512) or on Zen 4
 * (unless DTRAIN_NO_FAST_KERNELS=1), else oneDNN's;
 * DTRAIN_WINOGRAD_KERNELS=dtrain or onednn decides instead. 1 dtrain's,
 * 0 oneDNN's, -1 a bad value. */
static int own_winograd(const struct dt_conv_shape *probe)
{
    const char *e = getenv("DTRAIN_WINOGRAD_KERNELS");
    if (e && *e) return !strcmp(e, "dtrain") ? 1 : !strcmp(e, "onednn") ? 0 : -1;
    return cpu_conv3x3_fits(probe) || (cpu_conv3x3_runs(probe) && split_512());
}

/* Whether the chosen kernels run here: for oneDNN's, wino_pds asked for
 * one small convolution of the shape wino_fits takes (oneDNN 2.x has them
 * only for AVX-512 CPUs). */
int cpu_set_winograd(int on, char *why, size_t whylen)
{
    if (on) {
        const struct dt_conv_plan probe = {.s = {.h = 8, .w = 8, .c = 32, .k = 32, .kh = 3, .kw = 3, .stride = 1,
                                                 .pad = 1, .oh = 8, .ow = 8}};
        dnnl_memory_desc_t bias;
        dnnl_dims_t bd = {32}, st = {1, 1}, pad = {1, 1};
        dnnl_primitive_desc_t pd[3];
        DT_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x));
        const int own = own_winograd(&probe.s);
        const char *e = getenv("DTRAIN_WINOGRAD_KERNELS"), *off = getenv("DTRAIN_NO_FAST_KERNELS");
        if (own < 0) {
            snprintf(why, whylen, "DTRAIN_WINOGRAD_KERNELS: expected dtrain or onednn, found '%s'", e);
            return -1;
        }
        if (own && !cpu_conv3x3_runs(&probe.s)) { /* only where asked for by name */
            snprintf(why, whylen, "DTRAIN_WINOGRAD_KERNELS=dtrain: dtrain's Winograd kernels need AVX2 and FMA, "
                     "and DTRAIN_NO_FAST_KERNELS unset, 0 or avx512 (found %s%s%s)", off ? "'" : "",
                     off ? off : "unset", off ? "'" : "");
            return -1;
        }
        if (own && cpu_wino_avx2_forced_tile() < 0) {
            snprintf(why, whylen, "DTRAIN_WINO_TILE: expected 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3)), found '%s'",
                     getenv("DTRAIN_WINO_TILE"));
            return -1;
        }
        const int onednn = wino_pds(&probe, 1, NULL, &bias, st, pad, pad, &pd[0], &pd[1], &pd[2]);
        if (onednn)
            for (int i = 0; i < 3; i++) dnnl_primitive_desc_destroy(pd[i]);
        if (!own && !onednn) {
            snprintf(why, whylen, "oneDNN %d.%d has no Winograd convolution on this CPU (its Winograd kernels "
                     "need AVX-512), %s", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR,
                     e && *e ? "and DTRAIN_WINOGRAD_KERNELS=onednn asks for them"
                             : "nor does dtrain here (its own need AVX2 and FMA, and DTRAIN_NO_FAST_KERNELS not 1)");
            return -1;
        }
        onednn_wino_too = own && onednn;
        cpu_winograd = own ? 2 : 1;
        return 0;
    }
    cpu_winograd = 0;
    onednn_wino_too = 0;
    return 0;
}

void cpu_conv_destroy(dt_conv_plan *p)
{
    if (!p) return;
    for (int i = 0; i < CONV_CACHE; i++) entry_destroy(&p->cache[i]);
    free(p->wflip);
    free(p->U);
    free(p->wg_scratch);
    free(p);
}

static void set(dnnl_memory_t m, const void *ptr)
{
    DT_DNNL_CHECK(dnnl_memory_set_data_handle(m, (void *)(uintptr_t)ptr));
}

/* Give a primitive input x: its handle, or rounded into the bf16 copy
 * (bf16 arithmetic on float32 activations). */
static void load(dnnl_memory_t m, uint16_t *bf, const void *x, size_t count)
{
    if (bf) cpu_to_bf16(bf, x, count);
    else set(m, x);
}

/* DTRAIN_KERNEL_VERBOSE: one line per call of dtrain's own convolution
 * kernels (dtrain:avx2, dtrain_wino_2x3:avx2 and dtrain_wino_4x3:avx2 for
 * F(2x2, 3x3) and F(4x4, 3x3), dtrain:direct) in oneDNN's
 * verbose format (ONEDNN_VERBOSE=1), so that the tools that read oneDNN's
 * log (bench/lib.sh's kernel table) read these too. */
static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double cpu_conv_verbose_clock(void) { return seconds(); }

int cpu_kernel_verbose(void)
{
    const char *v = getenv("DTRAIN_KERNEL_VERBOSE");
    return v && *v && strcmp(v, "0");
}

void cpu_conv_verbose(const struct dt_conv_shape *s, const char *kernel, const char *alg, const char *dir, int n,
                      double t0)
{
    printf("dtrain_verbose,exec,cpu,convolution,%s,%s,src_f32::blocked:acdb:f0 dst_f32::blocked:acdb:f0,,"
           "alg:convolution_%s,mb%d_ic%doc%d_ih%doh%dkh%dsh%ddh0ph%d_iw%dow%dkw%dsw%ddw0pw%d,%g\n",
           kernel, dir, alg, n, s->c, s->k, s->h, s->oh, s->kh, s->stride, s->pad, s->w, s->ow, s->kw, s->stride,
           s->pad, 1e3 * (seconds() - t0));
    fflush(stdout);
}

/* s: the convolution computed (the plan's, or the part under a folded pool's windows) */
static void verbose_named(const struct dt_conv_plan *p, const struct dt_conv_shape *s, const char *kernel,
                          const char *dir, int n, double t0)
{
    cpu_conv_verbose(s, kernel, p->wino2 ? "winograd" : "direct", dir, n, t0);
}

static void verbose_line(const struct dt_conv_plan *p, const char *dir, int n, double t0)
{
    const int m = strcmp(dir, "backward_data") ? p->wm : p->wmd;
    verbose_named(p, &p->s,
                  p->direct ? "dtrain:direct" : !p->wino2 ? "dtrain:avx2" : m == 4 ? "dtrain_wino_4x3:avx2"
                                                                                 : "dtrain_wino_2x3:avx2",
                  dir, n, t0);
}

static size_t in_count(const struct dt_conv_plan *p, int n)
{
    return (size_t)n * p->s.h * p->s.w * p->s.c;
}

static size_t out_count(const struct dt_conv_plan *p, int n)
{
    return (size_t)n * p->s.oh * p->s.ow * p->s.k;
}

/* An activation into a Winograd kernel's layout (or the user's NHWC memory
 * where they agree, and in every direct entry), and a result out of it. */
static dnnl_memory_t into(struct wbuf *b, dnnl_memory_t user)
{
    if (!b->reorder) return user;
    reorder(b->reorder, user, b->mem);
    return b->mem;
}

static dnnl_memory_t outof(const struct wbuf *b, dnnl_memory_t user) { return b->reorder ? b->mem : user; }

static void back(struct wbuf *b, dnnl_memory_t user)
{
    if (b->reorder) reorder(b->reorder, b->mem, user);
}

/* The weights as a given primitive reads them: reordered, or the user's. */
static dnnl_memory_t weights_for(struct entry *e, struct wbuf *b)
{
    if (!b->reorder) return e->user_w;
    reorder(b->reorder, e->user_w, b->mem);
    return b->mem;
}

void cpu_conv_forward(dt_conv_plan *p, int n, void *out, const void *inp, const float *weight,
                      const float *bias)
{
    if (n == 0) return;
    if (p->direct) {
        const double t0 = p->verbose ? seconds() : 0.0;
        cpu_conv_direct_forward(&p->s, p->relu, n, out, inp, weight, bias, p->act16);
        if (p->verbose) verbose_line(p, "forward_training", n, t0);
        return;
    }
    if (p->avx2) {
        const double t0 = p->verbose ? seconds() : 0.0;
        if (p->wino2) cpu_wino_avx2_forward(&p->s, p->wm, p->relu, n, out, inp, weight, bias, p->U);
        else cpu_conv3x3_forward(&p->s, p->relu, n, out, inp, weight, bias);
        if (p->verbose) verbose_line(p, "forward_training", n, t0);
        return;
    }
    struct entry *e = lookup(p, n);
    load(e->src, e->src_bf, inp, in_count(p, n));
    set(e->dst, out);
    set(e->bias, bias);
    set(e->user_w, weight);
    dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, into(&e->x_src, e->src)}, {DNNL_ARG_WEIGHTS, weights_for(e, &e->w_fwd)},
                           {DNNL_ARG_BIAS, e->bias}, {DNNL_ARG_DST, outof(&e->x_dst, e->dst)}};
    exec(e->fwd, 4, a);
    back(&e->x_dst, e->dst);
    DT_DNNL_CHECK(dnnl_stream_wait(cpu_dnnl_stream()));
}


static void zero_grads(const struct dt_conv_shape *s, float *dweight, float *dbias)
{
    memset(dweight, 0, sizeof(float) * (size_t)s->kh * s->kw * s->c * s->k);
    memset(dbias, 0, sizeof(float) * (size_t)s->k);
}

/* The folded kernel's name in DTRAIN_KERNEL_VERBOSE's lines: its AVX-512
 * passes or the generic loops. */
static const char *pool_kernel_name(const struct dt_conv_shape *s)
{
    return cpu_conv_direct_pool_fast(s) ? "dtrain:direct_pool_avx512" : "dtrain:direct_pool";
}

/* The convolution the folded passes compute: the pixels under the pool's
 * windows, 2ph x 2pw (fewer than the plan's where the pool drops a row or
 * column, or computes fewer windows: nn/crop.c). A pixel left out only
 * ever added zero products to the weight gradients. */
static struct dt_conv_shape pooled(const dt_conv_plan *p, const dt_pool_plan *pool)
{
    struct dt_conv_shape s = p->s;
    s.oh = 2 * cpu_pool_shape(pool)->oh;
    s.ow = 2 * cpu_pool_shape(pool)->ow;
    return s;
}

/* backend.h's conv_pool: on a plan that runs the direct kernel, with the
 * pool folded in. */
void cpu_conv_pool_forward(dt_conv_plan *p, dt_pool_plan *pool, int n, void *out, const void *inp,
                           const float *weight, const float *bias, int train)
{
    if (n == 0) return;
    if (!p->direct || !p->relu) DT_DIE("conv_pool on a plan without the direct kernel and its ReLU");
    const double t0 = p->verbose ? seconds() : 0.0;
    const struct dt_conv_shape s = pooled(p, pool);
    cpu_conv_direct_pool_forward(&s, n, out, train ? cpu_pool_places(pool, n) : NULL, inp, weight, bias, p->act16);
    if (p->verbose) verbose_named(p, &s, pool_kernel_name(&p->s), "forward_training", n, t0);
}

void cpu_conv_pool_backward(dt_conv_plan *p, dt_pool_plan *pool, int n, float *dweight, float *dbias,
                            const void *dout, const void *out, const void *inp)
{
    const struct dt_conv_shape *s = &p->s;
    if (n == 0) {
        zero_grads(s, dweight, dbias);
        return;
    }
    const double t0 = p->verbose ? seconds() : 0.0;
    const struct dt_conv_shape ps = pooled(p, pool);
    cpu_conv_direct_pool_backward_weights(&ps, n, dweight, dbias, dout, out, cpu_pool_places(pool, n), inp,
                                          p->act16);
    if (p->verbose) verbose_named(p, &ps, pool_kernel_name(&p->s), "backward_weights", n, t0);
}

void cpu_conv_backward(dt_conv_plan *p, int n, void *dinp, float *dweight, float *dbias,
                       const void *dout, const void *inp, const float *weight)
{
    const struct dt_conv_shape *s = &p->s;
    if (n == 0) { /* no samples, no gradient */
        zero_grads(s, dweight, dbias);
        return;
    }
    if (p->avx2) {
        double t0 = p->verbose ? seconds() : 0.0;
        if (p->wino2) cpu_wino_avx2_backward_weights(s, p->wm, n, dweight, dbias, dout, inp);
        else cpu_conv3x3_backward_weights(s, n, dweight, dbias, dout, inp);
        if (p->verbose) verbose_line(p, "backward_weights", n, t0), t0 = seconds();
        if (dinp && p->wino2) {
            cpu_conv3x3_flip(s, weight, p->wflip);
            cpu_wino_avx2_backward_data(s, p->wmd, p->wtd, n, dinp, dout, p->wflip, p->U);
        } else if (dinp) {
            cpu_conv3x3_backward_data(s, n, dinp, dout, weight, p->wflip);
        }
        if (dinp && p->verbose) verbose_line(p, "backward_data", n, t0);
        return;
    }
    if (p->direct) {
        const double t0 = p->verbose ? seconds() : 0.0;
        cpu_conv_direct_backward_weights(s, n, dweight, dbias, dout, inp, p->act16);
        if (p->verbose) verbose_line(p, "backward_weights", n, t0);
        if (!dinp) return;
    }
    struct entry *e = lookup(p, n);
    load(e->diff_dst, e->diff_dst_bf, dout, out_count(p, n)); /* once, for both primitives */
    set(e->diff_bias, dbias);
    set(e->user_dw, dweight);
    /* Winograd: diff_dst re-laid once where both kernels want one layout. */
    dnnl_memory_t ddst = into(&e->x_ddst, e->diff_dst);
    if (p->wg16) {
        const double t0 = p->verbose ? seconds() : 0.0;
        const int nt = omp_get_max_threads();
        const size_t need = cpu_wgrad_bf16_scratch(s, n, nt);
        if (need > p->wg_bytes) {
            free(p->wg_scratch);
            p->wg_scratch = dt_xmalloc(need);
            p->wg_bytes = need;
        }
        cpu_wgrad_bf16(s, n, dweight, dbias, dout, inp, p->wg_scratch, nt);
        if (p->verbose) verbose_named(p, &p->s, "dtrain_bf16:avx512_core_bf16", "backward_weights", n, t0);
    } else if (!p->direct) {
        load(e->src, e->src_bf, inp, in_count(p, n));
        dnnl_memory_t dw = e->dw.reorder ? e->dw.mem : e->user_dw;
        /* src re-laid again, not kept from forward: pipeline stages run
         * several forwards before their backwards. */
        dnnl_memory_t wsrc = into(&e->x_wsrc, e->src);
        dnnl_memory_t wddst = e->wddst_same ? ddst : into(&e->x_wddst, e->diff_dst);
        dnnl_exec_arg_t aw[] = {{DNNL_ARG_SRC, wsrc}, {DNNL_ARG_DIFF_DST, wddst},
                                {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, e->diff_bias}};
        exec(e->bwd_w, e->own_dbias ? 3 : 4, aw);
        if (e->own_dbias) cpu_bias_grad(dbias, dout, n * s->oh * s->ow, s->k, 0);
        if (e->dw.reorder) reorder(e->dw.reorder, e->dw.mem, e->user_dw);
    }
    if (dinp) {
        set(e->user_w, weight);
        set(e->diff_src, dinp);
        dnnl_exec_arg_t ad[] = {{DNNL_ARG_DIFF_DST, ddst},
                                {DNNL_ARG_WEIGHTS, weights_for(e, &e->w_bwd)},
                                {DNNL_ARG_DIFF_SRC, outof(&e->x_dsrc, e->diff_src)}};
        exec(e->bwd_data, 3, ad);
        back(&e->x_dsrc, e->diff_src);
    }
    DT_DNNL_CHECK(dnnl_stream_wait(cpu_dnnl_stream()));
}
