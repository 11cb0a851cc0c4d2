/* fuzz_options.c: libFuzzer harness for dtrain's command line
 * (dt_options_parse, src/options.c).
 *
 * The input is split into arguments at NUL and newline bytes and given to
 * the parser after argv[0] = "dtrain", each argument its own allocation so
 * that a read past one is seen. The parser must either accept (and then
 * every input and string it kept must still be readable) or refuse with a
 * message. Nothing it does may depend on an earlier call: getopt_long keeps
 * state between calls, and libFuzzer calls it millions of times in one
 * process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "options.h"

enum { MAX_ARGS = 64 };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = strdup("dtrain");
    for (size_t start = 0; start <= size && argc < MAX_ARGS;) {
        size_t end = start;
        while (end < size && data[end] != '\0' && data[end] != '\n') end++;
        if (end == size && start == size && size > 0) break; /* a trailing separator ends the list */
        char *arg = malloc(end - start + 1);
        if (!arg) abort();
        memcpy(arg, data + start, end - start);
        arg[end - start] = '\0';
        argv[argc++] = arg;
        start = end + 1;
    }
    argv[argc] = NULL;
    char *copy[MAX_ARGS + 1]; /* getopt permutes argv: free what was allocated */
    memcpy(copy, argv, sizeof argv);

    /* Parse twice: the verdicts must agree, or state from the previous input
     * (getopt's half-scanned "-abc" cluster) leaked into this one. */
    struct dt_config cfg[2];
    dt_status st[2] = {{0}, {0}};
    int rc[2];
    for (int k = 0; k < 2; k++) {
        memcpy(argv, copy, sizeof argv);
        rc[k] = dt_options_parse(&cfg[k], argc, argv, &st[k]);
        if (rc[k] != DT_OK && !st[k].msg[0]) abort(); /* a refusal must say why */
        if (k == 0) {
            volatile size_t sink = 0;
            if (rc[0] == DT_OK) {
                for (int i = 0; i < cfg[0].ninputs; i++) sink += strlen(cfg[0].inputs[i]);
                const char *kept[] = {cfg[0].model, cfg[0].optimizer, cfg[0].strategy, cfg[0].allreduce,
                                      cfg[0].synthetic, cfg[0].augment, cfg[0].checkpoint_dir, cfg[0].resume,
                                      cfg[0].monitor, cfg[0].device, cfg[0].command_line};
                for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
                    if (kept[i]) sink += strlen(kept[i]);
            }
            (void)sink;
            dt_options_free(&cfg[0]);
        }
    }
    if (rc[0] != rc[1] || strcmp(st[0].msg, st[1].msg) != 0) {
        fprintf(stderr, "dt_options_parse: two parses of the same argv differ: %d '%s' vs %d '%s'\n",
                rc[0], st[0].msg, rc[1], st[1].msg);
        abort();
    }
    dt_options_free(&cfg[1]);
    for (int i = 0; i < argc; i++) free(copy[i]);
    return 0;
}
