/* grad.h (dtrain-predict): a model's gradient as the exchange moves it:
 * buckets cut as dtrain cuts them, when backward makes each one ready, and
 * what each costs to send under --grad-compression.
 *
 * The one design decision: the matrices PowerSGD compresses are chosen by
 * the same rule as dtrain's (strategy/mirrored.c): a dense or convolution
 * kernel as a rows x filters matrix, compressed where min(rows, filters) > R
 * and (rows + filters) R < rows filters; a bucket with one then costs two
 * all-reduces, (sum of rows R + the bucket's other floats) and (sum of
 * filters R) floats, plus the compression's arithmetic. */
#ifndef DT_PREDICT_GRAD_H
#define DT_PREDICT_GRAD_H

#include "nn/model.h"

enum { DT_CM_MAXBUCKETS = 1 << 16 };

/* How gradients travel: none, 16-bit, or PowerSGD at a rank. */
struct dt_cm_compress {
    int half;           /* fp16 or bf16: 2 bytes per value */
    int psgd_rank;      /* powersgd:R; 0 = off */
    double psgd_gflops; /* the compression's arithmetic rate (GFLOP/s) */
};

/* "none", "fp16", "bf16" or "powersgd:R" into x; -1 if none of them. */
int dt_cm_compress_parse(const char *text, struct dt_cm_compress *x);

/* A rough count of a layer's backward work a sample (multiply-adds: a
 * kernel's input gradient and its own gradient, twice forward's). */
double dt_cm_layer_work(const struct dt_layer *l);

/* The buckets at bucket_mb (0: one), in backward order: bytes of the first
 * (and, with PowerSGD, second: else 0) all-reduce, seconds of compression
 * arithmetic, and the fraction of backward done when each is ready. Returns
 * the bucket count. Arrays hold DT_CM_MAXBUCKETS. */
int dt_cm_buckets(const struct dt_model *m, double bucket_mb, const struct dt_cm_compress *x, double *bytes,
                  double *bytes2, double *cpu_s, double *ready);

#endif
