/* tokens.h: token datasets (dtrain-prep --text), the second reader behind
 * dataset.h's interface. Internal to data/: dataset.c calls it.
 *
 * A file holds /train/tokens and optionally /test/tokens, 1-D uint16 or
 * uint32 token streams, and the vocabulary size as num_classes. A sample is
 * a window of T + 1 tokens, sample i = tokens [i T, i T + T] of one file
 * (windows never cross files), so a file of N tokens gives (N - 1) / T
 * samples of its split; T is the model's block_size, known only once the
 * model file is read (dt_dataset_set_block). A window is delivered as int32
 * [T + 1] in the batch's image bytes: the shape is 1 x (T + 1) x 4, its
 * labels are 0, and the model reads its targets from the window itself.
 * HDF5 ids are int64_t, hid_t's type, as in dataset_rows.h. */
#ifndef DT_TOKENS_H
#define DT_TOKENS_H

#include <stdint.h>

#include "data/dataset_rows.h"
#include "runtime/status.h"

/* Whether an open file is a token dataset (has /train/tokens). */
int dt_tokens_is(int64_t file);
/* Rank 0: the file's token splits are 1-D integer streams of at most 32
 * bits, every token below vocab (the num_classes attribute, required);
 * counts[0], counts[1]: tokens in train and test (-1: no test split). */
int dt_tokens_validate(const char *path, int64_t file, int vocab, int64_t counts[2], dt_status *st);
/* A file's tokenizer: the root attribute tokenizer ("byte" or "bpe";
 * absent: "byte", or "bpe" when the file has merges) and /tokenizer/merges
 * (int32 [N][2]; absent: N = 0), into name, *merges (allocated: the
 * caller frees it) and *n. Checked: merge i joins tokens below 256 + i; a
 * bpe vocabulary is 256 + N tokens; declared bytes have no merges and at
 * most 256 tokens (a file without the attribute may have more). */
int dt_tokens_tokenizer(const char *path, int64_t file, int vocab, char name[16], int32_t **merges, uint32_t *n,
                        dt_status *st);
/* Read windows idx[0..n) of split into rows (int32 [n][T+1], as bytes) and
 * labels (zeros). */
int dt_tokens_read(struct dt_dataset *ds, int split, const int64_t *idx, int n, uint8_t *rows, uint8_t *labels,
                   dt_status *st);

#endif
