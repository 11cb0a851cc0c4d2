/* api.h: what the public handles of include/dtrain.h hold (private).
 *
 * The one design decision: a dtrain_model wraps a struct dt_trainer made
 * not by dt_trainer_init (which also opens the data and the communicators
 * that the context and the dataset own here) but by the same setup stages
 * it runs (train/setup.c), and stepped by the same step (train/step.h):
 * the model, the step, the buffer averaging and the checkpoint format
 * (train/state.c) are the dtrain program's own code, and a custom loop
 * reproduces its losses. */
#ifndef DT_API_H
#define DT_API_H

#include <mpi.h>

#include "dtrain.h"
#include "train/train.h"

struct dtrain_context {
    MPI_Comm comm;            /* duplicate of the caller's; MPI_COMM_NULL before */
    int rank, size;
    int topo_ok, device_ok;
    struct dt_topo topo;
    struct dt_device device;
    struct dt_config base;    /* device, threads, precision, seed: the models' defaults */
    int nusers;               /* datasets and models made from it, alive */
    char err[1024];
};

struct dtrain_dataset {
    dtrain_context *ctx;
    struct dt_dataset data;
    struct dt_shard_plan plan;
    struct dt_loader loader;
    int batch, policy, shuffle, loader_open;
    char **paths;             /* [npaths] copies; "--synthetic SPEC" for a synthetic set */
    int npaths;
    char *synthetic;
    int64_t epoch, step, steps; /* the epoch in progress; steps 0: none */
    int nusers;               /* models created with it, alive */
};

struct dtrain_model {
    dtrain_context *ctx;
    dtrain_dataset *ds;       /* for the checksum of the training data (checkpoints) */
    struct dt_config cfg;     /* what the dtrain program's options would hold */
    struct dt_trainer t;      /* the model, strategy, counters; see the note at the top */
    int checksum_ok;
    int pending;              /* forward_backward done, apply_gradients not yet */
    float stats_loss, stats_correct; /* that step's, for the strategy's reduction */
    dtrain_dataset *last_ds;  /* where that step's batch came from (its read error) */
    int hist_cap;
    char *model_name, *strategy_name, *optimizer_name, *allreduce_name;
    char last_dir[4096];      /* of the last dtrain_checkpoint_save ("latest") */
    struct dt_tfevents *hist_w; /* dtrain_write_histograms' event file (rank 0), in hist_dir */
    char hist_dir[4096];
};

/* Record st on ctx (its message, or "" for DT_OK) and return its code. */
int dt_api_error(dtrain_context *ctx, const dt_status *st);

#endif
