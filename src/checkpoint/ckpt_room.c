/* ckpt_room.c: room on the disk for a checkpoint, made before HDF5 writes.
 *
 * A full disk is the one write error to keep away from HDF5 (see below), so
 * dt_ckpt_write checks the room first and ckpt_write_file reserves it as
 * soon as the file exists. Both sides use these three functions, which is
 * why they are a file of their own. */
#define _GNU_SOURCE /* fallocate, FALLOC_FL_KEEP_SIZE */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "checkpoint/ckpt_internal.h"

/* A full disk is the one write error to keep away from HDF5: parallel HDF5
 * 1.10 does not recover from an I/O error inside a metadata flush (the
 * ranks leave its collective calls at different points and wait forever;
 * seen with a nearly full tmpfs), and a failed close crashes it at exit.
 * So the room is made first: rank 0 reserves an upper bound of the file's
 * size with fallocate (KEEP_SIZE: the file stays empty, the blocks are
 * its), and a lower bound is checked against free space and every rank's
 * file size limit where fallocate is not available. */
void ckpt_size_bounds(const struct view *v, int size, uint64_t *low, uint64_t *high)
{
    const struct dt_ckpt *m = &v->m;
    uint64_t data = 4 * (uint64_t)m->nparams * (1 + (uint64_t)m->nslots) + 4 * (uint64_t)m->nbuffers + 32 * (uint64_t)size +
                    8 * DT_CKPT_HIST * (uint64_t)m->nhistory + m->model_text_len + 8 * (uint64_t)m->nmerges;
    uint64_t text = strlen(m->command_line), objects = 2 * (uint64_t)m->nlayers + (uint64_t)m->nslots + 13;
    for (int i = 0; i < m->nconfig; i++) text += strlen(v->keys[i]) + strlen(v->values[i]);
    *low = data + text + 2048 + 256 * objects;
    *high = data + 2 * text + 65536 + 4096 * objects;
}

int ckpt_check_room(const struct view *v, int rank, int size, const char *dir, const char *final, dt_status *st)
{
    uint64_t need, high;
    ckpt_size_bounds(v, size, &need, &high);
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
int ckpt_reserve(const char *tmp, const char *final, uint64_t bytes, dt_status *st)
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
