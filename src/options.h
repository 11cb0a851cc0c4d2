/* options.h: the run configuration and its command line.
 *
 * Every rank parses the same argv, so every rank reaches the same verdict;
 * errors come back as a dt_status naming the flag, what was expected and
 * what was found, and main() has rank 0 print it.
 *
 * One table (options_table.c) describes every option: getopt's arrays,
 * --help, the defaults and the checks are all made from it, and libdtrain
 * (src/api/) takes its defaults and checks from the same table. */
#ifndef DT_OPTIONS_H
#define DT_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/status.h"

/* The modes read by several modules; the others are named by their owner:
 * enum dt_shard_policy (data/shard.h), dt_lr_kind (optim/schedule.h),
 * dt_precision (backend.h), dt_compress (collectives/coll.h), dt_nan_policy
 * (strategy/strategy.h), dt_ps_mode and dt_ps_transport (strategy/ps.h). */
enum dt_histograms { DT_HIST_WEIGHTS = 1, DT_HIST_GRADS = 2 }; /* --histograms: bits */
enum dt_progress { DT_PROGRESS_AUTO = 0, DT_PROGRESS_PLAIN = 1, DT_PROGRESS_BAR = 2 };
enum dt_overlap { DT_OVERLAP_AUTO = -1, DT_OVERLAP_OFF = 0, DT_OVERLAP_ON = 1 };
enum dt_verbose { DT_QUIET = 0, DT_NORMAL = 1, DT_VERBOSE = 2 };

enum { DT_OPTIONS_MAX = 96 }; /* rows the table may have (static_assert in options_table.c) */

struct dt_config {
    char **inputs;          /* HDF5 files (one file, or shard files) */
    const char *synthetic;  /* --synthetic HxWxC:CLASSES[:N] instead of files; NULL */
    int num_classes;        /* --num-classes: the stated class count; 0 = the file's, or inferred */
    const char *augment;    /* --augment flip,crop[:PAD]; NULL */
    int prefetch;           /* --prefetch: batches read ahead by a thread (2); 0 = in the step */
    int map_threads;        /* --map-threads: threads that read and augment a batch; 0 = auto */
    int cache;              /* --cache: keep read samples in memory */
    long cache_limit_mib;   /* --cache-limit MIB per rank; 0 = the default (data/loader.h) */
    int ninputs;
    int epochs;             /* 10 */
    int batch_size;         /* per replica: 64; global = batch_size * ranks */
    long steps_per_epoch;   /* 0 = a full pass over the data */
    float lr;               /* 0 = the optimizer's Keras default */
    const char *optimizer;  /* adam | adamw | sgd */
    float momentum;         /* sgd */
    float weight_decay;     /* --weight-decay: adamw's decoupled decay per unit of lr (0.01) */
    int decay_all;          /* --decay-all: adamw decays biases, gains and embeddings too */
    float clip_norm;        /* --clip-norm: the update's gradient clipped to this global L2 norm; 0 off */
    int grad_accum;         /* micro-batches per update: 1 */
    int pipeline_stages;    /* --pipeline-stages P: 1 = no pipeline */
    int micro_batches;      /* --micro-batches M: a pipelined batch's parts */
    int sync_bn;            /* --sync-bn: batchnorm statistics over all replicas */
    int recompute;          /* --recompute: blocks' activations again in backward (nn/model.h) */
    int nan_policy;         /* enum dt_nan_policy (strategy/strategy.h) */
    double stall_timeout;   /* --stall-timeout: seconds in a collective before the job ends (300; 0 off) */
    int debug_collectives;  /* --debug-collectives: ranks compare every step and every bucket call */
    int lr_schedule;        /* enum dt_lr_kind (optim/schedule.h) */
    int lr_boundaries[16];  /* --lr-steps: epochs (1-based starts) */
    int n_lr_boundaries;
    float lr_factor;        /* --lr-factor: 0.1 */
    float lr_min;           /* --lr-min: cosine floor, 0 */
    float warmup_epochs;    /* --warmup-epochs: 0 */
    int lr_scale_linear;    /* --lr-scale linear: lr x replicas */
    const char *model;      /* cnn | mlp */
    float dropout;          /* the CNN's dropout rate, 0.5 */
    uint64_t seed;          /* 42 */
    int validation;         /* evaluate on /test each epoch when the file has it */
    int shard_policy;       /* enum dt_shard_policy (data/shard.h) */
    int threads;            /* BLAS/oneDNN threads per rank: 1 */
    /* device and arithmetic (backend.h, gpu/gpu.h) */
    const char *device;     /* cpu | cuda */
    int precision;          /* enum dt_precision (backend.h) */
    float loss_scale;       /* 0 = none, < 0 = dynamic (default with fp16), > 0 = fixed */
    int loss_scale_set;     /* --loss-scale given */
    int gpus_per_node;      /* 0 = every visible device */
    int list_devices;       /* --devices: print the per-rank device map and exit */
    int preflight;          /* --preflight: check MPI, nodes, paths and network, then exit */
    int cuda_graphs;        /* --cuda-graphs: replay the step as a CUDA graph */
    int fp32_activations;   /* --fp32-activations: no 16-bit activation storage */
    int winograd;           /* --winograd: Winograd convolutions where faster (CPU, fp32) */
    /* gradient exchange (src/collectives/) */
    const char *strategy;   /* auto | mirrored | multi-worker | sharded | tpu (refused) */
    int num_ps;             /* parameter-server: server ranks (1) */
    int ps_mode;            /* enum dt_ps_mode (strategy/ps.h) */
    int staleness;          /* ssp: steps a worker may run ahead of the slowest (2) */
    int ps_transport;       /* enum dt_ps_transport (strategy/ps.h) */
    int fsdp_node;          /* --fsdp-shard node: shard inside each node, replicate across nodes (HSDP) */
    const char *allreduce;  /* auto | mpi | ring | hier */
    const char *allreduce_table; /* auto's table file; NULL = built in */
    int ring_chunk_kb;      /* ring and hier: pipeline piece; 0 = by layout (collectives/coll.h) */
    int ring_depth;         /* ring and hier: pieces in flight; 0 = by layout */
    int ranks_per_node;     /* 0 = detect */
    double bucket_mb;       /* bucket size; 0 = one all-reduce after backward */
    int overlap;            /* enum dt_overlap: reduce buckets during backward;
                               auto = on when the job spans nodes */
    int compress;           /* enum dt_compress (collectives/coll.h) */
    int powersgd_rank;      /* --grad-compression powersgd:R: R; 0 = off (collectives/powersgd.h) */
    int compress_cross_only;
    int autotune;           /* --autotune: time bucket size x algorithm x overlap in the first steps */
    const char *autotune_cache; /* its choices per layout; NULL: the default path (train/autotune.h) */
    int autotune_steps;     /* timed steps per configuration (after one untimed) */
    /* checkpoints and callbacks (src/checkpoint/, train.c) */
    const char *checkpoint_dir; /* NULL: no checkpoints, signals kill as usual */
    long ckpt_every;        /* checkpoint every N epochs (ckpt_every_steps 0) or steps */
    int ckpt_every_steps;
    double ckpt_seconds;    /* also after this many seconds since the last; 0 off */
    int ckpt_async;         /* write them on a thread while training goes on */
    int keep;               /* newest checkpoints kept: 3 (0 = all) */
    const char *resume;     /* "latest", a directory or a file; NULL */
    const char *save_best;  /* ModelCheckpoint(save_best_only) path; NULL */
    const char *monitor;    /* val_loss | val_accuracy | loss | accuracy */
    int patience;           /* --early-stopping; -1 off */
    double min_delta;
    int restore_best;
    const char *export_keras; /* .weights.h5 path; NULL */
    const char *export_hf;  /* Hugging Face GPT-2 directory (checkpoint/hf.h); NULL */
    char *command_line;     /* argv joined, for checkpoints (allocated) */
    /* what training reports (src/metrics/) */
    int progress;           /* enum dt_progress: auto = a bar on a terminal */
    const char *metrics;    /* .csv or .jsonl; NULL */
    long metrics_every;     /* also a row every N steps; 0 off */
    const char *logdir;     /* TensorBoard event files; NULL */
    int histogram_freq;     /* TensorBoard histograms every N epochs; 0 off */
    int histograms;         /* what they show: DT_HIST_WEIGHTS | DT_HIST_GRADS */
    const char *timeline;   /* Chrome trace JSON; NULL */
    const char *sample_log; /* --sample-log: rank 0 writes each step's global sample indices; NULL */
    int verbose;            /* enum dt_verbose: quiet, normal, verbose = per-step */
    int help, version;      /* print and exit 0 */
    int given[DT_OPTIONS_MAX]; /* per table row: when it was last given on the
                                  command line (1 = the first option), 0 never */
};

/* Fills cfg from argv; returns DT_OK or DT_EUSAGE with st filled. */
int dt_options_parse(struct dt_config *cfg, int argc, char **argv, dt_status *st);
/* --help, made from the table. */
void dt_options_usage(FILE *out);
/* Every field the table describes at its default (the rest zero). */
void dt_options_defaults(struct dt_config *cfg);
/* Sets one option from text, as the command line would. caller NULL: the
 * message names --NAME; else "caller: NAME" with '_' for '-' (libdtrain's
 * field names). */
int dt_options_set(struct dt_config *cfg, const char *name, const char *arg, const char *caller, dt_status *st);
/* Every value against its row (a range, choices; a row's default always
 * passes), then the combinations the command line refuses. caller as for
 * dt_options_set. dt_options_parse calls it, and so does libdtrain. */
int dt_options_check(const struct dt_config *cfg, const char *caller, dt_status *st);
/* The name of a choice option's value ("abort" for nan-policy 0); NULL if none. */
const char *dt_options_choice_name(const char *name, int value);
/* fp16 gradients need a loss scale to survive: unless one was set, fp16
 * gets the dynamic one (dtrain's default; libdtrain calls it too). */
void dt_options_default_loss_scale(struct dt_config *cfg);
/* An integer flag value in [lo, hi]; the message names the flag. Shared with
 * the other executables (dtrain-bench-allreduce). */
int dt_parse_long(const char *flag, const char *arg, long lo, long hi, long *out, dt_status *st);
void dt_options_free(struct dt_config *cfg);

#endif
