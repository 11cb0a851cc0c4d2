/* fuzz_model_file.c: libFuzzer harness for model files (--model FILE.cfg).
 *
 * The input is the text of a model file. It goes through what dtrain does
 * with one: dt_model_file_parse (src/nn/model_file.c), then
 * dt_model_build_specs (src/nn/model.c) against a fixed 32x32x3, 10-class
 * input, which checks every layer's shape, then the summary and free. Only
 * shapes are built (no parameters are allocated), so a huge but valid model
 * costs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "nn/model.h"
#include "nn/model_file.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dt_layer_spec specs[DT_MAX_LAYERS];
    const char *path = fuzz_write_temp(".cfg", data, size);
    dt_status st = {0};
    int n = 0;
    if (dt_model_file_parse(path, 10, specs, &n, &st) != DT_OK) {
        if (!st.msg[0]) abort(); /* a refusal must say why */
        return 0;
    }
    if (n < 0 || n > DT_MAX_LAYERS) abort();
    struct dt_model m;
    const struct dt_shape input = {32, 32, 3};
    if (dt_model_build_specs(&m, "fuzz.cfg", input, 10, specs, n, &st) == DT_OK)
        dt_model_summary(&m, devnull);
    else if (!st.msg[0])
        abort();
    dt_model_free(&m);
    return 0;
}
