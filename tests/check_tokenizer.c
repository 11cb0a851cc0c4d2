/* check_tokenizer.c: unit tests for the byte-level BPE tokenizer and the
 * UTF-8 check (src/prep/tokenizer.c).
 *
 * Exact references throughout: merges worked out by hand on tiny texts,
 * chunks of GPT-2's pattern written out, and on random texts a naive
 * trainer (every pair recounted after every merge) and a naive encoder
 * (GPT-2's bpe(): rescan for the lowest-ranked pair, merge all of it) that
 * the incremental trainer and the heap encoder must match token for token.
 * Random UTF-8 must decode back to its exact bytes. */
#include "ck_fast.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep/tokenizer.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* N random bytes drawn from ALPHABET. */
static uint8_t *random_text(size_t n, const char *alphabet)
{
    uint8_t *t = malloc(n);
    size_t k = strlen(alphabet);

    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < n; i++)
        t[i] = (uint8_t)alphabet[rnd() % k];
    return t;
}

/* About N bytes of random UTF-8: ASCII words and spaces, and code points
 * of 2, 3 and 4 bytes (no surrogates). *LEN: the exact length. */
static uint8_t *random_utf8(size_t n, size_t *len)
{
    uint8_t *t = malloc(n + 4);
    size_t i = 0;

    ck_assert_ptr_nonnull(t);
    while (i < n) {
        uint32_t kind = (uint32_t)(rnd() % 10), cp;
        if (kind < 6) {
            t[i++] = (uint8_t)" etaoin'\n.7"[rnd() % 11];
            continue;
        }
        cp = kind == 6 ? 0x80 + (uint32_t)(rnd() % 0x780) :
             kind == 7 ? 0x800 + (uint32_t)(rnd() % 0xD000) :
             kind == 8 ? 0xE000 + (uint32_t)(rnd() % 0x2000) : 0x10000 + (uint32_t)(rnd() % 0x100000);
        if (cp < 0x800) {
            t[i++] = (uint8_t)(0xC0 | cp >> 6);
        } else if (cp < 0x10000) {
            t[i++] = (uint8_t)(0xE0 | cp >> 12);
            t[i++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        } else {
            t[i++] = (uint8_t)(0xF0 | cp >> 18);
            t[i++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            t[i++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        }
        t[i++] = (uint8_t)(0x80 | (cp & 0x3F));
    }
    *len = i;
    return t;
}

static void train1(struct dt_bpe *b, const char *text, uint32_t n)
{
    const uint8_t *t = (const uint8_t *)text;
    size_t len = strlen(text);

    ck_assert_int_eq(dt_bpe_train(b, &t, &len, 1, n), 0);
}

/* ---- References ------------------------------------------------------------ */

struct ref_word { uint32_t *tok; size_t len; };

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static size_t merge_all(uint32_t *s, size_t n, uint32_t a, uint32_t b, uint32_t z)
{
    size_t j = 0;

    for (size_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            s[j++] = z;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    return j;
}

/* The trainer without its bookkeeping: every chunk occurrence a word of its
 * own, every pair recounted (sorted keys) for every merge. Returns the
 * number of merges, into MERGES [n][2]. */
static uint32_t ref_train(const uint8_t *text, size_t n, uint32_t want, int32_t *merges)
{
    struct ref_word *w = malloc(n * sizeof *w);
    uint64_t *keys = malloc(n * sizeof *keys);
    size_t nw = 0;
    uint32_t m;

    for (size_t i = 0, len; i < n; i += len, nw++) {
        len = dt_pretok_len(text + i, n - i);
        w[nw].tok = malloc(len * sizeof *w[nw].tok);
        w[nw].len = len;
        for (size_t k = 0; k < len; k++)
            w[nw].tok[k] = text[i + k];
    }
    for (m = 0; m < want; m++) {
        size_t nk = 0, best_n = 0;
        uint64_t best = 0;
        for (size_t i = 0; i < nw; i++)
            for (size_t k = 0; k + 1 < w[i].len; k++)
                keys[nk++] = (uint64_t)w[i].tok[k] << 32 | w[i].tok[k + 1];
        if (nk == 0)
            break;
        qsort(keys, nk, sizeof *keys, cmp_u64);
        for (size_t i = 0, j; i < nk; i = j) {
            for (j = i; j < nk && keys[j] == keys[i]; j++)
                ;
            if (j - i > best_n) { /* strictly more: the smallest key wins ties */
                best_n = j - i;
                best = keys[i];
            }
        }
        merges[2 * m] = (int32_t)(best >> 32);
        merges[2 * m + 1] = (int32_t)(uint32_t)best;
        for (size_t i = 0; i < nw; i++)
            w[i].len = merge_all(w[i].tok, w[i].len, (uint32_t)(best >> 32), (uint32_t)best, 256 + m);
    }
    for (size_t i = 0; i < nw; i++)
        free(w[i].tok);
    free(w);
    free(keys);
    return m;
}

/* GPT-2's bpe() as written: per chunk, the lowest-ranked pair present,
 * all of its occurrences merged, until no pair has a rank. */
static size_t ref_encode(const struct dt_bpe *b, const uint8_t *text, size_t n, uint32_t *out)
{
    size_t count = 0;

    for (size_t i = 0, len; i < n; i += len) {
        uint32_t *s = out + count;
        len = dt_pretok_len(text + i, n - i);
        for (size_t k = 0; k < len; k++)
            s[k] = text[i + k];
        for (size_t cur = len;;) {
            uint32_t best = UINT32_MAX;
            for (size_t k = 0; k + 1 < cur; k++)
                for (uint32_t r = 0; r < b->n_merges && r < best; r++)
                    if ((uint32_t)b->merges[2 * r] == s[k] && (uint32_t)b->merges[2 * r + 1] == s[k + 1])
                        best = r;
            if (best == UINT32_MAX) {
                count += cur;
                break;
            }
            cur = merge_all(s, cur, (uint32_t)b->merges[2 * best], (uint32_t)b->merges[2 * best + 1],
                            256 + best);
        }
    }
    return count;
}

/* TEXT through encode and decode: the same bytes, and the reference's tokens. */
static void round_trip(const struct dt_bpe *b, const uint8_t *text, size_t n, int with_ref)
{
    uint32_t *tok = malloc((n + 1) * sizeof *tok), *ref = malloc((n + 1) * sizeof *ref);
    uint8_t *back = malloc(n + 1);
    size_t k = dt_bpe_encode(b, text, n, tok);

    ck_assert_uint_ne(k, SIZE_MAX);
    ck_assert_uint_le(k, n);
    if (with_ref) {
        ck_assert_uint_eq(ref_encode(b, text, n, ref), k);
        ck_assert_mem_eq(ref, tok, k * sizeof *tok);
    }
    ck_assert_uint_eq(dt_bpe_decode(b, tok, k, back, n), n);
    ck_assert_mem_eq(back, text, n);
    free(tok);
    free(ref);
    free(back);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

START_TEST(test_utf8_valid)
{
    static const char *const good[] = {
        "", "plain ASCII\n", "caf\xc3\xa9 na\xc3\xafve", "\xe2\x82\xac 1", "\xf0\x9f\x98\x80",
        "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf", "\xc2\x80",
    };
    struct dt_utf8_error e;

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(dt_utf8_check((const uint8_t *)good[i], strlen(good[i]), &e) == 0,
                      "case %zu refused: %s at %zu", i, e.why, e.offset);
}
END_TEST

START_TEST(test_utf8_invalid)
{
    static const struct { const char *text; size_t offset, line, column; const char *why; } bad[] = {
        {"ab\ncd\xff" "e", 5, 2, 3, "never occurs"},
        {"\xc3\xa9\xc3\xa9\x80", 4, 1, 3, "unexpected continuation byte"},
        {"x\xc0\xaf", 1, 1, 2, "overlong"},
        {"\xe0\x80\x80", 0, 1, 1, "overlong"},
        {"\xf0\x8f\xbf\xbf", 0, 1, 1, "overlong"},
        {"a\n\n\xed\xa0\x80", 3, 3, 1, "surrogate"},
        {"\xf4\x90\x80\x80", 0, 1, 1, "above U+10FFFF"},
        {"end \xe2\x82", 4, 1, 5, "incomplete"},
        {"\xe2\x41\x41", 0, 1, 1, "incomplete"},
        {"\xf5\x80\x80\x80", 0, 1, 1, "never occurs"},
    };
    struct dt_utf8_error e;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(dt_utf8_check((const uint8_t *)bad[i].text, strlen(bad[i].text), &e), -1);
        ck_assert_uint_eq(e.offset, bad[i].offset);
        ck_assert_uint_eq(e.line, bad[i].line);
        ck_assert_uint_eq(e.column, bad[i].column);
        ck_assert_uint_eq(e.byte, (uint8_t)bad[i].text[bad[i].offset]);
        ck_assert_msg(strstr(e.why, bad[i].why) != NULL, "case %zu: '%s'", i, e.why);
    }
}
END_TEST

/* ---- Chunks ------------------------------------------------------------------ */

START_TEST(test_pretok)
{
    /* Each case: the text, and its chunks joined by '|'. */
    static const char *const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"it's we'll they've I'm you'd 're", "it|'s| we|'ll| they|'ve| I|'m| you|'d| '|re"},
        {"'sand", "'s|and"},
        {"In 1611, 12 tribes!!", "In| 1611|,| 12| tribes|!!"},
        {"a  b", "a| | b"},
        {"a \n\n def", "a| \n\n| def"},
        {"x\ty\n", "x|\t|y|\n"},
        {"end  ", "end|  "},
        {" ", " "},
        {"caf\xc3\xa9 \xe2\x80\x94 ok", "caf\xc3\xa9| \xe2\x80\x94| ok"},
        {"a1b", "a|1|b"},
        {"(x)...", "(|x|)..."},
        {"   ?", "  | ?"},
        {"\n\nA", "\n|\n|A"},
    };

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint8_t *t = (const uint8_t *)cases[c][0];
        size_t n = strlen(cases[c][0]);
        char got[128];
        size_t g = 0;

        for (size_t i = 0, len; i < n; i += len) {
            len = dt_pretok_len(t + i, n - i);
            ck_assert_uint_ge(len, 1);
            if (i > 0)
                got[g++] = '|';
            memcpy(got + g, t + i, len);
            g += len;
        }
        got[g] = '\0';
        ck_assert_msg(strcmp(got, cases[c][1]) == 0, "'%s': chunks '%s', expected '%s'",
                      cases[c][0], got, cases[c][1]);
    }
}
END_TEST

/* ---- Training ------------------------------------------------------------------- */

/* Worked by hand: aa (4), then ab over Za (both 2: the smaller pair),
 * then ZY, then the count-1 pairs smallest first, until one token is left. */
START_TEST(test_train_by_hand)
{
    static const int32_t want[7][2] = {
        {97, 97}, {97, 98}, {256, 257}, {97, 99}, {100, 258}, {258, 260}, {261, 259},
    };
    struct dt_bpe b;
    uint32_t tok[16];

    train1(&b, "aaabdaaabac", 100);
    ck_assert_uint_eq(b.n_merges, 7); /* all the text allows */
    ck_assert_mem_eq(b.merges, want, sizeof want);
    ck_assert_uint_eq(dt_bpe_encode(&b, (const uint8_t *)"aaabdaaabac", 11, tok), 1);
    ck_assert_uint_eq(tok[0], 262);
    ck_assert_uint_eq(b.len[262], 11);
    dt_bpe_free(&b);

    train1(&b, "aaabdaaabac", 3);
    ck_assert_uint_eq(b.n_merges, 3);
    ck_assert_mem_eq(b.merges, want, 3 * sizeof want[0]);
    ck_assert_uint_eq(dt_bpe_encode(&b, (const uint8_t *)"aaabdaaabac", 11, tok), 5);
    dt_bpe_free(&b);
}
END_TEST

/* Merges stay inside chunks: "ab", " ab", " ab" give (a, b) then (' ', ab),
 * and no (b, ' ') ever. Two texts count together but never join. */
START_TEST(test_train_chunks)
{
    static const int32_t want[2][2] = {{97, 98}, {32, 256}};
    const uint8_t *texts[2] = {(const uint8_t *)"ab ab", (const uint8_t *)" ab"};
    size_t lens[2] = {5, 3};
    struct dt_bpe b;

    train1(&b, "ab ab ab", 10);
    ck_assert_uint_eq(b.n_merges, 2);
    ck_assert_mem_eq(b.merges, want, sizeof want);
    dt_bpe_free(&b);
    ck_assert_int_eq(dt_bpe_train(&b, texts, lens, 2, 10), 0);
    ck_assert_uint_eq(b.n_merges, 2);
    ck_assert_mem_eq(b.merges, want, sizeof want);
    dt_bpe_free(&b);
}
END_TEST

/* The incremental trainer against the full recount, on texts with many
 * repeats (small alphabets) and with contractions and long runs. */
START_TEST(test_train_matches_reference)
{
    static const char *const alphabets[] = {"ab ", "abc d\n", "ab'st  \n.,1", "aaaab", "xy"};
    const size_t sizes[] = {3000, 2000, 2500, 1500, 800};

    rng_state = 1234 + (uint64_t)_i;
    for (size_t a = 0; a < sizeof alphabets / sizeof alphabets[0]; a++) {
        uint8_t *t = random_text(sizes[a], alphabets[a]);
        int32_t *ref = malloc(2 * 400 * sizeof *ref);
        uint32_t nref = ref_train(t, sizes[a], 400, ref);
        const uint8_t *tp = t;
        struct dt_bpe b;

        ck_assert_int_eq(dt_bpe_train(&b, &tp, &sizes[a], 1, 400), 0);
        ck_assert_msg(b.n_merges == nref, "alphabet %zu: %u merges, reference %u", a, b.n_merges, nref);
        for (uint32_t m = 0; m < nref; m++)
            ck_assert_msg(b.merges[2 * m] == ref[2 * m] && b.merges[2 * m + 1] == ref[2 * m + 1],
                          "alphabet %zu merge %u: (%d, %d), reference (%d, %d)", a, m,
                          b.merges[2 * m], b.merges[2 * m + 1], ref[2 * m], ref[2 * m + 1]);
        round_trip(&b, t, sizes[a], 1);
        dt_bpe_free(&b);
        free(ref);
        free(t);
    }
}
END_TEST

START_TEST(test_deterministic)
{
    size_t n;
    uint8_t *t;
    const uint8_t *tp;
    struct dt_bpe b1, b2;

    rng_state = 99;
    t = random_utf8(20000, &n);
    tp = t;
    ck_assert_int_eq(dt_bpe_train(&b1, &tp, &n, 1, 300), 0);
    ck_assert_int_eq(dt_bpe_train(&b2, &tp, &n, 1, 300), 0);
    ck_assert_uint_eq(b1.n_merges, 300);
    ck_assert_uint_eq(b2.n_merges, 300);
    ck_assert_mem_eq(b1.merges, b2.merges, 2 * 300 * sizeof *b1.merges);
    dt_bpe_free(&b1);
    dt_bpe_free(&b2);
    free(t);
}
END_TEST

/* ---- Encoding and decoding -------------------------------------------------------- */

/* Merges learned on one random UTF-8 text, applied to it and to another:
 * exact bytes back, the reference's tokens. */
START_TEST(test_round_trip_utf8)
{
    size_t n1, n2;
    uint8_t *t1, *t2;
    const uint8_t *tp;
    struct dt_utf8_error e;
    struct dt_bpe b;

    rng_state = 7 + (uint64_t)_i;
    t1 = random_utf8(30000, &n1);
    t2 = random_utf8(5000, &n2);
    ck_assert_int_eq(dt_utf8_check(t1, n1, &e), 0);
    ck_assert_int_eq(dt_utf8_check(t2, n2, &e), 0);
    tp = t1;
    ck_assert_int_eq(dt_bpe_train(&b, &tp, &n1, 1, 500), 0);
    ck_assert_uint_eq(b.n_merges, 500);
    round_trip(&b, t1, n1, 1);
    round_trip(&b, t2, n2, 1);
    dt_bpe_free(&b);
    free(t1);
    free(t2);
}
END_TEST

/* One chunk of 200000 bytes (one letter run): the heap encoder is not
 * quadratic, and still agrees with the reference on a shorter run. */
START_TEST(test_long_chunk)
{
    const size_t n = 200000;
    uint8_t *t = malloc(n);
    struct dt_bpe b;

    memset(t, 'a', n);
    t[n / 3] = 'b';
    train1(&b, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab aaaaaaaaaaaaaab", 20);
    round_trip(&b, t, n, 0);
    round_trip(&b, t, 3000, 1);
    dt_bpe_free(&b);
    free(t);
}
END_TEST

START_TEST(test_bytes_and_decode_limits)
{
    const uint8_t text[] = "\x00\xff" "ab";
    uint32_t tok[4], bad = 256;
    uint8_t out[4];
    struct dt_bpe b;
    char err[160];

    ck_assert_int_eq(dt_bpe_from_merges(&b, NULL, 0, err, sizeof err), 0);
    ck_assert_uint_eq(dt_bpe_encode(&b, text, 4, tok), 4); /* no merges: the bytes */
    ck_assert_uint_eq(tok[0], 0);
    ck_assert_uint_eq(tok[1], 255);
    ck_assert_uint_eq(dt_bpe_decode(&b, &bad, 1, out, sizeof out), SIZE_MAX);
    ck_assert_uint_eq(dt_bpe_decode(&b, tok, 4, out, 2), 4); /* the length, past CAP */
    ck_assert_mem_eq(out, text, 2);
    dt_bpe_free(&b);
}
END_TEST

START_TEST(test_from_merges_checks)
{
    static const int32_t ok[2][2] = {{97, 98}, {256, 99}};
    static const int32_t future[2][2] = {{97, 98}, {257, 99}};
    static const int32_t repeat[3][2] = {{97, 98}, {98, 99}, {97, 98}};
    static const int32_t negative[1][2] = {{-1, 98}};
    struct dt_bpe b;
    uint32_t tok[4];
    char err[160];

    ck_assert_int_eq(dt_bpe_from_merges(&b, &ok[0][0], 2, err, sizeof err), 0);
    ck_assert_uint_eq(dt_bpe_encode(&b, (const uint8_t *)"abc", 3, tok), 1);
    ck_assert_uint_eq(tok[0], 257);
    dt_bpe_free(&b);
    ck_assert_int_eq(dt_bpe_from_merges(&b, &future[0][0], 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "merge 1 joins (257, 99), but only tokens 0 to 256 exist") != NULL, "%s", err);
    ck_assert_int_eq(dt_bpe_from_merges(&b, &repeat[0][0], 3, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "merge 2 repeats the pair (97, 98) of merge 0") != NULL, "%s", err);
    ck_assert_int_eq(dt_bpe_from_merges(&b, &negative[0][0], 1, err, sizeof err), -1);
    ck_assert_int_eq(dt_bpe_from_merges(&b, NULL, DT_BPE_MAX_MERGES + 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "token ids are int32") != NULL, "%s", err);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *text = tcase_create("text");
    TCase *train = tcase_create("train");
    TCase *code = tcase_create("encode");

    tcase_add_test(text, test_utf8_valid);
    tcase_add_test(text, test_utf8_invalid);
    tcase_add_test(text, test_pretok);
    suite_add_tcase(s, text);

    tcase_add_test(train, test_train_by_hand);
    tcase_add_test(train, test_train_chunks);
    tcase_add_loop_test(train, test_train_matches_reference, 0, 3);
    tcase_add_test(train, test_deterministic);
    suite_add_tcase(s, train);

    tcase_add_loop_test(code, test_round_trip_utf8, 0, 2);
    tcase_add_test(code, test_long_chunk);
    tcase_add_test(code, test_bytes_and_decode_limits);
    tcase_add_test(code, test_from_merges_checks);
    suite_add_tcase(s, code);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tokenizer_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
