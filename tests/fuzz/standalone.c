/* standalone.c: a main() that drives a fuzz harness without libFuzzer.
 *
 * Linked with one tests/fuzz/fuzz_<name>.c by the normal compiler (gcc in
 * CI), it feeds every file named on the command line, or every file in each
 * directory named, to LLVMFuzzerTestOneInput once: tests/fuzz_regress.sh runs
 * the seed corpus and tests/fuzz/crashes/ through it on every make check. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static long nrun;

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    fprintf(stderr, "# %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    nrun++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        perror(path);
        exit(2);
    }
    if (!S_ISDIR(sb.st_mode)) {
        run_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        exit(2);
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., .gitkeep */
        names = realloc(names, (n + 1) * sizeof *names);
        if (!names) abort();
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) abort();
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name); /* the same order on every run */
    for (size_t i = 0; i < n; i++) {
        run_file(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) run_path(argv[i]);
    printf("%ld inputs run, none crashed\n", nrun);
    return 0;
}
