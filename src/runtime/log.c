/* log.c: the rank-aware log prefix behind DT_LOG. */
#include "config.h"
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

int dt_log_rank = -1;
int dt_log_level = DT_LOG_WARN;

void dt_log(int level, const char *file, int line, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    char host[64] = "?", stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    gethostname(host, sizeof host - 1);
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    va_start(ap, fmt);
    fprintf(stderr, "%s.%03ld %s:%d %s:%d: %s: ", stamp, ts.tv_nsec / 1000000L, host,
            dt_log_rank, file, line, names[level < 0 ? 0 : level > 3 ? 3 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- checks.h: aborting every rank ---------------------------------------- */
#include <stdlib.h>
#include <mpi.h>
#include "runtime/checks.h"

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
