/* check_gpt.c: the transformer's layers in a model, against finite
 * differences of the loss and against a plain reference.
 *
 * A tiny GPT (embedding, one pre-norm block: layernorm, attention, add,
 * layernorm, linear with GELU, linear, add; final layernorm, LM head) on
 * the CPU backend: the gradient of the token loss with respect to every
 * layer's parameters (the tied table included: the sum of the head's and
 * the embedding's parts) matches central differences; the forward pass
 * matches a plain double-precision GPT written here from the parameter
 * layouts of the nn/ layers; tied and untied heads, a block_size the data does
 * not give, heads not dividing the width and a tied head without an
 * embedding are refused with their messages. The backend ops themselves
 * are checked in check_transformer_ops.c and check_attention.c. */
#include "config.h"

#include "layer_check.h"

enum { V = 11, C = 8, H = 2, T = 5, NS = 2, HID = 16 };

static void gpt_specs(struct dt_layer_spec *sp, int tied, int *n)
{
    const struct dt_layer_spec s[] = {
        {.type = "embedding", .filters = C, .block = T, .vocab = V},
        {.type = "layernorm"},
        {.type = "attention", .heads = H},
        {.type = "add", .from = -3},
        {.type = "layernorm"},
        {.type = "linear", .filters = HID, .activation = DT_ACT_GELU},
        {.type = "linear", .filters = C},
        {.type = "add", .from = -4},
        {.type = "layernorm"},
        {.type = "lm_head", .vocab = V, .tied = tied},
    };
    *n = (int)(sizeof s / sizeof *s);
    memcpy(sp, s, sizeof s);
}

struct gpt_ctx {
    struct dt_model m;
    int32_t tok[NS * (T + 1)];
};

static double gpt_objective(void *ctx, uint64_t *signature)
{
    struct gpt_ctx *x = ctx;
    *signature = 0; /* smooth everywhere: no kinks */
    memcpy(x->m.act[0], x->tok, sizeof x->tok);
    dt_model_forward(&x->m, NS, 1, NULL);
    return dt_model_loss(&x->m, (const uint8_t *)x->tok, NS, 0.0f).loss_sum;
}

static void gpt_build(struct gpt_ctx *x, int tied, uint64_t seed)
{
    struct dt_layer_spec sp[16];
    int n;
    dt_status st = {0};
    gpt_specs(sp, tied, &n);
    memset(x, 0, sizeof *x);
    ck_assert_msg(dt_model_build_specs(&x->m, "gpt", (struct dt_shape){1, T + 1, 4}, V, sp, n, &st) == DT_OK, "%s",
                  st.msg);
    ck_assert(dt_model_is_lm(&x->m) && x->m.tokens);
    ck_assert_int_eq(dt_model_tied_head(&x->m) >= 0, tied);
    dt_model_create(&x->m, be, NS);
    dt_model_init_params(&x->m, seed);
    dt_rng r;
    dt_rng_seed(&r, seed + 1, 0);
    /* larger weights than GPT-2's 0.02, and non-trivial gains and biases, so every term matters */
    for (int i = 0; i < x->m.nlayers; i++) {
        const struct dt_layer *l = &x->m.layers[i];
        if (l->ops == &dt_layernorm_ops) {
            fill_uniform(x->m.params + l->param_offset, (size_t)C, &r, 0.5f, 1.5f);
            fill_uniform(x->m.params + l->param_offset + C, (size_t)C, &r, -0.3f, 0.3f);
        }
        else if (l->nparams) fill_uniform(x->m.params + l->param_offset, l->nparams, &r, -0.5f, 0.5f);
    }
    for (int i = 0; i < NS * (T + 1); i++) x->tok[i] = (int32_t)dt_rng_below(&r, V);
}

static void fd_gpt(int tied)
{
    struct gpt_ctx x;
    gpt_build(&x, tied, tied ? 90 : 91);
    uint64_t sig;
    gpt_objective(&x, &sig);
    dt_model_loss(&x.m, (const uint8_t *)x.tok, NS, 1.0f);
    for (size_t i = 0; i < x.m.nparams; i++) x.m.grads[i] = NAN;
    dt_model_backward(&x.m, NS, NULL);
    float *an = malloc(sizeof(float) * x.m.nparams);
    memcpy(an, x.m.grads, sizeof(float) * x.m.nparams);
    for (size_t i = 0; i < x.m.nparams; i++) ck_assert_msg(isfinite(an[i]), "grad[%zu] not written", i);
    for (int li = 0; li < x.m.nlayers; li++) {
        const struct dt_layer *l = &x.m.layers[li];
        if (!l->nparams) continue;
        size_t idx[64], nidx = 0;
        for (size_t j = 0; j < l->nparams && nidx < 64; j += 1 + l->nparams / 64) idx[nidx++] = l->param_offset + j;
        char label[64];
        snprintf(label, sizeof label, "gpt (%s) %s d/dparams", tied ? "tied" : "untied", l->name);
        fd_assert(label, fd_compare(gpt_objective, &x, x.m.params, an, idx, nidx, 1e-2f), nidx);
    }
    free(an);
    dt_model_free(&x.m);
}

START_TEST(fd_gpt_tied) { fd_gpt(1); }
END_TEST

START_TEST(fd_gpt_untied) { fd_gpt(0); }
END_TEST

/* ---- a plain GPT in double ---------------------------------------------- */

static void ref_layernorm(double *y, const double *x, const float *g, const float *b)
{
    for (int t = 0; t < T; t++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += x[t * C + c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (x[t * C + c] - mu) * (x[t * C + c] - mu);
        var /= C;
        for (int c = 0; c < C; c++) y[t * C + c] = (x[t * C + c] - mu) / sqrt(var + 1e-5) * (double)g[c] + (double)b[c];
    }
}

/* y [T][out] = x [T][in] . w [in][out] + b */
static void ref_linear(double *y, const double *x, const float *w, const float *b, int in, int out)
{
    for (int t = 0; t < T; t++)
        for (int o = 0; o < out; o++) {
            double s = b ? (double)b[o] : 0.0;
            for (int i = 0; i < in; i++) s += x[t * in + i] * (double)w[(size_t)i * out + o];
            y[t * out + o] = s;
        }
}

static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* The logits of sample s, [T][V], from the model's parameters. */
static void ref_forward(const struct dt_model *m, const int32_t *tok, double *logits)
{
    const float *p = m->params;
    const float *wte = p, *wpe = p + V * C;
    double x[T * C], h[T * C], qkv[T * 3 * C], att[T * C], a[T * C], f[T * HID], f2[T * C];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) x[t * C + c] = (double)wte[tok[t] * C + c] + (double)wpe[t * C + c];
    const struct dt_layer *L = m->layers;
    ref_layernorm(h, x, p + L[1].param_offset, p + L[1].param_offset + C);
    const float *at = p + L[2].param_offset;
    ref_linear(qkv, h, at, at + C * 3 * C, C, 3 * C);
    const int D = C / H;
    for (int hd = 0; hd < H; hd++)
        for (int t = 0; t < T; t++) {
            double sc[T], mx = -1e300, sum = 0;
            for (int u = 0; u <= t; u++) {
                double d = 0;
                for (int k = 0; k < D; k++) d += qkv[t * 3 * C + hd * D + k] * qkv[u * 3 * C + C + hd * D + k];
                sc[u] = d / sqrt((double)D);
                if (sc[u] > mx) mx = sc[u];
            }
            for (int u = 0; u <= t; u++) sum += exp(sc[u] - mx);
            for (int k = 0; k < D; k++) {
                double o = 0;
                for (int u = 0; u <= t; u++) o += exp(sc[u] - mx) / sum * qkv[u * 3 * C + 2 * C + hd * D + k];
                att[t * C + hd * D + k] = o;
            }
        }
    const float *wo = at + C * 3 * C + 3 * C;
    ref_linear(a, att, wo, wo + C * C, C, C);
    for (int i = 0; i < T * C; i++) x[i] += a[i];
    ref_layernorm(h, x, p + L[4].param_offset, p + L[4].param_offset + C);
    ref_linear(f, h, p + L[5].param_offset, p + L[5].param_offset + C * HID, C, HID);
    for (int i = 0; i < T * HID; i++) f[i] = ref_gelu(f[i]);
    ref_linear(f2, f, p + L[6].param_offset, p + L[6].param_offset + HID * C, HID, C);
    for (int i = 0; i < T * C; i++) x[i] += f2[i];
    ref_layernorm(h, x, p + L[8].param_offset, p + L[8].param_offset + C);
    const float *w = L[9].nparams ? p + L[9].param_offset : wte; /* [V][C] */
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += h[t * C + c] * (double)w[v * C + c];
            logits[t * V + v] = s;
        }
}

static void reference_gpt(int tied)
{
    struct gpt_ctx x;
    gpt_build(&x, tied, 92);
    memcpy(x.m.act[0], x.tok, sizeof x.tok);
    dt_model_forward(&x.m, NS, 0, NULL);
    const float *got = x.m.act[x.m.nlayers];
    double want[T * V], worst = 0, big = 0, loss = 0;
    for (int s = 0; s < NS; s++) {
        ref_forward(&x.m, x.tok + s * (T + 1), want);
        for (int i = 0; i < T * V; i++) {
            worst = fmax(worst, fabs(want[i] - (double)got[s * T * V + i]));
            big = fmax(big, fabs(want[i]));
        }
        for (int t = 0; t < T; t++) { /* the loss: mean over positions of -log softmax at the target */
            double mx = -1e300, z = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, want[t * V + v]);
            for (int v = 0; v < V; v++) z += exp(want[t * V + v] - mx);
            loss += (log(z) + mx - want[t * V + x.tok[s * (T + 1) + t + 1]]) / T;
        }
    }
    struct dt_loss_result r = dt_model_loss(&x.m, (const uint8_t *)x.tok, NS, 0.0f);
    printf("# reference GPT (%s): logits max abs diff %.2e (of %.2f), loss %.7f vs %.7f\n", tied ? "tied" : "untied",
           worst, big, r.loss_sum, loss);
    ck_assert_msg(worst <= 1e-5 * fmax(1.0, big), "logits differ by %g", worst);
    ck_assert_msg(fabs(r.loss_sum - loss) <= 1e-5 * loss, "loss %.9g vs reference %.9g", r.loss_sum, loss);
    ck_assert(r.correct >= 0.0 && r.correct <= NS);
    dt_model_free(&x.m);
}

START_TEST(reference_tied) { reference_gpt(1); }
END_TEST

START_TEST(reference_untied) { reference_gpt(0); }
END_TEST

/* ---- refusals ------------------------------------------------------------ */

static void refused(struct dt_layer_spec *sp, int n, struct dt_shape in, const char *want)
{
    struct dt_model m;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build_specs(&m, "gpt", in, V, sp, n, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, want), "expected '%s', got '%s'", want, st.msg);
    dt_model_free(&m);
}

START_TEST(refusals)
{
    struct dt_layer_spec sp[16];
    int n;
    gpt_specs(sp, 1, &n);
    refused(sp, n, (struct dt_shape){1, T + 3, 4}, "embedding: block_size = 5 but the data gives windows of 7 tokens");
    refused(sp, n, (struct dt_shape){28, 28, 1}, "embedding: expects windows of tokens");
    gpt_specs(sp, 1, &n);
    sp[2].heads = 3;
    refused(sp, n, (struct dt_shape){1, T + 1, 4}, "attention: heads = 3 does not divide the width 8");
    gpt_specs(sp, 1, &n);
    sp[9].vocab = V + 1; /* a head over another vocabulary than the table's */
    refused(sp, n, (struct dt_shape){1, T + 1, 4}, "cannot share embedding's table");
    gpt_specs(sp, 1, &n);
    struct dt_layer_spec head_only[2] = {{.type = "layernorm"}, {.type = "lm_head", .vocab = V, .tied = 1}};
    refused(head_only, 2, (struct dt_shape){1, T, C}, "tied = 1 shares an embedding's table, and no [embedding]");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("gpt");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fd_gpt_tied);
    tcase_add_test(tc, fd_gpt_untied);
    tcase_add_test(tc, reference_tied);
    tcase_add_test(tc, reference_untied);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
