/* status.c: filling and agreeing on user errors (see status.h). */
#include "config.h"
#include "runtime/status.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

int dt_fail(dt_status *st, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    st->code = code;
    return code;
}

int dt_status_agree(dt_status *st, MPI_Comm comm)
{
    int rank, mine, first;
    MPI_Comm_rank(comm, &rank);
    mine = st->code != DT_OK ? rank : INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX) return DT_OK;
    MPI_Bcast(st, (int)sizeof *st, MPI_BYTE, first, comm);
    return st->code;
}
