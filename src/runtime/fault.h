/* fault.h: every fault the tests inject, in one place.
 *
 * Compiled into every build and inert unless one of its environment
 * variables is set; the trainer, the loader, the checkpoint writer and the
 * timeline ask here instead of reading the environment themselves, so no
 * test hook sits in the training step. The variables (tests only):
 *
 *   DTRAIN_TEST_OVERFLOW_STEPS="3,7"  rank 0's loss gradient is +inf at
 *                                     those global steps (from 1), as an
 *                                     fp16 overflow would make it
 *   DTRAIN_TEST_READ_ERROR="R:N"      the N-th batch read on rank R fails
 *   DTRAIN_TEST_STALL="R:U"           rank R stops before update U (sleeps)
 *   DTRAIN_TEST_STALL="R:PHASE:E"     rank R stops at epoch E's (from 1)
 *                                     "epoch-end" (after its last step),
 *                                     "validation" (before its slice) or
 *                                     "checkpoint" (before the checkpoint
 *                                     of E epochs), or "update-end" (E is
 *                                     then the update, from 1: after its
 *                                     exchange, before the checkpoint
 *                                     agreement), "summary" (E epochs
 *                                     done, before the run's summary) or
 *                                     "export" (before --export-keras/-hf):
 *                                     sleeps 600 s; PHASE
 *                                     with "-stop" SIGSTOPs itself, with
 *                                     "-slow" sleeps 8 s
 *   DTRAIN_TEST_CKPT_CRASH=1          rank 0 dies after a checkpoint is
 *                                     written and flushed, before its rename
 *   DTRAIN_TEST_TIMELINE_CAP=N        the timeline keeps about N spans
 *   DTRAIN_TEST_SLOW_ALLREDUCE="ring:30,mpi:5"  every all-reduce call with
 *                                     that configured algorithm (--allreduce
 *                                     NAME; auto is its own name) sleeps that
 *                                     many ms first (--autotune's tests)
 *   DTRAIN_TEST_MEM_AVAILABLE=BYTES   the node's available memory, as the
 *                                     memory check at start sees it */
#ifndef DT_FAULT_H
#define DT_FAULT_H

/* Each query reads the variables on its first call (the timeline cap at
 * every call: a test sets it between runs). */
/* Whether rank 0 injects an overflow at this global step (from 1). */
int dt_fault_overflow_at(long global_step);
/* The batch read (from 1) that fails on this rank; 0 for none. */
long dt_fault_read_error_at(int rank);
/* Called before each update: rank R sleeps 600 s before update U. */
void dt_fault_stall_point(int rank, long next_update);
/* Called where epoch epoch (from 1; the update for "update-end") reaches
 * phase ("validation", "epoch-end", "checkpoint", "update-end", "summary",
 * "export"): rank R sleeps 600 s there, or with the
 * variable's "-stop" SIGSTOPs itself, with "-slow" sleeps 8 s. */
void dt_fault_stall_phase(int rank, const char *phase, long epoch);
/* Called between a checkpoint's flush and its rename: rank 0 exits here. */
void dt_fault_ckpt_crash_point(void);
/* The timeline's span cap; 0 for the default. */
long dt_fault_timeline_cap(void);
/* Called before each all-reduce with the configured algorithm's name. */
void dt_fault_slow_allreduce(const char *algo);
/* The node's available memory the tests claim, in bytes; -1 for none. */
double dt_fault_mem_available(void);

#endif
