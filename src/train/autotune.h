/* autotune.h: --autotune: the gradient exchange's settings chosen by timing
 * the run's own first steps.
 *
 * The trainer asks before and after each update; between two updates the
 * tuner may switch the all-reduce strategy's algorithm, bucket size and
 * overlap (strategy/strategy.h: dt_allreduce_strategy_configure). Each
 * configuration takes one untimed step after the switch (the first, two:
 * the run's first step also pays for first touches), then
 * --autotune-steps timed ones; its time is the median of those, the slowest
 * rank's (a MAX all-reduce), so every rank takes the same decision at the
 * same step and the replicas stay bitwise identical. The search is staged:
 * first the configured settings and every other usable algorithm at the
 * configured bucket size and overlap, then the fastest algorithm at every
 * bucket size that cuts different buckets (0.25, 1, 4, 16 MB) with overlap
 * off and on. The choice is kept per layout, strategy, model, batch,
 * precision and compression in --autotune-cache (one tab-separated line
 * each); a later run whose key matches starts with it and times nothing. */
#ifndef DT_AUTOTUNE_H
#define DT_AUTOTUNE_H

#include <stdio.h>

#include "train/train.h"

/* Collective, before the first step (t->autotune stays NULL without
 * --autotune). A usage error agreed on by every rank where the strategy's
 * gradient exchange is not the CPU all-reduce (sharded, central-storage,
 * parameter-server, --device cuda). With a cached choice: switches to it
 * and says so. */
int dt_autotune_start(struct dt_trainer *t, FILE *out, dt_status *st);
/* Collective: before an update (switches configuration where one is due). */
void dt_autotune_before_step(struct dt_trainer *t);
/* Collective: after an update that took `seconds` on this rank. */
void dt_autotune_after_step(struct dt_trainer *t, double seconds);
/* After the run: one that completed while still tuning reports what it
 * timed (nothing is kept); frees the tuner. */
void dt_autotune_end(struct dt_trainer *t, int completed);

/* The cache file's default path into buf: $XDG_CACHE_HOME/dtrain/autotune.tsv,
 * else $HOME/.cache/dtrain/autotune.tsv. */
void dt_autotune_default_cache(char *buf, size_t len);

#endif
