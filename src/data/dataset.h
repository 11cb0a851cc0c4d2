/* dataset.h: the training and test splits of one or more HDF5 files.
 *
 * Layout (as dtrain-prep writes it): /train/images uint8 [N,H,W,C],
 * /train/labels uint8 [N], optionally /test/... the same, and a root
 * attribute num_classes. Several files are shards of one dataset: their
 * samples are numbered in file order.
 *
 * Rank 0 validates every file (shapes, types, label range) and the verdict is
 * agreed on by all ranks before anyone reads; after that each rank reads only
 * the rows it trains on, as hyperslab selections, never the whole file.
 *
 * This header is the collective half, opening; what an open dataset holds
 * and the reading of its rows are in dataset_rows.h, which needs no MPI. */
#ifndef DT_DATASET_H
#define DT_DATASET_H

#include <mpi.h>

#include "data/dataset_rows.h" /* struct dt_dataset, reading rows */
#include "runtime/status.h"

/* Collective over comm: rank 0 validates the files, every rank learns the
 * verdict, then each opens them for its own reads. */
int dt_dataset_open(struct dt_dataset *ds, char **paths, int nfiles, MPI_Comm comm, dt_status *st);
/* The same with the class count stated (--num-classes; 0: from the files'
 * num_classes attribute, else inferred from the labels under the rule of
 * data/classes.h). A stated count the attribute contradicts is refused. */
int dt_dataset_open_classes(struct dt_dataset *ds, char **paths, int nfiles, int classes, MPI_Comm comm,
                            dt_status *st);

/* A token dataset's windows: T positions (the model's block_size), so
 * T + 1 tokens a sample, the shape 1 x (T + 1) x 4 (int32 bytes), and each
 * split's samples counted. Refused when no window fits. A no-op for images. */
int dt_dataset_set_block(struct dt_dataset *ds, int T, dt_status *st);

#endif
