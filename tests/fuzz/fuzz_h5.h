/* fuzz_h5.h: what the two HDF5 harnesses (dataset, checkpoint) share: their
 * ASan defaults, MPI and MPI-IO set up before the first input, and the check
 * that every HDF5 object the parser opened is closed again, on every path (a
 * file handle left open keeps the file, and for a checkpoint that --resume
 * latest skipped its descriptor, open for the rest of the run).
 *
 * Included by the one harness file of each program (it defines
 * __asan_default_options). */
#ifndef DT_FUZZ_H5_H
#define DT_FUZZ_H5_H

#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"

/* ASan defaults for these harnesses: a huge allocation returns NULL, as malloc
 * does without ASan, because HDF5 sizes some buffers from lengths in the file
 * and fails cleanly when they cannot be had; and no leak check at exit, where
 * MPI's components (never finalized, see below) hold memory. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:leak_check_at_exit=0";
}

/* MPI, never finalized: MPI_Finalize unloads Open MPI's components, and what
 * they still hold would be reported as leaks with no module to suppress.
 * Open MPI loads its MPI-IO components at the first file HDF5 opens through
 * it, and their set-up allocations would count as that input's leak: write
 * and read one file that way now. */
static inline void fuzz_h5_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    const char *warm = fuzz_write_temp(".h5", (const uint8_t *)"", 0);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    H5Fclose(H5Fcreate(warm, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    H5Fclose(H5Fopen(warm, H5F_ACC_RDONLY, fapl));
    H5Pclose(fapl);
}

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
