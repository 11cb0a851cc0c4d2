/* options_table.c: every dtrain option, one row each, in --help's order.
 *
 * The rows are the single source: options.c makes getopt's arrays, --help,
 * the defaults and the range and choice checks from them, for the dtrain
 * program and for libdtrain alike; tests/options_doc.sh holds doc/dtrain.1
 * to the same rows. A new option is a new row (and its man page entry). The
 * few options whose argument is a small language of its own (--lr-steps,
 * --loss-scale, --checkpoint-every) have a parse function here. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "collectives/coll.h"
#include "collectives/powersgd.h"
#include "data/augment.h"
#include "data/pool.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "nn/model.h"
#include "optim/schedule.h"
#include "options_table.h"
#include "strategy/ps.h"
#include "strategy/strategy.h"

/* What a NAME or CHOICE row accepts, in words: "a, b or c". Here, beside
 * the rows, as both options.c and the odd ones' parsers below use it. */
void dt_option_expected(const struct dt_option *o, char *buf, size_t size)
{
    size_t n = 0, len = 0;
    while (o->names[n]) n++;
    size_t total = n + (o->other != NULL);
    buf[0] = '\0';
    for (size_t i = 0; i < total && len < size; i++) {
        const char *sep = i == 0 ? "" : i + 1 == total ? " or " : ", ";
        len += (size_t)snprintf(buf + len, size - len, "%s%s", sep, i < n ? o->names[i] : o->other);
    }
}

/* "FLAG: expected A, B or C, found 'ARG'": a row's refusal of an argument. */
int dt_option_refuse(const struct dt_option *o, const char *flag, const char *arg, dt_status *st)
{
    char expected[256];
    dt_option_expected(o, expected, sizeof expected);
    return dt_fail(st, DT_EUSAGE, "%s: expected %s, found '%s'", flag, expected, arg ? arg : "");
}

/* ---- the odd ones ---- */

static int parse_lr_steps(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                          dt_status *st)
{
    (void)o;
    cfg->n_lr_boundaries = 0;
    for (const char *p = arg; *p;) {
        char *end;
        errno = 0;
        long e = strtol(p, &end, 10);
        int prev = cfg->n_lr_boundaries ? cfg->lr_boundaries[cfg->n_lr_boundaries - 1] : 1;
        if (errno || end == p || e <= prev || e > INT_MAX || cfg->n_lr_boundaries == 16 || (*end && *end != ','))
            return dt_fail(st, DT_EUSAGE, "%s: expected up to 16 increasing epoch numbers above 1, "
                           "e.g. 30,60,80, found '%s'", flag, arg);
        cfg->lr_boundaries[cfg->n_lr_boundaries++] = (int)e;
        p = *end == ',' ? end + 1 : end;
    }
    return DT_OK;
}

static int parse_loss_scale(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                            dt_status *st)
{
    cfg->loss_scale_set = 1;
    if (!strcmp(arg, "dynamic")) cfg->loss_scale = -1.0f;
    else if (!strcmp(arg, "none")) cfg->loss_scale = 0.0f;
    else {
        char *end;
        double ls = strtod(arg, &end);
        if (end == arg || *end || !(ls > 0.0 && ls <= 1e30)) return dt_option_refuse(o, flag, arg, st);
        cfg->loss_scale = (float)ls;
    }
    return DT_OK;
}

/* N, Nepoch(s) or Nstep(s). */
static int parse_ckpt_every(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                            dt_status *st)
{
    (void)o;
    char *end;
    errno = 0;
    long n = strtol(arg, &end, 10);
    int steps = 0;
    if (!strcmp(end, "step") || !strcmp(end, "steps")) steps = 1;
    else if (*end && strcmp(end, "epoch") && strcmp(end, "epochs")) n = -1;
    if (errno || end == arg || n < 1)
        return dt_fail(st, DT_EUSAGE, "%s: expected a positive count with an optional unit, "
                       "e.g. 2, 2epoch or 500step, found '%s'", flag, arg);
    cfg->ckpt_every = n;
    cfg->ckpt_every_steps = steps;
    return DT_OK;
}

/* auto (0) or a count of threads. */
static int parse_map_threads(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                             dt_status *st)
{
    (void)o;
    char *end = NULL;
    long n = -1;
    errno = 0;
    if (!strcmp(arg, "auto")) {
        cfg->map_threads = 0;
        return DT_OK;
    }
    if (*arg >= '0' && *arg <= '9') n = strtol(arg, &end, 10);
    if (errno || !end || *end || n < 1 || n > DT_MAP_THREADS_MAX)
        return dt_fail(st, DT_EUSAGE, "%s: expected auto or a thread count in 1..%d, found '%s'", flag,
                       DT_MAP_THREADS_MAX, arg);
    cfg->map_threads = (int)n;
    return DT_OK;
}

/* none, fp16, bf16 (the transport: compress) or powersgd:R (powersgd_rank). */
static int parse_compression(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                             dt_status *st)
{
    static const int transport[] = {DT_COMPRESS_NONE, DT_COMPRESS_FP16, DT_COMPRESS_BF16};
    for (int i = 0; o->names[i]; i++)
        if (!strcmp(arg, o->names[i])) {
            cfg->compress = transport[i];
            cfg->powersgd_rank = 0;
            return DT_OK;
        }
    if (strncmp(arg, "powersgd", 8) != 0) return dt_option_refuse(o, flag, arg, st);
    char *end = NULL;
    long r = -1;
    errno = 0;
    if (arg[8] == ':' && arg[9] >= '0' && arg[9] <= '9') r = strtol(arg + 9, &end, 10);
    if (errno || !end || *end || r < 1 || r > DT_POWERSGD_MAX_RANK)
        return dt_fail(st, DT_EUSAGE, "%s: expected powersgd:R with a rank R in 1..%d (e.g. powersgd:4), found '%s'",
                       flag, DT_POWERSGD_MAX_RANK, arg);
    cfg->compress = DT_COMPRESS_NONE; /* the factors and the rest travel in float32 */
    cfg->powersgd_rank = (int)r;
    return DT_OK;
}

static int verify_synthetic(const char *flag, const char *arg, dt_status *st)
{
    (void)flag; /* the spec's own messages name --synthetic */
    struct dt_synthetic sy;
    return dt_synthetic_parse(arg, &sy, st);
}

static int verify_augment(const char *flag, const char *arg, dt_status *st)
{
    (void)flag; /* the spec's own messages name --augment */
    struct dt_augment a;
    return dt_augment_parse(arg, &a, st);
}

static int verify_directory(const char *flag, const char *arg, dt_status *st)
{
    return *arg ? DT_OK : dt_fail(st, DT_EUSAGE, "%s: expected a directory, found ''", flag);
}

static int verify_file(const char *flag, const char *arg, dt_status *st)
{
    return *arg ? DT_OK : dt_fail(st, DT_EUSAGE, "%s: expected a file name, found ''", flag);
}

static int verify_dir(const char *flag, const char *arg, dt_status *st)
{
    return *arg ? DT_OK : dt_fail(st, DT_EUSAGE, "%s: expected a directory name, found ''", flag);
}

static int verify_metrics(const char *flag, const char *arg, dt_status *st)
{
    size_t n = strlen(arg);
    if ((n > 4 && dt_ends_with(arg, ".csv")) || (n > 6 && dt_ends_with(arg, ".jsonl"))) return DT_OK;
    return dt_fail(st, DT_EUSAGE, "%s: expected a file name ending in .csv or .jsonl, found '%s'", flag, arg);
}

static int verify_keras(const char *flag, const char *arg, dt_status *st)
{
    if (dt_ends_with(arg, ".weights.h5")) return DT_OK;
    return dt_fail(st, DT_EUSAGE, "%s: Keras 3 loads weights only from a file named *.weights.h5, found '%s'",
                   flag, arg);
}

/* ---- choices ---- */

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define VALUES(...) ((const int[]){__VA_ARGS__})
#define F(field) offsetof(struct dt_config, field)
#define I(lo, hi) .imin = (lo), .imax = (hi)
#define R(lo, hi) .min = (lo), .max = (hi)

const struct dt_option dt_option_table[] = {
    /* Training */
    {"epochs", 'e', DT_OPT_INT, 0, F(epochs), I(1, INT_MAX), .def = 10, .arg = "N", .section = "Training",
     .help = "passes over the training data (default %D)"},
    {"batch-size", 'b', DT_OPT_INT, 0, F(batch_size), I(1, 1 << 20), .def = 64, .arg = "N",
     .help = "samples per replica per step (default %D);\nthe global batch is N x ranks"},
    {"steps-per-epoch", 0, DT_OPT_LONG, 0, F(steps_per_epoch), I(1, LONG_MAX), .arg = "N",
     .help = "stop each epoch after N steps (default: full pass)"},
    {"grad-accum", 0, DT_OPT_INT, 0, F(grad_accum), I(1, 1 << 20), .def = 1, .arg = "K",
     .help = "sum the gradients of K batches before one all-reduce\nand update: a K times larger batch (default %D)"},
    {"model", 'm', DT_OPT_NAME, 0, F(model), .def_str = "cnn", .names = NAMES("cnn", "mlp"),
     .other = "a model file (.cfg)", .is_other = dt_model_is_file, .arg = "NAME|FILE",
     .help = "cnn (the reference CNN, default), mlp, or a model\n"
             "file (inputs/NAME.cfg: [conv2d], [maxpool], [dense], ...)"},
    {"dropout", 0, DT_OPT_FLOAT, DT_OPT_HI_OPEN, F(dropout), R(0.0, 1.0), .def = 0.5, .arg = "RATE",
     .help = "dropout rate of the CNN, in [0, 1) (default %D)"},
    {"sync-bn", 0, DT_OPT_FLAG, 0, F(sync_bn), .set = 1,
     .help = "batch normalization over the global batch: its\nstatistics summed over all replicas each step"},
    {"optimizer", 'o', DT_OPT_NAME, 0, F(optimizer), .def_str = "adam", .names = NAMES("adam", "adamw", "sgd"),
     .arg = "NAME", .help = "adam (default, Keras's), adamw (PyTorch's AdamW:\ndecoupled weight decay) or sgd"},
    {"lr", 0, DT_OPT_FLOAT, DT_OPT_LO_OPEN, F(lr), R(0.0, 1e6), .arg = "RATE",
     .help = "learning rate (default 0.001 adam and adamw, 0.01 sgd)"},
    {"momentum", 0, DT_OPT_FLOAT, DT_OPT_HI_OPEN, F(momentum), R(0.0, 1.0), .arg = "M",
     .help = "SGD momentum, in [0, 1) (default %D)"},
    {"weight-decay", 0, DT_OPT_FLOAT, 0, F(weight_decay), R(0.0, 1e6), .def = 0.01, .arg = "W",
     .help = "adamw: each step multiplies the decayed parameters\nby 1 - lr x W (default %D)"},
    {"decay-all", 0, DT_OPT_FLAG, 0, F(decay_all), .set = 1,
     .help = "adamw: decay every parameter (default: the weight\nmatrices only, not biases, gains or embeddings)"},
    {"clip-norm", 0, DT_OPT_FLOAT, DT_OPT_LO_OPEN, F(clip_norm), R(0.0, 1e30), .arg = "G",
     .help = "scale each update's gradient down to global L2 norm\nG when it is larger (clip_grad_norm_; default off)"},
    {"lr-schedule", 0, DT_OPT_CHOICE, 0, F(lr_schedule), .def = DT_LR_CONSTANT,
     .names = NAMES("constant", "step", "cosine"), .values = VALUES(DT_LR_CONSTANT, DT_LR_STEP, DT_LR_COSINE),
     .arg = "S", .help = "constant (default), step or cosine"},
    {"lr-steps", 0, DT_OPT_CUSTOM, 0, 0, .parse = parse_lr_steps, .arg = "E1,E2,..",
     .help = "step: multiply the rate by --lr-factor (0.1) when\nepochs E1, E2, ... begin"},
    {"lr-factor", 0, DT_OPT_FLOAT, DT_OPT_LO_OPEN | DT_OPT_HI_OPEN, F(lr_factor), R(0.0, 1.0), .def = 0.1,
     .arg = "F"}, /* in --lr-steps' text */
    {"lr-min", 0, DT_OPT_FLOAT, 0, F(lr_min), R(0.0, 1e6), .arg = "LR",
     .help = "cosine: the rate at the end (default 0)"},
    {"warmup-epochs", 0, DT_OPT_FLOAT, 0, F(warmup_epochs), R(0.0, 1e6), .arg = "W",
     .help = "raise the rate linearly over the first W epochs"},
    {"lr-scale", 0, DT_OPT_CHOICE, 0, F(lr_scale_linear), .names = NAMES("linear", "none"), .values = VALUES(1, 0),
     .arg = "linear", .help = "multiply --lr by the number of replicas (Goyal et\nal.); warm-up then starts from --lr"},
    {"seed", 's', DT_OPT_U64, 0, F(seed), I(0, LONG_MAX), .def = 42, .arg = "N",
     .help = "seed for initialisation, shuffling, dropout (default %D)"},
    {"nan-policy", 0, DT_OPT_CHOICE, 0, F(nan_policy), .def = DT_NAN_ABORT, .names = NAMES("abort", "skip"),
     .values = VALUES(DT_NAN_ABORT, DT_NAN_SKIP), .arg = "P",
     .help = "abort (default) or skip: what a NaN or infinity in the\n"
             "reduced gradient does (loss-scale overflows are skips)"},
    {"stall-timeout", 0, DT_OPT_DOUBLE, 0, F(stall_timeout), R(0.0, 1e7), .def = 300, .arg = "S",
     .help = "end the job when a rank waits S seconds in a collective\n"
             "for ranks that do not come, naming them (default %D;\n0 = wait forever)"},
    {"debug-collectives", 0, DT_OPT_FLAG, 0, F(debug_collectives), .set = 1,
     .help = "ranks compare step, layout and call before every step\n"
             "and every gradient all-reduce (default: each epoch's\nstart and every 100 steps)"},
    {"no-validation", 0, DT_OPT_FLAG, 0, F(validation), .def = 1, .set = 0,
     .help = "do not evaluate on the file's /test split"},

    /* Data and parallelism */
    {"augment", 0, DT_OPT_STRING, 0, F(augment), .verify = verify_augment, .arg = "A",
     .section = "Data and parallelism",
     .help = "flip, crop[:PAD] or both (flip,crop:4): random per\nepoch and sample, training data only"},
    {"synthetic", 0, DT_OPT_STRING, 0, F(synthetic), .verify = verify_synthetic, .arg = "SPEC",
     .help = "generated data instead of INPUT.h5: HxWxC:CLASSES[:N],\ne.g. 32x32x3:10 (N = 51200 samples by default)"},
    {"num-classes", 0, DT_OPT_INT, 0, F(num_classes), I(2, 256), .arg = "N",
     .help = "the class count (default: the files' num_classes,\n"
             "else the largest label + 1; refused when more than\n"
             "max(2, 10%) of those classes have no sample)"},
    {"shard-policy", 0, DT_OPT_CHOICE, 0, F(shard_policy), .def = DT_SHARD_AUTO,
     .names = NAMES("auto", "data", "file"), .values = VALUES(DT_SHARD_AUTO, DT_SHARD_DATA, DT_SHARD_FILE),
     .arg = "P", .help = "auto (default), data or file: how samples are dealt\nto ranks (file: whole shard files per rank)"},
    {"prefetch", 0, DT_OPT_INT, 0, F(prefetch), I(0, 64), .def = 2, .arg = "N",
     .help = "a thread reads up to N batches ahead of the step\n(default %D); 0 reads each batch in the training loop"},
    {"map-threads", 0, DT_OPT_CUSTOM, 0, 0, .def_str = "auto", .names = NAMES("auto"), .other = "N",
     .parse = parse_map_threads, .arg = "N",
     .help = "threads that read and augment each batch (default\nauto: the cores a rank has beyond its --threads,\n"
             "at least 1); the batches are the same for any N"},
    {"cache", 0, DT_OPT_FLAG, 0, F(cache), .set = 1,
     .help = "keep the training samples a rank reads in memory:\nlater epochs read them from there"},
    {"cache-limit", 0, DT_OPT_LONG, 0, F(cache_limit_mib), I(1, 1L << 30), .arg = "MIB",
     .help = "the cache's size per rank (default: a quarter of the\nnode's memory over its ranks); beyond it, from disk"},
    {"threads", 't', DT_OPT_INT, 0, F(threads), I(1, 1024), .def = 1, .arg = "N",
     .help = "BLAS/oneDNN threads per rank (default %D)"},

    /* Device and precision */
    {"device", 0, DT_OPT_NAME, 0, F(device), .def_str = "cpu", .names = NAMES("cpu", "cuda"), .arg = "D",
     .section = "Device and precision",
     .help = "cpu (default) or cuda: one GPU per rank, the node-\nlocal rank picks it (needs a --with-cuda build)"},
    {"gpus-per-node", 0, DT_OPT_INT, 0, F(gpus_per_node), I(1, 1024), .arg = "N",
     .help = "GPUs to use per node (default: all visible); more\nranks on a node than GPUs is refused"},
    {"devices", 0, DT_OPT_FLAG, 0, F(list_devices), .set = 1,
     .help = "print each rank's host, node, local rank and device,\nthen exit"},
    {"precision", 0, DT_OPT_CHOICE, 0, F(precision), .def = DT_PREC_FP32, .names = NAMES("fp32", "bf16", "fp16"),
     .values = VALUES(DT_PREC_FP32, DT_PREC_BF16, DT_PREC_FP16), .arg = "P",
     .help = "fp32 (default), bf16 or fp16: 16-bit convolutions\n"
             "and matmuls with fp32 master weights and 16-bit\n"
             "gradient transport (fp16: GPU only); the\nactivations are stored in 16 bits too"},
    {"fp32-activations", 0, DT_OPT_FLAG, 0, F(fp32_activations), .set = 1,
     .help = "keep activations in float32 under --precision\nbf16|fp16 (twice the activation memory)"},
    {"winograd", 0, DT_OPT_FLAG, 0, F(winograd), .set = 1,
     .help = "float32 3x3 stride-1 convolutions run Winograd\nkernels (CPU: dtrain's at 16+ channels with AVX2\nand on Zen 4, else oneDNN's with AVX-512 at 32+;\nDTRAIN_WINOGRAD_KERNELS picks; faster there, not\nbitwise equal to the default direct ones)"},
    {"loss-scale", 0, DT_OPT_CUSTOM, 0, 0, .names = NAMES("dynamic", "none"),
     .other = "a positive number", .parse = parse_loss_scale, .arg = "S",
     .help = "dynamic (default with fp16: start 2^15, halve and\n"
             "skip the step on overflow, double after 2000 clean\n"
             "steps), none (default otherwise), or a fixed number"},
    {"recompute", 0, DT_OPT_FLAG, 0, F(recompute), .set = 1,
     .help = "keep only each residual block's input and run its\n"
             "forward pass again in backward (activation\n"
             "checkpointing: less memory, about a third more\n"
             "compute; the same bits; models without batchnorm)"},
    {"cuda-graphs", 0, DT_OPT_FLAG, 0, F(cuda_graphs), .set = 1,
     .help = "record each step's forward pass, loss and backward\n"
             "pass as a CUDA graph and replay it with one launch\n(--device cuda; models without batchnorm)"},

    /* Distribution */
    {"strategy", 0, DT_OPT_STRING, 0, F(strategy), .def_str = "auto", .arg = "NAME", /* checked by dt_strategy_create */
     .section = "Distribution",
     .help = "auto (default: mirrored on one node, multi-worker on\n"
             "several), mirrored, multi-worker, central-storage\n"
             "(one copy of parameters and optimizer per node), or\n"
             "sharded (ZeRO-1: each rank keeps 1/N of the optimizer),\n"
             "fsdp (ZeRO-3: 1/N of parameters, gradients and\noptimizer), or parameter-server"},
    {"fsdp-shard", 0, DT_OPT_CHOICE, 0, F(fsdp_node), .def = 0, .names = NAMES("world", "node"), .values = VALUES(0, 1),
     .arg = "S", .help = "fsdp: shard over all ranks (world, default), or\ninside each node and replicate across nodes\n"
                         "(node: HSDP; gathers stay on the node)"},
    {"pipeline-stages", 0, DT_OPT_INT, 0, F(pipeline_stages), I(1, 256), .def = 1, .arg = "P",
     .help = "cut the model into P stages at layer boundaries\n(by [stage] lines in the model file, or by measured\n"
             "layer times): ranks form a P x D mesh, D = ranks/P\nreplicas of the pipeline (default %D: none)"},
    {"micro-batches", 0, DT_OPT_INT, 0, F(micro_batches), I(1, 1 << 16), .def = 4, .arg = "M",
     .help = "with --pipeline-stages: each batch goes through the\nstages as M micro-batches, 1F1B (default %D)"},
    {"num-ps", 0, DT_OPT_INT, 0, F(num_ps), I(1, 1 << 20), .def = 1, .arg = "K",
     .help = "parameter-server: ranks 0..K-1 are servers (default %D)"},
    {"ps-mode", 0, DT_OPT_CHOICE, 0, F(ps_mode), .def = PS_ASYNC, .names = NAMES("async", "ssp", "sync"),
     .values = VALUES(PS_ASYNC, PS_SSP, PS_SYNC), .arg = "M", .help = "async (default), ssp or sync"},
    {"staleness", 0, DT_OPT_INT, 0, F(staleness), I(0, 1 << 20), .def = 2, .arg = "S",
     .help = "ssp: steps a worker may run ahead of the slowest (%D)"},
    {"ps-transport", 0, DT_OPT_CHOICE, 0, F(ps_transport), .def = PS_TRANSPORT_AUTO,
     .names = NAMES("auto", "one-sided", "two-sided"),
     .values = VALUES(PS_TRANSPORT_AUTO, PS_TRANSPORT_RMA, PS_TRANSPORT_MSG), .arg = "T",
     .help = "auto (default: one-sided windows where the MPI can\n"
             "make them, else two-sided messages), one-sided or\ntwo-sided"},

    /* Gradient exchange */
    {"allreduce", 0, DT_OPT_NAME, 0, F(allreduce), .def_str = "auto", .names = NAMES("auto", "mpi", "ring", "hier"),
     .arg = "ALGO", .section = "Gradient exchange",
     .help = "auto (default: by size and layout), mpi, ring or hier"},
    {"allreduce-table", 0, DT_OPT_STRING, 0, F(allreduce_table), .arg = "F",
     .help = "auto's table (from dtrain-bench-allreduce --table)"},
    {"ring-chunk-kb", 0, DT_OPT_INT, 0, F(ring_chunk_kb), I(0, 1 << 20), .def = 0, .arg = "KB",
     .help = "ring and hier: pipeline piece in KiB (default 0:\n63 across nodes, 256 inside one)"},
    {"ring-depth", 0, DT_OPT_INT, 0, F(ring_depth), I(0, DT_RING_MAX_DEPTH), .def = 0, .arg = "D",
     .help = "ring and hier: pieces in flight (default 0:\n8 across nodes, 2 inside one)"},
    {"ranks-per-node", 0, DT_OPT_INT, 0, F(ranks_per_node), I(1, 1 << 20), .arg = "K",
     .help = "treat each K consecutive ranks as one node\n(default: detected; env DTRAIN_RANKS_PER_NODE)"},
    {"bucket-mb", 0, DT_OPT_DOUBLE, 0, F(bucket_mb), R(0.0, 65536.0), .def = 1, .arg = "MB",
     .help = "gradient bucket size (default %D); 0 = one\nbucket for the whole gradient block"},
    {"overlap", 0, DT_OPT_FLAG, 0, F(overlap), .def = DT_OVERLAP_AUTO, .set = DT_OVERLAP_ON,
     .help = "reduce buckets during backward, in a thread\n(default when the job spans nodes)"},
    {"no-overlap", 0, DT_OPT_FLAG, 0, F(overlap), .def = DT_OVERLAP_AUTO, .set = DT_OVERLAP_OFF,
     .help = "reduce buckets after backward (default on one node)"},
    {"grad-compression", 0, DT_OPT_CUSTOM, DT_OPT_SNUG, 0, .def_str = "none", .names = NAMES("none", "fp16", "bf16"),
     .other = "powersgd:R", .parse = parse_compression, .arg = "C",
     .help = "none (default), fp16 or bf16: 16-bit transport,\nfp32 sums; or powersgd:R: rank-R factors of each\n"
             "weight gradient (PowerSGD with error feedback,\nR in 1..256; mirrored and multi-worker, CPU)"},
    {"compress-cross-only", 0, DT_OPT_FLAG, 0, F(compress_cross_only), .set = 1,
     .help = "compress only hops between nodes"},
    {"autotune", 0, DT_OPT_FLAG, 0, F(autotune), .set = 1,
     .help = "time --allreduce x --bucket-mb x --overlap on the first\n"
             "steps (training all the while), keep the fastest and\n"
             "remember it per layout in --autotune-cache"},
    {"autotune-cache", 0, DT_OPT_STRING, 0, F(autotune_cache), .verify = verify_file, .arg = "FILE",
     .help = "--autotune's choices (default: $XDG_CACHE_HOME or\n~/.cache, dtrain/autotune.tsv)"},
    {"autotune-steps", 0, DT_OPT_INT, 0, F(autotune_steps), I(1, 1000), .def = 3, .arg = "N",
     .help = "--autotune: timed steps per configuration, after\none untimed (default %D)"},

    /* Checkpoints and callbacks */
    {"checkpoint-dir", 0, DT_OPT_STRING, 0, F(checkpoint_dir), .verify = verify_directory, .arg = "DIR",
     .section = "Checkpoints and callbacks",
     .help = "write checkpoints (one HDF5 file each) into DIR;\nSIGUSR1/SIGTERM then checkpoint and exit 75"},
    {"checkpoint-every", 0, DT_OPT_CUSTOM, 0, 0, .def_str = "1epoch", .parse = parse_ckpt_every,
     .arg = "N[epoch|step]", .help = "how often (default %D)"},
    {"checkpoint-seconds", 0, DT_OPT_DOUBLE, 0, F(ckpt_seconds), R(1.0, 1e9), .arg = "S",
     .help = "also when S seconds passed since the last one"},
    {"checkpoint-async", 0, DT_OPT_FLAG, 0, F(ckpt_async), .set = 1,
     .help = "write them on a thread while training goes on: the\n"
             "state is copied to memory between steps, one write\nat a time"},
    {"keep", 0, DT_OPT_INT, 0, F(keep), I(0, 1 << 20), .def = 3, .arg = "K",
     .help = "keep the newest K checkpoints (default %D; 0 = all)"},
    {"resume", 0, DT_OPT_STRING, 0, F(resume), .arg = "WHAT",
     .help = "continue from latest (in --checkpoint-dir), a\ncheckpoint directory, or a checkpoint file"},
    {"save-best", 0, DT_OPT_STRING, 0, F(save_best), .arg = "PATH",
     .help = "save when --monitor improves (ModelCheckpoint with\n"
             "save_best_only); a .weights.h5 PATH gets Keras's layout"},
    {"monitor", 0, DT_OPT_NAME, 0, F(monitor), .def_str = "val_loss",
     .names = NAMES("val_loss", "val_accuracy", "loss", "accuracy"), .arg = "M",
     .help = "val_loss (default), val_accuracy, loss or accuracy"},
    {"early-stopping", 0, DT_OPT_INT, 0, F(patience), I(0, 1 << 20), .def = -1, .arg = "P",
     .help = "stop after P epochs without improvement of --monitor"},
    {"min-delta", 0, DT_OPT_DOUBLE, 0, F(min_delta), R(0.0, 1e9), .arg = "D",
     .help = "smallest change that counts as improvement (%D)"},
    {"restore-best", 0, DT_OPT_FLAG, 0, F(restore_best), .set = 1,
     .help = "end with the weights of the best epoch"},
    {"export-keras", 0, DT_OPT_STRING, 0, F(export_keras), .verify = verify_keras, .arg = "PATH",
     .help = "write the final weights as a Keras 3 .weights.h5"},
    {"export-hf", 0, DT_OPT_STRING, 0, F(export_hf), .verify = verify_dir, .arg = "DIR",
     .help = "write a GPT model, its config and tokenizer as a\n"
             "Hugging Face transformers GPT-2 directory"},

    /* Monitoring */
    {"progress", 0, DT_OPT_CHOICE, 0, F(progress), .def = DT_PROGRESS_AUTO, .names = NAMES("auto", "bar", "plain"),
     .values = VALUES(DT_PROGRESS_AUTO, DT_PROGRESS_BAR, DT_PROGRESS_PLAIN), .arg = "P", .section = "Monitoring",
     .help = "auto (default: a progress bar on a terminal, one line\nper epoch otherwise), bar or plain"},
    {"metrics", 0, DT_OPT_STRING, 0, F(metrics), .verify = verify_metrics, .arg = "FILE",
     .help = "a row per epoch (.csv, or .jsonl for JSON lines):\n"
             "loss, accuracy, samples/s, communication, data wait"},
    {"metrics-every", 0, DT_OPT_LONG, 0, F(metrics_every), I(1, LONG_MAX), .arg = "N",
     .help = "also a row every N steps"},
    {"logdir", 0, DT_OPT_STRING, 0, F(logdir), .arg = "DIR",
     .help = "TensorBoard event files in DIR/train, DIR/validation"},
    {"histogram-freq", 0, DT_OPT_INT, 0, F(histogram_freq), I(0, 1 << 20), .def = 0, .arg = "N",
     .help = "with --logdir: a histogram of every parameter tensor\n"
             "after every Nth epoch (default %D: none)"},
    {"histograms", 0, DT_OPT_CHOICE, 0, F(histograms), .def = DT_HIST_WEIGHTS,
     .names = NAMES("weights", "grads", "weights,grads"),
     .values = VALUES(DT_HIST_WEIGHTS, DT_HIST_GRADS, DT_HIST_WEIGHTS | DT_HIST_GRADS), .arg = "LIST",
     .help = "what --histogram-freq shows: weights (default), grads\n"
             "(the epoch's last gradient) or weights,grads"},
    {"timeline", 0, DT_OPT_STRING, 0, F(timeline), .arg = "FILE",
     .help = "Chrome trace (Perfetto, chrome://tracing) of every\n"
             "rank's layers, all-reduces, data reads, checkpoints"},
    {"sample-log", 0, DT_OPT_STRING, 0, F(sample_log), .verify = verify_file, .arg = "FILE",
     .help = "rank 0 writes a line per step: the update, epoch,\n"
             "step and the global sample indices of every replica\n"
             "in order (a reference can train on the same samples)"},

    /* Before a big job */
    {"preflight", 0, DT_OPT_FLAG, 0, F(preflight), .set = 1, .section = "Before a big job",
     .help = "check what the run needs, on its launcher and with its\n"
             "options: the same dtrain and MPI everywhere, the MPI\n"
             "thread level, shared memory in each node, one-sided\n"
             "windows, the input files and --checkpoint-dir as every\n"
             "node sees them, the network between nodes beside the\n"
             "all-reduce, one GPU per rank (--device cuda); print a\n"
             "table and exit (1 naming the first failed check)"},

    /* Output */
    {"quiet", 'q', DT_OPT_FLAG, 0, F(verbose), .def = DT_NORMAL, .set = DT_QUIET, .section = "Output",
     .help = "print nothing but errors"},
    {"verbose", 'v', DT_OPT_FLAG, 0, F(verbose), .def = DT_NORMAL, .set = DT_VERBOSE,
     .help = "also print every step's loss and the model summary"},
    {"help", 'h', DT_OPT_FLAG, 0, F(help), .set = 1, .help = "print this help and exit"},
    {"version", 'V', DT_OPT_FLAG, 0, F(version), .set = 1, .help = "print the version and exit"},
    {0},
};

static_assert(sizeof dt_option_table / sizeof *dt_option_table <= DT_OPTIONS_MAX + 1,
              "struct dt_config's given[] must have a place for every row");
