/* hf.c: the Hugging Face GPT-2 export (see hf.h).
 *
 * The one design decision: nothing here imitates a Python library's saving
 * code. Each file is written from what the reader needs (safetensors: an
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, the raw data), so the checks that matter
 * are tests/interop_hf.sh's: the real library loads the directory without
 * missing or unexpected keys and computes dtrain's logits. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "runtime/h5lock.h"

#define BLOCK_LAYERS 7 /* layernorm, attention, add, layernorm, linear, linear, add */

/* What config.json says, read off the layers. */
struct gpt2 {
    int V, T, C, L, H, inner, tied;
    float eps;
};

/* ---- the model's shape ---- */

static int is(const struct dt_layer *l, const struct dt_layer_ops *ops) { return l->ops == ops; }

/* Block i's layers (from layer b) against GPT-2's; why says what differs. */
static int check_block(const struct dt_model *m, int b, struct gpt2 *g, char *why, size_t n)
{
    static const struct dt_layer_ops *const want[BLOCK_LAYERS] = {
        &dt_layernorm_ops, &dt_attention_ops, &dt_add_ops, &dt_layernorm_ops,
        &dt_linear_ops, &dt_linear_ops, &dt_add_ops};
    const struct dt_layer *l = m->layers + b;
    for (int k = 0; k < BLOCK_LAYERS; k++)
        if (!is(&l[k], want[k])) {
            snprintf(why, n, "layer %d (%s) is %s where a block has %s", b + k, l[k].name, l[k].ops->type,
                     want[k]->type);
            return -1;
        }
    if (b == 1) {
        g->H = l[1].spec.heads;
        g->inner = l[4].out.c;
        g->eps = l[0].spec.epsilon;
    }
    if (l[2].src != b || l[6].src != b + 3) {
        int bad = l[2].src != b ? 2 : 6, src = l[bad].src, exp = bad == 2 ? b : b + 3;
        snprintf(why, n, "%s adds the output of %s, where GPT-2's residual adds that of %s", l[bad].name,
                 src > 0 ? m->layers[src - 1].name : "the input", m->layers[exp - 1].name);
        return -1;
    }
    if (l[2].spec.activation != DT_ACT_NONE || l[6].spec.activation != DT_ACT_NONE ||
        l[4].spec.activation != DT_ACT_GELU || l[5].spec.activation != DT_ACT_NONE) {
        snprintf(why, n, "block at layer %d has other activations than GPT-2's (gelu after its first linear only)", b);
        return -1;
    }
    if (l[1].spec.heads != g->H || l[4].out.c != g->inner) {
        snprintf(why, n, "%s has %d heads and %s %d units, where the first block has %d and %d", l[1].name,
                 l[1].spec.heads, l[4].name, l[4].out.c, g->H, g->inner);
        return -1;
    }
    if (l[0].spec.epsilon != g->eps || l[3].spec.epsilon != g->eps) {
        snprintf(why, n, "its layernorms differ in epsilon (GPT2Config has one layer_norm_epsilon)");
        return -1;
    }
    return 0;
}

static int gpt2_shape(const struct dt_model *m, struct gpt2 *g, char *why, size_t n)
{
    const int nl = m->nlayers;
    memset(g, 0, sizeof *g);
    if (nl < 1 || !is(&m->layers[0], &dt_embedding_ops)) {
        snprintf(why, n, "its first layer is %s, not an embedding", nl ? m->layers[0].ops->type : "missing");
        return -1;
    }
    g->V = m->layers[0].spec.vocab;
    g->T = m->layers[0].out.w;
    g->C = m->layers[0].out.c;
    g->L = (nl - 3) / BLOCK_LAYERS;
    for (int i = 0; i < g->L; i++)
        if (check_block(m, 1 + BLOCK_LAYERS * i, g, why, n) != 0) return -1;
    int at = 1 + BLOCK_LAYERS * g->L;
    if (g->L < 1 || nl != at + 2 || !is(&m->layers[at], &dt_layernorm_ops) || !is(&m->layers[at + 1], &dt_lm_head_ops)) {
        snprintf(why, n, "after %d whole blocks come %d layers (%s ...), where GPT-2 ends with a layernorm and an "
                 "lm_head", g->L, nl - at, at < nl ? m->layers[at].ops->type : "none");
        return -1;
    }
    if (g->L > 0 && m->layers[at].spec.epsilon != g->eps) {
        snprintf(why, n, "its layernorms differ in epsilon (GPT2Config has one layer_norm_epsilon)");
        return -1;
    }
    const struct dt_layer *head = &m->layers[at + 1];
    g->tied = head->nparams == 0;
    if (head->out.c != g->V || (g->tied && head->tie != 0)) {
        snprintf(why, n, "%s gives %d logits for a vocabulary of %d%s", head->name, head->out.c, g->V,
                 g->tied ? ", or its table is not the embedding's" : "");
        return -1;
    }
    return 0;
}

/* ---- the tokenizer in a token file ---- */

struct vocab {
    uint32_t n;      /* merges: the vocabulary is 256 + n tokens */
    int32_t *merges; /* [n][2] */
};

/* The scalar string attribute name into buf; 0, or -1 if there is none. */
static int string_attr(hid_t f, const char *name, char *buf, size_t cap)
{
    if (H5Aexists(f, name) <= 0) return -1;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT), t = a < 0 ? -1 : H5Aget_type(a), mt = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
        char *s = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &s) >= 0 && s) {
            rc = snprintf(buf, cap, "%s", s) < (int)cap ? 0 : -1;
            H5free_memory(s);
        }
    }
    else if (t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tget_size(t) + 1 < cap) {
        memset(buf, 0, cap);
        H5Tset_size(mt, H5Tget_size(t) + 1); /* room for the terminator of a null-padded string */
        rc = H5Aread(a, mt, buf) < 0 ? -1 : 0;
    }
    H5Tclose(mt);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return rc;
}

static int read_merges(const char *path, hid_t f, int vocab, struct vocab *v, dt_status *st)
{
    const char *name = "/tokenizer/merges";
    char kind[32] = "";
    if (string_attr(f, "tokenizer", kind, sizeof kind) == 0 && strcmp(kind, "byte") && strcmp(kind, "bpe"))
        return dt_fail(st, DT_EINPUT, "%s: tokenizer = '%s'; --export-hf knows byte and bpe (dtrain-prep --text)",
                       path, kind);
    if (!strcmp(kind, "byte") && vocab != 256)
        return dt_fail(st, DT_EINPUT, "%s: tokenizer = byte, but the vocabulary (num_classes) is %d tokens, not 256",
                       path, vocab);
    if (H5Lexists(f, "tokenizer", H5P_DEFAULT) <= 0 || H5Lexists(f, name, H5P_DEFAULT) <= 0) {
        if (vocab == 256) return DT_OK; /* the byte tokenizer may leave the merges out */
        return dt_fail(st, DT_EINPUT, "%s: no %s, so the tokenizer of its %d tokens is unknown (a file from "
                       "dtrain-prep --text has it)", path, name, vocab);
    }
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d), t = d < 0 ? -1 : H5Dget_type(d);
    hsize_t dims[2] = {0, 0};
    int rc = DT_OK;
    if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (t < 0 || H5Tget_class(t) != H5T_INTEGER || dims[1] != 2)
        rc = dt_fail(st, DT_EINPUT, "%s: %s is not an integer [N][2] table of merges", path, name);
    else if (dims[0] != (hsize_t)vocab - 256 || vocab < 256)
        rc = dt_fail(st, DT_EINPUT, "%s: %s holds %llu merges, but a vocabulary of %d tokens (num_classes) is 256 "
                     "bytes and %d merges", path, name, (unsigned long long)dims[0], vocab, vocab - 256);
    else {
        v->n = (uint32_t)dims[0];
        v->merges = dt_xmalloc(sizeof(int32_t) * 2 * (v->n + 1));
        if (v->n && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->merges) < 0)
            rc = dt_fail(st, DT_EINPUT, "%s: cannot read %s (a damaged file?)", path, name);
        for (uint32_t i = 0; rc == DT_OK && i < v->n; i++)
            for (int k = 0; k < 2 && rc == DT_OK; k++)
                if (v->merges[2 * i + k] < 0 || (uint32_t)v->merges[2 * i + k] >= 256 + i)
                    rc = dt_fail(st, DT_EINPUT, "%s: %s[%u] = (%d, %d) names a token not made before it (merge i "
                                 "makes token 256 + i)", path, name, i, v->merges[2 * i], v->merges[2 * i + 1]);
    }
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    return rc;
}

/* path's tokenizer into v (free v->merges after, even on failure: NULL or allocated). */
static int read_vocab(const char *path, int vocab, struct vocab *v, dt_status *st)
{
    memset(v, 0, sizeof *v);
    dt_h5_lock(); /* runtime/h5lock.h */
    H5E_auto2_t fn;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* our message, not HDF5's stack */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int rc = f < 0 ? dt_fail(st, DT_EINPUT, "%s: HDF5 cannot open it to read its tokenizer", path)
                   : read_merges(path, f, vocab, v, st);
    if (f >= 0) H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, fn, data);
    dt_h5_unlock();
    return rc;
}

/* ---- the output directory ---- */

static const char *const out_files[] = {"config.json", "model.safetensors", "vocab.json", "merges.txt",
                                        "tokenizer_config.json"};
#define NOUT (int)(sizeof out_files / sizeof *out_files)

/* dir without its trailing slashes ("/" stays), into buf. */
static int trim(const char *dir, char *buf, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n == 0 || n >= cap) return -1;
    memcpy(buf, dir, n);
    buf[n] = 0;
    return 0;
}

static int is_empty_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp) return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(dp);
    return empty;
}

/* DIR is not there, or an empty directory, and its parent takes a new entry. */
static int check_dir(const char *dir, dt_status *st)
{
    char d[4096], parent[4096];
    struct stat sb;
    if (trim(dir, d, sizeof d) != 0) return dt_fail(st, DT_EUSAGE, "--export-hf '%s': expected a directory name", dir);
    if (lstat(d, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return dt_fail(st, DT_EUSAGE, "--export-hf %s: exists and is not a directory; the export makes a "
                           "directory (name another)", dir);
        if (!is_empty_dir(d))
            return dt_fail(st, DT_EUSAGE, "--export-hf %s: the directory exists and is not empty; the export "
                           "writes a new one and replaces nothing (remove it, or name another)", dir);
    }
    else if (errno != ENOENT)
        return dt_fail(st, DT_EUSAGE, "--export-hf %s: %s", dir, strerror(errno));
    const char *slash = strrchr(d, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else snprintf(parent, sizeof parent, "%.*s", slash == d ? 1 : (int)(slash - d), d);
    if (access(parent, W_OK | X_OK) != 0)
        return dt_fail(st, DT_EUSAGE, "--export-hf %s: cannot make it in %s: %s", dir, parent, strerror(errno));
    return DT_OK;
}

int dt_hf_check(const char *dir, const struct dt_model *m, int tokens, char *const *paths, int nfiles, int files,
                dt_status *st)
{
    struct gpt2 g;
    char why[512];
    st->code = DT_OK;
    if (gpt2_shape(m, &g, why, sizeof why) != 0)
        return dt_fail(st, DT_EUSAGE, "--export-hf %s: model %s is not a GPT-2 language model: %s (GPT2LMHeadModel "
                       "is an embedding, blocks of layernorm, attention, add, layernorm, linear with gelu, linear, "
                       "add, then a layernorm and an lm_head: inputs/gen-gpt.py)", dir, m->name, why);
    if (!tokens || nfiles < 1)
        return dt_fail(st, DT_EUSAGE, "--export-hf %s: the data are not a token dataset (dtrain-prep --text), so "
                       "there is no tokenizer to export", dir);
    if (!files) return DT_OK;
    if (check_dir(dir, st) != DT_OK) return st->code;
    struct vocab first, v;
    if (read_vocab(paths[0], g.V, &first, st) != DT_OK) {
        free(first.merges);
        return st->code;
    }
    for (int i = 1; i < nfiles && st->code == DT_OK; i++) {
        if (read_vocab(paths[i], g.V, &v, st) == DT_OK && v.n &&
            memcmp(v.merges, first.merges, sizeof(int32_t) * 2 * v.n) != 0)
            dt_fail(st, DT_EINPUT, "%s: its /tokenizer/merges differ from %s's; --export-hf writes one tokenizer "
                    "(prepare the files with one dtrain-prep --text)", paths[i], paths[0]);
        free(v.merges);
    }
    free(first.merges);
    return st->code;
}

/* ---- the files ---- */

/* A file in the temporary directory, or NULL with errno. */
static FILE *create_in(const char *tmp, const char *name)
{
    char p[4400]; /* tmp (4200) and a name */
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (fd >= 0 && !f) close(fd);
    return f;
}

/* Closes f; 0, or -1 with errno (EIO when only the stream knows). */
static int finish_file(FILE *f)
{
    int bad = ferror(f), e = bad ? EIO : 0;
    if (fflush(f) != 0 && !e) e = errno;
    if (fsync(fileno(f)) != 0 && !e) e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    errno = e;
    return e ? -1 : 0;
}

/* The shortest decimal that reads back as x (JSON numbers are decimal). */
static void put_float(FILE *f, float x)
{
    char buf[32];
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    fputs(buf, f);
}

static void write_config(FILE *f, const struct gpt2 *g)
{
    fprintf(f, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n");
    fprintf(f, "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n", g->V, g->T,
            g->T, g->C);
    fprintf(f, "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n", g->L, g->H, g->inner);
    fprintf(f, "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": ");
    put_float(f, g->eps);
    fprintf(f, ",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n");
    fprintf(f, "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n");
    fprintf(f, "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n");
    fprintf(f, "  \"tie_word_embeddings\": %s,\n", g->tied ? "true" : "false");
    /* no end-of-text token in the vocabulary (hf.h) */
    fprintf(f, "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n  \"pad_token_id\": null,\n");
    fprintf(f, "  \"torch_dtype\": \"float32\",\n  \"use_cache\": true\n}\n");
}

struct tensor {
    char name[64];
    int nd;
    size_t dims[2];
    const float *data;
};

static void tensor(struct tensor *t, const char *name, int block, size_t d0, size_t d1, const float *data)
{
    if (block >= 0) snprintf(t->name, sizeof t->name, "transformer.h.%d.%s", block, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    t->nd = d1 ? 2 : 1;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->data = data;
}

static size_t tensor_floats(const struct tensor *t) { return t->dims[0] * (t->nd == 2 ? t->dims[1] : 1); }

/* GPT2LMHeadModel's state dict, as slices of the parameter block; returns the count. */
static int tensors(const struct dt_model *m, const struct gpt2 *g, const float *params, struct tensor *t)
{
    const size_t V = g->V, C = g->C, T = g->T, F = g->inner;
    const float *p = params + m->layers[0].param_offset;
    int n = 0;
    tensor(&t[n++], "transformer.wte.weight", -1, V, C, p);
    tensor(&t[n++], "transformer.wpe.weight", -1, T, C, p + V * C);
    for (int i = 0; i < g->L; i++) {
        const struct dt_layer *l = m->layers + 1 + BLOCK_LAYERS * i;
        const float *ln1 = params + l[0].param_offset, *at = params + l[1].param_offset;
        const float *ln2 = params + l[3].param_offset, *fc = params + l[4].param_offset;
        const float *pj = params + l[5].param_offset;
        tensor(&t[n++], "ln_1.weight", i, C, 0, ln1);
        tensor(&t[n++], "ln_1.bias", i, C, 0, ln1 + C);
        tensor(&t[n++], "attn.c_attn.weight", i, C, 3 * C, at);
        tensor(&t[n++], "attn.c_attn.bias", i, 3 * C, 0, at + 3 * C * C);
        tensor(&t[n++], "attn.c_proj.weight", i, C, C, at + 3 * C * C + 3 * C);
        tensor(&t[n++], "attn.c_proj.bias", i, C, 0, at + 4 * C * C + 3 * C);
        tensor(&t[n++], "ln_2.weight", i, C, 0, ln2);
        tensor(&t[n++], "ln_2.bias", i, C, 0, ln2 + C);
        tensor(&t[n++], "mlp.c_fc.weight", i, C, F, fc);
        tensor(&t[n++], "mlp.c_fc.bias", i, F, 0, fc + C * F);
        tensor(&t[n++], "mlp.c_proj.weight", i, F, C, pj);
        tensor(&t[n++], "mlp.c_proj.bias", i, C, 0, pj + F * C);
    }
    const struct dt_layer *lnf = &m->layers[m->nlayers - 2], *head = &m->layers[m->nlayers - 1];
    tensor(&t[n++], "transformer.ln_f.weight", -1, C, 0, params + lnf->param_offset);
    tensor(&t[n++], "transformer.ln_f.bias", -1, C, 0, params + lnf->param_offset + C);
    if (!g->tied) tensor(&t[n++], "lm_head.weight", -1, V, C, params + head->param_offset);
    return n;
}

static int host_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void put_f32le(FILE *f, const float *x, size_t n)
{
    if (host_little_endian()) {
        fwrite(x, sizeof(float), n, f);
        return;
    }
    unsigned char buf[4096];
    for (size_t i = 0; i < n; i++) {
        unsigned char *w = buf + 4 * (i % 1024);
        uint32_t u;
        memcpy(&u, &x[i], 4);
        for (int k = 0; k < 4; k++) w[k] = (unsigned char)(u >> (8 * k));
        if (i % 1024 == 1023 || i == n - 1) fwrite(buf, 4, i % 1024 + 1, f);
    }
}

/* The header (padded with spaces so that the data start 8-byte aligned), then the data. */
static int write_safetensors(FILE *f, const struct tensor *t, int n)
{
    char *hdr = NULL;
    size_t len = 0, off = 0;
    FILE *h = open_memstream(&hdr, &len);
    if (!h) return -1;
    fprintf(h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t bytes = sizeof(float) * tensor_floats(&t[i]);
        fprintf(h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu", t[i].name, t[i].dims[0]);
        if (t[i].nd == 2) fprintf(h, ",%zu", t[i].dims[1]);
        fprintf(h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    fputc('}', h);
    while ((ftell(h) + 8) % 8) fputc(' ', h);
    if (fclose(h) != 0) {
        free(hdr);
        return -1;
    }
    unsigned char n8[8];
    for (int k = 0; k < 8; k++) n8[k] = (unsigned char)((uint64_t)len >> (8 * k));
    fwrite(n8, 1, 8, f);
    fwrite(hdr, 1, len, f);
    free(hdr);
    for (int i = 0; i < n; i++) put_f32le(f, t[i].data, tensor_floats(&t[i]));
    return 0;
}

/* Each token's bytes: pool[off[t] .. off[t + 1]). */
struct strings {
    uint32_t n;          /* tokens */
    uint64_t *off;       /* [n + 1] */
    unsigned char *pool; /* [off[n]] */
    uint8_t *dup;        /* [n]: the same bytes as a smaller token */
    uint32_t ndup, first_dup, first_of;
};

static int token_strings(const struct vocab *v, struct strings *s)
{
    s->n = 256 + v->n;
    s->off = dt_xmalloc(sizeof(uint64_t) * (s->n + 1));
    s->off[0] = 0;
    for (uint32_t t = 0; t < s->n; t++) {
        uint64_t len = t < 256 ? 1
                               : (s->off[v->merges[2 * (t - 256)] + 1] - s->off[v->merges[2 * (t - 256)]]) +
                                     (s->off[v->merges[2 * (t - 256) + 1] + 1] - s->off[v->merges[2 * (t - 256) + 1]]);
        s->off[t + 1] = s->off[t] + len;
        if (s->off[t + 1] > ((uint64_t)1 << 32)) return -1; /* only a pathological merge table */
    }
    s->pool = dt_xmalloc(s->off[s->n] + 1);
    for (uint32_t t = 0; t < s->n; t++) {
        if (t < 256) {
            s->pool[t] = (unsigned char)t;
            continue;
        }
        const int32_t a = v->merges[2 * (t - 256)], b = v->merges[2 * (t - 256) + 1];
        const uint64_t la = s->off[a + 1] - s->off[a];
        memcpy(s->pool + s->off[t], s->pool + s->off[a], la);
        memcpy(s->pool + s->off[t] + la, s->pool + s->off[b], s->off[b + 1] - s->off[b]);
    }
    return 0;
}

/* Marks tokens whose bytes an earlier token has (a hash set of byte strings). */
static void find_duplicates(struct strings *s)
{
    size_t cap = 1;
    while (cap < 2 * (size_t)s->n) cap <<= 1;
    uint32_t *slot = dt_xcalloc(cap, sizeof(uint32_t)); /* token + 1, 0 empty */
    s->dup = dt_xcalloc(s->n, 1);
    s->ndup = 0;
    for (uint32_t t = 0; t < s->n; t++) {
        const unsigned char *p = s->pool + s->off[t];
        const size_t len = s->off[t + 1] - s->off[t];
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (size_t k = 0; k < len; k++) h = (h ^ p[k]) * 1099511628211ull;
        for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
            if (!slot[i]) {
                slot[i] = t + 1;
                break;
            }
            const uint32_t o = slot[i] - 1;
            if (s->off[o + 1] - s->off[o] == len && !memcmp(s->pool + s->off[o], p, len)) {
                if (!s->ndup++) s->first_dup = t, s->first_of = o;
                s->dup[t] = 1;
                break;
            }
        }
    }
    free(slot);
}

/* Token t as GPT-2's byte-level string: each byte a code point of
 * bytes_to_unicode (the printable ones themselves, the others 256 + k in
 * byte order), in UTF-8; json escapes '"' and '\'. */
static void put_token(FILE *f, const struct strings *s, uint32_t t, int json)
{
    static unsigned cp[256];
    if (!cp['!']) {
        unsigned k = 0;
        for (int b = 0; b < 256; b++)
            cp[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? (unsigned)b : 256 + k++;
    }
    for (uint64_t i = s->off[t]; i < s->off[t + 1]; i++) {
        const unsigned c = cp[s->pool[i]];
        if (json && (c == '"' || c == '\\')) fputc('\\', f);
        if (c < 0x80) fputc((int)c, f);
        else {
            fputc((int)(0xC0 | (c >> 6)), f);
            fputc((int)(0x80 | (c & 0x3F)), f);
        }
    }
}

static void write_vocab_json(FILE *f, const struct strings *s)
{
    fputs("{", f);
    for (uint32_t t = 0, first = 1; t < s->n; t++) {
        if (s->dup[t]) continue;
        fputs(first ? "\n\"" : ",\n\"", f);
        first = 0;
        put_token(f, s, t, 1);
        fprintf(f, "\": %u", t);
    }
    fputs("\n}\n", f);
}

static void write_merges_txt(FILE *f, const struct vocab *v, const struct strings *s)
{
    fputs("#version: 0.2\n", f);
    for (uint32_t i = 0; i < v->n; i++) {
        put_token(f, s, (uint32_t)v->merges[2 * i], 0);
        fputc(' ', f);
        put_token(f, s, (uint32_t)v->merges[2 * i + 1], 0);
        fputc('\n', f);
    }
}

static void write_tokenizer_config(FILE *f, const struct gpt2 *g)
{
    fprintf(f, "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n", g->T);
    fprintf(f, "  \"add_prefix_space\": false,\n  \"add_bos_token\": false,\n  \"errors\": \"replace\",\n");
    fprintf(f, "  \"bos_token\": null,\n  \"eos_token\": null,\n  \"unk_token\": null,\n  \"pad_token\": null,\n");
    fprintf(f, "  \"clean_up_tokenization_spaces\": false\n}\n");
}

/* Everything DIR gets, into tmp; 0, or -1 with errno and *what the file. */
static int write_files(const char *tmp, const struct dt_model *m, const struct gpt2 *g, const float *params,
                       const struct vocab *v, const struct strings *s, const char **what)
{
    for (int k = 0; k < NOUT; k++) {
        *what = out_files[k];
        FILE *f = create_in(tmp, out_files[k]);
        if (!f) return -1;
        int rc = 0;
        if (k == 0) write_config(f, g);
        else if (k == 1) {
            struct tensor *t = dt_xmalloc(sizeof *t * (size_t)(5 + 12 * g->L));
            rc = write_safetensors(f, t, tensors(m, g, params, t));
            free(t);
        }
        else if (k == 2) write_vocab_json(f, s);
        else if (k == 3) write_merges_txt(f, v, s);
        else write_tokenizer_config(f, g);
        int e = errno;
        if (finish_file(f) != 0 || rc != 0) {
            if (rc != 0) errno = e ? e : ENOMEM;
            return -1;
        }
    }
    return 0;
}

static void remove_tmp(const char *tmp)
{
    char p[4400]; /* tmp (4200) and a name */
    for (int k = 0; k < NOUT; k++) {
        snprintf(p, sizeof p, "%s/%s", tmp, out_files[k]);
        unlink(p);
    }
    rmdir(tmp);
}

static int export_into(const char *dir, const char *d, const struct dt_model *m, const struct gpt2 *g,
                       const float *params, const struct vocab *v, dt_status *st)
{
    struct strings s = {0};
    char tmp[4200];
    const char *what = "";
    int made = 0;
    for (int k = 0; k < 100 && !made; k++) { /* mkdir, not mkdtemp: the umask decides the mode */
        snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%d", d, (long)getpid(), k);
        if (mkdir(tmp, 0777) == 0) made = 1;
        else if (errno != EEXIST) break;
    }
    if (!made) return dt_fail(st, DT_ERUNTIME, "--export-hf %s: cannot make %s: %s", dir, tmp, strerror(errno));
    if (token_strings(v, &s) != 0) dt_fail(st, DT_EINPUT, "--export-hf %s: the merges make tokens too long", dir);
    else {
        find_duplicates(&s);
        if (write_files(tmp, m, g, params, v, &s, &what) != 0)
            dt_fail(st, DT_ERUNTIME, "--export-hf %s: cannot write %s/%s: %s", dir, tmp, what, strerror(errno));
        else if (rename(tmp, d) != 0)
            dt_fail(st, DT_ERUNTIME, "--export-hf %s: cannot rename %s to it: %s", dir, tmp,
                    errno == ENOTEMPTY || errno == EEXIST ? "it exists now, and is not empty" : strerror(errno));
    }
    if (st->code != DT_OK) remove_tmp(tmp);
    else if (s.ndup)
        fprintf(stderr, "dtrain: warning: --export-hf %s: %u token%s decode%s to the bytes of an earlier one (the "
                "first: %u, as %u); vocab.json names the earlier, so Hugging Face's tokenizer never gives the "
                "later\n", dir, s.ndup, s.ndup == 1 ? "" : "s", s.ndup == 1 ? "s" : "", s.first_dup, s.first_of);
    free(s.off);
    free(s.pool);
    free(s.dup);
    return st->code;
}

int dt_hf_export(const char *dir, const struct dt_model *m, const float *params, const char *data_path,
                 dt_status *st)
{
    struct gpt2 g;
    struct vocab v;
    char why[512], d[4096];
    st->code = DT_OK;
    if (gpt2_shape(m, &g, why, sizeof why) != 0) /* dt_hf_check said so before training */
        return dt_fail(st, DT_EUSAGE, "--export-hf %s: model %s is not a GPT-2 language model: %s", dir, m->name, why);
    if (trim(dir, d, sizeof d) != 0) return dt_fail(st, DT_EUSAGE, "--export-hf '%s': expected a directory name", dir);
    if (read_vocab(data_path, g.V, &v, st) == DT_OK) export_into(dir, d, m, &g, params, &v, st);
    free(v.merges);
    return st->code;
}
