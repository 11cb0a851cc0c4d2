/* dataset.c: validating and reading HDF5 datasets (see dataset.h).
 *
 * Reads are independent per rank: each step a rank selects its (sorted)
 * rows as a union of hyperslabs, one run of consecutive rows per block, and
 * HDF5 reads just those bytes. */
#include "config.h"

#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "runtime/h5lock.h"
#include "data/classes.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "data/tokens.h"

/* dataset_rows.h holds the HDF5 ids as int64_t so that it needs no hdf5.h. */
_Static_assert(_Generic((hid_t)0, int64_t: 1, default: 0), "hid_t is int64_t (HDF5 >= 1.10)");

static const char *split_name[2] = {"train", "test"};

/* ---- validation (rank 0) ------------------------------------------------ */

/* One image at most this many bytes: a file that declares larger ones is
 * refused before any buffer is sized from it. */
#define MAX_IMAGE_BYTES (1u << 28)
#define LABEL_BLOCK (1u << 24) /* labels checked this many at a time */

struct meta {            /* what rank 0 learns and broadcasts */
    int h, w, c, classes;
    int has_test;
    int tokens;          /* token datasets (data/tokens.h): counts are tokens, not samples */
};

static void format_dims(const hsize_t *d, int nd, char *buf, size_t len)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, len - k, "[");
    for (int i = 0; i < nd && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static int is_uint8(hid_t dset)
{
    hid_t t = H5Dget_type(dset);
    int ok = H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE;
    H5Tclose(t);
    return ok;
}

static void describe_class(hid_t t, char *buf, size_t len)
{
    H5T_class_t cls = H5Tget_class(t);
    size_t bits = H5Tget_size(t) * 8;
    if (cls == H5T_FLOAT) snprintf(buf, len, "float%zu", bits);
    else if (cls == H5T_INTEGER) snprintf(buf, len, "%s%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int", bits);
    else snprintf(buf, len, "%s", cls == H5T_STRING ? "strings" : cls == H5T_COMPOUND ? "compound values"
                  : cls == H5T_ENUM ? "enum values" : cls == H5T_ARRAY ? "arrays" : "non-numeric values");
}

static void describe_type(hid_t dset, char *buf, size_t len)
{
    hid_t t = H5Dget_type(dset);
    describe_class(t, buf, len);
    H5Tclose(t);
}

/* dims holds H5S_MAX_RANK values: HDF5 allows up to 32 dimensions. */
static int dims_of(hid_t dset, hsize_t *dims)
{
    hid_t sp = H5Dget_space(dset);
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd > 0 && nd <= H5S_MAX_RANK) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    return nd;
}

/* What the failed HDF5 call said, innermost first (e.g. "truncated file:
 * eof = 52480, ..."); call it right after the failure. */
static herr_t why_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    char *w = data;
    (void)n;
    if (!w[0] && e->desc && e->desc[0]) snprintf(w, 160, "%s", e->desc);
    return 0;
}

static const char *h5_why(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, why_walk, buf);
    if (!buf[0]) snprintf(buf, 160, "HDF5 error");
    return buf;
}

/* A dataset that declares more rows than it stores (a sparse chunked
 * dataset, an unfinished write) is refused: its dims cannot be trusted to
 * size anything. */
static int check_stored(const char *path, const char *name, hid_t dset, const hsize_t *dims, int nd, dt_status *st)
{
    H5D_space_status_t s = H5D_SPACE_STATUS_ERROR;
    hsize_t chunk[H5S_MAX_RANK], want = 1, have = 0;
    for (int d = 0; d < nd; d++)
        if (dims[d] == 0) return DT_OK;
    hid_t dcpl = H5Dget_create_plist(dset);
    int chunked = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, nd, chunk) == nd;
    if (dcpl >= 0) H5Pclose(dcpl);
    int ok;
    if (chunked) { /* compressed chunks are smaller than their rows: count them instead of bytes */
        for (int d = 0; d < nd; d++) want *= (dims[d] + chunk[d] - 1) / chunk[d];
        hid_t sp = H5Dget_space(dset);
        ok = sp >= 0 && H5Dget_num_chunks(dset, sp, &have) >= 0 && have == want;
        if (sp >= 0) H5Sclose(sp);
    } else {
        ok = H5Dget_space_status(dset, &s) >= 0 && s == H5D_SPACE_STATUS_ALLOCATED;
        have = s == H5D_SPACE_STATUS_PART_ALLOCATED;
    }
    if (!ok) {
        char a[128];
        format_dims(dims, nd, a, sizeof a);
        return dt_fail(st, DT_EINPUT, "%s: %s declares %s but %s of its data is stored (a sparse or unfinished "
                       "dataset; expected every row written, as dtrain-prep writes)", path, name, a,
                       have ? "only part" : "none");
    }
    return DT_OK;
}

static int has_path(hid_t file, const char *group, const char *name)
{
    char full[64];
    snprintf(full, sizeof full, "/%s/%s", group, name);
    return H5Lexists(file, group, H5P_DEFAULT) > 0 && H5Lexists(file, full, H5P_DEFAULT) > 0;
}

/* What the labels are checked against, and what they were found to be. */
struct labels_seen {
    int limit;              /* every label must be below it; 0: the count is inferred */
    const char *limit_by;   /* "num_classes" (the files' attribute) or "--num-classes" */
    struct dt_labels l;     /* the values seen over all files and splits (data/classes.h) */
    const char *max_path;   /* where the largest label first occurs: file, */
    int max_split;          /* split */
    unsigned long long max_row; /* and row */
};

/* Rank 0 reads every label (1 byte a sample), a block at a time: each must
 * be below the declared count, and all go into the table of values seen. */
static int check_labels(const char *path, int s, hid_t lbl, hsize_t count, struct labels_seen *ls, dt_status *st)
{
    hsize_t blk = count < LABEL_BLOCK ? count : LABEL_BLOCK;
    uint8_t *lab = dt_xmalloc((size_t)blk);
    hid_t fsp = H5Dget_space(lbl), msp = H5Screate_simple(1, &blk, NULL);
    char why[160];
    int rc = DT_OK;
    for (hsize_t at = 0; at < count && rc == DT_OK; at += blk) {
        hsize_t n = count - at < blk ? count - at : blk, zero = 0;
        H5Sselect_hyperslab(fsp, H5S_SELECT_SET, &at, NULL, &n, NULL);
        H5Sselect_hyperslab(msp, H5S_SELECT_SET, &zero, NULL, &n, NULL);
        if (H5Dread(lbl, H5T_NATIVE_UINT8, msp, fsp, H5P_DEFAULT, lab) < 0) {
            rc = dt_fail(st, DT_EINPUT, "%s: cannot read /%s/labels[%llu..%llu] (%s); the file is damaged", path,
                         split_name[s], (unsigned long long)at, (unsigned long long)(at + n - 1), h5_why(why));
            break;
        }
        for (hsize_t i = 0; ls->limit > 0 && i < n; i++)
            if (lab[i] >= ls->limit) {
                rc = dt_fail(st, DT_EINPUT, "%s: /%s/labels[%llu] = %d, but %s is %d (labels must be 0..%d)", path,
                             split_name[s], (unsigned long long)(at + i), lab[i], ls->limit_by, ls->limit,
                             ls->limit - 1);
                break;
            }
        long first_max = dt_labels_add(&ls->l, lab, (size_t)n);
        if (first_max >= 0) {
            ls->max_path = path;
            ls->max_split = s;
            ls->max_row = (unsigned long long)(at + (hsize_t)first_max);
        }
    }
    H5Sclose(msp);
    H5Sclose(fsp);
    free(lab);
    return rc;
}

/* Check one split of one file; fill n and merge its shape into m. */
static int check_split(const char *path, hid_t file, int s, struct meta *m, int *shape_set,
                       struct labels_seen *ls, int64_t *n_out, dt_status *st)
{
    char ipath[32], lpath[32], a[128], b[128];
    hsize_t id[H5S_MAX_RANK], ld[H5S_MAX_RANK];
    int rc = DT_OK;
    snprintf(ipath, sizeof ipath, "/%s/images", split_name[s]);
    snprintf(lpath, sizeof lpath, "/%s/labels", split_name[s]);
    if (!has_path(file, split_name[s], "images"))
        return dt_fail(st, DT_EINPUT, "%s: no dataset %s (expected uint8 images [N,H,W,C], as dtrain-prep writes)", path, ipath);
    if (!has_path(file, split_name[s], "labels"))
        return dt_fail(st, DT_EINPUT, "%s: no dataset %s (expected uint8 labels [N])", path, lpath);
    hid_t img = H5Dopen2(file, ipath, H5P_DEFAULT), lbl = H5Dopen2(file, lpath, H5P_DEFAULT);
    if (img < 0 || lbl < 0) {
        rc = dt_fail(st, DT_EINPUT, "%s: cannot open %s as a dataset (expected uint8 %s)", path, img < 0 ? ipath : lpath,
                     img < 0 ? "images [N,H,W,C]" : "labels [N]");
        goto out;
    }
    int ind = dims_of(img, id), lnd = dims_of(lbl, ld);
    if (ind != 4) {
        format_dims(id, ind, a, sizeof a);
        rc = dt_fail(st, DT_EINPUT, "%s: %s has rank %d %s; expected rank 4 [N,H,W,C]", path, ipath, ind, a);
        goto out;
    }
    if (!is_uint8(img)) {
        describe_type(img, a, sizeof a);
        rc = dt_fail(st, DT_EINPUT, "%s: %s holds %s; expected uint8 pixels", path, ipath, a);
        goto out;
    }
    if (lnd != 1 || !is_uint8(lbl)) {
        format_dims(ld, lnd, a, sizeof a);
        describe_type(lbl, b, sizeof b);
        rc = dt_fail(st, DT_EINPUT, "%s: %s is %s %s; expected uint8 [N]", path, lpath, b, a);
        goto out;
    }
    if (id[0] != ld[0]) {
        rc = dt_fail(st, DT_EINPUT, "%s: %s has %llu samples but %s has %llu labels", path, ipath,
                     (unsigned long long)id[0], lpath, (unsigned long long)ld[0]);
        goto out;
    }
    if (id[1] == 0 || id[2] == 0 || id[3] == 0 || id[1] > 65536 || id[2] > 65536 || id[3] > 4096) {
        format_dims(id, 4, a, sizeof a);
        rc = dt_fail(st, DT_EINPUT, "%s: %s has shape %s; expected [N,H,W,C] with non-empty images", path, ipath, a);
        goto out;
    }
    if (id[1] * id[2] * id[3] > MAX_IMAGE_BYTES) {
        format_dims(id, 4, a, sizeof a);
        rc = dt_fail(st, DT_EINPUT, "%s: %s has shape %s: %llu bytes an image; expected at most %u", path, ipath, a,
                     (unsigned long long)(id[1] * id[2] * id[3]), MAX_IMAGE_BYTES);
        goto out;
    }
    if (check_stored(path, ipath, img, id, 4, st) != DT_OK || check_stored(path, lpath, lbl, ld, 1, st) != DT_OK) {
        rc = st->code;
        goto out;
    }
    if (!*shape_set) {
        m->h = (int)id[1]; m->w = (int)id[2]; m->c = (int)id[3];
        *shape_set = 1;
    } else if ((int)id[1] != m->h || (int)id[2] != m->w || (int)id[3] != m->c) {
        format_dims(id, 4, a, sizeof a);
        rc = dt_fail(st, DT_EINPUT, "%s: %s has shape %s; the other data has %dx%dx%d images", path,
                     ipath, a, m->h, m->w, m->c);
        goto out;
    }
    *n_out = (int64_t)id[0];
    if (id[0] > 0) rc = check_labels(path, s, lbl, id[0], ls, st);
out:
    if (img >= 0) H5Dclose(img);
    if (lbl >= 0) H5Dclose(lbl);
    return rc;
}

/* A token file's num_classes is its vocabulary: up to 2^31 - 1 tokens. */
static int read_classes_attr(const char *path, hid_t file, int tokens, int *classes, dt_status *st)
{
    *classes = 0;
    if (H5Aexists(file, "num_classes") <= 0) return DT_OK;
    hid_t a = H5Aopen(file, "num_classes", H5P_DEFAULT);
    hid_t t = a < 0 ? -1 : H5Aget_type(a), sp = a < 0 ? -1 : H5Aget_space(a);
    hssize_t npoints = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    char what[64] = "unreadable";
    long long v = 0;
    int ok = 0;
    if (t >= 0 && npoints != 1) {
        snprintf(what, sizeof what, "%lld values", (long long)npoints);
    } else if (t >= 0 && H5Tget_class(t) != H5T_INTEGER) {
        describe_class(t, what, sizeof what);
    } else if (t >= 0) {
        /* One integer (checked above), so reading one long long cannot overflow. */
        ok = H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0;
        snprintf(what, sizeof what, "%lld", v);
        ok = ok && v >= 2 && v <= (tokens ? 2147483647LL : 256);
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!ok && tokens)
        return dt_fail(st, DT_EINPUT, "%s: root attribute num_classes is %s; expected the vocabulary's size, one "
                       "integer >= 2", path, what);
    if (!ok)
        return dt_fail(st, DT_EINPUT, "%s: root attribute num_classes is %s; expected one integer in [2, 256] "
                       "(labels are uint8)", path, what);
    *classes = (int)v;
    return DT_OK;
}

/* The class count: --num-classes, else the files' attribute, else the
 * largest label + 1 if that leaves few classes without a sample. */
static int decide_classes(const struct labels_seen *ls, int classes, int declared, struct meta *m, dt_status *st)
{
    char gap[256];
    m->classes = classes ? classes : declared;
    if (m->classes) return DT_OK;
    if (dt_labels_gap(&ls->l)) {
        dt_labels_describe_gap(&ls->l, gap, sizeof gap);
        return dt_fail(st, DT_EINPUT, "%s: /%s/labels[%llu] = %d, and no num_classes attribute: %s; state the count "
                       "with --num-classes N (or store it in the file: dtrain-prep --classes N)", ls->max_path,
                       split_name[ls->max_split], ls->max_row, ls->l.max, gap);
    }
    m->classes = ls->l.max + 1 < 2 ? 2 : ls->l.max + 1;
    return DT_OK;
}

/* A token file's tokenizer (data/tokens.h), the same in every shard: the
 * first file's is kept in ds while validating, and compared. */
static int same_tokenizer(struct dt_dataset *ds, int f, hid_t file, int vocab, dt_status *st)
{
    char name[16];
    int32_t *merges;
    uint32_t n;
    if (dt_tokens_tokenizer(ds->paths[f], file, vocab, name, &merges, &n, st) != DT_OK) return st->code;
    if (f == 0) {
        memcpy(ds->tokenizer, name, sizeof name);
        ds->merges = merges;
        ds->nmerges = n;
        return DT_OK;
    }
    if (strcmp(name, ds->tokenizer) || n != ds->nmerges || memcmp(merges, ds->merges, sizeof(int32_t) * 2 * n))
        dt_fail(st, DT_EINPUT, "%s: its tokenizer (%s, %u merges) is not %s's (%s, %u merges): the shards' token ids "
                "would mean different text", ds->paths[f], name, n, ds->paths[0], ds->tokenizer, ds->nmerges);
    free(merges);
    return st->code;
}

static int validate(struct dt_dataset *ds, int classes, struct meta *m, int64_t *counts, dt_status *st)
{
    int shape_set = 0, declared = 0, test_files = 0, no_test = -1;
    struct labels_seen ls = {.limit = classes, .limit_by = "--num-classes"};
    dt_labels_init(&ls.l);
    memset(m, 0, sizeof *m);
    for (int f = 0; f < ds->nfiles; f++) {
        const char *path = ds->paths[f];
        struct stat sb;
        char why[160];
        if (access(path, R_OK) != 0)
            return dt_fail(st, DT_EINPUT, "%s: cannot open: %s", path, strerror(errno));
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return dt_fail(st, DT_EINPUT, "%s: is a %s; expected an HDF5 file written by dtrain-prep", path,
                           S_ISDIR(sb.st_mode) ? "directory" : "special file");
        htri_t is = H5Fis_hdf5(path);
        if (is <= 0) return dt_fail(st, DT_EINPUT, "%s: not an HDF5 file (expected a dataset written by dtrain-prep)", path);
        hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file < 0)
            return dt_fail(st, DT_EINPUT, "%s: HDF5 cannot open it: %s (a truncated or damaged file?)", path,
                           h5_why(why));
        const int tok = dt_tokens_is(file);
        if (f > 0 && tok != m->tokens) {
            H5Fclose(file);
            return dt_fail(st, DT_EINPUT, "%s: holds %s but %s holds %s (the files must be of one kind)", path,
                           tok ? "tokens" : "images", ds->paths[0], m->tokens ? "tokens" : "images");
        }
        m->tokens = tok;
        int cls = 0, rc = read_classes_attr(path, file, tok, &cls, st);
        if (rc == DT_OK && cls > 0) {
            if (declared && cls != declared)
                rc = dt_fail(st, DT_EINPUT, "%s: num_classes = %d, but %s says %d", path, cls, ds->paths[0], declared);
            else if (classes && cls != classes)
                rc = dt_fail(st, DT_EINPUT, "%s: root attribute num_classes is %d, but --num-classes is %d (they must "
                             "agree: drop --num-classes, or write the file again with dtrain-prep --classes %d)",
                             path, cls, classes, classes);
            declared = cls;
            if (!classes) {
                ls.limit = declared;
                ls.limit_by = "num_classes";
            }
        }
        if (rc == DT_OK && tok) {
            int64_t c[2];
            rc = dt_tokens_validate(path, file, classes ? classes : cls, c, st);
            if (rc == DT_OK) rc = same_tokenizer(ds, f, file, classes ? classes : cls, st);
            counts[f] = c[0];
            if (c[1] >= 0) counts[ds->nfiles + f] = c[1], test_files++;
            else if (no_test < 0) no_test = f;
        }
        else if (rc == DT_OK)
            rc = check_split(path, file, DT_TRAIN, m, &shape_set, &ls, &counts[f], st);
        if (rc == DT_OK && !tok && H5Lexists(file, "test", H5P_DEFAULT) > 0) {
            test_files++;
            rc = check_split(path, file, DT_TEST, m, &shape_set, &ls, &counts[ds->nfiles + f], st);
        } else if (!tok && no_test < 0) {
            no_test = f;
        }
        H5Fclose(file);
        if (rc != DT_OK) return rc;
    }
    int64_t total = 0;
    for (int f = 0; f < ds->nfiles; f++) total += counts[f];
    if (total == 0)
        return dt_fail(st, DT_EINPUT, "%s: /train/%s holds no %s", ds->paths[0], m->tokens ? "tokens" : "images",
                       m->tokens ? "tokens" : "samples");
    if (test_files && test_files != ds->nfiles)
        return dt_fail(st, DT_EINPUT, "%s: no /test split, but %d of the %d shard files have one (expected all or none)",
                       ds->paths[no_test], test_files, ds->nfiles);
    m->has_test = test_files > 0;
    return decide_classes(&ls, classes, declared, m, st);
}

/* ---- opening (all ranks) ------------------------------------------------- */

int dt_dataset_open(struct dt_dataset *ds, char **paths, int nfiles, MPI_Comm comm, dt_status *st)
{
    return dt_dataset_open_classes(ds, paths, nfiles, 0, comm, st);
}

int dt_dataset_open_classes(struct dt_dataset *ds, char **paths, int nfiles, int classes, MPI_Comm comm,
                            dt_status *st)
{
    struct meta m;
    int rank;
    int64_t *counts = dt_xcalloc(2 * (size_t)nfiles, sizeof(int64_t));
    MPI_Comm_rank(comm, &rank);
    memset(ds, 0, sizeof *ds);
    ds->nfiles = nfiles;
    ds->paths = paths;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* our messages, not HDF5's stack */
    st->code = DT_OK;
    if (rank == 0) validate(ds, classes, &m, counts, st);
    free(ds->merges); /* validation's copy; every rank reads the first file's below */
    ds->merges = NULL;
    if (dt_status_agree(st, comm) != DT_OK) {
        free(counts);
        return st->code;
    }
    MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, 0, comm);
    MPI_Bcast(counts, 2 * nfiles, MPI_INT64_T, 0, comm);
    ds->shape = (struct dt_shape){m.h, m.w, m.c};
    ds->classes = m.classes;
    ds->tokens = m.tokens;

    /* Parallel HDF5: the files are opened collectively through MPI-IO; each
     * rank then reads its own rows independently. */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    DT_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    ds->files = dt_xcalloc((size_t)nfiles, sizeof(hid_t));
    for (int s = 0; s < 2; s++) {
        struct dt_split *sp = &ds->split[s];
        sp->present = s == DT_TRAIN || m.has_test;
        sp->file_start = dt_xcalloc((size_t)nfiles + 1, sizeof(int64_t));
        sp->images = dt_xcalloc((size_t)nfiles, sizeof(hid_t));
        sp->labels = dt_xcalloc((size_t)nfiles, sizeof(hid_t));
        if (m.tokens) { /* samples are windows: dt_dataset_set_block counts them */
            sp->ntokens = dt_xcalloc((size_t)nfiles, sizeof(int64_t));
            for (int f = 0; f < nfiles; f++) sp->ntokens[f] = sp->present ? counts[s * nfiles + f] : 0;
            continue;
        }
        for (int f = 0; f < nfiles; f++) sp->file_start[f + 1] = sp->file_start[f] + (sp->present ? counts[s * nfiles + f] : 0);
        sp->n = sp->file_start[nfiles];
    }
    for (int f = 0; f < nfiles; f++) {
        ds->files[f] = H5Fopen(paths[f], H5F_ACC_RDONLY, fapl);
        if (ds->files[f] < 0) DT_DIE("%s: validated by rank 0 but cannot be opened here", paths[f]);
        if (m.tokens && f == 0 && dt_tokens_tokenizer(paths[0], ds->files[0], m.classes, ds->tokenizer, &ds->merges,
                                                      &ds->nmerges, st) != DT_OK)
            DT_DIE("%s: validated by rank 0 but its tokenizer cannot be read here: %s", paths[0], st->msg);
        for (int s = 0; s < 2; s++) {
            struct dt_split *sp = &ds->split[s];
            char name[32];
            if (!sp->present) { sp->images[f] = sp->labels[f] = -1; continue; }
            if (m.tokens) { /* the stream; no labels */
                snprintf(name, sizeof name, "/%s/tokens", split_name[s]);
                sp->images[f] = H5Dopen2(ds->files[f], name, H5P_DEFAULT);
                sp->labels[f] = -1;
                DT_H5_CHECK(sp->images[f]);
                continue;
            }
            snprintf(name, sizeof name, "/%s/images", split_name[s]);
            sp->images[f] = H5Dopen2(ds->files[f], name, H5P_DEFAULT);
            snprintf(name, sizeof name, "/%s/labels", split_name[s]);
            sp->labels[f] = H5Dopen2(ds->files[f], name, H5P_DEFAULT);
            DT_H5_CHECK(sp->images[f]);
            DT_H5_CHECK(sp->labels[f]);
        }
    }
    H5Pclose(fapl);
    free(counts);
    return DT_OK;
}

/* ---- reading --------------------------------------------------------------- */

struct pos { int64_t g; int at; };

static int by_g(const void *a, const void *b)
{
    int64_t x = ((const struct pos *)a)->g, y = ((const struct pos *)b)->g;
    return (x > y) - (x < y);
}

/* Select rows rows[0..k) (sorted) of a dataset whose rows are rowdims[1..] */
static hid_t select_rows(hid_t dset, const int64_t *rows, int k, int nd)
{
    hid_t space = H5Dget_space(dset);
    hsize_t dims[4], start[4] = {0}, count[4] = {1, 1, 1, 1}, block[4];
    H5Sget_simple_extent_dims(space, dims, NULL);
    DT_H5_CHECK(H5Sselect_none(space));
    for (int i = 0; i < k;) {
        int j = i + 1;
        while (j < k && rows[j] == rows[j - 1] + 1) j++;
        start[0] = (hsize_t)rows[i];
        block[0] = (hsize_t)(j - i);
        for (int d = 1; d < nd; d++) block[d] = dims[d];
        DT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, block));
        i = j;
    }
    return space;
}

/* A failed read (a damaged chunk) is the caller's error to report: the
 * loader passes it to every rank through the step's reduction. */
static herr_t read_rows(hid_t dset, const int64_t *rows, int k, int nd, size_t row_bytes, uint8_t *dst)
{
    hid_t fspace = select_rows(dset, rows, k, nd);
    hsize_t total = (hsize_t)k * row_bytes;
    hid_t mspace = H5Screate_simple(1, &total, NULL);
    herr_t r = H5Dread(dset, H5T_NATIVE_UINT8, mspace, fspace, H5P_DEFAULT, dst);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return r;
}

/* The rows of idx from the split's files, one read per file touched. */
static int read_files(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *images,
                      uint8_t *labels, dt_status *st)
{
    const struct dt_split *sp = &ds->split[split];
    const size_t row = dt_shape_size(ds->shape);
    size_t need = (size_t)n * (sizeof(struct pos) + sizeof(int64_t) + row + 1);
    if (need > ds->scratch_bytes) {
        free(ds->scratch);
        ds->scratch = dt_xmalloc(need);
        ds->scratch_bytes = need;
    }
    struct pos *p = (struct pos *)(void *)ds->scratch;
    int64_t *rows = (int64_t *)(void *)(p + n);
    uint8_t *img = (uint8_t *)(rows + n), *lab = img + (size_t)n * row;
    for (int i = 0; i < n; i++) p[i] = (struct pos){idx[i], i};
    qsort(p, (size_t)n, sizeof *p, by_g);
    for (int i = 0; i < n;) {
        int64_t r0;
        int f = dt_shard_locate(sp->file_start, ds->nfiles, p[i].g, &r0), j = i;
        while (j < n && p[j].g < sp->file_start[f + 1]) { rows[j] = p[j].g - sp->file_start[f]; j++; }
        int bad_img = read_rows(sp->images[f], rows + i, j - i, 4, row, img + (size_t)i * row) < 0;
        if (bad_img || read_rows(sp->labels[f], rows + i, j - i, 1, 1, lab + i) < 0) {
            char why[160];
            return dt_fail(st, DT_EINPUT, "%s: cannot read rows %lld..%lld of /%s/%s (%s); the file is damaged",
                           ds->paths[f], (long long)rows[i], (long long)rows[j - 1], split_name[split],
                           bad_img ? "images" : "labels", h5_why(why));
        }
        i = j;
    }
    for (int i = 0; i < n; i++) {
        memcpy(images + (size_t)p[i].at * row, img + (size_t)i * row, row);
        labels[p[i].at] = lab[i];
    }
    return DT_OK;
}

int dt_dataset_read(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *images,
                    uint8_t *labels, dt_status *st)
{
    if (n <= 0) return DT_OK;
    if (ds->synthetic) {
        dt_synthetic_rows(ds, idx, n, images, labels);
        return DT_OK;
    }
    dt_h5_lock(); /* an asynchronous checkpoint may be inside HDF5 (runtime/h5lock.h) */
    int rc = ds->tokens ? dt_tokens_read(ds, split, idx, n, images, labels, st)
                        : read_files(ds, split, idx, n, images, labels, st);
    dt_h5_unlock();
    return rc;
}

void dt_dataset_close(struct dt_dataset *ds)
{
    for (int s = 0; s < 2; s++) {
        struct dt_split *sp = &ds->split[s];
        for (int f = 0; sp->images && f < ds->nfiles; f++) {
            if (sp->images[f] >= 0) H5Dclose(sp->images[f]);
            if (sp->labels[f] >= 0) H5Dclose(sp->labels[f]);
        }
        free(sp->file_start);
        free(sp->ntokens);
        free(sp->images);
        free(sp->labels);
    }
    for (int f = 0; ds->files && f < ds->nfiles; f++) H5Fclose(ds->files[f]);
    free(ds->files);
    free(ds->scratch);
    free(ds->merges);
    memset(ds, 0, sizeof *ds);
}

int dt_dataset_set_block(struct dt_dataset *ds, int T, dt_status *st)
{
    if (!ds->tokens) return DT_OK;
    int64_t most = 0;
    int longest = 0;
    for (int s = 0; s < 2; s++) {
        struct dt_split *sp = &ds->split[s];
        if (!sp->present) continue;
        for (int f = 0; f < ds->nfiles; f++) {
            int64_t w = sp->ntokens[f] > T ? (sp->ntokens[f] - 1) / T : 0;
            sp->file_start[f + 1] = sp->file_start[f] + w;
            if (s == DT_TRAIN && sp->ntokens[f] > most) most = sp->ntokens[f], longest = f;
        }
        sp->n = sp->file_start[ds->nfiles];
    }
    if (ds->split[DT_TRAIN].n == 0)
        return dt_fail(st, DT_EINPUT, "%s: block_size = %d is longer than the data: /train/tokens holds %lld tokens, "
                       "and a window needs %d", ds->paths[longest], T, (long long)most, T + 1);
    if (ds->split[DT_TEST].present && ds->split[DT_TEST].n == 0)
        return dt_fail(st, DT_EINPUT, "%s: block_size = %d is longer than the validation data: /test/tokens holds "
                       "fewer than the %d tokens of a window (prep with a larger --val-fraction)", ds->paths[0], T,
                       T + 1);
    ds->block = T;
    ds->shape = (struct dt_shape){1, T + 1, (int)sizeof(int32_t)};
    return DT_OK;
}
