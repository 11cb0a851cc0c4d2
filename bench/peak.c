/* peak.c: one core's arithmetic peak, the yardstick for "what fraction of
 * the machine does a training step use" (bench/README-resnet.md).
 *
 *   bench/peak [--seconds S] [--repeats R]
 *
 * Three units, each a loop of one instruction on independent accumulators
 * (enough of them to cover the instruction's latency on both FMA ports):
 *   fp32_fma  vfmadd231ps zmm, 16 accumulators: 16 lanes x 2 = 32 FLOP each;
 *             on a CPU without AVX-512 but with AVX2 and FMA (AMD Zen 1-3,
 *             Intel Haswell to Alder Lake) the same on ymm, 12 accumulators,
 *             16 FLOP each (insn=vfmadd231ps_ymm): the fp32 peak there;
 *   bf16_dot  vdpbf16ps zmm (AVX512-BF16), 16 accumulators: 16 fp32 lanes,
 *             each adding two bf16 products, = 64 FLOP each;
 *   amx_bf16  tdpbf16ps on 16x16 fp32 tiles (AMX), 4 accumulator tiles fed by
 *             2 A and 2 B tiles: 16 x 16 x 32 x 2 = 16384 FLOP each;
 * pinned to the CPU the program starts on. Each unit is calibrated to about
 * S seconds a repeat (default 0.25), warmed up once (which also settles the
 * core's AVX-512 clock), then timed R times (default 7); it prints one line
 * per unit, machine-readable:
 *   peak fp32_fma gflops=243.1 min=242.0 max=243.5 repeats=7 insn=vfmadd231ps flop_per_insn=32
 *   peak amx_bf16 unavailable: CPUID reports no AMX-TILE / AMX-BF16
 * with '#' lines of metadata first. A unit the CPU or the kernel does not
 * offer is reported unavailable with the reason (CPUID, XCR0, or, for AMX,
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused); that is not an error.
 * Exit 0; 1 when a loop's result is not finite and positive (the loop did
 * not run as written); 2 for a bad command line.
 *
 * The design decision a reader must know: the loops are inline assembly
 * naming the instruction, not intrinsics, so the figure does not depend on
 * the compiler or the -O level, and each kernel function carries a target
 * attribute, so the file builds with the project's flags (no -mavx512f) and
 * a kernel runs only after CPUID and XCR0 say its unit exists. */
#include "config.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity, sched_getcpu, syscall */
#endif

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if !defined(__x86_64__) || !defined(__GNUC__)
/* The units measured here are x86-64's; elsewhere (an aarch64 login node)
 * the program builds, says so and exits 0. */
int main(void)
{
    puts("# peak: measures x86-64 units (AVX-512 FMA, AVX512-BF16, AMX); this CPU is not x86-64");
    return 0;
}
#else
#include <cpuid.h>

#include "cpu/cpu_amx.h" /* the AMX probe and tile configuration, as dtrain's attention uses them */

#define MAX_REPEATS 1001

struct unit {
    const char *name;
    const char *insn;
    double flop_per_iter; /* FLOP of one pass of the loop body */
    int flop_per_insn;
    const char *(*why_not)(void); /* NULL when the unit can run, else why not */
    float (*loop)(uint64_t iters); /* returns one accumulator's value */
};

/* ---- What the CPU and the kernel offer ------------------------------------ */

/* CPUID leaf 7 subleaf SUB, register REG (0 eax, 1 ebx, 2 ecx, 3 edx). */
static uint32_t leaf7(unsigned sub, int reg)
{
    unsigned r[4] = {0, 0, 0, 0};
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, sub, &r[0], &r[1], &r[2], &r[3]))
        return 0;
    return r[reg];
}

static const char *avx512_why_not(void)
{
    unsigned a, b, c, d;
    if (!(leaf7(0, 1) & (1u << 16)))
        return "CPUID reports no AVX512F";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return "CPUID reports no OSXSAVE";
    /* SSE, AVX, opmask, ZMM0-15 upper halves, ZMM16-31. */
    if ((dt_xcr0() & 0xe6) != 0xe6)
        return "the kernel has not enabled the AVX-512 state in XCR0";
    return NULL;
}

/* AVX2 + FMA with the YMM state enabled (the fp32_fma unit's fallback). */
static const char *avx2_why_not(void)
{
    unsigned a, b, c, d;
    if (!(leaf7(0, 1) & (1u << 5)))
        return "CPUID reports neither AVX512F nor AVX2";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 12)))
        return "CPUID reports neither AVX512F nor FMA";
    if (!(c & (1u << 27)))
        return "CPUID reports no OSXSAVE";
    if ((dt_xcr0() & 0x6) != 0x6)
        return "the kernel has not enabled the AVX state in XCR0";
    return NULL;
}

static const char *bf16_why_not(void)
{
    const char *why = avx512_why_not();
    if (why)
        return why;
    if (!(leaf7(1, 0) & (1u << 5)))
        return "CPUID reports no AVX512-BF16";
    return NULL;
}

/* ---- The loops --------------------------------------------------------------- */

#define ACC16 "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"
#define ACC1_15 "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"
#define ZMM_CLOBBERS                                                                                        \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
        "xmm13", "xmm14", "xmm15", "xmm30", "xmm31"
/* One AVX-512 unit's loop: zmm30 and zmm31 hold VALUE (of type T) in every
 * 32-bit lane, zmm0-15 are zeroed, the loop body is INSN applied to each of
 * them (AT&T order: sources, then the accumulator zmm\\r), and after the
 * loop their sum goes to out; the function returns its lane 0. */
#define ZMM_LOOP(NAME, TARGET, BROADCAST, INSN, T, VALUE)                                                 \
    __attribute__((target(TARGET), noinline)) static float NAME(uint64_t iters)                          \
    {                                                                                                     \
        static const T h = VALUE;                                                                         \
        float out[16];                                                                                    \
        __asm__ volatile(BROADCAST " %[h], %%zmm30\n\t" BROADCAST " %[h], %%zmm31\n\t"                   \
                         ".irp r," ACC16 "\n\tvpxord %%zmm\\r, %%zmm\\r, %%zmm\\r\n\t.endr\n\t"             \
                         "1:\n\t.irp r," ACC16 "\n\t" INSN "\n\t.endr\n\t"                                 \
                         "dec %[n]\n\tjnz 1b\n\t"                                                          \
                         ".irp r," ACC1_15 "\n\tvaddps %%zmm\\r, %%zmm0, %%zmm0\n\t.endr\n\t"              \
                         "vmovups %%zmm0, %[out]\n\tvzeroupper"                                            \
                         : [n] "+r"(iters), [out] "=m"(out)                                               \
                         : [h] "m"(h)                                                                     \
                         : ZMM_CLOBBERS, "cc");                                                           \
        return out[0];                                                                                    \
    }

/* acc[i] += x * y, 16 independent accumulators; x = y = 0.5 (no denormals;
 * the sums stop growing at 2^24 x 0.25 and stay finite). */
ZMM_LOOP(fp32_fma_loop, "avx512f", "vbroadcastss", "vfmadd231ps %%zmm30, %%zmm31, %%zmm\\r", float, 0.5f)

/* The fp32_fma unit on ymm: ymm14 and ymm15 hold 0.5, ymm0-11 accumulate
 * (Zen 3 and Haswell: 2 FMA ports x 4-5 cycles of latency, so 12 chains
 * keep both busy). */
__attribute__((target("avx2,fma"), noinline)) static float fp32_fma_ymm_loop(uint64_t iters)
{
    static const float h = 0.5f;
    float out[8];
    __asm__ volatile("vbroadcastss %[h], %%ymm14\n\tvbroadcastss %[h], %%ymm15\n\t"
                     ".irp r,0,1,2,3,4,5,6,7,8,9,10,11\n\tvpxor %%ymm\\r, %%ymm\\r, %%ymm\\r\n\t.endr\n\t"
                     "1:\n\t.irp r,0,1,2,3,4,5,6,7,8,9,10,11\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm\\r\n\t.endr\n\t"
                     "dec %[n]\n\tjnz 1b\n\t"
                     ".irp r,1,2,3,4,5,6,7,8,9,10,11\n\tvaddps %%ymm\\r, %%ymm0, %%ymm0\n\t.endr\n\t"
                     "vmovups %%ymm0, %[out]\n\tvzeroupper"
                     : [n] "+r"(iters), [out] "=m"(out)
                     : [h] "m"(h)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm14", "xmm15", "cc");
    return out[0];
}

/* acc[i] += x[2l] * y[2l] + x[2l+1] * y[2l+1] per fp32 lane l, bf16 inputs
 * all 0.5 (0x3f00), 16 independent accumulators. */
ZMM_LOOP(bf16_dot_loop, "avx512f,avx512bf16", "vpbroadcastd", "vdpbf16ps %%zmm31, %%zmm30, %%zmm\\r", uint32_t,
         0x3f003f00u)

/* AMX: tiles 0-3 accumulate 16x16 fp32, C[t] += A[t/2] . B[t%2] over K = 32
 * bf16 (tiles 4-5 are A, 6-7 are B, every element 0.5); four independent
 * chains keep the tile unit busy across tdpbf16ps's latency. */
__attribute__((noinline)) static float amx_bf16_loop(uint64_t iters)
{
    static uint16_t ab[16 * 32];
    static float c[16 * 16];
    const struct dt_amx_tilecfg cfg = dt_amx_tilecfg_16x64();
    for (int i = 0; i < 16 * 32; i++)
        ab[i] = 0x3f00;
    const long stride = 64;
    __asm__ volatile("ldtilecfg %[cfg]\n\t"
                     "tileloadd (%[ab],%[s],1), %%tmm4\n\t"
                     "tileloadd (%[ab],%[s],1), %%tmm5\n\t"
                     "tileloadd (%[ab],%[s],1), %%tmm6\n\t"
                     "tileloadd (%[ab],%[s],1), %%tmm7\n\t"
                     ".irp r,0,1,2,3\n\ttilezero %%tmm\\r\n\t.endr\n\t"
                     "1:\n\t"
                     "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
                     "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                     "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
                     "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n\t"
                     "tilestored %%tmm3, (%[c],%[s],1)\n\t"
                     "tilerelease"
                     : [n] "+r"(iters)
                     : [cfg] "m"(cfg), [ab] "r"(ab), [c] "r"(c), [s] "r"(stride)
                     : "cc", "memory");
    return c[0];
}

static const struct unit fp32_ymm = {"fp32_fma", "vfmadd231ps_ymm", 12 * 16, 16, avx2_why_not, fp32_fma_ymm_loop};
static const struct unit units[] = {
    {"fp32_fma", "vfmadd231ps", 16 * 32, 32, avx512_why_not, fp32_fma_loop}, /* else fp32_ymm */
    {"bf16_dot", "vdpbf16ps", 16 * 64, 64, bf16_why_not, bf16_dot_loop},
    {"amx_bf16", "tdpbf16ps", 4 * 16384, 16384, dt_amx_why_not, amx_bf16_loop},
};

/* ---- Timing -------------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds for ITERS passes; exits 1 when the loop's result is not finite
 * and positive. */
static double timed(const struct unit *u, uint64_t iters)
{
    double t0 = now();
    float v = u->loop(iters);
    double t = now() - t0;
    if (!isfinite(v) || v <= 0.0f) {
        fprintf(stderr, "peak: %s: the loop's result is %g, expected finite and positive\n", u->name, (double)v);
        exit(1);
    }
    return t;
}

/* Passes that take about SECONDS: doubled from 1024 until a run takes an
 * eighth of that, then scaled. */
static uint64_t calibrate(const struct unit *u, double seconds)
{
    uint64_t n = 1024;
    double t;
    while ((t = timed(u, n)) < seconds / 8 && n < (UINT64_C(1) << 40))
        n *= 2;
    double want = (double)n * seconds / (t > 0 ? t : 1e-9);
    return want < 1 ? 1 : (uint64_t)want;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(const struct unit *u, double seconds, int repeats)
{
    const char *why = u->why_not();
    if (why) {
        printf("peak %s unavailable: %s\n", u->name, why);
        fflush(stdout);
        return;
    }
    uint64_t n = calibrate(u, seconds);
    timed(u, n); /* warm-up at the measured length */
    double g[MAX_REPEATS];
    for (int r = 0; r < repeats; r++)
        g[r] = u->flop_per_iter * (double)n / timed(u, n) / 1e9;
    qsort(g, (size_t)repeats, sizeof g[0], cmp_double);
    double med = repeats % 2 ? g[repeats / 2] : 0.5 * (g[repeats / 2 - 1] + g[repeats / 2]);
    printf("peak %s gflops=%.1f min=%.1f max=%.1f repeats=%d insn=%s flop_per_insn=%d\n", u->name, med, g[0],
           g[repeats - 1], repeats, u->insn, u->flop_per_insn);
    fflush(stdout);
}

/* ---- Command line ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: peak [--seconds S] [--repeats R]\n"
               "  one core's fp32 FMA (AVX-512, else AVX2), AVX512-BF16 and AMX bf16 peaks in GFLOP/s:\n"
               "  --seconds S   length of one timed repeat, per unit (default 0.25; at most 60)\n"
               "  --repeats R   timed repeats per unit; the median is printed (default 7; 1 to %d)\n",
            MAX_REPEATS);
}

static int bad(const char *flag, const char *want, const char *found)
{
    fprintf(stderr, "peak: %s: expected %s, found '%s'\n", flag, want, found);
    return 2;
}

static void cpu_model(char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(buf, len, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(buf, len, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = '\0';
            break;
        }
    }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"seconds", required_argument, NULL, 's'},
        {"repeats", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double seconds = 0.25;
    int repeats = 7, c;
    char *end;
    while ((c = getopt_long(argc, argv, "s:r:h", lo, NULL)) != -1) {
        switch (c) {
        case 's':
            seconds = strtod(optarg, &end);
            if (*end || end == optarg || !(seconds > 0 && seconds <= 60))
                return bad("--seconds", "a number of seconds in (0, 60]", optarg);
            break;
        case 'r': {
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > MAX_REPEATS)
                return bad("--repeats", "an integer in [1, 1001]", optarg);
            repeats = (int)v;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        return bad("arguments", "none", argv[optind]);

    int cpu = sched_getcpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) {
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            cpu = -1;
    }
    char model[200];
    cpu_model(model, sizeof model);
    printf("# peak: one core's arithmetic peak, median of %d repeat(s) of about %.3g s per unit\n", repeats, seconds);
    printf("# cpu: %s; %s\n", model, cpu >= 0 ? "pinned to the CPU it started on" : "not pinned");
    printf("# gflops = FLOP / s / 1e9, a multiply-add counted as 2 FLOP\n");
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        measure(i == 0 && avx512_why_not() && !avx2_why_not() ? &fp32_ymm : &units[i], seconds, repeats);
    return 0;
}

#endif /* x86-64 */
