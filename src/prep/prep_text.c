/* prep_text.c: dtrain-prep --text: text files read whole, each checked to
 * be nonempty UTF-8, BPE merges learned from all of them (none for the byte
 * tokenizer), each file encoded and the token streams concatenated in the
 * order given; the last --val-fraction of the stream is the test split.
 *
 * Design decisions a reader must know:
 * - Chunks never cross a file boundary, so the stream is each file's
 *   tokens one after the other, and decodes to the files' bytes exactly.
 * - The merges are learned from all the text, the held-out tail included
 *   (the split is of tokens, after encoding).
 * - bpe:N asking for more merges than the text allows (every chunk of it
 *   already one token) is refused, with the number possible: model files
 *   are written for a vocabulary size, so it never comes out smaller than
 *   asked. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prep/prep.h"

void parse_tokenizer(struct options *o, const char *arg)
{
    const char *v = arg + 4;

    o->tokenizer = arg;
    o->bpe_merges = 0;
    if (strcmp(arg, "byte") == 0)
        return;
    if (strncmp(arg, "bpe:", 4) == 0 && *v >= '0' && *v <= '9') {
        char *end;
        unsigned long long n;

        errno = 0;
        n = strtoull(v, &end, 10);
        if (*end == '\0') {
            if (errno == 0 && n >= 1 && n <= DT_BPE_MAX_MERGES) {
                o->bpe_merges = (uint32_t)n;
                return;
            }
            die(EXIT_USAGE, "--tokenizer %s: expected 1 to %u merges (the vocabulary, 256 + N "
                "tokens, must fit the int32 token ids), found %s", arg, DT_BPE_MAX_MERGES, v);
        }
    }
    die(EXIT_USAGE, "--tokenizer: expected byte or bpe:N (N merges, e.g. bpe:4096), found '%s'", arg);
}

/* PATH whole into a new buffer (*LEN bytes), nonempty and UTF-8, and not
 * the file OUTPUT names (with --force it would be replaced). */
static uint8_t *read_text(const char *path, const char *output, size_t *len)
{
    struct stat out_st;
    struct stat st;
    size_t cap, n = 0;
    uint8_t *buf;
    struct dt_utf8_error e;
    int fd = open(path, O_RDONLY);

    if (fd < 0)
        die(EXIT_DATA, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0)
        die(EXIT_DATA, "%s: cannot read: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        die(EXIT_DATA, "%s: cannot open: is a directory, expected a text file", path);
    if (stat(output, &out_st) == 0 && out_st.st_dev == st.st_dev && out_st.st_ino == st.st_ino)
        die(EXIT_USAGE, "%s: the output is also a --text input file", output);
    /* Regular files read in one go; a pipe or device grows the buffer. */
    cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16;
    buf = xmalloc(cap);
    for (;;) {
        ssize_t got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                die(EXIT_WRITE, "%s: out of memory reading it (%zu bytes so far)", path, n);
            buf = nb;
            cap *= 2;
        }
        got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            die(EXIT_DATA, "%s: cannot read: %s", path, strerror(errno));
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (n == 0)
        die(EXIT_DATA, "%s: the file is empty, expected UTF-8 text", path);
    if (dt_utf8_check(buf, n, &e) != 0)
        die(EXIT_DATA, "%s: not UTF-8 text: byte 0x%02x at offset %zu (line %zu, column %zu): %s",
            path, e.byte, e.offset, e.line, e.column, e.why);
    *len = n;
    return buf;
}

/* The test split: the last round(F * n) tokens; each split at least 2 (a
 * sample is block_size + 1 tokens). */
static void split_tokens(struct token_data *t, const struct options *o)
{
    const size_t n_test = (size_t)(o->val_fraction * (double)t->n + 0.5);

    if (t->n < 4)
        die(EXIT_DATA, "%s%s: the text gives only %zu token%s; a token dataset needs at least 4 "
            "(2 for each split: a sample is block_size + 1 tokens)", o->text[0],
            o->n_text > 1 ? " and the other --text files" : "", t->n, t->n == 1 ? "" : "s");
    if (n_test < 2 || t->n - n_test < 2)
        die(EXIT_USAGE, "--val-fraction %g: the %zu tokens split into %zu for training and %zu "
            "for validation; each split needs at least 2 (a sample is block_size + 1 tokens)",
            o->val_fraction, t->n, t->n - n_test, n_test);
    t->n_train = t->n - n_test;
}

static void set_text_source(struct token_data *t, const struct options *o)
{
    size_t len = 128, n = 0;

    for (int i = 0; i < o->n_text; i++)
        len += strlen(o->text[i]) + 6;
    t->source = xmalloc(len);
    for (int i = 0; i < o->n_text; i++)
        n += (size_t)snprintf(t->source + n, len - n, "text=%s ", o->text[i]);
    snprintf(t->source + n, len - n, "tokenizer=%s val-fraction=%g", o->tokenizer, o->val_fraction);
}

void load_text(struct token_data *t, const struct options *o)
{
    const uint8_t **texts = xmalloc((size_t)o->n_text * sizeof *texts);
    size_t *lens = xmalloc((size_t)o->n_text * sizeof *lens);
    double t0 = now_s();

    memset(t, 0, sizeof *t);
    for (int i = 0; i < o->n_text; i++) {
        texts[i] = read_text(o->text[i], o->output, &lens[i]);
        t->bytes += lens[i];
    }
    t->read_s = now_s() - t0;

    t0 = now_s();
    t->tokenizer = o->bpe_merges > 0 ? "bpe" : "byte";
    if (o->bpe_merges > 0 ?
            dt_bpe_train(&t->bpe, texts, lens, o->n_text, o->bpe_merges) != 0 :
            dt_bpe_from_merges(&t->bpe, NULL, 0, NULL, 0) != 0)
        die(EXIT_WRITE, "out of memory learning the tokenizer from %zu bytes of text", t->bytes);
    if (t->bpe.n_merges < o->bpe_merges) {
        char fix[64] = "use --tokenizer byte";
        if (t->bpe.n_merges > 0)
            snprintf(fix, sizeof fix, "ask for at most bpe:%u", t->bpe.n_merges);
        die(EXIT_USAGE, "--tokenizer %s: the text allows only %u merges (after them every chunk "
            "of it is a single token); %s", o->tokenizer, t->bpe.n_merges, fix);
    }
    t->train_s = now_s() - t0;

    t0 = now_s();
    t->tokens = xmalloc(t->bytes * sizeof *t->tokens); /* a token is at least a byte */
    for (int i = 0; i < o->n_text; i++) {
        size_t k = dt_bpe_encode(&t->bpe, texts[i], lens[i], t->tokens + t->n);
        if (k == SIZE_MAX)
            die(EXIT_WRITE, "%s: out of memory encoding it", o->text[i]);
        t->n += k;
        free((void *)texts[i]);
    }
    t->encode_s = now_s() - t0;
    free(texts);
    free(lens);
    split_tokens(t, o);
    set_text_source(t, o);
}

void free_text(struct token_data *t)
{
    free(t->tokens);
    free(t->source);
    dt_bpe_free(&t->bpe);
    memset(t, 0, sizeof *t);
}
