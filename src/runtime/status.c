/* status.c: filling and agreeing on user errors, and stopping every rank
 * (see status.h and checks.h). */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "runtime/log.h"
#include "runtime/status.h"

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

void dt_die(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    int up = 0, down = 0;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dt_log(DT_LOG_ERROR, file, line, "%s", msg);
    fflush(stderr);
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, DT_ABORT_CODE);
    abort();
}

void *dt_xmalloc(size_t bytes)
{
    void *p = NULL;
    /* 64-byte alignment: whole cache lines and AVX-512 vectors. */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) DT_DIE("out of memory allocating %zu bytes", bytes);
    return p;
}

void *dt_xcalloc(size_t count, size_t size)
{
    void *p = dt_xmalloc(count * size);
    memset(p, 0, count * size);
    return p;
}

int dt_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}
