/* status.h: errors, without MPI.
 *
 * Anything the user can cause (a flag, a file, a shape, a label) fills a
 * dt_status and returns up to a point that can report it; checks.h's
 * dt_status_agree then makes every rank learn of an error found by any rank,
 * so rank 0 prints one message and every rank exits with the same code.
 * Failures that are nobody's fault (out of memory, a broken invariant) stop
 * the job with DT_DIE.
 *
 * The one design decision: this header needs no MPI, so layers and data
 * code compile without it. DT_DIE still stops every rank: dt_die (status.c)
 * calls MPI_Abort whenever MPI is up, and plain abort() otherwise. */
#ifndef DT_STATUS_H
#define DT_STATUS_H

#include <stddef.h>

/* Exit codes (documented in dtrain(1)). */
enum {
    DT_OK = 0,
    DT_ERUNTIME = 1, /* a failure during training (I/O, numerics)   */
    DT_EUSAGE = 2,   /* bad command line                              */
    DT_EINPUT = 3,   /* bad input file: missing, not HDF5, bad shapes */
};

typedef struct dt_status {
    int code;        /* DT_OK or one of the codes above */
    char msg[1024];  /* one line, no trailing newline */
} dt_status;

int dt_fail(dt_status *st, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Log host, rank, file:line and the message, then abort every rank
 * (MPI_Abort with DT_ABORT_CODE when MPI is up). The attribute, not C11's
 * _Noreturn, so that the CUDA backend's C++ includes this header too. */
__attribute__((noreturn, format(printf, 3, 4))) void dt_die(const char *file, int line, const char *fmt, ...);

#define DT_DIE(...) dt_die(__FILE__, __LINE__, __VA_ARGS__)

#define DT_ABORT_CODE 1

/* Allocation that cannot reasonably be recovered from: 64-byte aligned,
 * DT_DIE when the memory is not there. */
void *dt_xmalloc(size_t bytes);
void *dt_xcalloc(size_t count, size_t size);

/* Whether s ends with suffix (file kinds are told by their names). */
int dt_ends_with(const char *s, const char *suffix);

#endif
