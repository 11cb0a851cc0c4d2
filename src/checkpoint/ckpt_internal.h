/* ckpt_internal.h: what the pieces of checkpoint/ share; not for the rest of
 * dtrain (which includes checkpoint/checkpoint.h only).
 *
 * The module is split along the life of a file:
 *   checkpoint.c     checksums, HDF5 errors as messages, small helpers
 *   ckpt_write.c     dt_ckpt_write: the agreed view, publishing
 *   ckpt_room.c      room on the disk, checked and reserved before HDF5 writes
 *   ckpt_h5write.c   the HDF5 file itself, and the checksum while writing
 *   ckpt_validate.c  what a file holds, its checksum; dt_ckpt_resolve
 *   ckpt_read.c      dt_ckpt_read: into the caller's state
 *
 * The one rule the pieces keep together: every collective HDF5 call is
 * made by every rank with the same values, so whatever goes into metadata
 * comes from rank 0's copy (struct view), and every failure is agreed on
 * (agree) before the next collective step. */
#ifndef DT_CKPT_INTERNAL_H
#define DT_CKPT_INTERNAL_H

#include <hdf5.h>
#include <limits.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "runtime/checks.h" /* dt_status_agree, DT_H5_CHECK */

#define FORMAT_NAME "dtrain-checkpoint"
#define FORMAT_VERSION 2       /* 2: /model_text, /tokenizer, num_classes */
#define FORMAT_OLDEST 1        /* the oldest version still read */
#define MAX_NAME 256          /* layer and slot names */
#define HASH_CHUNK (1u << 22) /* values read at a time by the checksum passes */

/* ---- checkpoint.c: checksums ---------------------------------------------- */

/* Sum over values first..first+n-1 of a dataset (esz bytes each, as stored:
 * little-endian). */
uint64_t ckpt_hash_values(const void *v, size_t n, size_t esz, uint64_t first);
/* The per-dataset (count, sum) pairs chained with FNV-1a: the state checksum. */
uint64_t ckpt_chain(const uint64_t *count, const uint64_t *sum, int n);

/* ---- checkpoint.c: HDF5 errors as our messages ------------------------------ */

/* HDF5's own error printing, switched off while a call of ours runs. */
struct h5quiet {
    H5E_auto2_t func;
    void *data;
};
void ckpt_h5_quiet(struct h5quiet *q);
void ckpt_h5_restore(const struct h5quiet *q);

/* "checkpoint PATH: WHAT: what HDF5 said"; call it right after the failed
 * HDF5 call (any other clears HDF5's error stack). Returns code. */
int ckpt_h5_fail(dt_status *st, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- checkpoint.c: small helpers ---------------------------------------------- */

static inline int agree(dt_status *st, MPI_Comm comm) { return dt_status_agree(st, comm); }

/* dir/name into out[n]; -1 if it does not fit. */
int ckpt_join(char *out, size_t n, const char *dir, const char *name);
/* MPI_Bcast from rank 0 of any count, in pieces an int can count. */
void ckpt_bcast_big(void *buf, size_t count, MPI_Datatype type, size_t esz, MPI_Comm comm);

/* A byte buffer that rank 0 fills and broadcasts. */
struct pack {
    char *buf;
    size_t len, cap, pos;
};
void ckpt_pack_bytes(struct pack *p, const void *v, size_t n);
void ckpt_pack_str(struct pack *p, const char *s);
void ckpt_unpack_bytes(struct pack *p, void *v, size_t n);
const char *ckpt_unpack_str(struct pack *p);
void ckpt_pack_bcast(struct pack *p, int rank, MPI_Comm comm);

static inline int64_t kernel_count(const struct dt_ckpt_layer *l)
{
    int64_t n = 1;
    for (int d = 0; d < l->kernel_rank; d++) n *= l->kernel_dims[d];
    return n;
}

static inline int has_params(const struct dt_ckpt_layer *l) { return l->kernel_rank > 0; }

/* "[a,b,c]" */
void ckpt_format_dims(char *buf, size_t len, int nd, const hsize_t *d);

/* Checkpoint file names: ckpt-<epoch>-<step>.h5. */
int ckpt_parse_name(const char *name, long long *epoch, long long *step);

struct named {
    char name[NAME_MAX + 1];
    long long epoch, step;
};
/* The ckpt-*.h5 files of dir, oldest first; NULL (errno set) if dir cannot be read. */
struct named *ckpt_list(const char *dir, int *n);

/* One rank's slot part [off, off + len) and a flag, as gathered. */
struct part {
    uint64_t off, len, flag;
};

/* ---- ckpt_write.c, ckpt_h5write.c: writing --------------------------------------- */

/* What every rank writes: rank 0's replicated values (copied as bytes,
 * since every rank runs the same binary, then pointers rebuilt from the
 * broadcast strings) and this rank's own slot part and dropout stream. */
struct view {
    struct dt_ckpt m;
    struct dt_ckpt_layer *layers;  /* [m.nlayers] */
    const char **keys, **values;   /* [m.nconfig] */
    const char *slot_names[2];
    char created[32];
    int32_t *merges;               /* [m.nmerges][2], copied out of the pack */
    struct pack pk;                /* holds the strings and the model text */
};

/* Bounds of the file's size, for the room made before writing. */
void ckpt_size_bounds(const struct view *v, int size, uint64_t *low, uint64_t *high);
/* Rank 0, once HDF5 has created the file: fallocate bytes for it. */
int ckpt_reserve(const char *tmp, const char *final, uint64_t bytes, dt_status *st);
/* The file size limit of every rank and rank 0's free space against the
 * lower bound; collective verdict left to the caller. */
int ckpt_check_room(const struct view *v, int rank, int size, const char *dir, const char *final, dt_status *st);
/* Collective: the whole file tmp (where: its final name, for messages). */
int ckpt_write_file(const char *tmp, const char *where, const struct view *v, int rank, int size,
                    MPI_Comm comm, dt_status *st);

/* ---- ckpt_validate.c: what a file holds ------------------------------------------ */

enum dkind { D_KERNEL, D_BIAS, D_SLOT, D_RNG, D_HIST, D_TEXT, D_MERGES };

/* One dataset of the file. */
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

/* Every dataset of the file, in checksum order: kernel and bias of each
 * layer, the slots, /rng/dropout, /history, then /model_text and
 * /tokenizer/merges where the file has them (version 2). */
struct dlist {
    struct dent *d;
    int n, cap;
    int nlayers;            /* groups under /model */
    int rng, hist;          /* indices of /rng/dropout and /history */
    int text, merges;       /* of /model_text and /tokenizer/merges; -1: absent */
};

/* Opens path collectively for reading; -1 (on every rank) on failure. */
hid_t ckpt_open(MPI_Comm comm, const char *path, dt_status *st);
int ckpt_check_format(hid_t f, const char *path, dt_status *st);
int ckpt_read_checksum(hid_t f, const char *path, uint64_t *stored, dt_status *st);
int ckpt_list_datasets(hid_t f, const char *file, struct dlist *dl, dt_status *st);
/* Collective: the chained checksum of the ranks' sums against stored. */
int ckpt_compare_checksum(const struct dlist *dl, uint64_t *sum, uint64_t stored, const char *path,
                          MPI_Comm comm, dt_status *st);
/* Sum over rows [r0, r1) of dataset e, read independently a piece at a time. */
int ckpt_hash_rows(hid_t f, const struct dent *e, uint64_t r0, uint64_t r1, uint64_t *sum, const char *path,
                   dt_status *st);

/* Attributes: a scalar number (0, or -1 if missing or not one), a string as
 * a malloc'd string (NULL if missing or not text). */
int ckpt_read_attr(hid_t f, const char *obj, const char *name, hid_t mtype, void *v);
char *ckpt_read_str_attr(hid_t a);
char *ckpt_read_str(hid_t f, const char *obj, const char *name);

#endif
