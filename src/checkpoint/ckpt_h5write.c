/* ckpt_h5write.c: the checkpoint's HDF5 file, written collectively by all
 * ranks (the layout is in checkpoint.h), and this rank's share of the state
 * checksum, hashed on a helper thread while the writes wait for the disk.
 *
 * The one thing to know: metadata (groups, attributes, dataset creation) is
 * created identically on every rank from the agreed view and flushed before
 * any data, so that a data write failing on a full disk leaves HDF5 nothing
 * to flush at close (see ckpt_write_file). */
#define _GNU_SOURCE
#include "config.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt_internal.h"
#include "runtime/checks.h"

static herr_t put_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *val)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, mtype, val);
    if (a >= 0 && H5Aclose(a) < 0) r = -1;
    H5Sclose(sp);
    return r;
}

static herr_t put_str(hid_t obj, const char *name, const char *s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(s) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    herr_t r = put_attr(obj, name, t, t, s);
    H5Tclose(t);
    return r;
}

static herr_t put_i32(hid_t o, const char *n, int v) { return put_attr(o, n, H5T_STD_I32LE, H5T_NATIVE_INT, &v); }
static herr_t put_i64(hid_t o, const char *n, long long v) { return put_attr(o, n, H5T_STD_I64LE, H5T_NATIVE_LLONG, &v); }
static herr_t put_u64(hid_t o, const char *n, uint64_t v) { return put_attr(o, n, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v); }
static herr_t put_f32(hid_t o, const char *n, float v) { return put_attr(o, n, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &v); }
static herr_t put_f64(hid_t o, const char *n, double v) { return put_attr(o, n, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v); }

/* One dataset to write, in checksum order. */
struct wds {
    hid_t id;
    char name[2 * MAX_NAME + 32];
    uint64_t count;       /* values */
    size_t esz;
    hid_t mtype;
    const void *src;      /* replicated: rank 0's values */
    int slot;             /* >= 0: this rank's part of slot `slot` */
};

struct wfile {
    hid_t f, gcpl, dcpl, dxpl;
    hid_t groups[16];
    int ngroups;
    struct wds *ds;
    int nds;
};

static hid_t add_group(struct wfile *w, hid_t parent, const char *name)
{
    hid_t g = H5Gcreate2(parent, name, H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
    if (g >= 0 && w->ngroups < (int)(sizeof w->groups / sizeof w->groups[0])) w->groups[w->ngroups++] = g;
    return g;
}

static int add_dataset(struct wfile *w, hid_t parent, const char *name, const char *full, hid_t ftype, hid_t mtype,
                       size_t esz, int nd, const hsize_t *dims, const void *src, int slot)
{
    struct wds *d = &w->ds[w->nds];
    hid_t sp = H5Screate_simple(nd, dims, NULL);
    d->id = H5Dcreate2(parent, name, ftype, sp, H5P_DEFAULT, w->dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    if (d->id < 0) return -1;
    snprintf(d->name, sizeof d->name, "%s", full);
    d->count = 1;
    for (int i = 0; i < nd; i++) d->count *= dims[i];
    d->esz = esz;
    d->mtype = mtype;
    d->src = src;
    d->slot = slot;
    w->nds++;
    return 0;
}

/* Groups, attributes and datasets: the same calls with the same values on
 * every rank. A failure here is the same on every rank (nothing is written
 * yet but metadata), so the ranks stay in step. */
static int create_all(struct wfile *w, const struct view *v, const uint64_t (*rng_all)[4], int size,
                      const char *where, dt_status *st)
{
    const struct dt_ckpt *m = &v->m;
    hid_t root = w->f, g;
    char full[2 * MAX_NAME + 32];
#define TRY(call, ...) do { if ((call) < 0) return ckpt_h5_fail(st, DT_ERUNTIME, where, __VA_ARGS__); } while (0)
    TRY(put_str(root, "format", FORMAT_NAME), "writing attribute format");
    TRY(put_i32(root, "format_version", FORMAT_VERSION), "writing attribute format_version");
    TRY(put_str(root, "dtrain_version", m->dtrain_version), "writing attribute dtrain_version");
    TRY(put_str(root, "created", v->created), "writing attribute created");
    TRY(put_i32(root, "nranks", size), "writing attribute nranks");
    TRY(put_str(root, "strategy", m->strategy), "writing attribute strategy");
    TRY(put_str(root, "model", m->model), "writing attribute model");
    TRY(put_i32(root, "epoch", m->epoch), "writing attribute epoch");
    TRY(put_i64(root, "step", m->step), "writing attribute step");
    TRY(put_i64(root, "global_step", m->global_step), "writing attribute global_step");
    TRY(put_u64(root, "data_checksum", m->data_checksum), "writing attribute data_checksum");
    TRY(put_i32(root, "num_classes", m->classes), "writing attribute num_classes");
    if (m->tokenizer) TRY(put_str(root, "tokenizer", m->tokenizer), "writing attribute tokenizer");

    TRY(g = add_group(w, root, "config"), "creating group /config");
    for (int i = 0; i < m->nconfig; i++) TRY(put_str(g, v->keys[i], v->values[i]), "writing /config %s", v->keys[i]);
    TRY(put_str(g, "command_line", m->command_line), "writing /config command_line");

    hid_t model;
    TRY(model = add_group(w, root, "model"), "creating group /model");
    for (int l = 0; l < m->nlayers; l++) {
        const struct dt_ckpt_layer *L = &v->layers[l];
        hsize_t kd[4], bd[1] = {(hsize_t)L->bias_len};
        const float *kp = m->params ? m->params + L->offset : NULL;
        if (!has_params(L)) continue;
        for (int d = 0; d < L->kernel_rank; d++) kd[d] = (hsize_t)L->kernel_dims[d];
        /* Layer groups are not kept in w->groups (there may be many). */
        hid_t lg = H5Gcreate2(model, L->name, H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
        TRY(lg, "creating group /model/%s", L->name);
        snprintf(full, sizeof full, "/model/%s/kernel", L->name);
        int r = add_dataset(w, lg, "kernel", full, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, L->kernel_rank, kd, kp, -1);
        if (r < 0) {
            ckpt_h5_fail(st, DT_ERUNTIME, where, "creating %s", full);
            H5Gclose(lg);
            return st->code;
        }
        snprintf(full, sizeof full, "/model/%s/bias", L->name);
        r = add_dataset(w, lg, "bias", full, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 1, bd,
                        kp ? kp + kernel_count(L) : NULL, -1);
        if (r < 0) ckpt_h5_fail(st, DT_ERUNTIME, where, "creating %s", full);
        H5Gclose(lg);
        if (r < 0) return st->code;
    }

    TRY(g = add_group(w, root, "optimizer"), "creating group /optimizer");
    TRY(put_str(g, "name", m->optimizer), "writing /optimizer name");
    TRY(put_i64(g, "step", m->opt_step), "writing /optimizer step");
    TRY(put_f32(g, "lr", m->lr), "writing /optimizer lr");
    TRY(put_f32(g, "beta1", m->beta1), "writing /optimizer beta1");
    TRY(put_f32(g, "beta2", m->beta2), "writing /optimizer beta2");
    TRY(put_f32(g, "eps", m->eps), "writing /optimizer eps");
    TRY(put_f32(g, "momentum", m->momentum), "writing /optimizer momentum");
    for (int s = 0; s < m->nslots; s++) {
        hsize_t n[1] = {(hsize_t)m->nparams};
        snprintf(full, sizeof full, "/optimizer/%s", v->slot_names[s]);
        TRY(add_dataset(w, g, v->slot_names[s], full, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 1, n, NULL, s),
            "creating %s", full);
    }

    TRY(g = add_group(w, root, "rng"), "creating group /rng");
    hsize_t rd[2] = {(hsize_t)size, 4};
    TRY(add_dataset(w, g, "dropout", "/rng/dropout", H5T_STD_U64LE, H5T_NATIVE_UINT64, 8, 2, rd, rng_all, -1),
        "creating /rng/dropout");

    TRY(g = add_group(w, root, "progress"), "creating group /progress");
    TRY(put_f64(g, "loss_sum", m->progress[0]), "writing /progress loss_sum");
    TRY(put_f64(g, "correct", m->progress[1]), "writing /progress correct");
    TRY(put_f64(g, "samples", m->progress[2]), "writing /progress samples");

    TRY(g = add_group(w, root, "loss_scale"), "creating group /loss_scale");
    TRY(put_i32(g, "on", m->ls_on), "writing /loss_scale on");
    TRY(put_i32(g, "dynamic", m->ls_dynamic), "writing /loss_scale dynamic");
    TRY(put_f32(g, "scale", m->ls_scale), "writing /loss_scale scale");
    TRY(put_i32(g, "clean", m->ls_clean), "writing /loss_scale clean");
    TRY(put_i64(g, "skipped", m->ls_skipped), "writing /loss_scale skipped");

    hsize_t hd[2] = {(hsize_t)m->nhistory, DT_CKPT_HIST};
    TRY(add_dataset(w, root, "history", "/history", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 8, 2, hd, m->history, -1),
        "creating /history");

    TRY(g = add_group(w, root, "monitor"), "creating group /monitor");
    TRY(put_f64(g, "best", m->best), "writing /monitor best");
    TRY(put_i32(g, "best_epoch", m->best_epoch), "writing /monitor best_epoch");
    TRY(put_i32(g, "wait", m->wait), "writing /monitor wait");

    /* What rebuilds the model without its files: after /history in the checksum's order. */
    hsize_t td[1] = {(hsize_t)m->model_text_len};
    TRY(add_dataset(w, root, "model_text", "/model_text", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, 1, td, m->model_text, -1),
        "creating /model_text");
    if (m->tokenizer) {
        hsize_t md[2] = {(hsize_t)m->nmerges, 2};
        TRY(g = add_group(w, root, "tokenizer"), "creating group /tokenizer");
        TRY(add_dataset(w, g, "merges", "/tokenizer/merges", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, 2, md, m->merges, -1),
            "creating /tokenizer/merges");
    }
#undef TRY
    return DT_OK;
}

/* What this rank writes of d: rank 0 a replicated dataset whole, each
 * writer its slot part; NULL if nothing. */
static const void *my_part(const struct wds *d, const struct view *v, int rank, uint64_t *start, uint64_t *count)
{
    const struct dt_ckpt *m = &v->m;
    if (d->slot >= 0 && m->writer && m->len > 0) {
        *start = m->off;
        *count = m->len;
        return m->slots[d->slot];
    }
    if (d->slot < 0 && rank == 0 && d->count > 0) {
        *start = 0;
        *count = d->count;
        return d->src;
    }
    return NULL;
}

/* One collective write; ranks with nothing to write select nothing but
 * still take part. */
static int write_one(struct wfile *w, const struct wds *d, const struct view *v, int rank, const char *where,
                     dt_status *st)
{
    uint64_t start = 0, count = 0;
    const void *buf = my_part(d, v, rank, &start, &count);
    hid_t fsp = H5Dget_space(d->id), msp;
    if (buf) {
        hsize_t fs[1] = {start}, n[1] = {count};
        msp = H5Screate_simple(1, n, NULL);
        if (d->slot >= 0) H5Sselect_hyperslab(fsp, H5S_SELECT_SET, fs, NULL, n, NULL);
    } else {
        hsize_t one[1] = {1};
        msp = H5Screate_simple(1, one, NULL);
        H5Sselect_none(msp);
        H5Sselect_none(fsp);
    }
    static const char dummy[8];
    if (H5Dwrite(d->id, d->mtype, msp, fsp, w->dxpl, buf ? buf : dummy) < 0)
        ckpt_h5_fail(st, DT_ERUNTIME, where, "writing %s", d->name);
    H5Sclose(msp);
    H5Sclose(fsp);
    return st->code;
}

/* This rank's share of the state checksum, hashed on a helper thread while
 * the main thread writes and waits for the disk: the hashing costs about as
 * much as the writes (checked in bench/README-checkpoint.md). */
struct hasher {
    const struct wfile *w;
    const struct view *v;
    int rank;
    uint64_t *sum;  /* [w->nds] */
    pthread_t thread;
    int running;
};

static void *hash_mine(void *arg)
{
    struct hasher *h = arg;
    for (int k = 0; k < h->w->nds; k++) {
        uint64_t start = 0, count = 0;
        const void *buf = my_part(&h->w->ds[k], h->v, h->rank, &start, &count);
        if (buf) h->sum[k] = ckpt_hash_values(buf, (size_t)count, h->w->ds[k].esz, start);
    }
    return NULL;
}

int ckpt_write_file(const char *tmp, const char *where, const struct view *v, int rank, int size,
                      MPI_Comm comm, dt_status *st)
{
    const struct dt_ckpt *m = &v->m;
    struct wfile w;
    int nparam_layers = 0;
    memset(&w, 0, sizeof w);
    for (int l = 0; l < m->nlayers; l++) nparam_layers += has_params(&v->layers[l]);
    w.ds = dt_xcalloc((size_t)(2 * nparam_layers + m->nslots + 4), sizeof *w.ds);

    /* Every rank's dropout stream goes to rank 0, which writes them all. */
    uint64_t (*rng_all)[4] = dt_xcalloc((size_t)size, sizeof *rng_all);
    DT_MPI_CHECK(MPI_Gather(m->rng, 4, MPI_UINT64_T, rng_all, 4, MPI_UINT64_T, 0, comm));

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    DT_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    /* Creation order kept, so layers and slots read back in the order written. */
    w.gcpl = H5Pcreate(H5P_GROUP_CREATE);
    DT_H5_CHECK(H5Pset_link_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
    DT_H5_CHECK(H5Pset_attr_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
    DT_H5_CHECK(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
    DT_H5_CHECK(H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
    /* Contiguous, allocated at creation (parallel HDF5 requires it), never
     * filled: every value is written. H5Dget_offset then locates the data. */
    w.dcpl = H5Pcreate(H5P_DATASET_CREATE);
    DT_H5_CHECK(H5Pset_layout(w.dcpl, H5D_CONTIGUOUS));
    DT_H5_CHECK(H5Pset_alloc_time(w.dcpl, H5D_ALLOC_TIME_EARLY));
    DT_H5_CHECK(H5Pset_fill_time(w.dcpl, H5D_FILL_TIME_NEVER));
    w.dxpl = H5Pcreate(H5P_DATASET_XFER);
    DT_H5_CHECK(H5Pset_dxpl_mpio(w.dxpl, H5FD_MPIO_COLLECTIVE));

    w.f = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    if (w.f < 0) ckpt_h5_fail(st, DT_ERUNTIME, where, "cannot create %s", tmp);
    if (agree(st, comm) != DT_OK) goto out;
    uint64_t low, high;
    ckpt_size_bounds(v, size, &low, &high);
    if (rank == 0) ckpt_reserve(tmp, where, high, st);
    if (agree(st, comm) != DT_OK) goto close;

    /* Metadata goes to disk before the data, so that when a data write
     * fails (a full disk) H5Fclose has nothing left to write: in HDF5 1.10 a
     * close that fails frees the file but keeps its ID, and the library then
     * crashes at exit (fixed in 1.14.1, HDFGroup/hdf5#2291). */
    if (create_all(&w, v, (const uint64_t (*)[4])rng_all, size, where, st) == DT_OK &&
        H5Fflush(w.f, H5F_SCOPE_GLOBAL) < 0)
        ckpt_h5_fail(st, DT_ERUNTIME, where, "writing the metadata");
    if (agree(st, comm) != DT_OK) goto close;

    uint64_t *count = dt_xcalloc((size_t)w.nds, sizeof *count), *sum = dt_xcalloc((size_t)w.nds, sizeof *sum);
    struct hasher h = {&w, v, rank, sum, 0, 0};
    h.running = pthread_create(&h.thread, NULL, hash_mine, &h) == 0;
    for (int k = 0; k < w.nds; k++) {
        count[k] = w.ds[k].count;
        if (count[k] == 0) continue;  /* same on every rank */
        write_one(&w, &w.ds[k], v, rank, where, st);
        if (agree(st, comm) != DT_OK) break;
    }
    /* With MPI-IO a flush is MPI_File_sync on every rank: each rank's own
     * writes reach the disk, also on a parallel file system. The data first
     * (while the hashing finishes), then the checksum that vouches for it. */
    if (st->code == DT_OK && H5Fflush(w.f, H5F_SCOPE_GLOBAL) < 0)
        ckpt_h5_fail(st, DT_ERUNTIME, where, "flushing the data of %s", tmp);
    if (h.running) pthread_join(h.thread, NULL);
    else hash_mine(&h);
    if (agree(st, comm) == DT_OK) {
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum, w.nds, MPI_UINT64_T, MPI_SUM, comm));
        if (put_u64(w.f, "state_checksum", ckpt_chain(count, sum, w.nds)) < 0)
            ckpt_h5_fail(st, DT_ERUNTIME, where, "writing attribute state_checksum");
        else if (H5Fflush(w.f, H5F_SCOPE_GLOBAL) < 0)
            ckpt_h5_fail(st, DT_ERUNTIME, where, "flushing %s", tmp);
    }
    free(count);
    free(sum);
    agree(st, comm);
close:
    for (int k = 0; k < w.nds; k++) H5Dclose(w.ds[k].id);
    for (int k = 0; k < w.ngroups; k++) H5Gclose(w.groups[k]);
    if (H5Fclose(w.f) < 0 && st->code == DT_OK) ckpt_h5_fail(st, DT_ERUNTIME, where, "closing %s", tmp);
    agree(st, comm);
out:
    H5Pclose(fapl);
    H5Pclose(fcpl);
    H5Pclose(w.gcpl);
    H5Pclose(w.dcpl);
    H5Pclose(w.dxpl);
    free(rng_all);
    free(w.ds);
    return st->code;
}

