/* fuzz_h5.h: what the two HDF5 harnesses (dataset, checkpoint) share: every
 * HDF5 object the parser opened must be closed again, on every path; a file
 * handle left open keeps the file (and, for a checkpoint that --resume latest
 * skipped, its descriptor) open for the rest of the run. */
#ifndef DT_FUZZ_H5_H
#define DT_FUZZ_H5_H

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs test_one on the input and aborts when HDF5 objects (files, groups,
 * datasets, datatypes, attributes) were left open. */
static inline int fuzz_h5_balanced(int (*test_one)(const uint8_t *, size_t), const uint8_t *data, size_t size)
{
    long before = (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    test_one(data, size);
    long after = (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (after != before) {
        fprintf(stderr, "HDF5 objects open: %ld before this input, %ld after\n", before, after);
        abort();
    }
    return 0;
}

#endif
