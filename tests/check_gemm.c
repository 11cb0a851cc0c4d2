/* check_gemm.c: dtrain's float32 GEMM on AVX-512 (src/cpu/cpu_gemm_avx512.c)
 * against a plain loop that makes its sums in the order it promises, against
 * exact double sums, and against OpenBLAS's cblas_sgemm bit for bit.
 *
 * The promise checked: each element of C is one chain of fused
 * multiply-adds over k per chunk of k, chunks cut as OpenBLAS 0.3.21's
 * level-3 driver cuts them (GEMM_Q 320 for its Cooperlake kernels, 448 for
 * SkylakeX; a remainder between Q and 2Q halved, rounded up to 16 on one
 * thread, not on two), the chunks' sums added to C in order. The shapes: the
 * seed CNN's Dense(128) at batch 64 (its three products), k = 1001 (whose
 * last two chunks differ between one thread and two), and shapes with rows
 * and columns left over from the 8 x 32 tiles. Products the kernel must leave
 * to OpenBLAS (small ones, both operands transposed, an A over 512 KB,
 * DTRAIN_NO_FAST_KERNELS set) return 0. This test reaches into
 * src/cpu/cpu_internal.h, as no code outside src/cpu/ may. */
#include "config.h"

#include "ck_fast.h"
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu/cpu_internal.h"
#include "runtime/rng.h"

#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int);
#endif

/* OpenBLAS's chunk size for the core it runs here, 0 for one whose order
 * the kernel does not claim. */
static int gemm_q(void)
{
#ifdef HAVE_OPENBLAS_GET_CORENAME
    const char *core = openblas_get_corename();
    if (core && !strcasecmp(core, "cooperlake")) return 320;
    if (core && !strcasecmp(core, "skylakex")) return 448;
#endif
    return 0;
}

static float *random_matrix(size_t n, unsigned seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed, 0);
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = i % 3 ? 2.0f * dt_rng_uniform(&r) - 1.0f : 0.0f; /* a ReLU's zeros */
    return p;
}

static float at_a(const float *a, int transa, int lda, int i, int kk)
{
    return transa ? a[(size_t)kk * lda + i] : a[(size_t)i * lda + kk];
}
static float at_b(const float *b, int transb, int ldb, int kk, int j)
{
    return transb ? b[(size_t)j * ldb + kk] : b[(size_t)kk * ldb + j];
}

/* The promised order, one element at a time. */
static float ordered(const float *a, int transa, int lda, const float *b, int transb, int ldb, int i, int j, int k,
                     int q, int threaded)
{
    float c = 0.0f;
    for (int k0 = 0; k0 < k;) {
        int left = k - k0, kc = left;
        if (left >= 2 * q) kc = q;
        else if (left > q) kc = threaded ? (left + 1) / 2 : (left / 2 + 15) / 16 * 16;
        float acc = 0.0f;
        for (int kk = k0; kk < k0 + kc; kk++) acc = fmaf(at_a(a, transa, lda, i, kk), at_b(b, transb, ldb, kk, j), acc);
        c = acc + c;
        k0 += kc;
    }
    return c;
}

static void check_shape(int transa, int transb, int m, int n, int k, int threads, int q)
{
    const int lda = transa ? m : k, ldb = transb ? k : n;
    float *a = random_matrix((size_t)m * k, 11u + (unsigned)k), *b = random_matrix((size_t)k * n, 23u + (unsigned)n);
    float *c = malloc(sizeof(float) * (size_t)m * n), *blas = malloc(sizeof(float) * (size_t)m * n);
    for (size_t i = 0; i < (size_t)m * n; i++) c[i] = NAN; /* beta 0: every element written */
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(threads);
#endif
    ck_assert_msg(cpu_gemm_avx512(transa, transb, m, n, k, a, lda, b, ldb, c, n) == 1,
                  "%c%c %dx%dx%d: the kernel declined", transa ? 'T' : 'N', transb ? 'T' : 'N', m, n, k);
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                a, lda, b, ldb, 0.0f, blas, n);
    long differ = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float got = c[(size_t)i * n + j];
            const float want = ordered(a, transa, lda, b, transb, ldb, i, j, k, q, threads > 1);
            ck_assert_msg(!memcmp(&got, &want, sizeof got), "%c%c %dx%dx%d (%d threads) C[%d][%d] = %.9g, in order %.9g",
                          transa ? 'T' : 'N', transb ? 'T' : 'N', m, n, k, threads, i, j, (double)got, (double)want);
            double exact = 0, mag = 0;
            for (int kk = 0; kk < k; kk++) {
                const double t = (double)at_a(a, transa, lda, i, kk) * (double)at_b(b, transb, ldb, kk, j);
                exact += t, mag += fabs(t);
            }
            ck_assert_msg(fabs((double)got - exact) <= 1e-6 * mag + 1e-30, "C[%d][%d] = %.9g, exactly %.9g", i, j, (double)got,
                          exact);
            differ += memcmp(&got, &blas[(size_t)i * n + j], sizeof got) != 0;
        }
    ck_assert_msg(differ == 0, "%c%c %dx%dx%d (%d threads): %ld elements differ from cblas_sgemm's",
                  transa ? 'T' : 'N', transb ? 'T' : 'N', m, n, k, threads, differ);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(1);
#endif
    free(a), free(b), free(c), free(blas);
}

/* 1 where the kernel runs here; else a line saying why not. */
static int runs_here(void)
{
    if (!__builtin_cpu_supports("avx512f")) {
        printf("SKIP check_gemm: this CPU has no AVX-512 (every product is OpenBLAS's)\n");
        return 0;
    }
    if (!gemm_q()) {
#ifdef HAVE_OPENBLAS_GET_CORENAME
        printf("SKIP check_gemm: OpenBLAS runs its %s kernels, whose order the kernel does not claim\n",
               openblas_get_corename());
#else
        printf("SKIP check_gemm: the BLAS does not name its kernels\n");
#endif
        return 0;
    }
    return 1;
}

START_TEST(seed_dense)
{
    if (!runs_here()) return;
    for (int threads = 1; threads <= 2; threads++) {
        check_shape(0, 0, 64, 128, 1600, threads, gemm_q()); /* forward: x W */
        check_shape(1, 0, 1600, 128, 64, threads, gemm_q()); /* weight gradient: x^T dy */
        check_shape(0, 1, 64, 1600, 128, threads, gemm_q()); /* input gradient: dy W^T */
    }
}
END_TEST

START_TEST(chunks_and_tails)
{
    if (!runs_here()) return;
    for (int threads = 1; threads <= 2; threads++) {
        check_shape(0, 0, 64, 128, 1001, threads, gemm_q()); /* 320, 320, then 192 + 169 or 181 + 180 */
        check_shape(0, 1, 64, 128, 1001, threads, gemm_q());
        check_shape(1, 0, 1001, 128, 64, threads, gemm_q());
        check_shape(0, 0, 61, 100, 1601, threads, gemm_q()); /* 7 tiles of 8 rows, one of 4, one row; 4 columns */
        check_shape(1, 0, 203, 77, 600, threads, gemm_q());
        check_shape(0, 1, 37, 230, 900, threads, gemm_q());
    }
}
END_TEST

START_TEST(declines)
{
    if (!runs_here()) return;
    float *a = random_matrix(1600 * 1600, 1), *b = random_matrix(1600 * 1600, 2), *c = calloc(1600 * 1600, 4);
    ck_assert_int_eq(cpu_gemm_avx512(0, 0, 64, 10, 128, a, 128, b, 10, c, 10), 0);        /* small */
    ck_assert_int_eq(cpu_gemm_avx512(1, 1, 64, 128, 1600, a, 64, b, 1600, c, 128), 0);    /* both transposed */
    ck_assert_int_eq(cpu_gemm_avx512(0, 0, 512, 128, 1600, a, 1600, b, 128, c, 128), 0);  /* A is 3.1 MB */
    ck_assert_int_eq(cpu_gemm_avx512(0, 0, 0, 128, 1600, a, 1600, b, 128, c, 128), 0);    /* no rows */
    setenv("DTRAIN_NO_FAST_KERNELS", "1", 1);
    ck_assert_int_eq(cpu_gemm_avx512(0, 0, 64, 128, 1600, a, 1600, b, 128, c, 128), 0);
    unsetenv("DTRAIN_NO_FAST_KERNELS");
    ck_assert_int_eq(cpu_gemm_avx512(0, 0, 64, 128, 1600, a, 1600, b, 128, c, 128), 1);
    free(a), free(b), free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("avx512");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, seed_dense);
    tcase_add_test(tc, chunks_and_tails);
    tcase_add_test(tc, declines);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
