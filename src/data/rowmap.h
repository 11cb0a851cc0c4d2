/* rowmap.h: where each row of a split lives in its file, for reading with
 * plain pread() instead of HDF5.
 *
 * HDF5 here is not thread-safe, and the loader's thread (loader.h) must not
 * call it while the main thread does. So, once at open and in the calling
 * thread, the HDF5 layer is asked where each dataset's bytes are: one
 * address for contiguous storage (H5Dget_offset), or one per chunk for
 * chunked storage without filters whose chunks hold whole rows
 * (H5Dget_chunk_info_by_coord, HDF5 >= 1.10.5). After that, reading a row is
 * arithmetic and a pread() from a descriptor of our own: no HDF5, no MPI, any
 * thread. The labels (a byte a row) are read whole at open, so a batch costs
 * a pread per run of image rows, not two. Storage that cannot be read that
 * way (compressed or otherwise filtered chunks, compact or external storage,
 * chunks that split rows or were never written) is refused with the reason,
 * and the caller reads through HDF5 in the main thread instead. A token
 * dataset (data/tokens.h) maps its contiguous token streams, a window being
 * T + 1 tokens at token i T, widened to int32 after the read. */
#ifndef DT_ROWMAP_H
#define DT_ROWMAP_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset_rows.h"
#include "runtime/status.h"

/* One dataset's rows: row r starts at file offset
 *   contiguous: base + r * row_bytes
 *   chunked:    chunk[r / chunk_rows] + (r % chunk_rows) * row_bytes */
struct dt_rowmap_dset {
    size_t row_bytes;
    int64_t rows;
    uint64_t base;          /* contiguous; or 0 */
    int64_t chunk_rows;     /* 0 = contiguous */
    uint64_t *chunk;        /* [ceil(rows / chunk_rows)] file offsets */
};

struct dt_rowmap {
    int nfiles;
    const int64_t *file_start;  /* the split's prefix sums (the dataset's) */
    char **paths;               /* the dataset's, for messages */
    int *fd;                    /* [nfiles] our own read-only descriptors */
    struct dt_rowmap_dset *images, *labels; /* [nfiles] */
    uint8_t **label_rows;       /* [nfiles][rows]: every label, read once at open */
    size_t row;                 /* image bytes (a token window: int32 [block + 1]) */
    int block;                  /* a token dataset's window T (data/tokens.h); 0 for images */
    size_t tsize;               /* its tokens' bytes in the file (2 or 4) */
};

/* In the thread that owns HDF5, after dt_dataset_open. Returns DT_OK, or
 * DT_EINPUT with st saying which file and why its rows cannot be read
 * directly (nothing is left open then). Synthetic datasets are refused too:
 * they have no files (the loader generates their rows itself). */
int dt_rowmap_open(struct dt_rowmap *m, const struct dt_dataset *ds, int split, dt_status *st);
/* Samples idx[0..n) (global indices of the split) into images [n][row] and
 * labels [n], in idx order; scratch holds n (int64_t + int) entries. Any
 * thread, concurrently with HDF5 in another. Returns DT_OK, or DT_ERUNTIME
 * with st naming the file, the offset and the system's error. */
int dt_rowmap_read(const struct dt_rowmap *m, const int64_t *idx, int n, uint8_t *images, uint8_t *labels,
                   void *scratch, dt_status *st);
/* Bytes of scratch dt_rowmap_read needs for n samples. */
size_t dt_rowmap_scratch_bytes(int n);
void dt_rowmap_close(struct dt_rowmap *m);

#endif
