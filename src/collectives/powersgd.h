/* powersgd.h: low-rank gradient compression (Vogels et al., "PowerSGD",
 * NeurIPS 2019), with error feedback and a warm start, as PyTorch's DDP
 * powerSGD comm hook does it, on dtrain's summed gradients.
 *
 * The caller names the matrices of the gradient block (offset, rows n,
 * columns m: a row-major n x m view of a layer's weight gradient). For each
 * bucket [lo, hi) of the block, dt_powersgd_reduce does, per matrix M of the
 * bucket (this rank's gradient):
 *   M += e;  P = M Q;  P = sum over ranks;  orthonormalise P's columns;
 *   Q = M^T P;  Q = sum over ranks;  M_hat = P Q^T;  e = M - M_hat / W;
 * and writes M_hat, the rank-r approximation of the SUM over the W ranks,
 * where M was. Everything in [lo, hi) that is not a matrix (biases, batch
 * normalization, small matrices, the statistics after the gradients) is
 * summed exactly, packed into the same all-reduce as the P's: two
 * all-reduces per bucket, (sum n r + rest) and (sum m r) floats.
 *
 * The one design decision: every rank ends with the same bits. The two sums
 * are the configured all-reduce's (identical on all ranks), and everything
 * computed from them (Gram-Schmidt in double, M_hat in a fixed-order loop,
 * not BLAS, whose kernels may differ between CPUs) is deterministic; only
 * the per-rank inputs to the sums (M Q, M^T P) use BLAS. Q, the warm start,
 * is the previous step's summed Q, the same on all ranks; it starts from
 * a fixed seed. The error buffers e are per rank and never leave it.
 *
 * Memory: e holds one float per compressed gradient element (about the
 * model's size again), Q m r floats per matrix, and a scratch buffer as big
 * as the largest bucket's packed P, rest and Q. Knows nothing of layers. */
#ifndef DT_POWERSGD_H
#define DT_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "runtime/rng.h"

enum { DT_POWERSGD_MAX_RANK = 256 };

/* Whether a rows x cols kernel is worth compressing at rank R: both sides
 * above R, and the factors smaller than the matrix. */
static inline int dt_powersgd_worth(size_t rows, size_t cols, size_t R)
{
    return R && rows > R && cols > R && (rows + cols) * R < rows * cols;
}

/* A weight gradient to compress: floats [off, off + n m) of the block, row-major n x m. */
struct dt_psgd_matrix {
    size_t off, n, m;
};

struct dt_psgd_state {
    size_t off, n, m;
    int r;            /* min(R, n, m) */
    float *q;         /* [m][r]: the warm start, identical on every rank */
    float *e;         /* [n][m]: this rank's error feedback */
    dt_rng rng;       /* refills Q's columns that came back zero (identical on every rank) */
};

struct dt_powersgd {
    struct dt_coll *coll;
    int rank;                   /* R */
    int nreplicas;              /* W: the ranks of coll */
    int nmat;
    struct dt_psgd_state *mat;  /* sorted by offset */
    float *pack;                /* [P's | the rest | Q's] of one bucket */
    size_t pack_count;
    double *gs;                 /* Gram-Schmidt in double: [n][r] of the largest matrix */
    size_t gs_count;
    double compute_seconds;     /* inside dt_powersgd_reduce but outside the all-reduces */
    long calls;
};

/* mats: any order, not overlapping; R in [1, DT_POWERSGD_MAX_RANK]. Q of
 * matrix i starts from (seed, i), the same on every rank. */
void dt_powersgd_init(struct dt_powersgd *p, struct dt_coll *coll, int rank, const struct dt_psgd_matrix *mats,
                      int nmats, uint64_t seed);
void dt_powersgd_free(struct dt_powersgd *p);
/* Collective: replace [lo, hi) of buf (this rank's gradients) with the sum
 * over ranks, the matrices lying wholly inside it by their rank-r
 * approximations. Every rank calls it with the same bounds. */
void dt_powersgd_reduce(struct dt_powersgd *p, float *buf, size_t lo, size_t hi);
/* The step that was just reduced is not applied (a NaN or infinity, a loss
 * scale overflow): forget the error buffers, which hold its residue, and
 * restart any non-finite Q. The same call on every rank. */
void dt_powersgd_discard(struct dt_powersgd *p);
/* The gradients' scale changed by factor (a loss scale that grew): the
 * error buffers follow. */
void dt_powersgd_rescale(struct dt_powersgd *p, float factor);
/* Floats a step sends for a block of count floats: *full without
 * compression, *sent with it (each matrix (n + m) r instead of n m). */
void dt_powersgd_sizes(const struct dt_powersgd *p, size_t count, size_t *full, size_t *sent);

#endif
