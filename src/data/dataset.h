/* dataset.h: the training and test splits of one or more HDF5 files.
 *
 * Layout (as dtrain-prep writes it): /train/images uint8 [N,H,W,C],
 * /train/labels uint8 [N], optionally /test/... the same, and a root
 * attribute num_classes. Several files are shards of one dataset: their
 * samples are numbered in file order.
 *
 * Rank 0 validates every file (shapes, types, label range) and the verdict is
 * agreed on by all ranks before anyone reads; after that each rank reads only
 * the rows it trains on, as hyperslab selections, never the whole file. */
#ifndef DT_DATASET_H
#define DT_DATASET_H

#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>

#include "nn/layer.h"
#include "runtime/status.h"

enum { DT_TRAIN = 0, DT_TEST = 1 };

struct dt_split {
    int present;
    int64_t n;              /* samples over all files */
    int64_t *file_start;    /* [nfiles+1] prefix sums */
    hid_t *images, *labels; /* per file; -1 where a file has no rows */
};

struct dt_dataset {
    int nfiles;
    char **paths;
    hid_t *files;
    struct dt_shape shape;  /* per image */
    int classes;
    struct dt_split split[2];
    uint8_t *scratch;
    size_t scratch_bytes;
    int synthetic;          /* rows are generated (data/synthetic.c), no files */
    uint64_t synth_seed;
};

int dt_dataset_open(struct dt_dataset *ds, char **paths, int nfiles, MPI_Comm comm, dt_status *st);
/* Read samples idx[0..n) (global indices of the split) into images
 * [n][H][W][C] and labels [n], in idx order. Returns DT_OK or DT_ERUNTIME. */
int dt_dataset_read(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *images,
                    uint8_t *labels, dt_status *st);
void dt_dataset_close(struct dt_dataset *ds);
/* synthetic.c: generate rows idx[0..n) of a synthetic dataset. */
void dt_synthetic_rows(const struct dt_dataset *ds, const int64_t *idx, int n, uint8_t *images, uint8_t *labels);

#endif
