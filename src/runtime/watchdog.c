/* watchdog.c: the stall watchdog (see watchdog.h). */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "runtime/rma.h"
#include "runtime/watchdog.h"

#define GRACE 5.0    /* seconds other ranks give rank 0 to report first */
#define TAG_ROW 1    /* two-sided: a report */
#define TAG_BYE 2    /* two-sided: the last message of a rank */
#define NSEND ((int)(sizeof ((struct dt_watchdog *)0)->sendreq / sizeof(MPI_Request)))

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Two-sided: a report to rank 0 from the ring of send buffers. The slot's
 * previous send (24 bytes, eager) completed long ago. */
static void send_row(struct dt_watchdog *w, const long *row, int tag)
{
    int k = w->nsent++ % NSEND;
    DT_MPI_CHECK(MPI_Wait(&w->sendreq[k], MPI_STATUS_IGNORE));
    memcpy(w->sendbuf[k], row, sizeof w->sendbuf[k]);
    DT_MPI_CHECK(MPI_Isend(w->sendbuf[k], 3, MPI_LONG, 0, tag, w->comm, &w->sendreq[k]));
}

/* Update my row of rank 0's table from field index on (n fields). */
static void put(struct dt_watchdog *w, int index, const long *vals, int n)
{
    if (w->rank == 0) {
        memcpy(w->table + index, vals, sizeof(long) * (size_t)n); /* rank 0's own row */
        return;
    }
    if (w->how == DT_WATCH_PUT) {
        DT_MPI_CHECK(MPI_Put(vals, n, MPI_LONG, 0, (MPI_Aint)(3 * w->rank + index), n, MPI_LONG, w->win));
        DT_MPI_CHECK(MPI_Win_flush(0, w->win));
    } else if (w->how == DT_WATCH_SEND) {
        long row[3] = {w->epoch, w->step, 0};
        memcpy(row + index, vals, sizeof(long) * (size_t)n);
        send_row(w, row, TAG_ROW);
    }
}

/* Rank 0's watchdog thread, two-sided: take every report that has arrived.
 * Returns the number of ranks that said goodbye. */
static int receive_rows(struct dt_watchdog *w)
{
    int byes = 0;
    for (;;) {
        int flag;
        MPI_Status s;
        DT_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->comm, &flag, &s));
        if (!flag) return byes;
        long row[3];
        DT_MPI_CHECK(MPI_Recv(row, 3, MPI_LONG, s.MPI_SOURCE, s.MPI_TAG, w->comm, MPI_STATUS_IGNORE));
        if (s.MPI_TAG == TAG_BYE) byes++;
        else memcpy(w->table + 3 * s.MPI_SOURCE, row, sizeof row);
    }
}

/* Rank 0: which ranks are not where this rank waits. */
static void late_ranks(const struct dt_watchdog *w, char *out, size_t len)
{
    volatile const long *t = w->table;
    size_t n = 0;
    int count = 0;
    out[0] = '\0';
    if (w->how == DT_WATCH_BLIND) {
        snprintf(out, len, "which rank is late is unknown (%s, and MPI gives no MPI_THREAD_MULTIPLE for a "
                 "two-sided report)", w->why);
        return;
    }
    for (int r = 0; r < w->size; r++) {
        long e = t[3 * r], s = t[3 * r + 1], waiting = t[3 * r + 2];
        int behind = e < w->epoch || (e == w->epoch && s < w->step);
        int busy = !behind && w->publish_waiting && !waiting && r != w->rank;
        if (!behind && !busy) continue;
        count++;
        if (n + 80 < len) {
            if (behind && s > 0)
                n += (size_t)snprintf(out + n, len - n, "%srank %d (last at epoch %ld step %ld)", count > 1 ? ", " : "",
                                      r, e, s);
            else if (behind)
                n += (size_t)snprintf(out + n, len - n, "%srank %d (no step yet)", count > 1 ? ", " : "", r);
            else
                n += (size_t)snprintf(out + n, len - n, "%srank %d (at this step, not waiting)", count > 1 ? ", " : "", r);
        }
    }
    if (!count) snprintf(out, len, "every rank reached this step; one of them is stuck outside the collectives");
}

static void *watch(void *arg)
{
    struct dt_watchdog *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->quit) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (w->quit) continue;
        if (w->how == DT_WATCH_SEND && w->rank == 0) {
            /* MPI_THREAD_MULTIPLE: this thread may call MPI beside the main one. */
            pthread_mutex_unlock(&w->lock);
            receive_rows(w);
            pthread_mutex_lock(&w->lock);
        }
        if (!w->what) continue;
        double waited = now() - w->since;
        if (waited < w->timeout + (w->rank ? GRACE : 0.0)) continue;
        char late[1024];
        if (w->rank == 0) late_ranks(w, late, sizeof late);
        else snprintf(late, sizeof late, "rank 0 did not end the job first, so it may be the one stuck");
        fprintf(stderr, "dtrain: error: rank %d waited %.0f s in %s at epoch %ld step %ld (--stall-timeout %g): "
                "not arrived: %s; ending the job\n", w->rank, waited, w->what, w->epoch, w->step, w->timeout, late);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, DT_ERUNTIME);
        _exit(DT_ERUNTIME);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int dt_watchdog_start(struct dt_watchdog *w, MPI_Comm comm, double timeout, int publish_waiting, dt_status *st)
{
    memset(w, 0, sizeof *w);
    if (timeout <= 0.0) return DT_OK;
    w->on = 1;
    w->timeout = timeout;
    w->publish_waiting = publish_waiting;
    DT_MPI_CHECK(MPI_Comm_dup(comm, &w->comm));
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    for (int k = 0; k < NSEND; k++) w->sendreq[k] = MPI_REQUEST_NULL;
    size_t bytes = w->rank == 0 ? 3 * sizeof(long) * (size_t)w->size : 0;
    long *base = NULL;
    if (dt_rma_allocate((MPI_Aint)bytes, sizeof(long), w->comm, &base, &w->win, w->why, sizeof w->why) == 0) {
        w->how = DT_WATCH_PUT;
        w->table = w->rank == 0 ? memset(base, 0, bytes) : NULL;
    } else {
        w->how = dt_mpi_thread_level() == MPI_THREAD_MULTIPLE ? DT_WATCH_SEND : DT_WATCH_BLIND;
        w->table = w->rank == 0 ? dt_xcalloc((size_t)w->size * 3, sizeof(long)) : NULL;
    }
    DT_MPI_CHECK(MPI_Barrier(w->comm)); /* the table is zero before anyone reports */
    if (w->how == DT_WATCH_PUT) DT_MPI_CHECK(MPI_Win_lock_all(0, w->win));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    /* The thread inherits the signal mask: SIGUSR1/SIGTERM stay with the main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, watch, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return dt_fail(st, DT_ERUNTIME, "--stall-timeout: cannot start the watchdog thread: %s", strerror(rc));
    return DT_OK;
}

void dt_watchdog_step(struct dt_watchdog *w, long epoch, long step)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    w->epoch = epoch;
    w->step = step;
    pthread_mutex_unlock(&w->lock);
    const long vals[3] = {epoch, step, 0};
    put(w, 0, vals, 3);
}

void dt_watchdog_enter(struct dt_watchdog *w, const char *what)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    w->what = what;
    w->since = now();
    pthread_mutex_unlock(&w->lock);
    const long one = 1;
    if (w->publish_waiting) put(w, 2, &one, 1);
}

void dt_watchdog_leave(struct dt_watchdog *w)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    w->what = NULL;
    pthread_mutex_unlock(&w->lock);
    const long zero = 0;
    if (w->publish_waiting) put(w, 2, &zero, 1);
}

void dt_watchdog_alive(struct dt_watchdog *w)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    w->since = now();
    pthread_mutex_unlock(&w->lock);
}

void dt_watchdog_stop(struct dt_watchdog *w)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    w->quit = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    if (w->how == DT_WATCH_PUT) {
        DT_MPI_CHECK(MPI_Win_unlock_all(w->win));
        DT_MPI_CHECK(MPI_Win_free(&w->win));
    } else {
        if (w->how == DT_WATCH_SEND) {
            /* Messages from one rank arrive in order: after its goodbye, none
             * of its reports is left unreceived on the communicator. */
            if (w->rank != 0) {
                const long bye[3] = {0, 0, 0};
                send_row(w, bye, TAG_BYE);
            } else {
                for (int byes = 0; byes < w->size - 1;) byes += receive_rows(w);
            }
            for (int k = 0; k < NSEND; k++) DT_MPI_CHECK(MPI_Wait(&w->sendreq[k], MPI_STATUS_IGNORE));
        }
        free(w->table);
    }
    w->table = NULL;
    DT_MPI_CHECK(MPI_Comm_free(&w->comm));
    w->on = 0;
}
