/* histogram.h: TensorBoard histograms of float tensors (HistogramProto).
 *
 * The one design decision: the buckets are TensorFlow's classic default
 * ones, those of the C++ histogram::Histogram behind tf.summary.histogram
 * (v1) and every TF 1.x Keras run: right edges -DBL_MAX, -1e20..-1e-12
 * (growing by 1.1), 0, 1e-12..1e20, DBL_MAX; a value v counts in the first
 * bucket whose edge is > v. The proto is encoded as that class does: runs
 * of empty buckets are coalesced into one empty bucket ending at the run's
 * last edge. TensorBoard reads such a proto (Summary.Value.histo) into its
 * Histograms and Distributions tabs (its data_compat takes bucket i as
 * [edge i-1, edge i), the first from min and the last to max).
 *
 *   HistogramProto = 1: min | 2: max | 3: num | 4: sum | 5: sum_squares
 *                    (doubles, fixed64) | 6: bucket_limit | 7: bucket
 *                    (repeated doubles, packed)
 *
 * Plain C: no MPI, no model; callers decide which rank writes.
 *
 * API:
 *   dt_histogram_limits(&n)        the n right edges (static, ascending)
 *   dt_histogram_add(h, x, n)      count n floats into h (zeroed first)
 *   dt_histogram_encode(h, buf)    the proto into buf (dt_histogram_bound
 *                                  bytes); returns its size
 *   dt_histogram_write(w, tag, x, n, step, wall, st)
 *                                  x[0..n) as one histogram event */
#ifndef DT_HISTOGRAM_H
#define DT_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

struct dt_tfevents;

enum { DT_HIST_BUCKETS = 1551 }; /* -DBL_MAX, 774 negative edges, 0, 774 positive, DBL_MAX */

struct dt_histogram {
    double min, max, num, sum, sum_squares;
    double count[DT_HIST_BUCKETS];
};

const double *dt_histogram_limits(size_t *n);
/* Start empty: min = DBL_MAX, max = -DBL_MAX, as TensorFlow does. */
void dt_histogram_clear(struct dt_histogram *h);
void dt_histogram_add(struct dt_histogram *h, const float *x, size_t n);
size_t dt_histogram_bound(void);
size_t dt_histogram_encode(const struct dt_histogram *h, unsigned char *buf);
int dt_histogram_write(struct dt_tfevents *w, const char *tag, const float *x, size_t n, int64_t step,
                       double wall_time, dt_status *st);

#endif
