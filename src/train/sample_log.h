/* sample_log.h: --sample-log FILE, which samples every step trained on.
 *
 * Rank 0 writes one line per training step (per micro-batch: --grad-accum K
 * gives K lines per update):
 *
 *   GLOBAL_STEP EPOCH STEP IDX IDX ...
 *
 * GLOBAL_STEP is the update the step belongs to (1-based, counted over the
 * run, a checkpoint's count on resume), EPOCH and STEP are 1-based as the
 * --verbose step lines count them, and the IDX are the global sample
 * indices (over the training files in the order given; for a token dataset
 * sample i is the window tokens[i*T .. i*T+T] of /train/tokens) of every
 * replica in replica order: replica 0's batch, then replica 1's, and so on.
 * With the same seed and global batch the lines are the same at any rank
 * count, so a reference implementation can train on exactly these samples.
 *
 * The design decision: rank 0 computes the other replicas' samples from the
 * shard plan (data/shard.h: pure arithmetic) instead of gathering them, so
 * the option adds no collective to the step, and nothing at all when off.
 * Under --shard-policy file each replica draws its own order, so rank 0
 * keeps a plan per replica and draws each epoch's order for all of them. */
#ifndef DT_SAMPLE_LOG_H
#define DT_SAMPLE_LOG_H

#include <stdint.h>

#include "runtime/status.h"

struct dt_trainer;
struct dt_sample_log;

/* Collective: rank 0 opens cfg->sample_log (truncating it) and returns the
 * log in *out; NULL elsewhere and when the option is off. Refused (agreed
 * on by all ranks) where the replicas do not step together (a parameter
 * server) or the file cannot be written. */
int dt_sample_log_open(struct dt_trainer *t, struct dt_sample_log **out, dt_status *st);
/* The lines of the micro-batches [s, end) of epoch (0-based) just taken by
 * the update t->global_step. */
void dt_sample_log_write(struct dt_sample_log *sl, const struct dt_trainer *t, int epoch, int64_t s, int64_t end);
/* Flushed, closed and freed; returns DT_OK or the write error (rank 0's). */
int dt_sample_log_close(struct dt_sample_log *sl, dt_status *st);

#endif
