/* tokenizer.h: byte-level BPE (GPT-2 style) and a strict UTF-8 check, for
 * dtrain-prep --text and for anything that turns tokens back into text.
 * No MPI, no HDF5, no exit(): every function returns its error.
 *
 * Tokens 0..255 are the bytes; merge i joins the token pair (a, b) into
 * token 256 + i, so a vocabulary of V = 256 + N tokens is N merges.
 * Text is first cut into chunks (dt_pretok_len: GPT-2's pattern on UTF-8
 * bytes) and merges never cross a chunk boundary. */
#ifndef DT_TOKENIZER_H
#define DT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define DT_BPE_BYTES 256u
/* V = 256 + N fits an int32 (num_classes, the int32 merges, dtrain's int32
 * token rows), so N is at most 2^31 - 257. */
#define DT_BPE_MAX_MERGES (0x7fffffffu - DT_BPE_BYTES)

struct dt_bpe {
    uint32_t n_merges;  /* N: the vocabulary is 256 + N tokens */
    int32_t *merges;    /* [N][2]: merge i joins (a, b) into token 256 + i */
    uint64_t *len;      /* [256 + N]: bytes each token decodes to */
    uint32_t depth;     /* deepest merge tree (decode's stack) */
    uint64_t *index;    /* [index_cap]: (a << 32 | b) + 1 per slot, 0 empty */
    uint32_t *rank;     /* [index_cap]: the merge index of that pair */
    size_t index_cap;   /* a power of two, at least twice N */
};

/* Where dt_utf8_check found the first invalid sequence. */
struct dt_utf8_error {
    size_t offset;      /* byte offset of the sequence's first byte */
    size_t line;        /* 1-based line of it */
    size_t column;      /* 1-based, in characters */
    uint8_t byte;       /* the byte at OFFSET */
    const char *why;    /* "unexpected continuation byte", ... */
};

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF). 0 when P[0..N) is valid, else -1 with *E filled in. */
int dt_utf8_check(const uint8_t *p, size_t n, struct dt_utf8_error *e);

/* Length (>= 1) of the chunk that starts at P (N >= 1 bytes left):
 * 's 't 're 've 'm 'll 'd | ?letters | ?digits | ?other | whitespace,
 * GPT-2's pattern with ASCII letters and every byte >= 0x80 as letters. A
 * whitespace run before a non-space leaves its last byte to the next chunk. */
size_t dt_pretok_len(const uint8_t *p, size_t n);

/* Learn up to N_MERGES merges from the NTEXTS texts (chunks counted over
 * all of them, none across two). Each step merges the most frequent pair,
 * the smallest (a, b) among equals. Fewer merges are learned when every
 * chunk has become one token: bpe->n_merges says how many. 0, or -1 when
 * out of memory (*bpe then empty). */
int dt_bpe_train(struct dt_bpe *bpe, const uint8_t *const *texts, const size_t *lens,
                 int ntexts, uint32_t n_merges);

/* A tokenizer from stored merges (copied). 0, or -1 with ERR filled in when
 * a merge names a token that does not exist yet or repeats a pair, or when
 * out of memory. */
int dt_bpe_from_merges(struct dt_bpe *bpe, const int32_t *merges, uint32_t n,
                       char *err, size_t errlen);
void dt_bpe_free(struct dt_bpe *bpe);

/* TEXT's tokens into OUT, which has room for N (a token is at least one
 * byte): chunk by chunk, each as GPT-2's bpe() does it, the lowest-ranked
 * pair first. Returns the count, or SIZE_MAX when out of memory. */
size_t dt_bpe_encode(const struct dt_bpe *bpe, const uint8_t *text, size_t n, uint32_t *out);

/* The bytes of TOKENS into OUT (at most CAP written). Returns the full
 * length (more than CAP: OUT holds its start), or SIZE_MAX when a token is
 * not below 256 + N or when out of memory. */
size_t dt_bpe_decode(const struct dt_bpe *bpe, const uint32_t *tokens, size_t n,
                     uint8_t *out, size_t cap);

#endif
