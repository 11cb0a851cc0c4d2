/* powersgd.c: PowerSGD's low-rank all-reduce of a bucket (see powersgd.h).
 *
 * One bucket is two all-reduces: [P of each matrix | the exact rest], then
 * [Q of each matrix]. The one design decision: the arithmetic after each
 * sum (Gram-Schmidt, M_hat = P Q^T) is plain C in a fixed order, so every
 * rank derives the same bits from the same sums; BLAS only computes what a
 * rank contributes to a sum. */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/powersgd.h"
#include "runtime/checks.h"

static int cmp_off(const void *a, const void *b)
{
    size_t x = ((const struct dt_psgd_matrix *)a)->off, y = ((const struct dt_psgd_matrix *)b)->off;
    return (x > y) - (x < y);
}

/* Columns of Q (m x r) drawn from the matrix's own stream: uniform in [-1, 1). */
static void fill_columns(struct dt_psgd_state *s, const int *which)
{
    for (size_t j = 0; j < s->m; j++)
        for (int k = 0; k < s->r; k++) {
            float v = 2.0f * dt_rng_uniform(&s->rng) - 1.0f; /* drawn for every column: a fixed sequence */
            if (!which || which[k]) s->q[j * (size_t)s->r + (size_t)k] = v;
        }
}

void dt_powersgd_init(struct dt_powersgd *p, struct dt_coll *coll, int rank, const struct dt_psgd_matrix *mats,
                      int nmats, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->coll = coll;
    p->rank = rank;
    p->nreplicas = coll->topo.size;
    p->nmat = nmats;
    p->mat = dt_xcalloc((size_t)(nmats > 0 ? nmats : 1), sizeof *p->mat);
    struct dt_psgd_matrix *sorted = dt_xmalloc(sizeof *sorted * (size_t)(nmats > 0 ? nmats : 1));
    if (nmats > 0) memcpy(sorted, mats, sizeof *sorted * (size_t)nmats);
    qsort(sorted, (size_t)nmats, sizeof *sorted, cmp_off);
    for (int i = 0; i < nmats; i++) {
        struct dt_psgd_state *s = &p->mat[i];
        s->off = sorted[i].off;
        s->n = sorted[i].n;
        s->m = sorted[i].m;
        size_t r = (size_t)rank;
        if (r > s->n) r = s->n;
        if (r > s->m) r = s->m;
        s->r = (int)r;
        s->q = dt_xmalloc(sizeof(float) * (s->m * r + 1));
        s->e = dt_xcalloc(s->n * s->m + 1, sizeof(float));
        dt_rng_seed(&s->rng, seed, 0x70537364ull + (uint64_t)i); /* "pSsd": apart from the model's streams */
        fill_columns(s, NULL);
        if (s->n * r > p->gs_count) p->gs_count = s->n * r;
    }
    free(sorted);
    p->gs = dt_xmalloc(sizeof(double) * (p->gs_count ? p->gs_count : 1));
}

void dt_powersgd_free(struct dt_powersgd *p)
{
    for (int i = 0; i < p->nmat; i++) {
        free(p->mat[i].q);
        free(p->mat[i].e);
    }
    free(p->mat);
    free(p->pack);
    free(p->gs);
    memset(p, 0, sizeof *p);
}

/* Modified Gram-Schmidt on the r columns of P (n x r, row-major), in
 * double. A column with nothing left (zero, or not finite) becomes zero. */
static void orthonormalise(double *g, float *P, size_t n, int r)
{
    size_t R = (size_t)r;
    for (size_t i = 0; i < n * R; i++) g[i] = P[i];
    for (size_t j = 0; j < R; j++) {
        for (size_t k = 0; k < j; k++) {
            double dot = 0.0;
            for (size_t i = 0; i < n; i++) dot += g[i * R + k] * g[i * R + j];
            for (size_t i = 0; i < n; i++) g[i * R + j] -= dot * g[i * R + k];
        }
        double ss = 0.0;
        for (size_t i = 0; i < n; i++) ss += g[i * R + j] * g[i * R + j];
        double inv = ss > 0.0 && isfinite(ss) ? 1.0 / sqrt(ss) : 0.0;
        for (size_t i = 0; i < n; i++) g[i * R + j] *= inv;
    }
    for (size_t i = 0; i < n * R; i++) P[i] = (float)g[i];
}

/* M (this rank's gradient plus its error) becomes M_hat = P Q^T, and the
 * error what M_hat / W leaves of it. Fixed order, no BLAS: the same bits on
 * every rank for the same P and Q. */
static void apply(struct dt_psgd_state *s, float *M, const float *P, const float *Q, int W)
{
    size_t n = s->n, m = s->m, r = (size_t)s->r;
    float inv = 1.0f / (float)W;
    for (size_t i = 0; i < n; i++) {
        float *o = M + i * m, *e = s->e + i * m;
        const float *pi = P + i * r;
        memcpy(e, o, sizeof(float) * m);
        for (size_t j = 0; j < m; j++) o[j] = pi[0] * Q[j * r];
        for (size_t k = 1; k < r; k++)
            for (size_t j = 0; j < m; j++) o[j] += pi[k] * Q[j * r + k];
        for (size_t j = 0; j < m; j++) e[j] -= o[j] * inv;
    }
}

/* The new warm start: the summed Q, with zero or non-finite columns drawn
 * afresh (a zero Q would keep P zero for ever). */
static void keep_q(struct dt_psgd_state *s, const float *Q)
{
    size_t m = s->m, r = (size_t)s->r;
    int redraw[DT_POWERSGD_MAX_RANK] = {0}, any = 0;
    if (Q != s->q) memcpy(s->q, Q, sizeof(float) * m * r);
    for (size_t k = 0; k < r; k++) {
        int zero = 1, finite = 1;
        for (size_t j = 0; j < m; j++) {
            zero &= Q[j * r + k] == 0.0f;
            finite &= isfinite(Q[j * r + k]);
        }
        redraw[k] = zero || !finite;
        any |= redraw[k];
    }
    if (any) fill_columns(s, redraw);
}

/* The gaps of [lo, hi) between matrices a..b-1: copy them into (to = 1) or
 * out of (to = 0) the packed buffer dst. */
static void gaps(const struct dt_powersgd *p, int a, int b, float *buf, size_t lo, size_t hi, float *dst, int to)
{
    size_t at = lo, k = 0;
    for (int i = a; i <= b; i++) {
        size_t end = i < b ? p->mat[i].off : hi;
        size_t len = end - at;
        if (to) memcpy(dst + k, buf + at, sizeof(float) * len);
        else memcpy(buf + at, dst + k, sizeof(float) * len);
        k += len;
        if (i < b) at = p->mat[i].off + p->mat[i].n * p->mat[i].m;
    }
}

static float *scratch(struct dt_powersgd *p, size_t count)
{
    if (count > p->pack_count) {
        free(p->pack);
        p->pack = dt_xmalloc(sizeof(float) * count);
        p->pack_count = count;
    }
    return p->pack;
}

void dt_powersgd_reduce(struct dt_powersgd *p, float *buf, size_t lo, size_t hi)
{
    double t0 = MPI_Wtime(), comm = 0.0, t;
    int a = 0, b;
    while (a < p->nmat && p->mat[a].off < lo) a++;
    for (b = a; b < p->nmat && p->mat[b].off + p->mat[b].n * p->mat[b].m <= hi; b++) {}
    size_t np = 0, nq = 0, nm = 0;
    for (int i = a; i < b; i++) {
        np += p->mat[i].n * (size_t)p->mat[i].r;
        nq += p->mat[i].m * (size_t)p->mat[i].r;
        nm += p->mat[i].n * p->mat[i].m;
    }
    if (a == b) { /* nothing to compress: the plain all-reduce, in place */
        t = MPI_Wtime();
        dt_allreduce(p->coll, buf + lo, buf + lo, hi - lo);
        p->compute_seconds += t - t0;
        p->calls++;
        return;
    }
    size_t rest = hi - lo - nm, po = 0;
    float *P = scratch(p, np + rest + nq), *Q = P + np + rest;
    for (int i = a; i < b; i++) {
        struct dt_psgd_state *s = &p->mat[i];
        float *M = buf + s->off;
        for (size_t x = 0; x < s->n * s->m; x++) M[x] += s->e[x];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->n, s->r, (int)s->m, 1.0f, M, (int)s->m,
                    s->q, s->r, 0.0f, P + po, s->r);
        po += s->n * (size_t)s->r;
    }
    gaps(p, a, b, buf, lo, hi, P + np, 1);
    t = MPI_Wtime();
    dt_allreduce(p->coll, P, P, np + rest);
    comm += MPI_Wtime() - t;
    gaps(p, a, b, buf, lo, hi, P + np, 0);
    size_t qo = 0;
    po = 0;
    for (int i = a; i < b; i++) {
        struct dt_psgd_state *s = &p->mat[i];
        orthonormalise(p->gs, P + po, s->n, s->r);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)s->m, s->r, (int)s->n, 1.0f, buf + s->off,
                    (int)s->m, P + po, s->r, 0.0f, Q + qo, s->r);
        po += s->n * (size_t)s->r;
        qo += s->m * (size_t)s->r;
    }
    t = MPI_Wtime();
    dt_allreduce(p->coll, Q, Q, nq);
    comm += MPI_Wtime() - t;
    po = qo = 0;
    for (int i = a; i < b; i++) {
        struct dt_psgd_state *s = &p->mat[i];
        apply(s, buf + s->off, P + po, Q + qo, p->nreplicas);
        keep_q(s, Q + qo);
        po += s->n * (size_t)s->r;
        qo += s->m * (size_t)s->r;
    }
    p->compute_seconds += MPI_Wtime() - t0 - comm;
    p->calls++;
}

void dt_powersgd_discard(struct dt_powersgd *p)
{
    for (int i = 0; i < p->nmat; i++) {
        struct dt_psgd_state *s = &p->mat[i];
        memset(s->e, 0, sizeof(float) * s->n * s->m);
        keep_q(s, s->q);
    }
}

void dt_powersgd_rescale(struct dt_powersgd *p, float factor)
{
    for (int i = 0; i < p->nmat; i++)
        for (size_t x = 0; x < p->mat[i].n * p->mat[i].m; x++) p->mat[i].e[x] *= factor;
}

void dt_powersgd_sizes(const struct dt_powersgd *p, size_t count, size_t *full, size_t *sent)
{
    *full = *sent = count;
    for (int i = 0; i < p->nmat; i++) {
        const struct dt_psgd_state *s = &p->mat[i];
        *sent -= s->n * s->m;
        *sent += (s->n + s->m) * (size_t)s->r;
    }
}
