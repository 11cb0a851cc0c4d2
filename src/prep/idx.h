/* idx.h: read an IDX file (the MNIST container format) into memory.
 *
 * An IDX file is a 4-byte magic (0x00 0x00 TYPE NDIM), NDIM big-endian
 * uint32 dimensions, then the elements in row-major order. Only unsigned
 * bytes (TYPE 0x08) with 1 to 4 dimensions are supported: that covers every
 * MNIST-family image and label file. Files are read through zlib, so gzip
 * and plain files are both accepted.
 *
 * This module depends on zlib and libc only; tests/check_idx links it alone.
 */
#ifndef DT_PREP_IDX_H
#define DT_PREP_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4

struct idx_array {
    int ndim;                       /* 1..IDX_MAX_DIMS */
    uint32_t dims[IDX_MAX_DIMS];    /* dims[0] is the sample count */
    uint8_t *data;                  /* [dims[0], dims[1], ...], row-major */
    size_t count;                   /* product of dims = bytes in data */
};

/* Read PATH into OUT (which idx_free must release). On failure returns
 * non-zero, leaves OUT empty and writes one line into ERR that starts with
 * PATH and says what was expected and what was found. */
int idx_read(const char *path, struct idx_array *out, char *err, size_t errlen);

/* Release OUT's data and reset it to empty; safe on an empty array. */
void idx_free(struct idx_array *out);

#endif /* DT_PREP_IDX_H */
