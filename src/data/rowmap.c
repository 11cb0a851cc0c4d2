/* rowmap.c: file offsets of a split's rows, and pread() of them (see rowmap.h).
 *
 * A user block (a file made with one) shifts everything: H5Dget_offset
 * counts it in, H5Dget_chunk_info_by_coord (1.10) does not. Since that is
 * the kind of detail a library version changes, each dataset's first and
 * last rows are read both ways at open, and a table that disagrees with
 * HDF5 is refused rather than trusted. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "data/rowmap.h"
#include "data/shard.h"

static const char *split_name[2] = {"train", "test"};

static uint64_t row_offset(const struct dt_rowmap_dset *d, int64_t r)
{
    if (!d->chunk_rows) return d->base + (uint64_t)r * d->row_bytes;
    return d->chunk[r / d->chunk_rows] + (uint64_t)(r % d->chunk_rows) * d->row_bytes;
}

static int pread_full(int fd, uint8_t *buf, size_t len, uint64_t off, const char *path, dt_status *st)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = pread(fd, buf + done, len - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return dt_fail(st, DT_ERUNTIME, "%s: reading %zu bytes at offset %llu: %s", path, len,
                           (unsigned long long)off, strerror(errno));
        if (k == 0)
            return dt_fail(st, DT_ERUNTIME, "%s: reading %zu bytes at offset %llu: the file ends at %llu "
                           "(truncated while training?)", path, len, (unsigned long long)off,
                           (unsigned long long)(off + done));
        done += (size_t)k;
    }
    return DT_OK;
}

/* Row r through HDF5 and through the table agree. */
static int row_checks_out(const struct dt_rowmap_dset *d, hid_t dset, int fd, int64_t r)
{
    hid_t space = H5Dget_space(dset);
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dims[8] = {0}, start[8] = {(hsize_t)r}, count[8];
    H5Sget_simple_extent_dims(space, dims, NULL);
    for (int k = 0; k < nd; k++) count[k] = k ? dims[k] : 1;
    hsize_t len = d->row_bytes;
    hid_t mspace = H5Screate_simple(1, &len, NULL);
    uint8_t *a = dt_xmalloc(2 * d->row_bytes), *b = a + d->row_bytes;
    int ok = H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
             H5Dread(dset, H5T_NATIVE_UINT8, mspace, space, H5P_DEFAULT, a) >= 0 &&
             pread(fd, b, d->row_bytes, (off_t)row_offset(d, r)) == (ssize_t)d->row_bytes &&
             memcmp(a, b, d->row_bytes) == 0;
    free(a);
    H5Sclose(mspace);
    H5Sclose(space);
    return ok;
}

/* Fill d for one dataset of rows rows of row_bytes; or say why not. */
static int map_dset(struct dt_rowmap_dset *d, hid_t dset, hsize_t userblock, int64_t rows, size_t row_bytes,
                    const char *path, const char *name, dt_status *st)
{
    memset(d, 0, sizeof *d);
    d->row_bytes = row_bytes;
    d->rows = rows;
    hid_t dcpl = H5Dget_create_plist(dset);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int rc = DT_OK;
    if (layout == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(dset);
        if (H5Pget_external_count(dcpl) > 0)
            rc = dt_fail(st, DT_EINPUT, "%s: %s is stored in external files", path, name);
        else if (rows > 0 && a == HADDR_UNDEF)
            rc = dt_fail(st, DT_EINPUT, "%s: %s has no storage allocated", path, name);
        else
            d->base = (uint64_t)a; /* H5Dget_offset counts the user block in */
    } else if (layout == H5D_CHUNKED) {
#if H5_VERSION_GE(1, 10, 5)
        hsize_t cdims[8] = {0}, dims[8] = {0};
        hid_t space = H5Dget_space(dset);
        int nd = H5Sget_simple_extent_ndims(space);
        H5Sget_simple_extent_dims(space, dims, NULL);
        H5Sclose(space);
        int cnd = H5Pget_chunk(dcpl, 8, cdims);
        int whole_rows = cnd == nd && cdims[0] > 0;
        for (int k = 1; k < nd && whole_rows; k++) whole_rows = cdims[k] == dims[k];
        if (H5Pget_nfilters(dcpl) > 0)
            rc = dt_fail(st, DT_EINPUT, "%s: %s is chunked with filters (compressed)", path, name);
        else if (!whole_rows)
            rc = dt_fail(st, DT_EINPUT, "%s: %s has chunks that split its rows", path, name);
        else {
            d->chunk_rows = (int64_t)cdims[0];
            int64_t nchunks = (rows + d->chunk_rows - 1) / d->chunk_rows;
            d->chunk = dt_xcalloc((size_t)(nchunks ? nchunks : 1), sizeof(uint64_t));
            for (int64_t c = 0; c < nchunks && rc == DT_OK; c++) {
                hsize_t at[8] = {(hsize_t)(c * d->chunk_rows)}, size = 0;
                haddr_t a = HADDR_UNDEF;
                unsigned mask = 0;
                /* by coordinate: a B-tree lookup, where H5Dget_chunk_info walks the index each time */
                if (H5Dget_chunk_info_by_coord(dset, at, &mask, &a, &size) < 0 || a == HADDR_UNDEF)
                    rc = dt_fail(st, DT_EINPUT, "%s: %s has a chunk at row %lld that was never written",
                                 path, name, (long long)at[0]);
                else if (mask != 0 || size != (hsize_t)d->chunk_rows * row_bytes)
                    rc = dt_fail(st, DT_EINPUT, "%s: %s has a chunk at row %lld stored filtered", path, name,
                                 (long long)at[0]);
                else
                    d->chunk[c] = (uint64_t)a + (uint64_t)userblock;
            }
        }
#else
        rc = dt_fail(st, DT_EINPUT, "%s: %s is chunked, and chunk addresses need HDF5 1.10.5 or later", path, name);
#endif
    } else {
        rc = dt_fail(st, DT_EINPUT, "%s: %s has %s storage", path, name,
                     layout == H5D_COMPACT ? "compact (in the object header)" : "virtual or unknown");
    }
    H5Pclose(dcpl);
    if (rc != DT_OK) {
        free(d->chunk);
        d->chunk = NULL;
    }
    return rc;
}

/* Tokens i..i+n-1 through HDF5 (as stored, the file's integer type) and through the table agree. */
static int tokens_check_out(const struct dt_rowmap_dset *d, hid_t dset, int fd, int64_t i, hsize_t n)
{
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset), mspace = H5Screate_simple(1, &n, NULL);
    hsize_t start = (hsize_t)i;
    size_t bytes = (size_t)n * d->row_bytes;
    uint8_t *a = dt_xmalloc(2 * bytes), *b = a + bytes;
    int ok = H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, NULL, &n, NULL) >= 0 &&
             H5Dread(dset, type, mspace, space, H5P_DEFAULT, a) >= 0 &&
             pread(fd, b, bytes, (off_t)row_offset(d, i)) == (ssize_t)bytes && memcmp(a, b, bytes) == 0;
    free(a);
    H5Sclose(mspace);
    H5Tclose(type);
    H5Sclose(space);
    return ok;
}

/* A token dataset's streams: contiguous (a window may cross any chunk), checked at both ends. */
static int open_tokens(struct dt_rowmap *m, const struct dt_dataset *ds, int split, dt_status *st)
{
    const struct dt_split *sp = &ds->split[split];
    char name[32];
    snprintf(name, sizeof name, "/%s/tokens", split_name[split]);
    m->block = ds->block;
    int rc = DT_OK;
    for (int f = 0; f < ds->nfiles && rc == DT_OK; f++) {
        const int64_t n = sp->ntokens[f];
        hid_t type = H5Dget_type(sp->images[f]), dcpl = H5Dget_create_plist(sp->images[f]);
        m->tsize = H5Tget_size(type);
        int contiguous = H5Pget_layout(dcpl) == H5D_CONTIGUOUS, native = H5Tget_order(type) == H5Tget_order(H5T_NATIVE_INT32);
        H5Tclose(type);
        H5Pclose(dcpl);
        if (!native) {
            rc = dt_fail(st, DT_EINPUT, "%s: %s is stored in the other byte order", ds->paths[f], name);
            break;
        }
        if (!contiguous) {
            rc = dt_fail(st, DT_EINPUT, "%s: %s is chunked (windows cross its chunks)", ds->paths[f], name);
            break;
        }
        rc = map_dset(&m->images[f], sp->images[f], 0, n, m->tsize, ds->paths[f], name, st);
        if (rc == DT_OK && (m->fd[f] = open(ds->paths[f], O_RDONLY | O_CLOEXEC)) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: cannot open for reading: %s", ds->paths[f], strerror(errno));
        const hsize_t k = (hsize_t)(n < ds->block + 1 ? n : ds->block + 1);
        if (rc == DT_OK && n > 0 &&
            (!tokens_check_out(&m->images[f], sp->images[f], m->fd[f], 0, k) ||
             !tokens_check_out(&m->images[f], sp->images[f], m->fd[f], n - (int64_t)k, k)))
            rc = dt_fail(st, DT_EINPUT, "%s: the file offsets HDF5 gives for %s do not match what it reads",
                         ds->paths[f], name);
    }
    if (rc != DT_OK) dt_rowmap_close(m);
    return rc;
}

/* File f's labels, every row, into label_rows[f]: a read per chunk (one
 * for contiguous storage). */
static int read_labels(struct dt_rowmap *m, int f, int64_t rows, dt_status *st)
{
    const struct dt_rowmap_dset *d = &m->labels[f];
    m->label_rows[f] = dt_xmalloc(rows > 0 ? (size_t)rows : 1);
    for (int64_t r = 0; r < rows;) {
        int64_t k = d->chunk_rows ? d->chunk_rows - r % d->chunk_rows : rows - r;
        if (k > rows - r) k = rows - r;
        if (pread_full(m->fd[f], m->label_rows[f] + r, (size_t)k, row_offset(d, r), m->paths[f], st) != DT_OK)
            return st->code;
        r += k;
    }
    return DT_OK;
}

int dt_rowmap_open(struct dt_rowmap *m, const struct dt_dataset *ds, int split, dt_status *st)
{
    const struct dt_split *sp = &ds->split[split];
    memset(m, 0, sizeof *m);
    if (ds->synthetic) return dt_fail(st, DT_EINPUT, "--synthetic: generated rows have no file");
    m->nfiles = ds->nfiles;
    m->file_start = sp->file_start;
    m->paths = ds->paths;
    m->row = dt_shape_size(ds->shape);
    m->fd = dt_xcalloc((size_t)ds->nfiles, sizeof(int));
    m->images = dt_xcalloc((size_t)ds->nfiles, sizeof *m->images);
    m->labels = dt_xcalloc((size_t)ds->nfiles, sizeof *m->labels);
    m->label_rows = dt_xcalloc((size_t)ds->nfiles, sizeof *m->label_rows);
    for (int f = 0; f < ds->nfiles; f++) m->fd[f] = -1;
    if (ds->tokens) return open_tokens(m, ds, split, st);
    int rc = DT_OK;
    for (int f = 0; f < ds->nfiles && rc == DT_OK; f++) {
        int64_t rows = sp->file_start[f + 1] - sp->file_start[f];
        char iname[32], lname[32];
        hsize_t userblock = 0;
        hid_t fcpl = H5Fget_create_plist(ds->files[f]);
        DT_H5_CHECK(H5Pget_userblock(fcpl, &userblock));
        H5Pclose(fcpl);
        snprintf(iname, sizeof iname, "/%s/images", split_name[split]);
        snprintf(lname, sizeof lname, "/%s/labels", split_name[split]);
        rc = map_dset(&m->images[f], sp->images[f], userblock, rows, m->row, ds->paths[f], iname, st);
        if (rc == DT_OK) rc = map_dset(&m->labels[f], sp->labels[f], userblock, rows, 1, ds->paths[f], lname, st);
        if (rc == DT_OK && (m->fd[f] = open(ds->paths[f], O_RDONLY | O_CLOEXEC)) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: cannot open for reading: %s", ds->paths[f], strerror(errno));
        for (int k = 0; k < 2 && rc == DT_OK && rows > 0; k++) { /* first and last rows, both datasets */
            int64_t r = k ? rows - 1 : 0;
            if (!row_checks_out(&m->images[f], sp->images[f], m->fd[f], r) ||
                !row_checks_out(&m->labels[f], sp->labels[f], m->fd[f], r))
                rc = dt_fail(st, DT_EINPUT, "%s: the file offsets HDF5 gives for %s or %s do not match what it "
                             "reads at row %lld", ds->paths[f], iname, lname, (long long)r);
        }
        if (rc == DT_OK) rc = read_labels(m, f, rows, st);
    }
    if (rc != DT_OK) dt_rowmap_close(m);
    return rc;
}


/* Rows r and r+1 are adjacent in the file (same chunk, or contiguous). */
static int adjacent(const struct dt_rowmap_dset *d, int64_t r)
{
    return !d->chunk_rows || (r + 1) % d->chunk_rows != 0;
}

struct pos { int64_t g; int at; };

static int by_g(const void *a, const void *b)
{
    int64_t x = ((const struct pos *)a)->g, y = ((const struct pos *)b)->g;
    return (x > y) - (x < y);
}

size_t dt_rowmap_scratch_bytes(int n)
{
    return (size_t)(n > 0 ? n : 1) * sizeof(struct pos);
}

/* Token windows: T + 1 stored tokens at token r T, read into the end of
 * the int32 row and widened from its start (a later token is never
 * overwritten before it is read). */
static int read_windows(const struct dt_rowmap *m, const int64_t *idx, int n, uint8_t *rows, uint8_t *labels,
                        dt_status *st)
{
    const size_t k = (size_t)m->block + 1, stored = k * m->tsize;
    for (int i = 0; i < n; i++) {
        int64_t r;
        int f = dt_shard_locate(m->file_start, m->nfiles, idx[i], &r);
        uint8_t *row = rows + (size_t)i * m->row;
        if (pread_full(m->fd[f], row + m->row - stored, stored, row_offset(&m->images[f], r * m->block), m->paths[f],
                       st) != DT_OK)
            return st->code;
        if (m->tsize == 2) {
            const uint8_t *src = row + m->row - stored;
            for (size_t j = 0; j < k; j++) {
                uint16_t v;
                memcpy(&v, src + 2 * j, 2);
                int32_t w = v;
                memcpy(row + 4 * j, &w, 4);
            }
        }
        labels[i] = 0;
    }
    return DT_OK;
}

int dt_rowmap_read(const struct dt_rowmap *m, const int64_t *idx, int n, uint8_t *images, uint8_t *labels,
                   void *scratch, dt_status *st)
{
    if (m->block) return read_windows(m, idx, n, images, labels, st);
    struct pos *p = scratch;
    for (int i = 0; i < n; i++) p[i] = (struct pos){idx[i], i};
    qsort(p, (size_t)n, sizeof *p, by_g); /* file order: fewer seeks, and runs to merge */
    for (int i = 0; i < n;) {
        int64_t r;
        int f = dt_shard_locate(m->file_start, m->nfiles, p[i].g, &r);
        /* A run: consecutive rows of one file that go to consecutive places. */
        int j = i + 1;
        while (j < n && p[j].g == p[j - 1].g + 1 && p[j].at == p[j - 1].at + 1 && p[j].g < m->file_start[f + 1] &&
               adjacent(&m->images[f], r + (j - 1 - i)))
            j++;
        size_t k = (size_t)(j - i);
        if (pread_full(m->fd[f], images + (size_t)p[i].at * m->row, k * m->row, row_offset(&m->images[f], r),
                       m->paths[f], st) != DT_OK)
            return st->code;
        memcpy(labels + p[i].at, m->label_rows[f] + r, k);
        i = j;
    }
    return DT_OK;
}

void dt_rowmap_close(struct dt_rowmap *m)
{
    for (int f = 0; f < m->nfiles; f++) {
        if (m->fd && m->fd[f] >= 0) close(m->fd[f]);
        if (m->images) free(m->images[f].chunk);
        if (m->labels) free(m->labels[f].chunk);
        if (m->label_rows) free(m->label_rows[f]);
    }
    free(m->label_rows);
    free(m->fd);
    free(m->images);
    free(m->labels);
    memset(m, 0, sizeof *m);
}
