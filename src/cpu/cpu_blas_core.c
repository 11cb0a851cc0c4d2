/* cpu_blas_core.c: make OpenBLAS use the kernels the CPU can run.
 *
 * OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels once, when
 * the library is loaded, from the CPU's family and model numbers. A CPU
 * newer than the library falls back to its most generic x86-64 kernels:
 * Debian 12's OpenBLAS 0.3.21 takes an Emerald Rapids Xeon (family 6,
 * model 207) for "Prescott" and runs SSE3 sgemm, about a quarter of the
 * AVX-512 kernels' speed, although the CPU's feature flags say AVX-512.
 *
 * The one design decision: the choice is made before main() can act (the
 * library's constructor runs first) and OpenBLAS has no call to change it
 * later, so the program restarts itself once, before MPI_Init (dtrain,
 * dtrain-generate, and programs on libdtrain through dtrain_blas_prepare), with
 * OPENBLAS_CORETYPE naming the widest kernel set the flags allow (SkylakeX
 * for AVX-512, Haswell for AVX2 + FMA). A user's own OPENBLAS_CORETYPE is
 * never overridden, and a core OpenBLAS recognised is left alone. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif

/* OpenBLAS's x86-64 cores without AVX2 kernels: what an unknown CPU gets. */
static int generic_core(const char *core)
{
    static const char *const old[] = {"prescott", "core2",   "penryn",   "dunnington", "nehalem", "atom",
                                      "katmai",   "coppermine", "northwood", "banias",    "opteron", "barcelona",
                                      "bobcat",   "sandybridge", "unknown",  NULL};
    for (int i = 0; old[i]; i++)
        if (!strcasecmp(core, old[i])) return 1;
    return 0;
}

const char *dt_cpu_blas_wanted(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

const char *dt_cpu_blas_core(void)
{
#ifdef HAVE_OPENBLAS_GET_CORENAME
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
#else
    return NULL;
#endif
}

void dt_cpu_blas_prepare(char **argv)
{
    const char *core = dt_cpu_blas_core(), *want = dt_cpu_blas_wanted();
    if (!core || !want || getenv("OPENBLAS_CORETYPE") || !generic_core(core)) return;
    /* DTRAIN_BLAS_FROM says what OpenBLAS had chosen (dtrain's setup report)
     * and stops a second restart should the forced core not take. */
    if (getenv("DTRAIN_BLAS_FROM")) return;
    const char *pre = getenv("LD_PRELOAD"); /* under Valgrind /proc/self/exe is Valgrind itself */
    if (pre && strstr(pre, "vgpreload")) return;
    /* The program's own path, not /proc/self/exe: the process keeps its
     * name ("dtrain" for pgrep, ps and the job scripts, not "exe"). */
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || (size_t)len >= sizeof self - 1) return;
    self[len] = '\0';
    if (setenv("OPENBLAS_CORETYPE", want, 1) || setenv("DTRAIN_BLAS_FROM", core, 1)) return;
    fflush(NULL);
    execv(self, argv);
    /* No /proc, or exec refused: run on with the generic kernels. */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("DTRAIN_BLAS_FROM");
}

const char *dt_cpu_blas_from(void) { return getenv("DTRAIN_BLAS_FROM"); }
