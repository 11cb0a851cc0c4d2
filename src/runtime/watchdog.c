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
    DT_MPI_CHECK(MPI_Isend(w->sendbuf[k], DT_WATCH_ROW, MPI_LONG, 0, tag, w->comm, &w->sendreq[k]));
}

/* Update my row of rank 0's table from field index on (n fields). Both the
 * main thread and (with heartbeats) the watchdog thread report. */
static void put(struct dt_watchdog *w, int index, const long *vals, int n)
{
    pthread_mutex_lock(&w->putlock);
    memcpy(w->mine + index, vals, sizeof(long) * (size_t)n);
    if (w->rank == 0) {
        memcpy(w->table + index, vals, sizeof(long) * (size_t)n); /* rank 0's own row */
    } else if (w->how == DT_WATCH_PUT) {
        DT_MPI_CHECK(MPI_Put(w->mine + index, n, MPI_LONG, 0, (MPI_Aint)(DT_WATCH_ROW * w->rank + index), n, MPI_LONG,
                             w->win));
        DT_MPI_CHECK(MPI_Win_flush(0, w->win));
    } else if (w->how == DT_WATCH_SEND) {
        send_row(w, w->mine, TAG_ROW);
    }
    pthread_mutex_unlock(&w->putlock);
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
        long row[DT_WATCH_ROW];
        DT_MPI_CHECK(MPI_Recv(row, DT_WATCH_ROW, MPI_LONG, s.MPI_SOURCE, s.MPI_TAG, w->comm, MPI_STATUS_IGNORE));
        if (s.MPI_TAG == TAG_BYE) byes++;
        else memcpy(w->table + DT_WATCH_ROW * s.MPI_SOURCE, row, sizeof row);
    }
}

#define SILENT 2.0   /* seconds without a heartbeat: that rank's process is not running */

/* What /proc says of process pid on this host, or NULL when it runs. */
static const char *proc_state(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return "has exited";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p || p[1] != ' ') return NULL;
    if (p[2] == 'T' || p[2] == 't') return "is stopped (SIGSTOP, or a debugger)";
    if (p[2] == 'Z' || p[2] == 'X') return "has exited";
    return NULL;
}

/* One rank that is not where this rank waits, described into out. */
static size_t describe(const struct dt_watchdog *w, int r, double silent, int behind, char *out, size_t len)
{
    volatile const long *row = w->table + DT_WATCH_ROW * r;
    long e = row[DT_ROW_EPOCH], s = row[DT_ROW_STEP];
    const char *doing = row[DT_ROW_WAITING] ? "waiting in a collective" : "outside the collectives";
    char at[64];
    if (s > 0) snprintf(at, sizeof at, "epoch %ld step %ld", e, s);
    else snprintf(at, sizeof at, "no step yet");
    if (silent > SILENT) {
        const int here = row[DT_ROW_HOST] == w->mine[DT_ROW_HOST];
        const char *state = here ? proc_state(row[DT_ROW_PID]) : NULL;
        if (!state) state = here ? "does not report, though it runs" : "is stopped or dead (on another host)";
        return (size_t)snprintf(out, len, "rank %d (pid %ld: silent for %.1f s, its process %s; last at %s, %s)", r,
                                row[DT_ROW_PID], silent, state, at, doing);
    }
    if (behind) return (size_t)snprintf(out, len, "rank %d (%sstill at %s, %s)", r, w->beats ? "alive, " : "", at,
                                        doing);
    return (size_t)snprintf(out, len, "rank %d (%sat this step, outside the collectives)", r, w->beats ? "alive, " : "");
}

/* Rank 0: which ranks are not where this rank waits, and which wait too. */
static void late_ranks(const struct dt_watchdog *w, char *out, size_t len)
{
    volatile const long *t = w->table;
    size_t n = 0;
    int count = 0, nwait = 0;
    char waiting[256] = "";
    size_t nw = 0;
    const double tnow = now();
    out[0] = '\0';
    if (w->how == DT_WATCH_BLIND) {
        snprintf(out, len, "which rank is late is unknown (%s, and MPI gives no MPI_THREAD_MULTIPLE for a "
                 "two-sided report)", w->why);
        return;
    }
    for (int r = 0; r < w->size; r++) {
        long e = t[DT_WATCH_ROW * r], s = t[DT_WATCH_ROW * r + 1], waits = t[DT_WATCH_ROW * r + 2];
        int behind = e < w->epoch || (e == w->epoch && s < w->step);
        int busy = !behind && w->publish_waiting && !waits && r != w->rank;
        double silent = w->beats && r != w->rank ? tnow - w->heard[r] : 0.0;
        if (!behind && !busy && silent <= SILENT) {
            if ((waits || r == w->rank) && nw + 16 < sizeof waiting)
                nw += (size_t)snprintf(waiting + nw, sizeof waiting - nw, "%s%d", nwait++ ? ", " : "", r);
            continue;
        }
        if (n + 160 < len) {
            if (count) n += (size_t)snprintf(out + n, len - n, ", ");
            char one[200];
            describe(w, r, silent, behind, one, sizeof one);
            n += (size_t)snprintf(out + n, len - n, "%s", one);
        }
        count++;
    }
    if (!count) n = (size_t)snprintf(out, len, "every rank reached this step; one of them is stuck outside the collectives");
    if (nwait && n + 40 < len) snprintf(out + n, len - n, "; waiting in the collective: rank%s %s", nwait > 1 ? "s" : "",
                                        waiting);
}

/* This rank's heartbeat into its row; on rank 0, when each rank's last
 * changed. */
static void heartbeat(struct dt_watchdog *w)
{
    const long beat = w->mine[DT_ROW_BEAT] + 1;
    put(w, DT_ROW_BEAT, &beat, 1);
    if (w->rank != 0) return;
    const double t = now();
    for (int r = 0; r < w->size; r++) {
        long b = ((volatile const long *)w->table)[DT_WATCH_ROW * r + DT_ROW_BEAT];
        if (b != w->lastbeat[r]) {
            w->lastbeat[r] = b;
            w->heard[r] = t;
        }
    }
}

/* Rank 0, with heartbeats: whether some rank's have stopped (its process
 * stopped or dead). */
static int some_silent(const struct dt_watchdog *w)
{
    const double t = now();
    for (int r = 1; r < w->size; r++)
        if (t - w->heard[r] > SILENT) return 1;
    return 0;
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
        if ((w->how == DT_WATCH_SEND && w->rank == 0) || w->beats) {
            /* MPI_THREAD_MULTIPLE: this thread may call MPI beside the main one. */
            pthread_mutex_unlock(&w->lock);
            /* A rank that stops first says goodbye while this thread still
             * runs: counted here, or dt_watchdog_stop waits for it forever. */
            if (w->how == DT_WATCH_SEND && w->rank == 0) w->byes += receive_rows(w);
            if (w->beats) heartbeat(w);
            pthread_mutex_lock(&w->lock);
        }
        if (!w->what) continue;
        double waited = now() - w->since;
        if (waited < w->timeout + (w->rank ? GRACE : 0.0)) continue;
        if (w->io && !(w->rank == 0 && w->beats && some_silent(w))) continue; /* a long write, every rank alive */
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

/* This host, as a number (FNV-1a of its name): ranks on rank 0's host can be
 * looked up in /proc. */
static long host_hash(void)
{
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    unsigned long long h = 1469598103934665603ULL;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return (long)(h >> 1);
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
    size_t bytes = w->rank == 0 ? DT_WATCH_ROW * sizeof(long) * (size_t)w->size : 0;
    long *base = NULL;
    if (dt_rma_allocate((MPI_Aint)bytes, sizeof(long), w->comm, &base, &w->win, w->why, sizeof w->why) == 0) {
        w->how = DT_WATCH_PUT;
        w->table = w->rank == 0 ? memset(base, 0, bytes) : NULL;
    } else {
        w->how = dt_mpi_thread_level() == MPI_THREAD_MULTIPLE ? DT_WATCH_SEND : DT_WATCH_BLIND;
        w->table = w->rank == 0 ? dt_xcalloc((size_t)w->size * DT_WATCH_ROW, sizeof(long)) : NULL;
    }
    DT_MPI_CHECK(MPI_Barrier(w->comm)); /* the table is zero before anyone reports */
    if (w->how == DT_WATCH_PUT) DT_MPI_CHECK(MPI_Win_lock_all(0, w->win));
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->putlock, NULL);
    pthread_cond_init(&w->wake, NULL);
    w->beats = w->how != DT_WATCH_BLIND && dt_mpi_thread_level() == MPI_THREAD_MULTIPLE;
    if (w->rank == 0) {
        w->lastbeat = dt_xcalloc((size_t)w->size, sizeof *w->lastbeat);
        w->heard = dt_xcalloc((size_t)w->size, sizeof *w->heard);
        for (int r = 0; r < w->size; r++) w->heard[r] = now();
    }
    const long me[2] = {(long)getpid(), host_hash()};
    put(w, DT_ROW_PID, me, 2);
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
    put(w, DT_ROW_EPOCH, vals, 3);
}

static void enter(struct dt_watchdog *w, const char *what, int tell, int io)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    const int outer = w->depth++ == 0;
    if (outer) {
        w->what = what;
        w->since = now();
        w->told = tell && w->publish_waiting;
        w->io = io;
    }
    pthread_mutex_unlock(&w->lock);
    const long one = 1;
    if (outer && w->told) put(w, DT_ROW_WAITING, &one, 1);
}

void dt_watchdog_enter(struct dt_watchdog *w, const char *what) { enter(w, what, 1, 0); }
void dt_watchdog_enter_quiet(struct dt_watchdog *w, const char *what) { enter(w, what, 0, 0); }
void dt_watchdog_enter_io(struct dt_watchdog *w, const char *what) { enter(w, what, 1, 1); }

void dt_watchdog_leave(struct dt_watchdog *w)
{
    if (!w->on) return;
    pthread_mutex_lock(&w->lock);
    const int outer = w->depth > 0 && --w->depth == 0;
    if (outer) w->what = NULL;
    pthread_mutex_unlock(&w->lock);
    const long zero = 0;
    if (outer && w->told) put(w, DT_ROW_WAITING, &zero, 1);
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
    pthread_mutex_destroy(&w->putlock);
    pthread_cond_destroy(&w->wake);
    free(w->lastbeat);
    free(w->heard);
    w->lastbeat = NULL;
    w->heard = NULL;
    if (w->how == DT_WATCH_PUT) {
        DT_MPI_CHECK(MPI_Win_unlock_all(w->win));
        DT_MPI_CHECK(MPI_Win_free(&w->win));
    } else {
        if (w->how == DT_WATCH_SEND) {
            /* Messages from one rank arrive in order: after its goodbye, none
             * of its reports is left unreceived on the communicator. */
            if (w->rank != 0) {
                const long bye[DT_WATCH_ROW] = {0};
                send_row(w, bye, TAG_BYE);
            } else {
                while (w->byes < w->size - 1) w->byes += receive_rows(w);
            }
            for (int k = 0; k < NSEND; k++) DT_MPI_CHECK(MPI_Wait(&w->sendreq[k], MPI_STATUS_IGNORE));
        }
        free(w->table);
    }
    w->table = NULL;
    DT_MPI_CHECK(MPI_Comm_free(&w->comm));
    w->on = 0;
}
