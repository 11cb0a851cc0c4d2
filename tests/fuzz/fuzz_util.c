/* fuzz_util.c: the scratch files every harness writes its input to. */
#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[4096], scratch_dir[4096];

/* Leaks that are not ours, for LSan (under libFuzzer or --enable-sanitizers):
 * MPI and HDF5 keep allocations for the life of the process, and HDF5 drops
 * a few on its error paths through damaged files. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libmpi.so\nleak:libopen-rte.so\nleak:libopen-pal.so\nleak:mca_\nleak:libevent\n"
           "leak:libhwloc\nleak:libpmix\nleak:libhdf5\nleak:vasprintf\n";
}

static const char *tmp_root(void)
{
    const char *dir = getenv("TEST_TMP");
    if (!dir || !dir[0]) dir = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = "/tmp";
    return dir;
}

static void remove_scratch(void)
{
    if (scratch[0]) unlink(scratch);
    if (scratch_dir[0]) {
        DIR *d = opendir(scratch_dir);
        struct dirent *e;
        char path[8192];
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", scratch_dir, e->d_name);
                unlink(path);
            }
        if (d) closedir(d);
        rmdir(scratch_dir);
    }
}

void fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

const char *fuzz_write_temp(const char *suffix, const uint8_t *data, size_t size)
{
    if (!scratch[0]) {
        snprintf(scratch, sizeof scratch, "%s/dtrain-fuzz-%ld%s", tmp_root(), (long)getpid(), suffix);
        atexit(remove_scratch);
    }
    fuzz_write_file(scratch, data, size);
    return scratch;
}

const char *fuzz_temp_dir(void)
{
    if (!scratch_dir[0]) {
        snprintf(scratch_dir, sizeof scratch_dir, "%s/dtrain-fuzz-XXXXXX", tmp_root());
        if (!mkdtemp(scratch_dir)) {
            perror(scratch_dir);
            abort();
        }
        if (!scratch[0]) atexit(remove_scratch);
    }
    return scratch_dir;
}
