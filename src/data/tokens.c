/* tokens.c: validating and reading token datasets (see tokens.h).
 *
 * A window is one hyperslab of T + 1 consecutive tokens, read with HDF5's
 * conversion to int32 (uint16 and uint32 files alike); windows overlap by
 * one token, so rows cannot be read as a union of row blocks as images are. */
#include "config.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "data/tokens.h"
#include "runtime/checks.h"

static const char *split_name[2] = {"train", "test"};

#define TOKEN_BLOCK ((hsize_t)1 << 22) /* tokens checked this many at a time */
#define DT_BPE_MAX ((hsize_t)0x7fffffff - 256) /* merges an int32 vocabulary holds (prep/tokenizer.h) */

int dt_tokens_is(int64_t file)
{
    return H5Lexists(file, "train", H5P_DEFAULT) > 0 && H5Lexists(file, "/train/tokens", H5P_DEFAULT) > 0;
}

/* The split's stream: 1-D, unsigned integers of 16 or 32 bits, every token below vocab. */
static int check_stream(const char *path, hid_t file, int s, int vocab, int64_t *count, dt_status *st)
{
    char name[32];
    snprintf(name, sizeof name, "/%s/tokens", split_name[s]);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return dt_fail(st, DT_EINPUT, "%s: cannot open %s (a damaged file?)", path, name);
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    int rc = DT_OK, nd = H5Sget_simple_extent_ndims(sp);
    hsize_t n = 0;
    size_t bytes = H5Tget_size(t);
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE || (bytes != 2 && bytes != 4))
        rc = dt_fail(st, DT_EINPUT, "%s: %s holds %zu-byte %s; expected uint16 or uint32 tokens (dtrain-prep --text)",
                     path, name, bytes, H5Tget_class(t) == H5T_INTEGER ? "integers" : "values");
    else if (nd != 1)
        rc = dt_fail(st, DT_EINPUT, "%s: %s has %d dimensions; expected a 1-D token stream", path, name, nd);
    else if (bytes == 2 && vocab > 65536)
        rc = dt_fail(st, DT_EINPUT, "%s: num_classes = %d tokens do not fit %s's uint16 (at most 65536)", path, vocab,
                     name);
    if (rc == DT_OK) H5Sget_simple_extent_dims(sp, &n, NULL);
    uint32_t *buf = rc == DT_OK ? dt_xmalloc(sizeof(uint32_t) * TOKEN_BLOCK) : NULL;
    for (hsize_t at = 0; rc == DT_OK && at < n; at += TOKEN_BLOCK) {
        hsize_t k = n - at < TOKEN_BLOCK ? n - at : TOKEN_BLOCK;
        hid_t fs = H5Scopy(sp), ms = H5Screate_simple(1, &k, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &k, NULL);
        if (H5Dread(d, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, buf) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: cannot read %s[%llu..%llu]; the file is damaged", path, name,
                         (unsigned long long)at, (unsigned long long)(at + k - 1));
        for (hsize_t i = 0; rc == DT_OK && i < k; i++)
            if (buf[i] >= (uint32_t)vocab)
                rc = dt_fail(st, DT_EINPUT, "%s: %s[%llu] = %u, but num_classes (the vocabulary) is %d", path, name,
                             (unsigned long long)(at + i), buf[i], vocab);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    free(buf);
    H5Sclose(sp);
    H5Tclose(t);
    H5Dclose(d);
    *count = (int64_t)n;
    return rc;
}

int dt_tokens_validate(const char *path, int64_t file, int vocab, int64_t counts[2], dt_status *st)
{
    counts[1] = -1;
    if (vocab < 1)
        return dt_fail(st, DT_EINPUT, "%s: a token dataset needs its vocabulary size as the num_classes attribute "
                       "(dtrain-prep --text writes it)", path);
    if (check_stream(path, file, DT_TRAIN, vocab, &counts[0], st) != DT_OK) return st->code;
    if (H5Lexists(file, "test", H5P_DEFAULT) > 0) {
        if (H5Lexists(file, "/test/tokens", H5P_DEFAULT) <= 0)
            return dt_fail(st, DT_EINPUT, "%s: /test has no tokens (expected /test/tokens beside /train/tokens)", path);
        if (check_stream(path, file, DT_TEST, vocab, &counts[1], st) != DT_OK) return st->code;
    }
    return DT_OK;
}

int dt_tokens_tokenizer(const char *path, int64_t file, int vocab, char name[16], int32_t **merges, uint32_t *n,
                        dt_status *st)
{
    hsize_t dims[2] = {0, 2};
    int rc = DT_OK;
    *merges = NULL;
    *n = 0;
    if (H5Lexists(file, "tokenizer", H5P_DEFAULT) > 0 && H5Lexists(file, "/tokenizer/merges", H5P_DEFAULT) > 0) {
        hid_t d = H5Dopen2(file, "/tokenizer/merges", H5P_DEFAULT), t = H5Dget_type(d), sp = H5Dget_space(d);
        int nd = H5Sget_simple_extent_ndims(sp);
        if (nd == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
        if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 4 || nd != 2 || dims[1] != 2 || dims[0] > DT_BPE_MAX)
            rc = dt_fail(st, DT_EINPUT, "%s: /tokenizer/merges is not int32 [N][2] (pairs of tokens, dtrain-prep --text)",
                         path);
        if (rc == DT_OK) {
            *merges = dt_xmalloc(sizeof(int32_t) * 2 * (size_t)dims[0] + 1);
            if (dims[0] && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, *merges) < 0)
                rc = dt_fail(st, DT_EINPUT, "%s: cannot read /tokenizer/merges; the file is damaged", path);
        }
        for (hsize_t i = 0; rc == DT_OK && i < 2 * dims[0]; i++)
            if ((*merges)[i] < 0 || (hsize_t)(*merges)[i] >= 256 + i / 2)
                rc = dt_fail(st, DT_EINPUT, "%s: /tokenizer/merges[%llu] = (%d, %d) names a token that does not exist "
                             "before merge %llu (token %llu)", path, (unsigned long long)(i / 2), (*merges)[i & ~1ULL],
                             (*merges)[i | 1], (unsigned long long)(i / 2), (unsigned long long)(256 + i / 2));
        H5Sclose(sp);
        H5Tclose(t);
        H5Dclose(d);
    }
    *n = (uint32_t)dims[0];
    snprintf(name, 16, "%s", *n ? "bpe" : "byte");
    const int declared = rc == DT_OK && H5Aexists(file, "tokenizer") > 0; /* files made otherwise may have none */
    if (declared) {
        hid_t a = H5Aopen(file, "tokenizer", H5P_DEFAULT), t = H5Aget_type(a);
        char buf[64] = "";
        if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) > 0 || H5Tget_size(t) >= sizeof buf ||
            H5Aread(a, t, buf) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: root attribute tokenizer is not a short fixed-length string (\"byte\" or "
                         "\"bpe\", as dtrain-prep --text writes it)", path);
        else if (strcmp(buf, "byte") && strcmp(buf, "bpe"))
            rc = dt_fail(st, DT_EINPUT, "%s: root attribute tokenizer = \"%s\"; expected byte or bpe", path, buf);
        else
            snprintf(name, 16, "%s", buf);
        H5Tclose(t);
        H5Aclose(a);
    }
    if (rc == DT_OK && !strcmp(name, "bpe") && (uint64_t)vocab != 256 + (uint64_t)*n)
        rc = dt_fail(st, DT_EINPUT, "%s: a bpe tokenizer of %u merges makes %llu tokens, but num_classes is %d", path,
                     *n, (unsigned long long)(256 + (uint64_t)*n), vocab);
    if (rc == DT_OK && declared && !strcmp(name, "byte") && (*n || vocab > 256))
        rc = dt_fail(st, DT_EINPUT, "%s: the byte tokenizer has 256 tokens and no merges, but the file has %u merges "
                     "and num_classes %d", path, *n, vocab);
    if (rc != DT_OK) {
        free(*merges);
        *merges = NULL;
        *n = 0;
    }
    return rc;
}

int dt_tokens_read(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *rows, uint8_t *labels,
                   dt_status *st)
{
    const struct dt_split *sp = &ds->split[split];
    const hsize_t T = (hsize_t)ds->block, k = T + 1;
    hid_t ms = H5Screate_simple(1, &k, NULL);
    int rc = DT_OK;
    for (int i = 0; i < n && rc == DT_OK; i++) {
        int64_t r;
        int f = dt_shard_locate(sp->file_start, ds->nfiles, idx[i], &r);
        hid_t d = sp->images[f], fs = H5Dget_space(d);
        hsize_t start = (hsize_t)r * T;
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &k, NULL);
        if (H5Dread(d, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, rows + (size_t)i * k * sizeof(int32_t)) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: cannot read /%s/tokens[%llu..%llu]; the file is damaged", ds->paths[f],
                         split_name[split], (unsigned long long)start, (unsigned long long)(start + T));
        H5Sclose(fs);
        labels[i] = 0;
    }
    H5Sclose(ms);
    return rc;
}
