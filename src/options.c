/* options.c: getopt_long parsing of dtrain's command line (see options.h).
 * Every option here is documented in usage() and in doc/dtrain.1. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "data/augment.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "nn/model.h"
#include "options.h"

void dt_options_usage(FILE *out)
{
    fputs(
        "Usage: mpirun -np N dtrain INPUT.h5 [SHARD.h5 ...] [OPTIONS]\n"
        "Train a model data-parallel over N MPI ranks (every rank a replica).\n"
        "\n"
        "Training:\n"
        "  -e, --epochs N           passes over the training data (default 10)\n"
        "  -b, --batch-size N       samples per replica per step (default 64);\n"
        "                           the global batch is N x ranks\n"
        "      --steps-per-epoch N  stop each epoch after N steps (default: full pass)\n"
        "      --grad-accum K       sum the gradients of K batches before one all-reduce\n"
        "                           and update: a K times larger batch (default 1)\n"
        "  -m, --model NAME|FILE    cnn (the reference CNN, default), mlp, or a model\n"
        "                           file (inputs/NAME.cfg: [conv2d], [maxpool], [dense], ...)\n"
        "      --dropout RATE       dropout rate of the CNN, in [0, 1) (default 0.5)\n"
        "      --sync-bn            batch normalization over the global batch: its\n"
        "                           statistics summed over all replicas each step\n"
        "  -o, --optimizer NAME     adam (default) or sgd\n"
        "      --lr RATE            learning rate (default 0.001 adam, 0.01 sgd)\n"
        "      --momentum M         SGD momentum, in [0, 1) (default 0)\n"
        "      --lr-schedule S      constant (default), step or cosine\n"
        "      --lr-steps E1,E2,..  step: multiply the rate by --lr-factor (0.1) when\n"
        "                           epochs E1, E2, ... begin\n"
        "      --lr-min LR          cosine: the rate at the end (default 0)\n"
        "      --warmup-epochs W    raise the rate linearly over the first W epochs\n"
        "      --lr-scale linear    multiply --lr by the number of replicas (Goyal et\n"
        "                           al.); warm-up then starts from --lr\n"
        "  -s, --seed N             seed for initialisation, shuffling, dropout (default 42)\n"
        "      --nan-policy P       abort (default) or skip: what a NaN or infinity in the\n"
        "                           reduced gradient does (loss-scale overflows are skips)\n"
        "      --stall-timeout S    end the job when a rank waits S seconds in a collective\n"
        "                           for ranks that do not come, naming them (default 300;\n"
        "                           0 = wait forever)\n"
        "      --debug-collectives  ranks compare step, layout and call before every step\n"
        "                           and every gradient all-reduce (default: each epoch's\n"
        "                           start and every 100 steps)\n"
        "      --no-validation      do not evaluate on the file's /test split\n"
        "\n"
        "Data and parallelism:\n"
        "      --augment A          flip, crop[:PAD] or both (flip,crop:4): random per\n"
        "                           epoch and sample, training data only\n"
        "      --synthetic SPEC     generated data instead of INPUT.h5: HxWxC:CLASSES[:N],\n"
        "                           e.g. 32x32x3:10 (N = 51200 samples by default)\n"
        "      --shard-policy P     auto (default), data or file: how samples are dealt\n"
        "                           to ranks (file: whole shard files per rank)\n"
        "      --prefetch N         a thread reads up to N batches ahead of the step\n"
        "                           (default 2); 0 reads each batch in the training loop\n"
        "      --cache              keep the training samples a rank reads in memory:\n"
        "                           later epochs read them from there\n"
        "      --cache-limit MIB    the cache's size per rank (default: a quarter of the\n"
        "                           node's memory over its ranks); beyond it, from disk\n"
        "  -t, --threads N          BLAS/oneDNN threads per rank (default 1)\n"
        "\n"
        "Device and precision:\n"
        "      --device D           cpu (default) or cuda: one GPU per rank, the node-\n"
        "                           local rank picks it (needs a --with-cuda build)\n"
        "      --gpus-per-node N    GPUs to use per node (default: all visible); more\n"
        "                           ranks on a node than GPUs is refused\n"
        "      --devices            print each rank's host, node, local rank and device,\n"
        "                           then exit\n"
        "      --precision P        fp32 (default), bf16 or fp16: 16-bit convolutions\n"
        "                           and matmuls with fp32 master weights and 16-bit\n"
        "                           gradient transport (fp16: GPU only); on the GPU\n"
        "                           the activations are stored in 16 bits too\n"
        "      --fp32-activations   keep activations in float32 under --precision\n"
        "                           bf16|fp16 (the CPU always does)\n"
        "      --loss-scale S       dynamic (default with fp16: start 2^15, halve and\n"
        "                           skip the step on overflow, double after 2000 clean\n"
        "                           steps), none (default otherwise), or a fixed number\n"
        "      --cuda-graphs        record each step's forward pass, loss and backward\n"
        "                           pass as a CUDA graph and replay it with one launch\n"
        "                           (--device cuda; models without batchnorm)\n"
        "\n"
        "Distribution:\n"
        "      --strategy NAME      auto (default: mirrored on one node, multi-worker on\n"
        "                           several), mirrored, multi-worker, central-storage\n"
        "                           (one copy of parameters and optimizer per node), or\n"
        "                           sharded (ZeRO-1: each rank keeps 1/N of the optimizer),\n"
        "                           or parameter-server\n"
        "      --num-ps K           parameter-server: ranks 0..K-1 are servers (default 1)\n"
        "      --ps-mode M          async (default), ssp or sync\n"
        "      --staleness S        ssp: steps a worker may run ahead of the slowest (2)\n"
        "      --ps-transport T     auto (default: one-sided windows where the MPI can\n"
        "                           make them, else two-sided messages), one-sided or\n"
        "                           two-sided\n"
        "\n"
        "Gradient exchange:\n"
        "      --allreduce ALGO     auto (default: by size and layout), mpi, ring or hier\n"
        "      --allreduce-table F  auto's table (from dtrain-bench-allreduce --table)\n"
        "      --ranks-per-node K   treat each K consecutive ranks as one node\n"
        "                           (default: detected; env DTRAIN_RANKS_PER_NODE)\n"
        "      --bucket-mb MB       gradient bucket size (default 1); 0 = one\n"
        "                           bucket for the whole gradient block\n"
        "      --overlap            reduce buckets during backward, in a thread\n"
        "                           (default when the job spans nodes)\n"
        "      --no-overlap         reduce buckets after backward (default on one node)\n"
        "      --grad-compression C none (default), fp16 or bf16: 16-bit transport,\n"
        "                           fp32 sums\n"
        "      --compress-cross-only  compress only hops between nodes\n"
        "\n"
        "Checkpoints and callbacks:\n"
        "      --checkpoint-dir DIR  write checkpoints (one HDF5 file each) into DIR;\n"
        "                           SIGUSR1/SIGTERM then checkpoint and exit 75\n"
        "      --checkpoint-every N[epoch|step]  how often (default 1epoch)\n"
        "      --checkpoint-seconds S  also when S seconds passed since the last one\n"
        "      --keep K             keep the newest K checkpoints (default 3; 0 = all)\n"
        "      --resume WHAT        continue from latest (in --checkpoint-dir), a\n"
        "                           checkpoint directory, or a checkpoint file\n"
        "      --save-best PATH     save when --monitor improves (ModelCheckpoint with\n"
        "                           save_best_only); a .weights.h5 PATH gets Keras's layout\n"
        "      --monitor M          val_loss (default), val_accuracy, loss or accuracy\n"
        "      --early-stopping P   stop after P epochs without improvement of --monitor\n"
        "      --min-delta D        smallest change that counts as improvement (0)\n"
        "      --restore-best       end with the weights of the best epoch\n"
        "      --export-keras PATH  write the final weights as a Keras 3 .weights.h5\n"
        "\n"
        "Monitoring:\n"
        "      --progress P         auto (default: a progress bar on a terminal, one line\n"
        "                           per epoch otherwise), bar or plain\n"
        "      --metrics FILE       a row per epoch (.csv, or .jsonl for JSON lines):\n"
        "                           loss, accuracy, samples/s, communication, data wait\n"
        "      --metrics-every N    also a row every N steps\n"
        "      --logdir DIR         TensorBoard event files in DIR/train, DIR/validation\n"
        "      --timeline FILE      Chrome trace (Perfetto, chrome://tracing) of every\n"
        "                           rank's layers, all-reduces, data reads, checkpoints\n"
        "\n"
        "Before a big job:\n"
        "      --preflight          check what the run needs, on its launcher and with its\n"
        "                           options: the same dtrain and MPI everywhere, the MPI\n"
        "                           thread level, shared memory in each node, one-sided\n"
        "                           windows, the input files and --checkpoint-dir as every\n"
        "                           node sees them, the network between nodes beside the\n"
        "                           all-reduce, one GPU per rank (--device cuda); print a\n"
        "                           table and exit (1 naming the first failed check)\n"
        "\n"
        "Output:\n"
        "  -q, --quiet              print nothing but errors\n"
        "  -v, --verbose            also print every step's loss and the model summary\n"
        "  -h, --help               print this help and exit\n"
        "  -V, --version            print the version and exit\n"
        "\n"
        "Exit status: 0 success, 1 runtime failure, 2 bad command line, 3 bad input file.\n"
        "See dtrain(1).\n",
        out);
}

int dt_parse_long(const char *flag, const char *arg, long lo, long hi, long *out, dt_status *st)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end != '\0')
        return dt_fail(st, DT_EUSAGE, "%s: expected an integer, found '%s'", flag, arg);
    if (v < lo || v > hi)
        return dt_fail(st, DT_EUSAGE, "%s: expected an integer in [%ld, %ld], found %ld", flag, lo, hi, v);
    *out = v;
    return DT_OK;
}

static int parse_float(const char *flag, const char *arg, double lo, double hi, int hi_open,
                       float *out, dt_status *st)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (errno || end == arg || *end != '\0' || !isfinite(v))
        return dt_fail(st, DT_EUSAGE, "%s: expected a number, found '%s'", flag, arg);
    if (v < lo || v > hi || (hi_open && v >= hi))
        return dt_fail(st, DT_EUSAGE, "%s: expected a number in [%g, %g%c, found %s", flag, lo, hi,
                       hi_open ? ')' : ']', arg);
    *out = (float)v;
    return DT_OK;
}

enum { OPT_STEPS = 256, OPT_DROPOUT, OPT_LR, OPT_MOMENTUM, OPT_NO_VAL, OPT_SHARD, OPT_ALLREDUCE,
       OPT_TABLE, OPT_RPN, OPT_STRATEGY, OPT_NUM_PS, OPT_PS_MODE, OPT_STALENESS, OPT_PS_TRANSPORT, OPT_BUCKET, OPT_NO_OVERLAP, OPT_OVERLAP, OPT_COMPRESS, OPT_CROSS_ONLY,
       OPT_DEVICE, OPT_GPN, OPT_DEVICES, OPT_PREFLIGHT, OPT_PRECISION, OPT_LOSS_SCALE,
       OPT_CKPT_DIR, OPT_CKPT_EVERY, OPT_CKPT_SECONDS, OPT_KEEP, OPT_RESUME, OPT_SAVE_BEST, OPT_MONITOR,
       OPT_EARLY, OPT_MIN_DELTA, OPT_RESTORE_BEST, OPT_EXPORT_KERAS,
       OPT_PROGRESS, OPT_METRICS, OPT_METRICS_EVERY, OPT_LOGDIR, OPT_TIMELINE,
       OPT_LR_SCHEDULE, OPT_LR_STEPS, OPT_LR_FACTOR, OPT_LR_MIN, OPT_WARMUP, OPT_LR_SCALE, OPT_SYNTHETIC, OPT_GRAD_ACCUM, OPT_AUGMENT,
       OPT_PREFETCH, OPT_CACHE, OPT_CACHE_LIMIT, OPT_SYNC_BN, OPT_NAN_POLICY, OPT_STALL, OPT_DEBUG_COLL,
       OPT_CUDA_GRAPHS, OPT_FP32_ACT };

int dt_options_parse(struct dt_config *cfg, int argc, char **argv, dt_status *st)
{
    static const struct option longopts[] = {
        {"epochs", required_argument, 0, 'e'},
        {"batch-size", required_argument, 0, 'b'},
        {"steps-per-epoch", required_argument, 0, OPT_STEPS},
        {"model", required_argument, 0, 'm'},
        {"dropout", required_argument, 0, OPT_DROPOUT},
        {"optimizer", required_argument, 0, 'o'},
        {"lr", required_argument, 0, OPT_LR},
        {"momentum", required_argument, 0, OPT_MOMENTUM},
        {"lr-schedule", required_argument, 0, OPT_LR_SCHEDULE},
        {"lr-steps", required_argument, 0, OPT_LR_STEPS},
        {"lr-factor", required_argument, 0, OPT_LR_FACTOR},
        {"lr-min", required_argument, 0, OPT_LR_MIN},
        {"warmup-epochs", required_argument, 0, OPT_WARMUP},
        {"lr-scale", required_argument, 0, OPT_LR_SCALE},
        {"seed", required_argument, 0, 's'},
        {"no-validation", no_argument, 0, OPT_NO_VAL},
        {"shard-policy", required_argument, 0, OPT_SHARD},
        {"synthetic", required_argument, 0, OPT_SYNTHETIC},
        {"grad-accum", required_argument, 0, OPT_GRAD_ACCUM},
        {"sync-bn", no_argument, 0, OPT_SYNC_BN},
        {"nan-policy", required_argument, 0, OPT_NAN_POLICY},
        {"stall-timeout", required_argument, 0, OPT_STALL},
        {"debug-collectives", no_argument, 0, OPT_DEBUG_COLL},
        {"augment", required_argument, 0, OPT_AUGMENT},
        {"prefetch", required_argument, 0, OPT_PREFETCH},
        {"cache", no_argument, 0, OPT_CACHE},
        {"cache-limit", required_argument, 0, OPT_CACHE_LIMIT},
        {"threads", required_argument, 0, 't'},
        {"strategy", required_argument, 0, OPT_STRATEGY},
        {"num-ps", required_argument, 0, OPT_NUM_PS},
        {"ps-mode", required_argument, 0, OPT_PS_MODE},
        {"staleness", required_argument, 0, OPT_STALENESS},
        {"ps-transport", required_argument, 0, OPT_PS_TRANSPORT},
        {"allreduce", required_argument, 0, OPT_ALLREDUCE},
        {"allreduce-table", required_argument, 0, OPT_TABLE},
        {"ranks-per-node", required_argument, 0, OPT_RPN},
        {"bucket-mb", required_argument, 0, OPT_BUCKET},
        {"no-overlap", no_argument, 0, OPT_NO_OVERLAP},
        {"overlap", no_argument, 0, OPT_OVERLAP},
        {"grad-compression", required_argument, 0, OPT_COMPRESS},
        {"compress-cross-only", no_argument, 0, OPT_CROSS_ONLY},
        {"device", required_argument, 0, OPT_DEVICE},
        {"gpus-per-node", required_argument, 0, OPT_GPN},
        {"devices", no_argument, 0, OPT_DEVICES},
        {"preflight", no_argument, 0, OPT_PREFLIGHT},
        {"cuda-graphs", no_argument, 0, OPT_CUDA_GRAPHS},
        {"fp32-activations", no_argument, 0, OPT_FP32_ACT},
        {"precision", required_argument, 0, OPT_PRECISION},
        {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
        {"checkpoint-dir", required_argument, 0, OPT_CKPT_DIR},
        {"checkpoint-every", required_argument, 0, OPT_CKPT_EVERY},
        {"checkpoint-seconds", required_argument, 0, OPT_CKPT_SECONDS},
        {"keep", required_argument, 0, OPT_KEEP},
        {"resume", required_argument, 0, OPT_RESUME},
        {"save-best", required_argument, 0, OPT_SAVE_BEST},
        {"monitor", required_argument, 0, OPT_MONITOR},
        {"early-stopping", required_argument, 0, OPT_EARLY},
        {"min-delta", required_argument, 0, OPT_MIN_DELTA},
        {"restore-best", no_argument, 0, OPT_RESTORE_BEST},
        {"export-keras", required_argument, 0, OPT_EXPORT_KERAS},
        {"progress", required_argument, 0, OPT_PROGRESS},
        {"metrics", required_argument, 0, OPT_METRICS},
        {"metrics-every", required_argument, 0, OPT_METRICS_EVERY},
        {"logdir", required_argument, 0, OPT_LOGDIR},
        {"timeline", required_argument, 0, OPT_TIMELINE},
        {"quiet", no_argument, 0, 'q'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    long v;
    int c, set_momentum = 0, set_compress = 0;
    const char *ckpt_flag = NULL; /* a checkpoint option that needs --checkpoint-dir */
    int set_lr_factor = 0, set_lr_min = 0, set_dropout = 0;

    memset(cfg, 0, sizeof *cfg);
    *cfg = (struct dt_config){.epochs = 10, .batch_size = 64, .optimizer = "adam", .model = "cnn",
                              .dropout = 0.5f, .seed = 42, .validation = 1,
                              .shard_policy = DT_SHARD_AUTO, .threads = 1, .verbose = 1,
                              .strategy = "auto", .num_ps = 1, .staleness = 2, .allreduce = "auto", .bucket_mb = 1.0, .overlap = -1,
                              .device = "cpu", .precision = DT_PREC_FP32,
                              .ckpt_every = 1, .keep = 3, .monitor = "val_loss", .patience = -1,
                              .lr_factor = 0.1f, .grad_accum = 1, .prefetch = 2,
                              .stall_timeout = 300.0};
    st->code = DT_OK;
    opterr = 0; /* we print our own messages, from rank 0 only */
    optind = 0; /* 0, not 1: a full reset, else a "-Xq" refused mid-cluster by an earlier call leaves
                   getopt to resume at its 'q' (found by tests/fuzz/fuzz_options) */
    while ((c = getopt_long(argc, argv, ":e:b:m:o:s:t:qvhV", longopts, NULL)) != -1) {
        const char *flag = optind > 1 ? argv[optind - 1] : "?";
        int rc = DT_OK;
        switch (c) {
        case 'e': rc = dt_parse_long("--epochs", optarg, 1, INT_MAX, &v, st); cfg->epochs = (int)v; break;
        case 'b': rc = dt_parse_long("--batch-size", optarg, 1, 1 << 20, &v, st); cfg->batch_size = (int)v; break;
        case OPT_STEPS: rc = dt_parse_long("--steps-per-epoch", optarg, 1, LONG_MAX, &cfg->steps_per_epoch, st); break;
        case 'm':
            if (strcmp(optarg, "cnn") && strcmp(optarg, "mlp") && !dt_model_is_file(optarg))
                rc = dt_fail(st, DT_EUSAGE, "--model: expected cnn, mlp or a model file (.cfg), found '%s'", optarg);
            cfg->model = optarg;
            break;
        case OPT_DROPOUT: rc = parse_float("--dropout", optarg, 0.0, 1.0, 1, &cfg->dropout, st); set_dropout = 1; break;
        case 'o':
            if (strcmp(optarg, "adam") && strcmp(optarg, "sgd"))
                rc = dt_fail(st, DT_EUSAGE, "--optimizer: expected adam or sgd, found '%s'", optarg);
            cfg->optimizer = optarg;
            break;
        case OPT_LR:
            rc = parse_float("--lr", optarg, 0.0, 1e6, 0, &cfg->lr, st);
            if (rc == DT_OK && cfg->lr <= 0.0f)
                rc = dt_fail(st, DT_EUSAGE, "--lr: expected a positive number, found %s", optarg);
            break;
        case OPT_MOMENTUM: rc = parse_float("--momentum", optarg, 0.0, 1.0, 1, &cfg->momentum, st); set_momentum = 1; break;
        case 's': rc = dt_parse_long("--seed", optarg, 0, LONG_MAX, &v, st); cfg->seed = (uint64_t)v; break;
        case OPT_NO_VAL: cfg->validation = 0; break;
        case OPT_SHARD:
            if (!strcmp(optarg, "auto")) cfg->shard_policy = DT_SHARD_AUTO;
            else if (!strcmp(optarg, "data")) cfg->shard_policy = DT_SHARD_DATA;
            else if (!strcmp(optarg, "file")) cfg->shard_policy = DT_SHARD_FILE;
            else rc = dt_fail(st, DT_EUSAGE, "--shard-policy: expected auto, data or file, found '%s'", optarg);
            break;
        case 't': rc = dt_parse_long("--threads", optarg, 1, 1024, &v, st); cfg->threads = (int)v; break;
        case OPT_ALLREDUCE:
            if (strcmp(optarg, "auto") && strcmp(optarg, "mpi") && strcmp(optarg, "ring") && strcmp(optarg, "hier"))
                rc = dt_fail(st, DT_EUSAGE, "--allreduce: expected auto, mpi, ring or hier, found '%s'", optarg);
            cfg->allreduce = optarg;
            break;
        case OPT_TABLE: cfg->allreduce_table = optarg; break;
        case OPT_STRATEGY: cfg->strategy = optarg; break; /* checked by dt_strategy_create */
        case OPT_NUM_PS: rc = dt_parse_long("--num-ps", optarg, 1, 1 << 20, &v, st); cfg->num_ps = (int)v; break;
        case OPT_PS_MODE:
            if (!strcmp(optarg, "async")) cfg->ps_mode = 0;
            else if (!strcmp(optarg, "ssp")) cfg->ps_mode = 1;
            else if (!strcmp(optarg, "sync")) cfg->ps_mode = 2;
            else rc = dt_fail(st, DT_EUSAGE, "--ps-mode: expected async, ssp or sync, found '%s'", optarg);
            break;
        case OPT_STALENESS: rc = dt_parse_long("--staleness", optarg, 0, 1 << 20, &v, st); cfg->staleness = (int)v; break;
        case OPT_PS_TRANSPORT:
            if (!strcmp(optarg, "auto")) cfg->ps_transport = 0;
            else if (!strcmp(optarg, "one-sided")) cfg->ps_transport = 1;
            else if (!strcmp(optarg, "two-sided")) cfg->ps_transport = 2;
            else rc = dt_fail(st, DT_EUSAGE, "--ps-transport: expected auto, one-sided or two-sided, found '%s'", optarg);
            break;
        case OPT_RPN: rc = dt_parse_long("--ranks-per-node", optarg, 1, 1 << 20, &v, st); cfg->ranks_per_node = (int)v; break;
        case OPT_BUCKET: {
            float mb;
            rc = parse_float("--bucket-mb", optarg, 0.0, 65536.0, 0, &mb, st);
            cfg->bucket_mb = (double)mb;
            break;
        }
        case OPT_NO_OVERLAP: cfg->overlap = 0; break;
        case OPT_OVERLAP: cfg->overlap = 1; break;
        case OPT_COMPRESS:
            if (!strcmp(optarg, "none")) cfg->compress = 0;
            else if (!strcmp(optarg, "fp16")) cfg->compress = 1;
            else if (!strcmp(optarg, "bf16")) cfg->compress = 2;
            else rc = dt_fail(st, DT_EUSAGE, "--grad-compression: expected none, fp16 or bf16, found '%s'", optarg);
            set_compress = 1;
            break;
        case OPT_CROSS_ONLY: cfg->compress_cross_only = 1; break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                rc = dt_fail(st, DT_EUSAGE, "--device: expected cpu or cuda, found '%s'", optarg);
            cfg->device = optarg;
            break;
        case OPT_GPN: rc = dt_parse_long("--gpus-per-node", optarg, 1, 1024, &v, st); cfg->gpus_per_node = (int)v; break;
        case OPT_DEVICES: cfg->list_devices = 1; break;
        case OPT_PREFLIGHT: cfg->preflight = 1; break;
        case OPT_PRECISION:
            if (!strcmp(optarg, "fp32")) cfg->precision = DT_PREC_FP32;
            else if (!strcmp(optarg, "fp16")) cfg->precision = DT_PREC_FP16;
            else if (!strcmp(optarg, "bf16")) cfg->precision = DT_PREC_BF16;
            else rc = dt_fail(st, DT_EUSAGE, "--precision: expected fp32, bf16 or fp16, found '%s'", optarg);
            break;
        case OPT_LOSS_SCALE:
            cfg->loss_scale_set = 1;
            if (!strcmp(optarg, "dynamic")) cfg->loss_scale = -1.0f;
            else if (!strcmp(optarg, "none")) cfg->loss_scale = 0.0f;
            else {
                char *end;
                double ls = strtod(optarg, &end);
                if (end == optarg || *end || !(ls > 0.0 && ls <= 1e30))
                    rc = dt_fail(st, DT_EUSAGE, "--loss-scale: expected dynamic, none or a positive number, found '%s'", optarg);
                cfg->loss_scale = (float)ls;
            }
            break;
        case OPT_CKPT_DIR:
            if (!*optarg) rc = dt_fail(st, DT_EUSAGE, "--checkpoint-dir: expected a directory, found ''");
            cfg->checkpoint_dir = optarg;
            break;
        case OPT_CKPT_EVERY: {
            char *end;
            errno = 0;
            long n = strtol(optarg, &end, 10);
            int steps = 0;
            if (!strcmp(end, "step") || !strcmp(end, "steps")) steps = 1;
            else if (*end && strcmp(end, "epoch") && strcmp(end, "epochs")) n = -1;
            if (errno || end == optarg || n < 1)
                rc = dt_fail(st, DT_EUSAGE, "--checkpoint-every: expected a positive count with an optional unit, "
                             "e.g. 2, 2epoch or 500step, found '%s'", optarg);
            cfg->ckpt_every = n;
            cfg->ckpt_every_steps = steps;
            ckpt_flag = "--checkpoint-every";
            break;
        }
        case OPT_CKPT_SECONDS: {
            float sec;
            rc = parse_float("--checkpoint-seconds", optarg, 1.0, 1e9, 0, &sec, st);
            cfg->ckpt_seconds = (double)sec;
            break;
        }
        case OPT_KEEP:
            rc = dt_parse_long("--keep", optarg, 0, 1 << 20, &v, st);
            cfg->keep = (int)v;
            ckpt_flag = "--keep";
            break;
        case OPT_RESUME: cfg->resume = optarg; break;
        case OPT_SAVE_BEST: cfg->save_best = optarg; break;
        case OPT_MONITOR:
            if (strcmp(optarg, "val_loss") && strcmp(optarg, "val_accuracy") && strcmp(optarg, "loss") &&
                strcmp(optarg, "accuracy"))
                rc = dt_fail(st, DT_EUSAGE, "--monitor: expected val_loss, val_accuracy, loss or accuracy, found '%s'", optarg);
            cfg->monitor = optarg;
            break;
        case OPT_EARLY: rc = dt_parse_long("--early-stopping", optarg, 0, 1 << 20, &v, st); cfg->patience = (int)v; break;
        case OPT_MIN_DELTA: {
            float d;
            rc = parse_float("--min-delta", optarg, 0.0, 1e9, 0, &d, st);
            cfg->min_delta = (double)d;
            break;
        }
        case OPT_RESTORE_BEST: cfg->restore_best = 1; break;
        case OPT_EXPORT_KERAS:
            cfg->export_keras = optarg;
            if (strlen(optarg) < 11 || strcmp(optarg + strlen(optarg) - 11, ".weights.h5") != 0)
                rc = dt_fail(st, DT_EUSAGE, "--export-keras: Keras 3 loads weights only from a file named "
                             "*.weights.h5, found '%s'", optarg);
            break;
        case OPT_SYNC_BN: cfg->sync_bn = 1; break;
        case OPT_CUDA_GRAPHS: cfg->cuda_graphs = 1; break;
        case OPT_FP32_ACT: cfg->fp32_activations = 1; break;
        case OPT_STALL: {
            float v2;
            rc = parse_float("--stall-timeout", optarg, 0.0, 1e7, 0, &v2, st);
            cfg->stall_timeout = (double)v2;
            break;
        }
        case OPT_DEBUG_COLL: cfg->debug_collectives = 1; break;
        case OPT_NAN_POLICY:
            if (!strcmp(optarg, "abort")) cfg->nan_policy = 0;
            else if (!strcmp(optarg, "skip")) cfg->nan_policy = 1;
            else rc = dt_fail(st, DT_EUSAGE, "--nan-policy: expected abort or skip, found '%s'", optarg);
            break;
        case OPT_GRAD_ACCUM: rc = dt_parse_long("--grad-accum", optarg, 1, 1 << 20, &v, st); cfg->grad_accum = (int)v; break;
        case OPT_AUGMENT: {
            struct dt_augment a;
            rc = dt_augment_parse(optarg, &a, st);
            cfg->augment = optarg;
            break;
        }
        case OPT_PREFETCH: rc = dt_parse_long("--prefetch", optarg, 0, 64, &v, st); cfg->prefetch = (int)v; break;
        case OPT_CACHE: cfg->cache = 1; break;
        case OPT_CACHE_LIMIT:
            rc = dt_parse_long("--cache-limit", optarg, 1, 1L << 30, &cfg->cache_limit_mib, st);
            break;
        case OPT_SYNTHETIC: {
            struct dt_synthetic sy;
            rc = dt_synthetic_parse(optarg, &sy, st);
            cfg->synthetic = optarg;
            break;
        }
        case OPT_LR_SCHEDULE:
            if (!strcmp(optarg, "constant")) cfg->lr_schedule = 0;
            else if (!strcmp(optarg, "step")) cfg->lr_schedule = 1;
            else if (!strcmp(optarg, "cosine")) cfg->lr_schedule = 2;
            else rc = dt_fail(st, DT_EUSAGE, "--lr-schedule: expected constant, step or cosine, found '%s'", optarg);
            break;
        case OPT_LR_STEPS: {
            const char *p = optarg;
            cfg->n_lr_boundaries = 0;
            while (rc == DT_OK && *p) {
                char *end;
                errno = 0;
                long e = strtol(p, &end, 10);
                int prev = cfg->n_lr_boundaries ? cfg->lr_boundaries[cfg->n_lr_boundaries - 1] : 1;
                if (errno || end == p || e <= prev || e > INT_MAX || cfg->n_lr_boundaries == 16 || (*end && *end != ','))
                    rc = dt_fail(st, DT_EUSAGE, "--lr-steps: expected up to 16 increasing epoch numbers above 1, "
                                 "e.g. 30,60,80, found '%s'", optarg);
                else cfg->lr_boundaries[cfg->n_lr_boundaries++] = (int)e;
                p = *end == ',' ? end + 1 : end;
            }
            break;
        }
        case OPT_LR_FACTOR:
            rc = parse_float("--lr-factor", optarg, 0.0, 1.0, 1, &cfg->lr_factor, st);
            if (rc == DT_OK && cfg->lr_factor <= 0.0f)
                rc = dt_fail(st, DT_EUSAGE, "--lr-factor: expected a number in (0, 1), found %s", optarg);
            set_lr_factor = 1;
            break;
        case OPT_LR_MIN: rc = parse_float("--lr-min", optarg, 0.0, 1e6, 0, &cfg->lr_min, st); set_lr_min = 1; break;
        case OPT_WARMUP: rc = parse_float("--warmup-epochs", optarg, 0.0, 1e6, 0, &cfg->warmup_epochs, st); break;
        case OPT_LR_SCALE:
            if (!strcmp(optarg, "linear")) cfg->lr_scale_linear = 1;
            else if (!strcmp(optarg, "none")) cfg->lr_scale_linear = 0;
            else rc = dt_fail(st, DT_EUSAGE, "--lr-scale: expected linear or none, found '%s'", optarg);
            break;
        case OPT_PROGRESS:
            if (!strcmp(optarg, "auto")) cfg->progress = 0;
            else if (!strcmp(optarg, "plain")) cfg->progress = 1;
            else if (!strcmp(optarg, "bar")) cfg->progress = 2;
            else rc = dt_fail(st, DT_EUSAGE, "--progress: expected auto, bar or plain, found '%s'", optarg);
            break;
        case OPT_METRICS: {
            size_t n = strlen(optarg);
            if (!(n > 4 && !strcmp(optarg + n - 4, ".csv")) && !(n > 6 && !strcmp(optarg + n - 6, ".jsonl")))
                rc = dt_fail(st, DT_EUSAGE, "--metrics: expected a file name ending in .csv or .jsonl, found '%s'", optarg);
            cfg->metrics = optarg;
            break;
        }
        case OPT_METRICS_EVERY:
            rc = dt_parse_long("--metrics-every", optarg, 1, LONG_MAX, &cfg->metrics_every, st);
            break;
        case OPT_LOGDIR: cfg->logdir = optarg; break;
        case OPT_TIMELINE: cfg->timeline = optarg; break;
        case 'q': cfg->verbose = 0; break;
        case 'v': cfg->verbose = 2; break;
        case 'h': cfg->help = 1; break;
        case 'V': cfg->version = 1; break;
        case ':': rc = dt_fail(st, DT_EUSAGE, "%s: missing value", flag); break;
        default: rc = dt_fail(st, DT_EUSAGE, "unknown option '%s' (see dtrain --help)", flag); break;
        }
        if (rc != DT_OK) return rc;
    }
    if (cfg->help || cfg->version) return DT_OK;
    if (set_momentum && strcmp(cfg->optimizer, "sgd") != 0 && cfg->momentum != 0.0f)
        return dt_fail(st, DT_EUSAGE, "--momentum: only meaningful with --optimizer sgd (optimizer is %s)", cfg->optimizer);
    if (cfg->compress_cross_only && !cfg->compress)
        return dt_fail(st, DT_EUSAGE, "--compress-cross-only: needs --grad-compression fp16 or bf16");
    /* 16-bit arithmetic sends 16-bit gradients unless told otherwise; fp16
     * gradients need a loss scale to survive, so fp16 gets the dynamic one. */
    if (!set_compress && cfg->precision != DT_PREC_FP32) cfg->compress = cfg->precision;
    if (!cfg->loss_scale_set && cfg->precision == DT_PREC_FP16) cfg->loss_scale = -1.0f;
    if (cfg->restore_best && cfg->patience < 0 && !cfg->save_best)
        return dt_fail(st, DT_EUSAGE, "--restore-best: needs --early-stopping PATIENCE (or --save-best), which track the best epoch");
    if (cfg->resume && !strcmp(cfg->resume, "latest") && !cfg->checkpoint_dir)
        return dt_fail(st, DT_EUSAGE, "--resume latest: needs --checkpoint-dir DIR (or give the directory or file: --resume PATH)");
    if (cfg->ckpt_seconds > 0) ckpt_flag = "--checkpoint-seconds";
    if (ckpt_flag && !cfg->checkpoint_dir)
        return dt_fail(st, DT_EUSAGE, "%s: needs --checkpoint-dir DIR", ckpt_flag);
    if (set_dropout && dt_model_is_file(cfg->model))
        return dt_fail(st, DT_EUSAGE, "--dropout: sets the built-in cnn's rate; the model file %s gives its own "
                       "([dropout] rate = ...)", cfg->model);
    if (cfg->n_lr_boundaries && cfg->lr_schedule != 1)
        return dt_fail(st, DT_EUSAGE, "--lr-steps: only with --lr-schedule step");
    if (cfg->lr_schedule == 1 && !cfg->n_lr_boundaries)
        return dt_fail(st, DT_EUSAGE, "--lr-schedule step: needs --lr-steps E1,E2,... (the epochs where the rate drops)");
    if (set_lr_factor && cfg->lr_schedule != 1)
        return dt_fail(st, DT_EUSAGE, "--lr-factor: only with --lr-schedule step");
    if (set_lr_min && cfg->lr_schedule != 2)
        return dt_fail(st, DT_EUSAGE, "--lr-min: only with --lr-schedule cosine");
    if (cfg->metrics_every && !cfg->metrics)
        return dt_fail(st, DT_EUSAGE, "--metrics-every: needs --metrics FILE");
    if (cfg->cache_limit_mib && !cfg->cache)
        return dt_fail(st, DT_EUSAGE, "--cache-limit: needs --cache");
    if (cfg->sync_bn && cfg->overlap == 1)
        return dt_fail(st, DT_EUSAGE, "--sync-bn: cannot run with --overlap (batch normalization's reductions "
                       "happen during backward, where the overlap thread owns MPI); drop --overlap");
    if (cfg->min_delta > 0 && cfg->patience < 0)
        return dt_fail(st, DT_EUSAGE, "--min-delta: needs --early-stopping PATIENCE");
    {   /* the command line, for checkpoints */
        size_t len = 1;
        for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
        cfg->command_line = malloc(len);
        if (cfg->command_line) {
            cfg->command_line[0] = '\0';
            for (int i = 0; i < argc; i++) {
                if (i) strcat(cfg->command_line, " ");
                strcat(cfg->command_line, argv[i]);
            }
        }
    }
    if (cfg->gpus_per_node && strcmp(cfg->device, "cuda") != 0)
        return dt_fail(st, DT_EUSAGE, "--gpus-per-node: only meaningful with --device cuda (device is %s)", cfg->device);
    if (cfg->cuda_graphs && strcmp(cfg->device, "cuda") != 0)
        return dt_fail(st, DT_EUSAGE, "--cuda-graphs: records the step on a GPU; it needs --device cuda (device is %s)",
                       cfg->device);
    if (cfg->list_devices) return DT_OK; /* needs no input */
    if (cfg->synthetic) {
        static char name[160], *names[1] = {name};
        if (optind < argc)
            return dt_fail(st, DT_EUSAGE, "--synthetic: give either --synthetic or input files, not both (found '%s')",
                           argv[optind]);
        snprintf(name, sizeof name, "--synthetic %s", cfg->synthetic);
        cfg->inputs = names;
        cfg->ninputs = 1;
        return DT_OK;
    }
    if (optind >= argc && cfg->preflight) return DT_OK; /* no input files to check */
    if (optind >= argc)
        return dt_fail(st, DT_EUSAGE, "missing INPUT.h5: give the HDF5 dataset to train on (see dtrain --help)");
    cfg->ninputs = argc - optind;
    cfg->inputs = argv + optind;
    return DT_OK;
}

void dt_options_free(struct dt_config *cfg)
{
    free(cfg->command_line);
    memset(cfg, 0, sizeof *cfg);
}
