/* status.h: user errors as values, agreed on by every rank.
 *
 * Anything the user can cause (a flag, a file, a shape, a label) fills a
 * dt_status and returns up to a point that can report it. dt_status_agree()
 * makes every rank learn of an error found by any rank, so rank 0 prints one
 * message and every rank exits with the same code: no hang, no duplicates. */
#ifndef DT_STATUS_H
#define DT_STATUS_H

#include <mpi.h>

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

/* Collective over comm: if any rank holds an error, every rank ends up holding
 * the lowest such rank's error. Returns the agreed code. */
int dt_status_agree(dt_status *st, MPI_Comm comm);

#endif
