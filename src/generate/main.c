/* main.c (dtrain-generate): text from a language model's checkpoint.
 *
 * The checkpoint alone rebuilds the model: its /model_text is the model
 * file as training read it, its num_classes the vocabulary, its
 * /tokenizer/merges the dataset's tokenizer (checkpoint/checkpoint.h). The
 * model is built from that text with the real nn/ layers on the CPU
 * backend (float32), the parameters are read with the checkpoint reader
 * (one process: MPI on MPI_COMM_SELF, with no launcher), the prompt is
 * encoded with the stored tokenizer, and new tokens are sampled one at a
 * time (generate/sample.c) and printed as they come.
 *
 * The one design decision: each new token costs one position, not a whole
 * window. The layers' decode ops (nn/layer.h, dt_model_decode) run one
 * position of the sequence, attention keeping the keys and values of the
 * earlier ones (its cache, block_size positions). Once the sequence is
 * longer than block_size the window slides: the next token is predicted
 * from the last block_size tokens, every one of them at a new position,
 * so the window is recomputed whole at every further token, by one
 * batched forward of it (what --no-cache does for every token), faster
 * than refilling the cache one position at a time. The logits are those
 * of the last block_size tokens either way. --logits runs the ordinary forward
 * (dt_model_forward) over the prompt as one window: the window is
 * block_size long, the prompt at its start and the rest padded with token
 * 0, which causal attention keeps from every position of the prompt. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend.h"
#include "checkpoint/checkpoint.h"
#include "generate/generate.h"
#include "nn/model.h"
#include "nn/model_file.h"
#include "train/train.h" /* dt_ckpt_layer_table: the checkpoint's names of the parameters */

#define PROG "dtrain-generate"

/* ---- options: one table makes the parser, the checks and the help ------- */

struct opts {
    const char *ckpt;
    const char *prompt, *prompt_tokens;
    long tokens;        /* 0: not given */
    double temperature;
    long top_k;
    unsigned long long seed;
    long threads;
    int logits, no_cache, quiet;
};

enum kind {
    K_TEXT,   /* const char * */
    K_COUNT,  /* long >= 1 */
    K_WHOLE,  /* long >= 0 */
    K_NUMBER, /* double >= 0 */
    K_SEED,   /* unsigned long long */
    K_FLAG,   /* int = 1 */
};

static const struct opt {
    const char *name;
    int key;            /* its short form, or 0 */
    enum kind kind;
    size_t off;         /* into struct opts */
    const char *arg, *help;
} opts_table[] = {
    {"prompt", 'p', K_TEXT, offsetof(struct opts, prompt), "TEXT",
     "the text to continue (UTF-8, not empty)"},
    {"prompt-tokens", 0, K_TEXT, offsetof(struct opts, prompt_tokens), "IDS",
     "... or its token ids, comma-separated (e.g. 464,2068,7586)"},
    {"tokens", 'n', K_COUNT, offsetof(struct opts, tokens), "N",
     "new tokens to generate (required, >= 1; not with --logits)"},
    {"temperature", 0, K_NUMBER, offsetof(struct opts, temperature), "T",
     "softmax temperature (default 1.0; 0 = greedy: the likeliest token)"},
    {"top-k", 'k', K_WHOLE, offsetof(struct opts, top_k), "K",
     "sample among the K likeliest tokens only (default 0 = all)"},
    {"seed", 's', K_SEED, offsetof(struct opts, seed), "S", "the sampling's random stream (default 42)"},
    {"logits", 0, K_FLAG, offsetof(struct opts, logits), NULL,
     "print the logits of every prompt position instead (one line of V numbers each)"},
    {"no-cache", 0, K_FLAG, offsetof(struct opts, no_cache), NULL,
     "a forward of the whole window for every token (the reference the cache is checked against)"},
    {"threads", 't', K_COUNT, offsetof(struct opts, threads), "N", "BLAS/oneDNN threads (default 1)"},
    {"quiet", 'q', K_FLAG, offsetof(struct opts, quiet), NULL, "no notes and no timing line on stderr"},
};
enum { NOPTS = sizeof opts_table / sizeof *opts_table };

static void usage(FILE *f)
{
    fprintf(f, "Usage: " PROG " CHECKPOINT --prompt TEXT --tokens N [OPTIONS]\n"
               "       " PROG " CHECKPOINT --prompt TEXT --logits\n"
               "Continue TEXT with N tokens sampled from a language model's checkpoint (a file, or\n"
               "a checkpoint directory: its latest). The checkpoint holds the model and the\n"
               "tokenizer; the prompt and the new tokens are printed to stdout as text.\n\n");
    for (int i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts_table[i];
        char left[48];
        char key[8] = "    ";
        if (o->key) snprintf(key, sizeof key, "-%c, ", o->key);
        snprintf(left, sizeof left, "%s--%s%s%s", key, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-26s %s\n", left, o->help);
    }
    fprintf(f, "  -h, --help                 this help;  -V, --version\n\n"
               "Exit status: 0; 2 a bad option or prompt; 3 a missing or unusable checkpoint.\n"
               "See " PROG "(1).\n");
}

static int set_option(struct opts *o, const struct opt *d, const char *v, dt_status *st)
{
    char *end = NULL, *at = (char *)o + d->off;
    errno = 0;
    switch (d->kind) {
    case K_TEXT:
        *(const char **)(void *)at = v;
        return DT_OK;
    case K_FLAG:
        *(int *)(void *)at = 1;
        return DT_OK;
    case K_COUNT:
    case K_WHOLE: {
        long x = strtol(v, &end, 10);
        const long lo = d->kind == K_COUNT ? 1 : 0;
        if (errno || end == v || *end || x < lo || x > INT_MAX)
            return dt_fail(st, DT_EUSAGE, "--%s: expected a whole number >= %ld%s, found '%s'", d->name, lo,
                           d->kind == K_WHOLE ? " (0 = every token)" : "", v);
        *(long *)(void *)at = x;
        return DT_OK;
    }
    case K_NUMBER: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= 0.0) || !isfinite(x))
            return dt_fail(st, DT_EUSAGE, "--%s: expected a number >= 0 (0 = greedy), found '%s'", d->name, v);
        *(double *)(void *)at = x;
        return DT_OK;
    }
    case K_SEED: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-')
            return dt_fail(st, DT_EUSAGE, "--%s: expected a whole number >= 0, found '%s'", d->name, v);
        *(unsigned long long *)(void *)at = x;
        return DT_OK;
    }
    }
    return DT_OK;
}

enum { PARSED = 0, SHOW_HELP = -1, SHOW_VERSION = -2 };

static int parse(int argc, char **argv, struct opts *o, dt_status *st)
{
    struct option lo[NOPTS + 3];
    char shorts[3 * NOPTS + 8] = ":hV";
    for (int i = 0; i < NOPTS; i++) {
        const struct opt *d = &opts_table[i];
        lo[i] = (struct option){d->name, d->kind == K_FLAG ? no_argument : required_argument, NULL, 256 + i};
        if (d->key) {
            size_t n = strlen(shorts);
            shorts[n] = (char)d->key;
            shorts[n + 1] = d->kind == K_FLAG ? '\0' : ':';
            shorts[n + 2] = '\0';
        }
    }
    lo[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    lo[NOPTS + 2] = (struct option){0, 0, 0, 0};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        if (c == 'h') return SHOW_HELP;
        if (c == 'V') return SHOW_VERSION;
        if (c == '?')
            return dt_fail(st, DT_EUSAGE, "unknown option '%s' (" PROG " --help lists them)", argv[optind - 1]);
        if (c == ':') return dt_fail(st, DT_EUSAGE, "%s needs a value", argv[optind - 1]);
        int i = c >= 256 ? c - 256 : -1;
        for (int k = 0; i < 0 && k < NOPTS; k++)
            if (opts_table[k].key == c) i = k;
        if (set_option(o, &opts_table[i], optarg, st) != DT_OK) return st->code;
    }
    if (optind >= argc) return dt_fail(st, DT_EUSAGE, "no checkpoint given (" PROG " CHECKPOINT --prompt TEXT --tokens N)");
    if (optind + 1 < argc)
        return dt_fail(st, DT_EUSAGE, "one checkpoint only; '%s' is one argument too many (quote a prompt with spaces)",
                       argv[optind + 1]);
    o->ckpt = argv[optind];
    if (!o->prompt == !o->prompt_tokens)
        return dt_fail(st, DT_EUSAGE, o->prompt ? "--prompt and --prompt-tokens: one or the other"
                                                : "no prompt: give --prompt TEXT (or --prompt-tokens IDS)");
    if (o->logits && o->tokens)
        return dt_fail(st, DT_EUSAGE, "--tokens with --logits: --logits prints the prompt's logits and generates "
                       "nothing");
    if (!o->logits && !o->tokens) return dt_fail(st, DT_EUSAGE, "--tokens N: how many tokens to generate (N >= 1)");
    return PARSED;
}

/* ---- the checkpoint into a model ---------------------------------------- */

struct gen {
    char path[4096];        /* the checkpoint file */
    struct dt_model m;      /* built for windows of T tokens, one sample */
    struct dt_bpe bpe;
    int T, V;
    const struct dt_backend *be;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CKPT as a file: itself, a directory's newest valid checkpoint, or the
 * directory of a latest pointer named directly. */
static int resolve(const char *what, char *path, size_t len, dt_status *st)
{
    char dir[4096];
    struct stat sb;
    const char *base = strrchr(what, '/');
    base = base ? base + 1 : what;
    if (!strcmp(base, "latest") && stat(what, &sb) == 0 && S_ISREG(sb.st_mode)) {
        snprintf(dir, sizeof dir, "%.*s", (int)(base - what), what);
        if (!dir[0]) snprintf(dir, sizeof dir, ".");
        what = dir;
    }
    return dt_ckpt_resolve(MPI_COMM_SELF, what, NULL, path, len, st);
}

/* The model of the checkpoint's text, built for one window (not yet created). */
static int build(struct gen *g, const struct dt_ckpt *info, dt_status *st)
{
    char name[4200];
    struct dt_layer_spec *specs = dt_xcalloc(DT_MAX_LAYERS, sizeof *specs);
    int n = 0;
    snprintf(name, sizeof name, "%s:/model_text", g->path);
    if (dt_model_file_parse_text(name, info->model_text, info->model_text_len, info->classes, specs, &n, st) != DT_OK) {
        dt_status why = *st;
        dt_fail(st, DT_EINPUT, "checkpoint %s: its model text does not parse: %s", g->path, why.msg);
    } else if (n < 1 || strcmp(specs[0].type, "embedding") || specs[0].block < 1) {
        dt_fail(st, DT_EINPUT, "checkpoint %s: model %s does not start with [embedding]: not a language model", g->path,
                info->model);
    } else {
        g->T = specs[0].block;
        g->V = info->classes;
        if (dt_model_build_specs(&g->m, info->model, (struct dt_shape){1, g->T + 1, (int)sizeof(int32_t)}, g->V, specs,
                                 n, st) != DT_OK) {
            dt_status why = *st;
            dt_fail(st, DT_EINPUT, "checkpoint %s: its model does not build: %s", g->path, why.msg);
        } else if (dt_model_can_decode(&g->m, st) != DT_OK) {
            dt_status why = *st;
            dt_fail(st, DT_EINPUT, "checkpoint %s: %s", g->path, why.msg);
        }
    }
    free(specs);
    return st->code;
}

/* The parameters, read with the checkpoint's checksum verified; the
 * stored text and tokenizer must be what the model was built from. */
static int load_params(struct gen *g, const struct dt_ckpt *info, dt_status *st)
{
    struct dt_model *m = &g->m;
    struct dt_ckpt c;
    memset(&c, 0, sizeof c);
    c.layers = dt_ckpt_layer_table(m, &c.nlayers);
    c.nparams = m->nparams;
    c.nbuffers = m->nbuffers;
    c.params = dt_xmalloc(sizeof(float) * (m->nparams + m->nbuffers + 1));
    if (dt_ckpt_read(MPI_COMM_SELF, g->path, &c, st) == DT_OK) {
        if (c.classes != info->classes || c.model_text_len != info->model_text_len || !c.tokenizer ||
            memcmp(c.model_text, info->model_text, c.model_text_len) || c.nmerges != info->nmerges)
            dt_fail(st, DT_EINPUT, "checkpoint %s: changed while it was read (its model or tokenizer differs between "
                    "two reads)", g->path);
        else {
            char why[256];
            m->be->upload(m->params, c.params, sizeof(float) * m->nparams);
            m->be->upload(m->buffers, c.params + m->nparams, sizeof(float) * m->nbuffers);
            if (dt_bpe_from_merges(&g->bpe, c.merges, c.nmerges, why, sizeof why) != 0)
                dt_fail(st, DT_EINPUT, "checkpoint %s: its tokenizer (/tokenizer/merges): %s", g->path, why);
        }
        dt_ckpt_release(&c);
    }
    free((void *)c.layers);
    free(c.params);
    return st->code;
}

static int load(struct gen *g, const struct opts *o, dt_status *st)
{
    struct dt_ckpt info;
    char why[256];
    memset(&info, 0, sizeof info);
    if (resolve(o->ckpt, g->path, sizeof g->path, st) != DT_OK) return st->code;
    if (dt_ckpt_read_info(MPI_COMM_SELF, g->path, &info, st) != DT_OK) return st->code;
    if (!info.tokenizer)
        dt_fail(st, DT_EINPUT, "checkpoint %s: not a language model's: it holds no tokenizer (model %s was trained on "
                "images, or the checkpoint predates stored tokenizers); " PROG " needs a model trained on a token "
                "dataset (dtrain-prep --text)", g->path, info.model);
    else if (!info.model_text_len)
        dt_fail(st, DT_EINPUT, "checkpoint %s: holds no model text (model %s)", g->path, info.model);
    else if (info.classes < 1)
        dt_fail(st, DT_EINPUT, "checkpoint %s: num_classes (the vocabulary) is %d", g->path, info.classes);
    else if (build(g, &info, st) == DT_OK) {
        g->be = &dt_backend_cpu;
        if (g->be->setup((int)o->threads, DT_PREC_FP32, why, sizeof why) != 0)
            dt_fail(st, DT_ERUNTIME, "the CPU backend: %s", why);
        else {
            g->m.sharded = 1; /* nothing trains here: no gradient block (the parameters are still the model's) */
            dt_model_create(&g->m, g->be, 1);
            load_params(g, &info, st);
        }
    }
    dt_ckpt_release(&info);
    return st->code;
}

/* ---- running it ------------------------------------------------------------- */

/* The ordinary forward of tokens[0..w) as one window (w <= T: the rest
 * padded with token 0, which causal attention keeps from the first w
 * positions); the logits of positions [first, w) into out. */
static void window_logits(struct gen *g, const int32_t *tokens, int w, int first, float *out)
{
    struct dt_model *m = &g->m;
    int32_t *win = dt_xcalloc((size_t)g->T + 1, sizeof *win);
    memcpy(win, tokens, sizeof *win * (size_t)w);
    dt_model_load_input(m, m->act[0], (const uint8_t *)win, sizeof *win * ((size_t)g->T + 1));
    dt_model_forward(m, 1, 0, NULL);
    g->be->download(out, (const char *)m->act[m->nlayers] + sizeof(float) * (size_t)first * g->V,
                    sizeof(float) * (size_t)(w - first) * g->V);
    free(win);
}

static int print_logits(struct gen *g, const int32_t *tok, int n)
{
    float *l = dt_xmalloc(sizeof(float) * (size_t)n * g->V);
    window_logits(g, tok, n, 0, l);
    for (int t = 0; t < n; t++) {
        const float *row = l + (size_t)t * g->V;
        for (int v = 0; v < g->V; v++) printf(v ? " %.9g" : "%.9g", (double)row[v]);
        putchar('\n');
    }
    free(l);
    return fflush(stdout) == 0 ? DT_OK : DT_ERUNTIME;
}

/* all[0..total) so far; the logits that follow its last token into logits.
 * pos: positions in the cache. */
static void next_logits(struct gen *g, const struct opts *o, const int32_t *all, int total, int *pos, long *slides,
                        float *logits)
{
    const int w = total < g->T ? total : g->T;
    if (o->no_cache) {
        window_logits(g, all + total - w, w, w - 1, logits);
        return;
    }
    if (*pos < g->T) {
        dt_model_decode(&g->m, all[total - 1], (*pos)++, logits);
        return;
    }
    /* The window slid: every position shifted, so the whole cache would be
     * recomputed, for this token only (the next one slides again). One
     * batched forward of the window does that ten times faster than T
     * single positions (gpt-mini: 0.06 s against 0.57 s). */
    window_logits(g, all + total - g->T, g->T, g->T - 1, logits);
    (*slides)++;
}

static int generate(struct gen *g, const struct opts *o, const int32_t *prompt, int len, dt_status *st)
{
    const long N = o->tokens;
    int32_t *all = dt_xmalloc(sizeof *all * ((size_t)len + (size_t)N));
    float *logits = dt_xmalloc(sizeof(float) * (size_t)g->V);
    struct dt_sampler s;
    long slides = 0;
    int pos = 0, total = len;
    memcpy(all, prompt, sizeof *all * (size_t)len);
    dt_sampler_init(&s, (float)o->temperature, (int)o->top_k, o->seed, g->V);
    dt_gen_write(stdout, &g->bpe, all, len);
    fflush(stdout);
    const double t0 = now();
    if (o->no_cache) {
        window_logits(g, all, len, len - 1, logits);
    } else {
        for (int i = 0; i < len; i++) dt_model_decode(&g->m, all[i], i, logits);
        pos = len;
    }
    const double t1 = now();
    for (long k = 0; k < N; k++) {
        all[total++] = dt_sample(&s, logits, g->V);
        dt_gen_write(stdout, &g->bpe, all + total - 1, 1);
        fflush(stdout);
        if (k + 1 < N) next_logits(g, o, all, total, &pos, &slides, logits);
    }
    const double t2 = now();
    putchar('\n');
    if (fflush(stdout) != 0) dt_fail(st, DT_ERUNTIME, "writing the text to stdout: %s", strerror(errno));
    if (!o->quiet)
        fprintf(stderr, PROG ": %ld token%s in %.3f s: %.1f tokens/s (%s; the prompt's %d token%s %.3f s)%s\n", N,
                N == 1 ? "" : "s", t2 - t1, (double)N / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
                o->no_cache ? "no cache: a forward of the window a token" : "key/value cache", len, len == 1 ? "" : "s",
                t1 - t0,
                slides ? "; past block_size: a forward of the window for each later token" : "");
    dt_sampler_free(&s);
    free(all);
    free(logits);
    return st->code;
}

static int run(const struct opts *o, dt_status *st)
{
    struct gen g;
    int32_t *tok = NULL;
    int n = 0;
    memset(&g, 0, sizeof g);
    if (load(&g, o, st) == DT_OK) {
        if (o->prompt) dt_gen_encode(&g.bpe, g.V, o->prompt, strlen(o->prompt), &tok, &n, st);
        else dt_gen_parse_ids(o->prompt_tokens, g.V, &tok, &n, st);
    }
    if (st->code == DT_OK && n > g.T) {
        if (!o->quiet)
            fprintf(stderr, PROG ": note: the prompt is %d tokens, longer than the model's block_size %d: keeping its "
                    "last %d\n", n, g.T, g.T);
        memmove(tok, tok + (n - g.T), sizeof *tok * (size_t)g.T);
        n = g.T;
    }
    if (st->code == DT_OK) {
        if (o->logits && print_logits(&g, tok, n) != DT_OK)
            dt_fail(st, DT_ERUNTIME, "writing the logits to stdout: %s", strerror(errno));
        else if (!o->logits)
            generate(&g, o, tok, n, st);
    }
    free(tok);
    dt_bpe_free(&g.bpe);
    dt_model_free(&g.m);
    return st->code;
}

int main(int argc, char **argv)
{
    struct opts o = {.temperature = 1.0, .seed = 42, .threads = 1};
    dt_status st = {0};
    dt_cpu_blas_prepare(argv); /* before anything: OpenBLAS's kernels (backend.h) */
    int rc = parse(argc, argv, &o, &st);
    if (rc == SHOW_HELP) {
        usage(stdout);
        return 0;
    }
    if (rc == SHOW_VERSION) {
        printf(PROG " " PACKAGE_VERSION "\n");
        return 0;
    }
    if (rc == PARSED) {
        MPI_Init(NULL, NULL); /* the checkpoint reader's parallel HDF5, on this one process */
        rc = run(&o, &st);
        MPI_Finalize();
    }
    if (rc != DT_OK) fprintf(stderr, PROG ": error: %s\n", st.msg);
    return rc;
}
