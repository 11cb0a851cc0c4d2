/* commmodel.h: an alpha-beta model of dtrain's all-reduce algorithms and of
 * a training step, to predict scaling past the machines one can measure.
 *
 * Every message of n bytes over a link costs alpha + n * beta (Hockney's
 * model): alpha is the per-message latency (software and wire), beta the
 * inverse bandwidth. A cluster has two kinds of links: inside a node
 * (shared memory or NVLink; per rank) and between nodes (the node's network
 * interface, shared by the node's ranks). For P = N x q ranks (N nodes, q
 * ranks per node), n bytes, and i / x marking the links inside / between
 * nodes:
 *
 *   ring  (flat ring, ranks in node order): 2(P-1) steps of n/P bytes, each
 *         as slow as its slowest link; one flow per node boundary, unshared:
 *           2(P-1) max(alpha_i + n/P beta_i, alpha_x + n/P beta_x)
 *   mpi   (MPI_Allreduce; Open MPI's tuned choice, taken as the better of
 *         recursive doubling and Rabenseifner's halving/doubling), with
 *         log2 q rounds inside nodes and log2 N between, where all q ranks
 *         of a node share its interface:
 *           RD  = log2 q (alpha_i + n beta_i) + log2 N (alpha_x + q n beta_x)
 *           Rab = 2 (log2 q alpha_i + log2 N alpha_x
 *                    + q n (1 - 1/N) beta_x + n/N (1 - 1/q) beta_i)
 *         with beta_x scaled by the cluster's mpi_beta_factor (measured by
 *         --fit: the library's large messages may wait for a handshake)
 *   hier  (src/collectives/hier.c, and NCCL inside the node): reduce-scatter
 *         inside the node, ring across nodes on each rank's slice n/q with
 *         all q ranks of a node sharing its network interface, all-gather
 *         inside the node:
 *           2 (alpha_i + (q-1)/q n beta_i) + 2(N-1) (alpha_x + n/N beta_x)
 *         (the cross term carries n/N per step per node: q flows of n/(qN))
 *
 * The step: forward, then backward, during which gradient buckets (cut at
 * layer boundaries, as dt_buckets_cut does) become ready in proportion to
 * the parameters backward has finished; with overlap a communication thread
 * reduces them in order as they come (start = max(ready, previous end)),
 * without overlap they are reduced after backward. With overlap the
 * exchange also takes time from backward's core (core_share in
 * commmodel.c): cpu_ns_per_byte per byte moved, the compression's
 * arithmetic, and half of a blocking MPI_Allreduce's time, since it spins.
 * Then
 *   step = compute + exposed communication + data wait,
 * throughput = P x batch / step, and (weak scaling) efficiency =
 * step(1 rank) / step(P). Compute per replica is taken as independent of P:
 * on machines where ranks share memory bandwidth (this development machine)
 * that is optimistic, and tests/predict.sh says by how much. */
#ifndef DT_COMMMODEL_H
#define DT_COMMMODEL_H

#include <stddef.h>

#include "runtime/status.h"

/* Links, in seconds and seconds per byte. */
struct dt_cluster {
    char name[64];
    int ranks_per_node;     /* q: ranks (or GPUs) per node */
    double alpha_intra;     /* latency inside a node */
    double beta_intra;      /* inverse bandwidth inside a node, per rank */
    double alpha_inter;     /* latency between nodes */
    double beta_inter;      /* inverse bandwidth of a node's network interface */
    double mpi_beta_factor; /* MPI_Allreduce's beta between nodes over the ring's (1; a file's
                               mpi_beta_factor, or --fit from the benchmark's mpi rows): Open MPI's
                               tcp BTL halves it on a slow link (rendezvous behind the peer's data) */
    double cpu_ns_per_byte; /* the rank's core's time per byte an all-reduce moves (network stack,
                               copies, sums): taken from backward under overlap; 0 (a file's
                               cpu_ns_per_byte) where a NIC does the work */
    char about[160];        /* where the numbers come from */
};

enum dt_cm_algo { DT_CM_RING = 0, DT_CM_MPI = 1, DT_CM_HIER = 2, DT_CM_NALGOS = 3 };

const char *dt_cm_algo_name(int algo);
/* "ring", "mpi" or "hier"; -1 if none. */
int dt_cm_algo_parse(const char *name);

/* Seconds for one all-reduce of n bytes over nodes x q ranks. 0 for one rank. */
double dt_cm_allreduce(const struct dt_cluster *c, int algo, int nodes, int q, double bytes);

/* A built-in cluster by name (dt_cm_cluster_names lists them), or a file of
 * "key = value" lines: name, ranks_per_node, alpha_intra_us, bw_intra_gbs,
 * alpha_inter_us, bw_inter_gbs, about ('#' comments). Errors name the file
 * and line. */
int dt_cm_cluster_load(const char *what, struct dt_cluster *c, dt_status *st);
const char *dt_cm_cluster_names(void);

/* One CSV line's cells, empty ones included (split in place at commas;
 * the line's end of line dropped). Returns the count, at most max. */
int dt_cm_csv_split(char *line, char **cell, int max);

/* fit.c: alpha_inter and beta_inter fitted to a dtrain-bench-allreduce --csv
 * file's ring rows (one rank per node), the rest taken from base; *worst is
 * the largest relative error of the fitted line at the measured sizes. */
int dt_cm_fit(const char *path, const struct dt_cluster *base, struct dt_cluster *out, double *worst,
              dt_status *st);
/* c as a cluster file that dt_cm_cluster_load reads back. */
int dt_cm_cluster_write(const struct dt_cluster *c, const char *path, dt_status *st);

/* One training step of one replica. */
struct dt_cm_step {
    double forward_s, backward_s; /* compute of one replica's batch */
    double data_s;                /* data wait per step (0 with prefetch) */
    int nbuckets;
    const double *bucket_bytes;   /* [nbuckets], in the order backward frees them */
    const double *bucket_ready;   /* [nbuckets]: fraction of backward done when each is ready */
    const double *bucket_bytes2;  /* [nbuckets] or NULL: a second all-reduce per bucket (PowerSGD's Q) */
    const double *bucket_cpu;     /* [nbuckets] or NULL: seconds of arithmetic on the bucket's way (compression) */
    int overlap;                  /* reduce buckets during backward */
    int half;                     /* 16-bit transport: the core's work per value stays an fp32's
                                     (the conversions cost what the bytes saved) */
};

struct dt_cm_result {
    double step_s, comm_s, exposed_s; /* step time, all-reduce time, the part not hidden */
};

/* The step on nodes x q ranks with algorithm algo. */
struct dt_cm_result dt_cm_predict(const struct dt_cluster *c, int algo, int nodes, int q,
                                  const struct dt_cm_step *s);

#endif
