/* ckpt_write.c: dt_ckpt_write, everything around the HDF5 file itself
 * (which ckpt_h5write.c writes): the view of the state that every rank
 * agrees on and checks, room made on the disk first (ckpt_room.c), and publishing the
 * finished file under its name and in DIR/latest.
 *
 * The one thing to know: a checkpoint either fully replaces the previous one
 * or leaves it untouched. The file is written under a temporary name,
 * flushed, renamed, and only then is latest replaced the same way; any
 * failure on any rank is agreed on and removes the temporary file. */
#define _GNU_SOURCE
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/ckpt_internal.h"
#include "runtime/checks.h"
#include "runtime/fault.h"
#include "runtime/h5lock.h"

/* ---- the agreed view of what to write ------------------------------------------ */

/* Rank 0's description broadcast to all (struct view, ckpt_internal.h). */
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
        ckpt_pack_bytes(p, c, sizeof *c);
        ckpt_pack_bytes(p, created, sizeof created);
        ckpt_pack_str(p, c->dtrain_version ? c->dtrain_version : PACKAGE_VERSION);
        ckpt_pack_str(p, c->strategy);
        ckpt_pack_str(p, c->model);
        ckpt_pack_str(p, c->command_line);
        ckpt_pack_str(p, c->optimizer);
        for (int s = 0; s < c->nslots && s < 2; s++) ckpt_pack_str(p, c->slot_names[s]);
        for (int i = 0; i < c->nconfig; i++) {
            ckpt_pack_str(p, c->config_keys[i]);
            ckpt_pack_str(p, c->config_values[i]);
        }
        for (int l = 0; l < c->nlayers; l++) {
            ckpt_pack_bytes(p, &c->layers[l], sizeof c->layers[l]);
            ckpt_pack_str(p, c->layers[l].name);
        }
        uint64_t ntext = c->model_text ? c->model_text_len : 0, nm = c->tokenizer && c->merges ? c->nmerges : 0;
        ckpt_pack_bytes(p, &ntext, sizeof ntext);
        if (ntext) ckpt_pack_bytes(p, c->model_text, ntext);
        ckpt_pack_str(p, c->tokenizer ? c->tokenizer : "");
        ckpt_pack_bytes(p, &nm, sizeof nm);
        if (nm) ckpt_pack_bytes(p, c->merges, nm * 2 * sizeof(int32_t));
    }
    ckpt_pack_bcast(p, rank, comm);
    ckpt_unpack_bytes(p, &v->m, sizeof v->m);
    ckpt_unpack_bytes(p, v->created, sizeof v->created);
    v->m.dtrain_version = ckpt_unpack_str(p);
    v->m.strategy = ckpt_unpack_str(p);
    v->m.model = ckpt_unpack_str(p);
    v->m.command_line = ckpt_unpack_str(p);
    v->m.optimizer = ckpt_unpack_str(p);
    for (int s = 0; s < v->m.nslots && s < 2; s++) v->slot_names[s] = ckpt_unpack_str(p);
    int nconfig = v->m.nconfig > 0 ? v->m.nconfig : 0, nlayers = v->m.nlayers > 0 ? v->m.nlayers : 0;
    v->keys = dt_xcalloc((size_t)nconfig + 1, sizeof *v->keys);
    v->values = dt_xcalloc((size_t)nconfig + 1, sizeof *v->values);
    for (int i = 0; i < nconfig; i++) {
        v->keys[i] = ckpt_unpack_str(p);
        v->values[i] = ckpt_unpack_str(p);
    }
    v->layers = dt_xcalloc((size_t)nlayers + 1, sizeof *v->layers);
    for (int l = 0; l < nlayers; l++) {
        ckpt_unpack_bytes(p, &v->layers[l], sizeof v->layers[l]);
        v->layers[l].name = ckpt_unpack_str(p);
    }
    uint64_t ntext, nm;
    ckpt_unpack_bytes(p, &ntext, sizeof ntext);
    v->m.model_text = p->buf + p->pos;  /* bytes, not a string: model_text_len of them */
    v->m.model_text_len = (size_t)ntext;
    p->pos += ntext;
    const char *tokenizer = ckpt_unpack_str(p);
    v->m.tokenizer = tokenizer[0] ? tokenizer : NULL;
    ckpt_unpack_bytes(p, &nm, sizeof nm);
    v->merges = dt_xmalloc(sizeof(int32_t) * 2 * (size_t)nm + 1); /* aligned, unlike the packed bytes */
    ckpt_unpack_bytes(p, v->merges, sizeof(int32_t) * 2 * (size_t)nm);
    v->m.merges = v->merges;
    v->m.nmerges = (uint32_t)nm;
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
    free(v->merges);
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
    if (m->nlayers < 0 || m->nconfig < 0 || m->nhistory < 0 || m->epoch < 0 || m->step < 0 || m->classes < 0)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: negative count in the state to write", dir);
    if (m->tokenizer && strlen(m->tokenizer) >= MAX_NAME)
        return dt_fail(st, DT_ERUNTIME, "checkpoint %s: tokenizer name of %zu bytes", dir, strlen(m->tokenizer));
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

/* ---- publishing the file (rank 0) ------------------------------------------- */

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
        if (ckpt_join(path, sizeof path, dir, e->d_name) == 0 && unlink(path) == 0)
            fprintf(stderr, "dtrain: note: removed %s, left by an interrupted checkpoint\n", path);
    }
    if (d) closedir(d);
}

static void prune(const char *dir, const char *keep_name, int keep)
{
    int n;
    remove_stale(dir);
    if (keep <= 0) return;
    struct named *v = ckpt_list(dir, &n);
    if (!v) return;
    int extra = n - keep;
    for (int i = 0; i < n && extra > 0; i++) {
        char path[PATH_MAX];
        if (!strcmp(v[i].name, keep_name)) continue;
        if (ckpt_join(path, sizeof path, dir, v[i].name) == 0 && unlink(path) != 0)
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
    if (ckpt_join(ltmp, sizeof ltmp, dir, ".latest.tmp") != 0 || ckpt_join(latest, sizeof latest, dir, "latest") != 0) {
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

static int write_locked(MPI_Comm comm, const char *dir, int keep, const struct dt_ckpt *c, char *path_out,
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
    ckpt_h5_quiet(&q);
    view_build(&v, c, rank, comm);
    view_check(&v, dir, st);
    if (st->code == DT_OK) check_parts(&v, rank, size, comm, dir, st);
    if (rank == 0 && st->code == DT_OK) {
        snprintf(names.base, sizeof names.base, "ckpt-%06d-%08lld.h5", v.m.epoch, (long long)v.m.step);
        char tmpbase[128];
        snprintf(tmpbase, sizeof tmpbase, ".%s.tmp.%ld", names.base, (long)getpid());
        if (ckpt_join(names.tmp, sizeof names.tmp, dir, tmpbase) != 0 || ckpt_join(names.final, sizeof names.final, dir, names.base) != 0)
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
    ckpt_check_room(&v, rank, size, dir, names.final, st);
    if (agree(st, comm) == DT_OK && ckpt_write_file(names.tmp, names.final, &v, rank, size, comm, st) == DT_OK && rank == 0)
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
    ckpt_h5_restore(&q);
    return st->code;
}

/* HDF5 is not thread-safe here (runtime/h5lock.h): an asynchronous
 * checkpoint's writer thread and the main thread take turns. */
int dt_ckpt_write(MPI_Comm comm, const char *dir, int keep, const struct dt_ckpt *c, char *path_out,
                  size_t path_len, dt_status *st)
{
    dt_h5_lock();
    int rc = write_locked(comm, dir, keep, c, path_out, path_len, st);
    dt_h5_unlock();
    return rc;
}
