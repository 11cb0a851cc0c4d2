/* options.c: dtrain's command line, made from the option table
 * (options_table.c): getopt_long's arrays, --help, the defaults, the checks
 * of each value and of the combinations (see options.h).
 *
 * The table is the one description of every option; nothing here names an
 * option but the combination checks and the two settings that follow
 * --precision, which are code because each is a rule of its own. libdtrain
 * takes the same defaults and checks. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "collectives/coll.h"
#include "nn/model.h"
#include "optim/schedule.h"
#include "options_table.h"
#include "runtime/checks.h"

enum { HELP_COLUMN = 27 }; /* where --help's descriptions start */

#define FIELD(cfg, o, type) ((type *)(void *)((char *)(cfg) + (o)->off))
#define CFIELD(cfg, o, type) ((const type *)(const void *)((const char *)(cfg) + (o)->off))

static const struct dt_option *row_named(const char *name)
{
    for (const struct dt_option *o = dt_option_table; o->name; o++)
        if (!strcmp(o->name, name)) return o;
    return NULL;
}

/* When the option was last given on the command line; 0: never. */
static int given(const struct dt_config *cfg, const char *name)
{
    const struct dt_option *o = row_named(name);
    if (!o) DT_DIE("no option --%s in the table", name);
    return cfg->given[o - dt_option_table];
}

/* How messages name the option: --NAME, or "caller: NAME" (libdtrain's field). */
static void flag_name(const struct dt_option *o, const char *caller, char *buf, size_t size)
{
    if (!caller) {
        snprintf(buf, size, "--%s", o->name);
        return;
    }
    snprintf(buf, size, "%s: %s", caller, o->name);
    for (char *p = strrchr(buf, ' ') + 1; *p; p++) /* the name has no space */
        if (*p == '-') *p = '_';
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

static int parse_float(const char *flag, const char *arg, double lo, double hi, int hi_open, double *out,
                       dt_status *st)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (errno || end == arg || *end != '\0' || !isfinite(v))
        return dt_fail(st, DT_EUSAGE, "%s: expected a number, found '%s'", flag, arg);
    if (v < lo || v > hi || (hi_open && v >= hi))
        return dt_fail(st, DT_EUSAGE, "%s: expected a number in [%g, %g%c, found %s", flag, lo, hi,
                       hi_open ? ')' : ']', arg);
    *out = v;
    return DT_OK;
}

/* FLOAT and DOUBLE: the value as the float it is kept as (--lr 1e-50 is 0, so
 * not positive). */
static int read_number(const struct dt_option *o, const char *flag, const char *arg, double *out, dt_status *st)
{
    double v = 0.0;
    int rc = parse_float(flag, arg, o->min, o->max, o->flags & DT_OPT_HI_OPEN, &v, st);
    if (rc != DT_OK) return rc;
    *out = (double)(float)v;
    if ((o->flags & DT_OPT_LO_OPEN) && *out <= o->min)
        return o->flags & DT_OPT_HI_OPEN
            ? dt_fail(st, DT_EUSAGE, "%s: expected a number in (%g, %g), found %s", flag, o->min, o->max, arg)
            : dt_fail(st, DT_EUSAGE, "%s: expected a positive number, found %s", flag, arg);
    return DT_OK;
}

/* NAME and CHOICE: the index of arg among the names, -1 if it is none of them. */
static int name_index(const struct dt_option *o, const char *arg)
{
    for (int i = 0; arg && o->names[i]; i++)
        if (!strcmp(arg, o->names[i])) return i;
    return -1;
}

/* CHOICE: the name of value v; NULL if no name has it. */
static const char *choice_name(const struct dt_option *o, int v)
{
    for (int i = 0; o->names[i]; i++)
        if (o->values[i] == v) return o->names[i];
    return NULL;
}

/* One option's argument into its field, refused with a message naming flag. */
static int read_arg(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                    dt_status *st)
{
    long v = 0;
    double d = 0.0;
    int i, rc = DT_OK;
    switch ((enum dt_opt_kind)o->kind) {
    case DT_OPT_FLAG: *FIELD(cfg, o, int) = o->set; break;
    case DT_OPT_INT:
        if ((rc = dt_parse_long(flag, arg, o->imin, o->imax, &v, st)) == DT_OK) *FIELD(cfg, o, int) = (int)v;
        break;
    case DT_OPT_LONG: rc = dt_parse_long(flag, arg, o->imin, o->imax, FIELD(cfg, o, long), st); break;
    case DT_OPT_U64:
        if ((rc = dt_parse_long(flag, arg, o->imin, o->imax, &v, st)) == DT_OK) *FIELD(cfg, o, uint64_t) = (uint64_t)v;
        break;
    case DT_OPT_FLOAT:
        if ((rc = read_number(o, flag, arg, &d, st)) == DT_OK) *FIELD(cfg, o, float) = (float)d;
        break;
    case DT_OPT_DOUBLE:
        if ((rc = read_number(o, flag, arg, &d, st)) == DT_OK) *FIELD(cfg, o, double) = d;
        break;
    case DT_OPT_STRING:
        if (!o->verify || (rc = o->verify(flag, arg, st)) == DT_OK) *FIELD(cfg, o, const char *) = arg;
        break;
    case DT_OPT_NAME:
        if ((i = name_index(o, arg)) >= 0) *FIELD(cfg, o, const char *) = o->names[i];
        else if (o->is_other && o->is_other(arg)) *FIELD(cfg, o, const char *) = arg;
        else rc = dt_option_refuse(o, flag, arg, st);
        break;
    case DT_OPT_CHOICE:
        if ((i = name_index(o, arg)) >= 0) *FIELD(cfg, o, int) = o->values[i];
        else rc = dt_option_refuse(o, flag, arg, st);
        break;
    case DT_OPT_CUSTOM: rc = o->parse(o, cfg, flag, arg, st); break;
    }
    return rc;
}

/* ---- the values already in a config (libdtrain sets fields directly) ---- */

static int check_integer(const struct dt_option *o, const char *flag, long v, dt_status *st)
{
    long def = (long)o->def;
    if (v == def || (v >= o->imin && v <= o->imax)) return DT_OK;
    if (def >= o->imin && def <= o->imax)
        return dt_fail(st, DT_EUSAGE, "%s: expected an integer in [%ld, %ld], found %ld", flag, o->imin, o->imax, v);
    return dt_fail(st, DT_EUSAGE, "%s: expected an integer in [%ld, %ld] or %ld (the default), found %ld", flag,
                   o->imin, o->imax, def, v);
}

static int in_range(const struct dt_option *o, double v)
{
    return (o->flags & DT_OPT_LO_OPEN ? v > o->min : v >= o->min) &&
           (o->flags & DT_OPT_HI_OPEN ? v < o->max : v <= o->max);
}

static int check_number(const struct dt_option *o, const char *flag, double v, dt_status *st)
{
    double def = o->kind == DT_OPT_FLOAT ? (double)(float)o->def : o->def;
    if (v == def || in_range(o, v)) return DT_OK;
    char note[64] = "";
    if (!in_range(o, def)) snprintf(note, sizeof note, " or %g (the default)", def);
    return dt_fail(st, DT_EUSAGE, "%s: expected a number in %c%g, %g%c%s, found %g", flag,
                   o->flags & DT_OPT_LO_OPEN ? '(' : '[', o->min, o->max, o->flags & DT_OPT_HI_OPEN ? ')' : ']',
                   note, v);
}

static int check_value(const struct dt_option *o, const struct dt_config *cfg, const char *flag, dt_status *st)
{
    const char *s;
    int v;
    switch ((enum dt_opt_kind)o->kind) {
    case DT_OPT_INT: return check_integer(o, flag, *CFIELD(cfg, o, int), st);
    case DT_OPT_LONG: return check_integer(o, flag, *CFIELD(cfg, o, long), st);
    case DT_OPT_FLOAT: return check_number(o, flag, (double)*CFIELD(cfg, o, float), st);
    case DT_OPT_DOUBLE: return check_number(o, flag, *CFIELD(cfg, o, double), st);
    case DT_OPT_STRING:
        s = *CFIELD(cfg, o, const char *);
        return s && o->verify && !(o->def_str && !strcmp(s, o->def_str)) ? o->verify(flag, s, st) : DT_OK;
    case DT_OPT_NAME:
        s = *CFIELD(cfg, o, const char *);
        return name_index(o, s) >= 0 || (s && o->is_other && o->is_other(s)) ? DT_OK : dt_option_refuse(o, flag, s, st);
    case DT_OPT_CHOICE:
        v = *CFIELD(cfg, o, int);
        if (choice_name(o, v)) return DT_OK;
        char expected[256];
        dt_option_expected(o, expected, sizeof expected);
        return dt_fail(st, DT_EUSAGE, "%s: expected %s, found the value %d", flag, expected, v);
    case DT_OPT_FLAG: /* any int */
    case DT_OPT_U64:  /* any seed */
    case DT_OPT_CUSTOM: break;
    }
    return DT_OK;
}

/* --pipeline-stages and what it cannot run with (the rank count and the
 * model are checked when they are known: train/pipeline.c). */
static int check_pipeline(const struct dt_config *cfg, dt_status *st)
{
    const char *strategy = cfg->strategy ? cfg->strategy : "auto";
    if (given(cfg, "micro-batches") && cfg->pipeline_stages < 2)
        return dt_fail(st, DT_EUSAGE, "--micro-batches: splits a batch between pipeline stages; give "
                       "--pipeline-stages P (P > 1) too (--grad-accum K sums K batches without stages)");
    if (cfg->pipeline_stages < 2) return DT_OK;
    if (strcmp(strategy, "auto") && strcmp(strategy, "mirrored") && strcmp(strategy, "multi-worker"))
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d with --strategy %s: a pipeline's stages all-reduce their "
                       "gradients over their replicas (data parallelism inside each stage); use --strategy auto, "
                       "mirrored or multi-worker with it, or no stages", cfg->pipeline_stages, strategy);
    if (cfg->grad_accum > 1)
        return dt_fail(st, DT_EUSAGE, "--grad-accum %d with --pipeline-stages: a pipelined batch is already summed "
                       "over its micro-batches; use --micro-batches M (and a K times larger --batch-size)", cfg->grad_accum);
    if (cfg->sync_bn)
        return dt_fail(st, DT_EUSAGE, "--sync-bn with --pipeline-stages: batch normalization under a pipeline uses "
                       "each micro-batch's own statistics; drop --sync-bn");
    if (!strcmp(cfg->device, "cuda"))
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages: runs on the CPU only so far (activations pass between "
                       "stages through host memory); with --device cuda use data parallelism");
    static const char *const exchange[] = {"allreduce", "bucket-mb", "grad-compression", "overlap", "no-overlap",
                                           "compress-cross-only"};
    for (size_t i = 0; i < sizeof exchange / sizeof *exchange; i++)
        if (given(cfg, exchange[i]))
            return dt_fail(st, DT_EUSAGE, "--%s with --pipeline-stages: a stage's gradient is summed over its "
                           "replicas with one MPI_Allreduce after its last micro-batch, not by the data-parallel "
                           "all-reduce this option tunes; drop it", exchange[i]);
    if (cfg->micro_batches > cfg->batch_size)
        return dt_fail(st, DT_EUSAGE, "--micro-batches %d: more micro-batches than the %d samples of a batch "
                       "(--batch-size)", cfg->micro_batches, cfg->batch_size);
    return DT_OK;
}

/* The options that only mean something together with others. */
static int check_combinations(const struct dt_config *cfg, dt_status *st)
{
    if (check_pipeline(cfg, st) != DT_OK) return st->code;
    const char *ckpt_flag = NULL; /* a checkpoint option given without --checkpoint-dir */
    if (given(cfg, "momentum") && strcmp(cfg->optimizer, "sgd") != 0 && cfg->momentum != 0.0f)
        return dt_fail(st, DT_EUSAGE, "--momentum: only meaningful with --optimizer sgd (optimizer is %s)", cfg->optimizer);
    if (given(cfg, "weight-decay") && strcmp(cfg->optimizer, "adamw") != 0 && cfg->weight_decay != 0.0f)
        return dt_fail(st, DT_EUSAGE, "--weight-decay: only with --optimizer adamw, whose decay is decoupled from the "
                       "gradient (optimizer is %s, which has no weight decay here)", cfg->optimizer);
    if (cfg->decay_all && strcmp(cfg->optimizer, "adamw") != 0)
        return dt_fail(st, DT_EUSAGE, "--decay-all: only with --optimizer adamw (optimizer is %s)", cfg->optimizer);
    if (cfg->compress_cross_only && cfg->powersgd_rank)
        return dt_fail(st, DT_EUSAGE, "--compress-cross-only: compresses the fp16/bf16 transport between nodes; "
                       "--grad-compression powersgd:%d sends low-rank factors on every hop", cfg->powersgd_rank);
    if (cfg->compress_cross_only && cfg->compress == DT_COMPRESS_NONE)
        return dt_fail(st, DT_EUSAGE, "--compress-cross-only: needs --grad-compression fp16 or bf16");
    if (cfg->restore_best && cfg->patience < 0 && !cfg->save_best)
        return dt_fail(st, DT_EUSAGE, "--restore-best: needs --early-stopping PATIENCE (or --save-best), which track the best epoch");
    if (cfg->resume && !strcmp(cfg->resume, "latest") && !cfg->checkpoint_dir)
        return dt_fail(st, DT_EUSAGE, "--resume latest: needs --checkpoint-dir DIR (or give the directory or file: --resume PATH)");
    if (given(cfg, "checkpoint-every") || given(cfg, "keep"))
        ckpt_flag = given(cfg, "keep") > given(cfg, "checkpoint-every") ? "--keep" : "--checkpoint-every";
    if (cfg->ckpt_seconds > 0) ckpt_flag = "--checkpoint-seconds";
    if (cfg->ckpt_async) ckpt_flag = "--checkpoint-async";
    if (ckpt_flag && !cfg->checkpoint_dir)
        return dt_fail(st, DT_EUSAGE, "%s: needs --checkpoint-dir DIR", ckpt_flag);
    if (given(cfg, "dropout") && dt_model_is_file(cfg->model))
        return dt_fail(st, DT_EUSAGE, "--dropout: sets the built-in cnn's rate; the model file %s gives its own "
                       "([dropout] rate = ...)", cfg->model);
    if (cfg->n_lr_boundaries && cfg->lr_schedule != DT_LR_STEP)
        return dt_fail(st, DT_EUSAGE, "--lr-steps: only with --lr-schedule step");
    if (cfg->lr_schedule == DT_LR_STEP && !cfg->n_lr_boundaries)
        return dt_fail(st, DT_EUSAGE, "--lr-schedule step: needs --lr-steps E1,E2,... (the epochs where the rate drops)");
    if (given(cfg, "lr-factor") && cfg->lr_schedule != DT_LR_STEP)
        return dt_fail(st, DT_EUSAGE, "--lr-factor: only with --lr-schedule step");
    if (given(cfg, "lr-min") && cfg->lr_schedule != DT_LR_COSINE)
        return dt_fail(st, DT_EUSAGE, "--lr-min: only with --lr-schedule cosine");
    if (cfg->metrics_every && !cfg->metrics)
        return dt_fail(st, DT_EUSAGE, "--metrics-every: needs --metrics FILE");
    if (cfg->histogram_freq && !cfg->logdir)
        return dt_fail(st, DT_EUSAGE, "--histogram-freq: writes TensorBoard histograms; it needs --logdir DIR "
                       "(TensorBoard output is off)");
    if (given(cfg, "histograms") && !cfg->histogram_freq)
        return dt_fail(st, DT_EUSAGE, "--histograms: chooses what --histogram-freq N shows; give --histogram-freq "
                       "N (N > 0) too");
    if (cfg->num_classes && cfg->synthetic)
        return dt_fail(st, DT_EUSAGE, "--num-classes: not used with --synthetic (CLASSES in its value gives the number)");
    if (cfg->cache_limit_mib && !cfg->cache)
        return dt_fail(st, DT_EUSAGE, "--cache-limit: needs --cache");
    if (cfg->sync_bn && cfg->overlap == DT_OVERLAP_ON)
        return dt_fail(st, DT_EUSAGE, "--sync-bn: cannot run with --overlap (batch normalization's reductions "
                       "happen during backward, where the overlap thread owns MPI); drop --overlap");
    if (cfg->min_delta > 0 && cfg->patience < 0)
        return dt_fail(st, DT_EUSAGE, "--min-delta: needs --early-stopping PATIENCE");
    if (cfg->gpus_per_node && strcmp(cfg->device, "cuda") != 0)
        return dt_fail(st, DT_EUSAGE, "--gpus-per-node: only meaningful with --device cuda (device is %s)", cfg->device);
    if (cfg->fsdp_node && (!cfg->strategy || strcmp(cfg->strategy, "fsdp") != 0))
        return dt_fail(st, DT_EUSAGE, "--fsdp-shard node: only with --strategy fsdp");
    if (cfg->strategy && !strcmp(cfg->strategy, "fsdp") && !strcmp(cfg->device, "cuda"))
        return dt_fail(st, DT_EUSAGE, "--strategy fsdp: runs on the CPU only so far (its buckets are gathered with "
                       "MPI into host memory); with --device cuda use mirrored, multi-worker or auto");
    if (cfg->cuda_graphs && strcmp(cfg->device, "cuda") != 0)
        return dt_fail(st, DT_EUSAGE, "--cuda-graphs: records the step on a GPU; it needs --device cuda (device is %s)",
                       cfg->device);
    return DT_OK;
}

int dt_options_check(const struct dt_config *cfg, const char *caller, dt_status *st)
{
    char flag[96];
    st->code = DT_OK;
    for (const struct dt_option *o = dt_option_table; o->name; o++) {
        flag_name(o, caller, flag, sizeof flag);
        if (check_value(o, cfg, flag, st) != DT_OK) return st->code;
    }
    if (check_combinations(cfg, st) != DT_OK && caller) {
        dt_status why = *st;
        dt_fail(st, why.code, "%s: %s", caller, why.msg);
    }
    return st->code;
}

int dt_options_set(struct dt_config *cfg, const char *name, const char *arg, const char *caller, dt_status *st)
{
    const struct dt_option *o = row_named(name);
    char flag[96];
    if (!o) DT_DIE("no option --%s in the table", name);
    flag_name(o, caller, flag, sizeof flag);
    st->code = DT_OK;
    return read_arg(o, cfg, flag, arg, st);
}

const char *dt_options_choice_name(const char *name, int value)
{
    const struct dt_option *o = row_named(name);
    return o && o->kind == DT_OPT_CHOICE ? choice_name(o, value) : NULL;
}

void dt_options_defaults(struct dt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (const struct dt_option *o = dt_option_table; o->name; o++) {
        switch ((enum dt_opt_kind)o->kind) {
        case DT_OPT_FLAG:
        case DT_OPT_INT:
        case DT_OPT_CHOICE: *FIELD(cfg, o, int) = (int)o->def; break;
        case DT_OPT_LONG: *FIELD(cfg, o, long) = (long)o->def; break;
        case DT_OPT_U64: *FIELD(cfg, o, uint64_t) = (uint64_t)o->def; break;
        case DT_OPT_FLOAT: *FIELD(cfg, o, float) = (float)o->def; break;
        case DT_OPT_DOUBLE: *FIELD(cfg, o, double) = o->def; break;
        case DT_OPT_STRING:
        case DT_OPT_NAME: *FIELD(cfg, o, const char *) = o->def_str; break;
        case DT_OPT_CUSTOM:
            if (o->def_str) {
                dt_status st;
                if (o->parse(o, cfg, o->name, o->def_str, &st) != DT_OK) DT_DIE("--%s: its default: %s", o->name, st.msg);
            }
            break;
        }
    }
}

/* ---- --help ---- */

/* A row's default as --help's "%D" prints it. */
static void put_default(FILE *out, const struct dt_option *o)
{
    switch ((enum dt_opt_kind)o->kind) {
    case DT_OPT_INT:
    case DT_OPT_LONG:
    case DT_OPT_U64: fprintf(out, "%ld", (long)o->def); break;
    case DT_OPT_FLOAT:
    case DT_OPT_DOUBLE: fprintf(out, "%g", o->def); break;
    case DT_OPT_CHOICE: fputs(choice_name(o, (int)o->def), out); break;
    default: fputs(o->def_str ? o->def_str : "", out); break;
    }
}

static void put_row(FILE *out, const struct dt_option *o)
{
    char left[64];
    int n = snprintf(left, sizeof left, "  %s%c%s--%s%s%s", o->letter ? "-" : " ", o->letter ? o->letter : ' ',
                     o->letter ? ", " : "  ", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    int pad = HELP_COLUMN - n;
    if (pad < 2 && !((o->flags & DT_OPT_SNUG) && pad == 1)) pad = 2;
    fprintf(out, "%s%*s", left, pad, "");
    for (const char *p = o->help; *p; p++) {
        if (*p == '\n') fprintf(out, "\n%*s", HELP_COLUMN, "");
        else if (p[0] == '%' && p[1] == 'D') {
            put_default(out, o);
            p++;
        }
        else fputc(*p, out);
    }
    fputc('\n', out);
}

void dt_options_usage(FILE *out)
{
    fputs("Usage: mpirun -np N dtrain INPUT.h5 [SHARD.h5 ...] [OPTIONS]\n"
          "Train a model data-parallel over N MPI ranks (every rank a replica).\n", out);
    for (const struct dt_option *o = dt_option_table; o->name; o++) {
        if (o->section) fprintf(out, "\n%s:\n", o->section);
        if (o->help) put_row(out, o);
    }
    fputs("\n"
          "Exit status: 0 success, 1 runtime failure, 2 bad command line, 3 bad input file.\n"
          "See dtrain(1).\n", out);
}

/* ---- the command line ---- */

void dt_options_default_loss_scale(struct dt_config *cfg)
{
    if (!cfg->loss_scale_set && cfg->precision == DT_PREC_FP16) cfg->loss_scale = -1.0f;
}

/* 16-bit arithmetic sends 16-bit gradients unless told otherwise; fp16
 * gradients need a loss scale to survive, so fp16 gets the dynamic one. */
static void derive(struct dt_config *cfg)
{
    if (!given(cfg, "grad-compression") && cfg->precision != DT_PREC_FP32)
        cfg->compress = cfg->precision == DT_PREC_FP16 ? DT_COMPRESS_FP16 : DT_COMPRESS_BF16;
    dt_options_default_loss_scale(cfg);
}

/* argv joined by spaces, for checkpoints; NULL when memory is short. */
static char *join(int argc, char **argv)
{
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *s = malloc(len);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (i) strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

/* The operands after the options: input files, or none with --synthetic,
 * --devices or --preflight. */
static int take_inputs(struct dt_config *cfg, int argc, char **argv, dt_status *st)
{
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

/* The row getopt_long's return value c stands for; NULL for '?' and ':'. */
static const struct dt_option *row_of(int c)
{
    if (c >= 256) return &dt_option_table[c - 256];
    for (const struct dt_option *o = dt_option_table; o->name; o++)
        if (o->letter && o->letter == c) return o;
    return NULL;
}

int dt_options_parse(struct dt_config *cfg, int argc, char **argv, dt_status *st)
{
    struct option longopts[DT_OPTIONS_MAX + 1];
    char shortopts[2 * DT_OPTIONS_MAX + 2] = ":"; /* ':' first: a missing value is told apart */
    int n = 0, c, seq = 0;
    for (const struct dt_option *o = dt_option_table; o->name; o++, n++) {
        int has_arg = o->kind == DT_OPT_FLAG ? no_argument : required_argument;
        longopts[n] = (struct option){o->name, has_arg, NULL, o->letter ? o->letter : 256 + n};
        if (o->letter) {
            size_t k = strlen(shortopts);
            shortopts[k++] = o->letter;
            if (has_arg == required_argument) shortopts[k++] = ':';
            shortopts[k] = '\0';
        }
    }
    longopts[n] = (struct option){0};
    dt_options_defaults(cfg);
    st->code = DT_OK;
    opterr = 0; /* we print our own messages, from rank 0 only */
    optind = 0; /* 0, not 1: a full reset, else a "-Xq" refused mid-cluster by an earlier call leaves
                   getopt to resume at its 'q' (found by tests/fuzz/fuzz_options) */
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const char *flag = optind > 1 ? argv[optind - 1] : "?";
        const struct dt_option *o = row_of(c);
        char name[64];
        if (c == ':') return dt_fail(st, DT_EUSAGE, "%s: missing value", flag);
        if (!o) return dt_fail(st, DT_EUSAGE, "unknown option '%s' (see dtrain --help)", flag);
        cfg->given[o - dt_option_table] = ++seq;
        flag_name(o, NULL, name, sizeof name);
        if (read_arg(o, cfg, name, optarg, st) != DT_OK) return st->code;
    }
    if (cfg->help || cfg->version) return DT_OK;
    if (dt_options_check(cfg, NULL, st) != DT_OK) return st->code;
    derive(cfg);
    cfg->command_line = join(argc, argv);
    return take_inputs(cfg, argc, argv, st);
}

void dt_options_free(struct dt_config *cfg)
{
    free(cfg->command_line);
    memset(cfg, 0, sizeof *cfg);
}
