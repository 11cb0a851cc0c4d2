/* watchdog.h: --stall-timeout, the end of "it just hangs".
 *
 * A thread per rank watches its main thread: before a call that waits for
 * other ranks (the gradient all-reduce, an epoch's agreement) the main
 * thread says so (dt_watchdog_enter), after it says it is back. Waiting
 * longer than the timeout means some rank is not coming: the watchdog prints
 * one error line and aborts the whole job (MPI_Abort), so the scheduler gets
 * its nodes back instead of a job that waits until its walltime.
 *
 * Which ranks are late: at the start of every step each rank puts (epoch,
 * step, waiting) into a window on rank 0 (one MPI_Put and flush, no
 * synchronisation), and rank 0's watchdog, which fires first, reads that
 * table from its own memory: the ranks that have not reached the step the
 * others wait in, or that are not waiting at all. Other ranks fire a few
 * seconds later, in case rank 0 itself is the one stuck. The watchdog thread
 * makes no MPI call but MPI_Abort. */
#ifndef DT_WATCHDOG_H
#define DT_WATCHDOG_H

#include <mpi.h>
#include <pthread.h>

#include "status.h"

struct dt_watchdog {
    int on;
    int rank, size;
    double timeout;           /* seconds */
    MPI_Comm comm;            /* a duplicate for the window */
    MPI_Win win;
    long *table;              /* rank 0: [size][3] epoch, step, waiting; NULL elsewhere */
    int publish_waiting;      /* enter/leave also update the table (no other thread uses MPI then) */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int quit;
    const char *what;         /* what the main thread waits in; NULL when it does not */
    double since;             /* MPI_Wtime when it started waiting */
    long epoch, step;         /* the step it is in (1-based for messages) */
};

/* Collective over comm. timeout <= 0: off (every other call is a no-op).
 * publish_waiting: the main thread is the only one calling MPI when it
 * enters and leaves waits (no overlap thread). */
int dt_watchdog_start(struct dt_watchdog *w, MPI_Comm comm, double timeout, int publish_waiting, dt_status *st);
/* Main thread, at the start of a step, when no other thread calls MPI. */
void dt_watchdog_step(struct dt_watchdog *w, long epoch, long step);
void dt_watchdog_enter(struct dt_watchdog *w, const char *what);
void dt_watchdog_leave(struct dt_watchdog *w);
/* Collective. */
void dt_watchdog_stop(struct dt_watchdog *w);

#endif
