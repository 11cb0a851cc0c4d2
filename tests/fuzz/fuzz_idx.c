/* fuzz_idx.c: libFuzzer harness for dtrain-prep's IDX reader (src/prep/idx.c).
 *
 * The input is the file's bytes, plain or gzip; idx_read must either return
 * an array whose count matches its dims and data, or refuse with a message
 * naming the file. The reader streams through zlib, so the harness goes
 * through a real file rather than a buffer. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "prep/idx.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_temp(".idx", data, size);
    struct idx_array a;
    char err[512] = "";
    if (idx_read(path, &a, err, sizeof err) == 0) {
        size_t count = 1;
        if (a.ndim < 1 || a.ndim > IDX_MAX_DIMS) abort();
        for (int i = 0; i < a.ndim; i++) count *= a.dims[i];
        if (count != a.count) abort();
        volatile uint8_t sink = 0; /* every byte claimed must be readable */
        for (size_t i = 0; i < a.count; i++) sink ^= a.data[i];
        (void)sink;
    }
    else if (strncmp(err, path, strlen(path)) != 0) {
        abort(); /* a refusal must name the file */
    }
    idx_free(&a);
    return 0;
}
