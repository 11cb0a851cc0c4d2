/* log.c: the rank-aware log prefix behind DT_LOG. */
#include "config.h"
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
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
