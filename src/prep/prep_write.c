/* prep_write.c: dtrain-prep's output, one HDF5 file or K shards (or one
 * token dataset, --text), each written under OUTPUT.tmp.<pid> and renamed
 * into place only once all are complete (prep_common.c's register of
 * outputs, which removes the temporaries, and outputs already renamed, on
 * any failure or signal), so a finished-looking file is a complete one.
 *
 * The one thing to know: datasets are contiguous and uncompressed, written
 * a piece of at most CHUNK_BYTES at a time (whole samples, or bands of
 * image lines), so a synthetic file may be far larger than memory. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "prep/prep.h"

#define FORMAT_VERSION 1
#define CHUNK_BYTES ((size_t)64 << 20) /* most image bytes held per write */

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

/* An uninitialised dataset of TYPE and shape DIMS; write_rows fills it. */
static hid_t create_dataset(hid_t group, const char *out, const char *what, const char *name,
                            hid_t type, int rank, const hsize_t *dims)
{
    hid_t space, dcpl, dset;

    H5_TRY(space = H5Screate_simple(rank, dims, NULL), out, what);
    H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), out, what);
    /* Every byte is written, so skip HDF5's fill pass. */
    H5_TRY(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), out, what);
    /* No timestamps: the same input and options give the same bytes. */
    H5_TRY(H5Pset_obj_track_times(dcpl, 0), out, what);
    H5_TRY(dset = H5Dcreate2(group, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), out, what);
    H5Pclose(dcpl);
    H5Sclose(space);
    return dset;
}

/* DATA (shape COUNT, MEM_TYPE) into the block of DSET that starts at START;
 * HDF5 converts it to the dataset's type. */
static void write_rows(hid_t dset, const char *out, const char *what, int rank,
                       const hsize_t *start, const hsize_t *count, hid_t mem_type, const void *data)
{
    hid_t fspace, mspace;

    H5_TRY(fspace = H5Dget_space(dset), out, what);
    H5_TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), out, what);
    H5_TRY(mspace = H5Screate_simple(rank, count, NULL), out, what);
    H5_TRY(H5Dwrite(dset, mem_type, mspace, fspace, H5P_DEFAULT, data), out, what);
    H5Sclose(mspace);
    H5Sclose(fspace);
}

/* Group NAME of FILE, without timestamps (the same input gives the same bytes). */
static hid_t create_group(hid_t file, const char *out, const char *name)
{
    char what[64];
    hid_t gcpl, g;

    snprintf(what, sizeof what, "group /%s", name);
    H5_TRY(gcpl = H5Pcreate(H5P_GROUP_CREATE), out, what);
    H5_TRY(H5Pset_obj_track_times(gcpl, 0), out, what);
    H5_TRY(g = H5Gcreate2(file, name, H5P_DEFAULT, gcpl, H5P_DEFAULT), out, what);
    H5Pclose(gcpl);
    return g;
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
    hid_t g, images, labels;

    g = create_group(file, out, s->name);
    snprintf(iwhat, sizeof iwhat, "/%s/images", s->name);
    snprintf(lwhat, sizeof lwhat, "/%s/labels", s->name);
    images = create_dataset(g, out, iwhat, "images", H5T_STD_U8LE, 4, idims);
    labels = create_dataset(g, out, lwhat, "labels", H5T_STD_U8LE, 1, ldims);
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
            write_rows(images, out, iwhat, 4, istart, icount, H5T_NATIVE_UINT8, img);
        }
        if (s->synthetic) {
            for (size_t r = 0; r < k; r++)
                lbuf[r] = synth_label(s, first + i + r);
            lbl = lbuf;
        } else {
            lbl = s->labels.data + first + i;
        }
        lcount[0] = k;
        write_rows(labels, out, lwhat, 1, lstart, lcount, H5T_NATIVE_UINT8, lbl);
    }

    free(buf);
    free(lbuf);
    H5_TRY(H5Dclose(images), out, iwhat);
    H5_TRY(H5Dclose(labels), out, lwhat);
    H5_TRY(H5Gclose(g), out, lwhat);
}

/* Shard I of K gets a contiguous slice: the first TOTAL % K shards one more. */
void shard_slice(size_t total, int k, int i, size_t *first, size_t *n)
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

void write_outputs(const char **names, int count, int sharded, const struct dataset *d)
{
    outputs_begin(names, count);
    for (int i = 0; i < count; i++)
        write_file(output_create(names[i], i), names[i], d, i, count, sharded);
    outputs_commit(names, count);
}

/* ---- Token datasets (--text) ---------------------------------------------------- */

/* /NAME/tokens: the N tokens at TOK, as TYPE (uint16 or uint32), in pieces
 * of at most CHUNK_BYTES of the uint32 stream. */
static void write_tokens(hid_t file, const char *out, const char *name, hid_t type,
                         const uint32_t *tok, size_t n)
{
    const size_t piece = CHUNK_BYTES / sizeof *tok;
    hsize_t dims[1] = {n};
    char what[64];
    hid_t g = create_group(file, out, name), dset;

    snprintf(what, sizeof what, "/%s/tokens", name);
    dset = create_dataset(g, out, what, "tokens", type, 1, dims);
    for (size_t i = 0, k; i < n; i += k) {
        hsize_t start[1] = {i}, count[1];
        k = piece < n - i ? piece : n - i;
        count[0] = k;
        write_rows(dset, out, what, 1, start, count, H5T_NATIVE_UINT32, tok + i);
    }
    H5_TRY(H5Dclose(dset), out, what);
    H5_TRY(H5Gclose(g), out, what);
}

static void write_token_file(const char *tmp, const char *out, const struct token_data *t)
{
    const uint32_t vocab = DT_BPE_BYTES + t->bpe.n_merges;
    const char *kind = "tokens";
    hsize_t mdims[2] = {t->bpe.n_merges, 2}, start[2] = {0, 0};
    hid_t f, g, merges;

    H5_TRY(f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), out, "the file");
    /* uint16 while every token fits: half the bytes to read per sample. */
    write_tokens(f, out, "train", vocab <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE,
                 t->tokens, t->n_train);
    write_tokens(f, out, "test", vocab <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE,
                 t->tokens + t->n_train, t->n - t->n_train);
    g = create_group(f, out, "tokenizer");
    merges = create_dataset(g, out, "/tokenizer/merges", "merges", H5T_STD_I32LE, 2, mdims);
    if (t->bpe.n_merges > 0) /* byte: the dataset is there, with no rows */
        write_rows(merges, out, "/tokenizer/merges", 2, start, mdims, H5T_NATIVE_INT32,
                   t->bpe.merges);
    H5_TRY(H5Dclose(merges), out, "/tokenizer/merges");
    H5_TRY(H5Gclose(g), out, "/tokenizer/merges");

    attr_i32(f, out, "format_version", FORMAT_VERSION);
    attr_i32(f, out, "num_classes", (int32_t)vocab);
    attr_strings(f, out, "kind", &kind, 0);
    attr_strings(f, out, "tokenizer", &t->tokenizer, 0);
    attr_strings(f, out, "source", (const char *const *)&t->source, 0);
    H5_TRY(H5Fclose(f), out, "the file (closing)");
}

void write_token_output(const char *name, const struct token_data *t)
{
    outputs_begin(&name, 1);
    write_token_file(output_create(name, 0), name, t);
    outputs_commit(&name, 1);
}
