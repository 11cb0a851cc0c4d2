/* shard.h: which samples each rank trains on, step by step, in one epoch.
 *
 * Pure arithmetic (no MPI, no HDF5), so every rank computes every rank's
 * share identically and tests can check the whole plan in one process.
 *
 * Policy "data": one seeded permutation of all N samples per epoch (the same
 * on every rank). Step s covers global positions [s*P*B, (s+1)*P*B); its
 * samples are split in contiguous near-equal parts over the P ranks. Every
 * rank runs ceil(N / (P*B)) steps; only the last step may be short, and its
 * remainder R is split so ranks get floor(R/P) or one more (possibly 0).
 *
 * Policy "file": shard file f belongs to rank f mod P; a rank permutes its own
 * files' samples each epoch (seeded by epoch and rank; rank 0's stream is the
 * data policy's, so one rank draws the same order under both). All ranks run
 * ceil(max_r n_r / B) steps; a rank whose samples run out contributes empty
 * batches. In both policies every sample is used exactly once per epoch, and
 * the trainer weights each rank's gradient by its share of the step's global
 * sample count, so short and empty batches are handled exactly. */
#ifndef DT_SHARD_H
#define DT_SHARD_H

#include <stdint.h>

enum dt_shard_policy { DT_SHARD_AUTO = 0, DT_SHARD_DATA = 1, DT_SHARD_FILE = 2 };

struct dt_shard_plan {
    int policy;             /* DATA or FILE (AUTO resolved) */
    int rank, nranks, batch;
    int nfiles;
    int64_t *file_start;    /* [nfiles+1] prefix sums of samples per file */
    int64_t total;          /* samples over all files */
    int64_t *order;         /* DATA: [total] global permutation; FILE: this rank's samples */
    int64_t norder;
    int64_t *rank_count;    /* FILE: samples owned by each rank [nranks] */
    int64_t steps;
};

/* AUTO becomes FILE when there are at least as many files as ranks. Returns
 * the policy to use, or -1 when FILE is asked for with too few files. */
int dt_shard_resolve(int policy, int nfiles, int nranks);

void dt_shard_init(struct dt_shard_plan *p, int policy, int rank, int nranks, int batch,
                   int nfiles, const int64_t *file_samples);
/* Draw the epoch's order: shuffled by (seed, epoch) when shuffle != 0. */
void dt_shard_epoch(struct dt_shard_plan *p, uint64_t seed, int64_t epoch, int shuffle);
/* Global sample indices of this rank at step s into idx[<= batch]; returns
 * how many. *global_count receives the step's sample count over all ranks. */
int dt_shard_step(const struct dt_shard_plan *p, int64_t step, int64_t *idx, int64_t *global_count);
void dt_shard_free(struct dt_shard_plan *p);

/* Which file holds global sample g, and its row within that file, given the
 * prefix sums file_start[nfiles+1] of samples per file. */
int dt_shard_locate(const int64_t *file_start, int nfiles, int64_t g, int64_t *row);

#endif
