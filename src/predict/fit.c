/* fit.c (dtrain-predict --fit): the link's alpha and beta, fitted to a
 * dtrain-bench-allreduce --csv run across nodes, as a cluster file that
 * --cluster reads.
 *
 * The ring's time on P nodes of one rank each is 2(P-1) hops of n/P bytes
 * (commmodel.h): t(n) = 2(P-1) alpha + 2(P-1)/P n beta, a straight line in n.
 * The one design decision: the line is fitted by least squares on relative
 * errors, sum(((a + b n) - t) / t)^2, not absolute ones, so a 4 KiB message's
 * 300 us weighs as much as a 16 MiB message's 2 s; an ordinary fit would let
 * the largest messages decide alpha too. The ring is what is fitted because
 * its hops are plain point-to-point messages (what alpha and beta describe);
 * its pieces (--ring-chunk-kb, --ring-depth) should be those training uses,
 * since they decide how much of the link a hop gets (doc/scaling.md). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/commmodel.h"

enum { F_BUFFER, F_BYTES, F_ALGO, F_RANKS, F_TIME, F_NODES, F_RPN, NF };


/* The rows of algorithm algo and the first buffer kind in path: *nrows sizes
 * in bytes and seconds. */
static int read_rows(const char *path, const char *algo, double *bytes, double *secs, int max, int *nrows,
                     int *nranks, int *nnodes, dt_status *st)
{
    static const char *const want[NF] = {"buffer", "size_bytes", "algorithm", "ranks", "time_med_us", "nodes",
                                         "ranks_per_node"};
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--fit %s: %s", path, strerror(errno));
    char line[4096], *cell[64], buffer[32] = "";
    int col[NF], n = 0, k;
    for (k = 0; k < NF; k++) col[k] = -1;
    if (fgets(line, sizeof line, f)) {
        int nc = dt_cm_csv_split(line, cell, 64);
        for (int i = 0; i < nc; i++)
            for (k = 0; k < NF; k++)
                if (!strcmp(cell[i], want[k])) col[k] = i;
    }
    for (k = 0; k < F_NODES; k++)
        if (col[k] < 0) {
            fclose(f);
            return dt_fail(st, DT_EINPUT, "--fit %s: no column %s (expected dtrain-bench-allreduce --csv)", path,
                           want[k]);
        }
    *nnodes = 0;
    while (fgets(line, sizeof line, f)) {
        int nc = dt_cm_csv_split(line, cell, 64);
        if (nc <= col[F_TIME] || strcmp(cell[col[F_ALGO]], algo)) continue;
        if (!buffer[0]) snprintf(buffer, sizeof buffer, "%s", cell[col[F_BUFFER]]);
        if (strcmp(cell[col[F_BUFFER]], buffer) || n == max) continue;
        *nranks = atoi(cell[col[F_RANKS]]);
        if (col[F_NODES] >= 0 && col[F_NODES] < nc) *nnodes = atoi(cell[col[F_NODES]]);
        if (col[F_RPN] >= 0 && col[F_RPN] < nc && atoi(cell[col[F_RPN]]) != 1) {
            fclose(f);
            return dt_fail(st, DT_EINPUT, "--fit %s: the run had %s ranks per node; fit a run with one rank per "
                           "node (the link alone)", path, cell[col[F_RPN]]);
        }
        bytes[n] = atof(cell[col[F_BYTES]]);
        secs[n] = atof(cell[col[F_TIME]]) * 1e-6;
        if (bytes[n] >= 1024 && secs[n] > 0) n++;
    }
    fclose(f);
    if (n < 3 || *nranks < 2)
        return dt_fail(st, DT_EINPUT, "--fit %s: expected %s rows of 1 KiB and more at 2 ranks or more (found %d "
                       "rows at %d ranks)", path, algo, n, *nranks);
    if (!*nnodes) *nnodes = *nranks; /* an older CSV: taken as one rank per node */
    *nrows = n;
    return DT_OK;
}

/* Least squares of t = a + b x, on relative errors (weights 1/t^2) or, with
 * absolute set, plain ones (the largest sizes decide); a >= 0. Returns the
 * largest relative error of the line at the points. */
static double fit_line(const double *x, const double *t, int n, int absolute, double *a, double *b)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        double w = absolute ? 1.0 : 1.0 / (t[i] * t[i]);
        sw += w, sx += w * x[i], sy += w * t[i], sxx += w * x[i] * x[i], sxy += w * x[i] * t[i];
    }
    double det = sw * sxx - sx * sx;
    *b = det > 0 ? (sw * sxy - sx * sy) / det : 0;
    *a = det > 0 ? (sy - *b * sx) / sw : 0;
    if (*a < 0) { /* no latency to see at these sizes: the line through the origin */
        *a = 0;
        *b = sxy / sxx;
    }
    for (int i = 0; i < n; i++) {
        double e = fabs((*a + *b * x[i]) - t[i]) / t[i];
        if (e > worst) worst = e;
    }
    return worst;
}

int dt_cm_fit(const char *path, const struct dt_cluster *base, struct dt_cluster *out, double *worst,
              dt_status *st)
{
    enum { MAXROWS = 256 };
    double bytes[MAXROWS], secs[MAXROWS], a, b;
    int P = 0, nodes = 0, n = 0;
    if (read_rows(path, "ring", bytes, secs, MAXROWS, &n, &P, &nodes, st) != DT_OK) return st->code;
    *worst = fit_line(bytes, secs, n, 0, &a, &b);
    if (!(b > 0)) return dt_fail(st, DT_EINPUT, "--fit %s: the ring's time does not grow with the size", path);
    *out = *base;
    out->alpha_inter = a / (2.0 * (P - 1));
    out->beta_inter = b * P / (2.0 * (P - 1));
    out->mpi_beta_factor = 1.0;
    /* MPI_Allreduce's rows, where the benchmark has them: how much slower
     * than the model's mpi, given the ring's link, it moves each byte of a
     * large message (a plain fit: below the eager limit it is as fast as
     * the ring, and buckets are larger). */
    dt_status quiet = {0};
    int pm = 0, nm = 0;
    if (read_rows(path, "mpi", bytes, secs, MAXROWS, &nm, &pm, &nodes, &quiet) == DT_OK && pm == P) {
        double am, bm, n1 = 1 << 20, n2 = 1 << 24;
        fit_line(bytes, secs, nm, 1, &am, &bm);
        double slope = (dt_cm_allreduce(out, DT_CM_MPI, nodes, 1, n2) - dt_cm_allreduce(out, DT_CM_MPI, nodes, 1, n1)) /
                       (n2 - n1);
        if (bm > 0 && slope > 0) out->mpi_beta_factor = bm / slope;
    }
    snprintf(out->name, sizeof out->name, "fitted");
    snprintf(out->about, sizeof out->about, "link fitted to %.100s (ring, %d nodes, %d sizes)", path, nodes, n);
    return DT_OK;
}

int dt_cm_cluster_write(const struct dt_cluster *c, const char *path, dt_status *st)
{
    FILE *f = fopen(path, "w");
    if (!f) return dt_fail(st, DT_EUSAGE, "--fit-out %s: %s", path, strerror(errno));
    fprintf(f, "# dtrain-predict cluster file (read with --cluster FILE)\nname = %s\nabout = %s\n"
               "ranks_per_node = %d\nalpha_intra_us = %.4g\nbw_intra_gbs = %.4g\nalpha_inter_us = %.4g\n"
               "bw_inter_gbs = %.4g\nmpi_beta_factor = %.3g\ncpu_ns_per_byte = %.3g\n",
            c->name, c->about, c->ranks_per_node, c->alpha_intra * 1e6, 1e-9 / c->beta_intra, c->alpha_inter * 1e6,
            1e-9 / c->beta_inter, c->mpi_beta_factor, c->cpu_ns_per_byte);
    if (fclose(f) != 0) return dt_fail(st, DT_EUSAGE, "--fit-out %s: %s", path, strerror(errno));
    return DT_OK;
}
