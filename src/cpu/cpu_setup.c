/* cpu_setup.c: the CPU backend's process-wide state: setup() (threads,
 * floating-point mode, precision) and the one oneDNN engine and stream that
 * the convolutions (cpu_conv2d.c) and the bf16 GEMM (cpu_kernels.c) run on.
 *
 * The one design decision: this state lives apart from the kernels that
 * read it, so the kernel files depend on it and never on each other's
 * internals. */
#include "config.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "cpu/cpu_internal.h"
#include "runtime/status.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int);
#endif

int cpu_precision = DT_PREC_FP32;
int cpu_act_bf16;
int cpu_winograd;

int cpu_fast_kernels(void)
{
    const char *off = getenv("DTRAIN_NO_FAST_KERNELS");
    if (!off || !*off || !strcmp(off, "0")) return CPU_FAST_ALL;
    return strcmp(off, "avx512") ? CPU_FAST_NONE : CPU_FAST_NO512;
}

int cpu_avx512_bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

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
    cpu_act_bf16 = 0; /* float32 until set_act_type asks for bf16 */
    return 0;
}

/* One engine and stream for the process: oneDNN engines are expensive and
 * carry no per-model state. */
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void ensure_engine(void)
{
    if (engine) return;
    DT_DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    DT_DNNL_CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
}

dnnl_engine_t cpu_dnnl_engine(void)
{
    ensure_engine();
    return engine;
}

dnnl_stream_t cpu_dnnl_stream(void)
{
    ensure_engine();
    return stream;
}
