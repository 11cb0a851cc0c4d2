/* ckpt_async.c: --checkpoint-async's writer thread (see ckpt_async.h).
 *
 * The writer runs at the process's priority, on purpose: at nice 19 it was
 * preempted while holding Open MPI's internal locks, and training's
 * all-reduces waited for it (53 s a write; bench/README-checkpoint.md). */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "train/ckpt_async.h"

struct dt_ckpt_async {
    MPI_Comm comm;              /* the writer's own duplicate */
    pthread_t thread;
    int inflight;               /* started, not yet collected (main thread) */
    int threaded;               /* on a thread, to join (else written in place) */
    atomic_int done;            /* the thread has finished this write */
    /* the write in flight: set before the thread starts, read after the join */
    struct dt_ckpt_job job;
    void *spare;                /* the last job written, kept for reuse */
    char dir[4096];
    int keep, epoch;
    long long step;
    dt_status st;
    char path[4096];
    double seconds, last, total;
    long writes;
};

struct dt_ckpt_async *dt_ckpt_async_new(MPI_Comm comm)
{
    struct dt_ckpt_async *a = dt_xcalloc(1, sizeof *a);
    DT_MPI_CHECK(MPI_Comm_dup(comm, &a->comm));
    atomic_init(&a->done, 0);
    return a;
}

static void *writer(void *arg)
{
    struct dt_ckpt_async *a = arg;
    double t0 = MPI_Wtime();
    a->job.write(a->job.job, a->comm, a->dir, a->keep, a->path, sizeof a->path, &a->st);
    a->seconds = MPI_Wtime() - t0;
    atomic_store(&a->done, 1);
    return NULL;
}

void dt_ckpt_async_start(struct dt_ckpt_async *a, struct dt_ckpt_job job, const char *dir, int keep, int epoch,
                         long long step)
{
    a->job = job;
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    a->keep = keep;
    a->epoch = epoch;
    a->step = step;
    memset(&a->st, 0, sizeof a->st);
    a->path[0] = '\0';
    atomic_store(&a->done, 0);
    a->inflight = 1;
    a->threaded = pthread_create(&a->thread, NULL, writer, a) == 0;
    if (!a->threaded) writer(a); /* no thread to be had: the same write, here and now */
}

int dt_ckpt_async_inflight(const struct dt_ckpt_async *a) { return a && a->inflight; }

int dt_ckpt_async_busy(const struct dt_ckpt_async *a) { return a && a->inflight && !atomic_load(&a->done); }

int dt_ckpt_async_wait(struct dt_ckpt_async *a, dt_status *st)
{
    if (!a || !a->inflight) return DT_OK;
    if (a->threaded) pthread_join(a->thread, NULL);
    a->inflight = a->threaded = 0;
    if (a->spare) a->job.release(a->spare);
    a->spare = a->job.job; /* written: the caller may fill it again */
    a->job.job = NULL;
    a->last = a->seconds;
    a->total += a->seconds;
    a->writes++;
    if (a->st.code == DT_OK) return DT_OK;
    char msg[sizeof a->st.msg], when[64];
    snprintf(msg, sizeof msg, "%s", a->st.msg);
    if (a->step > 0) snprintf(when, sizeof when, "epoch %d step %lld", a->epoch + 1, a->step);
    else snprintf(when, sizeof when, "the end of epoch %d", a->epoch);
    return dt_fail(st, a->st.code, "%s (--checkpoint-async: the state of %s, written on the writer thread)", msg,
                   when);
}

void *dt_ckpt_async_spare(struct dt_ckpt_async *a)
{
    void *job = a ? a->spare : NULL;
    if (a) a->spare = NULL;
    return job;
}

const char *dt_ckpt_async_path(const struct dt_ckpt_async *a) { return a ? a->path : ""; }

double dt_ckpt_async_last_seconds(const struct dt_ckpt_async *a) { return a ? a->last : 0.0; }

void dt_ckpt_async_totals(const struct dt_ckpt_async *a, long *writes, double *seconds)
{
    *writes = a ? a->writes : 0;
    *seconds = a ? a->total : 0.0;
}

void dt_ckpt_async_free(struct dt_ckpt_async *a)
{
    if (!a) return;
    if (a->inflight && a->threaded) pthread_join(a->thread, NULL);
    if (a->job.job) a->job.release(a->job.job);
    if (a->spare) a->job.release(a->spare);
    MPI_Comm_free(&a->comm);
    free(a);
}
