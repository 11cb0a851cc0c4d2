/* shard.c: the per-epoch, per-rank sample plan (see shard.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "data/shard.h"
#include "runtime/rng.h"

int dt_shard_resolve(int policy, int nfiles, int nranks)
{
    if (policy == DT_SHARD_AUTO) return nfiles >= nranks ? DT_SHARD_FILE : DT_SHARD_DATA;
    if (policy == DT_SHARD_FILE && nfiles < nranks) return -1;
    return policy;
}

void dt_shard_init(struct dt_shard_plan *p, int policy, int rank, int nranks, int batch,
                   int nfiles, const int64_t *file_samples)
{
    memset(p, 0, sizeof *p);
    p->policy = policy;
    p->rank = rank;
    p->nranks = nranks;
    p->batch = batch;
    p->nfiles = nfiles;
    p->file_start = dt_xcalloc((size_t)nfiles + 1, sizeof(int64_t));
    for (int f = 0; f < nfiles; f++) p->file_start[f + 1] = p->file_start[f] + file_samples[f];
    p->total = p->file_start[nfiles];
    if (policy == DT_SHARD_FILE) {
        p->rank_count = dt_xcalloc((size_t)nranks, sizeof(int64_t));
        for (int f = 0; f < nfiles; f++) p->rank_count[f % nranks] += file_samples[f];
        p->norder = p->rank_count[rank];
        int64_t most = 0;
        for (int r = 0; r < nranks; r++) most = p->rank_count[r] > most ? p->rank_count[r] : most;
        p->steps = (most + batch - 1) / batch;
    } else {
        int64_t global = (int64_t)nranks * batch;
        p->norder = p->total;
        p->steps = (p->total + global - 1) / global;
    }
    p->order = dt_xcalloc((size_t)(p->norder ? p->norder : 1), sizeof(int64_t));
}

void dt_shard_epoch(struct dt_shard_plan *p, uint64_t seed, int64_t epoch, int shuffle)
{
    dt_rng rng;
    if (p->policy == DT_SHARD_FILE) {
        int64_t k = 0;
        for (int f = p->rank; f < p->nfiles; f += p->nranks)
            for (int64_t g = p->file_start[f]; g < p->file_start[f + 1]; g++) p->order[k++] = g;
        if (shuffle) {
            /* The rank's own stream: the files it owns differ from its peers'.
             * Rank 0's is the data policy's, so one rank (which owns every
             * file, in order) draws the same order under either policy. */
            dt_rng_seed(&rng, seed ^ 0x5eed5ULL, (uint64_t)epoch + ((uint64_t)p->rank << 40));
            for (int64_t i = p->norder - 1; i > 0; i--) {
                int64_t j = (int64_t)dt_rng_below(&rng, (uint64_t)i + 1), t = p->order[i];
                p->order[i] = p->order[j];
                p->order[j] = t;
            }
        }
        return;
    }
    if (shuffle) {
        dt_rng_seed(&rng, seed ^ 0x5eed5ULL, (uint64_t)epoch);
        dt_rng_permutation(&rng, p->order, p->norder);
    } else {
        for (int64_t i = 0; i < p->norder; i++) p->order[i] = i;
    }
}

static int64_t clamp_batch(int64_t left, int batch) { return left <= 0 ? 0 : left < batch ? left : batch; }

int dt_shard_step(const struct dt_shard_plan *p, int64_t step, int64_t *idx, int64_t *global_count)
{
    if (p->policy == DT_SHARD_FILE) {
        int64_t g = 0;
        for (int r = 0; r < p->nranks; r++) g += clamp_batch(p->rank_count[r] - step * p->batch, p->batch);
        *global_count = g;
        int64_t n = clamp_batch(p->norder - step * p->batch, p->batch);
        if (n > 0) memcpy(idx, p->order + step * p->batch, sizeof(int64_t) * (size_t)n);
        return (int)n;
    }
    int64_t G = (int64_t)p->nranks * p->batch, base = step * G;
    int64_t g = clamp_batch(p->total - base, (int)G);
    int64_t q = g / p->nranks, rem = g % p->nranks;
    int64_t n = q + (p->rank < rem), off = p->rank * q + (p->rank < rem ? p->rank : rem);
    *global_count = g;
    if (n > 0) memcpy(idx, p->order + base + off, sizeof(int64_t) * (size_t)n);
    return (int)n;
}

int dt_shard_locate(const int64_t *file_start, int nfiles, int64_t g, int64_t *row)
{
    int lo = 0, hi = nfiles - 1;
    while (lo < hi) { /* the last file whose start is <= g */
        int mid = (lo + hi + 1) / 2;
        if (file_start[mid] <= g) lo = mid; else hi = mid - 1;
    }
    *row = g - file_start[lo];
    return lo;
}

void dt_shard_free(struct dt_shard_plan *p)
{
    free(p->file_start);
    free(p->order);
    free(p->rank_count);
    memset(p, 0, sizeof *p);
}
