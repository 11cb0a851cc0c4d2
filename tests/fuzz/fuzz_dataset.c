/* fuzz_dataset.c: libFuzzer harness for dataset files (src/data/dataset.c).
 *
 * The input is an HDF5 file. dt_dataset_open validates it on rank 0 (layout,
 * types, shapes, num_classes, every label) and then opens it through MPI-IO;
 * when it is accepted the first and last training rows are read, as a
 * training step would. MPI is initialised once, as a singleton (no mpirun
 * needed). Random bytes rarely get past HDF5's superblock check, so the seed
 * corpus holds small valid files (tests/mkfixture, dtrain-prep) and their
 * near-misses, and libFuzzer mutates those. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "fuzz_h5.h"
#include "fuzz_util.h"

enum { MAX_ROW_BYTES = 1 << 22 }; /* rows a valid tiny file cannot hold are not read */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_h5_init(argc, argv);
    return 0;
}

static int test_one(const uint8_t *data, size_t size)
{
    char *paths[1] = {(char *)fuzz_write_temp(".h5", data, size)};
    struct dt_dataset ds;
    dt_status st = {0};
    if (dt_dataset_open(&ds, paths, 1, MPI_COMM_WORLD, &st) != DT_OK) {
        if (!st.msg[0]) abort(); /* a refusal must say why */
        return 0;
    }
    size_t row = dt_shape_size(ds.shape);
    int64_t n = ds.split[DT_TRAIN].n;
    if (ds.shape.h <= 0 || ds.shape.w <= 0 || ds.shape.c <= 0 || n <= 0 || ds.classes < 0) abort();
    if (row <= MAX_ROW_BYTES) {
        int64_t idx[2] = {0, n - 1};
        uint8_t *images = malloc(2 * row), labels[2];
        if (!images) abort();
        if (dt_dataset_read(&ds, DT_TRAIN, idx, 2, images, labels, &st) != DT_OK && !st.msg[0]) abort();
        free(images);
    }
    dt_dataset_close(&ds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_h5_balanced(test_one, data, size); }
