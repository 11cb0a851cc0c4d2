/* fuzz_util.h: what the harnesses in tests/fuzz/ share.
 *
 * The parsers under test take paths, not buffers (they are the same code
 * dtrain runs on user files), so each input is written to a scratch file
 * first; one file per process, rewritten for every input. */
#ifndef DT_FUZZ_UTIL_H
#define DT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Write data to this process's scratch file (suffix e.g. ".cfg", ".h5") and
 * return its path; aborts if the file cannot be written, since every later
 * input would then test nothing. */
const char *fuzz_write_temp(const char *suffix, const uint8_t *data, size_t size);
/* The same for a path of the harness's choosing. */
void fuzz_write_file(const char *path, const uint8_t *data, size_t size);
/* A scratch directory for this process, removed (with what is in it) at exit. */
const char *fuzz_temp_dir(void);

/* libFuzzer's entry points, also driven by tests/fuzz/standalone.c. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
