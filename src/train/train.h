/* train.h: the trainer: the synchronous data-parallel training loop.
 *
 * Every rank is a replica: rank 0's initial parameters are broadcast; each
 * step every rank computes the gradient of its batch, the gradient block is
 * summed across ranks in one all-reduce (each rank's loss already scaled by
 * 1/global batch, so the sum is the global mean), and every rank applies the
 * same update. Parameters stay bitwise identical on all ranks.
 *
 * Its files: setup.c makes it (dt_trainer_init, a list of named stages),
 * step.c takes one update (step.h), train.c runs the epochs (fit),
 * evaluate.c measures between epochs, state.c writes and reads
 * checkpoints; libdtrain (src/api/) drives the same setup stages and step. */
#ifndef DT_TRAIN_H
#define DT_TRAIN_H

#include <mpi.h>
#include <stdio.h>

#include "strategy/strategy.h"
#include "train/callbacks.h"
#include "train/ckpt_async.h"
#include "checkpoint/checkpoint.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "runtime/device.h"
#include "metrics/report.h"
#include "train/step_graph.h"
#include "train/pipeline.h"
#include "train/sample_log.h"
#include "data/shard.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "options.h"
#include "runtime/watchdog.h"

struct dt_trainer {
    const struct dt_config *cfg;
    MPI_Comm comm;                  /* private duplicate (coll.topo.world) */
    struct dt_coll coll;            /* topology and all-reduce */
    struct dt_strategy strategy;    /* local gradients -> new parameters */
    int rank, nranks;
    struct dt_device device;        /* backend and device of this rank */
    const struct dt_backend *be;
    struct dt_dataset data;
    struct dt_shard_plan plan;
    int policy;                     /* resolved --shard-policy */
    struct dt_model model;          /* under --pipeline-stages: this rank's stage's layers (model.lo, model.hi) */
    struct dt_pipe_run pipe;        /* --pipeline-stages: the cut and the schedule's state */
    dt_rng dropout_rng;             /* per rank */
    struct dt_step_graphs graphs;   /* --cuda-graphs */
    struct dt_loader loader;        /* the training batches, read ahead (--prefetch, --cache) */
    uint8_t *dev_images, *dev_labels;
    /* What the loss reads (dt_model_loss's labels): dev_labels, or for a
     * token model dev_images (the windows hold their targets); bytes of it
     * per sample. */
    uint8_t *dev_targets;
    size_t target_row;
    int epochs_done;
    long global_step;               /* steps taken in this run */
    long skipped_before;            /* loss-scale skips before this epoch */
    /* checkpoints and callbacks (train/state.c) */
    uint64_t data_checksum;         /* of the training split, for --resume */
    int resumed, start_epoch;       /* where this run starts */
    int64_t start_step;             /* steps already done in start_epoch */
    double start_progress[3];       /* that epoch's loss sum, correct, samples so far */
    double resume_ls[3];            /* loss scale, clean steps, skipped */
    int resume_ls_on;
    char resume_path[4096];
    struct dt_monitor stopper;      /* --early-stopping (and the checkpoint's monitor state) */
    struct dt_monitor saver;        /* --save-best */
    float *best_params;             /* host copy for --restore-best */
    double last_ckpt_time;
    int ckpt_pending;               /* a step-count checkpoint fell on an epoch's last step */
    char last_ckpt[4096];
    struct dt_ckpt_async *ckpt_async; /* --checkpoint-async's writer (NULL: synchronous) */
    double ckpt_blocked[2];         /* seconds training stood still for checkpoints: [0] written
                                       in the step, [1] handed to the writer thread */
    long ckpt_count[2];             /* checkpoints taken, the same two ways */
    struct dt_report report;        /* progress, metrics file, TensorBoard (rank 0) */
    struct dt_sample_log *sample_log; /* --sample-log (rank 0; NULL elsewhere and when off) */
    struct dt_lr_schedule sched;    /* the learning rate per step */
    int lr_epochs[16];              /* its step boundaries, 0-based epochs */
    float *accum;                   /* --grad-accum: the micro-batches' gradient sum (device) */
    int64_t *idx_scratch;           /* [batch]: counting an update's samples ahead */
    struct dt_augment augment;      /* --augment (applied by the loader) */
    char map_why[96];               /* how --map-threads auto chose; "" when given */
    struct dt_epoch_stats *history; /* [cfg->epochs] */
    MPI_Comm bn_comm;               /* --sync-bn's reductions (0 without) */
    struct dt_watchdog watchdog;    /* --stall-timeout */
    struct dt_autotune *autotune;   /* --autotune while it times (train/autotune.h); NULL otherwise */
    char *model_text;               /* the model file's text, as parsed (checkpoints keep it); NULL: a built-in */
    size_t model_text_len;
};

/* train/setup.c. Collective over comm. Returns DT_OK or a user error
 * agreed on by all ranks. */
int dt_trainer_init(struct dt_trainer *t, const struct dt_config *cfg, MPI_Comm comm, dt_status *st);
void dt_trainer_free(struct dt_trainer *t);
/* train/train.c: runs cfg->epochs epochs; rank 0 prints one line per epoch
 * to out (unless quiet). */
int dt_trainer_fit(struct dt_trainer *t, FILE *out, dt_status *st);

/* train/setup.c: the stages of dt_trainer_init that libdtrain (src/api/)
 * runs too, on a trainer it fills itself (cfg, comm, rank, be). */
/* Collective: cfg->model built for data's images, checked against the
 * backend (and --cuda-graphs, --export-keras), and the same on every rank
 * (when names the moment in the message). */
int dt_trainer_build_model(struct dt_trainer *t, struct dt_dataset *data, const char *when, dt_status *st);
/* Collective: the model's buffers, rank 0's initial parameters and
 * statistics on every rank, this rank's dropout stream. */
void dt_trainer_create_model(struct dt_trainer *t);
/* The step's buffers: a batch on the device, the plan's scratch, the
 * --grad-accum sum. */
void dt_trainer_alloc_step(struct dt_trainer *t);
/* The shard policy resolved for nranks; where file sharding leaves a rank
 * without a file, -1 and a usage error naming the option (who: a prefix
 * for the message, flag: the option's name). */
int dt_setup_shard_policy(int policy, int nfiles, int nranks, const char *who, const char *flag, dt_status *st);
/* Replica `replica`'s shard plan (of nreplicas) over data's training files. */
void dt_setup_plan(struct dt_shard_plan *plan, const struct dt_dataset *data, int policy, int replica, int nreplicas,
                   int batch);
/* --map-threads resolved: requested (> 0), or auto (0): the CPUs this rank
 * may run on (its affinity mask, at most the node's CPUs over its
 * local_ranks) less its compute_threads, at least 1. why says how auto
 * chose ("" for a requested count). */
int dt_setup_map_threads(int requested, int local_ranks, int compute_threads, char *why, size_t len);
/* The loader of plan's batches (data/loader.h). Where --prefetch's thread
 * cannot read these files, a note to stderr when say, naming the option
 * (flag) and where the batches are read instead (where). */
void dt_setup_loader(struct dt_loader *ld, const struct dt_loader_config *lc, struct dt_dataset *data,
                     const struct dt_shard_plan *plan, const struct dt_backend *be, int say, const char *flag,
                     const char *where);

/* train/histograms.c. Collective: rank 0 writes a TensorBoard histogram of
 * every parameter tensor (what & DT_HIST_WEIGHTS) and of its gradient from
 * the last update (what & DT_HIST_GRADS) into w (rank 0's; may be NULL
 * elsewhere) at step; with out and --verbose, the time it took. A write
 * error is agreed on by every rank. */
struct dt_tfevents;
int dt_trainer_histograms(struct dt_trainer *t, struct dt_tfevents *w, int what, int64_t step, FILE *out,
                          dt_status *st);

/* train/evaluate.c. Collective: the mean loss and accuracy over all of the
 * test split. */
void dt_trainer_evaluate(struct dt_trainer *t, double *loss, double *accuracy);
/* Its two halves: this rank's contiguous slice of data's test split, in
 * batches of up to `batch` samples read into b (room for as many), adding
 * loss sum, correct count and samples to sums[3] (local; stops at a read
 * error); then, collective, the mean over all ranks. */
int dt_trainer_evaluate_slice(struct dt_trainer *t, struct dt_dataset *data, struct dt_batch *b, int batch,
                              double sums[3], dt_status *st);
void dt_trainer_evaluate_mean(struct dt_trainer *t, double sums[3], double *loss, double *accuracy);
/* Collective: every replica holds the same parameters and batchnorm
 * statistics, bit for bit (a hash of them compared; after an epoch every
 * strategy promises it). DT_ERUNTIME naming the ranks that differ;
 * --verbose --verbose prints the agreement. epoch is 1-based. */
int dt_trainer_check_replicas(struct dt_trainer *t, int epoch, FILE *out, dt_status *st);
/* Collective: rank 0 prints min-max over ranks of peak RSS and current PSS
 * (shared pages divided among the processes that map them, so one copy of
 * the parameters per node shows), and the optimizer state per rank. */
void dt_trainer_report_memory(struct dt_trainer *t, FILE *out);

/* train/step.c. Collective: batchnorm's moving statistics become the
 * replicas' mean (a synchronous step does it after each update, a parameter
 * server's at each epoch's end); a no-op without them. */
void dt_trainer_average_buffers(struct dt_trainer *t);

/* train/state.c. All collective. */
int dt_trainer_data_checksum(struct dt_trainer *t, dt_status *st);
/* epochs_done and step say where training stands; progress holds the sums of
 * the epoch in progress (loss, correct, samples). */
int dt_trainer_save(struct dt_trainer *t, const char *dir, int keep, int epochs_done, int64_t step,
                    const double progress[3], char *path, size_t pathlen, dt_status *st);
/* dt_trainer_save in two halves, for --checkpoint-async (train/ckpt_async.h):
 * the state copied into memory (collective; the device's values downloaded;
 * into reuse's buffers when given: a snapshot of the same trainer already
 * written), then written (collective over comm) from any thread while the
 * trainer lives. */
/* The checkpoint's names for m's parameters (train/state.c): one entry per
 * layer, or per matrix of a layer with two (an embedding's "<layer>" and
 * "<layer>.position", an attention's "<layer>" and "<layer>.proj"), then
 * the buffers ("<layer>.moving"). *count receives the entries; the table
 * and its names are one allocation (free it). */
struct dt_ckpt_layer *dt_ckpt_layer_table(const struct dt_model *m, int *count);
struct dt_snapshot *dt_trainer_snapshot(struct dt_trainer *t, int epochs_done, int64_t step,
                                        const double progress[3], struct dt_snapshot *reuse);
int dt_snapshot_write(const struct dt_snapshot *snap, MPI_Comm comm, const char *dir, int keep, char *path,
                      size_t pathlen, dt_status *st);
void dt_snapshot_free(struct dt_snapshot *snap);
/* Before the strategy exists: parameters, counters, history, dropout streams. */
int dt_trainer_resume_params(struct dt_trainer *t, dt_status *st);
/* --restore-best after a restart: the best epoch's parameters from
 * checkpoint_dir/best into t->best_params. */
int dt_trainer_resume_best(struct dt_trainer *t, dt_status *st);
/* After: this rank's optimizer slots and the loss scale. */
int dt_trainer_resume_optimizer(struct dt_trainer *t, dt_status *st);
/* Host parameters into the model (once per node where the node shares them). */
void dt_trainer_set_params(struct dt_trainer *t, const float *host);

#endif
