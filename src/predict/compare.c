/* compare.c (dtrain-predict --compare): the model's step time beside each
 * run of a scaling study (jobscripts/scaling-study's summary.csv).
 *
 * The one design decision: nothing measured at the compared rank count
 * enters the prediction. Compute and data wait per replica come from the
 * first row of each series (the smallest rank count: one rank, or one node,
 * where no gradient crosses a link), scaled by the batch; the link comes
 * from --cluster (or --fit). A series is one model, scaling mode, algorithm,
 * bucket size, overlap and compression; each row's own columns say which,
 * where the CSV has them, and the command line's settings stand in where it
 * does not. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict.h"

enum { C_MODEL, C_ALGO, C_RANKS, C_NODES, C_BATCH, C_STEP, C_COMPUTE, C_DATA, C_COMM, C_SCALING, C_BUCKET, C_OVERLAP,
       C_COMPRESS, NC };
static const char *const want[NC] = {"model", "allreduce", "ranks", "nodes", "batch_per_replica", "step_ms",
                                     "compute_ms", "data_ms", "comm_ms", "scaling", "bucket_mb", "overlap",
                                     "grad_compression"};
static const int required[NC] = {1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0};


/* One row, read: its settings (defaults from the command line) and figures. */
struct row {
    const char *model, *algo, *scaling, *compress;
    int ranks, nodes, batch, overlap;
    double bucket_mb, step, compute, data, comm;
    struct dt_cm_compress x;
};

static const char *cell_or(char **cell, int k, const int *col, int j, const char *dflt)
{
    return col[j] >= 0 && col[j] < k && cell[col[j]][0] ? cell[col[j]] : dflt;
}

static int read_row(const struct opts *o, char **cell, int k, const int *col, struct row *r)
{
    if (col[C_MODEL] >= k) return 0;
    const char *mb = strrchr(cell[col[C_MODEL]], '/');
    r->model = mb ? mb + 1 : cell[col[C_MODEL]];
    r->algo = cell_or(cell, k, col, C_ALGO, "auto");
    r->scaling = cell_or(cell, k, col, C_SCALING, "weak");
    r->ranks = atoi(cell_or(cell, k, col, C_RANKS, "0"));
    r->nodes = atoi(cell_or(cell, k, col, C_NODES, "1"));
    r->batch = atoi(cell_or(cell, k, col, C_BATCH, "0"));
    r->step = atof(cell_or(cell, k, col, C_STEP, "0"));
    r->compute = atof(cell_or(cell, k, col, C_COMPUTE, "0"));
    r->data = atof(cell_or(cell, k, col, C_DATA, "0"));
    r->comm = atof(cell_or(cell, k, col, C_COMM, "0"));
    if (r->nodes < 1) r->nodes = 1;
    r->bucket_mb = col[C_BUCKET] >= 0 ? atof(cell_or(cell, k, col, C_BUCKET, "1")) : o->nbucket ? o->bucket_mb[0] : 1.0;
    const char *ov = cell_or(cell, k, col, C_OVERLAP, NULL);
    r->overlap = !ov ? o->overlap : !strcmp(ov, "auto") ? r->nodes > 1 : !strcmp(ov, "on");
    r->x = o->x;
    r->compress = cell_or(cell, k, col, C_COMPRESS, NULL);
    if (r->compress && dt_cm_compress_parse(r->compress, &r->x) != 0) return 0;
    if (!r->compress) r->compress = o->x.psgd_rank ? "powersgd" : o->x.half ? "16-bit" : "none";
    return r->ranks >= 1 && r->batch >= 1 && r->ranks % r->nodes == 0;
}

/* The model's step for row r, given the series' compute and data wait at batch 64. */
static struct dt_cm_result predict_row(const struct dt_model *m, const struct dt_cluster *c, const struct opts *o,
                                       const struct row *r, double compute64_ms, double data_ms)
{
    static double bytes[DT_CM_MAXBUCKETS], bytes2[DT_CM_MAXBUCKETS], cpu[DT_CM_MAXBUCKETS], ready[DT_CM_MAXBUCKETS];
    int nb = dt_cm_buckets(m, r->bucket_mb, &r->x, bytes, bytes2, cpu, ready);
    double cms = compute64_ms * r->batch / 64.0; /* strong scaling: the batch shrinks */
    struct dt_cm_step s = {.forward_s = o->fwd_frac * cms * 1e-3, .backward_s = (1.0 - o->fwd_frac) * cms * 1e-3,
                           .data_s = data_ms * 1e-3, .nbuckets = nb, .bucket_bytes = bytes, .bucket_ready = ready,
                           .bucket_bytes2 = bytes2, .bucket_cpu = cpu, .overlap = r->overlap, .half = r->x.half};
    int q = r->ranks / r->nodes, algo = dt_cm_algo_parse(r->algo);
    if (algo >= 0) return dt_cm_predict(c, algo, r->nodes, q, &s);
    /* auto: hier's table on one node; across nodes it times the three and keeps the fastest */
    struct dt_cm_result best = dt_cm_predict(c, DT_CM_HIER, r->nodes, q, &s);
    for (int a = 0; a < DT_CM_NALGOS && r->nodes > 1; a++) {
        struct dt_cm_result t = dt_cm_predict(c, a, r->nodes, q, &s);
        if (t.step_s < best.step_s) best = t;
    }
    return best;
}

int dt_predict_compare(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c, dt_status *st)
{
    FILE *f = fopen(o->compare, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--compare %s: %s", o->compare, strerror(errno));
    char line[8192], *cell[128];
    int col[NC];
    for (int j = 0; j < NC; j++) col[j] = -1;
    int k = fgets(line, sizeof line, f) ? dt_cm_csv_split(line, cell, 128) : 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < NC; j++)
            if (!strcmp(cell[i], want[j])) col[j] = i;
    for (int j = 0; j < NC; j++)
        if (col[j] < 0 && required[j]) {
            fclose(f);
            return dt_fail(st, DT_EINPUT, "--compare %s: no column %s (expected jobscripts/scaling-study's summary CSV)",
                           o->compare, want[j]);
        }
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    printf("\ncompare: %s against the model (compute and data wait per replica as measured at the smallest rank "
           "count of each series)\n", o->compare);
    printf("%-10s %-6s %-6s %6s %-4s %-11s %5s %5s %6s %10s %10s %8s %10s %10s\n", "model", "scale", "algo", "bucket",
           "ovl", "compress", "ranks", "nodes", "batch", "step meas", "step pred", "error", "comm meas", "comm pred");
    double base_compute = -1.0, base_data = 0.0, sum_err = 0.0, max_err = 0.0;
    int nrows = 0;
    char series[512] = "";
    while (fgets(line, sizeof line, f)) {
        struct row r;
        k = dt_cm_csv_split(line, cell, 128);
        if (!read_row(o, cell, k, col, &r) || strcmp(r.model, base) != 0) continue;
        char key[512];
        snprintf(key, sizeof key, "%s/%s/%s/%g/%d/%s", r.model, r.scaling, r.algo, r.bucket_mb, r.overlap, r.compress);
        if (strcmp(key, series) != 0) { /* a new series: its first row is the baseline */
            snprintf(series, sizeof series, "%s", key);
            base_compute = r.compute * 64.0 / r.batch;
            base_data = r.data;
        }
        struct dt_cm_result p = predict_row(m, c, o, &r, base_compute, base_data);
        double err = r.step > 0.0 ? (1e3 * p.step_s - r.step) / r.step : (double)NAN;
        printf("%-10.10s %-6.6s %-6.6s %6g %-4s %-11.11s %5d %5d %6d %10.2f %10.2f %+7.1f%% %10.3f %10.3f\n", r.model,
               r.scaling, r.algo, r.bucket_mb, r.overlap ? "on" : "off", r.compress, r.ranks, r.nodes, r.batch, r.step,
               1e3 * p.step_s, 100.0 * err, r.comm, 1e3 * p.comm_s);
        if (r.ranks > 1 && isfinite(err)) {
            sum_err += fabs(err);
            max_err = fabs(err) > max_err ? fabs(err) : max_err;
            nrows++;
        }
    }
    fclose(f);
    if (!nrows) return dt_fail(st, DT_EINPUT, "--compare %s: no multi-rank rows for model %s", o->compare, base);
    printf("mean |error| of the step time over %d multi-rank run%s: %.1f%%, largest %.1f%%\n", nrows,
           nrows == 1 ? "" : "s", 100.0 * sum_err / nrows, 100.0 * max_err);
    printf("(comm meas is dtrain's time in the all-reduce call, waiting for the slowest rank included; comm pred is "
           "the all-reduce alone)\n");
    return DT_OK;
}
