/* prep.c: dtrain-prep, which converts IDX image/label files (MNIST,
 * Fashion-MNIST) into the HDF5 layout dtrain reads, or with --synthetic
 * writes generated data of any shape and size in that layout:
 *
 *   /train/images  uint8 [N, H, W, C]    /train/labels  uint8 [N]
 *   /test/images   uint8 [M, H, W, C]    /test/labels   uint8 [M]
 *   root attributes: format_version, num_classes, source, [class_names],
 *   and in shard files shard_index, shard_count, {train,test}_{offset,total}.
 *
 * Design decisions a reader must know:
 * - Datasets are contiguous and uncompressed: a random sample is then one
 *   small read at a computed offset. Chunked layouts were 5-10x slower for
 *   random 64-row batches (measured with 1024- and 64-row chunks).
 * - Every output is written under OUTPUT.tmp.<pid> and renamed into place
 *   only after all outputs (all shards) are complete; any failure, or a
 *   SIGINT/SIGTERM, removes the temporaries, so a finished-looking file is
 *   always a complete one.
 * - Datasets are written a piece (at most CHUNK_BYTES) at a time, from the
 *   IDX data in memory or from rows generated into one reused buffer, so a
 *   synthetic file may be far larger than memory. Synthetic row i is the
 *   same function of (i, seed) as in dtrain's --synthetic (data/synthetic.c):
 *   train is rows 0..N-1 of that stream, test rows N..N+M-1.
 * - Exit codes: 0 success, 1 cannot write the output, 2 bad command line
 *   (including flag values the data cannot satisfy), 3 bad or missing input.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "prep/idx.h"
#include "runtime/rng.h"

enum { EXIT_WRITE = 1, EXIT_USAGE = 2, EXIT_DATA = 3 };

#define PROG "dtrain-prep"
#define DEFAULT_SOURCE "/usr/share/datasets/fashion-mnist"
#define FORMAT_VERSION 1
#define MAX_CLASSES 256 /* labels are uint8 */
#define CHUNK_BYTES ((size_t)64 << 20) /* most image bytes held per write */
#define DEFAULT_SEED 42                /* as dtrain's --seed */

static const char *const fashion_names[] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
};
#define FASHION_NCLASSES (int)(sizeof fashion_names / sizeof fashion_names[0])

struct options {
    const char *output;
    const char *source;       /* --source, or NULL when explicit paths are used */
    const char *train_images, *train_labels, *test_images, *test_labels;
    long limit_train, limit_test; /* 0: all samples */
    long classes;                 /* 0: max label + 1 */
    const char *class_names;      /* comma-separated, or NULL */
    long shards;                  /* 0: one file named OUTPUT */
    const char *synthetic;        /* --synthetic spec, or NULL */
    long seed;
    int seed_set;
    int force, quiet;
};

struct split {
    const char *name;               /* "train" or "test" */
    const char *images_path, *labels_path;
    struct idx_array images, labels; /* whole files as read (IDX input) */
    size_t n;                        /* samples written (after --limit-*) */
    size_t total;                    /* samples in the files */
    uint32_t height, width, channels;
    int synthetic;                   /* rows are generated, not read */
    uint64_t synth_seed;             /* the generator's stream */
    uint64_t synth_first;            /* stream index of this split's row 0 */
    int num_classes;                 /* label range of generated rows */
};

struct dataset {
    struct split train, test;
    int has_test;
    int num_classes;
    const char **class_names; /* num_classes entries, or NULL */
    char *source;
    long seed;                /* --seed, for the summary of synthetic data */
};

/* Temporary files that exist right now; the signal handler removes them. */
static char **g_tmp_paths;
static volatile sig_atomic_t g_tmp_live;
/* Final names already renamed into place by this run (undone on failure). */
static const char **g_done_paths;
static int g_done;

static void remove_partial_outputs(void)
{
    for (int i = 0; i < g_tmp_live; i++)
        unlink(g_tmp_paths[i]);
    g_tmp_live = 0;
    for (int i = 0; i < g_done; i++)
        unlink(g_done_paths[i]);
    g_done = 0;
}

static void on_signal(int sig)
{
    for (int i = 0; i < g_tmp_live; i++)
        unlink(g_tmp_paths[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((format(printf, 2, 3), noreturn))
static void die(int code, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (code == EXIT_USAGE)
        fprintf(stderr, "Try '" PROG " --help' for the options.\n");
    remove_partial_outputs();
    exit(code);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL)
        die(EXIT_WRITE, "out of memory (%zu bytes)", n);
    return p;
}

static char *xasprintf_path(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = xmalloc(n);

    snprintf(s, n, "%s/%s", a, b);
    return s;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Command line ------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " [OPTIONS] OUTPUT.h5\n"
"       " PROG " --synthetic HxWxC:CLASSES:NTRAIN[:NTEST] [OPTIONS] OUTPUT.h5\n"
"Convert IDX image/label files (MNIST format, plain or .gz) into the HDF5\n"
"layout dtrain reads: /train/images uint8 [N,H,W,1], /train/labels uint8 [N],\n"
"/test/images, /test/labels, and root attributes num_classes, source,\n"
"class_names, format_version. Or write generated data in that layout.\n"
"\n"
"Input (default: --source " DEFAULT_SOURCE "):\n"
"  --source DIR           read {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
"                         from DIR\n"
"  --train-images FILE    training images, IDX uint8 [N,H,W]\n"
"  --train-labels FILE    training labels, IDX uint8 [N]\n"
"  --test-images FILE     test images (optional, needs --test-labels)\n"
"  --test-labels FILE     test labels (optional, needs --test-images)\n"
"  --limit-train N        keep only the first N training samples\n"
"  --limit-test N         keep only the first N test samples\n"
"  --classes N            number of classes (default: largest label + 1);\n"
"                         every label must be below N\n"
"  --class-names A,B,...  class names, one per class (default for the\n"
"                         fashion-mnist directory: the Fashion-MNIST names)\n"
"\n"
"Synthetic data (instead of IDX input):\n"
"  --synthetic HxWxC:CLASSES:NTRAIN[:NTEST]\n"
"                         NTRAIN training (and NTEST test) samples of HxWxC\n"
"                         pseudo-random pixels and labels below CLASSES, the\n"
"                         rows dtrain --synthetic generates; written 64 MiB at\n"
"                         a time, so the file may be larger than memory\n"
"  --seed N               seed of the generated data (default 42)\n"
"\n"
"Output:\n"
"  --shards K             write K files OUTPUT-00000-of-0000K.h5 ..., each with a\n"
"                         contiguous, near-equal slice of train and of test\n"
"  -f, --force            overwrite existing output files\n"
"  -q, --quiet            print nothing on success\n"
"  -h, --help             show this help and exit\n"
"  -V, --version          show the version and exit\n"
"\n"
"Exit status: 0 success, 1 cannot write the output, 2 bad command line,\n"
"3 missing or invalid input data.\n");
}

/* A whole number in [min, max] for FLAG, or a usage error naming it. */
static long parse_count(const char *flag, const char *arg, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(arg, &end, 10);
    if (end == arg || *end != '\0' || errno == ERANGE || v < min || v > max)
        die(EXIT_USAGE, "%s: expected a whole number from %ld to %ld, found '%s'",
            flag, min, max, arg);
    return v;
}

enum {
    OPT_SOURCE = 256, OPT_TRAIN_IMAGES, OPT_TRAIN_LABELS, OPT_TEST_IMAGES,
    OPT_TEST_LABELS, OPT_LIMIT_TRAIN, OPT_LIMIT_TEST, OPT_CLASSES,
    OPT_CLASS_NAMES, OPT_SHARDS, OPT_SYNTHETIC, OPT_SEED,
};

static void parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"source",       required_argument, NULL, OPT_SOURCE},
        {"train-images", required_argument, NULL, OPT_TRAIN_IMAGES},
        {"train-labels", required_argument, NULL, OPT_TRAIN_LABELS},
        {"test-images",  required_argument, NULL, OPT_TEST_IMAGES},
        {"test-labels",  required_argument, NULL, OPT_TEST_LABELS},
        {"limit-train",  required_argument, NULL, OPT_LIMIT_TRAIN},
        {"limit-test",   required_argument, NULL, OPT_LIMIT_TEST},
        {"classes",      required_argument, NULL, OPT_CLASSES},
        {"class-names",  required_argument, NULL, OPT_CLASS_NAMES},
        {"shards",       required_argument, NULL, OPT_SHARDS},
        {"synthetic",    required_argument, NULL, OPT_SYNTHETIC},
        {"seed",         required_argument, NULL, OPT_SEED},
        {"force",        no_argument,       NULL, 'f'},
        {"quiet",        no_argument,       NULL, 'q'},
        {"help",         no_argument,       NULL, 'h'},
        {"version",      no_argument,       NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(o, 0, sizeof *o);
    opterr = 0; /* we print our own messages */
    while ((c = getopt_long(argc, argv, ":fqhV", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_SOURCE:       o->source = optarg; break;
        case OPT_TRAIN_IMAGES: o->train_images = optarg; break;
        case OPT_TRAIN_LABELS: o->train_labels = optarg; break;
        case OPT_TEST_IMAGES:  o->test_images = optarg; break;
        case OPT_TEST_LABELS:  o->test_labels = optarg; break;
        case OPT_LIMIT_TRAIN:
            o->limit_train = parse_count("--limit-train", optarg, 1, UINT32_MAX);
            break;
        case OPT_LIMIT_TEST:
            o->limit_test = parse_count("--limit-test", optarg, 1, UINT32_MAX);
            break;
        case OPT_CLASSES:
            o->classes = parse_count("--classes", optarg, 1, MAX_CLASSES);
            break;
        case OPT_CLASS_NAMES:  o->class_names = optarg; break;
        case OPT_SHARDS:
            o->shards = parse_count("--shards", optarg, 1, 99999);
            break;
        case OPT_SYNTHETIC:    o->synthetic = optarg; break;
        case OPT_SEED:
            o->seed = parse_count("--seed", optarg, 0, LONG_MAX);
            o->seed_set = 1;
            break;
        case 'f': o->force = 1; break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf(PROG " %s\n", PACKAGE_VERSION); exit(0);
        case ':':
            die(EXIT_USAGE, "option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt != 0 && optopt < 256)
                die(EXIT_USAGE, "unknown option '-%c'", optopt);
            die(EXIT_USAGE, "unknown option '%s'", argv[optind - 1]);
        }
    }

    if (optind == argc)
        die(EXIT_USAGE, "missing the OUTPUT.h5 operand");
    if (argc - optind > 1)
        die(EXIT_USAGE, "expected one OUTPUT.h5 operand, found %d (first extra: '%s')",
            argc - optind, argv[optind + 1]);
    o->output = argv[optind];
    if (o->output[0] == '\0')
        die(EXIT_USAGE, "OUTPUT.h5 operand is empty");

    if (o->synthetic) {
        const char *idx_flag = o->source ? "--source" : o->train_images ? "--train-images" :
            o->train_labels ? "--train-labels" : o->test_images ? "--test-images" :
            o->test_labels ? "--test-labels" : NULL;
        if (idx_flag)
            die(EXIT_USAGE, "--synthetic cannot be combined with %s: the data are generated, "
                "not read", idx_flag);
        if (o->limit_train || o->limit_test)
            die(EXIT_USAGE, "%s is not used with --synthetic (NTRAIN and NTEST in its "
                "value give the sizes)", o->limit_train ? "--limit-train" : "--limit-test");
        if (o->classes)
            die(EXIT_USAGE, "--classes is not used with --synthetic (CLASSES in its value "
                "gives the number)");
        if (!o->seed_set)
            o->seed = DEFAULT_SEED;
        return;
    }
    if (o->seed_set)
        die(EXIT_USAGE, "--seed is only used with --synthetic (converted data are not random)");
    if (o->source && (o->train_images || o->train_labels || o->test_images || o->test_labels))
        die(EXIT_USAGE, "--source cannot be combined with --train-*/--test-* paths; use one or the other");
    if (!o->source && !o->train_images && !o->train_labels && !o->test_images && !o->test_labels)
        o->source = DEFAULT_SOURCE;
    if (!o->source) {
        if (!o->train_images || !o->train_labels)
            die(EXIT_USAGE, "--train-images and --train-labels are both needed (found only %s)",
                o->train_images ? "--train-images" : o->train_labels ? "--train-labels" : "test files");
        if (!o->test_images != !o->test_labels)
            die(EXIT_USAGE, "--test-images and --test-labels go together (found only %s)",
                o->test_images ? "--test-images" : "--test-labels");
    }
}

/* ---- Input -------------------------------------------------------------- */

/* DIR/NAME.gz if it exists, else DIR/NAME, else a data error naming both. */
static const char *find_in_source(const char *dir, const char *name)
{
    char gzname[128];
    char *p;

    snprintf(gzname, sizeof gzname, "%s.gz", name);
    p = xasprintf_path(dir, gzname);
    if (access(p, F_OK) == 0)
        return p;
    free(p);
    p = xasprintf_path(dir, name);
    if (access(p, F_OK) == 0)
        return p;
    die(EXIT_DATA, "--source %s: found neither %s nor %s there", dir, gzname, name);
}

static void resolve_inputs(struct options *o)
{
    struct stat st;

    if (!o->source)
        return;
    if (stat(o->source, &st) != 0)
        die(EXIT_DATA, "--source %s: cannot open directory: %s", o->source, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        die(EXIT_DATA, "--source %s: not a directory (expected a directory of IDX files)", o->source);
    o->train_images = find_in_source(o->source, "train-images-idx3-ubyte");
    o->train_labels = find_in_source(o->source, "train-labels-idx1-ubyte");
    o->test_images = find_in_source(o->source, "t10k-images-idx3-ubyte");
    o->test_labels = find_in_source(o->source, "t10k-labels-idx1-ubyte");
}

static void format_dims(char *buf, size_t len, const struct idx_array *a)
{
    size_t n = 0;

    n += (size_t)snprintf(buf, len, "%d-D [", a->ndim);
    for (int i = 0; i < a->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%u", i ? ", " : "", a->dims[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Read one split's two files and check their shapes agree. */
static void load_split(struct split *s, long limit, const char *limit_flag)
{
    char err[1024], dims[128];

    if (idx_read(s->images_path, &s->images, err, sizeof err) != 0)
        die(EXIT_DATA, "%s", err);
    if (idx_read(s->labels_path, &s->labels, err, sizeof err) != 0)
        die(EXIT_DATA, "%s", err);
    if (s->images.ndim != 3) {
        format_dims(dims, sizeof dims, &s->images);
        die(EXIT_DATA, "%s: %s images must be 3-D [N, height, width], found %s",
            s->images_path, s->name, dims);
    }
    if (s->labels.ndim != 1) {
        format_dims(dims, sizeof dims, &s->labels);
        die(EXIT_DATA, "%s: %s labels must be 1-D [N], found %s",
            s->labels_path, s->name, dims);
    }
    if (s->images.dims[0] != s->labels.dims[0])
        die(EXIT_DATA, "%s labels %s has %u labels but %s images %s has %u images",
            s->name, s->labels_path, s->labels.dims[0], s->name, s->images_path, s->images.dims[0]);
    if (s->images.dims[0] == 0 || s->images.dims[1] == 0 || s->images.dims[2] == 0)
        die(EXIT_DATA, "%s: %s images are empty (%u x %u x %u)", s->images_path, s->name,
            s->images.dims[0], s->images.dims[1], s->images.dims[2]);
    s->total = s->images.dims[0];
    s->height = s->images.dims[1];
    s->width = s->images.dims[2];
    s->channels = 1;
    s->n = s->total;
    if (limit > 0) {
        if ((size_t)limit > s->total)
            die(EXIT_USAGE, "%s %ld: %s has only %zu samples", limit_flag, limit,
                s->images_path, s->total);
        s->n = (size_t)limit;
    }
}

/* Largest label in the whole file (not just the kept part), so --limit-*
 * never changes num_classes. Returns -1 with *INDEX set if one is >= LIMIT. */
static int max_label(const struct split *s, int limit, size_t *index)
{
    int m = 0;

    for (size_t i = 0; i < s->labels.count; i++) {
        int v = s->labels.data[i];
        if (v >= limit) {
            *index = i;
            return -1;
        }
        if (v > m)
            m = v;
    }
    return m;
}

static void set_classes(struct dataset *d, const struct options *o)
{
    const struct split *splits[2] = {&d->train, &d->test};
    int limit = o->classes > 0 ? (int)o->classes : MAX_CLASSES, m = 0;

    for (int k = 0; k < 1 + d->has_test; k++) {
        size_t bad = 0;
        int mk = max_label(splits[k], limit, &bad);
        if (mk < 0)
            die(EXIT_DATA, "%s: label %d at index %zu is out of range for --classes %d "
                "(expected 0..%d)", splits[k]->labels_path, splits[k]->labels.data[bad],
                bad, limit, limit - 1);
        if (mk > m)
            m = mk;
    }
    d->num_classes = o->classes > 0 ? (int)o->classes : m + 1;
}

/* --class-names, else the Fashion-MNIST names when the training images live
 * in a directory named fashion-mnist, else none. */
static void set_class_names(struct dataset *d, const struct options *o)
{
    char *copy, *dir, *tok, *save = NULL;
    int n = 0;

    if (o->class_names == NULL) {
        char resolved[PATH_MAX];
        if (d->train.synthetic || realpath(d->train.images_path, resolved) == NULL)
            return;
        dir = dirname(resolved);
        if (strcmp(basename(dir), "fashion-mnist") != 0 || d->num_classes != FASHION_NCLASSES)
            return;
        d->class_names = xmalloc(FASHION_NCLASSES * sizeof *d->class_names);
        for (int i = 0; i < FASHION_NCLASSES; i++)
            d->class_names[i] = fashion_names[i];
        return;
    }

    copy = strdup(o->class_names);
    if (copy == NULL)
        die(EXIT_WRITE, "out of memory");
    for (const char *p = o->class_names; *p; p++)
        n += *p == ',';
    n += 1;
    if (n != d->num_classes)
        die(EXIT_USAGE, "--class-names: found %d names, expected %d (one per class; "
            "num_classes is %d%s)", n, d->num_classes, d->num_classes,
            o->classes ? " from --classes" : ", the largest label + 1");
    d->class_names = xmalloc((size_t)n * sizeof *d->class_names);
    n = 0;
    /* strtok would merge empty fields; an empty name is an error, not skipped. */
    for (tok = copy; tok != NULL; tok = save) {
        save = strchr(tok, ',');
        if (save)
            *save++ = '\0';
        if (*tok == '\0')
            die(EXIT_USAGE, "--class-names: name %d is empty in '%s'", n + 1, o->class_names);
        d->class_names[n++] = tok;
    }
}

static void set_source(struct dataset *d, const struct options *o)
{
    size_t len = 256 + strlen(d->train.images_path) + strlen(d->train.labels_path) +
                 (d->has_test ? strlen(d->test.images_path) + strlen(d->test.labels_path) : 0);
    size_t n;

    d->source = xmalloc(len);
    n = (size_t)snprintf(d->source, len, "train-images=%s train-labels=%s",
                         d->train.images_path, d->train.labels_path);
    if (d->has_test)
        n += (size_t)snprintf(d->source + n, len - n, " test-images=%s test-labels=%s",
                              d->test.images_path, d->test.labels_path);
    if (o->limit_train)
        n += (size_t)snprintf(d->source + n, len - n, " limit-train=%ld", o->limit_train);
    if (o->limit_test)
        snprintf(d->source + n, len - n, " limit-test=%ld", o->limit_test);
}

static void load_dataset(struct dataset *d, const struct options *o)
{
    memset(d, 0, sizeof *d);
    d->train.name = "train";
    d->train.images_path = o->train_images;
    d->train.labels_path = o->train_labels;
    d->test.name = "test";
    d->test.images_path = o->test_images;
    d->test.labels_path = o->test_labels;
    d->has_test = o->test_images != NULL;
    if (o->limit_test && !d->has_test)
        die(EXIT_USAGE, "--limit-test: there is no test split (give --test-images and --test-labels)");

    load_split(&d->train, o->limit_train, "--limit-train");
    if (d->has_test) {
        load_split(&d->test, o->limit_test, "--limit-test");
        if (d->test.height != d->train.height || d->test.width != d->train.width)
            die(EXIT_DATA, "%s: test images are %ux%u but the training images (%s) are %ux%u",
                d->test.images_path, d->test.height, d->test.width,
                d->train.images_path, d->train.height, d->train.width);
    }
    set_classes(d, o);
    set_class_names(d, o);
    set_source(d, o);
}

/* ---- Synthetic data ------------------------------------------------------ */

static uint64_t synth_row_base(const struct split *s, uint64_t row)
{
    return dt_mix64(s->synth_seed ^ (s->synth_first + row) * 0xd1342543de82ef95ULL);
}

/* Bytes [b0, b1) of the image whose stream starts at BASE: byte b is byte
 * b % 8, little-endian, of dt_mix64(BASE + b - b % 8), which is what dtrain's
 * memcpy gives on little-endian hosts. Whole words take the fast path. */
static void synth_bytes(uint8_t *out, uint64_t base, size_t b0, size_t b1)
{
    size_t b = b0;

    for (; b < b1 && b % 8 != 0; b++, out++)
        *out = (uint8_t)(dt_mix64(base + b - b % 8) >> (8 * (b % 8)));
    for (; b1 - b >= 8; b += 8, out += 8) {
        uint64_t r = dt_mix64(base + b);
        for (int k = 0; k < 8; k++) /* compilers merge this into one store */
            out[k] = (uint8_t)(r >> (8 * k));
    }
    for (; b < b1; b++, out++)
        *out = (uint8_t)(dt_mix64(base + b - b % 8) >> (8 * (b % 8)));
}

static uint8_t synth_label(const struct split *s, uint64_t row)
{
    return (uint8_t)(dt_mix64(synth_row_base(s, row) ^ 0x1abe1ULL) % (uint64_t)s->num_classes);
}

/* HxWxC:CLASSES:NTRAIN[:NTEST] into D, with the messages (and limits) of
 * dtrain's own --synthetic. */
static void parse_synthetic(const char *spec, struct dataset *d)
{
    static const char sep[] = {'x', 'x', ':', ':', ':', '\0'};
    const uint64_t max_bytes = SIZE_MAX < (1ULL << 62) ? SIZE_MAX : 1ULL << 62;
    long v[6] = {0, 0, 0, 0, 0, 0};
    const char *p = spec;
    char *end;
    int k = 0;
    uint64_t row;

    for (; k < 6; k++) {
        errno = 0;
        v[k] = strtol(p, &end, 10);
        if (errno || end == p)
            break;
        p = end;
        if (*p == '\0') {
            k++;
            break;
        }
        if (k == 5 || *p != sep[k])
            break;
        p++;
    }
    if ((k != 5 && k != 6) || *p != '\0')
        die(EXIT_USAGE, "--synthetic: expected HxWxC:CLASSES:NTRAIN or HxWxC:CLASSES:NTRAIN:NTEST, "
            "e.g. 32x32x3:10:50000:10000, found '%s'", spec);
    if (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[0] > 4096 || v[1] > 4096 || v[2] > 64)
        die(EXIT_USAGE, "--synthetic %s: image sides must be in [1, 4096] and channels in "
            "[1, 64], found %ldx%ldx%ld", spec, v[0], v[1], v[2]);
    if (v[3] < 2 || v[3] > MAX_CLASSES)
        die(EXIT_USAGE, "--synthetic %s: expected 2 to 256 classes (uint8 labels), found %ld",
            spec, v[3]);
    if (v[4] < 1 || v[4] > (1L << 40))
        die(EXIT_USAGE, "--synthetic %s: expected 1 to 2^40 training samples, found %ld",
            spec, v[4]);
    if (k == 6 && (v[5] < 1 || v[5] > (1L << 40)))
        die(EXIT_USAGE, "--synthetic %s: expected 1 to 2^40 test samples (leave NTEST out "
            "for no test split), found %ld", spec, v[5]);
    row = (uint64_t)v[0] * (uint64_t)v[1] * (uint64_t)v[2];
    if ((uint64_t)(v[4] + v[5]) > max_bytes / row)
        die(EXIT_USAGE, "--synthetic %s: %ld samples of %llu bytes are more than the %llu bytes "
            "that can be addressed", spec, v[4] + v[5], (unsigned long long)row,
            (unsigned long long)max_bytes);

    d->num_classes = (int)v[3];
    d->has_test = k == 6;
    for (int i = 0; i < 2; i++) {
        struct split *s = i == 0 ? &d->train : &d->test;
        s->height = (uint32_t)v[0];
        s->width = (uint32_t)v[1];
        s->channels = (uint32_t)v[2];
        s->n = s->total = (size_t)v[4 + i];
        s->synthetic = 1;
        s->num_classes = d->num_classes;
    }
    d->test.synth_first = (uint64_t)v[4];
}

static void load_synthetic(struct dataset *d, const struct options *o)
{
    size_t len = strlen(o->synthetic) + 64;

    memset(d, 0, sizeof *d);
    d->train.name = "train";
    d->test.name = "test";
    parse_synthetic(o->synthetic, d);
    d->seed = o->seed;
    /* dtrain --synthetic's stream for --seed N (data/synthetic.c). */
    d->train.synth_seed = d->test.synth_seed = (uint64_t)o->seed ^ 0x5f17ec0ffeeULL;
    set_class_names(d, o);
    d->source = xmalloc(len);
    snprintf(d->source, len, "synthetic=%s seed=%ld", o->synthetic, o->seed);
}

/* ---- Output names -------------------------------------------------------- */

/* OUTPUT for one file; for K shards, OUTPUT with "-IIIII-of-KKKKK" inserted
 * before a .h5/.hdf5/.hdf extension (or appended when it has none of those). */
static const char **output_names(const struct options *o, int *count)
{
    int k = o->shards > 0 ? (int)o->shards : 1;
    const char **names = xmalloc((size_t)k * sizeof *names);
    const char *ext = "";
    size_t stem;

    *count = k;
    if (o->shards == 0) {
        names[0] = o->output;
        return names;
    }
    stem = strlen(o->output);
    for (const char *e = o->output + stem; e > o->output && e[-1] != '/'; e--) {
        if (e[-1] == '.') {
            if (strcmp(e, "h5") == 0 || strcmp(e, "hdf5") == 0 || strcmp(e, "hdf") == 0) {
                ext = e - 1;
                stem = (size_t)(ext - o->output);
            }
            break;
        }
    }
    for (int i = 0; i < k; i++) {
        size_t len = stem + strlen(ext) + 32;
        char *name = xmalloc(len);
        snprintf(name, len, "%.*s-%05d-of-%05d%s", (int)stem, o->output, i, k, ext);
        names[i] = name;
    }
    return names;
}

static void check_outputs(const char *const *names, int count, int force)
{
    for (int i = 0; i < count; i++) {
        struct stat st;
        if (lstat(names[i], &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            die(EXIT_USAGE, "%s: output is a directory, expected a file name", names[i]);
        if (!force)
            die(EXIT_USAGE, "%s: output already exists (use --force to overwrite it)", names[i]);
    }
}

/* ---- HDF5 writing ----------------------------------------------------------- */

static herr_t innermost_error(unsigned n, const H5E_error2_t *e, void *data)
{
    const char **desc = data;

    if (n == 0 && e->desc != NULL)
        *desc = e->desc;
    return 0;
}

/* Die with the output name, what we were doing, and HDF5's own message.
 * A failed write(2) buries strerror in a multi-line report; show just that. */
__attribute__((noreturn))
static void h5_fail(const char *output, const char *what)
{
    static const char key[] = "error message = '";
    const char *desc = "unknown HDF5 error", *m;
    char msg[512];

    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &desc);
    m = strstr(desc, key);
    if (m != NULL) {
        m += sizeof key - 1;
        snprintf(msg, sizeof msg, "%.*s", (int)strcspn(m, "'"), m);
    } else {
        snprintf(msg, sizeof msg, "%s", desc);
    }
    for (char *c = msg; *c; c++)
        if (*c == '\n')
            *c = ' ';
    die(EXIT_WRITE, "%s: cannot write %s: %s", output, what, msg);
}

#define H5_TRY(expr, output, what) \
    do { if ((expr) < 0) h5_fail(output, what); } while (0)

static void attr_int(hid_t loc, const char *out, const char *name, hid_t file_type,
                     hid_t mem_type, const void *v)
{
    hid_t space = H5Screate(H5S_SCALAR), a;

    H5_TRY(space, out, name);
    H5_TRY(a = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT), out, name);
    H5_TRY(H5Awrite(a, mem_type, v), out, name);
    H5Aclose(a);
    H5Sclose(space);
}

static void attr_i32(hid_t loc, const char *out, const char *name, int32_t v)
{
    attr_int(loc, out, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &v);
}

static void attr_i64(hid_t loc, const char *out, const char *name, int64_t v)
{
    attr_int(loc, out, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

/* Fixed-length, NUL-terminated UTF-8 strings: scalar when n == 0, else a
 * 1-D array of n strings padded to the longest. */
static void attr_strings(hid_t loc, const char *out, const char *name,
                         const char *const *strs, int n)
{
    size_t width = 1;
    hsize_t dim = (hsize_t)(n ? n : 1);
    hid_t type, space, a;
    char *buf;

    for (int i = 0; i < (n ? n : 1); i++)
        if (strlen(strs[i]) + 1 > width)
            width = strlen(strs[i]) + 1;
    buf = calloc(dim, width);
    if (buf == NULL)
        die(EXIT_WRITE, "out of memory");
    for (int i = 0; i < (n ? n : 1); i++)
        memcpy(buf + (size_t)i * width, strs[i], strlen(strs[i]));

    H5_TRY(type = H5Tcopy(H5T_C_S1), out, name);
    H5_TRY(H5Tset_size(type, width), out, name);
    H5_TRY(H5Tset_strpad(type, H5T_STR_NULLTERM), out, name);
    H5_TRY(H5Tset_cset(type, H5T_CSET_UTF8), out, name);
    H5_TRY(space = n ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_SCALAR), out, name);
    H5_TRY(a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), out, name);
    H5_TRY(H5Awrite(a, type, buf), out, name);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    free(buf);
}

/* An uninitialised uint8 dataset of shape DIMS; write_rows fills it. */
static hid_t create_u8(hid_t group, const char *out, const char *what, const char *name,
                       int rank, const hsize_t *dims)
{
    hid_t space, dcpl, dset;

    H5_TRY(space = H5Screate_simple(rank, dims, NULL), out, what);
    H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), out, what);
    /* Every byte is written, so skip HDF5's fill pass. */
    H5_TRY(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), out, what);
    /* No timestamps: the same input and options give the same bytes. */
    H5_TRY(H5Pset_obj_track_times(dcpl, 0), out, what);
    H5_TRY(dset = H5Dcreate2(group, name, H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
           out, what);
    H5Pclose(dcpl);
    H5Sclose(space);
    return dset;
}

/* DATA (shape COUNT) into the block of DSET that starts at START. */
static void write_rows(hid_t dset, const char *out, const char *what, int rank,
                       const hsize_t *start, const hsize_t *count, const uint8_t *data)
{
    hid_t fspace, mspace;

    H5_TRY(fspace = H5Dget_space(dset), out, what);
    H5_TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), out, what);
    H5_TRY(mspace = H5Screate_simple(rank, count, NULL), out, what);
    H5_TRY(H5Dwrite(dset, H5T_NATIVE_UINT8, mspace, fspace, H5P_DEFAULT, data), out, what);
    H5Sclose(mspace);
    H5Sclose(fspace);
}

/* Samples [first, first + n) of split S as /NAME/images and /NAME/labels,
 * in pieces of at most CHUNK_BYTES: whole samples, or bands of image lines
 * when one sample is larger than that. IDX pieces point into the data read;
 * synthetic ones are generated into BUF, which is reused. */
static void write_split(hid_t file, const char *out, const struct split *s,
                        size_t first, size_t n)
{
    const size_t line = (size_t)s->width * s->channels, sample = line * s->height;
    const size_t piece_samples = sample <= CHUNK_BYTES ? CHUNK_BYTES / sample : 1;
    const size_t piece_lines = sample <= CHUNK_BYTES ? s->height :
                               CHUNK_BYTES / line > 0 ? CHUNK_BYTES / line : 1;
    hsize_t idims[4] = {n, s->height, s->width, s->channels}, ldims[1] = {n};
    uint8_t *buf = NULL, *lbuf = NULL; /* [piece samples, piece lines, W, C], [piece samples] */
    char iwhat[64], lwhat[64];
    hid_t gcpl, g, images, labels;

    snprintf(iwhat, sizeof iwhat, "group /%s", s->name);
    H5_TRY(gcpl = H5Pcreate(H5P_GROUP_CREATE), out, iwhat);
    H5_TRY(H5Pset_obj_track_times(gcpl, 0), out, iwhat);
    H5_TRY(g = H5Gcreate2(file, s->name, H5P_DEFAULT, gcpl, H5P_DEFAULT), out, iwhat);
    H5Pclose(gcpl);
    snprintf(iwhat, sizeof iwhat, "/%s/images", s->name);
    snprintf(lwhat, sizeof lwhat, "/%s/labels", s->name);
    images = create_u8(g, out, iwhat, "images", 4, idims);
    labels = create_u8(g, out, lwhat, "labels", 1, ldims);
    if (s->synthetic) {
        size_t k = piece_samples < n ? piece_samples : n;
        buf = xmalloc(k * piece_lines * line);
        lbuf = xmalloc(k);
    }

    for (size_t i = 0, k; i < n; i += k) {
        hsize_t lstart[1] = {i}, lcount[1];
        const uint8_t *lbl;

        k = piece_samples < n - i ? piece_samples : n - i;
        for (size_t l = 0, m; l < s->height; l += m) {
            hsize_t istart[4] = {i, l, 0, 0}, icount[4] = {k, 0, s->width, s->channels};
            const uint8_t *img;

            m = piece_lines < s->height - l ? piece_lines : s->height - l;
            icount[1] = m;
            if (s->synthetic) {
                for (size_t r = 0; r < k; r++)
                    synth_bytes(buf + r * m * line, synth_row_base(s, first + i + r),
                                l * line, (l + m) * line);
                img = buf;
            } else {
                img = s->images.data + (first + i) * sample + l * line;
            }
            write_rows(images, out, iwhat, 4, istart, icount, img);
        }
        if (s->synthetic) {
            for (size_t r = 0; r < k; r++)
                lbuf[r] = synth_label(s, first + i + r);
            lbl = lbuf;
        } else {
            lbl = s->labels.data + first + i;
        }
        lcount[0] = k;
        write_rows(labels, out, lwhat, 1, lstart, lcount, lbl);
    }

    free(buf);
    free(lbuf);
    H5_TRY(H5Dclose(images), out, iwhat);
    H5_TRY(H5Dclose(labels), out, lwhat);
    H5_TRY(H5Gclose(g), out, lwhat);
}

/* Shard I of K gets a contiguous slice: the first TOTAL % K shards one more. */
static void shard_slice(size_t total, int k, int i, size_t *first, size_t *n)
{
    size_t base = total / (size_t)k, rem = total % (size_t)k, ui = (size_t)i;

    *first = ui * base + (ui < rem ? ui : rem);
    *n = base + (ui < rem ? 1 : 0);
}

/* Write file I of COUNT (a shard when SHARDED) to TMP; OUT names it in errors. */
static void write_file(const char *tmp, const char *out, const struct dataset *d,
                       int i, int count, int sharded)
{
    size_t tr_first = 0, tr_n = d->train.n, te_first = 0, te_n = d->test.n;
    const char *source = d->source;
    hid_t f;

    if (sharded) {
        shard_slice(d->train.n, count, i, &tr_first, &tr_n);
        shard_slice(d->test.n, count, i, &te_first, &te_n);
    }
    H5_TRY(f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), out, "the file");
    write_split(f, out, &d->train, tr_first, tr_n);
    if (d->has_test)
        write_split(f, out, &d->test, te_first, te_n);

    attr_i32(f, out, "format_version", FORMAT_VERSION);
    attr_i32(f, out, "num_classes", d->num_classes);
    attr_strings(f, out, "source", &source, 0);
    if (d->class_names)
        attr_strings(f, out, "class_names", d->class_names, d->num_classes);
    if (sharded) {
        attr_i32(f, out, "shard_index", i);
        attr_i32(f, out, "shard_count", count);
        attr_i64(f, out, "train_offset", (int64_t)tr_first);
        attr_i64(f, out, "train_total", (int64_t)d->train.n);
        if (d->has_test) {
            attr_i64(f, out, "test_offset", (int64_t)te_first);
            attr_i64(f, out, "test_total", (int64_t)d->test.n);
        }
    }
    H5_TRY(H5Fclose(f), out, "the file (closing)");
}

static void write_outputs(const char **names, int count, int sharded, const struct dataset *d)
{
    g_tmp_paths = xmalloc((size_t)count * sizeof *g_tmp_paths);
    g_done_paths = xmalloc((size_t)count * sizeof *g_done_paths);
    for (int i = 0; i < count; i++) {
        size_t len = strlen(names[i]) + 32;
        g_tmp_paths[i] = xmalloc(len);
        snprintf(g_tmp_paths[i], len, "%s.tmp.%ld", names[i], (long)getpid());
    }

    for (int i = 0; i < count; i++) {
        /* Create it ourselves first: open(2)'s errno says why far better
         * than HDF5's error stack does. */
        int fd = open(g_tmp_paths[i], O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0)
            die(EXIT_WRITE, "%s: cannot create the output (as temporary file %s): %s",
                names[i], g_tmp_paths[i], strerror(errno));
        close(fd);
        g_tmp_live = i + 1;
        write_file(g_tmp_paths[i], names[i], d, i, count, sharded);
    }

    for (int i = 0; i < count; i++) {
        if (rename(g_tmp_paths[i], names[i]) != 0)
            die(EXIT_WRITE, "%s: cannot rename %s into place: %s",
                names[i], g_tmp_paths[i], strerror(errno));
        g_done_paths[g_done++] = names[i];
    }
    g_tmp_live = 0;
    g_done = 0; /* all in place: nothing to undo any more */
}

/* ---- Summary ------------------------------------------------------------------ */

static void print_split_line(const struct split *s, long seed)
{
    printf("  %-5s %zu samples of %ux%ux%u", s->name, s->n, s->height, s->width, s->channels);
    if (s->n < s->total)
        printf(" (first %zu of %zu)", s->n, s->total);
    if (s->synthetic)
        printf("  generated with seed %ld\n", seed);
    else
        printf("  from %s\n", s->images_path);
}

/* Synthetic data exist to measure I/O, so their summary says how fast they
 * were written (WRITE_S: creating, generating, writing and renaming). */
static void print_summary(const char *const *names, int count, int sharded, const struct dataset *d,
                          double seconds, double write_s)
{
    char rate[96] = "";

    if (d->train.synthetic) {
        double bytes = 0;
        for (int i = 0; i < count; i++) {
            struct stat st;
            if (stat(names[i], &st) == 0)
                bytes += (double)st.st_size;
        }
        snprintf(rate, sizeof rate, ": %.1f MB at %.0f MB/s", bytes / 1e6,
                 bytes / 1e6 / (write_s > 1e-9 ? write_s : 1e-9));
    }
    if (sharded) {
        printf(PROG ": wrote %d shards in %.2f s%s\n", count, seconds, rate);
        for (int i = 0; i < count; i++) {
            size_t first, tr, te = 0;
            shard_slice(d->train.n, count, i, &first, &tr);
            if (d->has_test)
                shard_slice(d->test.n, count, i, &first, &te);
            printf("  %s  train %zu  test %zu\n", names[i], tr, te);
        }
    } else {
        printf(PROG ": wrote %s in %.2f s%s\n", names[0], seconds, rate);
    }
    print_split_line(&d->train, d->seed);
    if (d->has_test)
        print_split_line(&d->test, d->seed);
    else
        printf("  test  none\n");
    printf("  classes %d", d->num_classes);
    for (int i = 0; d->class_names && i < d->num_classes; i++)
        printf("%s%s", i ? ", " : ": ", d->class_names[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    struct options o;
    struct dataset d;
    const char **names;
    int count;
    double t0 = now_s(), t_write;

    parse_args(argc, argv, &o);
    names = output_names(&o, &count);
    check_outputs(names, count, o.force);
    if (o.synthetic) {
        load_synthetic(&d, &o);
    } else {
        resolve_inputs(&o);
        load_dataset(&d, &o);
    }
    if (o.shards > 0 && (size_t)o.shards > d.train.n)
        die(EXIT_USAGE, "--shards %ld: more shards than the %zu training samples "
            "(each shard needs at least one)", o.shards, d.train.n);
    if (o.shards > 0 && d.has_test && (size_t)o.shards > d.test.n)
        die(EXIT_USAGE, "--shards %ld: more shards than the %zu test samples "
            "(each shard needs at least one)", o.shards, d.test.n);

    /* After a failed write HDF5's exit handler would flush the still-open
     * file again (and can crash doing so); die() has removed it already. */
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* h5_fail prints one clear line */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    /* Past a file-size limit, write(2) then fails with EFBIG and we clean up. */
    signal(SIGXFSZ, SIG_IGN);
    t_write = now_s();
    write_outputs(names, count, o.shards > 0, &d);

    if (!o.quiet)
        print_summary(names, count, o.shards > 0, &d, now_s() - t0, now_s() - t_write);
    return 0;
}
