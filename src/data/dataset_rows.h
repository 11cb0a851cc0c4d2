/* dataset_rows.h: an open dataset and the reading of its rows, without MPI.
 *
 * The half of data/dataset.h that the loader, the synthetic data and the
 * row map need: what an open dataset holds (shape, classes, splits, files)
 * and how rows are read from it. Opening is collective and lives in
 * dataset.h.
 *
 * The one design decision: the HDF5 handles are held as int64_t, which is
 * what HDF5 (>= 1.10) defines hid_t to be (dataset.c asserts it), so this
 * header needs neither hdf5.h nor, through parallel HDF5's hdf5.h, mpi.h. */
#ifndef DT_DATASET_ROWS_H
#define DT_DATASET_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"
#include "tensor.h"

enum { DT_TRAIN = 0, DT_TEST = 1 };

struct dt_split {
    int present;
    int64_t n;              /* samples over all files */
    int64_t *file_start;    /* [nfiles+1] prefix sums */
    int64_t *images, *labels; /* per file, HDF5 dataset ids (hid_t); -1 where a file has no rows
                                 (a token dataset: images are the /split/tokens streams, labels -1) */
    int64_t *ntokens;       /* a token dataset: [nfiles] tokens per file */
};

struct dt_dataset {
    int nfiles;
    char **paths;
    int64_t *files;         /* HDF5 file ids (hid_t) */
    struct dt_shape shape;  /* per image */
    int classes;
    struct dt_split split[2];
    uint8_t *scratch;
    size_t scratch_bytes;
    int synthetic;          /* rows are generated (data/synthetic.c), no files */
    int tokens;             /* token windows (data/tokens.h): classes is the vocabulary */
    int block;              /* tokens: the window's positions T (dt_dataset_set_block) */
    char tokenizer[16];     /* tokens: "byte" or "bpe", the files' tokenizer (dt_tokens_tokenizer) */
    uint32_t nmerges;       /* tokens: its merges, [nmerges][2] (0 for bytes) */
    int32_t *merges;
    uint64_t synth_seed;
};

/* Read samples idx[0..n) (global indices of the split) into images
 * [n][H][W][C] and labels [n], in idx order. Returns DT_OK or DT_ERUNTIME. */
int dt_dataset_read(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *images,
                    uint8_t *labels, dt_status *st);
void dt_dataset_close(struct dt_dataset *ds);
/* synthetic.c: generate rows idx[0..n) of a synthetic dataset. */
void dt_synthetic_rows(const struct dt_dataset *ds, const int64_t *idx, int n, uint8_t *images, uint8_t *labels);

#endif
