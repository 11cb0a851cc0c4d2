/* predict.h (dtrain-predict): the command line's settings, shared by
 * main.c (the tables) and compare.c (--compare). */
#ifndef DT_PREDICT_H
#define DT_PREDICT_H

#include "nn/model.h"
#include "predict/commmodel.h"
#include "predict/grad.h"
#include "runtime/status.h"

#define MAXN 64

struct opts {
    const char *model, *input, *cluster, *metrics, *compare, *csv, *fit, *fit_out;
    int batch, q, overlap, nbucket, nnodes, algos[DT_CM_NALGOS], nalgo, cluster_given;
    const char *strategy;    /* --strategy: mirrored (default), sharded or fsdp */
    int slots;               /* --optimizer: adam 2, sgd 0 (optimizer slots a parameter) */
    int memory_only;         /* --memory: the memory table alone */
    int recompute;           /* --recompute: the blocks' inner activations once (nn/model.h) */
    int pipe_p, micro_m;     /* --pipeline-stages (1: none), --micro-batches (default 4) */
    int micro_given;         /* --micro-batches was given (it needs stages) */
    struct dt_cm_compress x; /* --grad-compression */
    double compute_ms, data_ms, fwd_frac, threshold;
    double bucket_mb[MAXN];
    int nodes[MAXN];
};

/* --compare: the model's step time against each run of a scaling study's
 * summary CSV for this model, each row with its own algorithm, bucket size,
 * overlap and compression where the CSV has those columns. */
int dt_predict_compare(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c, dt_status *st);

#endif
