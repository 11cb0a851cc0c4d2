/* ckpt_validate.c: what a checkpoint file holds (its datasets, shapes and
 * attributes), whether it is intact (format and state checksum), and
 * dt_ckpt_resolve, which picks the newest intact checkpoint of a directory.
 * ckpt_read.c builds on the same listing to read a file into a model.
 *
 * The one thing to know: a file is checked without trusting it. Every shape
 * is compared with what the file can hold before it sizes a buffer, and
 * the checksum is recomputed by all ranks, each over its share of every
 * dataset's rows, so a damaged file costs one pass and a clear message. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/ckpt_internal.h"
#include "runtime/checks.h"
#include "runtime/h5lock.h"

/* ---- what the file holds ------------------------------------------------------ */

static struct dent *dl_add(struct dlist *dl)
{
    if (dl->n == dl->cap) {
        dl->cap = 2 * dl->cap + 16;
        struct dent *nd = realloc(dl->d, (size_t)dl->cap * sizeof *nd);
        if (!nd) DT_DIE("out of memory listing checkpoint datasets");
        dl->d = nd;
    }
    memset(&dl->d[dl->n], 0, sizeof dl->d[0]);
    return &dl->d[dl->n++];
}

struct names {
    char (*v)[MAX_NAME];
    int n, cap, too_long;
};

static herr_t collect_name(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    struct names *ns = data;
    (void)g;
    (void)info;
    if (strlen(name) >= MAX_NAME) {
        ns->too_long = 1;
        return 0;
    }
    if (ns->n == ns->cap) {
        ns->cap = 2 * ns->cap + 16;
        char (*nv)[MAX_NAME] = realloc(ns->v, (size_t)ns->cap * sizeof *nv);
        if (!nv) DT_DIE("out of memory listing a checkpoint group");
        ns->v = nv;
    }
    snprintf(ns->v[ns->n++], MAX_NAME, "%s", name);
    return 0;
}

/* The links of group `path`, in creation order where the file tracks it. */
static int list_group(hid_t f, const char *path, struct names *ns)
{
    memset(ns, 0, sizeof *ns);
    hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
    if (g < 0) return -1;
    hid_t gcpl = H5Gget_create_plist(g);
    unsigned flags = 0;
    if (gcpl >= 0) {
        H5Pget_link_creation_order(gcpl, &flags);
        H5Pclose(gcpl);
    }
    H5_index_t idx = flags & H5P_CRT_ORDER_INDEXED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    herr_t r = H5Literate(g, idx, H5_ITER_INC, NULL, collect_name, ns);
    H5Gclose(g);
    return r < 0 || ns->too_long ? -1 : 0;
}

/* Opens path's dataset and records its type and shape; checks the class,
 * element size and rank (nd; 0 = any up to 4), and the trailing dimension
 * when last > 0. */
static int describe(hid_t f, struct dent *e, int kind, H5T_class_t cls, size_t esz, int nd, hsize_t last,
                    const char *file, dt_status *st)
{
    static const char *what[] = {"float32", "float32", "float32", "uint64", "float64", "uint8", "int32"};
    e->kind = kind;
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0) return ckpt_h5_fail(st, DT_EINPUT, file, "cannot open dataset %s", e->path);
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = H5Tget_class(t) == cls && H5Tget_size(t) == esz;
    e->nd = H5Sget_simple_extent_ndims(sp);
    if (e->nd >= 1 && e->nd <= 4) H5Sget_simple_extent_dims(sp, e->dims, NULL);
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(d);
    char shape[96];
    ckpt_format_dims(shape, sizeof shape, e->nd < 0 || e->nd > 4 ? 0 : e->nd, e->dims);
    if (!ok)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: %s is not %s", file, e->path, what[kind]);
    if (e->nd < 1 || e->nd > 4 || (nd && e->nd != nd) || (last && e->dims[e->nd - 1] != last))
        return dt_fail(st, DT_EINPUT, "checkpoint %s: %s has shape %s (expected %s)", file, e->path, shape,
                       kind == D_RNG ? "[nranks,4]" : kind == D_HIST ? "[epochs,6]" : kind == D_MERGES ? "[merges,2]"
                       : kind == D_BIAS || kind == D_SLOT || kind == D_TEXT ? "[n]" : "rank 1-4");
    e->esz = esz;
    e->mtype = kind == D_RNG ? H5T_NATIVE_UINT64 : kind == D_HIST ? H5T_NATIVE_DOUBLE : kind == D_TEXT ? H5T_NATIVE_UINT8
               : kind == D_MERGES ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    /* dtrain writes every dataset contiguous and uncompressed, so none can hold
     * more bytes than the file: a larger shape is damage, and would size the
     * checksum's read buffer (found by tests/fuzz/fuzz_checkpoint). */
    struct stat sb;
    uint64_t limit = stat(file, &sb) == 0 ? (uint64_t)sb.st_size / esz : UINT64_MAX;
    e->count = 1;
    for (int i = 0; i < e->nd; i++) {
        if (e->dims[i] && e->count > limit / e->dims[i])
            return dt_fail(st, DT_EINPUT, "checkpoint %s: %s has shape %s, more data than the whole file holds "
                           "(%lld bytes); the file is damaged", file, e->path, shape, (long long)sb.st_size);
        e->count *= e->dims[i];
    }
    e->rows = e->dims[0];
    e->rowlen = e->rows ? e->count / e->rows : 0;
    return DT_OK;
}

int ckpt_list_datasets(hid_t f, const char *file, struct dlist *dl, dt_status *st)
{
    struct names layers, slots;
    memset(dl, 0, sizeof *dl);
    if (H5Lexists(f, "model", H5P_DEFAULT) <= 0 || list_group(f, "/model", &layers) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no readable group /model", file);
    dl->nlayers = layers.n;
    for (int l = 0; l < layers.n && st->code == DT_OK; l++) {
        struct dent *e = dl_add(dl);
        snprintf(e->name, sizeof e->name, "%s", layers.v[l]);
        snprintf(e->path, sizeof e->path, "/model/%s/kernel", layers.v[l]);
        if (H5Lexists(f, e->path, H5P_DEFAULT) <= 0) {
            dt_fail(st, DT_EINPUT, "checkpoint %s: no dataset %s", file, e->path);
            break;
        }
        if (describe(f, e, D_KERNEL, H5T_FLOAT, 4, 0, 0, file, st) != DT_OK) break;
        e = dl_add(dl);
        snprintf(e->name, sizeof e->name, "%s", layers.v[l]);
        snprintf(e->path, sizeof e->path, "/model/%s/bias", layers.v[l]);
        if (H5Lexists(f, e->path, H5P_DEFAULT) <= 0) {
            dt_fail(st, DT_EINPUT, "checkpoint %s: no dataset %s", file, e->path);
            break;
        }
        describe(f, e, D_BIAS, H5T_FLOAT, 4, 1, 0, file, st);
    }
    free(layers.v);
    if (st->code != DT_OK) return st->code;
    if (H5Lexists(f, "optimizer", H5P_DEFAULT) <= 0 || list_group(f, "/optimizer", &slots) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no readable group /optimizer", file);
    for (int s = 0; s < slots.n && st->code == DT_OK; s++) {
        struct dent *e = dl_add(dl);
        snprintf(e->name, sizeof e->name, "%s", slots.v[s]);
        snprintf(e->path, sizeof e->path, "/optimizer/%s", slots.v[s]);
        describe(f, e, D_SLOT, H5T_FLOAT, 4, 1, 0, file, st);
    }
    free(slots.v);
    if (st->code != DT_OK) return st->code;
    static const char *tail[2] = {"/rng/dropout", "/history"};
    for (int k = 0; k < 2; k++) {
        struct dent *e = dl_add(dl);
        snprintf(e->path, sizeof e->path, "%s", tail[k]);
        if (H5Lexists(f, k == 0 ? "rng" : "history", H5P_DEFAULT) <= 0 || H5Lexists(f, e->path, H5P_DEFAULT) <= 0)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: no dataset %s", file, e->path);
        if (k == 0 && describe(f, e, D_RNG, H5T_INTEGER, 8, 2, 4, file, st) != DT_OK) return st->code;
        if (k == 1 && describe(f, e, D_HIST, H5T_FLOAT, 8, 2, DT_CKPT_HIST, file, st) != DT_OK) return st->code;
    }
    dl->rng = dl->n - 2;
    dl->hist = dl->n - 1;
    dl->text = dl->merges = -1;
    /* Version 2's additions, where present (a version 1 file has neither). */
    if (H5Lexists(f, "model_text", H5P_DEFAULT) > 0) {
        struct dent *e = dl_add(dl);
        snprintf(e->path, sizeof e->path, "/model_text");
        if (describe(f, e, D_TEXT, H5T_INTEGER, 1, 1, 0, file, st) != DT_OK) return st->code;
        dl->text = dl->n - 1;
    }
    if (H5Lexists(f, "tokenizer", H5P_DEFAULT) > 0) {
        struct dent *e = dl_add(dl);
        snprintf(e->path, sizeof e->path, "/tokenizer/merges");
        if (H5Lexists(f, e->path, H5P_DEFAULT) <= 0)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: no dataset %s", file, e->path);
        if (describe(f, e, D_MERGES, H5T_INTEGER, 4, 2, 2, file, st) != DT_OK) return st->code;
        dl->merges = dl->n - 1;
    }
    return DT_OK;
}

int ckpt_read_attr(hid_t f, const char *obj, const char *name, hid_t mtype, void *v)
{
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t sp = H5Aget_space(a);
    herr_t r = H5Sget_simple_extent_npoints(sp) == 1 ? H5Aread(a, mtype, v) : -1;
    H5Sclose(sp);
    H5Aclose(a);
    return r < 0 ? -1 : 0;
}

/* A string attribute as a malloc'd string; NULL if missing or not text. */
char *ckpt_read_str_attr(hid_t a)
{
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    char *s = NULL;
    if (H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(sp) == 1) {
        if (H5Tis_variable_str(t) > 0) {
            char *vs = NULL;
            if (H5Aread(a, t, &vs) >= 0 && vs) {
                s = strdup(vs);
                H5free_memory(vs);
            }
        } else {
            size_t n = H5Tget_size(t);
            s = calloc(n + 1, 1);
            if (s && H5Aread(a, t, s) < 0) {
                free(s);
                s = NULL;
            }
        }
    }
    H5Tclose(t);
    H5Sclose(sp);
    return s;
}

char *ckpt_read_str(hid_t f, const char *obj, const char *name)
{
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return NULL;
    char *s = ckpt_read_str_attr(a);
    H5Aclose(a);
    return s;
}

/* Opens path collectively for reading, with one clear message for a file
 * that is missing, not HDF5, or truncated. Returns -1 (on every rank) on
 * failure. */
hid_t ckpt_open(MPI_Comm comm, const char *path, dt_status *st)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        struct stat sb;
        if (stat(path, &sb) != 0 || access(path, R_OK) != 0)
            dt_fail(st, DT_EINPUT, "checkpoint %s: cannot open: %s", path, strerror(errno));
        else if (!S_ISREG(sb.st_mode))
            dt_fail(st, DT_EINPUT, "checkpoint %s: not a regular file", path);
        else if (H5Fis_hdf5(path) <= 0)
            dt_fail(st, DT_EINPUT, "checkpoint %s: not an HDF5 file (%lld bytes; a checkpoint is written by dtrain)",
                    path, (long long)sb.st_size);
    }
    if (agree(st, comm) != DT_OK) return -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    DT_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f < 0) ckpt_h5_fail(st, DT_EINPUT, path, "HDF5 cannot open it (the file is truncated or damaged)");
    H5Pclose(fapl);
    if (agree(st, comm) != DT_OK) {
        if (f >= 0) H5Fclose(f);
        return -1;
    }
    return f;
}

int ckpt_check_format(hid_t f, const char *path, dt_status *st)
{
    char *fmt = ckpt_read_str(f, "/", "format");
    int version = 0, ok = fmt && !strcmp(fmt, FORMAT_NAME);
    free(fmt);
    if (!ok)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: not a dtrain checkpoint (no root attribute format = \"%s\")",
                       path, FORMAT_NAME);
    if (ckpt_read_attr(f, "/", "format_version", H5T_NATIVE_INT, &version) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no attribute format_version", path);
    if (version < FORMAT_OLDEST || version > FORMAT_VERSION)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: format_version %d; this dtrain reads versions %d to %d", path,
                       version, FORMAT_OLDEST, FORMAT_VERSION);
    return DT_OK;
}

int ckpt_hash_rows(hid_t f, const struct dent *e, uint64_t r0, uint64_t r1, uint64_t *sum, const char *path,
                     dt_status *st)
{
    if (r1 <= r0 || e->rowlen == 0) return DT_OK;
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0) return ckpt_h5_fail(st, DT_EINPUT, path, "cannot open %s", e->path);
    uint64_t step = HASH_CHUNK / e->rowlen ? HASH_CHUNK / e->rowlen : 1;
    void *buf = dt_xmalloc((size_t)((r1 - r0 < step ? r1 - r0 : step) * e->rowlen * e->esz));
    hid_t fsp = H5Dget_space(d);
    for (uint64_t r = r0; r < r1 && st->code == DT_OK; r += step) {
        uint64_t nr = r1 - r < step ? r1 - r : step;
        hsize_t start[4] = {r, 0, 0, 0}, count[4], n[1] = {nr * e->rowlen};
        count[0] = nr;
        for (int i = 1; i < e->nd; i++) count[i] = e->dims[i];
        H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t msp = H5Screate_simple(1, n, NULL);
        if (H5Dread(d, e->mtype, msp, fsp, H5P_DEFAULT, buf) < 0)
            ckpt_h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
        else
            *sum += ckpt_hash_values(buf, (size_t)n[0], e->esz, r * e->rowlen);
        H5Sclose(msp);
    }
    H5Sclose(fsp);
    H5Dclose(d);
    free(buf);
    return st->code;
}

int ckpt_read_checksum(hid_t f, const char *path, uint64_t *stored, dt_status *st)
{
    if (ckpt_read_attr(f, "/", "state_checksum", H5T_NATIVE_UINT64, stored) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no attribute state_checksum (the write did not finish)", path);
    return DT_OK;
}

int ckpt_compare_checksum(const struct dlist *dl, uint64_t *sum, uint64_t stored, const char *path,
                            MPI_Comm comm, dt_status *st)
{
    uint64_t *count = dt_xmalloc((size_t)(dl->n + 1) * sizeof *count);
    for (int k = 0; k < dl->n; k++) count[k] = dl->d[k].count;
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum, dl->n, MPI_UINT64_T, MPI_SUM, comm));
    uint64_t computed = ckpt_chain(count, sum, dl->n);
    free(count);
    if (computed != stored)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: state checksum mismatch (stored %016llx, computed %016llx): "
                       "the file is corrupt", path, (unsigned long long)stored, (unsigned long long)computed);
    return DT_OK;
}

/* Collective: format and state checksum of a file, without knowing the
 * model (what resolve needs). Each rank hashes its share of every
 * dataset's rows. */
static int validate_light(MPI_Comm comm, const char *path, dt_status *st)
{
    int rank, size;
    struct dlist dl;
    uint64_t stored = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    st->code = DT_OK;
    hid_t f = ckpt_open(comm, path, st);
    if (f < 0) return st->code;
    if (ckpt_check_format(f, path, st) == DT_OK && ckpt_read_checksum(f, path, &stored, st) == DT_OK)
        ckpt_list_datasets(f, path, &dl, st);
    else
        memset(&dl, 0, sizeof dl);
    if (agree(st, comm) == DT_OK) {
        uint64_t *sum = dt_xcalloc((size_t)dl.n + 1, sizeof *sum);
        for (int k = 0; k < dl.n && st->code == DT_OK; k++) {
            const struct dent *e = &dl.d[k];
            ckpt_hash_rows(f, e, e->rows * (uint64_t)rank / (uint64_t)size, e->rows * (uint64_t)(rank + 1) / (uint64_t)size,
                      &sum[k], path, st);
        }
        if (agree(st, comm) == DT_OK) ckpt_compare_checksum(&dl, sum, stored, path, comm, st);
        free(sum);
    }
    free(dl.d);
    H5Fclose(f);
    return agree(st, comm);
}

/* ---- resolving "latest" ------------------------------------------------------ */

/* msg without its "checkpoint PATH: " prefix. */
static const char *why_only(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (!strncmp(msg, "checkpoint ", 11) && !strncmp(msg + 11, path, n) && !strncmp(msg + 11 + n, ": ", 2))
        return msg + 13 + n;
    return msg;
}

/* Rank 0: the candidates of directory d, newest first, into cand: the file
 * latest names first, then every ckpt-*.h5. */
static int list_candidates(const char *d, struct pack *cand, dt_status *st)
{
    char lp[PATH_MAX], line[NAME_MAX + 2] = "", path[PATH_MAX];
    int n, ncand = 0;
    struct named *v = ckpt_list(d, &n);
    if (!v) {
        dt_fail(st, DT_EINPUT, "checkpoint directory %s: cannot open: %s", d, strerror(errno));
        return 0;
    }
    FILE *fp = ckpt_join(lp, sizeof lp, d, "latest") == 0 ? fopen(lp, "r") : NULL;
    if (fp) {
        if (!fgets(line, sizeof line, fp)) line[0] = '\0';
        fclose(fp);
        line[strcspn(line, "\r\n")] = '\0';
        long long e, s;
        /* Only a name of this directory's own pattern: never a path
         * (../../etc/passwd, /abs), and the content is not echoed. */
        if (!ckpt_parse_name(line, &e, &s)) {
            fprintf(stderr, "dtrain: note: %s does not hold a checkpoint file name (expected one line "
                    "ckpt-EEEEEE-SSSSSSSS.h5); using the newest ckpt-*.h5\n", lp);
            line[0] = '\0';
        } else if (ckpt_join(path, sizeof path, d, line) == 0) {
            ckpt_pack_str(cand, path);
            ncand++;
        }
    } else if (n > 0) {
        fprintf(stderr, "dtrain: note: %s: %s; using the newest ckpt-*.h5\n", lp, strerror(errno));
    }
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(v[i].name, line) != 0 && ckpt_join(path, sizeof path, d, v[i].name) == 0) {
            ckpt_pack_str(cand, path);
            ncand++;
        }
    free(v);
    if (ncand == 0)
        dt_fail(st, DT_EINPUT, "checkpoint directory %s: no checkpoint in it (no latest, no ckpt-*.h5)", d);
    return ncand;
}

static int resolve_locked(MPI_Comm comm, const char *what, const char *dir, char *path_out, size_t path_len,
                          dt_status *st)
{
    struct h5quiet q;
    struct pack cand = {0};  /* rank 0's candidates, newest first */
    char first_why[sizeof st->msg] = "", first_name[PATH_MAX] = "";
    int rank, ncand = 0, found = -1;
    const char *d = dir;
    MPI_Comm_rank(comm, &rank);
    st->code = DT_OK;
    st->msg[0] = '\0';
    ckpt_h5_quiet(&q);
    if (rank == 0) {
        struct stat sb;
        if (what && strcmp(what, "latest") != 0) {
            if (stat(what, &sb) != 0)
                dt_fail(st, DT_EINPUT, "checkpoint %s: cannot open: %s", what, strerror(errno));
            else if (S_ISDIR(sb.st_mode))
                d = what;
            else if (strlen(what) >= path_len)
                dt_fail(st, DT_EUSAGE, "checkpoint %s: path too long", what);
            else
                d = NULL;  /* a file: dt_ckpt_read validates it */
        } else if (!dir || !dir[0]) {
            dt_fail(st, DT_EUSAGE, "resuming from latest needs a checkpoint directory");
        }
        if (st->code == DT_OK && d) ncand = list_candidates(d, &cand, st);
        if (st->code == DT_OK && !d) snprintf(path_out, path_len, "%s", what);
    }
    if (agree(st, comm) != DT_OK) goto out;
    DT_MPI_CHECK(MPI_Bcast(&ncand, 1, MPI_INT, 0, comm));
    if (ncand == 0) {  /* an explicit file */
        DT_MPI_CHECK(MPI_Bcast(path_out, (int)(strlen(what) + 1), MPI_CHAR, 0, comm));
        goto out;
    }
    ckpt_pack_bcast(&cand, rank, comm);
    for (int i = 0; i < ncand && found < 0; i++) {
        const char *p = ckpt_unpack_str(&cand);
        dt_status one;
        if (validate_light(comm, p, &one) == DT_OK) {
            found = i;
            if (strlen(p) >= path_len)
                dt_fail(st, DT_ERUNTIME, "checkpoint %s: the name does not fit the caller's buffer", p);
            else
                snprintf(path_out, path_len, "%s", p);
        } else {
            if (rank == 0) fprintf(stderr, "dtrain: note: checkpoint %s skipped: %s\n", p, why_only(one.msg, p));
            if (!first_name[0]) {
                snprintf(first_name, sizeof first_name, "%s", p);
                snprintf(first_why, sizeof first_why, "%s", one.msg);
            }
        }
    }
    if (found < 0) {
        /* Only rank 0 knows which directory; agree spreads its message. */
        const char *msg = why_only(first_why, first_name);
        if (rank == 0)
            dt_fail(st, DT_EINPUT, "checkpoint directory %s: no valid checkpoint; the newest, %s: %s", d, first_name,
                    msg);
        agree(st, comm);
    }
out:
    free(cand.buf);
    ckpt_h5_restore(&q);
    return st->code;
}

int dt_ckpt_resolve(MPI_Comm comm, const char *what, const char *dir, char *path_out, size_t path_len,
                    dt_status *st)
{
    dt_h5_lock(); /* runtime/h5lock.h */
    int rc = resolve_locked(comm, what, dir, path_out, path_len, st);
    dt_h5_unlock();
    return rc;
}
