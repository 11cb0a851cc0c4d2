/* synthetic.h: generated data of any shape, for benchmarks and scaling
 * studies that need no dataset (as Horovod's and tf_cnn_benchmarks'
 * synthetic benchmarks do).
 *
 * --synthetic HxWxC:CLASSES[:N] gives N training samples (default 51200) of
 * H x W x C uint8 pixels and labels below CLASSES, and no test split. Every
 * sample is a pure function of its index and the seed (splitmix64), so each
 * rank generates exactly the rows it trains on, at any rank count, and runs
 * are reproducible. Nothing is learnable: the figures that matter are the
 * throughput and the timeline. */
#ifndef DT_SYNTHETIC_H
#define DT_SYNTHETIC_H

#include <stdint.h>

#include "data/dataset_rows.h"
#include "runtime/status.h"

struct dt_synthetic {
    int h, w, c, classes;
    int64_t n;
};

/* The option's value; the message names --synthetic and what was expected. */
int dt_synthetic_parse(const char *spec, struct dt_synthetic *s, dt_status *st);
/* A dataset whose reads generate the rows (no file is opened). */
void dt_dataset_open_synthetic(struct dt_dataset *ds, const struct dt_synthetic *s, uint64_t seed);

#endif
