/* watchdog.h: --stall-timeout, the end of "it just hangs".
 *
 * A thread per rank watches its main thread: before a call that waits for
 * other ranks (the gradient all-reduce, the step's consistency check, the
 * epoch's end, validation's mean) the main thread says so
 * (dt_watchdog_enter), after it says it is back. Waiting
 * longer than the timeout means some rank is not coming: the watchdog prints
 * one error line and aborts the whole job (MPI_Abort), so the scheduler gets
 * its nodes back instead of a job that waits until its walltime.
 *
 * Which ranks are late: at the start of every step each rank reports
 * (epoch, step, waiting) to rank 0, whose watchdog fires first and reads the
 * table of reports: the ranks that have not reached the step the others
 * wait in, or that are not waiting at all. With MPI_THREAD_MULTIPLE each
 * rank's watchdog thread also reports a heartbeat every 200 ms, so rank 0
 * tells a rank whose process has stopped (SIGSTOP, a dead host: its
 * watchdog falls silent too; on rank 0's host /proc says which) from one
 * that is alive but stuck outside the collectives, and from the ranks
 * waiting in one. Other ranks fire a few seconds
 * later, in case rank 0 itself is the one stuck. Reports travel one of two
 * ways, chosen at start (dt_watchdog_how says which):
 *   - one-sided: an MPI_Put and flush into a window on rank 0, no
 *     synchronisation; the watchdog thread makes no MPI call but MPI_Abort;
 *   - two-sided, where the MPI cannot make that window (one-sided windows
 *     across nodes over TCP, say): an MPI_Isend to rank 0, whose watchdog
 *     thread receives them every 200 ms. That needs MPI_THREAD_MULTIPLE;
 *     without it the watchdog still ends the job, but cannot name the late
 *     ranks. */
#ifndef DT_WATCHDOG_H
#define DT_WATCHDOG_H

#include <mpi.h>
#include <pthread.h>

#include "runtime/status.h"

struct dt_watchdog {
    int on;
    int rank, size;
    double timeout;           /* seconds */
    int how;                  /* DT_WATCH_PUT, DT_WATCH_SEND or DT_WATCH_BLIND */
    MPI_Comm comm;            /* a duplicate for the reports */
    MPI_Win win;
    long *table;              /* rank 0: [size][DT_WATCH_ROW]; NULL elsewhere */
    long mine[6];             /* this rank's row as it last reported it (under putlock) */
    pthread_mutex_t putlock;  /* the main and watchdog threads both report */
    int beats;                /* the watchdog thread reports a heartbeat (MPI_THREAD_MULTIPLE) */
    long *lastbeat;           /* rank 0: each rank's last heartbeat seen, and when */
    double *heard;
    long sendbuf[8][6];       /* two-sided: reports in flight, a ring */
    MPI_Request sendreq[8];
    int nsent;
    int byes;                 /* rank 0, two-sided: goodbyes received (by either thread) */
    char why[160];            /* why the window could not be made (not DT_WATCH_PUT) */
    int publish_waiting;      /* enter/leave also update the table (no other thread uses MPI then) */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int quit;
    const char *what;         /* what the main thread waits in; NULL when it does not */
    int depth;                /* waits entered and not yet left (they nest) */
    int told;                 /* the outermost wait was published to the table */
    int io;                   /* the outermost wait is enter_io's */
    double since;             /* MPI_Wtime when it started waiting */
    long epoch, step;         /* the step it is in (1-based for messages) */
};

enum { DT_WATCH_PUT = 0, DT_WATCH_SEND = 1, DT_WATCH_BLIND = 2 };
/* A rank's row: epoch, step, waiting (in a collective), heartbeat (its
 * watchdog thread's, every 200 ms), pid, a hash of its host name. */
enum { DT_WATCH_ROW = 6, DT_ROW_EPOCH = 0, DT_ROW_STEP, DT_ROW_WAITING, DT_ROW_BEAT, DT_ROW_PID, DT_ROW_HOST };

/* Collective over comm. timeout <= 0: off (every other call is a no-op).
 * publish_waiting: the main thread is the only one calling MPI when it
 * enters and leaves waits (no overlap thread). */
int dt_watchdog_start(struct dt_watchdog *w, MPI_Comm comm, double timeout, int publish_waiting, dt_status *st);
/* Main thread, at the start of a step, when no other thread calls MPI. */
void dt_watchdog_step(struct dt_watchdog *w, long epoch, long step);
/* Waits nest: inside one, another enter and its leave change nothing (the
 * outer wait's name and clock stand). */
void dt_watchdog_enter(struct dt_watchdog *w, const char *what);
void dt_watchdog_leave(struct dt_watchdog *w);
/* As enter, but the table is not told (many short waits in a step: fsdp's
 * gathers); the timeout and the message are the same. Left by leave. */
void dt_watchdog_enter_quiet(struct dt_watchdog *w, const char *what);
/* As enter, for a wait that may rightly last longer than the timeout (a
 * checkpoint's collective write): it ends the job only where rank 0 hears
 * heartbeats (MPI_THREAD_MULTIPLE) and some rank's have stopped (its
 * process stopped or dead), after the timeout. Left by leave. */
void dt_watchdog_enter_io(struct dt_watchdog *w, const char *what);
/* Any thread, during a wait: this rank is making progress in it (a
 * parameter server applying updates for a whole epoch), so the timeout
 * counts from now. */
void dt_watchdog_alive(struct dt_watchdog *w);
/* Collective. */
void dt_watchdog_stop(struct dt_watchdog *w);

#endif
