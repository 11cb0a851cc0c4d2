/* timeline.h: a per-rank timeline of training, written as one Chrome trace.
 *
 * Every rank records spans (metrics/tl_span.h: forward and backward per
 * layer, each bucket's all-reduce, the wait for gradients, the optimizer,
 * reading batches, checkpoints); at the end rank 0 writes them all to one
 * JSON file that Perfetto (ui.perfetto.dev) and chrome://tracing open:
 *
 *   {"traceEvents":[
 *   {"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0 (node1)","dropped_spans":0}},
 *   {"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"communication"}},
 *   {"name":"forward conv2d","ph":"X","pid":0,"tid":0,"ts":1520.125,"dur":312.500},
 *   {"name":"all-reduce","ph":"X","pid":1,"tid":1,"ts":1890.000,"dur":95.250,"args":{"text":"bucket 0, 1290 floats"}},
 *   ...],"displayTimeUnit":"ms"}
 *
 * pid is the rank, tid the logical thread (0 compute, 1 communication,
 * 2 data), ts and dur microseconds since a common origin taken right after a
 * barrier. Memory is bounded: at most 4 Mi spans (and 64 MiB of copied text)
 * per rank; spans past that are dropped and counted in the process_name
 * metadata ("dropped_spans"), with a process label when any were. */
#ifndef DT_TIMELINE_H
#define DT_TIMELINE_H

#include <mpi.h>

#include "metrics/tl_span.h"
#include "runtime/status.h"

/* Collective over comm: start recording into dt_timeline. Rank 0 checks now
 * that path can be written (DT_EUSAGE naming it otherwise, on every rank).
 * The origin is each rank's clock just after a barrier: CLOCK_MONOTONIC is
 * per host, so rank 0's value would mean nothing elsewhere. */
int dt_timeline_start(MPI_Comm comm, const char *path, dt_status *st);

/* Collective over comm, while no other thread records: rank 0 writes every
 * rank's spans to path (through path.tmp, renamed at the end), then the
 * timeline is freed and dt_timeline is NULL. Does nothing when no timeline
 * is recording. On an I/O error every rank returns DT_ERUNTIME with a message
 * naming the file, and nothing is left behind. */
int dt_timeline_finish(MPI_Comm comm, dt_status *st);

#endif
