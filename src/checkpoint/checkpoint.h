/* checkpoint.h: training state in and out of one self-describing HDF5 file.
 *
 * A checkpoint is written collectively by all ranks of a communicator with
 * parallel HDF5 (MPI-IO) into DIR/ckpt-EEEEEE-SSSSSSSS.h5 (epochs done, step
 * within the epoch): replicated state (parameters, configuration, progress)
 * by rank 0, sharded state (optimizer slots of the sharded strategy or of
 * parameter-server shards) by the ranks that own each part, into the same
 * flat datasets. It is written under a temporary name, flushed and fsync'ed,
 * renamed, and only then is DIR/latest (one line: the file name) replaced
 * the same way, so a crash at any moment leaves the previous checkpoint and
 * pointer valid. Only the newest `keep` checkpoints are kept.
 *
 * Layout (h5dump-able; documented in doc/guide.md):
 *   /                      attrs format="dtrain-checkpoint", format_version=2,
 *                          dtrain_version, created (ISO 8601), nranks,
 *                          strategy, model, epoch, step, global_step,
 *                          num_classes (the data's classes, or a language
 *                          model's vocabulary), data_checksum (uint64),
 *                          state_checksum (uint64); tokenizer ("byte" or
 *                          "bpe") when trained on a token dataset
 *   /config                attrs: every option, as text; command_line
 *   /model/<layer>/kernel  float32, Keras shapes (HWIO; [in][units])
 *   /model/<layer>/bias    float32 [units]
 *   /optimizer             attrs name, step (updates applied), lr, beta1,
 *                          beta2, eps, momentum; datasets m, v (adam) or
 *                          velocity (sgd, momentum > 0): float32 [nparams]
 *   /rng/dropout           uint64 [nranks][4]: each rank's dropout stream
 *   /progress              attrs loss_sum, correct, samples: the sums of the
 *                          epoch in progress (step > 0)
 *   /loss_scale            attrs on, dynamic, scale, clean, skipped
 *   /history               float64 [epochs][6]: loss, accuracy, val_loss,
 *                          val_accuracy, seconds, samples per finished epoch
 *   /monitor               attrs best, best_epoch, wait (early stopping)
 *   /model_text            uint8 [bytes]: the model file's text as dtrain
 *                          read it (0 bytes: a built-in model, named by the
 *                          attribute model), so the file alone rebuilds it
 *   /tokenizer/merges      int32 [N][2], a token dataset's tokenizer (its
 *                          own /tokenizer/merges; N = 0 for bytes): merge i
 *                          joins (a, b) into token 256 + i. Absent for images.
 *
 * Version 1 files (before /model_text, /tokenizer and num_classes) are
 * read too; those fields are then empty.
 *
 * state_checksum covers every dataset's bytes (FNV-1a 64 over the values in
 * file order: the layers, the slots, /rng/dropout, /history, then
 * /model_text and /tokenizer/merges where present), so a flipped byte or a
 * truncated file is detected on read. */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

enum { DT_CKPT_HIST = 6 };

struct dt_ckpt_layer {
    const char *name;       /* "conv2d_1" */
    size_t offset;          /* into the flat parameter block */
    int kernel_rank;        /* 4 (conv: kh, kw, cin, cout) or 2 (dense: in, units); 0 = no params */
    int64_t kernel_dims[4];
    int64_t bias_len;       /* the bias follows the kernel in the block */
};

struct dt_ckpt {
    /* what it is */
    const char *dtrain_version, *strategy, *model;
    int nranks;
    int nconfig;                    /* configuration as key/value text */
    const char *const *config_keys;
    const char *const *config_values;
    const char *command_line;
    uint64_t data_checksum;
    /* parameters: replicated, host memory, identical on all ranks */
    size_t nparams;
    int nlayers;
    const struct dt_ckpt_layer *layers;
    float *params;                  /* [nparams + nbuffers]: written from / read into */
    size_t nbuffers;                /* non-trained state after the parameters (batchnorm's moving
                                       statistics): layers tile [0, nparams + nbuffers), slots [0, nparams) */
    /* optimizer: slots are flat [nparams]; this rank's part is [off, off+len) */
    const char *optimizer;
    long opt_step;
    float lr, beta1, beta2, eps, momentum;
    int nslots;                     /* 2 adam, 1 sgd with momentum, 0 */
    const char *slot_names[2];      /* "m","v" or "velocity" */
    float *slots[2];                /* host [len] each; NULL where this rank holds none */
    size_t off, len;
    int writer;                     /* this rank writes its part (one owner per part) */
    /* progress */
    int epoch;                      /* epochs completed */
    int64_t step;                   /* steps done in the epoch in progress */
    long global_step;
    double progress[3];             /* loss_sum, correct, samples of the epoch in progress */
    uint64_t rng[4];                /* this rank's dropout stream */
    uint64_t (*all_rng)[4];         /* read: [nranks in file][4], allocated by dt_ckpt_read */
    int file_nranks;                /* read: the rank count that wrote it */
    /* loss scale */
    int ls_on, ls_dynamic, ls_clean;
    float ls_scale;
    long ls_skipped;
    /* history and early stopping */
    int nhistory;
    double (*history)[DT_CKPT_HIST];  /* [nhistory]; read: allocated by dt_ckpt_read */
    double best;
    int best_epoch, wait;
    /* What the model is used with on its own (dtrain-generate rebuilds it
     * from these): written as given, filled by dt_ckpt_read (storage owned
     * by c until dt_ckpt_release; empty for a version 1 file). */
    int classes;                    /* the data's classes, or the vocabulary (num_classes) */
    const char *model_text;         /* the model file's text, model_text_len bytes (NUL after them
                                       when read); NULL or 0 bytes: a built-in model */
    size_t model_text_len;
    const char *tokenizer;          /* "byte" or "bpe" (trained on a token dataset); NULL: images */
    uint32_t nmerges;               /* the tokenizer's merges: [nmerges][2] */
    const int32_t *merges;
};

/* Collective. Writes c into dir (created if missing) and updates dir/latest;
 * removes all but the newest keep checkpoints (keep <= 0: keep all).
 * path_out (may be NULL) receives the file written. On failure (disk full,
 * read-only directory) the previous checkpoint and pointer are untouched,
 * the temporary file is removed, and st says what failed. */
int dt_ckpt_write(MPI_Comm comm, const char *dir, int keep, const struct dt_ckpt *c,
                  char *path_out, size_t path_len, dt_status *st);

/* Collective. Resolves what ("latest", a directory (its latest), or a file)
 * to a file: for latest, the newest checkpoint in the directory that passes
 * validation, newest first, and notes on rank 0's stderr each one skipped
 * and why. path_out receives the file. */
int dt_ckpt_resolve(MPI_Comm comm, const char *what, const char *dir, char *path_out, size_t path_len,
                    dt_status *st);

/* Collective. Validates path (format, datasets present with the expected
 * shapes, state checksum) and reads it: the caller fills nparams, nlayers,
 * layers, params (buffer), and for the optimizer nslots, slot_names, slots
 * (buffers of len), off and len (this rank's part, which may differ from the
 * writer's: any split of the flat slots can be read); everything else is
 * filled from the file. Strings read (strategy, model, optimizer, config)
 * point into storage owned by c until dt_ckpt_release. */
int dt_ckpt_read(MPI_Comm comm, const char *path, struct dt_ckpt *c, dt_status *st);
/* Collective. What a checkpoint says about itself before there is a model
 * to read it into: format and state checksum checked (a pass over the
 * file), the attributes and configuration (as dt_ckpt_read fills them),
 * classes, model_text, tokenizer and merges; no parameters, no slots. */
int dt_ckpt_read_info(MPI_Comm comm, const char *path, struct dt_ckpt *c, dt_status *st);
void dt_ckpt_release(struct dt_ckpt *c);

/* Checksums. dt_fnv1a64 hashes bytes (h: 0 to start, or a previous result
 * to continue). A data checksum is a sum (mod 2^64) over blocks of
 * dt_ckpt_block_mix(block index, block hash): blocks can be hashed by any
 * rank in any order and partial sums added with MPI_SUM on MPI_UINT64_T, so
 * the result does not depend on the rank count. */
uint64_t dt_fnv1a64(const void *data, size_t n, uint64_t h);
uint64_t dt_ckpt_block_mix(uint64_t block_index, uint64_t block_hash);

/* mkdir -p: 0, or -1 with errno (ENOTDIR when something else has the name). */
int dt_mkdirs(const char *dir);

/* Creates path anew for writing (mode 0666 less the umask) and returns the
 * descriptor, or -1 with errno. Whatever is at path is unlinked first and
 * the file is opened O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink planted under
 * a predictable temporary name is removed, never written through. */
int dt_create_fresh(const char *path);

#endif
