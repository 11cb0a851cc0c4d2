/* check_powersgd.c: PowerSGD's low-rank all-reduce (collectives/powersgd.c)
 * against a serial reference, at 1, 2 and 3 ranks (check_powersgd_npN).
 *
 * Every rank's gradient is a pure function of (rank, step, element), so
 * each rank runs the reference for all of them itself: plain loops in
 * double, no BLAS, the paper's algorithm as written (M = g + e; P = sum M Q;
 * Gram-Schmidt; Q = sum M^T P; M_hat = P Q^T; e = M - M_hat / W), starting
 * from the Q the compressor drew. The block has matrices of odd shapes,
 * vectors between them, a bucket without a matrix and two trailing floats,
 * as the trainer's block has; the vectors hold small integers, whose sums
 * are exact in any order, so the non-matrix parts must be the exact sum.
 * Every check also asks that all ranks hold the same bits.
 *
 * MPI is initialised once and Check runs in no-fork mode; checks are agreed
 * on by all ranks (dt_status_agree) before they are asserted, so no rank is
 * left alone in a collective. */
#include "config.h"

#include "ck_fast.h"

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/powersgd.h"
#include "mpi_check.h"
#include "runtime/checks.h"
#include "runtime/rng.h"

static int rank, nranks;
static char dir[512];

/* The block: v0 | A 7x5 | v1 | B 13x9 | v2 | C 6x17 | stats. */
static const struct dt_psgd_matrix mats[] = {{5, 7, 5}, {43, 13, 9}, {164, 6, 17}};
enum { NMAT = 3, COUNT = 268 };
/* Buckets in the reducer's order (the end first); [160, 164) holds no matrix. */
static const size_t bucket_lo[] = {164, 160, 0}, bucket_hi[] = {268, 164, 160};
enum { NBUCKETS = 3 };

/* ---- inputs ---------------------------------------------------------------- */

static int matrix_of(size_t x)
{
    for (int i = 0; i < NMAT; i++)
        if (x >= mats[i].off && x < mats[i].off + mats[i].n * mats[i].m) return i;
    return -1;
}

/* Rank q's gradient at step t: uniform in [-1, 1) in the matrices (plus a
 * rank-one part shared by all ranks, so there is something to find), small
 * integers elsewhere. poison: a NaN in B on the last rank. */
static float grad(int q, int t, size_t x, int poison)
{
    uint64_t h = dt_mix64(((uint64_t)q << 48) ^ ((uint64_t)t << 32) ^ x ^ 0x5eedull);
    int i = matrix_of(x);
    if (i < 0) return (float)(int)(h % 17) - 8.0f;
    if (poison && i == 1 && q == nranks - 1 && x == mats[1].off + 3) return NAN;
    size_t k = x - mats[i].off, row = k / mats[i].m, col = k % mats[i].m;
    float shared = (float)(((row * 7 + (size_t)t) % 5) + 1) * 0.3f * (float)((col % 3) + 1);
    return (float)((double)(h >> 11) / 4503599627370496.0 - 1.0) + shared;
}

static void fill(float *g, int q, int t, int poison)
{
    for (size_t x = 0; x < COUNT; x++) g[x] = grad(q, t, x, poison);
}

/* ---- the serial reference -------------------------------------------------- */

struct ref {
    int r[NMAT];
    double *q[NMAT];        /* [m][r] */
    double *e[NMAT];        /* [nranks][n][m] */
};

static void ref_init(struct ref *f, const struct dt_powersgd *p)
{
    for (int i = 0; i < NMAT; i++) {
        const struct dt_psgd_state *s = &p->mat[i];
        f->r[i] = s->r;
        f->q[i] = calloc(s->m * (size_t)s->r, sizeof(double));
        f->e[i] = calloc((size_t)nranks * s->n * s->m, sizeof(double));
        for (size_t k = 0; k < s->m * (size_t)s->r; k++) f->q[i][k] = s->q[k];
    }
}

static void ref_free(struct ref *f)
{
    for (int i = 0; i < NMAT; i++) {
        free(f->q[i]);
        free(f->e[i]);
    }
}

/* One step of matrix i: out[n][m] receives M_hat. */
static void ref_matrix(struct ref *f, int i, int t, double *out)
{
    size_t n = mats[i].n, m = mats[i].m, r = (size_t)f->r[i], off = mats[i].off;
    double *M = calloc((size_t)nranks * n * m, sizeof(double)), *P = calloc(n * r, sizeof(double)),
           *Q = calloc(m * r, sizeof(double));
    for (int q = 0; q < nranks; q++)
        for (size_t k = 0; k < n * m; k++)
            M[(size_t)q * n * m + k] = (double)grad(q, t, off + k, 0) + f->e[i][(size_t)q * n * m + k];
    for (int q = 0; q < nranks; q++) /* P = sum over ranks of M Q */
        for (size_t a = 0; a < n; a++)
            for (size_t c = 0; c < r; c++)
                for (size_t b = 0; b < m; b++) P[a * r + c] += M[(size_t)q * n * m + a * m + b] * f->q[i][b * r + c];
    for (size_t c = 0; c < r; c++) { /* Gram-Schmidt */
        for (size_t d = 0; d < c; d++) {
            double dot = 0.0;
            for (size_t a = 0; a < n; a++) dot += P[a * r + d] * P[a * r + c];
            for (size_t a = 0; a < n; a++) P[a * r + c] -= dot * P[a * r + d];
        }
        double norm = 0.0;
        for (size_t a = 0; a < n; a++) norm += P[a * r + c] * P[a * r + c];
        for (size_t a = 0; a < n; a++) P[a * r + c] /= sqrt(norm);
    }
    for (int q = 0; q < nranks; q++) /* Q = sum over ranks of M^T P */
        for (size_t b = 0; b < m; b++)
            for (size_t c = 0; c < r; c++)
                for (size_t a = 0; a < n; a++) Q[b * r + c] += M[(size_t)q * n * m + a * m + b] * P[a * r + c];
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < m; b++) {
            double s = 0.0;
            for (size_t c = 0; c < r; c++) s += P[a * r + c] * Q[b * r + c];
            out[a * m + b] = s;
        }
    for (int q = 0; q < nranks; q++)
        for (size_t k = 0; k < n * m; k++) f->e[i][(size_t)q * n * m + k] = M[(size_t)q * n * m + k] - out[k] / nranks;
    memcpy(f->q[i], Q, sizeof(double) * m * r);
    free(M);
    free(P);
    free(Q);
}

/* ---- checks ---------------------------------------------------------------- */

#define expect(st, cond, ...) mpi_check_expect(st, rank, cond, __VA_ARGS__)

static void agree(dt_status *st)
{
    dt_status_agree(st, MPI_COMM_WORLD);
    ck_assert_msg(st->code == DT_OK, "%s", st->msg);
}

/* All ranks hold rank 0's bits. */
static int same_everywhere(const float *buf, size_t count)
{
    float *root = malloc(sizeof(float) * count);
    memcpy(root, buf, sizeof(float) * count);
    MPI_Bcast(root, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    int same = memcmp(root, buf, sizeof(float) * count) == 0, all;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    free(root);
    return all;
}

static void coll_open(struct dt_coll *c, const char *algo)
{
    dt_status st = {0};
    struct dt_coll_config cfg = {.algorithm = algo};
    ck_assert_int_eq(dt_coll_init(c, MPI_COMM_WORLD, &cfg, &st), DT_OK);
}

/* A communicator over the world with algo, and a compressor of rank R on it. */
static void open_both(struct dt_coll *c, struct dt_powersgd *p, const char *algo, int R, uint64_t seed)
{
    coll_open(c, algo);
    dt_powersgd_init(p, c, R, mats, NMAT, seed);
}

static void close_both(struct dt_coll *c, struct dt_powersgd *p)
{
    dt_powersgd_free(p);
    dt_coll_free(c);
}

static void reduce_step(struct dt_powersgd *p, float *g, int t, int poison)
{
    fill(g, rank, t, poison);
    for (int b = 0; b < NBUCKETS; b++) dt_powersgd_reduce(p, g, bucket_lo[b], bucket_hi[b]);
}

/* The non-matrix parts: the exact integer sums. */
static void expect_exact_rest(dt_status *st, const float *g, int t)
{
    for (size_t x = 0; x < COUNT; x++) {
        if (matrix_of(x) >= 0) continue;
        double sum = 0.0;
        for (int q = 0; q < nranks; q++) sum += (double)grad(q, t, x, 0);
        expect(st, g[x] == (float)sum, "step %d: element %zu (not in a matrix) is %.9g, the sum is %g", t, x,
               (double)g[x], sum);
    }
}

/* Several steps against the reference: error feedback and warm start on. */
static void against_reference(const char *algo, int R, double tol)
{
    struct dt_coll c;
    struct dt_powersgd p;
    struct ref f;
    dt_status st = {0};
    float g[COUNT];
    double out[COUNT];
    open_both(&c, &p, algo, R, 7);
    ref_init(&f, &p);
    double worst = 0.0;
    for (int t = 0; t < 5; t++) {
        reduce_step(&p, g, t, 0);
        expect(&st, same_everywhere(g, COUNT), "%s, R %d, step %d: the ranks' results differ", algo, R, t);
        expect_exact_rest(&st, g, t);
        for (int i = 0; i < NMAT; i++) {
            size_t nm = mats[i].n * mats[i].m;
            ref_matrix(&f, i, t, out);
            double scale = 0.0;
            for (size_t k = 0; k < nm; k++) scale = fmax(scale, fabs(out[k]));
            for (size_t k = 0; k < nm; k++) {
                double d = fabs((double)g[mats[i].off + k] - out[k]) / scale;
                worst = fmax(worst, d);
                expect(&st, d <= tol, "%s, R %d, step %d, matrix %d, element %zu: %.9g, the reference %.9g", algo,
                       R, t, i, k, (double)g[mats[i].off + k], out[k]);
            }
        }
    }
    if (rank == 0) printf("# %s R %d: largest difference from the reference %.2e of the matrix's largest\n", algo,
                          R, worst);
    agree(&st);
    ref_free(&f);
    close_both(&c, &p);
}

START_TEST(test_reference_ring) { against_reference("ring", 2, 2e-5); }
END_TEST

START_TEST(test_reference_mpi) { against_reference("mpi", 1, 2e-5); }
END_TEST

START_TEST(test_reference_auto) { against_reference("auto", 3, 2e-5); }
END_TEST

/* R at least min(n, m) for every matrix: the exact sum of the raw
 * gradients, every step (the error buffers then sum to zero over ranks). */
START_TEST(test_full_rank_is_exact)
{
    struct dt_coll c;
    struct dt_powersgd p;
    dt_status st = {0};
    float g[COUNT];
    open_both(&c, &p, "ring", 17, 7);
    for (int i = 0; i < NMAT; i++)
        expect(&st, p.mat[i].r == (int)(mats[i].n < mats[i].m ? mats[i].n : mats[i].m), "matrix %d: rank %d", i,
               p.mat[i].r);
    for (int t = 0; t < 3; t++) {
        reduce_step(&p, g, t, 0);
        expect(&st, same_everywhere(g, COUNT), "step %d: the ranks' results differ", t);
        for (size_t x = 0; x < COUNT; x++) {
            double sum = 0.0, mag = 0.0;
            for (int q = 0; q < nranks; q++) {
                sum += (double)grad(q, t, x, 0);
                mag += fabs((double)grad(q, t, x, 0));
            }
            expect(&st, fabs((double)g[x] - sum) <= 1e-5 * (mag + 1.0), "step %d, element %zu: %.9g, the sum %.9g", t, x,
                   (double)g[x], sum);
        }
    }
    agree(&st);
    close_both(&c, &p);
}
END_TEST

/* Error feedback loses nothing: over T steps, what was applied plus what
 * the ranks still hold back (W times their mean error) is every gradient. */
START_TEST(test_error_feedback_telescopes)
{
    enum { T = 6 };
    struct dt_coll c;
    struct dt_powersgd p;
    dt_status st = {0};
    float g[COUNT];
    double applied[COUNT] = {0}, raw[COUNT] = {0}, held[COUNT] = {0};
    open_both(&c, &p, "ring", 1, 11);
    for (int t = 0; t < T; t++) {
        reduce_step(&p, g, t, 0);
        for (size_t x = 0; x < COUNT; x++) {
            applied[x] += (double)g[x];
            for (int q = 0; q < nranks; q++) raw[x] += (double)grad(q, t, x, 0);
        }
    }
    for (int i = 0; i < NMAT; i++)
        for (size_t k = 0; k < mats[i].n * mats[i].m; k++) held[mats[i].off + k] = p.mat[i].e[k];
    MPI_Allreduce(MPI_IN_PLACE, held, COUNT, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double worst = 0.0, lost = 0.0;
    for (size_t x = 0; x < COUNT; x++) {
        double d = fabs(applied[x] + held[x] - raw[x]);
        worst = fmax(worst, d);
        lost = fmax(lost, fabs(applied[x] - raw[x]));
        expect(&st, d <= 2e-5 * (double)(T * nranks), "element %zu: applied %.9g + held back %.9g, gradients %.9g",
               x, applied[x], held[x], raw[x]);
    }
    /* Rank 1 of 5x7 and larger matrices keeps something back: the identity is not 0 = 0. */
    expect(&st, lost > 0.1, "rank 1 applied everything (largest difference %g): nothing was compressed", lost);
    if (rank == 0) printf("# telescoping: largest residue %.2e (held back up to %.2f)\n", worst, lost);
    agree(&st);
    close_both(&c, &p);
}
END_TEST

/* A NaN on one rank spoils the step on every rank alike; after discard
 * (the step skipped) the next step is finite again and identical everywhere,
 * and a zero gradient leaves no zero Q behind (it would stick). */
START_TEST(test_nonfinite_and_zero)
{
    struct dt_coll c;
    struct dt_powersgd p;
    dt_status st = {0};
    float g[COUNT];
    open_both(&c, &p, "ring", 2, 3);
    reduce_step(&p, g, 0, 1);
    expect(&st, same_everywhere(g, COUNT), "the poisoned step differs between ranks");
    int bad = 0;
    for (size_t k = 0; k < mats[1].n * mats[1].m; k++) bad += !isfinite(g[mats[1].off + k]);
    expect(&st, bad > 0, "a NaN in B on rank %d left B finite", nranks - 1);
    dt_powersgd_discard(&p);
    for (int i = 0; i < NMAT; i++) {
        for (size_t k = 0; k < mats[i].m * (size_t)p.mat[i].r; k++)
            expect(&st, isfinite(p.mat[i].q[k]), "after discard, Q of matrix %d holds %g", i, (double)p.mat[i].q[k]);
        for (size_t k = 0; k < mats[i].n * mats[i].m; k++)
            expect(&st, p.mat[i].e[k] == 0.0f, "after discard, e of matrix %d holds %g", i, (double)p.mat[i].e[k]);
    }
    reduce_step(&p, g, 1, 0);
    for (size_t x = 0; x < COUNT; x++) expect(&st, isfinite(g[x]), "the step after: element %zu is %g", x, (double)g[x]);
    expect(&st, same_everywhere(g, COUNT), "the step after the poisoned one differs between ranks");
    memset(g, 0, sizeof g);
    dt_powersgd_discard(&p); /* no error left: M is exactly zero */
    for (int b = 0; b < NBUCKETS; b++) dt_powersgd_reduce(&p, g, bucket_lo[b], bucket_hi[b]);
    for (size_t x = 0; x < COUNT; x++) expect(&st, g[x] == 0.0f, "a zero gradient gave %g at %zu", (double)g[x], x);
    for (int i = 0; i < NMAT; i++) {
        double norm = 0.0;
        for (size_t k = 0; k < mats[i].m * (size_t)p.mat[i].r; k++) norm += fabs(p.mat[i].q[k]);
        expect(&st, norm > 0.0, "a zero gradient left Q of matrix %d zero", i);
    }
    expect(&st, same_everywhere(p.mat[0].q, mats[0].m * (size_t)p.mat[0].r), "the redrawn Q differs between ranks");
    agree(&st);
    close_both(&c, &p);
}
END_TEST

/* What a step sends: (n + m) r per matrix instead of n m. */
START_TEST(test_sizes)
{
    struct dt_coll c;
    struct dt_powersgd p;
    size_t full, sent;
    open_both(&c, &p, "ring", 2, 3);
    dt_powersgd_sizes(&p, COUNT, &full, &sent);
    ck_assert_uint_eq(full, COUNT);
    ck_assert_uint_eq(sent, COUNT - 35 - 117 - 102 + (7 + 5) * 2 + (13 + 9) * 2 + (6 + 17) * 2);
    close_both(&c, &p);
}
END_TEST

int main(int argc, char **argv)
{
    mpi_check_init(&argc, &argv, "powersgd", &rank, &nranks, dir, sizeof dir);
    Suite *s = suite_create("powersgd");
    TCase *tc = tcase_create("powersgd");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reference_ring);
    tcase_add_test(tc, test_reference_mpi);
    tcase_add_test(tc, test_reference_auto);
    tcase_add_test(tc, test_full_rank_is_exact);
    tcase_add_test(tc, test_error_feedback_telescopes);
    tcase_add_test(tc, test_nonfinite_and_zero);
    tcase_add_test(tc, test_sizes);
    suite_add_tcase(s, tc);
    return mpi_check_run(s, rank);
}
