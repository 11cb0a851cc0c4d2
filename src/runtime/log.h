/* log.h: rank-aware diagnostics.
 *
 * DT_LOG(level, ...) prints "time host:rank file:line: message" to stderr for
 * diagnostics. User-facing progress is not logged here: rank 0 prints it. */
#ifndef DT_LOG_H
#define DT_LOG_H

enum dt_log_level { DT_LOG_ERROR = 0, DT_LOG_WARN = 1, DT_LOG_INFO = 2, DT_LOG_DEBUG = 3 };

extern int dt_log_rank;   /* set once MPI is up; -1 before */
extern int dt_log_level;  /* messages above this level are dropped */

void dt_log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define DT_LOG(level, ...) \
    do { if ((level) <= dt_log_level) dt_log((level), __FILE__, __LINE__, __VA_ARGS__); } while (0)

#endif
