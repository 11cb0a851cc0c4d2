/* prep_input.c: dtrain-prep's data: IDX image and label files read whole
 * and checked against each other (shapes, label range, class names), or
 * the rows of --synthetic, generated on demand while they are written.
 *
 * The one thing to know: synthetic row i is the same function of (i, seed)
 * as in dtrain's --synthetic (data/synthetic.c), byte for byte, so a file
 * written here trains exactly as the generated data do. */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/classes.h"
#include "prep/prep.h"
#include "runtime/rng.h"

static const char *const fashion_names[] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
};
#define FASHION_NCLASSES (int)(sizeof fashion_names / sizeof fashion_names[0])

static char *xasprintf_path(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = xmalloc(n);

    snprintf(s, n, "%s/%s", a, b);
    return s;
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

void resolve_inputs(struct options *o)
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

/* The first label >= LIMIT in the whole file, or -1 (SIZE_MAX: none). */
static size_t first_out_of_range(const struct split *s, int limit)
{
    for (size_t i = 0; i < s->labels.count; i++)
        if (s->labels.data[i] >= limit)
            return i;
    return SIZE_MAX;
}

/* --classes, else the largest label + 1 under dtrain's rule (data/classes.h).
 * Labels are counted in the whole files (not just the kept part), so
 * --limit-* never changes num_classes. */
static void set_classes(struct dataset *d, const struct options *o)
{
    const struct split *splits[2] = {&d->train, &d->test}, *max_in = NULL;
    int limit = o->classes > 0 ? (int)o->classes : MAX_CLASSES;
    struct dt_labels seen;
    size_t max_at = 0;
    char gap[256];

    dt_labels_init(&seen);
    for (int k = 0; k < 1 + d->has_test; k++) {
        size_t bad = first_out_of_range(splits[k], limit);
        if (bad != SIZE_MAX)
            die(EXIT_DATA, "%s: label %d at index %zu is out of range for --classes %d "
                "(expected 0..%d)", splits[k]->labels_path, splits[k]->labels.data[bad],
                bad, limit, limit - 1);
        long at = dt_labels_add(&seen, splits[k]->labels.data, splits[k]->labels.count);
        if (at >= 0) {
            max_in = splits[k];
            max_at = (size_t)at;
        }
    }
    if (o->classes > 0) {
        d->num_classes = (int)o->classes;
        return;
    }
    if (dt_labels_gap(&seen)) {
        dt_labels_describe_gap(&seen, gap, sizeof gap);
        die(EXIT_DATA, "%s: label %d at index %zu, and no --classes: %s; state the count with "
            "--classes N (also spelled --num-classes N), which is stored as num_classes",
            max_in->labels_path, seen.max, max_at, gap);
    }
    d->num_classes = seen.max + 1;
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
    d->class_names_text = copy;
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

void load_dataset(struct dataset *d, const struct options *o)
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

void free_dataset(struct dataset *d, struct options *o)
{
    struct split *sp[2] = {&d->train, &d->test};
    for (int i = 0; i < 2; i++) {
        idx_free(&sp[i]->images);
        idx_free(&sp[i]->labels);
    }
    free(d->class_names);
    free(d->class_names_text);
    free(d->source);
    if (o->source) { /* resolve_inputs found them */
        free((char *)o->train_images);
        free((char *)o->train_labels);
        free((char *)o->test_images);
        free((char *)o->test_labels);
    }
    memset(d, 0, sizeof *d);
}

/* ---- Synthetic data ------------------------------------------------------ */

uint64_t synth_row_base(const struct split *s, uint64_t row)
{
    return dt_mix64(s->synth_seed ^ (s->synth_first + row) * 0xd1342543de82ef95ULL);
}

/* Bytes [b0, b1) of the image whose stream starts at BASE: byte b is byte
 * b % 8, little-endian, of dt_mix64(BASE + b - b % 8), which is what dtrain's
 * memcpy gives on little-endian hosts. Whole words take the fast path. */
void synth_bytes(uint8_t *out, uint64_t base, size_t b0, size_t b1)
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

uint8_t synth_label(const struct split *s, uint64_t row)
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

void load_synthetic(struct dataset *d, const struct options *o)
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

