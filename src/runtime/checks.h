/* checks.h: abort-every-rank checks around MPI and HDF5 calls, and the
 * agreement of every rank on a user error.
 *
 * The checks are for failures that are not the user's fault (a library
 * refusing a call that should work). They print host, rank, file:line and
 * the library's own error string, then MPI_Abort so no rank is left waiting
 * in a collective. User errors go through dt_status (status.h), agreed on
 * here. The MPI half of status.h: code that must not need mpi.h (nn/, most
 * of data/) includes status.h alone. */
#ifndef DT_CHECKS_H
#define DT_CHECKS_H

#include <mpi.h>

#include "runtime/status.h"

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

/* Collective over comm: if any rank holds an error, every rank ends up holding
 * the lowest such rank's error. Returns the agreed code. */
int dt_status_agree(dt_status *st, MPI_Comm comm);

#endif
