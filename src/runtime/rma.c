/* rma.c: one-sided windows created with errors returned (see rma.h). */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "runtime/rma.h"

/* MPI_Win_allocate or _shared with errors returned on comm meanwhile. */
static int allocate_returning(int shared, MPI_Aint bytes, int disp_unit, MPI_Info info, MPI_Comm comm, void *base,
                              MPI_Win *win)
{
    MPI_Errhandler old;
    DT_MPI_CHECK(MPI_Comm_get_errhandler(comm, &old));
    DT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    int rc = shared ? MPI_Win_allocate_shared(bytes, disp_unit, info, comm, base, win)
                    : MPI_Win_allocate(bytes, disp_unit, info, comm, base, win);
    DT_MPI_CHECK(MPI_Comm_set_errhandler(comm, old));
    MPI_Errhandler_free(&old);
    if (rc != MPI_SUCCESS) *win = MPI_WIN_NULL;
    return rc;
}

int dt_rma_allocate_shared(MPI_Aint bytes, int disp_unit, MPI_Info info, MPI_Comm comm, void *base, MPI_Win *win)
{
    return allocate_returning(1, bytes, disp_unit, info, comm, base, win);
}

int dt_rma_allocate(MPI_Aint bytes, int disp_unit, MPI_Comm comm, void *base, MPI_Win *win, char *why, size_t len)
{
    int rank, rc = MPI_SUCCESS;
    char msg[MPI_MAX_ERROR_STRING] = "";
    const char *off = getenv("DTRAIN_NO_RMA");
    MPI_Comm_rank(comm, &rank);
    *win = MPI_WIN_NULL;
    if (off && *off && strcmp(off, "0") != 0) {
        rc = MPI_ERR_WIN;
        snprintf(msg, sizeof msg, "one-sided windows turned off (DTRAIN_NO_RMA=%s)", off);
    } else {
        rc = allocate_returning(0, bytes, disp_unit, MPI_INFO_NULL, comm, base, win);
        if (rc != MPI_SUCCESS) {
            int n = 0;
            MPI_Error_string(rc, msg, &n);
            msg[n < (int)sizeof msg ? n : (int)sizeof msg - 1] = '\0';
        }
    }
    /* The lowest failing rank's reason, to everyone. */
    int mine = rc != MPI_SUCCESS ? rank : INT_MAX, first;
    DT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == INT_MAX) return 0;
    DT_MPI_CHECK(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, comm));
    if (why && len) snprintf(why, len, "%s", msg);
    /* A window that came up on some ranks only cannot be freed (MPI_Win_free
     * is collective over all of them); it is left alone. MPI libraries fail
     * the selection on every rank alike, so this is not seen in practice. */
    *win = MPI_WIN_NULL;
    return 1;
}

int dt_mpi_thread_level(void)
{
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level;
}

const char *dt_mpi_thread_level_name(int level)
{
    return level == MPI_THREAD_MULTIPLE     ? "MPI_THREAD_MULTIPLE"
           : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
           : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                                            : "MPI_THREAD_SINGLE";
}
