/* check_decode.c: generation with a key/value cache (nn/model.h's
 * dt_model_decode, layer.h's decode ops, backend.h's attention_decode)
 * against the ordinary forward of the whole window, on the CPU backend.
 *
 * Small random transformers are built in memory (no files): a GPT-style one
 * (tied head, linear + GELU, two blocks) whose block of 80 positions spans
 * two of the CPU attention's 64-key blocks, and one with an untied head, a
 * standalone [gelu] and a ReLU. Their parameters are drawn larger than
 * GPT-2's initialiser (U(-0.4, 0.4)) so that attention is far from uniform.
 * Decoding positions 0..T-1 one at a time must give the forward's logits at
 * every position to 1e-5, relative to the largest logit of the position
 * (the two compute the same sums in another order, in float32: ~1e-7); a
 * second sequence decoded after the first starts afresh at position 0.
 * attention_decode alone is checked against a double-precision reference.
 * In a --with-cuda build with a device, the CUDA backend's attention_decode
 * is checked against the CPU's, and the GPT decoded on the device against
 * the CPU's forward (skipped without a device). */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#ifdef DT_HAVE_CUDA
#include "gpu/gpu.h"
#endif
#include "nn/layer.h"
#include "nn/model.h"
#include "runtime/rng.h"
#include "runtime/status.h"

static const struct dt_backend *const be = &dt_backend_cpu;

#define DECODE_TOL 1e-5

static void setup_fp32(void)
{
    char why[256];
    ck_assert_msg(be->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "%s", why);
}

static void fill(float *x, size_t n, dt_rng *r, float a)
{
    for (size_t i = 0; i < n; i++) x[i] = a * (2.0f * dt_rng_uniform(r) - 1.0f);
}

/* The model of specs on token windows of T, V tokens, with random parameters, on b. */
static void build_on(const struct dt_backend *b, struct dt_model *m, const struct dt_layer_spec *specs, int n, int T,
                     int V, uint64_t seed)
{
    dt_status st = {0};
    int rc = dt_model_build_specs(m, "decode-test", (struct dt_shape){1, T + 1, 4}, V, specs, n, &st);
    ck_assert_msg(rc == DT_OK, "%s", st.msg);
    ck_assert_msg(dt_model_can_decode(m, &st) == DT_OK, "%s", st.msg);
    dt_model_create(m, b, 1);
    float *p = malloc(sizeof(float) * m->nparams);
    dt_rng r;
    dt_rng_seed(&r, seed, 7);
    fill(p, m->nparams, &r, 0.4f);
    b->upload(m->params, p, sizeof(float) * m->nparams);
    free(p);
}

static void build(struct dt_model *m, const struct dt_layer_spec *specs, int n, int T, int V, uint64_t seed)
{
    build_on(be, m, specs, n, T, V, seed);
}

static double compare2(struct dt_model *fwd, struct dt_model *dec, const int32_t *tokens, int T, int V);
static double compare3(struct dt_model *fwd, struct dt_model *dec, const int32_t *tokens, const int32_t *dec_tokens,
                       int T, int V);

/* Decoding tokens[0..T) against one forward of the window: the worst
 * position's max |decode - forward| / max |forward|. */
static double compare(struct dt_model *m, const int32_t *tokens, int T, int V)
{
    return compare2(m, m, tokens, T, V);
}

/* The same, decoding with dec (another backend's copy of m, possibly). */
static double compare2(struct dt_model *fwd, struct dt_model *dec, const int32_t *tokens, int T, int V)
{
    return compare3(fwd, dec, tokens, tokens, T, V);
}

/* The forward of tokens against decoding dec_tokens (the same, but for the
 * negative control). */
static double compare3(struct dt_model *fwd, struct dt_model *dec, const int32_t *tokens, const int32_t *dec_tokens,
                       int T, int V)
{
    float *full = malloc(sizeof(float) * (size_t)T * V), *one = malloc(sizeof(float) * V);
    fwd->be->upload(fwd->act[0], tokens, sizeof(int32_t) * (size_t)(T + 1));
    dt_model_forward(fwd, 1, 0, NULL);
    fwd->be->download(full, fwd->act[fwd->nlayers], sizeof(float) * (size_t)T * V);
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        dt_model_decode(dec, dec_tokens[t], t, one);
        double big = 0.0, diff = 0.0;
        for (int v = 0; v < V; v++) {
            const double f = full[(size_t)t * V + v];
            big = fmax(big, fabs(f));
            diff = fmax(diff, fabs((double)one[v] - f));
        }
        ck_assert_msg(big > 0.0 && isfinite(diff), "position %d: logits %g, difference %g", t, big, diff);
        worst = fmax(worst, diff / big);
    }
    free(full);
    free(one);
    return worst;
}

static void random_tokens(int32_t *tok, int n, int V, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed, 11);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)dt_rng_below(&r, (uint64_t)V);
}

enum { GT = 80, GC = 32, GV = 50 };
static const struct dt_layer_spec gpt_specs[] = {
    {.type = "embedding", .filters = GC, .block = GT, .vocab = GV},
    {.type = "layernorm"}, {.type = "attention", .heads = 4}, {.type = "add", .from = -3},
    {.type = "layernorm"}, {.type = "linear", .filters = 4 * GC, .activation = DT_ACT_GELU},
    {.type = "linear", .filters = GC}, {.type = "add", .from = -4},
    {.type = "layernorm"}, {.type = "attention", .heads = 4}, {.type = "add", .from = -3},
    {.type = "layernorm"}, {.type = "linear", .filters = 4 * GC, .activation = DT_ACT_GELU},
    {.type = "linear", .filters = GC}, {.type = "add", .from = -4},
    {.type = "layernorm"}, {.type = "lm_head", .vocab = GV, .tied = 1},
};

START_TEST(test_gpt_cache_equals_forward)
{
    enum { T = GT, V = GV };
    const struct dt_layer_spec *specs = gpt_specs;
    const int nspecs = (int)(sizeof gpt_specs / sizeof *gpt_specs);
    struct dt_model m;
    int32_t tok[T + 1], tok2[T + 1];
    setup_fp32();
    build(&m, specs, nspecs, T, V, 3);
    ck_assert_int_ge(dt_model_tied_head(&m), 0);
    random_tokens(tok, T + 1, V, 1);
    double w = compare(&m, tok, T, V);
    printf("check_decode: GPT (tied, T %d, 2 blocks): worst relative logit difference %.3g over %d positions\n", T, w,
           T);
    ck_assert_msg(w <= DECODE_TOL, "cache against forward: %g > %g", w, DECODE_TOL);
    random_tokens(tok2, T + 1, V, 2); /* a second sequence: the cache starts again at position 0 */
    w = compare(&m, tok2, T, V);
    printf("check_decode: a second sequence: worst %.3g\n", w);
    ck_assert_msg(w <= DECODE_TOL, "second sequence: %g > %g", w, DECODE_TOL);
    tok2[0] = tok[0];
    for (int t = 1; t <= T; t++) tok2[t] = tok[t - 1]; /* negative control: one token late from position 1 on */
    w = compare3(&m, &m, tok, tok2, T, V);
    printf("check_decode: negative control (the sequence shifted by one): worst %.3g\n", w);
    ck_assert_msg(w > 1000 * DECODE_TOL, "a shifted sequence within %g: the comparison has no power", w);
    dt_model_free(&m);
}
END_TEST

START_TEST(test_untied_gelu_relu)
{
    enum { T = 17, C = 24, V = 300 };
    const struct dt_layer_spec specs[] = {
        {.type = "embedding", .filters = C, .block = T, .vocab = V},
        {.type = "attention", .heads = 3}, {.type = "add", .from = -2, .activation = DT_ACT_RELU},
        {.type = "linear", .filters = 40}, {.type = "gelu"}, {.type = "linear", .filters = C, .activation = DT_ACT_RELU},
        {.type = "layernorm", .epsilon = 1e-3f}, {.type = "lm_head", .vocab = V, .tied = 0},
    };
    struct dt_model m;
    int32_t tok[T + 1];
    setup_fp32();
    build(&m, specs, (int)(sizeof specs / sizeof *specs), T, V, 5);
    ck_assert_int_lt(dt_model_tied_head(&m), 0);
    random_tokens(tok, T + 1, V, 4);
    double w = compare(&m, tok, T, V);
    printf("check_decode: untied head, [gelu], ReLU (T %d): worst %.3g\n", T, w);
    ck_assert_msg(w <= DECODE_TOL, "cache against forward: %g > %g", w, DECODE_TOL);
    dt_model_free(&m);
}
END_TEST

/* attention_decode against softmax(q k^T / sqrt(D)) v in double. */
START_TEST(test_attention_decode_reference)
{
    enum { P = 70, C = 48, H = 3, D = C / H };
    float *qkv = malloc(sizeof(float) * P * 3 * C), out[C];
    dt_rng r;
    setup_fp32();
    dt_rng_seed(&r, 9, 1);
    fill(qkv, (size_t)P * 3 * C, &r, 2.0f);
    double worst = 0.0;
    for (int pos = 0; pos < P; pos += 23) {
        be->attention_decode(out, qkv, pos, C, H);
        for (int h = 0; h < H; h++) {
            double s[P], mx = -INFINITY, sum = 0.0;
            const float *q = qkv + (size_t)pos * 3 * C + h * D;
            for (int t = 0; t <= pos; t++) {
                const float *k = qkv + (size_t)t * 3 * C + C + h * D;
                s[t] = 0.0;
                for (int d = 0; d < D; d++) s[t] += (double)q[d] * (double)k[d];
                s[t] /= sqrt((double)D);
                mx = fmax(mx, s[t]);
            }
            for (int t = 0; t <= pos; t++) sum += s[t] = exp(s[t] - mx);
            for (int d = 0; d < D; d++) {
                double o = 0.0;
                for (int t = 0; t <= pos; t++) o += s[t] / sum * (double)qkv[(size_t)t * 3 * C + 2 * C + h * D + d];
                worst = fmax(worst, fabs(o - (double)out[h * D + d]));
            }
        }
    }
    printf("check_decode: attention_decode against double: worst absolute error %.3g\n", worst);
    ck_assert_msg(worst < 1e-5, "attention_decode: %g", worst);
    free(qkv);
}
END_TEST

#ifdef DT_HAVE_CUDA
/* The device's attention_decode against the CPU's (heads of 1, 2, 4 and 8
 * values a lane), and the GPT decoded on the device against the CPU's
 * forward: float32 both, other sums (cuBLAS), 1e-4. */
START_TEST(test_gpu_decode)
{
    const struct dt_backend *gb = &dt_backend_cuda;
    char why[256] = "";
    if (dt_gpu_count(why, sizeof why) <= 0) {
        printf("check_decode: no GPU (%s): the CUDA decode is not checked here\n", why);
        return;
    }
    ck_assert_msg(dt_gpu_select(0, why, sizeof why) == 0, "%s", why);
    ck_assert_msg(gb->setup(1, DT_PREC_FP32, why, sizeof why) == 0, "%s", why);
    setup_fp32();
    const int shapes[4][2] = {{96, 3}, {96, 2}, {96, 1}, {256, 1}};
    enum { P = 300 };
    dt_rng r;
    dt_rng_seed(&r, 12, 1);
    for (int s = 0; s < 4; s++) {
        const int C = shapes[s][0], H = shapes[s][1];
        float *qkv = malloc(sizeof(float) * P * 3 * (size_t)C), *oc = malloc(sizeof(float) * (size_t)C),
              *og = malloc(sizeof(float) * (size_t)C);
        fill(qkv, (size_t)P * 3 * C, &r, 2.0f);
        float *dq = gb->alloc(sizeof(float) * P * 3 * (size_t)C), *dout = gb->alloc(sizeof(float) * (size_t)C);
        gb->upload(dq, qkv, sizeof(float) * P * 3 * (size_t)C);
        double worst = 0.0;
        for (int pos = 0; pos < P; pos += 37) {
            be->attention_decode(oc, qkv, pos, C, H);
            gb->attention_decode(dout, dq, pos, C, H);
            gb->download(og, dout, sizeof(float) * (size_t)C);
            for (int j = 0; j < C; j++) worst = fmax(worst, fabs((double)og[j] - (double)oc[j]));
        }
        printf("check_decode: CUDA attention_decode, width %d in %d heads: worst %.3g against the CPU\n", C, H, worst);
        ck_assert_msg(worst < 1e-5, "CUDA attention_decode (C %d, H %d): %g", C, H, worst);
        gb->free(dq);
        gb->free(dout);
        free(qkv);
        free(oc);
        free(og);
    }
    struct dt_model mc, mg;
    int32_t tok[GT + 1];
    const int nspecs = (int)(sizeof gpt_specs / sizeof *gpt_specs);
    build_on(be, &mc, gpt_specs, nspecs, GT, GV, 3);
    build_on(gb, &mg, gpt_specs, nspecs, GT, GV, 3);
    random_tokens(tok, GT + 1, GV, 1);
    double w = compare2(&mc, &mg, tok, GT, GV);
    printf("check_decode: the GPT decoded on the GPU against the CPU's forward: worst %.3g\n", w);
    ck_assert_msg(w <= 1e-4, "GPU decode against the CPU forward: %g", w);
    w = compare(&mg, tok, GT, GV);
    printf("check_decode: the GPT decoded on the GPU against the GPU's forward: worst %.3g\n", w);
    ck_assert_msg(w <= DECODE_TOL, "GPU decode against the GPU forward: %g", w);
    dt_model_free(&mc);
    dt_model_free(&mg);
}
END_TEST
#endif

/* A layer without a decode op, and a model that is no language model. */
START_TEST(test_refused)
{
    const struct dt_layer_spec mlp[] = {{.type = "dense", .filters = 8, .activation = DT_ACT_RELU},
                                        {.type = "dense", .filters = 3}};
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "mlp", (struct dt_shape){4, 4, 1}, 3, mlp, 2, &st), DT_OK);
    ck_assert_int_eq(dt_model_can_decode(&m, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "not a language model"), "%s", st.msg);
    dt_model_free(&m);
    const struct dt_layer_spec lm[] = {{.type = "embedding", .filters = 8, .block = 4, .vocab = 5},
                                       {.type = "dropout", .rate = 0.1f}, {.type = "lm_head", .vocab = 5, .tied = 1}};
    ck_assert_int_eq(dt_model_build_specs(&m, "lm", (struct dt_shape){1, 5, 4}, 5, lm, 3, &st), DT_OK);
    ck_assert_int_eq(dt_model_can_decode(&m, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "dropout"), "%s", st.msg);
    dt_model_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gpt_cache_equals_forward);
    tcase_add_test(tc, test_untied_gelu_relu);
    tcase_add_test(tc, test_attention_decode_reference);
    tcase_add_test(tc, test_refused);
#ifdef DT_HAVE_CUDA
    tcase_add_test(tc, test_gpu_decode);
#endif
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
