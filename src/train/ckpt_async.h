/* ckpt_async.h: --checkpoint-async, a checkpoint written on a thread of its
 * own while training goes on.
 *
 * The main thread copies the state into memory between two steps (a
 * snapshot: train.h's dt_trainer_snapshot) and hands it over; the writer
 * thread then writes the same file a synchronous checkpoint writes, with
 * the same collective HDF5 calls, temporary name, fsync and renames
 * (checkpoint/checkpoint.h), on a duplicate of the trainer's communicator
 * so that its collectives never meet the training's. That needs
 * MPI_THREAD_MULTIPLE; HDF5 itself is shared through runtime/h5lock.h.
 *
 * The one rule: at most one write is in flight. A checkpoint due while one
 * is still being written waits for it (that wait is the cost the caller
 * counts as blocked time). Whether the write has ended is a per-rank flag
 * that the ranks agree on (MAX) at every step; once it has ended on every
 * rank, every rank collects it at that same step, so a failed write is
 * reported by all of them at once, at the first step after it ended. */
#ifndef DT_CKPT_ASYNC_H
#define DT_CKPT_ASYNC_H

#include <mpi.h>
#include <stddef.h>

#include "runtime/status.h"

struct dt_ckpt_async;

/* What the thread writes: job (a train.h snapshot) through write, which
 * runs collectively over the writer's communicator; release(job) frees it.
 * Passed in, so that this file needs nothing of the trainer's. */
struct dt_ckpt_job {
    void *job;
    int (*write)(const void *job, MPI_Comm comm, const char *dir, int keep, char *path, size_t pathlen,
                 dt_status *st);
    void (*release)(void *job);
};

/* Collective over comm: a writer with its own duplicate of comm. */
struct dt_ckpt_async *dt_ckpt_async_new(MPI_Comm comm);
/* Writes job (taken over; kept as the spare once collected) into dir, keeping keep
 * checkpoints; no write may be in flight. epoch (epochs done) and step (in
 * the epoch in progress) say where it was taken, for the messages. */
void dt_ckpt_async_start(struct dt_ckpt_async *a, struct dt_ckpt_job job, const char *dir, int keep, int epoch,
                         long long step);
/* A write was started and not yet collected (the same on every rank). */
int dt_ckpt_async_inflight(const struct dt_ckpt_async *a);
/* This rank's writer is still at it (differs between ranks: agree on it). */
int dt_ckpt_async_busy(const struct dt_ckpt_async *a);
/* Called at the same point on every rank: waits for the write in flight
 * and returns its status, which the write itself agreed on across ranks.
 * DT_OK when a is NULL or nothing is in flight. The failure message names
 * the checkpoint and where it was taken. */
int dt_ckpt_async_wait(struct dt_ckpt_async *a, dt_status *st);
/* The job of the last collected write, handed back for reuse (its buffers
 * are large already), or NULL; the caller owns it then. */
void *dt_ckpt_async_spare(struct dt_ckpt_async *a);
/* The file the last collected write produced ("" before any). */
const char *dt_ckpt_async_path(const struct dt_ckpt_async *a);
/* Seconds the last collected write took on the writer thread; writes and
 * their seconds in all. */
double dt_ckpt_async_last_seconds(const struct dt_ckpt_async *a);
void dt_ckpt_async_totals(const struct dt_ckpt_async *a, long *writes, double *seconds);
/* Waits for a write in flight (its status dropped: a caller that cares
 * calls dt_ckpt_async_wait first) and frees the writer. NULL is fine. */
void dt_ckpt_async_free(struct dt_ckpt_async *a);

#endif
