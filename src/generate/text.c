/* text.c: prompts into tokens and tokens into text (see generate.h).
 *
 * A prompt is refused before anything runs unless it is non-empty strict
 * UTF-8 and every token of it is in the checkpoint's vocabulary. The
 * byte-level tokenizer gives every byte a token, so only a vocabulary
 * smaller than 256 (a byte tokenizer trained on text that never had the
 * higher bytes) can lack one; the message then names the character and
 * its bytes. Output is the tokens' bytes as they are: a token of a
 * byte-level BPE may end inside a character, so nothing is checked or
 * re-encoded on the way out. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "generate/generate.h"

/* The character of p[0..n) that holds byte at: its first byte, length,
 * code point and 1-based index. */
static void char_at(const uint8_t *p, size_t n, size_t at, size_t *start, size_t *len, uint32_t *cp, size_t *index)
{
    size_t s = at;
    while (s > 0 && (p[s] & 0xC0) == 0x80) s--;
    size_t l = p[s] < 0x80 ? 1 : p[s] < 0xE0 ? 2 : p[s] < 0xF0 ? 3 : 4;
    if (s + l > n) l = n - s;
    uint32_t c = l == 1 ? p[s] : (uint32_t)p[s] & (0xFFu >> (l + 1));
    for (size_t i = 1; i < l; i++) c = c << 6 | (p[s + i] & 0x3Fu);
    size_t k = 0;
    for (size_t i = 0; i <= s; i++) k += (p[i] & 0xC0) != 0x80;
    *start = s, *len = l, *cp = c, *index = k;
}

int dt_gen_encode(const struct dt_bpe *bpe, int vocab, const char *prompt, size_t n, int32_t **out, int *count,
                  dt_status *st)
{
    const uint8_t *p = (const uint8_t *)prompt;
    struct dt_utf8_error e;
    *out = NULL;
    *count = 0;
    if (n == 0) return dt_fail(st, DT_EUSAGE, "--prompt: empty; a prompt needs at least one character");
    if (n > INT_MAX) return dt_fail(st, DT_EUSAGE, "--prompt: %zu bytes; at most %d", n, INT_MAX);
    if (dt_utf8_check(p, n, &e) != 0)
        return dt_fail(st, DT_EUSAGE, "--prompt: not valid UTF-8: byte 0x%02x at offset %zu (line %zu, character %zu): "
                       "%s", e.byte, e.offset, e.line, e.column, e.why);
    for (size_t i = 0; vocab < 256 && i < n; i++) {
        if (p[i] < (unsigned)vocab) continue;
        size_t s, l, k;
        uint32_t cp;
        char bytes[16] = "";
        char_at(p, n, i, &s, &l, &cp, &k);
        for (size_t j = 0, at = 0; j < l; j++) at += (size_t)snprintf(bytes + at, sizeof bytes - at, "%s%02x", j ? " " : "", p[s + j]);
        return dt_fail(st, DT_EUSAGE, "--prompt: character %zu, '%.*s' (U+%04X, bytes %s), needs byte 0x%02x, and the "
                       "checkpoint's vocabulary of %d tokens holds bytes 0x00..0x%02x only", k, (int)l,
                       (const char *)p + s, (unsigned)cp, bytes, p[i], vocab, vocab - 1);
    }
    uint32_t *tok = dt_xmalloc(sizeof *tok * n);
    size_t m = dt_bpe_encode(bpe, p, n, tok);
    if (m == SIZE_MAX) DT_DIE("out of memory encoding a prompt of %zu bytes", n);
    for (size_t i = 0; i < m; i++)
        if (tok[i] >= (uint32_t)vocab) {
            dt_fail(st, DT_EUSAGE, "--prompt: its token %zu is %u, which the checkpoint's vocabulary of %d tokens "
                    "lacks", i + 1, tok[i], vocab);
            free(tok);
            return st->code;
        }
    *out = dt_xmalloc(sizeof **out * (m ? m : 1));
    for (size_t i = 0; i < m; i++) (*out)[i] = (int32_t)tok[i];
    *count = (int)m;
    free(tok);
    return DT_OK;
}

int dt_gen_parse_ids(const char *list, int vocab, int32_t **out, int *count, dt_status *st)
{
    size_t cap = 1;
    for (const char *q = list; *q; q++) cap += *q == ',';
    *out = dt_xmalloc(sizeof **out * cap);
    *count = 0;
    const char *q = list;
    if (!*q) dt_fail(st, DT_EUSAGE, "--prompt-tokens: empty; expected token ids such as 1,2,3");
    while (st->code == DT_OK && *q) {
        char *end;
        errno = 0;
        long v = strtol(q, &end, 10);
        if (end == q || errno || (*end && *end != ','))
            dt_fail(st, DT_EUSAGE, "--prompt-tokens: '%s': expected comma-separated token ids such as 1,2,3", list);
        else if (v < 0 || v >= vocab)
            dt_fail(st, DT_EUSAGE, "--prompt-tokens: token %ld (number %d of the list) is not in the checkpoint's "
                    "vocabulary of %d tokens (ids 0..%d)", v, *count + 1, vocab, vocab - 1);
        else if (*end == ',' && !end[1])
            dt_fail(st, DT_EUSAGE, "--prompt-tokens: '%s' ends with a comma", list);
        else
            (*out)[(*count)++] = (int32_t)v;
        q = *end ? end + 1 : end;
    }
    if (st->code != DT_OK) {
        free(*out);
        *out = NULL;
        *count = 0;
    }
    return st->code;
}

void dt_gen_write(FILE *f, const struct dt_bpe *bpe, const int32_t *tokens, int n)
{
    const uint64_t known = DT_BPE_BYTES + (uint64_t)bpe->n_merges;
    for (int i = 0; i < n; i++) {
        const uint32_t t = (uint32_t)tokens[i];
        if (t >= known) {
            fprintf(f, "<|%u|>", t);
            continue;
        }
        uint8_t small[256], *buf = small;
        size_t len = (size_t)bpe->len[t];
        if (len > sizeof small) buf = dt_xmalloc(len);
        if (dt_bpe_decode(bpe, &t, 1, buf, len) != len) DT_DIE("cannot decode token %u", t);
        fwrite(buf, 1, len, f);
        if (buf != small) free(buf);
    }
}
