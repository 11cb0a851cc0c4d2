/* hf.h: a GPT-2 language model as a Hugging Face transformers checkpoint.
 *
 * The directory GPT2LMHeadModel.from_pretrained(DIR) and
 * GPT2Tokenizer(Fast).from_pretrained(DIR) read (checked against
 * transformers 4.47.1 by tests/interop_hf.sh):
 *   config.json            model_type gpt2, the sizes, gelu_new, no dropout
 *   model.safetensors      float32 tensors named as GPT2LMHeadModel's state
 *                          dict; Conv1D weights are [in][out], as dtrain's
 *                          parameter block holds them, so no value is moved
 *   vocab.json, merges.txt GPT-2's byte-level BPE files, made from the data
 *                          file's /tokenizer/merges (none for the byte
 *                          tokenizer: 256 tokens)
 *   tokenizer_config.json  GPT2Tokenizer, no special tokens
 * The vocabulary has no end-of-text token (dtrain-prep marks no document
 * boundary), so bos/eos/unk/pad are null: GPT-2's 50256 would name a token
 * outside it.
 *
 * A GPT-2-shaped model: an embedding, L >= 1 blocks of exactly layernorm,
 * attention, add (from the block's input), layernorm, linear (gelu),
 * linear, add (from the first add), a final layernorm and an lm_head. */
#ifndef DT_HF_H
#define DT_HF_H

#include "nn/model.h"
#include "runtime/status.h"

/* Before training (the reasons to refuse an export at the end): m is
 * GPT-2-shaped, the data are token files (tokens: the dataset's flag) and
 * DIR can be made: not there or an empty directory, in a writable one.
 * With files (rank 0), also that every one of paths[0..nfiles) has the
 * tokenizer m's vocabulary needs, the same in all. Usage errors (exit 2)
 * for the model and DIR, input errors (exit 3) for the files. */
int dt_hf_check(const char *dir, const struct dt_model *m, int tokens, char *const *paths, int nfiles, int files,
                dt_status *st);

/* Serial (rank 0): writes DIR from params (host [m->nparams]) and the
 * tokenizer of data_path. Written into DIR.tmp-* and renamed, so a failed
 * export leaves nothing behind. */
int dt_hf_export(const char *dir, const struct dt_model *m, const float *params, const char *data_path,
                 dt_status *st);

#endif
