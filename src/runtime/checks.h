/* checks.h: abort-every-rank checks around library calls.
 *
 * These are for failures that are not the user's fault (a library refusing a
 * call that should work). They print host, rank, file:line and the library's
 * own error string, then MPI_Abort so no rank is left waiting in a
 * collective. User errors go through dt_status (status.h) instead. */
#ifndef DT_CHECKS_H
#define DT_CHECKS_H

#include <mpi.h>
#include <stddef.h>

#include "runtime/log.h"

_Noreturn void dt_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define DT_DIE(...) dt_die(__FILE__, __LINE__, __VA_ARGS__)

#define DT_MPI_CHECK(call)                                                   \
    do {                                                                     \
        int dt_rc_ = (call);                                                 \
        if (dt_rc_ != MPI_SUCCESS) {                                         \
            char dt_msg_[MPI_MAX_ERROR_STRING];                              \
            int dt_len_ = 0;                                                 \
            MPI_Error_string(dt_rc_, dt_msg_, &dt_len_);                     \
            dt_die(__FILE__, __LINE__, "%s failed: %s", #call, dt_msg_);     \
        }                                                                    \
    } while (0)

/* HDF5 calls return a negative value on failure. */
#define DT_H5_CHECK(call)                                                    \
    do {                                                                     \
        if ((long long)(call) < 0)                                           \
            dt_die(__FILE__, __LINE__, "%s failed (HDF5 error stack above)", #call); \
    } while (0)

/* oneDNN calls return dnnl_status_t. */
#define DT_DNNL_CHECK(call)                                                  \
    do {                                                                     \
        int dt_rc_ = (int)(call);                                            \
        if (dt_rc_ != 0)                                                     \
            dt_die(__FILE__, __LINE__, "%s failed: oneDNN status %d", #call, dt_rc_); \
    } while (0)

#define DT_ABORT_CODE 1

/* Allocation that cannot reasonably be recovered from. */
void *dt_xmalloc(size_t bytes);
void *dt_xcalloc(size_t count, size_t size);

#endif
