/* ckpt_read.c: dt_ckpt_read, a checkpoint into the caller's state: the
 * file's layout checked against the model, the attributes, the parameters
 * (read by rank 0 and broadcast), each rank's part of the optimizer slots,
 * the dropout streams and history; and the state checksum over what was read.
 *
 * The one thing to know: the ranks may split the slots differently from
 * the writers (another rank count, another strategy), so the checksum of a
 * slot is summed from what the ranks happened to read, each value once
 * (hash_slot), and values nobody read are read again only for hashing. */
#define _GNU_SOURCE
#include "config.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt_internal.h"
#include "runtime/checks.h"
#include "runtime/h5lock.h"

static int find_slot(const struct dlist *dl, const char *name)
{
    for (int k = 0; k < dl->n; k++)
        if (dl->d[k].kind == D_SLOT && !strcmp(dl->d[k].name, name)) return k;
    return -1;
}

/* The file's layers and slots against the caller's model. */
static int check_layout(const struct dlist *dl, const struct dt_ckpt *c, const char *path, dt_status *st)
{
    int64_t total = 0;
    int k = 0, nmine = 0;
    char a[96], b[96], slotlist[2 * MAX_NAME] = "";
    for (int l = 0; l < c->nlayers; l++) nmine += has_params(&c->layers[l]);
    for (int l = 0; l < c->nlayers; l++) {
        const struct dt_ckpt_layer *L = &c->layers[l];
        if (!has_params(L)) continue;
        if (k / 2 >= dl->nlayers)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: the file has %d layers with parameters, the model %d "
                           "(the model's %s is not in the file)", path, dl->nlayers, nmine, L->name);
        const struct dent *ker = &dl->d[k], *bias = &dl->d[k + 1];
        if (strcmp(ker->name, L->name) != 0)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: layer %d with parameters is %s in the file but %s in the "
                           "model", path, k / 2 + 1, ker->name, L->name);
        hsize_t want[4];
        for (int d = 0; d < L->kernel_rank; d++) want[d] = (hsize_t)L->kernel_dims[d];
        int same = ker->nd == L->kernel_rank;
        for (int d = 0; same && d < L->kernel_rank; d++) same = ker->dims[d] == want[d];
        if (!same) {
            ckpt_format_dims(a, sizeof a, ker->nd, ker->dims);
            ckpt_format_dims(b, sizeof b, L->kernel_rank, want);
            return dt_fail(st, DT_EINPUT, "checkpoint %s: layer %s: kernel shape %s in the file, %s in the model",
                           path, L->name, a, b);
        }
        if (bias->dims[0] != (hsize_t)L->bias_len)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: layer %s: bias shape [%llu] in the file, [%lld] in the "
                           "model", path, L->name, (unsigned long long)bias->dims[0], (long long)L->bias_len);
        if ((int64_t)L->offset + kernel_count(L) + L->bias_len > (int64_t)(c->nparams + c->nbuffers))
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: layer %s ends past the model's %zu parameters", path,
                           L->name, c->nparams + c->nbuffers);
        total += kernel_count(L) + L->bias_len;
        k += 2;
    }
    if (k / 2 != dl->nlayers)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: the file has %d layers with parameters, the model %d (the "
                       "file's %s is not in the model)", path, dl->nlayers, nmine, dl->d[k].name);
    if (total != (int64_t)(c->nparams + c->nbuffers))
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: the model's layers hold %lld parameters, its block %zu",
                       path, (long long)total, c->nparams + c->nbuffers);
    for (int j = 0; j < dl->n; j++)
        if (dl->d[j].kind == D_SLOT) {
            size_t n = strlen(slotlist);
            snprintf(slotlist + n, sizeof slotlist - n, "%s%s", n ? ", " : "", dl->d[j].name);
        }
    if (c->nslots < 0 || c->nslots > 2)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: %d optimizer slots asked for", path, c->nslots);
    for (int s = 0; s < c->nslots; s++) {
        int j = c->slot_names[s] ? find_slot(dl, c->slot_names[s]) : -1;
        if (j < 0)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: no optimizer slot /optimizer/%s (the file has: %s); it was "
                           "written with another optimizer", path, c->slot_names[s] ? c->slot_names[s] : "(null)",
                           slotlist[0] ? slotlist : "none");
        if (dl->d[j].count != c->nparams)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: /optimizer/%s has %llu values, the model %zu parameters",
                           path, c->slot_names[s], (unsigned long long)dl->d[j].count, c->nparams);
    }
    return DT_OK;
}

/* Storage behind the strings read: one block that starts with the
 * config_keys and config_values arrays, so dt_ckpt_release frees it through
 * config_keys. */
struct strread {
    char *version, *strategy, *model, *command_line, *optimizer;
    char **keys, **values;
    int n, cap;
};

static herr_t collect_config(hid_t obj, const char *name, const H5A_info_t *info, void *data)
{
    struct strread *s = data;
    (void)info;
    if (!strcmp(name, "command_line")) return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    char *v = a >= 0 ? ckpt_read_str_attr(a) : NULL;
    if (a >= 0) H5Aclose(a);
    if (!v) return -1;
    if (s->n == s->cap) {
        s->cap = 2 * s->cap + 16;
        char **nk = realloc(s->keys, (size_t)s->cap * sizeof *nk), **nv;
        if (!nk) DT_DIE("out of memory reading /config");
        s->keys = nk;
        nv = realloc(s->values, (size_t)s->cap * sizeof *nv);
        if (!nv) DT_DIE("out of memory reading /config");
        s->values = nv;
    }
    s->keys[s->n] = strdup(name);
    s->values[s->n++] = v;
    return 0;
}

static void strread_free(struct strread *s)
{
    free(s->version);
    free(s->strategy);
    free(s->model);
    free(s->command_line);
    free(s->optimizer);
    for (int i = 0; i < s->n; i++) {
        free(s->keys[i]);
        free(s->values[i]);
    }
    free(s->keys);
    free(s->values);
}

static void strread_install(struct strread *s, struct dt_ckpt *c)
{
    size_t bytes = 0;
    const char *singles[5] = {s->version, s->strategy, s->model, s->command_line, s->optimizer};
    for (int i = 0; i < 5; i++) bytes += strlen(singles[i]) + 1;
    for (int i = 0; i < s->n; i++) bytes += strlen(s->keys[i]) + strlen(s->values[i]) + 2;
    const char **ptrs = dt_xmalloc(2 * ((size_t)s->n + 1) * sizeof *ptrs + bytes);
    char *at = (char *)(ptrs + 2 * ((size_t)s->n + 1));
    const char *out[5];
    for (int i = 0; i < 5; i++) {
        out[i] = strcpy(at, singles[i]);
        at += strlen(at) + 1;
    }
    for (int i = 0; i < s->n; i++) {
        ptrs[i] = strcpy(at, s->keys[i]);
        at += strlen(at) + 1;
        ptrs[s->n + 1 + i] = strcpy(at, s->values[i]);
        at += strlen(at) + 1;
    }
    ptrs[s->n] = ptrs[2 * s->n + 1] = NULL;
    c->config_keys = ptrs;
    c->config_values = ptrs + s->n + 1;
    c->nconfig = s->n;
    c->dtrain_version = out[0];
    c->strategy = out[1];
    c->model = out[2];
    c->command_line = out[3];
    c->optimizer = out[4];
}

/* Attributes (every rank reads its own copy). */
static int read_meta(hid_t f, struct dt_ckpt *c, struct strread *s, const char *path, dt_status *st)
{
    long long step = 0, global_step = 0, opt_step = 0, skipped = 0;
    struct { const char *obj, *name; hid_t type; void *v; } num[] = {
        {"/", "nranks", H5T_NATIVE_INT, &c->nranks},
        {"/", "epoch", H5T_NATIVE_INT, &c->epoch},
        {"/", "step", H5T_NATIVE_LLONG, &step},
        {"/", "global_step", H5T_NATIVE_LLONG, &global_step},
        {"/", "data_checksum", H5T_NATIVE_UINT64, &c->data_checksum},
        {"/optimizer", "step", H5T_NATIVE_LLONG, &opt_step},
        {"/optimizer", "lr", H5T_NATIVE_FLOAT, &c->lr},
        {"/optimizer", "beta1", H5T_NATIVE_FLOAT, &c->beta1},
        {"/optimizer", "beta2", H5T_NATIVE_FLOAT, &c->beta2},
        {"/optimizer", "eps", H5T_NATIVE_FLOAT, &c->eps},
        {"/optimizer", "momentum", H5T_NATIVE_FLOAT, &c->momentum},
        {"/progress", "loss_sum", H5T_NATIVE_DOUBLE, &c->progress[0]},
        {"/progress", "correct", H5T_NATIVE_DOUBLE, &c->progress[1]},
        {"/progress", "samples", H5T_NATIVE_DOUBLE, &c->progress[2]},
        {"/loss_scale", "on", H5T_NATIVE_INT, &c->ls_on},
        {"/loss_scale", "dynamic", H5T_NATIVE_INT, &c->ls_dynamic},
        {"/loss_scale", "scale", H5T_NATIVE_FLOAT, &c->ls_scale},
        {"/loss_scale", "clean", H5T_NATIVE_INT, &c->ls_clean},
        {"/loss_scale", "skipped", H5T_NATIVE_LLONG, &skipped},
        {"/monitor", "best", H5T_NATIVE_DOUBLE, &c->best},
        {"/monitor", "best_epoch", H5T_NATIVE_INT, &c->best_epoch},
        {"/monitor", "wait", H5T_NATIVE_INT, &c->wait},
    };
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        if (ckpt_read_attr(f, num[i].obj, num[i].name, num[i].type, num[i].v) < 0)
            return dt_fail(st, DT_EINPUT, "checkpoint %s: attribute %s of %s is missing or not a number", path,
                           num[i].name, num[i].obj);
    if (c->nranks < 1 || c->epoch < 0 || step < 0 || global_step < 0 || opt_step < 0 || c->best_epoch < -1 ||
        c->wait < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: a negative count in the root attributes (nranks %d, epoch %d, "
                       "step %lld, global_step %lld) or in /optimizer, /monitor", path, c->nranks, c->epoch, step,
                       global_step);
    c->step = step;
    c->global_step = (long)global_step;
    c->opt_step = (long)opt_step;
    c->ls_skipped = (long)skipped;
    struct { const char *obj, *name; char **v; } strs[] = {
        {"/", "dtrain_version", &s->version},
        {"/", "strategy", &s->strategy},
        {"/", "model", &s->model},
        {"/config", "command_line", &s->command_line},
        {"/optimizer", "name", &s->optimizer},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!(*strs[i].v = ckpt_read_str(f, strs[i].obj, strs[i].name)))
            return dt_fail(st, DT_EINPUT, "checkpoint %s: attribute %s of %s is missing or not text", path,
                           strs[i].name, strs[i].obj);
    hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
    hid_t gcpl = g >= 0 ? H5Gget_create_plist(g) : -1;
    unsigned flags = 0;
    if (gcpl >= 0) {
        H5Pget_attr_creation_order(gcpl, &flags);
        H5Pclose(gcpl);
    }
    herr_t r = g < 0 ? -1 : H5Aiterate2(g, flags & H5P_CRT_ORDER_INDEXED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME,
                                        H5_ITER_INC, NULL, collect_config, s);
    if (g >= 0) H5Gclose(g);
    if (r < 0) return dt_fail(st, DT_EINPUT, "checkpoint %s: /config is missing or holds a value that is not text", path);
    return DT_OK;
}

/* Intervals [lo, hi) of the slots, for deciding who hashes what. */
struct iv {
    uint64_t lo, hi;
};

static int iv_cmp(const void *a, const void *b)
{
    const struct iv *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges v in place; returns the new count. */
static int iv_merge(struct iv *v, int n)
{
    int m = 0;
    qsort(v, (size_t)n, sizeof *v, iv_cmp);
    for (int i = 0; i < n; i++) {
        if (v[i].hi <= v[i].lo) continue;
        if (m && v[i].lo <= v[m - 1].hi) {
            if (v[i].hi > v[m - 1].hi) v[m - 1].hi = v[i].hi;
        } else {
            v[m++] = v[i];
        }
    }
    return m;
}

/* [lo, hi) minus the merged intervals cut; appends the pieces to out. */
static int iv_subtract(uint64_t lo, uint64_t hi, const struct iv *cut, int ncut, struct iv *out)
{
    int n = 0;
    for (int i = 0; i < ncut && lo < hi; i++) {
        if (cut[i].hi <= lo) continue;
        if (cut[i].lo >= hi) break;
        if (cut[i].lo > lo) out[n++] = (struct iv){lo, cut[i].lo};
        lo = cut[i].hi;
    }
    if (lo < hi) out[n++] = (struct iv){lo, hi};
    return n;
}

/* Sum of one slot dataset as read: each value hashed once, by the lowest
 * rank holding it; values no rank read (a gap in the split) are read again
 * here, shared out over the ranks. */
static int hash_slot(hid_t f, const struct dent *e, const float *mine, const struct part *all, int rank, int size,
                     uint64_t *sum, const char *path, dt_status *st)
{
    struct iv *v = dt_xmalloc(((size_t)size + 2) * sizeof *v), *piece = dt_xmalloc(((size_t)size + 2) * sizeof *piece);
    int n = 0;
    for (int r = 0; r < rank; r++) v[n++] = (struct iv){all[r].off, all[r].off + all[r].len};
    n = iv_merge(v, n);
    if (mine) {
        int np = iv_subtract(all[rank].off, all[rank].off + all[rank].len, v, n, piece);
        for (int i = 0; i < np; i++)
            *sum += ckpt_hash_values(mine + (piece[i].lo - all[rank].off), (size_t)(piece[i].hi - piece[i].lo), 4,
                                piece[i].lo);
    }
    n = 0;
    for (int r = 0; r < size; r++) v[n++] = (struct iv){all[r].off, all[r].off + all[r].len};
    n = iv_merge(v, n);
    int ngap = iv_subtract(0, e->count, v, n, piece);
    uint64_t total = 0;
    for (int i = 0; i < ngap; i++) total += piece[i].hi - piece[i].lo;
    /* This rank's share of the gaps, [a, b) in gap-concatenated terms. */
    uint64_t a = total * (uint64_t)rank / (uint64_t)size, b = total * (uint64_t)(rank + 1) / (uint64_t)size, at = 0;
    for (int i = 0; i < ngap && st->code == DT_OK; i++) {
        uint64_t len = piece[i].hi - piece[i].lo, lo = a > at ? a - at : 0, hi = b - at < len ? b - at : len;
        if (b > at && lo < hi) ckpt_hash_rows(f, e, piece[i].lo + lo, piece[i].lo + hi, sum, path, st);
        at += len;
    }
    free(v);
    free(piece);
    return st->code;
}

/* Parameters: rank 0 reads them once and broadcasts (P ranks reading the
 * same bytes from a shared file system would cost P reads). */
static int read_params(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, MPI_Comm comm, uint64_t *sum,
                       const char *path, dt_status *st)
{
    if (rank == 0) {
        int k = 0;
        for (int l = 0; l < c->nlayers && st->code == DT_OK; l++) {
            const struct dt_ckpt_layer *L = &c->layers[l];
            if (!has_params(L)) continue;
            float *dst[2] = {c->params + L->offset, c->params + L->offset + kernel_count(L)};
            for (int j = 0; j < 2 && st->code == DT_OK; j++, k++) {
                const struct dent *e = &dl->d[k];
                if (e->count == 0) continue;
                hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
                if (d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst[j]) < 0)
                    ckpt_h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
                else
                    sum[k] += ckpt_hash_values(dst[j], (size_t)e->count, 4, 0);
                if (d >= 0) H5Dclose(d);
            }
        }
    }
    if (agree(st, comm) != DT_OK) return st->code;
    if (c->nparams + c->nbuffers) ckpt_bcast_big(c->params, c->nparams + c->nbuffers, MPI_FLOAT, sizeof(float), comm);
    return DT_OK;
}

/* This rank's part [c->off, c->off + c->len) of slot e into buf, collectively
 * (a rank with no part selects nothing but takes part). */
static int read_slot_part(hid_t f, const struct dent *e, const struct dt_ckpt *c, float *buf, hid_t dxpl,
                          const char *path, dt_status *st)
{
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0) {
        ckpt_h5_fail(st, DT_EINPUT, path, "cannot open %s", e->path);
    } else if (e->count > 0) {
        hid_t fsp = H5Dget_space(d), msp;
        hsize_t one[1] = {1}, start[1] = {c->off}, count[1] = {c->len};
        if (c->len > 0) {
            H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL);
            msp = H5Screate_simple(1, count, NULL);
        } else {
            msp = H5Screate_simple(1, one, NULL);
            H5Sselect_none(msp);
            H5Sselect_none(fsp);
        }
        float dummy[1];
        if (H5Dread(d, H5T_NATIVE_FLOAT, msp, fsp, dxpl, c->len ? buf : dummy) < 0)
            ckpt_h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
        H5Sclose(msp);
        H5Sclose(fsp);
    }
    if (d >= 0) H5Dclose(d);
    return st->code;
}

/* Slots: each rank its own part, collectively; then their checksums. */
static int read_slots(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, int size, MPI_Comm comm,
                      uint64_t *sum, const char *path, dt_status *st)
{
    struct part mine = {c->off, c->len, (uint64_t)c->nslots}, *all = dt_xmalloc((size_t)size * sizeof *all);
    if (c->nslots > 0 && c->len > 0) {
        if (c->off > c->nparams || c->len > c->nparams - c->off)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank %d's slot part [%zu, %zu) is outside [0, %zu)", path, rank,
                    c->off, c->off + c->len, c->nparams);
        for (int s = 0; s < c->nslots; s++)
            if (!c->slots[s])
                dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank %d reads slot %s but has no buffer", path, rank,
                        c->slot_names[s]);
    }
    DT_MPI_CHECK(MPI_Allgather(&mine, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T, comm));
    for (int r = 0; r < size; r++) {
        if (all[r].flag != (uint64_t)c->nslots)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: the ranks ask for different numbers of optimizer slots", path);
        if (c->nslots == 0) all[r].len = 0;  /* nothing read: every slot value is a gap */
    }
    if (agree(st, comm) != DT_OK) goto out;
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    DT_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    for (int s = 0; s < c->nslots; s++) {
        read_slot_part(f, &dl->d[find_slot(dl, c->slot_names[s])], c, c->slots[s], dxpl, path, st);
        if (agree(st, comm) != DT_OK) break;
    }
    H5Pclose(dxpl);
    if (st->code != DT_OK) goto out;
    for (int k = 0; k < dl->n && st->code == DT_OK; k++) {
        const struct dent *e = &dl->d[k];
        if (e->kind != D_SLOT) continue;
        int s = 0;
        while (s < c->nslots && strcmp(c->slot_names[s], e->name) != 0) s++;
        hash_slot(f, e, s < c->nslots && c->len ? c->slots[s] : NULL, all, rank, size, &sum[k], path, st);
    }
    agree(st, comm);
out:
    free(all);
    return st->code;
}

/* Dropout streams and history: small; rank 0 reads, everyone gets them. */
static int read_tail(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, MPI_Comm comm, uint64_t *sum,
                     const char *path, dt_status *st)
{
    const struct dent *rng = &dl->d[dl->rng], *hist = &dl->d[dl->hist];
    c->file_nranks = (int)rng->rows;
    c->nhistory = (int)hist->rows;
    c->all_rng = dt_xcalloc(rng->rows + 1, sizeof *c->all_rng);
    c->history = dt_xcalloc(hist->rows + 1, sizeof *c->history);
    if (rank == 0) {
        const struct dent *e2[2] = {rng, hist};
        void *dst[2] = {c->all_rng, c->history};
        for (int j = 0; j < 2 && st->code == DT_OK; j++) {
            if (e2[j]->count == 0) continue;
            hid_t d = H5Dopen2(f, e2[j]->path, H5P_DEFAULT);
            if (d < 0 || H5Dread(d, e2[j]->mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst[j]) < 0)
                ckpt_h5_fail(st, DT_EINPUT, path, "reading %s", e2[j]->path);
            else
                sum[j == 0 ? dl->rng : dl->hist] += ckpt_hash_values(dst[j], (size_t)e2[j]->count, 8, 0);
            if (d >= 0) H5Dclose(d);
        }
    }
    if (agree(st, comm) != DT_OK) return st->code;
    ckpt_bcast_big(c->all_rng, rng->count, MPI_UINT64_T, 8, comm);
    ckpt_bcast_big(c->history, hist->count, MPI_DOUBLE, 8, comm);
    if (rank < c->file_nranks) memcpy(c->rng, c->all_rng[rank], sizeof c->rng);
    return DT_OK;
}

/* A small dataset e whole into a new buffer (one spare byte, zeroed: the
 * model text ends with a NUL), hashed into *sum. */
static void *read_whole(hid_t f, const struct dent *e, uint64_t *sum, const char *path, dt_status *st)
{
    void *buf = dt_xcalloc((size_t)e->count * e->esz + 1, 1);
    if (e->count == 0) return buf;
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0 || H5Dread(d, e->mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        ckpt_h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
    else
        *sum += ckpt_hash_values(buf, (size_t)e->count, e->esz, 0);
    if (d >= 0) H5Dclose(d);
    return buf;
}

/* What rebuilds the model on its own (version 2): num_classes, the model
 * text, the tokenizer; rank 0 reads, everyone gets them. Merges are checked
 * here only for their range (a token below 256 + i for merge i); the
 * tokenizer itself (prep/tokenizer.h) checks the rest when it is built. */
static int read_extras(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, MPI_Comm comm, uint64_t *sum,
                       const char *path, dt_status *st)
{
    uint64_t ntext = dl->text >= 0 ? dl->d[dl->text].count : 0, nm = dl->merges >= 0 ? dl->d[dl->merges].rows : 0;
    char *text = NULL, *tokenizer = NULL;
    int32_t *merges = NULL;
    int classes = 0;
    if (rank == 0) {
        const int has_tok = H5Aexists(f, "tokenizer") > 0;
        if (H5Aexists(f, "num_classes") > 0 && (ckpt_read_attr(f, "/", "num_classes", H5T_NATIVE_INT, &classes) < 0 ||
                                                 classes < 0))
            dt_fail(st, DT_EINPUT, "checkpoint %s: attribute num_classes is not a count", path);
        if (has_tok && !(tokenizer = ckpt_read_str(f, "/", "tokenizer")))
            dt_fail(st, DT_EINPUT, "checkpoint %s: attribute tokenizer is not text", path);
        else if (has_tok != (dl->merges >= 0))
            dt_fail(st, DT_EINPUT, "checkpoint %s: %s", path, has_tok ? "attribute tokenizer without /tokenizer/merges"
                                                                      : "/tokenizer/merges without attribute tokenizer");
        if (st->code == DT_OK && dl->text >= 0) text = read_whole(f, &dl->d[dl->text], &sum[dl->text], path, st);
        if (st->code == DT_OK && dl->merges >= 0) merges = read_whole(f, &dl->d[dl->merges], &sum[dl->merges], path, st);
        for (uint64_t i = 0; st->code == DT_OK && i < 2 * nm; i++)
            if (merges[i] < 0 || (uint64_t)merges[i] >= 256 + i / 2)
                dt_fail(st, DT_EINPUT, "checkpoint %s: /tokenizer/merges[%llu] names token %d, which does not exist "
                        "before merge %llu (the file is damaged)", path, (unsigned long long)(i / 2), merges[i],
                        (unsigned long long)(i / 2));
    }
    if (agree(st, comm) != DT_OK) {
        free(text);
        free(tokenizer);
        free(merges);
        return st->code;
    }
    if (rank != 0) {
        text = dt_xcalloc((size_t)ntext + 1, 1);
        merges = dt_xcalloc(2 * (size_t)nm + 1, sizeof *merges);
    }
    struct pack tk = {0};
    if (rank == 0) ckpt_pack_str(&tk, tokenizer ? tokenizer : "");
    ckpt_pack_bcast(&tk, rank, comm);
    const char *name = ckpt_unpack_str(&tk);
    c->tokenizer = name[0] ? strdup(name) : NULL;
    free(tk.buf);
    free(tokenizer);
    DT_MPI_CHECK(MPI_Bcast(&classes, 1, MPI_INT, 0, comm));
    if (ntext) ckpt_bcast_big(text, ntext, MPI_BYTE, 1, comm);
    if (nm) ckpt_bcast_big(merges, 2 * nm, MPI_INT32_T, 4, comm);
    c->classes = classes;
    c->model_text = text;
    c->model_text_len = (size_t)ntext;
    c->merges = merges;
    c->nmerges = (uint32_t)nm;
    if (!c->tokenizer) { /* an image model has no tokenizer, not an empty one */
        free(merges);
        c->merges = NULL;
        c->nmerges = 0;
    }
    return DT_OK;
}

static int read_data(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, int size, MPI_Comm comm,
                     uint64_t *sum, const char *path, dt_status *st)
{
    if (read_params(f, dl, c, rank, comm, sum, path, st) != DT_OK ||
        read_slots(f, dl, c, rank, size, comm, sum, path, st) != DT_OK ||
        read_tail(f, dl, c, rank, comm, sum, path, st) != DT_OK)
        return st->code;
    return read_extras(f, dl, c, rank, comm, sum, path, st);
}

/* The state checksum of the whole file, each rank hashing its share of
 * every dataset's rows (dt_ckpt_read_info, which reads no data but the
 * extras, still vouches for what it returns). */
static int hash_all(hid_t f, const struct dlist *dl, uint64_t stored, int rank, int size, MPI_Comm comm,
                    const char *path, dt_status *st)
{
    uint64_t *sum = dt_xcalloc((size_t)dl->n + 1, sizeof *sum);
    for (int k = 0; k < dl->n && st->code == DT_OK; k++) {
        const struct dent *e = &dl->d[k];
        ckpt_hash_rows(f, e, e->rows * (uint64_t)rank / (uint64_t)size, e->rows * (uint64_t)(rank + 1) / (uint64_t)size,
                       &sum[k], path, st);
    }
    if (agree(st, comm) == DT_OK) ckpt_compare_checksum(dl, sum, stored, path, comm, st);
    free(sum);
    return st->code;
}

/* info: dt_ckpt_read_info's part only (no layout check; of the data, the extras; the checksum over all). */
static int read_locked(MPI_Comm comm, const char *path, struct dt_ckpt *c, int info, dt_status *st)
{
    struct h5quiet q;
    struct dlist dl;
    struct strread s;
    uint64_t stored = 0, *sum = NULL;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    memset(&dl, 0, sizeof dl);
    memset(&s, 0, sizeof s);
    c->all_rng = NULL;
    c->history = NULL;
    c->config_keys = c->config_values = NULL;
    c->model_text = c->tokenizer = NULL;
    c->merges = NULL;
    c->classes = 0;
    c->model_text_len = 0;
    c->nmerges = 0;
    st->code = DT_OK;
    st->msg[0] = '\0';
    ckpt_h5_quiet(&q);
    hid_t f = ckpt_open(comm, path, st);
    if (f < 0) goto done;
    if (ckpt_check_format(f, path, st) == DT_OK && ckpt_read_checksum(f, path, &stored, st) == DT_OK &&
        ckpt_list_datasets(f, path, &dl, st) == DT_OK && (info || check_layout(&dl, c, path, st) == DT_OK))
        read_meta(f, c, &s, path, st);
    if (agree(st, comm) != DT_OK) goto close;
    strread_install(&s, c);
    sum = dt_xcalloc((size_t)dl.n + 1, sizeof *sum);
    if (info && read_extras(f, &dl, c, rank, comm, sum, path, st) == DT_OK)
        hash_all(f, &dl, stored, rank, size, comm, path, st);
    else if (!info && read_data(f, &dl, c, rank, size, comm, sum, path, st) == DT_OK)
        ckpt_compare_checksum(&dl, sum, stored, path, comm, st);
close:
    H5Fclose(f);
done:
    free(sum);
    free(dl.d);
    strread_free(&s);
    if (agree(st, comm) != DT_OK) dt_ckpt_release(c);
    ckpt_h5_restore(&q);
    return st->code;
}

void dt_ckpt_release(struct dt_ckpt *c)
{
    free((void *)c->config_keys);  /* the block behind every string read (strread_install) */
    free(c->all_rng);
    free(c->history);
    free((void *)c->model_text);
    free((void *)c->tokenizer);
    free((void *)c->merges);
    c->model_text = c->tokenizer = NULL;
    c->merges = NULL;
    c->model_text_len = 0;
    c->nmerges = 0;
    c->config_keys = c->config_values = NULL;
    c->dtrain_version = c->strategy = c->model = c->command_line = c->optimizer = NULL;
    c->nconfig = 0;
    c->all_rng = NULL;
    c->history = NULL;
    c->nhistory = 0;
}

int dt_ckpt_read(MPI_Comm comm, const char *path, struct dt_ckpt *c, dt_status *st)
{
    dt_h5_lock(); /* runtime/h5lock.h */
    int rc = read_locked(comm, path, c, 0, st);
    dt_h5_unlock();
    return rc;
}

int dt_ckpt_read_info(MPI_Comm comm, const char *path, struct dt_ckpt *c, dt_status *st)
{
    dt_h5_lock();
    int rc = read_locked(comm, path, c, 1, st);
    dt_h5_unlock();
    return rc;
}
