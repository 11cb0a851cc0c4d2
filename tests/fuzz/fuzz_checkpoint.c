/* fuzz_checkpoint.c: libFuzzer harness for checkpoint files
 * (dt_ckpt_resolve and dt_ckpt_read, src/checkpoint/checkpoint.c).
 *
 * The input is a checkpoint file. It is put where --resume latest finds it
 * (DIR/ckpt-000001-00000000.h5, named by DIR/latest), resolved, which
 * validates it, and read into the layout of a small model, as
 * dtrain --resume does: the layer table is built the way train/state.c's
 * layer_table builds it, from tests/fuzz/checkpoint.cfg (conv2d, batchnorm,
 * flatten, dense) on 2x2x1 inputs and 2 classes, with Adam's two slots.
 * Both calls are collective; MPI runs as a singleton (one rank). Seeds are
 * checkpoints dtrain wrote for that model (tests/fuzz/gen-seeds.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include "checkpoint/checkpoint.h"
#include "fuzz_h5.h"
#include "fuzz_util.h"
#include "nn/model.h"

static struct dt_model model;
static struct dt_ckpt_layer table[16];
static int ntable;
static char dir[4096], file[8192];

/* train/state.c's layer_table for this model: kernel then bias per layer with
 * parameters, then each batchnorm's moving statistics after all parameters. */
static void build_table(void)
{
    static char moving[16][48];
    int k = model.nlayers;
    for (int i = 0; i < model.nlayers; i++) {
        const struct dt_layer *l = &model.layers[i];
        table[i].name = l->name;
        table[i].offset = l->param_offset;
        if (!l->nparams) continue;
        if (l->ops == &dt_conv2d_ops) {
            table[i].kernel_rank = 4;
            table[i].kernel_dims[0] = table[i].kernel_dims[1] = l->spec.kernel;
            table[i].kernel_dims[2] = l->in.c;
            table[i].kernel_dims[3] = l->out.c;
            table[i].bias_len = l->out.c;
        }
        else if (l->ops == &dt_batchnorm_ops) {
            table[i].kernel_rank = 1;
            table[i].kernel_dims[0] = table[i].bias_len = l->out.c;
        }
        else {
            table[i].kernel_rank = 2;
            table[i].kernel_dims[0] = (int64_t)dt_shape_size(l->in);
            table[i].kernel_dims[1] = table[i].bias_len = (int64_t)dt_shape_size(l->out);
        }
        if (l->nbuffers) {
            snprintf(moving[k], sizeof moving[k], "%s.moving", l->name);
            table[k].name = moving[k];
            table[k].offset = model.nparams + l->buffer_offset;
            table[k].kernel_rank = 1;
            table[k].kernel_dims[0] = table[k].bias_len = (int64_t)l->nbuffers / 2;
            k++;
        }
    }
    ntable = k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_h5_init(argc, argv);
    const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = 2, .kernel = 1},
        {.type = "batchnorm"},
        {.type = "flatten"},
        {.type = "dense", .filters = 2},
    };
    dt_status st = {0};
    if (dt_model_build_specs(&model, "checkpoint.cfg", (struct dt_shape){2, 2, 1}, 2, specs, 4, &st) != DT_OK) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", st.msg);
        abort();
    }
    build_table();
    snprintf(dir, sizeof dir, "%s", fuzz_temp_dir());
    snprintf(file, sizeof file, "%s/ckpt-000001-00000000.h5", dir);
    char latest[8192];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    const char *name = "ckpt-000001-00000000.h5\n";
    fuzz_write_file(latest, (const uint8_t *)name, strlen(name));
    return 0;
}

static int test_one(const uint8_t *data, size_t size)
{
    fuzz_write_file(file, data, size);
    char path[8192];
    dt_status st = {0};
    if (dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, path, sizeof path, &st) != DT_OK) {
        if (!st.msg[0]) abort(); /* a refusal must say why */
        return 0;
    }
    size_t np = model.nparams, nall = model.nparams + model.nbuffers;
    struct dt_ckpt c;
    memset(&c, 0, sizeof c);
    c.nparams = np;
    c.nbuffers = model.nbuffers;
    c.nlayers = ntable;
    c.layers = table;
    c.params = calloc(nall + 1, sizeof(float));
    c.nslots = 2;
    c.slot_names[0] = "m";
    c.slot_names[1] = "v";
    c.slots[0] = calloc(np + 1, sizeof(float));
    c.slots[1] = calloc(np + 1, sizeof(float));
    c.off = 0;
    c.len = np;
    if (!c.params || !c.slots[0] || !c.slots[1]) abort();
    if (dt_ckpt_read(MPI_COMM_WORLD, path, &c, &st) == DT_OK) {
        volatile size_t sink = 0; /* what the read filled must be readable */
        const char *strs[] = {c.dtrain_version, c.strategy, c.model, c.optimizer, c.command_line};
        for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) sink += strs[i] ? strlen(strs[i]) : 0;
        for (int i = 0; i < c.nconfig; i++) sink += strlen(c.config_keys[i]) + strlen(c.config_values[i]);
        for (int e = 0; e < c.nhistory; e++) sink += (size_t)(c.history[e][0] == c.history[e][0]);
        for (int r = 0; r < c.file_nranks; r++) sink += (size_t)c.all_rng[r][0];
        (void)sink;
    }
    else if (!st.msg[0]) {
        abort();
    }
    dt_ckpt_release(&c);
    free(c.params);
    free(c.slots[0]);
    free(c.slots[1]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_h5_balanced(test_one, data, size); }
