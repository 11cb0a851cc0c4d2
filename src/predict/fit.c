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


/* The ring rows of the first buffer kind in path: *n sizes in bytes and seconds. */
static int read_rows(const char *path, double *bytes, double *secs, int max, int *nrows, int *nranks, int *nnodes,
                     dt_status *st)
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
        if (nc <= col[F_TIME] || strcmp(cell[col[F_ALGO]], "ring")) continue;
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
        return dt_fail(st, DT_EINPUT, "--fit %s: expected ring rows of 1 KiB and more at 2 ranks or more (found %d "
                       "rows at %d ranks)", path, n, *nranks);
    if (!*nnodes) *nnodes = *nranks; /* an older CSV: taken as one rank per node */
    *nrows = n;
    return DT_OK;
}

int dt_cm_fit(const char *path, const struct dt_cluster *base, struct dt_cluster *out, double *worst,
              dt_status *st)
{
    enum { MAXROWS = 256 };
    double bytes[MAXROWS], secs[MAXROWS];
    int P = 0, nodes = 0, n = 0;
    if (read_rows(path, bytes, secs, MAXROWS, &n, &P, &nodes, st) != DT_OK) return st->code;
    /* Weighted least squares of t = a + b x with weights 1/t^2. */
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0 / (secs[i] * secs[i]);
        sw += w, sx += w * bytes[i], sy += w * secs[i], sxx += w * bytes[i] * bytes[i], sxy += w * bytes[i] * secs[i];
    }
    double det = sw * sxx - sx * sx;
    double b = det > 0 ? (sw * sxy - sx * sy) / det : 0, a = det > 0 ? (sy - b * sx) / sw : 0;
    if (!(b > 0)) return dt_fail(st, DT_EINPUT, "--fit %s: the ring's time does not grow with the size", path);
    if (a < 0) { /* no latency to see at these sizes: the line through the origin */
        a = 0;
        b = sxy / sxx;
    }
    *worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((a + b * bytes[i]) - secs[i]) / secs[i];
        if (e > *worst) *worst = e;
    }
    *out = *base;
    out->alpha_inter = a / (2.0 * (P - 1));
    out->beta_inter = b * P / (2.0 * (P - 1));
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
               "bw_inter_gbs = %.4g\n",
            c->name, c->about, c->ranks_per_node, c->alpha_intra * 1e6, 1e-9 / c->beta_intra, c->alpha_inter * 1e6,
            1e-9 / c->beta_inter);
    if (fclose(f) != 0) return dt_fail(st, DT_EUSAGE, "--fit-out %s: %s", path, strerror(errno));
    return DT_OK;
}
