/* prep.c: dtrain-prep, which converts IDX image/label files (MNIST,
 * Fashion-MNIST) into the HDF5 layout dtrain reads, or with --synthetic
 * writes generated data of any shape and size in that layout:
 *
 *   /train/images  uint8 [N, H, W, C]    /train/labels  uint8 [N]
 *   /test/images   uint8 [M, H, W, C]    /test/labels   uint8 [M]
 *   root attributes: format_version, num_classes, source, [class_names],
 *   and in shard files shard_index, shard_count, {train,test}_{offset,total}.
 *
 * or with --text tokenizes text files into a token dataset (prep_text.c):
 *
 *   /train/tokens  uint16 or uint32 [N]  /test/tokens  the same [M]
 *   /tokenizer/merges  int32 [merges, 2]
 *   root attributes: format_version, num_classes (the vocabulary size),
 *   kind = "tokens", tokenizer = "byte" or "bpe", source.
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
 *
 * This file holds main and the command line; prep.h lists the other pieces.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
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

#include "prep/prep.h"

#define DEFAULT_SOURCE "/usr/share/datasets/fashion-mnist"
#define DEFAULT_SEED 42                /* as dtrain's --seed */

/* ---- Command line ------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " [OPTIONS] OUTPUT.h5\n"
"       " PROG " --synthetic HxWxC:CLASSES:NTRAIN[:NTEST] [OPTIONS] OUTPUT.h5\n"
"       " PROG " --text FILE [FILE...] --tokenizer byte|bpe:N [OPTIONS] OUTPUT.h5\n"
"Convert IDX image/label files (MNIST format, plain or .gz) into the HDF5\n"
"layout dtrain reads: /train/images uint8 [N,H,W,1], /train/labels uint8 [N],\n"
"/test/images, /test/labels, and root attributes num_classes, source,\n"
"class_names, format_version. Or write generated data in that layout. Or\n"
"tokenize UTF-8 text into a token dataset: /train/tokens, /test/tokens\n"
"(uint16; uint32 for a vocabulary over 65536), /tokenizer/merges int32\n"
"[N,2], root attributes num_classes (the vocabulary, 256 + N), kind, tokenizer.\n"
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
"  --classes N            number of classes, stored as num_classes (default:\n"
"                         largest label + 1, refused when more than\n"
"                         max(2, 10%%) of those classes have no sample);\n"
"                         every label must be below N\n"
"  --num-classes N        the same as --classes N (dtrain's name for it)\n"
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
"Text (a token dataset, instead of IDX input):\n"
"  --text FILE [FILE...]  UTF-8 text files, tokenized and concatenated in the\n"
"                         order given (more files: further operands before\n"
"                         OUTPUT.h5, or --text repeated)\n"
"  --tokenizer byte       tokens are the bytes (vocabulary 256)\n"
"  --tokenizer bpe:N      byte-level BPE (GPT-2's chunking): N merges learned\n"
"                         from the text, vocabulary 256 + N; refused when the\n"
"                         text allows fewer\n"
"  --val-fraction F       the last F of the token stream is /test/tokens\n"
"                         (0 < F < 1, default 0.1)\n"
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
    OPT_CLASS_NAMES, OPT_SHARDS, OPT_SYNTHETIC, OPT_SEED, OPT_TEXT, OPT_TOKENIZER,
    OPT_VAL_FRACTION,
};

/* A fraction strictly between 0 and 1 for FLAG, or a usage error naming it. */
static double parse_fraction(const char *flag, const char *arg)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno == ERANGE || !(v > 0 && v < 1))
        die(EXIT_USAGE, "%s: expected a number between 0 and 1 (both excluded), found '%s'",
            flag, arg);
    return v;
}

/* --text: a token dataset, which none of the image options apply to. */
static void check_text_inputs(struct options *o)
{
    const char *other = o->source ? "--source" : o->train_images ? "--train-images" :
        o->train_labels ? "--train-labels" : o->test_images ? "--test-images" :
        o->test_labels ? "--test-labels" : o->synthetic ? "--synthetic" :
        o->limit_train ? "--limit-train" : o->limit_test ? "--limit-test" :
        o->classes ? "--classes" : o->class_names ? "--class-names" :
        o->shards ? "--shards" : o->seed_set ? "--seed" : NULL;

    if (other)
        die(EXIT_USAGE, "--text cannot be combined with %s: a token dataset has no images, "
            "labels, classes or shards", other);
    if (o->tokenizer == NULL)
        die(EXIT_USAGE, "--text needs --tokenizer byte or --tokenizer bpe:N");
    if (!o->val_fraction_set)
        o->val_fraction = 0.1;
}

/* The input flags together: --synthetic or IDX files, never both, and the
 * IDX files in pairs (or the default --source). */
static void check_inputs(struct options *o)
{
    if (o->n_text > 0) {
        check_text_inputs(o);
        return;
    }
    if (o->tokenizer || o->val_fraction_set)
        die(EXIT_USAGE, "%s is only used with --text", o->tokenizer ? "--tokenizer" : "--val-fraction");
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

/* OUTPUT.h5, the last operand; with --text, the operands before it are
 * further text files (after the first --text, so not with --text repeated,
 * where the order would be unclear). */
static void take_operands(int argc, char **argv, struct options *o, int text_flags)
{
    if (optind == argc)
        die(EXIT_USAGE, "missing the OUTPUT.h5 operand");
    if (argc - optind > 1 && o->n_text == 0)
        die(EXIT_USAGE, "expected one OUTPUT.h5 operand, found %d (first extra: '%s')",
            argc - optind, argv[optind + 1]);
    if (argc - optind > 1 && text_flags > 1)
        die(EXIT_USAGE, "text file '%s' is an operand, but --text is given %d times: list the "
            "files as --text A B ... OUTPUT.h5 or as --text A --text B ... OUTPUT.h5",
            argv[optind], text_flags);
    for (int i = optind; i < argc - 1; i++)
        o->text[o->n_text++] = argv[i];
    o->output = argv[argc - 1];
    if (o->output[0] == '\0')
        die(EXIT_USAGE, "OUTPUT.h5 operand is empty");
}

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
        {"num-classes",  required_argument, NULL, OPT_CLASSES}, /* dtrain's name for it */
        {"class-names",  required_argument, NULL, OPT_CLASS_NAMES},
        {"shards",       required_argument, NULL, OPT_SHARDS},
        {"synthetic",    required_argument, NULL, OPT_SYNTHETIC},
        {"seed",         required_argument, NULL, OPT_SEED},
        {"text",         required_argument, NULL, OPT_TEXT},
        {"tokenizer",    required_argument, NULL, OPT_TOKENIZER},
        {"val-fraction", required_argument, NULL, OPT_VAL_FRACTION},
        {"force",        no_argument,       NULL, 'f'},
        {"quiet",        no_argument,       NULL, 'q'},
        {"help",         no_argument,       NULL, 'h'},
        {"version",      no_argument,       NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c, li = -1, text_flags = 0;

    memset(o, 0, sizeof *o);
    o->text = xmalloc((size_t)argc * sizeof *o->text);
    opterr = 0; /* we print our own messages */
    while ((c = getopt_long(argc, argv, ":fqhV", longopts, &li)) != -1) {
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
            o->classes = parse_count(strcmp(longopts[li].name, "classes") ? "--num-classes" : "--classes",
                                     optarg, 1, MAX_CLASSES);
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
        case OPT_TEXT:
            o->text[o->n_text++] = optarg;
            text_flags++;
            break;
        case OPT_TOKENIZER:    parse_tokenizer(o, optarg); break;
        case OPT_VAL_FRACTION:
            o->val_fraction = parse_fraction("--val-fraction", optarg);
            o->val_fraction_set = 1;
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

    take_operands(argc, argv, o, text_flags);
    check_inputs(o);
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

static void print_text_summary(const char *name, const struct options *o,
                               const struct token_data *t, double seconds)
{
    const uint32_t vocab = DT_BPE_BYTES + t->bpe.n_merges;

    printf(PROG ": wrote %s in %.2f s\n", name, seconds);
    printf("  text  %d file%s, %zu bytes, read and checked in %.2f s\n", o->n_text,
           o->n_text == 1 ? "" : "s", t->bytes, t->read_s);
    if (t->bpe.n_merges > 0)
        printf("  tokenizer bpe: %u merges, vocabulary %u, learned in %.2f s\n",
               t->bpe.n_merges, vocab, t->train_s);
    else
        printf("  tokenizer byte: vocabulary 256\n");
    printf("  tokens %zu (%.2f bytes each), encoded in %.2f s, stored as %s\n", t->n,
           (double)t->bytes / (double)t->n, t->encode_s, vocab <= 65536 ? "uint16" : "uint32");
    printf("  train %zu tokens\n", t->n_train);
    printf("  test  %zu tokens (--val-fraction %g)\n", t->n - t->n_train, o->val_fraction);
}

int main(int argc, char **argv)
{
    struct options o;
    struct dataset d;
    struct token_data td;
    const char **names;
    int count;
    double t0 = now_s(), t_write;

    parse_args(argc, argv, &o);
    names = output_names(&o, &count);
    check_outputs(names, count, o.force);
    if (o.n_text > 0) {
        load_text(&td, &o);
    } else {
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
    }

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
    if (o.n_text > 0) {
        write_token_output(names[0], &td);
        if (!o.quiet)
            print_text_summary(names[0], &o, &td, now_s() - t0);
        free_text(&td);
        free(names);
        free(o.text);
        return 0;
    }
    write_outputs(names, count, o.shards > 0, &d);

    if (!o.quiet)
        print_summary(names, count, o.shards > 0, &d, now_s() - t0, now_s() - t_write);
    for (int i = 0; o.shards > 0 && i < count; i++) free((char *)names[i]); /* one file: names[0] is argv's */
    free(names);
    free_dataset(&d, &o);
    free(o.text);
    return 0;
}
