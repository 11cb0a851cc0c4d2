/* checkpoint.c: writing, validating and reading checkpoints (see checkpoint.h).
 *
 * Parallel HDF5 needs every rank to make the same metadata calls with the
 * same values, so everything replicated (scalars, strings, the layer table)
 * is first broadcast from rank 0 and only rank 0's copy is ever written; the
 * optimizer slot parts and the dropout streams are the only per-rank data.
 *
 * The state checksum is computable in pieces: within a dataset, each value
 * (4 or 8 bytes) is one block, hashed with FNV-1a and mixed with its global
 * index (dt_ckpt_block_mix); the dataset's sum of those (mod 2^64) does not
 * depend on which rank hashed which values, so writers hash their own part
 * and readers whatever split they read, and MPI_SUM adds the pieces. The
 * per-dataset (count, sum) pairs are then chained with FNV-1a in the fixed
 * order: /model/<layer>/kernel, bias for each layer in creation order, the
 * /optimizer datasets in creation order, /rng/dropout, /history. One value
 * per block because ranks' parts start at any value; it is also faster than
 * one long byte-serial FNV chain, since the multiplies of different values
 * overlap. */
#define _GNU_SOURCE /* fallocate */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "runtime/fault.h"
#include "simd.h"
#include "runtime/checks.h"

#define FORMAT_NAME "dtrain-checkpoint"
#define FORMAT_VERSION 1
#define MAX_NAME 256          /* layer and slot names */
#define HASH_CHUNK (1u << 22) /* values read at a time by the checksum passes */

/* ---- checksums ------------------------------------------------------------ */

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

uint64_t dt_fnv1a64(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    if (h == 0) h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* splitmix64's finalizer: a bijection, so two values at one index never
 * mix to the same term. */
uint64_t dt_ckpt_block_mix(uint64_t block_index, uint64_t block_hash)
{
    uint64_t x = block_index * 0x9e3779b97f4a7c15ULL + block_hash;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The hash loops are compiled for AVX-512, AVX2 and the baseline, and the
 * loader picks the best the CPU has (as src/cpu does): vectorized over
 * values, AVX-512 hashes 2.3x faster than the baseline (830 M values/s). */

/* esz is a literal at each call, so the byte loop unrolls. */
static inline uint64_t hash_fixed(const unsigned char *p, size_t n, size_t esz, uint64_t first)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++, p += esz) {
        uint64_t h = FNV_OFFSET;
        for (size_t b = 0; b < esz; b++) h = (h ^ p[b]) * FNV_PRIME;
        s += dt_ckpt_block_mix(first + i, h);
    }
    return s;
}

DT_MULTIVERSION static uint64_t hash4(const void *v, size_t n, uint64_t first) { return hash_fixed(v, n, 4, first); }
DT_MULTIVERSION static uint64_t hash8(const void *v, size_t n, uint64_t first) { return hash_fixed(v, n, 8, first); }

/* Sum over values first..first+n-1 of a dataset (esz bytes each, as stored:
 * little-endian). */
static uint64_t hash_values(const void *v, size_t n, size_t esz, uint64_t first)
{
    if (esz == 4) return hash4(v, n, first);
    if (esz == 8) return hash8(v, n, first);
    return hash_fixed(v, n, esz, first);
}

static uint64_t chain(const uint64_t *count, const uint64_t *sum, int n)
{
    uint64_t h = 0;
    for (int k = 0; k < n; k++) {
        h = dt_fnv1a64(&count[k], sizeof count[k], h);
        h = dt_fnv1a64(&sum[k], sizeof sum[k], h);
    }
    return h;
}

/* ---- HDF5 errors as our messages ------------------------------------------ */

struct h5quiet {
    H5E_auto2_t func;
    void *data;
};

static void h5_quiet(struct h5quiet *q)
{
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5_restore(const struct h5quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

struct why {
    char text[320];
    int n;
};

static herr_t why_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    struct why *w = data;
    /* The two innermost entries say what the file system or MPI-IO said
     * (e.g. "MPI_ERR_NO_SPACE: ..."), the outer ones only which call. */
    if (n < 2 && e->desc && e->desc[0]) {
        size_t k = strlen(w->text);
        snprintf(w->text + k, sizeof w->text - k, "%s%s", w->n++ ? "; " : "", e->desc);
    }
    return 0;
}

/* What the last failed HDF5 call said. Call it right after the failure:
 * any other HDF5 call clears the error stack. */
static const char *h5_why(struct why *w)
{
    w->text[0] = '\0';
    w->n = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, why_walk, w);
    if (!w->text[0]) snprintf(w->text, sizeof w->text, "HDF5 error");
    return w->text;
}

static int h5_fail(dt_status *st, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int h5_fail(dt_status *st, int code, const char *path, const char *fmt, ...)
{
    struct why w;
    char what[512];
    va_list ap;
    h5_why(&w);
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dt_fail(st, code, "checkpoint %s: %s: %s", path, what, w.text);
}

/* ---- small helpers ----------------------------------------------------------- */

static int agree(dt_status *st, MPI_Comm comm) { return dt_status_agree(st, comm); }

int dt_create_fresh(const char *path)
{
    /* unlink removes a planted symlink itself, never its target; a
     * directory or another user's file in a sticky directory stays, and
     * O_EXCL then fails. */
    if (unlink(path) != 0 && errno != ENOENT && errno != EISDIR && errno != EPERM && errno != EACCES) return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
}

static int join(char *out, size_t n, const char *dir, const char *name)
{
    int k = snprintf(out, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static void bcast_big(void *buf, size_t count, MPI_Datatype type, size_t esz, MPI_Comm comm)
{
    char *p = buf;
    while (count > 0) {
        size_t n = count < (1u << 30) ? count : (1u << 30);
        DT_MPI_CHECK(MPI_Bcast(p, (int)n, type, 0, comm));
        p += n * esz;
        count -= n;
    }
}

/* A byte buffer that rank 0 fills and broadcasts. */
struct pack {
    char *buf;
    size_t len, cap, pos;
};

static void pack_bytes(struct pack *p, const void *v, size_t n)
{
    if (p->len + n > p->cap) {
        p->cap = 2 * (p->len + n) + 256;
        char *nb = realloc(p->buf, p->cap);
        if (!nb) DT_DIE("out of memory packing checkpoint metadata");
        p->buf = nb;
    }
    memcpy(p->buf + p->len, v, n);
    p->len += n;
}

static void pack_str(struct pack *p, const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    pack_bytes(p, &n, sizeof n);
    pack_bytes(p, s ? s : "", n);
}

static void unpack_bytes(struct pack *p, void *v, size_t n)
{
    memcpy(v, p->buf + p->pos, n);
    p->pos += n;
}

static const char *unpack_str(struct pack *p)
{
    size_t n;
    unpack_bytes(p, &n, sizeof n);
    const char *s = p->buf + p->pos;
    p->pos += n;
    return s;
}

static void pack_bcast(struct pack *p, int rank, MPI_Comm comm)
{
    uint64_t len = p->len;
    DT_MPI_CHECK(MPI_Bcast(&len, 1, MPI_UINT64_T, 0, comm));
    if (len > INT_MAX) DT_DIE("checkpoint metadata of %llu bytes is too large", (unsigned long long)len);
    if (rank != 0) {
        p->buf = dt_xmalloc(len);
        p->len = p->cap = len;
    }
    DT_MPI_CHECK(MPI_Bcast(p->buf, (int)len, MPI_BYTE, 0, comm));
    p->pos = 0;
}

static int64_t kernel_count(const struct dt_ckpt_layer *l)
{
    int64_t n = 1;
    for (int d = 0; d < l->kernel_rank; d++) n *= l->kernel_dims[d];
    return n;
}

static int has_params(const struct dt_ckpt_layer *l) { return l->kernel_rank > 0; }

static void format_dims(char *buf, size_t len, int nd, const hsize_t *d)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < nd && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* Checkpoint file names: ckpt-<epoch>-<step>.h5. */
static int parse_ckpt_name(const char *name, long long *epoch, long long *step)
{
    int used = 0;
    if (sscanf(name, "ckpt-%lld-%lld.h5%n", epoch, step, &used) != 2) return 0;
    return used > 0 && name[used] == '\0' && *epoch >= 0 && *step >= 0;
}

struct named {
    char name[NAME_MAX + 1];
    long long epoch, step;
};

static int named_cmp(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The ckpt-*.h5 files of dir, oldest first; NULL (errno set) if dir cannot be read. */
static struct named *list_ckpts(const char *dir, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    struct named *v = NULL;
    int cap = 0;
    *n = 0;
    if (!d) return NULL;
    while ((e = readdir(d)) != NULL) {
        struct named x;
        if (!parse_ckpt_name(e->d_name, &x.epoch, &x.step)) continue;
        snprintf(x.name, sizeof x.name, "%s", e->d_name);
        if (*n == cap) {
            cap = 2 * cap + 8;
            struct named *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) DT_DIE("out of memory listing %s", dir);
            v = nv;
        }
        v[(*n)++] = x;
    }
    closedir(d);
    if (!v) v = dt_xmalloc(sizeof *v);
    qsort(v, (size_t)*n, sizeof *v, named_cmp);
    return v;
}

/* ---- writing: the agreed view of what to write ------------------------------- */

/* What every rank writes: rank 0's replicated values (copied as bytes,
 * since every rank runs the same binary, then pointers rebuilt from the
 * broadcast strings) and this rank's own slot part and dropout stream. */
struct view {
    struct dt_ckpt m;
    struct dt_ckpt_layer *layers;  /* [m.nlayers] */
    const char **keys, **values;   /* [m.nconfig] */
    const char *slot_names[2];
    char created[32];
    struct pack pk;                /* holds the strings */
};

static void view_build(struct view *v, const struct dt_ckpt *c, int rank, MPI_Comm comm)
{
    struct pack *p = &v->pk;
    memset(v, 0, sizeof *v);
    if (rank == 0) {
        time_t now = time(NULL);
        struct tm tm;
        char created[32];
        gmtime_r(&now, &tm);
        strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
        pack_bytes(p, c, sizeof *c);
        pack_bytes(p, created, sizeof created);
        pack_str(p, c->dtrain_version ? c->dtrain_version : PACKAGE_VERSION);
        pack_str(p, c->strategy);
        pack_str(p, c->model);
        pack_str(p, c->command_line);
        pack_str(p, c->optimizer);
        for (int s = 0; s < c->nslots && s < 2; s++) pack_str(p, c->slot_names[s]);
        for (int i = 0; i < c->nconfig; i++) {
            pack_str(p, c->config_keys[i]);
            pack_str(p, c->config_values[i]);
        }
        for (int l = 0; l < c->nlayers; l++) {
            pack_bytes(p, &c->layers[l], sizeof c->layers[l]);
            pack_str(p, c->layers[l].name);
        }
    }
    pack_bcast(p, rank, comm);
    unpack_bytes(p, &v->m, sizeof v->m);
    unpack_bytes(p, v->created, sizeof v->created);
    v->m.dtrain_version = unpack_str(p);
    v->m.strategy = unpack_str(p);
    v->m.model = unpack_str(p);
    v->m.command_line = unpack_str(p);
    v->m.optimizer = unpack_str(p);
    for (int s = 0; s < v->m.nslots && s < 2; s++) v->slot_names[s] = unpack_str(p);
    int nconfig = v->m.nconfig > 0 ? v->m.nconfig : 0, nlayers = v->m.nlayers > 0 ? v->m.nlayers : 0;
    v->keys = dt_xcalloc((size_t)nconfig + 1, sizeof *v->keys);
    v->values = dt_xcalloc((size_t)nconfig + 1, sizeof *v->values);
    for (int i = 0; i < nconfig; i++) {
        v->keys[i] = unpack_str(p);
        v->values[i] = unpack_str(p);
    }
    v->layers = dt_xcalloc((size_t)nlayers + 1, sizeof *v->layers);
    for (int l = 0; l < nlayers; l++) {
        unpack_bytes(p, &v->layers[l], sizeof v->layers[l]);
        v->layers[l].name = unpack_str(p);
    }
    /* This rank's own fields. */
    v->m.params = c->params;
    v->m.slots[0] = c->slots[0];
    v->m.slots[1] = c->slots[1];
    v->m.off = c->off;
    v->m.len = c->len;
    v->m.writer = c->writer;
    memcpy(v->m.rng, c->rng, sizeof v->m.rng);
    v->m.history = c->history;  /* rank 0's is the one written */
    v->m.layers = v->layers;
}

static void view_free(struct view *v)
{
    free(v->keys);
    free(v->values);
    free(v->layers);
    free(v->pk.buf);
}

static int bad_name(const char *s) { return !s || !s[0] || strchr(s, '/') || strlen(s) >= MAX_NAME || !strcmp(s, "."); }

/* The caller's description, checked the same way on every rank (the view is
 * identical everywhere), so no agreement is needed for these. */
static int view_check(const struct view *v, const char *dir, dt_status *st)
{
    const struct dt_ckpt *m = &v->m;
    int64_t total = 0;
    if (m->nslots < 0 || m->nslots > 2)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: %d optimizer slots (0, 1 or 2 expected)", dir, m->nslots);
    if (m->nlayers < 0 || m->nconfig < 0 || m->nhistory < 0 || m->epoch < 0 || m->step < 0)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: negative count in the state to write", dir);
    for (int l = 0; l < m->nlayers; l++) {
        const struct dt_ckpt_layer *L = &v->layers[l];
        if (!has_params(L)) continue;
        if (bad_name(L->name) || L->kernel_rank > 4 || L->bias_len < 0)
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: layer %d (%s): bad name or shape", dir, l, L->name);
        for (int d = 0; d < L->kernel_rank; d++)
            if (L->kernel_dims[d] <= 0)
                return dt_fail(st, DT_ERUNTIME, "checkpoint %s: layer %s: kernel dimension %d is %lld", dir,
                               L->name, d, (long long)L->kernel_dims[d]);
        for (int k = 0; k < l; k++)
            if (has_params(&v->layers[k]) && !strcmp(v->layers[k].name, L->name))
                return dt_fail(st, DT_ERUNTIME, "checkpoint %s: two layers are named %s", dir, L->name);
        int64_t n = kernel_count(L) + L->bias_len;
        if ((int64_t)L->offset + n > (int64_t)(m->nparams + m->nbuffers))
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: layer %s ends at %lld, past the %zu parameters", dir,
                           L->name, (long long)((int64_t)L->offset + n), m->nparams + m->nbuffers);
        total += n;
    }
    if (total != (int64_t)(m->nparams + m->nbuffers))
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: the layers hold %lld parameters, the block %zu", dir,
                       (long long)total, m->nparams + m->nbuffers);
    for (int s = 0; s < m->nslots; s++)
        if (bad_name(v->slot_names[s]) || (s == 1 && !strcmp(v->slot_names[0], v->slot_names[1])))
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: bad optimizer slot name \"%s\"", dir,
                           v->slot_names[s] ? v->slot_names[s] : "");
    for (int i = 0; i < m->nconfig; i++) {
        if (!v->keys[i][0] || !strcmp(v->keys[i], "command_line"))
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: bad configuration key \"%s\"", dir, v->keys[i]);
        for (int k = 0; k < i; k++)
            if (!strcmp(v->keys[k], v->keys[i]))
                return dt_fail(st, DT_ERUNTIME, "checkpoint %s: configuration key %s given twice", dir, v->keys[i]);
    }
    return DT_OK;
}

struct part {
    uint64_t off, len, flag;
};

static int part_cmp(const void *a, const void *b)
{
    const struct part *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* This rank's own checks, then (all ranks) that the writers' slot parts
 * tile [0, nparams) exactly: the checksum adds each value once. */
static int check_parts(const struct view *v, int rank, int size, MPI_Comm comm, const char *dir, dt_status *st)
{
    const struct dt_ckpt *m = &v->m;
    struct part mine = {m->off, m->len, (uint64_t)(m->writer != 0)};
    if (rank == 0 && m->nparams > 0 && !m->params)
        dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank 0 has no parameters to write", dir);
    if (rank == 0 && m->nhistory > 0 && !m->history)
        dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank 0 has no history to write", dir);
    if (m->nslots > 0 && m->writer && m->len > 0) {
        if (m->off > m->nparams || m->len > m->nparams - m->off)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank %d's slot part [%zu, %zu) is outside [0, %zu)", dir,
                    rank, m->off, m->off + m->len, m->nparams);
        for (int s = 0; s < m->nslots; s++)
            if (!m->slots[s])
                dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank %d writes slot %s but holds no buffer", dir, rank,
                        v->slot_names[s]);
    }
    if (m->nslots == 0) return st->code;
    struct part *all = dt_xmalloc((size_t)size * sizeof *all);
    DT_MPI_CHECK(MPI_Allgather(&mine, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T, comm));
    int n = 0;
    for (int r = 0; r < size; r++)
        if (all[r].flag && all[r].len > 0) all[n++] = all[r];
    qsort(all, (size_t)n, sizeof *all, part_cmp);
    uint64_t at = 0;
    for (int i = 0; i < n && st->code == DT_OK; i++) {
        if (all[i].off != at) break;
        at += all[i].len;
    }
    if (st->code == DT_OK && at != m->nparams)
        dt_fail(st, DT_ERUNTIME, "checkpoint %s: the writers' optimizer slot parts do not cover [0, %zu) exactly once "
                "(covered up to %llu)", dir, m->nparams, (unsigned long long)at);
    free(all);
    return st->code;
}

int dt_mkdirs(const char *dir)
{
    char buf[PATH_MAX];
    struct stat sb;
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    if (stat(buf, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* A full disk is the one write error to keep away from HDF5: parallel HDF5
 * 1.10 does not recover from an I/O error inside a metadata flush (the
 * ranks leave its collective calls at different points and wait forever;
 * seen with a nearly full tmpfs), and a failed close crashes it at exit.
 * So the room is made first: rank 0 reserves an upper bound of the file's
 * size with fallocate (KEEP_SIZE: the file stays empty, the blocks are
 * its), and a lower bound is checked against free space and every rank's
 * file size limit where fallocate is not available. */
static void size_bounds(const struct view *v, int size, uint64_t *low, uint64_t *high)
{
    const struct dt_ckpt *m = &v->m;
    uint64_t data = 4 * (uint64_t)m->nparams * (1 + (uint64_t)m->nslots) + 4 * (uint64_t)m->nbuffers + 32 * (uint64_t)size +
                    8 * DT_CKPT_HIST * (uint64_t)m->nhistory;
    uint64_t text = strlen(m->command_line), objects = 2 * (uint64_t)m->nlayers + (uint64_t)m->nslots + 10;
    for (int i = 0; i < m->nconfig; i++) text += strlen(v->keys[i]) + strlen(v->values[i]);
    *low = data + text + 2048 + 256 * objects;
    *high = data + 2 * text + 65536 + 4096 * objects;
}

static int check_room(const struct view *v, int rank, int size, const char *dir, const char *final, dt_status *st)
{
    uint64_t need, high;
    size_bounds(v, size, &need, &high);
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: rank %d's file size limit (ulimit -f) is %llu bytes, the "
                       "checkpoint needs about %llu: %s", final, rank, (unsigned long long)rl.rlim_cur,
                       (unsigned long long)need, strerror(EFBIG));
    struct statvfs fs;
    if (rank == 0 && statvfs(dir, &fs) == 0) {
        /* root may also use the blocks reserved for it */
        uint64_t avail = (uint64_t)(geteuid() == 0 ? fs.f_bfree : fs.f_bavail) * fs.f_frsize;
        if (avail < need)
            return dt_fail(st, DT_ERUNTIME, "checkpoint %s: %llu bytes free in %s, the checkpoint needs about %llu: %s",
                           final, (unsigned long long)avail, dir, (unsigned long long)need, strerror(ENOSPC));
    }
    return DT_OK;
}

/* Rank 0, once HDF5 has created the file (it truncates it). */
static int reserve(const char *tmp, const char *final, uint64_t bytes, dt_status *st)
{
#ifdef FALLOC_FL_KEEP_SIZE
    int fd = open(tmp, O_WRONLY | O_NOFOLLOW);
    int e = fd < 0 || fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0 ? 0 : errno;
    if (fd >= 0) close(fd);
    /* File systems without fallocate have only the free-space check. */
    if (e && e != EOPNOTSUPP && e != ENOSYS && e != EINVAL)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot reserve %llu bytes for it: %s", final,
                       (unsigned long long)bytes, strerror(e));
#else
    (void)tmp;
    (void)final;
    (void)bytes;
#endif
    return st->code;
}

/* ---- writing: the HDF5 file ---------------------------------------------------- */

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
#define TRY(call, ...) do { if ((call) < 0) return h5_fail(st, DT_ERUNTIME, where, __VA_ARGS__); } while (0)
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
            h5_fail(st, DT_ERUNTIME, where, "creating %s", full);
            H5Gclose(lg);
            return st->code;
        }
        snprintf(full, sizeof full, "/model/%s/bias", L->name);
        r = add_dataset(w, lg, "bias", full, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 1, bd,
                        kp ? kp + kernel_count(L) : NULL, -1);
        if (r < 0) h5_fail(st, DT_ERUNTIME, where, "creating %s", full);
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
        h5_fail(st, DT_ERUNTIME, where, "writing %s", d->name);
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
        if (buf) h->sum[k] = hash_values(buf, (size_t)count, h->w->ds[k].esz, start);
    }
    return NULL;
}

static int write_file(const char *tmp, const char *where, const struct view *v, int rank, int size,
                      MPI_Comm comm, dt_status *st)
{
    const struct dt_ckpt *m = &v->m;
    struct wfile w;
    int nparam_layers = 0;
    memset(&w, 0, sizeof w);
    for (int l = 0; l < m->nlayers; l++) nparam_layers += has_params(&v->layers[l]);
    w.ds = dt_xcalloc((size_t)(2 * nparam_layers + m->nslots + 2), sizeof *w.ds);

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
    if (w.f < 0) h5_fail(st, DT_ERUNTIME, where, "cannot create %s", tmp);
    if (agree(st, comm) != DT_OK) goto out;
    uint64_t low, high;
    size_bounds(v, size, &low, &high);
    if (rank == 0) reserve(tmp, where, high, st);
    if (agree(st, comm) != DT_OK) goto close;

    /* Metadata goes to disk before the data, so that when a data write
     * fails (a full disk) H5Fclose has nothing left to write: in HDF5 1.10 a
     * close that fails frees the file but keeps its ID, and the library then
     * crashes at exit (fixed in 1.14.1, HDFGroup/hdf5#2291). */
    if (create_all(&w, v, (const uint64_t (*)[4])rng_all, size, where, st) == DT_OK &&
        H5Fflush(w.f, H5F_SCOPE_GLOBAL) < 0)
        h5_fail(st, DT_ERUNTIME, where, "writing the metadata");
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
        h5_fail(st, DT_ERUNTIME, where, "flushing the data of %s", tmp);
    if (h.running) pthread_join(h.thread, NULL);
    else hash_mine(&h);
    if (agree(st, comm) == DT_OK) {
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum, w.nds, MPI_UINT64_T, MPI_SUM, comm));
        if (put_u64(w.f, "state_checksum", chain(count, sum, w.nds)) < 0)
            h5_fail(st, DT_ERUNTIME, where, "writing attribute state_checksum");
        else if (H5Fflush(w.f, H5F_SCOPE_GLOBAL) < 0)
            h5_fail(st, DT_ERUNTIME, where, "flushing %s", tmp);
    }
    free(count);
    free(sum);
    agree(st, comm);
close:
    for (int k = 0; k < w.nds; k++) H5Dclose(w.ds[k].id);
    for (int k = 0; k < w.ngroups; k++) H5Gclose(w.groups[k]);
    if (H5Fclose(w.f) < 0 && st->code == DT_OK) h5_fail(st, DT_ERUNTIME, where, "closing %s", tmp);
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

/* ---- writing: publishing the file (rank 0) ------------------------------------- */

static int fsync_path(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    /* Some file systems cannot fsync a directory; the rename is then as
     * durable as they make it. */
    if (r != 0 && dir && (errno == EINVAL || errno == ENOTSUP)) r = 0;
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

static int write_pointer(const char *path, const char *text)
{
    int fd = dt_create_fresh(path);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t k = write(fd, text, n);
    if (k >= 0 && (size_t)k != n) errno = ENOSPC;
    int ok = k >= 0 && (size_t)k == n && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) return -1;
    errno = e;
    return ok ? 0 : -1;
}

/* Temporary files left by a crash mid-checkpoint (DIR/.ckpt-*.h5.tmp.PID):
 * one job writes a checkpoint directory at a time, so after a successful
 * checkpoint any other is dead. */
static void remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[PATH_MAX];
        if ((strncmp(e->d_name, ".ckpt-", 6) != 0 || !strstr(e->d_name, ".h5.tmp.")) && strcmp(e->d_name, ".latest.tmp"))
            continue;
        if (join(path, sizeof path, dir, e->d_name) == 0 && unlink(path) == 0)
            fprintf(stderr, "dtrain: note: removed %s, left by an interrupted checkpoint\n", path);
    }
    if (d) closedir(d);
}

static void prune(const char *dir, const char *keep_name, int keep)
{
    int n;
    remove_stale(dir);
    if (keep <= 0) return;
    struct named *v = list_ckpts(dir, &n);
    if (!v) return;
    int extra = n - keep;
    for (int i = 0; i < n && extra > 0; i++) {
        char path[PATH_MAX];
        if (!strcmp(v[i].name, keep_name)) continue;
        if (join(path, sizeof path, dir, v[i].name) == 0 && unlink(path) != 0)
            fprintf(stderr, "dtrain: note: cannot remove old checkpoint %s: %s\n", path, strerror(errno));
        extra--;
    }
    free(v);
}

/* Rank 0, after the file is closed: make it durable, give it its name,
 * point latest at it, drop old ones. Either latest points at the new file
 * or everything is as it was. */
static int publish(const char *dir, const char *tmp, const char *final, const char base[64], int keep,
                   dt_status *st)
{
    char ltmp[PATH_MAX], latest[PATH_MAX] = "", line[72] = "";
    struct stat sb;
    /* The same size, but the unused part of the reservation is let go. */
    if (stat(tmp, &sb) != 0 || truncate(tmp, sb.st_size) != 0)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot trim %s: %s", final, tmp, strerror(errno));
    if (fsync_path(tmp, 0) != 0)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot flush %s to disk: %s", final, tmp, strerror(errno));
    /* A crash here (runtime/fault.h) leaves the data written and flushed
     * under the temporary name but nothing renamed; under mpirun the whole
     * job ends. The previous checkpoint and latest must still be valid. */
    dt_fault_ckpt_crash_point();

    int existed = access(final, F_OK) == 0;
    if (rename(tmp, final) != 0)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot rename %s to it: %s", final, tmp, strerror(errno));
    if (join(ltmp, sizeof ltmp, dir, ".latest.tmp") != 0 || join(latest, sizeof latest, dir, "latest") != 0) {
        errno = ENAMETOOLONG;
        dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot name %s/latest: %s", final, dir, strerror(errno));
    } else if (fsync_path(dir, 1) != 0) {
        dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot flush the directory %s: %s", final, dir, strerror(errno));
    } else {
        snprintf(line, sizeof line, "%s\n", base);
        if (write_pointer(ltmp, line) != 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot write %s: %s", final, ltmp, strerror(errno));
        else if (rename(ltmp, latest) != 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot rename %s to %s: %s", final, ltmp, latest,
                    strerror(errno));
        else if (fsync_path(dir, 1) != 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot flush the directory %s: %s", final, dir,
                    strerror(errno));
        if (st->code != DT_OK) unlink(ltmp);
    }
    if (st->code != DT_OK) {
        /* latest still names the previous file (unless the last fsync
         * failed, when it names this complete one and it must stay). */
        char cur[72] = "";
        FILE *fp = latest[0] ? fopen(latest, "r") : NULL;
        if (fp) {
            if (!fgets(cur, sizeof cur, fp)) cur[0] = '\0';
            fclose(fp);
        }
        if (!existed && !(line[0] && !strcmp(cur, line))) unlink(final);
        return st->code;
    }
    prune(dir, base, keep);
    return DT_OK;
}

int dt_ckpt_write(MPI_Comm comm, const char *dir, int keep, const struct dt_ckpt *c, char *path_out,
                  size_t path_len, dt_status *st)
{
    struct h5quiet q;
    struct view v;
    int rank, size, fd;
    struct {  /* agreed from rank 0 */
        char tmp[PATH_MAX], final[PATH_MAX], base[64];
    } names;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    st->code = DT_OK;
    st->msg[0] = '\0';
    h5_quiet(&q);
    view_build(&v, c, rank, comm);
    view_check(&v, dir, st);
    if (st->code == DT_OK) check_parts(&v, rank, size, comm, dir, st);
    if (rank == 0 && st->code == DT_OK) {
        snprintf(names.base, sizeof names.base, "ckpt-%06d-%08lld.h5", v.m.epoch, (long long)v.m.step);
        char tmpbase[128];
        snprintf(tmpbase, sizeof tmpbase, ".%s.tmp.%ld", names.base, (long)getpid());
        if (join(names.tmp, sizeof names.tmp, dir, tmpbase) != 0 || join(names.final, sizeof names.final, dir, names.base) != 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: path too long", dir);
        else if (dt_mkdirs(dir) != 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot create the directory: %s", dir, strerror(errno));
        else if ((fd = dt_create_fresh(names.tmp)) < 0)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: cannot create %s: %s", names.final, names.tmp, strerror(errno));
        else
            close(fd); /* HDF5 opens it again by name: a regular file of ours, not a planted link */
    }
    if (agree(st, comm) != DT_OK) goto out;
    DT_MPI_CHECK(MPI_Bcast(&names, (int)sizeof names, MPI_BYTE, 0, comm));
    check_room(&v, rank, size, dir, names.final, st);
    if (agree(st, comm) == DT_OK && write_file(names.tmp, names.final, &v, rank, size, comm, st) == DT_OK && rank == 0)
        publish(dir, names.tmp, names.final, names.base, keep, st);
    if (agree(st, comm) != DT_OK && rank == 0) unlink(names.tmp);
    if (st->code == DT_OK && path_out) {
        if (strlen(names.final) >= path_len)
            dt_fail(st, DT_ERUNTIME, "checkpoint %s: the name does not fit the caller's buffer", names.final);
        else
            snprintf(path_out, path_len, "%s", names.final);
    }
out:
    view_free(&v);
    h5_restore(&q);
    return st->code;
}

/* ---- reading: what the file holds -------------------------------------------- */

enum dkind { D_KERNEL, D_BIAS, D_SLOT, D_RNG, D_HIST };

struct dent {
    char path[2 * MAX_NAME + 32];
    char name[MAX_NAME];    /* layer or slot name */
    int kind;
    int nd;
    hsize_t dims[4];
    uint64_t count, rows, rowlen;
    size_t esz;
    hid_t mtype;            /* native type for reading (and hashing) */
};

struct dlist {
    struct dent *d;
    int n, cap;
    int nlayers;            /* groups under /model */
};

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
    static const char *what[] = {"float32", "float32", "float32", "uint64", "float64"};
    e->kind = kind;
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0) return h5_fail(st, DT_EINPUT, file, "cannot open dataset %s", e->path);
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = H5Tget_class(t) == cls && H5Tget_size(t) == esz;
    e->nd = H5Sget_simple_extent_ndims(sp);
    if (e->nd >= 1 && e->nd <= 4) H5Sget_simple_extent_dims(sp, e->dims, NULL);
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(d);
    char shape[96];
    format_dims(shape, sizeof shape, e->nd < 0 || e->nd > 4 ? 0 : e->nd, e->dims);
    if (!ok)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: %s is not %s", file, e->path, what[kind]);
    if (e->nd < 1 || e->nd > 4 || (nd && e->nd != nd) || (last && e->dims[e->nd - 1] != last))
        return dt_fail(st, DT_EINPUT, "checkpoint %s: %s has shape %s (expected %s)", file, e->path, shape,
                       kind == D_RNG ? "[nranks,4]" : kind == D_HIST ? "[epochs,6]" : kind == D_BIAS || kind == D_SLOT ? "[n]" : "rank 1-4");
    e->esz = esz;
    e->mtype = kind == D_RNG ? H5T_NATIVE_UINT64 : kind == D_HIST ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
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

/* Every dataset of the file, in checksum order. */
static int list_datasets(hid_t f, const char *file, struct dlist *dl, dt_status *st)
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
    return DT_OK;
}

static int read_attr(hid_t f, const char *obj, const char *name, hid_t mtype, void *v)
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
static char *read_str_attr(hid_t a)
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

static char *read_str(hid_t f, const char *obj, const char *name)
{
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return NULL;
    char *s = read_str_attr(a);
    H5Aclose(a);
    return s;
}

/* Opens path collectively for reading, with one clear message for a file
 * that is missing, not HDF5, or truncated. Returns -1 (on every rank) on
 * failure. */
static hid_t open_ckpt(MPI_Comm comm, const char *path, dt_status *st)
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
    if (f < 0) h5_fail(st, DT_EINPUT, path, "HDF5 cannot open it (the file is truncated or damaged)");
    H5Pclose(fapl);
    if (agree(st, comm) != DT_OK) {
        if (f >= 0) H5Fclose(f);
        return -1;
    }
    return f;
}

static int check_format(hid_t f, const char *path, dt_status *st)
{
    char *fmt = read_str(f, "/", "format");
    int version = 0, ok = fmt && !strcmp(fmt, FORMAT_NAME);
    free(fmt);
    if (!ok)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: not a dtrain checkpoint (no root attribute format = \"%s\")",
                       path, FORMAT_NAME);
    if (read_attr(f, "/", "format_version", H5T_NATIVE_INT, &version) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no attribute format_version", path);
    if (version != FORMAT_VERSION)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: format_version %d; this dtrain reads version %d", path,
                       version, FORMAT_VERSION);
    return DT_OK;
}

/* Sum over rows [r0, r1) of dataset e, read independently a piece at a time. */
static int hash_rows(hid_t f, const struct dent *e, uint64_t r0, uint64_t r1, uint64_t *sum, const char *path,
                     dt_status *st)
{
    if (r1 <= r0 || e->rowlen == 0) return DT_OK;
    hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
    if (d < 0) return h5_fail(st, DT_EINPUT, path, "cannot open %s", e->path);
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
            h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
        else
            *sum += hash_values(buf, (size_t)n[0], e->esz, r * e->rowlen);
        H5Sclose(msp);
    }
    H5Sclose(fsp);
    H5Dclose(d);
    free(buf);
    return st->code;
}

static int read_checksum(hid_t f, const char *path, uint64_t *stored, dt_status *st)
{
    if (read_attr(f, "/", "state_checksum", H5T_NATIVE_UINT64, stored) < 0)
        return dt_fail(st, DT_EINPUT, "checkpoint %s: no attribute state_checksum (the write did not finish)", path);
    return DT_OK;
}

static int compare_checksum(const struct dlist *dl, uint64_t *sum, uint64_t stored, const char *path,
                            MPI_Comm comm, dt_status *st)
{
    uint64_t *count = dt_xmalloc((size_t)(dl->n + 1) * sizeof *count);
    for (int k = 0; k < dl->n; k++) count[k] = dl->d[k].count;
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum, dl->n, MPI_UINT64_T, MPI_SUM, comm));
    uint64_t computed = chain(count, sum, dl->n);
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
    hid_t f = open_ckpt(comm, path, st);
    if (f < 0) return st->code;
    if (check_format(f, path, st) == DT_OK && read_checksum(f, path, &stored, st) == DT_OK)
        list_datasets(f, path, &dl, st);
    else
        memset(&dl, 0, sizeof dl);
    if (agree(st, comm) == DT_OK) {
        uint64_t *sum = dt_xcalloc((size_t)dl.n + 1, sizeof *sum);
        for (int k = 0; k < dl.n && st->code == DT_OK; k++) {
            const struct dent *e = &dl.d[k];
            hash_rows(f, e, e->rows * (uint64_t)rank / (uint64_t)size, e->rows * (uint64_t)(rank + 1) / (uint64_t)size,
                      &sum[k], path, st);
        }
        if (agree(st, comm) == DT_OK) compare_checksum(&dl, sum, stored, path, comm, st);
        free(sum);
    }
    free(dl.d);
    H5Fclose(f);
    return agree(st, comm);
}

/* ---- reading: into the caller's state -------------------------------------- */

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
            format_dims(a, sizeof a, ker->nd, ker->dims);
            format_dims(b, sizeof b, L->kernel_rank, want);
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
    char *v = a >= 0 ? read_str_attr(a) : NULL;
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
        if (read_attr(f, num[i].obj, num[i].name, num[i].type, num[i].v) < 0)
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
        if (!(*strs[i].v = read_str(f, strs[i].obj, strs[i].name)))
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
            *sum += hash_values(mine + (piece[i].lo - all[rank].off), (size_t)(piece[i].hi - piece[i].lo), 4,
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
        if (b > at && lo < hi) hash_rows(f, e, piece[i].lo + lo, piece[i].lo + hi, sum, path, st);
        at += len;
    }
    free(v);
    free(piece);
    return st->code;
}

static int read_data(hid_t f, const struct dlist *dl, struct dt_ckpt *c, int rank, int size, MPI_Comm comm,
                     uint64_t *sum, const char *path, dt_status *st)
{
    /* Parameters: rank 0 reads them once and broadcasts (P ranks reading
     * the same bytes from a shared file system would cost P reads). */
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
                    h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
                else
                    sum[k] += hash_values(dst[j], (size_t)e->count, 4, 0);
                if (d >= 0) H5Dclose(d);
            }
        }
    }
    if (agree(st, comm) != DT_OK) return st->code;
    if (c->nparams + c->nbuffers) bcast_big(c->params, c->nparams + c->nbuffers, MPI_FLOAT, sizeof(float), comm);

    /* Slots: each rank its own part, collectively. */
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
        const struct dent *e = &dl->d[find_slot(dl, c->slot_names[s])];
        hid_t d = H5Dopen2(f, e->path, H5P_DEFAULT);
        if (d < 0) {
            h5_fail(st, DT_EINPUT, path, "cannot open %s", e->path);
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
            if (H5Dread(d, H5T_NATIVE_FLOAT, msp, fsp, dxpl, c->len ? c->slots[s] : dummy) < 0)
                h5_fail(st, DT_EINPUT, path, "reading %s", e->path);
            H5Sclose(msp);
            H5Sclose(fsp);
        }
        if (d >= 0) H5Dclose(d);
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
    if (agree(st, comm) != DT_OK) goto out;

    /* Dropout streams and history: small; rank 0 reads, everyone gets them. */
    const struct dent *rng = &dl->d[dl->n - 2], *hist = &dl->d[dl->n - 1];
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
                h5_fail(st, DT_EINPUT, path, "reading %s", e2[j]->path);
            else
                sum[dl->n - 2 + j] += hash_values(dst[j], (size_t)e2[j]->count, 8, 0);
            if (d >= 0) H5Dclose(d);
        }
    }
    if (agree(st, comm) != DT_OK) goto out;
    bcast_big(c->all_rng, rng->count, MPI_UINT64_T, 8, comm);
    bcast_big(c->history, hist->count, MPI_DOUBLE, 8, comm);
    if (rank < c->file_nranks) memcpy(c->rng, c->all_rng[rank], sizeof c->rng);
out:
    free(all);
    return st->code;
}

int dt_ckpt_read(MPI_Comm comm, const char *path, struct dt_ckpt *c, dt_status *st)
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
    st->code = DT_OK;
    st->msg[0] = '\0';
    h5_quiet(&q);
    hid_t f = open_ckpt(comm, path, st);
    if (f < 0) goto done;
    if (check_format(f, path, st) == DT_OK && read_checksum(f, path, &stored, st) == DT_OK &&
        list_datasets(f, path, &dl, st) == DT_OK && check_layout(&dl, c, path, st) == DT_OK)
        read_meta(f, c, &s, path, st);
    if (agree(st, comm) != DT_OK) goto close;
    strread_install(&s, c);
    sum = dt_xcalloc((size_t)dl.n + 1, sizeof *sum);
    if (read_data(f, &dl, c, rank, size, comm, sum, path, st) == DT_OK)
        compare_checksum(&dl, sum, stored, path, comm, st);
close:
    H5Fclose(f);
done:
    free(sum);
    free(dl.d);
    strread_free(&s);
    if (agree(st, comm) != DT_OK) dt_ckpt_release(c);
    h5_restore(&q);
    return st->code;
}

void dt_ckpt_release(struct dt_ckpt *c)
{
    free((void *)c->config_keys);  /* the block behind every string read (strread_install) */
    free(c->all_rng);
    free(c->history);
    c->config_keys = c->config_values = NULL;
    c->dtrain_version = c->strategy = c->model = c->command_line = c->optimizer = NULL;
    c->nconfig = 0;
    c->all_rng = NULL;
    c->history = NULL;
    c->nhistory = 0;
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

int dt_ckpt_resolve(MPI_Comm comm, const char *what, const char *dir, char *path_out, size_t path_len,
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
    h5_quiet(&q);
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
        if (st->code == DT_OK && d) {
            char lp[PATH_MAX], line[NAME_MAX + 2] = "", path[PATH_MAX];
            int n;
            struct named *v = list_ckpts(d, &n);
            if (!v) {
                dt_fail(st, DT_EINPUT, "checkpoint directory %s: cannot open: %s", d, strerror(errno));
            } else {
                FILE *fp = join(lp, sizeof lp, d, "latest") == 0 ? fopen(lp, "r") : NULL;
                if (fp) {
                    if (!fgets(line, sizeof line, fp)) line[0] = '\0';
                    fclose(fp);
                    line[strcspn(line, "\r\n")] = '\0';
                    long long e, s;
                    /* Only a name of this directory's own pattern: never a path
                     * (../../etc/passwd, /abs), and the content is not echoed. */
                    if (!parse_ckpt_name(line, &e, &s)) {
                        fprintf(stderr, "dtrain: note: %s does not hold a checkpoint file name (expected one line "
                                "ckpt-EEEEEE-SSSSSSSS.h5); using the newest ckpt-*.h5\n", lp);
                        line[0] = '\0';
                    } else if (join(path, sizeof path, d, line) == 0) {
                        pack_str(&cand, path);
                        ncand++;
                    }
                } else if (n > 0) {
                    fprintf(stderr, "dtrain: note: %s: %s; using the newest ckpt-*.h5\n", lp, strerror(errno));
                }
                for (int i = n - 1; i >= 0; i--)
                    if (strcmp(v[i].name, line) != 0 && join(path, sizeof path, d, v[i].name) == 0) {
                        pack_str(&cand, path);
                        ncand++;
                    }
                free(v);
                if (ncand == 0)
                    dt_fail(st, DT_EINPUT, "checkpoint directory %s: no checkpoint in it (no latest, no ckpt-*.h5)", d);
            }
        }
        if (st->code == DT_OK && !d) snprintf(path_out, path_len, "%s", what);
    }
    if (agree(st, comm) != DT_OK) goto out;
    DT_MPI_CHECK(MPI_Bcast(&ncand, 1, MPI_INT, 0, comm));
    if (ncand == 0) {  /* an explicit file */
        DT_MPI_CHECK(MPI_Bcast(path_out, (int)(strlen(what) + 1), MPI_CHAR, 0, comm));
        goto out;
    }
    pack_bcast(&cand, rank, comm);
    for (int i = 0; i < ncand && found < 0; i++) {
        const char *p = unpack_str(&cand);
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
    h5_restore(&q);
    return st->code;
}
