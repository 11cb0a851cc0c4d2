/* cpu_amx.h: what AMX code needs before its first tile instruction, in one
 * place for the attention's tiles (cpu_attention_amx.c) and bench/peak's
 * AMX loop (a standalone program: header-only, no library).
 *
 * Whether the tiles can run takes three answers: CPUID's AMX-TILE and
 * AMX-BF16, the tile state enabled by the kernel in XCR0, and this
 * process's permission for it (arch_prctl, Linux >= 5.16; oneDNN asks the
 * same). The tile configuration both use is eight tiles of 16 rows x 64
 * bytes (palette 1). x86-64 Linux with GCC only: the includer checks. */
#ifndef DT_CPU_AMX_H
#define DT_CPU_AMX_H

#include <cpuid.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DT_ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define DT_XFEATURE_XTILEDATA 18

/* ldtilecfg's 64-byte operand. */
struct dt_amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64)));

/* Eight tiles of 16 rows x 64 bytes (16 x 16 floats, or 16 x 32 bf16). */
static inline struct dt_amx_tilecfg dt_amx_tilecfg_16x64(void)
{
    struct dt_amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    return cfg;
}

static inline uint64_t dt_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* NULL where the tiles can run, else why not (asks the kernel for the
 * permission, once granted for the process). */
static inline const char *dt_amx_why_not(void)
{
    static char why[160];
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) ||
        !(d & (1u << 22)))
        return "CPUID reports no AMX-TILE / AMX-BF16";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return "CPUID reports no OSXSAVE";
    if ((dt_xcr0() & (3u << 17)) != (3u << 17))
        return "the kernel has not enabled the tile state (XTILECFG, XTILEDATA) in XCR0";
    if (syscall(SYS_arch_prctl, DT_ARCH_REQ_XCOMP_PERM, DT_XFEATURE_XTILEDATA) != 0) {
        snprintf(why, sizeof why, "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused: %s (kernel older than 5.16?)",
                 strerror(errno));
        return why;
    }
    return NULL;
}

#endif
