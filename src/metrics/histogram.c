/* histogram.c: TensorFlow's default histogram buckets and their
 * HistogramProto (see histogram.h).
 *
 * A value's bucket is found by binary search over the 1551 edges, as
 * TensorFlow's std::upper_bound does, so every count lands where TF would
 * put it; about 11 comparisons a value, a few milliseconds for a ResNet-20. */
#include "config.h"
#include "metrics/histogram.h"

#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/tfevents.h"

static double limits[DT_HIST_BUCKETS];
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

/* TensorFlow's InitDefaultBucketsInner, edge for edge. */
static void limits_init(void)
{
    enum { HALF = (DT_HIST_BUCKETS - 1) / 2 }; /* edges on one side, DBL_MAX included */
    double v = 1.0e-12;
    int k = 0;
    for (; v < 1.0e20 && k < HALF - 1; k++, v *= 1.1) {
        limits[HALF + 1 + k] = v;
        limits[HALF - 1 - k] = -v;
    }
    limits[HALF + 1 + k] = DBL_MAX;
    limits[HALF - 1 - k] = -DBL_MAX;
    limits[HALF] = 0.0;
}

const double *dt_histogram_limits(size_t *n)
{
    pthread_once(&limits_once, limits_init);
    if (n) *n = DT_HIST_BUCKETS;
    return limits;
}

void dt_histogram_clear(struct dt_histogram *h)
{
    memset(h, 0, sizeof *h);
    h->min = DBL_MAX;
    h->max = -DBL_MAX;
}

void dt_histogram_add(struct dt_histogram *h, const float *x, size_t n)
{
    const double *lim = dt_histogram_limits(NULL);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        size_t lo = 0, hi = DT_HIST_BUCKETS; /* the first edge > v lies in [lo, hi] */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (v < lim[mid]) hi = mid;
            else lo = mid + 1;
        }
        /* +inf and NaN find no edge: TF's last bucket, so the counts still sum to num */
        h->count[lo < DT_HIST_BUCKETS ? lo : DT_HIST_BUCKETS - 1] += 1.0;
        if (v < h->min) h->min = v;
        if (v > h->max) h->max = v;
        h->sum += v;
        h->sum_squares += v * v;
    }
    h->num += (double)n;
}

size_t dt_histogram_bound(void)
{
    return 5 * 9 + 2 * (1 + 10 + 8 * (size_t)DT_HIST_BUCKETS);
}

static size_t put_double(unsigned char *p, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(bits >> (8 * i));
    return 8;
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) p[n++] = (unsigned char)(v | 0x80);
    p[n++] = (unsigned char)v;
    return n;
}

/* A packed repeated double field: key, byte length, the values. */
static size_t put_packed(unsigned char *p, int field, const double *v, size_t n)
{
    size_t k = 0;
    p[k++] = (unsigned char)(field << 3 | 2);
    k += put_varint(p + k, 8 * (uint64_t)n);
    for (size_t i = 0; i < n; i++) k += put_double(p + k, v[i]);
    return k;
}

/* TensorFlow's Histogram::EncodeToProto(preserve_zero_buckets = false). */
size_t dt_histogram_encode(const struct dt_histogram *h, unsigned char *buf)
{
    static const int fixed64 = 1;
    const double *lim = dt_histogram_limits(NULL);
    double *edge = dt_xmalloc(2 * sizeof(double) * DT_HIST_BUCKETS), *count = edge + DT_HIST_BUCKETS;
    size_t nb = 0;
    for (size_t i = 0; i < DT_HIST_BUCKETS;) {
        double end = lim[i], c = h->count[i];
        size_t j = i + 1;
        while (c <= 0 && j < DT_HIST_BUCKETS && h->count[j] <= 0) { /* a run of empty buckets: one */
            end = lim[j];
            c = h->count[j];
            j++;
        }
        edge[nb] = end;
        count[nb++] = c;
        i = j;
    }
    const double head[5] = {h->min, h->max, h->num, h->sum, h->sum_squares};
    size_t n = 0;
    for (int f = 0; f < 5; f++) {
        buf[n++] = (unsigned char)((f + 1) << 3 | fixed64);
        n += put_double(buf + n, head[f]);
    }
    n += put_packed(buf + n, 6, edge, nb);
    n += put_packed(buf + n, 7, count, nb);
    free(edge);
    return n;
}

int dt_histogram_write(struct dt_tfevents *w, const char *tag, const float *x, size_t n, int64_t step,
                       double wall_time, dt_status *st)
{
    struct dt_histogram *h = dt_xmalloc(sizeof *h);
    unsigned char *buf = dt_xmalloc(dt_histogram_bound());
    dt_histogram_clear(h);
    dt_histogram_add(h, x, n);
    size_t len = dt_histogram_encode(h, buf);
    int rc = dt_tfevents_histo(w, tag, buf, len, step, wall_time, st);
    free(h);
    free(buf);
    return rc;
}
