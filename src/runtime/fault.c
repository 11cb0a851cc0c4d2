/* fault.c: the tests' fault injection (see fault.h). */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/fault.h"

#define MAX_OVERFLOWS 64
#define MAX_SLOW 8

static struct {
    long overflow[MAX_OVERFLOWS];
    int noverflow;
    int read_rank;
    long read_at;
    int stall_rank;
    long stall_update;     /* or the epoch (from 1), where stall_phase is set */
    char stall_phase[16];  /* "validation", "epoch-end", "checkpoint" (+ "-stop", "-slow"); "" for an update */
    int ckpt_crash;
    char slow_name[MAX_SLOW][16];
    long slow_ms[MAX_SLOW];
    int nslow;
} fault;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    const char *s = getenv("DTRAIN_TEST_OVERFLOW_STEPS");
    for (const char *p = s; p && *p && fault.noverflow < MAX_OVERFLOWS;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        fault.overflow[fault.noverflow++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    s = getenv("DTRAIN_TEST_READ_ERROR");
    if (!s || sscanf(s, "%d:%ld", &fault.read_rank, &fault.read_at) != 2) fault.read_at = 0;
    s = getenv("DTRAIN_TEST_STALL");
    if (!s) fault.stall_update = 0;
    else if (sscanf(s, "%d:%15[a-z-]:%ld", &fault.stall_rank, fault.stall_phase, &fault.stall_update) != 3) {
        fault.stall_phase[0] = '\0'; /* the update form, R:U */
        if (sscanf(s, "%d:%ld", &fault.stall_rank, &fault.stall_update) != 2) fault.stall_update = 0;
    }
    s = getenv("DTRAIN_TEST_CKPT_CRASH");
    fault.ckpt_crash = s && !strcmp(s, "1");
    s = getenv("DTRAIN_TEST_SLOW_ALLREDUCE");
    for (const char *p = s; p && *p && fault.nslow < MAX_SLOW;) {
        int len = 0;
        long ms = 0;
        if (sscanf(p, "%15[a-z]:%ld%n", fault.slow_name[fault.nslow], &ms, &len) != 2) break;
        fault.slow_ms[fault.nslow++] = ms;
        p += len;
        if (*p == ',') p++;
    }
}

/* Reads the variables once; every query calls it. */
static void init(void) { pthread_once(&once, read_env); }

int dt_fault_overflow_at(long global_step)
{
    init();
    for (int i = 0; i < fault.noverflow; i++)
        if (fault.overflow[i] == global_step) return 1;
    return 0;
}

long dt_fault_read_error_at(int rank)
{
    init();
    return fault.read_at && fault.read_rank == rank ? fault.read_at : 0;
}

void dt_fault_stall_point(int rank, long next_update)
{
    init();
    if (fault.stall_update && !fault.stall_phase[0] && next_update == fault.stall_update && rank == fault.stall_rank)
        sleep(600); /* this rank stops coming; the others' watchdog must end the job */
}

void dt_fault_stall_phase(int rank, const char *phase, long epoch)
{
    init();
    const size_t n = strlen(phase);
    if (!fault.stall_update || epoch != fault.stall_update || rank != fault.stall_rank ||
        strncmp(fault.stall_phase, phase, n))
        return;
    const char *how = fault.stall_phase + n;
    if (!*how) sleep(600);
    else if (!strcmp(how, "-stop")) raise(SIGSTOP); /* every thread: as a dead host's process, silent */
    else if (!strcmp(how, "-slow")) sleep(8);
}

void dt_fault_ckpt_crash_point(void)
{
    init();
    if (fault.ckpt_crash) _exit(9);
}

long dt_fault_timeline_cap(void)
{
    const char *s = getenv("DTRAIN_TEST_TIMELINE_CAP"); /* read at each open: a test sets it between runs */
    return s ? strtol(s, NULL, 10) : 0;
}

void dt_fault_slow_allreduce(const char *algo)
{
    init();
    for (int i = 0; i < fault.nslow; i++)
        if (!strcmp(fault.slow_name[i], algo)) usleep((useconds_t)(fault.slow_ms[i] * 1000));
}

double dt_fault_mem_available(void)
{
    const char *s = getenv("DTRAIN_TEST_MEM_AVAILABLE");
    return s && *s ? atof(s) : -1.0;
}
