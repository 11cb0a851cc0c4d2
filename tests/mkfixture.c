/* mkfixture.c: write small HDF5 files for dtrain's input tests.
 *
 *   mkfixture KIND OUT.h5 [N]   (N training samples, default 64; the test
 *                                split has ceil(N/4))
 *
 * `good` is a valid dtrain dataset (the layout dtrain-prep writes); every
 * other kind is that same file with exactly one defect, so a test that feeds
 * it to dtrain knows which error message to expect. The table of kinds below
 * is the whole specification; `mkfixture --help` prints it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#define DEFAULT_N 64
#define MAX_N 1000000
#define NUM_CLASSES 10
#define BAD_LABEL_INDEX 5
#define H 28
#define W 28

enum {
    NO_TRAIN_IMAGES = 1 << 0, /* only /train/labels, no test split */
    LABELS_SHORT    = 1 << 1, /* /train/labels has N-1 entries */
    BAD_LABEL       = 1 << 2, /* train label BAD_LABEL_INDEX == NUM_CLASSES */
    RANK2_IMAGES    = 1 << 3, /* /train/images is [N, H*W] */
    FLOAT_IMAGES    = 1 << 4, /* /train/images is float32 in [0, 1] */
    NO_NUM_CLASSES  = 1 << 5, /* root attribute num_classes missing */
    SMALL_IMAGES    = 1 << 7, /* 8x8 images (valid data, too small for the CNN) */
    NOT_HDF5        = 1 << 6, /* a plain text file */
};

struct kind {
    const char *name;
    unsigned defect;
    long min_n; /* the defect needs this many samples to exist */
    const char *what;
};

static const struct kind kinds[] = {
    {"good",            0,               1, "valid: train [N,28,28,1] uint8, test ceil(N/4), labels 0..9, num_classes 10"},
    {"no-train-images", NO_TRAIN_IMAGES, 1, "/train/labels only (no /train/images, no test split)"},
    {"length-mismatch", LABELS_SHORT,    2, "/train/images has N samples, /train/labels N-1"},
    {"bad-label",       BAD_LABEL,       BAD_LABEL_INDEX + 1, "train label at index 5 is 10 while num_classes is 10"},
    {"wrong-rank",      RANK2_IMAGES,    1, "/train/images is 2-D [N,784]"},
    {"float-images",    FLOAT_IMAGES,    1, "/train/images is float32 [N,28,28,1] in [0,1]"},
    {"no-num-classes",  NO_NUM_CLASSES,  1, "root attribute num_classes is missing"},
    {"small-images",    SMALL_IMAGES,    1, "8x8 images in both splits: valid, but too small for the CNN"},
    {"not-hdf5",        NOT_HDF5,        1, "a plain text file, not HDF5"},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

/* Any HDF5 failure is a bug in this helper or a full disk: say where. */
#define H5CHK(expr) \
    do { if ((expr) < 0) { \
        fprintf(stderr, "mkfixture: HDF5 call failed at %s:%d: %s\n", __FILE__, __LINE__, #expr); \
        exit(1); } } while (0)

static uint32_t g_rng = 0x9E3779B9u;

static uint32_t xorshift32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 17;
    g_rng ^= g_rng << 5;
    return g_rng;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: mkfixture KIND OUT.h5 [N]   (N training samples, up to %d, default %d)\nKINDs:\n",
            MAX_N, DEFAULT_N);
    for (size_t i = 0; i < NKINDS; i++)
        fprintf(out, "  %-16s %s\n", kinds[i].name, kinds[i].what);
}

static void write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                          int rank, const hsize_t *dims, const void *data)
{
    hid_t space, dset;

    H5CHK(space = H5Screate_simple(rank, dims, NULL));
    H5CHK(dset = H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5CHK(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5CHK(H5Dclose(dset));
    H5CHK(H5Sclose(space));
}

static void write_attr_i32(hid_t loc, const char *name, int32_t v)
{
    hid_t space, attr;

    H5CHK(space = H5Screate(H5S_SCALAR));
    H5CHK(attr = H5Acreate2(loc, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT));
    H5CHK(H5Awrite(attr, H5T_NATIVE_INT32, &v));
    H5CHK(H5Aclose(attr));
    H5CHK(H5Sclose(space));
}

static void write_attr_str(hid_t loc, const char *name, const char *s)
{
    hid_t type, space, attr;

    H5CHK(type = H5Tcopy(H5T_C_S1));
    H5CHK(H5Tset_size(type, strlen(s) + 1));
    H5CHK(space = H5Screate(H5S_SCALAR));
    H5CHK(attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
    H5CHK(H5Awrite(attr, type, s));
    H5CHK(H5Aclose(attr));
    H5CHK(H5Sclose(space));
    H5CHK(H5Tclose(type));
}

/* /NAME/images and /NAME/labels with N samples, bent by DEFECT (train only). */
static void write_split(hid_t file, const char *name, size_t n, unsigned defect)
{
    const size_t pixels = (size_t)H * W;
    uint8_t *images = malloc(n * pixels), *labels = malloc(n);
    hid_t g;

    if (images == NULL || labels == NULL) {
        fprintf(stderr, "mkfixture: out of memory for %zu samples\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n * pixels; i++)
        images[i] = (uint8_t)(xorshift32() >> 24);
    for (size_t i = 0; i < n; i++)
        labels[i] = (uint8_t)(xorshift32() % NUM_CLASSES);
    if (defect & BAD_LABEL)
        labels[BAD_LABEL_INDEX] = NUM_CLASSES;

    H5CHK(g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (defect & RANK2_IMAGES) {
        hsize_t dims[2] = {n, pixels};
        write_dataset(g, "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 2, dims, images);
    } else if (defect & FLOAT_IMAGES) {
        hsize_t dims[4] = {n, H, W, 1};
        float *f = malloc(n * pixels * sizeof *f);
        if (f == NULL) {
            fprintf(stderr, "mkfixture: out of memory for %zu samples\n", n);
            exit(1);
        }
        for (size_t i = 0; i < n * pixels; i++)
            f[i] = (float)images[i] / 255.0f;
        write_dataset(g, "images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dims, f);
        free(f);
    } else if (defect & SMALL_IMAGES) {
        hsize_t dims[4] = {n, 8, 8, 1}; /* the first 64 pixels of each image's buffer */
        write_dataset(g, "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims, images);
    } else if (!(defect & NO_TRAIN_IMAGES)) {
        hsize_t dims[4] = {n, H, W, 1};
        write_dataset(g, "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims, images);
    }
    {
        hsize_t dims[1] = {(defect & LABELS_SHORT) ? n - 1 : n};
        write_dataset(g, "labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, dims, labels);
    }
    H5CHK(H5Gclose(g));
    free(images);
    free(labels);
}

static int write_text(const char *path)
{
    FILE *f = fopen(path, "w");
    int bad;

    if (f == NULL) {
        fprintf(stderr, "mkfixture: %s: cannot create: %s\n", path, strerror(errno));
        return 1;
    }
    bad = fputs("this is not an HDF5 file\n", f) == EOF;
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "mkfixture: %s: cannot write: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const struct kind *k = NULL;
    char source[128];
    long n = DEFAULT_N;
    hid_t file;

    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 3 || argc > 4) {
        usage(stderr);
        return 2;
    }
    for (size_t i = 0; i < NKINDS; i++)
        if (strcmp(argv[1], kinds[i].name) == 0)
            k = &kinds[i];
    if (k == NULL) {
        fprintf(stderr, "mkfixture: unknown KIND '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (argc == 4) {
        char *end;
        errno = 0;
        n = strtol(argv[3], &end, 10);
        if (end == argv[3] || *end != '\0' || errno != 0 || n < k->min_n || n > MAX_N) {
            fprintf(stderr, "mkfixture: N: expected a whole number from %ld to %d for %s, found '%s'\n",
                    k->min_n, MAX_N, k->name, argv[3]);
            return 2;
        }
    }
    if (k->defect & NOT_HDF5)
        return write_text(argv[2]);

    H5CHK(file = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    write_split(file, "train", (size_t)n, k->defect);
    if (!(k->defect & NO_TRAIN_IMAGES))
        write_split(file, "test", ((size_t)n + 3) / 4, k->defect & SMALL_IMAGES);
    write_attr_i32(file, "format_version", 1);
    if (!(k->defect & NO_NUM_CLASSES))
        write_attr_i32(file, "num_classes", NUM_CLASSES);
    snprintf(source, sizeof source, "mkfixture %s %ld", k->name, n);
    write_attr_str(file, "source", source);
    H5CHK(H5Fclose(file));
    return 0;
}
