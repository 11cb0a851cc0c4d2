/* prep_common.c: what every piece of dtrain-prep stands on, and nothing
 * above it: die() and the allocation that dies, the clock, and the register
 * of outputs being written (their temporary names, created, renamed into
 * place), which die() and the signal handler undo.
 *
 * The design decision: the register lives here, not beside the HDF5 writer,
 * because die() must remove the partial outputs and every file calls die();
 * with the two apart, prep_write.c and the file holding die() needed each
 * other (the one circle the source had). Depends on libc alone. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prep/prep.h"

/* Temporary files that exist right now; the signal handler removes them. */
static char **g_tmp_paths;
static volatile sig_atomic_t g_tmp_live;
/* Final names already renamed into place by this run (undone on failure). */
static const char **g_done_paths;
static int g_done;

void die(int code, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (code == EXIT_USAGE)
        fprintf(stderr, "Try '" PROG " --help' for the options.\n");
    remove_partial_outputs();
    exit(code);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL)
        die(EXIT_WRITE, "out of memory (%zu bytes)", n);
    return p;
}

double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- The register of outputs ------------------------------------------------ */

void remove_partial_outputs(void)
{
    for (int i = 0; i < g_tmp_live; i++)
        unlink(g_tmp_paths[i]);
    g_tmp_live = 0;
    for (int i = 0; i < g_done; i++)
        unlink(g_done_paths[i]);
    g_done = 0;
}

void on_signal(int sig)
{
    for (int i = 0; i < g_tmp_live; i++)
        unlink(g_tmp_paths[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void outputs_begin(const char *const *names, int count)
{
    g_tmp_paths = xmalloc((size_t)count * sizeof *g_tmp_paths);
    g_done_paths = xmalloc((size_t)count * sizeof *g_done_paths);
    for (int i = 0; i < count; i++) {
        size_t len = strlen(names[i]) + 32;
        g_tmp_paths[i] = xmalloc(len);
        snprintf(g_tmp_paths[i], len, "%s.tmp.%ld", names[i], (long)getpid());
    }
}

const char *output_create(const char *name, int i)
{
    /* Create it ourselves first: open(2)'s errno says why far better than
     * HDF5's error stack does. */
    int fd = open(g_tmp_paths[i], O_WRONLY | O_CREAT | O_EXCL, 0666);

    if (fd < 0)
        die(EXIT_WRITE, "%s: cannot create the output (as temporary file %s): %s",
            name, g_tmp_paths[i], strerror(errno));
    close(fd);
    g_tmp_live = i + 1;
    return g_tmp_paths[i];
}

void outputs_commit(const char *const *names, int count)
{
    for (int i = 0; i < count; i++) {
        if (rename(g_tmp_paths[i], names[i]) != 0)
            die(EXIT_WRITE, "%s: cannot rename %s into place: %s",
                names[i], g_tmp_paths[i], strerror(errno));
        g_done_paths[g_done++] = names[i];
    }
    g_tmp_live = 0;
    g_done = 0; /* all in place: nothing to undo any more */
}
