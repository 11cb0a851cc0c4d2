/* tokenizer.c: byte-level BPE as GPT-2 has it: text cut into chunks by
 * GPT-2's pattern (on UTF-8 bytes), merges learned per chunk and applied by
 * rank; and the strict UTF-8 check dtrain-prep runs before it.
 *
 * The design decision: training counts pairs once, over the unique chunks
 * weighted by how often each occurs, and then keeps the counts up to date.
 * Each pair lists the chunks it has occurred in; a merge rewrites only
 * those, subtracts their old pairs and adds their new ones, and a max-heap
 * with lazy deletion (an entry is checked against the live count when it
 * comes to the top) finds the next pair, with no recount per merge: 8192
 * merges of the 4.4 MB King James Bible take 0.1 s.
 * Encoding runs GPT-2's bpe() per chunk with a min-heap of (rank, position)
 * over a linked list, so a long chunk costs L log L, not L^2; chunks of up
 * to CACHE_MAX bytes are encoded once per call and then copied. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep/tokenizer.h"

#define NONE SIZE_MAX
#define NO_RANK UINT32_MAX
#define NO_WORD UINT32_MAX
#define DEAD UINT32_MAX
#define CACHE_MAX 256 /* longest chunk dt_bpe_encode remembers */

/* ---- Small helpers ------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return mix64(h ^ n);
}

/* *P (CAP elements of ELEM bytes) grown to hold at least NEED. */
static int grow_(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    void *q;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    q = realloc(*p, c * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}
#define GROW(p, cap, need) grow_((void **)&(p), &(cap), (need), sizeof *(p))

/* A min-heap of (k1, k2): training keys on (-count, pair), encoding on
 * (rank, position). */
struct heap_ent { uint64_t k1, k2; };
struct heap { struct heap_ent *e; size_t n, cap; };

static int ent_before(const struct heap_ent *x, const struct heap_ent *y)
{
    return x->k1 != y->k1 ? x->k1 < y->k1 : x->k2 < y->k2;
}

static int heap_push(struct heap *h, uint64_t k1, uint64_t k2)
{
    struct heap_ent v = {k1, k2};
    size_t i;

    if (GROW(h->e, h->cap, h->n + 1) != 0)
        return -1;
    for (i = h->n++; i > 0 && ent_before(&v, &h->e[(i - 1) / 2]); i = (i - 1) / 2)
        h->e[i] = h->e[(i - 1) / 2];
    h->e[i] = v;
    return 0;
}

static struct heap_ent heap_pop(struct heap *h)
{
    struct heap_ent top = h->e[0], last = h->e[--h->n];
    size_t i = 0;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ent_before(&h->e[c + 1], &h->e[c]))
            c++;
        if (!ent_before(&h->e[c], &last))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n > 0)
        h->e[i] = last;
    return top;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

static int utf8_fail(struct dt_utf8_error *e, const uint8_t *p, size_t at, size_t line,
                     size_t line_start, const char *why)
{
    size_t col = 1;

    for (size_t i = line_start; i < at; i++)
        col += (p[i] & 0xC0) != 0x80; /* the line so far is valid: count lead bytes */
    e->offset = at;
    e->line = line;
    e->column = col;
    e->byte = p[at];
    e->why = why;
    return -1;
}

int dt_utf8_check(const uint8_t *p, size_t n, struct dt_utf8_error *e)
{
    size_t line = 1, line_start = 0;

    for (size_t i = 0; i < n;) {
        uint8_t c = p[i], lo = 0x80, hi = 0xBF;
        const char *range_why = "overlong encoding";
        size_t need;

        if (c < 0x80) {
            if (c == '\n') {
                line++;
                line_start = i + 1;
            }
            i++;
            continue;
        }
        if (c < 0xC0)
            return utf8_fail(e, p, i, line, line_start, "unexpected continuation byte");
        if (c < 0xC2)
            return utf8_fail(e, p, i, line, line_start, "overlong encoding");
        if (c > 0xF4)
            return utf8_fail(e, p, i, line, line_start, "byte that never occurs in UTF-8");
        need = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xED) {
            hi = 0x9F;
            range_why = "UTF-16 surrogate";
        } else if (c == 0xF4) {
            hi = 0x8F;
            range_why = "code point above U+10FFFF";
        }
        for (size_t k = 1; k <= need; k++) {
            uint8_t b = i + k < n ? p[i + k] : 0;
            if (i + k >= n || (b & 0xC0) != 0x80)
                return utf8_fail(e, p, i, line, line_start, "incomplete sequence");
            if (k == 1 && (b < lo || b > hi))
                return utf8_fail(e, p, i, line, line_start, range_why);
        }
        i += need + 1;
    }
    return 0;
}

/* ---- Chunks ------------------------------------------------------------------ */

enum { CL_OTHER, CL_LETTER, CL_DIGIT, CL_SPACE };

static int byte_class(uint8_t c)
{
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return CL_SPACE;
    if (c >= '0' && c <= '9')
        return CL_DIGIT;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80)
        return CL_LETTER;
    return CL_OTHER;
}

size_t dt_pretok_len(const uint8_t *p, size_t n)
{
    size_t i, j;
    int cls;

    if (p[0] == '\'' && n >= 2) {
        if (n >= 3 && ((p[1] == 'r' && p[2] == 'e') || (p[1] == 'v' && p[2] == 'e') ||
                       (p[1] == 'l' && p[2] == 'l')))
            return 3;
        if (p[1] == 's' || p[1] == 't' || p[1] == 'm' || p[1] == 'd')
            return 2;
    }
    i = p[0] == ' ' && n >= 2 && byte_class(p[1]) != CL_SPACE ? 1 : 0;
    cls = byte_class(p[i]);
    if (cls != CL_SPACE) {
        for (j = i + 1; j < n && byte_class(p[j]) == cls; j++)
            ;
        return j;
    }
    for (j = 1; j < n && byte_class(p[j]) == CL_SPACE; j++)
        ;
    /* \s+(?!\S): a run followed by a non-space gives that space to it. */
    return j < n && j >= 2 ? j - 1 : j;
}

/* ---- The tokenizer's tables ------------------------------------------------------ */

static size_t index_slot(const struct dt_bpe *b, uint64_t key)
{
    size_t mask = b->index_cap - 1, s = (size_t)mix64(key) & mask;

    while (b->index[s] != 0 && b->index[s] != key + 1)
        s = (s + 1) & mask;
    return s;
}

static uint32_t rank_of(const struct dt_bpe *b, uint32_t x, uint32_t y)
{
    size_t s;

    if (b->n_merges == 0)
        return NO_RANK;
    s = index_slot(b, (uint64_t)x << 32 | y);
    return b->index[s] != 0 ? b->rank[s] : NO_RANK;
}

void dt_bpe_free(struct dt_bpe *b)
{
    free(b->merges);
    free(b->len);
    free(b->index);
    free(b->rank);
    memset(b, 0, sizeof *b);
}

static int from_merges_fail(struct dt_bpe *b, uint32_t *depth, char *err, size_t errlen,
                            const char *msg)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", msg);
    free(depth);
    dt_bpe_free(b);
    return -1;
}

int dt_bpe_from_merges(struct dt_bpe *b, const int32_t *merges, uint32_t n, char *err,
                       size_t errlen)
{
    const size_t v = (size_t)DT_BPE_BYTES + n;
    uint32_t *depth = NULL; /* [V] */
    char msg[160];

    memset(b, 0, sizeof *b);
    if (n > DT_BPE_MAX_MERGES) {
        snprintf(msg, sizeof msg, "%u merges: at most %u (token ids are int32)", n, DT_BPE_MAX_MERGES);
        return from_merges_fail(b, depth, err, errlen, msg);
    }
    b->index_cap = 16;
    while (b->index_cap < 2 * (size_t)n)
        b->index_cap *= 2;
    b->merges = malloc(2 * sizeof *b->merges * (n ? n : 1));
    b->len = malloc(v * sizeof *b->len);
    depth = malloc(v * sizeof *depth);
    b->index = calloc(b->index_cap, sizeof *b->index);
    b->rank = malloc(b->index_cap * sizeof *b->rank);
    if (!b->merges || !b->len || !depth || !b->index || !b->rank)
        return from_merges_fail(b, depth, err, errlen, "out of memory");
    for (size_t t = 0; t < DT_BPE_BYTES; t++) {
        b->len[t] = 1;
        depth[t] = 1;
    }
    b->depth = 1;
    for (uint32_t i = 0; i < n; i++) {
        int32_t x = merges[2 * (size_t)i], y = merges[2 * (size_t)i + 1];
        uint32_t t = DT_BPE_BYTES + i, d;
        size_t s;

        if (x < 0 || (uint32_t)x >= t || y < 0 || (uint32_t)y >= t) {
            snprintf(msg, sizeof msg, "merge %u joins (%d, %d), but only tokens 0 to %u exist "
                     "before it", i, x, y, t - 1);
            return from_merges_fail(b, depth, err, errlen, msg);
        }
        s = index_slot(b, (uint64_t)x << 32 | (uint32_t)y);
        if (b->index[s] != 0) {
            snprintf(msg, sizeof msg, "merge %u repeats the pair (%d, %d) of merge %u",
                     i, x, y, b->rank[s]);
            return from_merges_fail(b, depth, err, errlen, msg);
        }
        b->index[s] = ((uint64_t)x << 32 | (uint32_t)y) + 1;
        b->rank[s] = i;
        b->merges[2 * (size_t)i] = x;
        b->merges[2 * (size_t)i + 1] = y;
        b->len[t] = b->len[x] + b->len[y];
        d = 1 + (depth[x] > depth[y] ? depth[x] : depth[y]);
        depth[t] = d;
        if (d > b->depth)
            b->depth = d;
    }
    b->n_merges = n;
    free(depth);
    return 0;
}

/* ---- Training ------------------------------------------------------------------ */

struct tr_word {          /* one unique chunk */
    const uint8_t *src;   /* its bytes, in the caller's text */
    uint64_t hash, count; /* count: occurrences in the texts */
    size_t off, len;      /* its tokens: tok[off .. off + len) */
    uint32_t stamp;       /* the last merge step that visited it, + 1 */
};

struct tr_pair {
    uint64_t key;         /* a << 32 | b */
    int64_t count;        /* occurrences, chunks weighted by their counts */
    uint32_t *words;      /* [nwords]: chunks it has occurred in (some no longer) */
    uint32_t nwords, cap;
    uint32_t touched;     /* the step that last pushed it, + 1 */
};

struct trainer {
    struct tr_word *words; size_t nwords, capwords;
    uint32_t *wtab; size_t wcap;        /* word index + 1, 0: empty */
    uint32_t *tok; size_t ntok;         /* every chunk's tokens */
    struct tr_pair *pairs; size_t npairs, cappairs;
    uint32_t *ptab; size_t pcap;        /* pair index + 1, 0: empty */
    struct heap heap;
    uint32_t *touched; size_t ntouched, captouched; /* pairs with the new token this step */
};

static void trainer_free(struct trainer *t)
{
    for (size_t i = 0; i < t->npairs; i++)
        free(t->pairs[i].words);
    free(t->words);
    free(t->wtab);
    free(t->tok);
    free(t->pairs);
    free(t->ptab);
    free(t->heap.e);
    free(t->touched);
}

/* Open-addressing table TAB (CAP slots of index + 1) doubled and refilled. */
static int rehash(uint32_t **tab, size_t *cap, size_t count, const void *items, size_t stride,
                  uint64_t (*hash_of)(const void *))
{
    size_t c = *cap ? *cap * 2 : 1024, mask = c - 1;
    uint32_t *nt = calloc(c, sizeof *nt);

    if (nt == NULL)
        return -1;
    for (size_t i = 0; i < count; i++) {
        size_t s = (size_t)hash_of((const char *)items + i * stride) & mask;
        while (nt[s] != 0)
            s = (s + 1) & mask;
        nt[s] = (uint32_t)i + 1;
    }
    free(*tab);
    *tab = nt;
    *cap = c;
    return 0;
}

static uint64_t word_hash(const void *w) { return ((const struct tr_word *)w)->hash; }
static uint64_t pair_hash(const void *p) { return mix64(((const struct tr_pair *)p)->key); }

/* One more occurrence of the chunk P[0..n). */
static int add_chunk(struct trainer *t, const uint8_t *p, size_t n)
{
    uint64_t h = hash_bytes(p, n);
    size_t s;

    if (2 * (t->nwords + 1) > t->wcap &&
        rehash(&t->wtab, &t->wcap, t->nwords, t->words, sizeof *t->words, word_hash) != 0)
        return -1;
    for (s = (size_t)h & (t->wcap - 1); t->wtab[s] != 0; s = (s + 1) & (t->wcap - 1)) {
        struct tr_word *w = &t->words[t->wtab[s] - 1];
        if (w->hash == h && w->len == n && memcmp(w->src, p, n) == 0) {
            w->count++;
            return 0;
        }
    }
    if (t->nwords >= NO_WORD - 1 || GROW(t->words, t->capwords, t->nwords + 1) != 0)
        return -1;
    t->words[t->nwords] = (struct tr_word){.src = p, .hash = h, .count = 1, .len = n};
    t->wtab[s] = (uint32_t)++t->nwords;
    t->ntok += n;
    return 0;
}

/* Pair (a, b)'s count += DELTA; W (unless NO_WORD) joins its chunk list.
 * *IDX: the pair's index. */
static int pair_add(struct trainer *t, uint32_t a, uint32_t b, int64_t delta, uint32_t w,
                    uint32_t *idx)
{
    uint64_t key = (uint64_t)a << 32 | b;
    size_t s, mask;
    struct tr_pair *p;

    if (2 * (t->npairs + 1) > t->pcap &&
        rehash(&t->ptab, &t->pcap, t->npairs, t->pairs, sizeof *t->pairs, pair_hash) != 0)
        return -1;
    mask = t->pcap - 1;
    for (s = (size_t)mix64(key) & mask; t->ptab[s] != 0; s = (s + 1) & mask)
        if (t->pairs[t->ptab[s] - 1].key == key)
            break;
    if (t->ptab[s] == 0) {
        if (t->npairs >= UINT32_MAX - 1 || GROW(t->pairs, t->cappairs, t->npairs + 1) != 0)
            return -1;
        t->pairs[t->npairs] = (struct tr_pair){.key = key};
        t->ptab[s] = (uint32_t)++t->npairs;
    }
    p = &t->pairs[t->ptab[s] - 1];
    p->count += delta;
    if (w != NO_WORD && (p->nwords == 0 || p->words[p->nwords - 1] != w)) {
        size_t cap = p->cap;
        if (GROW(p->words, cap, (size_t)p->nwords + 1) != 0)
            return -1;
        p->cap = (uint32_t)cap;
        p->words[p->nwords++] = w;
    }
    if (idx != NULL)
        *idx = t->ptab[s] - 1;
    return 0;
}

/* The heap's keys for pair P: the larger count first, then the smaller (a, b). */
static int push_pair(struct trainer *t, const struct tr_pair *p)
{
    return heap_push(&t->heap, UINT64_MAX - (uint64_t)p->count, p->key);
}

static uint32_t pair_find(const struct trainer *t, uint64_t key)
{
    size_t mask = t->pcap - 1, s = (size_t)mix64(key) & mask;

    while (t->pairs[t->ptab[s] - 1].key != key) /* every heap entry's pair exists */
        s = (s + 1) & mask;
    return t->ptab[s] - 1;
}

/* The pair to merge next in *BEST: 0, or 1 when no pair is left. An entry
 * whose count has fallen since it was pushed goes back with the live one;
 * counts only fall, except a new token's pairs, which are pushed anew. */
static int pop_best(struct trainer *t, uint32_t *best)
{
    while (t->heap.n > 0) {
        struct heap_ent e = heap_pop(&t->heap);
        uint32_t i = pair_find(t, e.k2);
        const struct tr_pair *p = &t->pairs[i];

        if (p->count <= 0)
            continue;
        if ((uint64_t)p->count != UINT64_MAX - e.k1) {
            push_pair(t, p); /* cannot fail: one entry was just popped */
            continue;
        }
        *best = i;
        return 0;
    }
    return 1;
}

/* Merge every (a, b) of chunk W into Z (left to right, as encoding does),
 * moving its pair counts from the old tokens to the new. */
static int merge_word(struct trainer *t, uint32_t w, uint32_t a, uint32_t b, uint32_t z,
                      uint32_t step)
{
    struct tr_word *wd = &t->words[w];
    uint32_t *s = t->tok + wd->off;
    const int64_t c = (int64_t)wd->count;
    size_t n = wd->len, i, j = 0;

    for (i = 0; i + 1 < n && !(s[i] == a && s[i + 1] == b); i++)
        ;
    if (i + 1 >= n)
        return 0; /* the pair has left this chunk since it was listed */
    for (i = 0; i + 1 < n; i++)
        if (pair_add(t, s[i], s[i + 1], -c, NO_WORD, NULL) != 0)
            return -1;
    for (i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            s[j++] = z;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    wd->len = n = j;
    for (i = 0; i + 1 < n; i++) {
        int has_z = s[i] == z || s[i + 1] == z;
        uint32_t p;
        if (pair_add(t, s[i], s[i + 1], c, has_z ? w : NO_WORD, &p) != 0)
            return -1;
        if (has_z && t->pairs[p].touched != step + 1) {
            t->pairs[p].touched = step + 1;
            if (GROW(t->touched, t->captouched, t->ntouched + 1) != 0)
                return -1;
            t->touched[t->ntouched++] = p;
        }
    }
    return 0;
}

/* Chunks counted, their bytes as tokens, every pair counted and pushed. */
static int trainer_init(struct trainer *t, const uint8_t *const *texts, const size_t *lens,
                        int ntexts)
{
    size_t off = 0;

    for (int k = 0; k < ntexts; k++)
        for (size_t i = 0, n; i < lens[k]; i += n) {
            n = dt_pretok_len(texts[k] + i, lens[k] - i);
            if (add_chunk(t, texts[k] + i, n) != 0)
                return -1;
        }
    t->tok = malloc((t->ntok ? t->ntok : 1) * sizeof *t->tok);
    if (t->tok == NULL)
        return -1;
    for (uint32_t w = 0; w < t->nwords; w++) {
        struct tr_word *wd = &t->words[w];
        wd->off = off;
        for (size_t i = 0; i < wd->len; i++)
            t->tok[off + i] = wd->src[i];
        off += wd->len;
        for (size_t i = 0; i + 1 < wd->len; i++)
            if (pair_add(t, t->tok[wd->off + i], t->tok[wd->off + i + 1], (int64_t)wd->count,
                         w, NULL) != 0)
                return -1;
    }
    for (size_t i = 0; i < t->npairs; i++)
        if (push_pair(t, &t->pairs[i]) != 0)
            return -1;
    return 0;
}

int dt_bpe_train(struct dt_bpe *bpe, const uint8_t *const *texts, const size_t *lens,
                 int ntexts, uint32_t n_merges)
{
    struct trainer t;
    int32_t *merges = NULL; /* [n_merges][2] */
    uint32_t m = 0;
    int rc = -1;

    memset(&t, 0, sizeof t);
    memset(bpe, 0, sizeof *bpe);
    if (n_merges > DT_BPE_MAX_MERGES)
        return -1;
    if (trainer_init(&t, texts, lens, ntexts) != 0)
        goto out;
    /* A merge shortens some chunk, so there are fewer than its bytes. */
    if (n_merges > t.ntok)
        n_merges = (uint32_t)t.ntok;
    merges = malloc(2 * sizeof *merges * (n_merges ? n_merges : 1));
    if (merges == NULL)
        goto out;
    for (; m < n_merges; m++) {
        uint32_t best, a, b, nw;
        const uint32_t *words;

        if (pop_best(&t, &best) != 0)
            break;
        a = (uint32_t)(t.pairs[best].key >> 32);
        b = (uint32_t)t.pairs[best].key;
        merges[2 * (size_t)m] = (int32_t)a;
        merges[2 * (size_t)m + 1] = (int32_t)b;
        /* (a, b)'s list does not grow this step: the new pairs hold the new token. */
        words = t.pairs[best].words;
        nw = t.pairs[best].nwords;
        t.ntouched = 0;
        for (uint32_t k = 0; k < nw; k++) {
            uint32_t w = words[k];
            if (t.words[w].stamp == m + 1)
                continue;
            t.words[w].stamp = m + 1;
            if (merge_word(&t, w, a, b, DT_BPE_BYTES + m, m) != 0)
                goto out;
        }
        for (size_t k = 0; k < t.ntouched; k++)
            if (t.pairs[t.touched[k]].count > 0 && push_pair(&t, &t.pairs[t.touched[k]]) != 0)
                goto out;
    }
    rc = dt_bpe_from_merges(bpe, merges, m, NULL, 0);
out:
    trainer_free(&t);
    free(merges);
    return rc;
}

/* ---- Encoding ------------------------------------------------------------------- */

struct enc_cache { const uint8_t *src; size_t len, off; uint64_t hash; uint32_t ntok; };

struct encoder {
    const struct dt_bpe *b;
    uint32_t *tok; size_t *prv, *nxt; size_t cap;  /* one chunk's linked list */
    struct heap heap;                              /* (rank, position) */
    struct enc_cache *slots; size_t nslots, capslots; /* src NULL: empty */
    uint32_t *arena; size_t narena, caparena;         /* the cached chunks' tokens */
};

/* Room for a chunk of N bytes: its list, and a heap of every pair it can
 * ever hold (N - 1 at first, two more per merge). */
static int enc_reserve(struct encoder *e, size_t n)
{
    if (n > e->cap) {
        size_t c = 2 * n;
        uint32_t *tok = realloc(e->tok, c * sizeof *tok);
        if (tok != NULL)
            e->tok = tok;
        size_t *prv = realloc(e->prv, c * sizeof *prv);
        if (prv != NULL)
            e->prv = prv;
        size_t *nxt = realloc(e->nxt, c * sizeof *nxt);
        if (nxt != NULL)
            e->nxt = nxt;
        if (tok == NULL || prv == NULL || nxt == NULL)
            return -1;
        e->cap = c;
    }
    return GROW(e->heap.e, e->heap.cap, 3 * n);
}

/* One chunk P[0..n) into OUT, GPT-2's bpe(): the lowest-ranked pair, the
 * leftmost of its occurrences first. A merge's new pairs hold the new
 * token, so they rank after it: the heap then gives every occurrence of a
 * pair left to right before any later pair, as bpe()'s rescans do. */
static size_t encode_chunk(struct encoder *e, const uint8_t *p, size_t n, uint32_t *out)
{
    const struct dt_bpe *b = e->b;
    size_t k = 0;

    if (enc_reserve(e, n) != 0)
        return NONE;
    e->heap.n = 0;
    for (size_t i = 0; i < n; i++) {
        e->tok[i] = p[i];
        e->prv[i] = i ? i - 1 : NONE;
        e->nxt[i] = i + 1 < n ? i + 1 : NONE;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = rank_of(b, p[i], p[i + 1]);
        if (r != NO_RANK)
            heap_push(&e->heap, r, i); /* room reserved */
    }
    while (e->heap.n > 0) {
        struct heap_ent top = heap_pop(&e->heap);
        size_t i = (size_t)top.k2, j = e->nxt[i];
        uint32_t r, rank = (uint32_t)top.k1;

        if (e->tok[i] == DEAD || j == NONE || rank_of(b, e->tok[i], e->tok[j]) != rank)
            continue; /* merged away since it was pushed */
        e->tok[i] = DT_BPE_BYTES + rank;
        e->tok[j] = DEAD;
        e->nxt[i] = e->nxt[j];
        if (e->nxt[i] != NONE)
            e->prv[e->nxt[i]] = i;
        if (e->prv[i] != NONE && (r = rank_of(b, e->tok[e->prv[i]], e->tok[i])) != NO_RANK)
            heap_push(&e->heap, r, e->prv[i]);
        if (e->nxt[i] != NONE && (r = rank_of(b, e->tok[i], e->tok[e->nxt[i]])) != NO_RANK)
            heap_push(&e->heap, r, i);
    }
    for (size_t i = 0; i != NONE; i = e->nxt[i])
        out[k++] = e->tok[i];
    return k;
}

/* Chunk P[0..n) through the cache: encoded once, copied after. */
static size_t encode_cached(struct encoder *e, const uint8_t *p, size_t n, uint32_t *out)
{
    uint64_t h = hash_bytes(p, n);
    size_t s, k;

    if (2 * (e->nslots + 1) > e->capslots) {
        size_t c = e->capslots ? 2 * e->capslots : 4096;
        struct enc_cache *ns = calloc(c, sizeof *ns);
        if (ns == NULL)
            return NONE;
        for (size_t i = 0; i < e->capslots; i++) {
            if (e->slots[i].src == NULL)
                continue;
            for (s = (size_t)e->slots[i].hash & (c - 1); ns[s].src != NULL; s = (s + 1) & (c - 1))
                ;
            ns[s] = e->slots[i];
        }
        free(e->slots);
        e->slots = ns;
        e->capslots = c;
    }
    for (s = (size_t)h & (e->capslots - 1); e->slots[s].src != NULL; s = (s + 1) & (e->capslots - 1)) {
        const struct enc_cache *c = &e->slots[s];
        if (c->hash == h && c->len == n && memcmp(c->src, p, n) == 0) {
            memcpy(out, e->arena + c->off, c->ntok * sizeof *out);
            return c->ntok;
        }
    }
    k = encode_chunk(e, p, n, out);
    if (k == NONE || GROW(e->arena, e->caparena, e->narena + k) != 0)
        return NONE;
    memcpy(e->arena + e->narena, out, k * sizeof *out);
    e->slots[s] = (struct enc_cache){.src = p, .len = n, .off = e->narena, .hash = h,
                                     .ntok = (uint32_t)k};
    e->narena += k;
    e->nslots++;
    return k;
}

size_t dt_bpe_encode(const struct dt_bpe *b, const uint8_t *text, size_t n, uint32_t *out)
{
    struct encoder e;
    size_t count = 0;

    if (b->n_merges == 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = text[i];
        return n;
    }
    memset(&e, 0, sizeof e);
    e.b = b;
    for (size_t i = 0, len; i < n && count != NONE; i += len) {
        size_t k;
        len = dt_pretok_len(text + i, n - i);
        if (len == 1) {
            out[count] = text[i];
            k = 1;
        } else if (len <= CACHE_MAX) {
            k = encode_cached(&e, text + i, len, out + count);
        } else {
            k = encode_chunk(&e, text + i, len, out + count);
        }
        count = k == NONE ? NONE : count + k;
    }
    free(e.tok);
    free(e.prv);
    free(e.nxt);
    free(e.heap.e);
    free(e.slots);
    free(e.arena);
    return count;
}

/* ---- Decoding ---------------------------------------------------------------------- */

size_t dt_bpe_decode(const struct dt_bpe *b, const uint32_t *tokens, size_t n, uint8_t *out,
                     size_t cap)
{
    const uint64_t v = (uint64_t)DT_BPE_BYTES + b->n_merges;
    uint32_t *stack; /* [depth + 1]: right halves still to expand */
    size_t pos = 0;

    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= v)
            return NONE;
    stack = malloc(((size_t)b->depth + 1) * sizeof *stack);
    if (stack == NULL)
        return NONE;
    for (size_t i = 0; i < n; i++) {
        size_t sp = 0;

        if (pos >= cap) { /* only the length is wanted now */
            pos += (size_t)b->len[tokens[i]];
            continue;
        }
        stack[sp++] = tokens[i];
        while (sp > 0) {
            uint32_t t = stack[--sp];
            if (t < DT_BPE_BYTES) {
                if (pos < cap)
                    out[pos] = (uint8_t)t;
                pos++;
            } else {
                stack[sp++] = (uint32_t)b->merges[2 * (size_t)(t - DT_BPE_BYTES) + 1];
                stack[sp++] = (uint32_t)b->merges[2 * (size_t)(t - DT_BPE_BYTES)];
            }
        }
    }
    free(stack);
    return pos;
}
