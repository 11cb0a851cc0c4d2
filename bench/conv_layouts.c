/* conv_layouts.c: oneDNN's convolutions on ResNet's 3x3 shapes, with the
 * activations in NHWC (dtrain's layout) against the layout oneDNN picks for
 * itself (format "any": blocked, nChw16c) and against Winograd, forward,
 * backward-data and backward-weights, float32 and bf16, on one thread.
 *
 *   bench/conv_layouts [--batch N] [--repeats R] [--types fp32,bf16]
 *
 * It is the measurement behind dtrain's choice of layout between layers
 * (doc/design.md, "Layouts"): a layout other than NHWC would pay only if its
 * kernels were faster by more than the reorders, or the per-channel kernels
 * rewritten for it, cost. One line per case, machine-readable:
 *   conv fwd fp32 nhwc c16 k16 hw32 ms=1.565 gflops=193 impl=brgconv:avx512_core
 *   conv fwd fp32 winograd c16 k16 hw32 unavailable
 * In fp32 two more kinds follow each case: dtrain's own AVX2 kernels
 * (dtrain-avx2: cpu_conv3x3_avx2.c; dtrain-wino: cpu_winograd_avx2.c's
 * F(2x2,3x3), every pass), timed where they run (CPUs with
 * AVX2 + FMA and without AVX-512, or with DTRAIN_NO_FAST_KERNELS=avx512),
 * else "unavailable".
 * ms is the median of R timed runs of 5 executions each, after 3 warm-up
 * executions; gflops counts the direct convolution's 2 n k h w c 9 (also
 * for Winograd, which does fewer). Exit 0; 2 for a bad command line. */
#include "config.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_internal.h"
#include "runtime/status.h"

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static void check(int rc, const char *what)
{
    if (rc != dnnl_success) {
        fprintf(stderr, "conv_layouts: %s failed: oneDNN status %d\n", what, rc);
        exit(1);
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { FWD, BWD_DATA, BWD_WEIGHTS };
static const char *const dir_name[] = {"fwd", "bwd_data", "bwd_weights"};

/* The primitive descriptor for one case, or NULL when oneDNN has none. */
static dnnl_primitive_desc_t make_pd(int n, int c, int k, int hw, int dir, dnnl_data_type_t dt, int alg,
                                     dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t src, dst, w, wd32, b;
    dnnl_dims_t sd = {n, c, hw, hw}, dd = {n, k, hw, hw}, wdims = {k, c, 3, 3}, bd = {k};
    dnnl_dims_t stride = {1, 1}, pad = {1, 1};
    check(dnnl_memory_desc_init_by_tag(&src, 4, sd, dt, tag), "src desc");
    check(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dt, tag), "dst desc");
    check(dnnl_memory_desc_init_by_tag(&w, 4, wdims, dt, dnnl_format_tag_any), "weights desc");
    check(dnnl_memory_desc_init_by_tag(&wd32, 4, wdims, dnnl_f32, dnnl_format_tag_any), "diff weights desc");
    check(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x), "bias desc");
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t fpd, pd = NULL;
    check(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &src, &w, &b, &dst, stride, pad, pad),
          "forward desc");
    if (dnnl_primitive_desc_create(&fpd, &cd, NULL, eng, NULL) != dnnl_success) return NULL;
    if (dir == FWD) return fpd;
    if (dir == BWD_DATA)
        check(dnnl_convolution_backward_data_desc_init(&cd, alg, &src, &w, &dst, stride, pad, pad), "bwd data desc");
    else
        check(dnnl_convolution_backward_weights_desc_init(&cd, alg, &src, &wd32, &b, &dst, stride, pad, pad),
              "bwd weights desc");
    if (dnnl_primitive_desc_create(&pd, &cd, NULL, eng, fpd) != dnnl_success) pd = NULL;
    dnnl_primitive_desc_destroy(fpd);
    return pd;
}

static dnnl_memory_t mem(dnnl_primitive_desc_t pd, dnnl_query_t q)
{
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, dnnl_primitive_desc_query_md(pd, q, 0), eng, DNNL_MEMORY_ALLOCATE), "memory");
    return m;
}

static void one_case(int n, int c, int k, int hw, int dir, int bf16, int layout, int repeats)
{
    static const char *const layout_name[] = {"nhwc", "blocked", "winograd"};
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    const int alg = layout == 2 ? dnnl_convolution_winograd : dnnl_convolution_direct;
    dnnl_primitive_desc_t pd = make_pd(n, c, k, hw, dir, dt, alg, layout == 0 ? dnnl_nhwc : dnnl_format_tag_any);
    printf("conv %s %s %s c%d k%d hw%d", dir_name[dir], bf16 ? "bf16" : "fp32", layout_name[layout], c, k, hw);
    if (!pd) {
        printf(" unavailable\n");
        return;
    }
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_exec_arg_t a[4];
    int na = 0;
    if (dir == FWD) {
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(pd, dnnl_query_src_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(pd, dnnl_query_weights_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(pd, dnnl_query_dst_md)};
    } else if (dir == BWD_DATA) {
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mem(pd, dnnl_query_diff_dst_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(pd, dnnl_query_weights_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, mem(pd, dnnl_query_diff_src_md)};
    } else {
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(pd, dnnl_query_src_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mem(pd, dnnl_query_diff_dst_md)};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, mem(pd, dnnl_query_diff_weights_md)};
    }
    if (dir != BWD_DATA) { /* the bias (forward) or its gradient */
        dnnl_memory_desc_t b;
        dnnl_dims_t bd = {k};
        check(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x), "bias desc");
        dnnl_memory_t m;
        check(dnnl_memory_create(&m, &b, eng, DNNL_MEMORY_ALLOCATE), "bias memory");
        a[na++] = (dnnl_exec_arg_t){dir == FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, m};
    }
    for (int i = 0; i < na; i++) { /* defined inputs: zeros would let a kernel skip work */
        void *p;
        const dnnl_memory_desc_t *md;
        dnnl_memory_get_data_handle(a[i].memory, &p);
        dnnl_memory_get_memory_desc(a[i].memory, &md);
        memset(p, 0x3c, dnnl_memory_desc_get_size(md)); /* ~0.0118 in f32 and bf16 alike */
    }
    dnnl_primitive_t prim;
    check(dnnl_primitive_create(&prim, pd), "primitive");
    for (int i = 0; i < 3; i++) check(dnnl_primitive_execute(prim, strm, na, a), "execute");
    dnnl_stream_wait(strm);
    double *t = malloc(sizeof(double) * (size_t)repeats);
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (int i = 0; i < 5; i++) check(dnnl_primitive_execute(prim, strm, na, a), "execute");
        dnnl_stream_wait(strm);
        t[r] = (now() - t0) / 5;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp);
    double ms = 1e3 * t[repeats / 2], flop = 2.0 * n * k * hw * hw * c * 9;
    printf(" ms=%.3f gflops=%.0f impl=%s\n", ms, flop / (ms * 1e-3) / 1e9, impl);
    fflush(stdout);
    free(t);
    dnnl_primitive_destroy(prim);
    for (int i = 0; i < na; i++) dnnl_memory_destroy(a[i].memory);
    dnnl_primitive_desc_destroy(pd);
}

/* dtrain's own AVX2 3x3 kernels (cpu_conv3x3_avx2.c; wino 2 or 4:
 * --winograd's F(2x2, 3x3) or F(4x4, 3x3) of cpu_winograd_avx2.c, every
 * pass, whichever --winograd would choose) on the same case, where they run (fp32 on a CPU with AVX2 + FMA and without AVX-512,
 * or any AVX2 CPU with DTRAIN_NO_FAST_KERNELS=avx512); inputs as above. */
static void one_case_dtrain(int n, int c, int k, int hw, int dir, int repeats, int wino)
{
    const struct dt_conv_shape s = {.h = hw, .w = hw, .c = c, .k = k, .kh = 3, .kw = 3, .stride = 1, .pad = 1,
                                    .oh = hw, .ow = hw};
    static const char *label[5] = {"dtrain-avx2", "", "dtrain-wino2", "", "dtrain-wino4"};
    static const char *impl[5] = {"dtrain:avx2", "", "dtrain_wino_2x3:avx2", "", "dtrain_wino_4x3:avx2"};
    printf("conv %s fp32 %s c%d k%d hw%d", dir_name[dir], label[wino], c, k, hw);
    if (!cpu_conv3x3_fits(&s)) {
        printf(" unavailable\n");
        return;
    }
    const size_t nx = (size_t)n * hw * hw * c, ny = (size_t)n * hw * hw * k, nw = (size_t)9 * c * k;
    float *x = dt_xmalloc(nx * sizeof(float)), *y = dt_xmalloc(ny * sizeof(float));
    float *w = dt_xmalloc(nw * sizeof(float)), *w2 = dt_xmalloc(nw * sizeof(float));
    float *b = dt_xmalloc((size_t)k * sizeof(float)), *u = dt_xmalloc(36 * (size_t)c * k * sizeof(float));
    memset(x, 0x3c, nx * sizeof(float));
    memset(y, 0x3c, ny * sizeof(float));
    memset(w, 0x3c, nw * sizeof(float));
    memset(b, 0x3c, (size_t)k * sizeof(float));
    double *t = malloc(sizeof(double) * (size_t)repeats);
    for (int r = -1; r < repeats; r++) { /* r == -1: warm-up */
        double t0 = now();
        for (int i = 0; i < (r < 0 ? 3 : 5); i++) {
            if (dir == FWD && wino) cpu_wino_avx2_forward(&s, wino, 0, n, y, x, w, b, u);
            else if (dir == FWD) cpu_conv3x3_forward(&s, 0, n, y, x, w, b);
            else if (dir == BWD_DATA && wino) {
                cpu_conv3x3_flip(&s, w, w2);
                cpu_wino_avx2_backward_data(&s, wino, 0, n, x, y, w2, u);
            } else if (dir == BWD_DATA) cpu_conv3x3_backward_data(&s, n, x, y, w, w2);
            else if (wino) cpu_wino_avx2_backward_weights(&s, wino, n, w2, b, y, x);
            else cpu_conv3x3_backward_weights(&s, n, w2, b, y, x);
        }
        if (r >= 0) t[r] = (now() - t0) / 5;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp);
    double ms = 1e3 * t[repeats / 2], flop = 2.0 * n * k * hw * hw * c * 9;
    printf(" ms=%.3f gflops=%.0f impl=%s\n", ms, flop / (ms * 1e-3) / 1e9, impl[wino]);
    fflush(stdout);
    free(t), free(x), free(y), free(w), free(w2), free(b), free(u);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: conv_layouts [--batch N] [--repeats R] [--types fp32,bf16]\n"
               "  Times oneDNN's 3x3 convolutions of ResNet-20's three stages (16, 32, 64\n"
               "  channels on 32x32, 16x16, 8x8) on one thread: NHWC, blocked, Winograd;\n"
               "  forward, backward-data, backward-weights. Defaults: batch 64, 7 repeats,\n"
               "  fp32,bf16.\n");
}

int main(int argc, char **argv)
{
    int batch = 64, repeats = 7, types = 3;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "conv_layouts: %s needs a value\n", argv[i]); usage(stderr); return 2; }
        if (!strcmp(argv[i], "--batch")) batch = atoi(v);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(v);
        else if (!strcmp(argv[i], "--types"))
            types = !strcmp(v, "fp32") ? 1 : !strcmp(v, "bf16") ? 2 : !strcmp(v, "fp32,bf16") ? 3 : 0;
        else { fprintf(stderr, "conv_layouts: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
        i++;
        if (batch < 1 || repeats < 1 || !types) {
            fprintf(stderr, "conv_layouts: %s: expected %s, found '%s'\n", argv[i - 1],
                    types ? "a positive number" : "fp32, bf16 or fp32,bf16", v);
            return 2;
        }
    }
    omp_set_num_threads(1);
    check(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags), "stream");
    printf("# oneDNN %d.%d.%d, batch %d, %d repeats, one thread\n", dnnl_version()->major, dnnl_version()->minor,
           dnnl_version()->patch, batch, repeats);
    static const int shapes[3][2] = {{16, 32}, {32, 16}, {64, 8}};
    for (int bf = 0; bf < 2; bf++) {
        if (!(types & (1 << bf))) continue;
        for (int s = 0; s < 3; s++)
            for (int dir = 0; dir < 3; dir++)
            {
                for (int layout = 0; layout < 3; layout++)
                    one_case(batch, shapes[s][0], shapes[s][0], shapes[s][1], dir, bf, layout, repeats);
                if (!bf)
                    for (int wino = 0; wino <= 4; wino += 2)
                        one_case_dtrain(batch, shapes[s][0], shapes[s][0], shapes[s][1], dir, repeats, wino);
            }
    }
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
