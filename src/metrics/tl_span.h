/* tl_span.h: recording spans on the per-rank timeline, without MPI.
 *
 * The half of metrics/timeline.h that code paths call (nn/ included, which
 * must not need mpi.h): a span is a named interval [t0, t1) on one of three
 * logical threads of the rank. Starting and writing the timeline are
 * collective and live in timeline.h.
 *
 * The one design decision: times come from dt_tl_now(), CLOCK_MONOTONIC, not
 * MPI_Wtime, so any file can time itself without MPI. When --timeline is off,
 * dt_timeline is NULL and each macro costs one well-predicted branch.
 *
 *   DT_TL_BEGIN(t0);                          double t0 = now (0.0 when off)
 *   DT_TL_END(t0, DT_TL_COMPUTE, "loss", NULL);
 *   DT_TL_END2(t0, DT_TL_COMPUTE, "forward", l->name, NULL);   "forward conv2d_1"
 *   DT_TL_ENDF(t0, DT_TL_COMM, "all-reduce", "bucket %d, %zu floats", b, n);
 *
 * Spans are recorded from any thread without a lock; dt_timeline changes only
 * in dt_timeline_start/finish, which callers run while no other thread records.
 * On a GPU backend a span measures the host side: kernel launches, not kernels. */
#ifndef DT_TL_SPAN_H
#define DT_TL_SPAN_H

#include <stdio.h>
#include <time.h>

/* Logical threads: rows of the rank's process in the trace viewer. */
enum dt_tl_thread { DT_TL_COMPUTE = 0, DT_TL_COMM = 1, DT_TL_DATA = 2, DT_TL_NTHREADS };

struct dt_timeline; /* opaque */

/* The process's timeline; NULL when --timeline is off. */
extern struct dt_timeline *dt_timeline;

/* Seconds on the monotonic clock. */
static inline double dt_tl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Record [t0, t1) on logical thread tid. name is kept by pointer: a string
 * literal, or one that outlives the timeline. args (NULL: none) is copied, at
 * most 255 bytes. Past the per-rank cap the span is dropped and counted. */
void dt_tl_span(struct dt_timeline *tl, int tid, const char *name, double t0, double t1, const char *args);

/* The same, named "prefix name" and copied: for names that die with their
 * owner (a layer's). Repeated pairs share one copy. */
void dt_tl_span2(struct dt_timeline *tl, int tid, const char *prefix, const char *name, double t0, double t1,
                 const char *args);

#define DT_TL_BEGIN(var) double var = dt_timeline ? dt_tl_now() : 0.0

#define DT_TL_END(var, tid, name, args)                                               \
    do {                                                                              \
        if (dt_timeline) dt_tl_span(dt_timeline, (tid), (name), (var), dt_tl_now(), (args)); \
    } while (0)

#define DT_TL_END2(var, tid, prefix, name, args)                                      \
    do {                                                                              \
        if (dt_timeline)                                                              \
            dt_tl_span2(dt_timeline, (tid), (prefix), (name), (var), dt_tl_now(), (args)); \
    } while (0)

/* args formatted printf-style, only when recording. */
#define DT_TL_ENDF(var, tid, name, ...)                                               \
    do {                                                                              \
        if (dt_timeline) {                                                            \
            double dt_tl_t1_ = dt_tl_now();                                           \
            char dt_tl_args_[128];                                                    \
            snprintf(dt_tl_args_, sizeof dt_tl_args_, __VA_ARGS__);                   \
            dt_tl_span(dt_timeline, (tid), (name), (var), dt_tl_t1_, dt_tl_args_);    \
        }                                                                             \
    } while (0)

#endif
