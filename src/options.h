/* options.h: the run configuration and its command line.
 *
 * Every rank parses the same argv, so every rank reaches the same verdict;
 * errors come back as a dt_status naming the flag, what was expected and
 * what was found, and main() has rank 0 print it. */
#ifndef DT_OPTIONS_H
#define DT_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/status.h"

struct dt_config {
    char **inputs;          /* HDF5 files (one file, or shard files) */
    const char *synthetic;  /* --synthetic HxWxC:CLASSES[:N] instead of files; NULL */
    const char *augment;    /* --augment flip,crop[:PAD]; NULL */
    int prefetch;           /* --prefetch: batches read ahead by a thread (2); 0 = in the step */
    int cache;              /* --cache: keep read samples in memory */
    long cache_limit_mib;   /* --cache-limit MIB per rank; 0 = the default (data/loader.h) */
    int ninputs;
    int epochs;             /* 10 */
    int batch_size;         /* per replica: 64; global = batch_size * ranks */
    long steps_per_epoch;   /* 0 = a full pass over the data */
    float lr;               /* 0 = the optimizer's Keras default */
    const char *optimizer;  /* adam | sgd */
    float momentum;         /* sgd */
    int grad_accum;         /* micro-batches per update: 1 */
    int sync_bn;            /* --sync-bn: batchnorm statistics over all replicas */
    int nan_policy;         /* --nan-policy: 0 abort (default), 1 skip the step */
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
    int shard_policy;       /* dt_shard_policy */
    int threads;            /* BLAS/oneDNN threads per rank: 1 */
    /* device and arithmetic (backend.h, gpu/gpu.h) */
    const char *device;     /* cpu | cuda */
    int precision;          /* enum dt_precision */
    float loss_scale;       /* 0 = none, < 0 = dynamic (default with fp16), > 0 = fixed */
    int loss_scale_set;     /* --loss-scale given */
    int gpus_per_node;      /* 0 = every visible device */
    int list_devices;       /* --devices: print the per-rank device map and exit */
    int preflight;          /* --preflight: check MPI, nodes, paths and network, then exit */
    int cuda_graphs;        /* --cuda-graphs: replay the step as a CUDA graph */
    int fp32_activations;   /* --fp32-activations: no 16-bit activation storage */
    /* gradient exchange (src/collectives/) */
    const char *strategy;   /* auto | mirrored | multi-worker | sharded | tpu (refused) */
    int num_ps;             /* parameter-server: server ranks (1) */
    int ps_mode;            /* 0 async, 1 ssp, 2 sync */
    int staleness;          /* ssp: steps a worker may run ahead of the slowest (2) */
    int ps_transport;       /* 0 auto, 1 one-sided, 2 two-sided (strategy/ps.h) */
    const char *allreduce;  /* auto | mpi | ring | hier */
    const char *allreduce_table; /* auto's table file; NULL = built in */
    int ranks_per_node;     /* 0 = detect */
    double bucket_mb;       /* bucket size; 0 = one all-reduce after backward */
    int overlap;            /* reduce buckets during backward: 1 on, 0 off,
                               -1 auto = on when the job spans nodes */
    int compress;           /* dt_compress */
    int compress_cross_only;
    /* checkpoints and callbacks (src/checkpoint/, train.c) */
    const char *checkpoint_dir; /* NULL: no checkpoints, signals kill as usual */
    long ckpt_every;        /* checkpoint every N epochs (ckpt_every_steps 0) or steps */
    int ckpt_every_steps;
    double ckpt_seconds;    /* also after this many seconds since the last; 0 off */
    int keep;               /* newest checkpoints kept: 3 (0 = all) */
    const char *resume;     /* "latest", a directory or a file; NULL */
    const char *save_best;  /* ModelCheckpoint(save_best_only) path; NULL */
    const char *monitor;    /* val_loss | val_accuracy | loss | accuracy */
    int patience;           /* --early-stopping; -1 off */
    double min_delta;
    int restore_best;
    const char *export_keras; /* .weights.h5 path; NULL */
    char *command_line;     /* argv joined, for checkpoints (allocated) */
    /* what training reports (src/metrics/) */
    int progress;           /* 0 auto (a bar on a terminal), 1 plain lines, 2 bar */
    const char *metrics;    /* .csv or .jsonl; NULL */
    long metrics_every;     /* also a row every N steps; 0 off */
    const char *logdir;     /* TensorBoard event files; NULL */
    const char *timeline;   /* Chrome trace JSON; NULL */
    int verbose;            /* 0 quiet, 1 normal, 2 per-step */
    int help, version;      /* print and exit 0 */
};

/* Fills cfg from argv; returns DT_OK or DT_EUSAGE with st filled. */
int dt_options_parse(struct dt_config *cfg, int argc, char **argv, dt_status *st);
void dt_options_usage(FILE *out);
/* An integer flag value in [lo, hi]; the message names the flag. Shared with
 * the other executables (dtrain-bench-allreduce). */
int dt_parse_long(const char *flag, const char *arg, long lo, long hi, long *out, dt_status *st);
void dt_options_free(struct dt_config *cfg);

#endif
