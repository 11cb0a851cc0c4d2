/**
 * @file dtrain.h
 * @brief libdtrain: data-parallel training over MPI, for custom training loops.
 *
 * The one installed header of libdtrain. It exposes what a hand-written
 * training loop needs, in the spirit of tf.distribute's custom loops:
 *
 * | libdtrain                          | TensorFlow                                  |
 * |------------------------------------|---------------------------------------------|
 * | dtrain_init()                      | tf.distribute.Strategy(...) on a cluster    |
 * | dtrain_dataset_open()              | strategy.experimental_distribute_dataset()  |
 * | dtrain_model_create()              | with strategy.scope(): model = ...; compile |
 * | dtrain_forward_backward()          | strategy.run(train_step) (tape part)         |
 * | dtrain_apply_gradients()           | optimizer.apply_gradients() (all-reduced)   |
 * | dtrain_reduce()                    | strategy.reduce(SUM / MEAN, ..., axis=None) |
 * | dtrain_evaluate()                  | model.evaluate()                            |
 * | dtrain_checkpoint_save()/restore() | tf.train.Checkpoint save / restore          |
 *
 * doc/api.md lists every function with its TensorFlow equivalent.
 *
 * Conventions:
 * - Every function returns a status (#DTRAIN_OK or an error code); the
 *   message is in dtrain_last_error() of the context involved.
 * - Functions marked **collective** must be called by every rank of the
 *   context's communicator, in the same order. Their errors are agreed on:
 *   when one rank fails, every rank returns the same code and message, so no
 *   rank is left waiting in a collective.
 * - Handles are opaque and independent: a process may hold several contexts,
 *   datasets and models (each model has its own duplicated communicator for
 *   its gradients). What the process shares between them is listed in
 *   doc/api.md ("Shared state").
 * - libdtrain never calls MPI_Init or MPI_Finalize: the caller owns MPI.
 *   Initialise it with MPI_Init_thread(MPI_THREAD_SERIALIZED) or better to
 *   let a model overlap its gradient all-reduce with backward; with a lower
 *   level the all-reduce simply runs after backward.
 * - An MPI failure (not a user error) aborts the job with MPI_Abort, as the
 *   dtrain program does.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes; the same values as the dtrain program's exit codes. */
enum dtrain_status {
    DTRAIN_OK = 0,       /**< success */
    DTRAIN_ERUNTIME = 1, /**< a failure while running: I/O, a non-finite loss or gradient */
    DTRAIN_EUSAGE = 2,   /**< a wrong argument or option, or a call out of order */
    DTRAIN_EINPUT = 3    /**< a bad input file: missing, not HDF5, wrong shapes or labels */
};

/** Reductions for dtrain_reduce() (tf.distribute.ReduceOp, plus MAX). */
enum dtrain_reduce_op {
    DTRAIN_SUM = 0,  /**< sum over the context's ranks */
    DTRAIN_MEAN = 1, /**< sum divided by the number of ranks */
    DTRAIN_MAX = 2   /**< maximum over the ranks */
};

/** A communicator (duplicated from the caller's), its node layout, and the
 *  backend and device of this rank. */
typedef struct dtrain_context dtrain_context;
/** A distributed dataset: its files (or a synthetic spec), the per-replica
 *  batch size, the shard plan, and a loader reading batches ahead. */
typedef struct dtrain_dataset dtrain_dataset;
/** A model replicated on every rank, with its strategy, optimizer and
 *  gradient-reduction state. */
typedef struct dtrain_model dtrain_model;

/** One step's batch on this rank, from dtrain_dataset_next(). Valid until the
 *  next call of dtrain_dataset_next() or dtrain_dataset_begin_epoch() on the
 *  same dataset. */
typedef struct dtrain_batch {
    int n;                    /**< samples on this rank (0: an empty batch; the rank still steps) */
    long long global;         /**< samples of this step over all replicas */
    long long step;           /**< step within the epoch, from 0 */
    const dtrain_dataset *dataset; /**< where it came from */
    const void *impl;         /**< internal */
} dtrain_batch;

/** Options of dtrain_init(); fill with dtrain_context_options_init() first. */
typedef struct dtrain_context_options {
    const char *device;       /**< "cpu" (default) or "cuda" (one GPU per rank) */
    int threads;              /**< BLAS/oneDNN threads per rank (1) */
    const char *precision;    /**< "fp32" (default), "bf16" or "fp16" */
    unsigned long long seed;  /**< initialisation, shuffling and dropout (42) */
    int ranks_per_node;       /**< 0: detect the node layout */
    int gpus_per_node;        /**< cuda: GPUs to use per node (0: all visible) */
    int verbose;              /**< 0 quiet (default), 1 notes on rank 0's stderr */
} dtrain_context_options;

/** Options of the dataset functions; fill with dtrain_dataset_options_init(). */
typedef struct dtrain_dataset_options {
    const char *shard_policy; /**< "auto" (default), "data" or "file" (as dtrain --shard-policy) */
    int prefetch;             /**< batches read ahead by a thread (2); 0 reads in dtrain_dataset_next() */
    int shuffle;              /**< 1 (default): a new order every epoch, drawn from the seed */
    const char *augment;      /**< NULL, or "flip", "crop[:PAD]", "flip,crop:4" (training batches) */
    int map_threads;          /**< threads that read and augment a batch (as dtrain --map-threads);
                                   0 (default): auto, the CPUs the rank has beyond its compute threads */
    int num_classes;          /**< 0 (default): the files' num_classes, else inferred and checked
                                   (as dtrain); 2..256: the class count (dtrain --num-classes) */
} dtrain_dataset_options;

/** Options of dtrain_model_create(); fill with dtrain_model_options_init(). */
typedef struct dtrain_model_options {
    const char *model;        /**< "cnn" (default), "mlp", or a model file (.cfg) */
    float dropout;            /**< the built-in cnn's dropout rate (0.5) */
    const char *strategy;     /**< "auto" (default), "mirrored", "multi-worker", "sharded", "central-storage" */
    const char *optimizer;    /**< "adam" (default) or "sgd" */
    float lr;                 /**< learning rate; 0: Keras's default (0.001 adam, 0.01 sgd) */
    float momentum;           /**< sgd momentum (0) */
    const char *allreduce;    /**< "auto" (default), "mpi", "ring" or "hier" */
    double bucket_mb;         /**< gradient bucket size in MiB (1); 0: one bucket */
    int overlap;              /**< 1: reduce buckets in a thread during backward (needs
                                   MPI_THREAD_SERIALIZED, and no MPI call of the caller's
                                   between dtrain_forward_backward() and
                                   dtrain_apply_gradients()); 0 (default): after backward */
    const char *nan_policy;   /**< "abort" (default: dtrain_apply_gradients() fails) or "skip" */
    int keep;                 /**< checkpoints kept per directory by dtrain_checkpoint_save() (3; 0 all) */
} dtrain_model_options;

/* ---- status ---------------------------------------------------------- */

/** The library's version, e.g. "0.9.0". */
const char *dtrain_version(void);
/** A short fixed description of a status code ("invalid usage", ...). */
const char *dtrain_strerror(int code);
/** The message of the last failure on ctx (naming the file, option or call).
 *  Valid until the next failing call on ctx. ctx may be NULL (the message
 *  then says there is no context). Not collective. */
const char *dtrain_last_error(const dtrain_context *ctx);

/* ---- context --------------------------------------------------------- */

/** Fill o with the defaults (cpu, 1 thread, fp32, seed 42). */
/* First thing in main, before MPI_Init (it may restart the program):
 * where OpenBLAS took this CPU for a generic one (its SSE3 kernels on a CPU
 * newer than the library), run the program again, once, with
 * OPENBLAS_CORETYPE naming the kernels the CPU's flags allow, as the dtrain
 * program does. Returns when nothing needed changing (or OPENBLAS_CORETYPE
 * is already set); argv is main's, NULL-terminated. */
void dtrain_blas_prepare(char **argv);

void dtrain_context_options_init(dtrain_context_options *o);

/**
 * Start libdtrain on the ranks of comm (**collective** over comm). comm may be
 * MPI_COMM_WORLD or any communicator of the caller's (a split one, to train
 * on part of a larger MPI application); it is duplicated, so libdtrain's
 * messages never mix with the caller's. opts may be NULL for the defaults.
 *
 * On success *ctx is a new context. On failure *ctx is still set (unless
 * memory ran out) so that dtrain_last_error(*ctx) can say why; release it
 * with dtrain_finalize(). MPI must be initialised.
 */
int dtrain_init(MPI_Comm comm, const dtrain_context_options *opts, dtrain_context **ctx);
/** Release the context (**collective**). Models and datasets made from it
 *  must be freed before. Does not call MPI_Finalize. NULL is accepted. */
int dtrain_finalize(dtrain_context *ctx);
/** This rank's index in the context's communicator. */
int dtrain_rank(const dtrain_context *ctx);
/** The number of ranks (replicas) of the context. */
int dtrain_size(const dtrain_context *ctx);
/** A one-line description of this rank's device ("cpu: ..., 1 thread"). */
const char *dtrain_device_name(const dtrain_context *ctx);

/** Reduce n doubles in place over the context's ranks with op (#DTRAIN_SUM,
 *  #DTRAIN_MEAN or #DTRAIN_MAX); every rank receives the result
 *  (strategy.reduce). **Collective.** */
int dtrain_reduce(dtrain_context *ctx, double *buf, int n, int op);

/* ---- datasets -------------------------------------------------------- */

/** Fill o with the defaults (shard policy auto, prefetch 2, shuffle on). */
void dtrain_dataset_options_init(dtrain_dataset_options *o);

/**
 * Open a dataset of one or more HDF5 files as dtrain-prep writes them
 * (/train and optionally /test; several files are shards of one dataset),
 * for batches of `batch` samples per replica (**collective**). Rank 0
 * validates every file; a missing or malformed file is #DTRAIN_EINPUT on
 * every rank, with the file named in dtrain_last_error(). opts may be NULL.
 * This is experimental_distribute_dataset(): each rank will read only its
 * own share of every step.
 */
int dtrain_dataset_open(dtrain_context *ctx, const char *const *paths, int npaths, int batch,
                        const dtrain_dataset_options *opts, dtrain_dataset **ds);
/** A generated dataset, spec "HxWxC:CLASSES[:N]" as dtrain --synthetic
 *  (no test split). **Collective.** */
int dtrain_dataset_synthetic(dtrain_context *ctx, const char *spec, int batch, const dtrain_dataset_options *opts,
                             dtrain_dataset **ds);
/** Training samples over all files (the global count). */
long long dtrain_dataset_size(const dtrain_dataset *ds);
/** Test samples over all files (0 when there is no /test split). */
long long dtrain_dataset_test_size(const dtrain_dataset *ds);
/** The number of classes, and the image shape (any pointer may be NULL). */
void dtrain_dataset_shape(const dtrain_dataset *ds, int *height, int *width, int *channels, int *classes);
/** Steps per epoch: the same on every replica. */
long long dtrain_dataset_steps(const dtrain_dataset *ds);
/**
 * Start epoch `epoch` (from 0): the order is drawn from (seed, epoch) as the
 * dtrain program draws it, and reading ahead starts. *steps (may be NULL)
 * receives the steps per replica. Not collective (every replica computes the
 * same plan), but every rank must run every step: a step is collective in
 * dtrain_apply_gradients().
 */
int dtrain_dataset_begin_epoch(dtrain_dataset *ds, int epoch, long long *steps);
/** The next batch of this rank: 1 with *batch filled, 0 when the epoch is
 *  over (or no epoch was begun). A read error does not fail here: the batch
 *  comes back empty and dtrain_apply_gradients() reports the file on every
 *  rank. */
int dtrain_dataset_next(dtrain_dataset *ds, dtrain_batch *batch);
/** Close the dataset (not collective). Every model created with it must be
 *  freed first (#DTRAIN_EUSAGE otherwise, and nothing is closed). */
int dtrain_dataset_close(dtrain_dataset *ds);

/* ---- models ---------------------------------------------------------- */

/** Fill o with the defaults (cnn, auto strategy, adam, default rate). */
void dtrain_model_options_init(dtrain_model_options *o);

/**
 * Build the model for ds's images and classes, initialise it on rank 0 and
 * broadcast it, and let the strategy place the parameters, gradients and
 * optimizer (**collective**): strategy.scope() + model + compile(). Batches
 * of up to ds's batch size can be trained on. ds must stay open while the
 * model exists (checkpoints record a checksum of its training split).
 * opts may be NULL. The parameter-server strategy is not offered here (its
 * workers do not step together); use the dtrain program for it.
 */
int dtrain_model_create(dtrain_context *ctx, dtrain_dataset *ds, const dtrain_model_options *opts,
                        dtrain_model **m);
/** Trainable parameters. */
size_t dtrain_model_num_parameters(const dtrain_model *m);
/** Copy the parameters (n floats, n >= dtrain_model_num_parameters()) to host memory. */
int dtrain_model_get_parameters(const dtrain_model *m, float *host, size_t n);
/** One line per layer to out (rank 0 only prints). */
void dtrain_model_summary(const dtrain_model *m, FILE *out);
/** Optimizer updates applied so far (optimizer.iterations). */
long long dtrain_model_iterations(const dtrain_model *m);
/** The learning rate of the next updates (optimizer.learning_rate). */
float dtrain_get_learning_rate(const dtrain_model *m);
/** Set it (optimizer.learning_rate.assign); call with the same value on every rank. */
int dtrain_set_learning_rate(dtrain_model *m, float lr);

/**
 * The per-replica part of a training step (the body of strategy.run): put
 * the batch in, forward in training mode (dropout on), the loss scaled by
 * 1 / batch->global so that summing the replicas' gradients gives the
 * gradient of the global batch's mean loss, and backward. *loss_sum
 * receives this replica's summed (unscaled) loss over its batch->n samples
 * and *correct its correct predictions (either may be NULL). Not collective
 * by itself, but must be followed on every rank by dtrain_apply_gradients().
 */
int dtrain_forward_backward(dtrain_model *m, const dtrain_batch *batch, double *loss_sum, long *correct);
/**
 * Sum the gradients over the replicas (the strategy's all-reduce, buckets
 * and all) and apply one optimizer step (optimizer.apply_gradients)
 * (**collective**). Parameters stay identical on every rank. Fails with
 * #DTRAIN_ERUNTIME on every rank when a replica's batch could not be read
 * (naming the file) or the reduced gradient is not finite (nan_policy
 * "abort"; with "skip" the step is dropped and this returns DTRAIN_OK).
 */
int dtrain_apply_gradients(dtrain_model *m);
/** dtrain_forward_backward() then dtrain_apply_gradients() (**collective**). */
int dtrain_train_step(dtrain_model *m, const dtrain_batch *batch, double *loss_sum, long *correct);

/** Mean loss and accuracy over ds's whole test split, dropout off
 *  (model.evaluate) (**collective**). #DTRAIN_EUSAGE when ds has no /test. */
int dtrain_evaluate(dtrain_model *m, dtrain_dataset *ds, double *loss, double *accuracy);

/**
 * Write a checkpoint in dtrain's format into dir (created if missing; dir/latest
 * is updated; the newest `keep` are kept) (**collective**): parameters,
 * optimizer slots, update counts, every rank's dropout stream. epochs_done is
 * recorded for the caller's own resumption. path_out (may be NULL) receives
 * the file. The dtrain program can resume from it (same model and data).
 */
int dtrain_checkpoint_save(dtrain_model *m, const char *dir, int epochs_done, char *path_out, size_t path_len);
/**
 * Restore from what: a checkpoint file, a directory (its latest), or
 * "latest" (the directory of this model's last dtrain_checkpoint_save())
 * (**collective**). The checkpoint must hold the same model, optimizer and
 * training data. *epochs_done (may be NULL) receives the epochs it recorded.
 * A directory holding no checkpoint yet is not an error: nothing changes and
 * *epochs_done is 0 (the first run of a requeued job).
 */
int dtrain_checkpoint_restore(dtrain_model *m, const char *what, int *epochs_done);

/** What dtrain_write_histograms() writes (bits; the dtrain program's --histograms). */
enum { DTRAIN_HISTOGRAM_WEIGHTS = 1, DTRAIN_HISTOGRAM_GRADS = 2 };
/**
 * TensorBoard histograms, as the dtrain program's --histogram-freq writes
 * them after an epoch (Keras' TensorBoard(histogram_freq=N) callback)
 * (**collective**; call it between steps, e.g. after every Nth epoch):
 * rank 0 appends one histogram per parameter tensor (what has
 * #DTRAIN_HISTOGRAM_WEIGHTS; tags "conv2d/kernel/histogram", ...) and per
 * gradient tensor of the last dtrain_apply_gradients() (what has
 * #DTRAIN_HISTOGRAM_GRADS; "conv2d/kernel_grad/histogram", ...) at `step`
 * to an event file in logdir/train (opened at the first call, and again
 * when logdir changes; closed by dtrain_model_free()). Weights are the fp32
 * parameters whatever the precision. #DTRAIN_EUSAGE for a NULL or empty
 * logdir or another `what`; an event file that cannot be written fails on
 * every rank, naming it.
 */
int dtrain_write_histograms(dtrain_model *m, const char *logdir, long long step, int what);

/** Free the model (**collective**: its communicators are freed). NULL is accepted. */
int dtrain_model_free(dtrain_model *m);

#ifdef __cplusplus
}
#endif

#endif /* DTRAIN_H */
