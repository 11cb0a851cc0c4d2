/* simd.h: one binary fast on every x86-64 node.
 *
 * DT_MULTIVERSION compiles a hot element-wise loop for AVX-512, AVX2 and the
 * baseline, and the loader picks the best the CPU has (GCC/Clang function
 * multiversioning), so one binary is fast on a Zen 4 or Sapphire Rapids node
 * and still runs on an old login node. Elsewhere it expands to nothing. */
#ifndef DT_SIMD_H
#define DT_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define DT_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef DT_MULTIVERSION
#define DT_MULTIVERSION
#endif

#endif
