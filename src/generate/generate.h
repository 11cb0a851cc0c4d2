/* generate.h: the pieces of dtrain-generate (src/generate/), shared by its
 * files; nothing else includes it.
 *
 *   main.c    options, the checkpoint into a model, the generation loop
 *   text.c    prompts into tokens (text or ids, checked), tokens into text
 *   sample.c  the next token from a position's logits
 *
 * No MPI here: main.c alone initialises it, for the checkpoint reader. */
#ifndef DT_GENERATE_H
#define DT_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "prep/tokenizer.h"
#include "runtime/rng.h"
#include "runtime/status.h"

/* ---- text.c ---------------------------------------------------------------- */

/* The tokens of prompt (n bytes) under bpe, each below vocab, into *out
 * (allocated, *count of them). Refused (DT_EUSAGE, the message naming
 * --prompt): an empty prompt, one that is not UTF-8 (where, and why), and
 * a byte or token the vocabulary lacks (which character). */
int dt_gen_encode(const struct dt_bpe *bpe, int vocab, const char *prompt, size_t n, int32_t **out, int *count,
                  dt_status *st);
/* "1,2,3": token ids, each in [0, vocab), into *out (allocated). */
int dt_gen_parse_ids(const char *list, int vocab, int32_t **out, int *count, dt_status *st);
/* The text of tokens[0..n) to f: each token's bytes as they are (a
 * character may span tokens); a token past the tokenizer's 256 + N (a
 * vocabulary larger than its tokenizer) as <|id|>. */
void dt_gen_write(FILE *f, const struct dt_bpe *bpe, const int32_t *tokens, int n);

/* ---- sample.c --------------------------------------------------------------- */

struct dt_sampler {
    float temperature; /* 0: greedy (the first largest logit) */
    int top_k;         /* 0: every token */
    dt_rng rng;        /* one uniform draw per token sampled */
    /* scratch, [V] each */
    double *p;
    int *idx;
};

void dt_sampler_init(struct dt_sampler *s, float temperature, int top_k, uint64_t seed, int vocab);
void dt_sampler_free(struct dt_sampler *s);
/* The next token from logits [V]: argmax at temperature 0; else a draw
 * from softmax(logits / temperature) over the top_k largest (ties by the
 * lower id), the probabilities summed in double. */
int dt_sample(struct dt_sampler *s, const float *logits, int V);

#endif
