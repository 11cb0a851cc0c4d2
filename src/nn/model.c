/* model.c: building, initialising and running a model (see model.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/half.h"
#include "runtime/status.h"
#include "metrics/tl_span.h"
#include "nn/model.h"
#include "nn/model_file.h"

static const struct {
    const char *type;
    const struct dt_layer_ops *ops;
    const char *keras; /* Keras's base name, for layer names */
} layer_types[] = {
    {"conv2d", &dt_conv2d_ops, "conv2d"},
    {"maxpool", &dt_maxpool_ops, "max_pooling2d"},
    {"dense", &dt_dense_ops, "dense"},
    {"relu", &dt_relu_ops, "re_lu"},
    {"dropout", &dt_dropout_ops, "dropout"},
    {"avgpool", &dt_avgpool_ops, "average_pooling2d"},
    {"global_avgpool", &dt_global_avgpool_ops, "global_average_pooling2d"},
    {"batchnorm", &dt_batchnorm_ops, "batch_normalization"},
    {"add", &dt_add_ops, "add"},
    {"route", &dt_route_ops, "route"},
    {"flatten", &dt_flatten_ops, "flatten"},
    {"reshape", &dt_reshape_ops, "reshape"},
    {"embedding", &dt_embedding_ops, "embedding"},
    {"layernorm", &dt_layernorm_ops, "layer_normalization"},
    {"attention", &dt_attention_ops, "attention"},
    {"linear", &dt_linear_ops, "linear"},
    {"gelu", &dt_gelu_ops, "gelu"},
    {"lm_head", &dt_lm_head_ops, "lm_head"},
};
#define NTYPES ((int)(sizeof layer_types / sizeof *layer_types))

/* Fold each add into the batchnorm before it (layer.h's fold_add): one pass
 * instead of four over a residual block's output. The batchnorm must have
 * no ReLU of its own, and its output must feed nothing but the add, since
 * it is never written on its own. A route's output is the tensor it routes
 * (its forward copies nothing). DTRAIN_NO_FUSION=1 keeps every layer's own
 * pass and buffer: the reference the fused path is tested against. */
static int fusion_off(void)
{
    const char *off = getenv("DTRAIN_NO_FUSION");
    return off && *off && strcmp(off, "0");
}

static void plan_folds(struct dt_model *m)
{
    m->act_alias = dt_xcalloc((size_t)m->nlayers + 1, sizeof *m->act_alias);
    m->dact_alias = dt_xcalloc((size_t)m->nlayers + 1, sizeof *m->dact_alias);
    for (int i = 0; i <= m->nlayers; i++) m->act_alias[i] = m->dact_alias[i] = i;
    if (fusion_off()) return;
    for (int i = 0; i + 1 < m->nlayers; i++) {
        struct dt_layer *bn = &m->layers[i], *add = &m->layers[i + 1];
        if (bn->ops != &dt_batchnorm_ops || bn->spec.activation != DT_ACT_NONE || add->ops != &dt_add_ops ||
            dt_model_read_as_src(m, i + 1))
            continue;
        bn->fold_add = 1;
        bn->add_src = add->src;
        bn->add_relu = add->spec.activation == DT_ACT_RELU;
        add->folded = 1;
        m->act_alias[i + 1] = m->dact_alias[i + 1] = i + 2;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].ops == &dt_route_ops) m->act_alias[i + 1] = m->act_alias[m->layers[i].src];
}

/* A tied lm_head reads the embedding's table: each names the other (layer.h's tie). */
static int tie_heads(struct dt_model *m, dt_status *st)
{
    int emb = -1;
    for (int i = 0; i < m->nlayers; i++) {
        struct dt_layer *l = &m->layers[i];
        if (l->ops == &dt_embedding_ops && emb < 0) emb = i;
        if (l->ops != &dt_lm_head_ops || !l->spec.tied) continue;
        if (emb < 0)
            return dt_fail(st, DT_EUSAGE, "model %s: %s: tied = 1 shares an embedding's table, and no [embedding] "
                           "comes before it (or set tied = 0)", m->name, l->name);
        struct dt_layer *e = &m->layers[emb];
        if (e->tie >= 0)
            return dt_fail(st, DT_EUSAGE, "model %s: %s and %s both tie %s's table (one head can)", m->name,
                           m->layers[e->tie].name, l->name, e->name);
        if (e->out.c != l->in.c || e->spec.vocab != l->spec.vocab)
            return dt_fail(st, DT_EUSAGE, "model %s: %s (width %d, vocab %d) cannot share %s's table (width %d, "
                           "vocab %d); set tied = 0", m->name, l->name, l->in.c, l->spec.vocab, e->name, e->out.c,
                           e->spec.vocab);
        l->tie = emb;
        e->tie = i;
    }
    return DT_OK;
}

int dt_model_is_lm(const struct dt_model *m)
{
    return m->nlayers > 1 && m->layers[0].ops == &dt_embedding_ops && m->layers[m->nlayers - 1].ops == &dt_lm_head_ops;
}

int dt_model_tied_head(const struct dt_model *m)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].tie >= 0 && !m->layers[i].nparams) return i;
    return -1;
}

void dt_model_load_input(const struct dt_model *m, dt_act *dst, const uint8_t *rows, size_t bytes)
{
    if (m->tokens) m->be->copy(dst, rows, bytes); /* int32 token ids, read by the embedding as they are */
    else m->be->images_to_float(dst, rows, bytes);
}

int dt_model_build_specs(struct dt_model *m, const char *name, struct dt_shape input, int classes,
                         const struct dt_layer_spec *specs, int nspecs, dt_status *st)
{
    int used[NTYPES] = {0};
    const char *base = strrchr(name, '/');
    if (base) name = base + 1; /* a model file is named by its file name */
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->input = input;
    m->classes = classes;
    m->layers = dt_xcalloc((size_t)nspecs, sizeof *m->layers);
    m->nlayers = nspecs;
    struct dt_shape shape = input;
    for (int i = 0; i < nspecs; i++) {
        struct dt_layer *l = &m->layers[i];
        int t = 0;
        while (t < NTYPES && strcmp(layer_types[t].type, specs[i].type) != 0) t++;
        if (t == NTYPES) return dt_fail(st, DT_EUSAGE, "model %s: unknown layer type '%s'", name, specs[i].type);
        l->ops = layer_types[t].ops;
        l->spec = specs[i];
        if (used[t]++) snprintf(l->name, sizeof l->name, "%s_%d", layer_types[t].keras, used[t] - 1);
        else snprintf(l->name, sizeof l->name, "%s", layer_types[t].keras);
        l->in = shape;
        l->param_offset = m->nparams;
        l->buffer_offset = m->nbuffers;
        l->src = -1;
        l->tie = -1;
        if (l->ops == &dt_add_ops || l->ops == &dt_route_ops) {
            /* from = -k: the output of the layer k places back, act[i + 1 - k]. */
            int src = i + 1 + specs[i].from;
            if (specs[i].from > -1 || src < 0)
                return dt_fail(st, DT_EUSAGE, "model %s: %s: from = %d: expected -1 (the previous layer) to "
                               "-%d (the model's input)", name, l->name, specs[i].from, i + 1);
            struct dt_shape other = src == 0 ? input : m->layers[src - 1].out;
            l->src = src;
            if (l->ops == &dt_route_ops) l->out = other;
            else if (other.h != shape.h || other.w != shape.w || other.c != shape.c)
                return dt_fail(st, DT_EUSAGE, "model %s: %s: adds %s's %dx%dx%d output to a %dx%dx%d input", name,
                               l->name, src == 0 ? "the model input" : m->layers[src - 1].name, other.h, other.w,
                               other.c, shape.h, shape.w, shape.c);
        }
        if (l->ops->setup(l, &specs[i], st) != DT_OK) return st->code;
        l->full = l->out;
        m->nparams += l->nparams;
        m->nbuffers += l->nbuffers;
        shape = l->out;
    }
    /* A max pool right after a fused ReLU applies the ReLU's backward on its
     * own (4x smaller) output: max(relu(x)) > 0 exactly where the chosen
     * input passed the ReLU. */
    for (int i = 0; i + 1 < nspecs; i++) {
        int branched = 0; /* an add or route also reads this output: its gradient joins before the ReLU's */
        for (int k = 0; k < nspecs; k++) branched |= m->layers[k].src == i + 1;
        if (m->layers[i].spec.activation == DT_ACT_RELU && m->layers[i + 1].ops == &dt_maxpool_ops && !branched) {
            m->layers[i].relu_bwd_by_next = 1;
            m->layers[i + 1].relu_bwd_of_prev = 1;
        }
    }
    dt_model_plan_crops(m);
    plan_folds(m);
    if (tie_heads(m, st) != DT_OK) return st->code;
    m->tokens = nspecs > 0 && m->layers[0].ops == &dt_embedding_ops;
    if (dt_model_is_lm(m)) {
        if (shape.c != classes)
            return dt_fail(st, DT_EUSAGE, "model %s: %s gives %d logits a position, the data's vocabulary has %d "
                           "tokens", name, m->layers[nspecs - 1].name, shape.c, classes);
        return DT_OK;
    }
    if (m->tokens)
        return dt_fail(st, DT_EUSAGE, "model %s: a model on token windows ends with [lm_head] (found %s)", name,
                       m->layers[nspecs - 1].ops->type);
    if (dt_shape_size(shape) != (size_t)classes)
        return dt_fail(st, DT_EUSAGE, "model %s: last layer gives %zu outputs, the data has %d classes",
                       name, dt_shape_size(shape), classes);
    return DT_OK;
}

int dt_model_specs(const char *name, int classes, float dropout, struct dt_layer_spec **specs, int *n,
                   dt_status *st)
{
    const struct dt_layer_spec cnn[] = {
        {.type = "conv2d", .filters = 32, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "conv2d", .filters = 64, .kernel = 3, .activation = DT_ACT_RELU},
        {.type = "maxpool", .kernel = 2},
        {.type = "dense", .filters = 128, .activation = DT_ACT_RELU},
        {.type = "dropout", .rate = dropout},
        {.type = "dense", .filters = classes},
    };
    const struct dt_layer_spec mlp[] = {
        {.type = "dense", .filters = 128, .activation = DT_ACT_RELU},
        {.type = "dense", .filters = classes},
    };
    *specs = dt_xcalloc(DT_MAX_LAYERS, sizeof **specs); /* the caller's: two models may be built at once */
    *n = 0;
    if (dt_model_is_file(name)) return dt_model_file_parse(name, classes, *specs, n, st);
    if (strcmp(name, "cnn") && strcmp(name, "mlp"))
        return dt_fail(st, DT_EUSAGE, "--model: expected cnn, mlp or a model file (.cfg), found '%s'", name);
    const struct dt_layer_spec *builtin = strcmp(name, "cnn") == 0 ? cnn : mlp;
    *n = builtin == cnn ? (int)(sizeof cnn / sizeof *cnn) : (int)(sizeof mlp / sizeof *mlp);
    memcpy(*specs, builtin, sizeof **specs * (size_t)*n);
    return DT_OK;
}

int dt_model_build(struct dt_model *m, const char *name, struct dt_shape input, int classes,
                   float dropout, dt_status *st)
{
    struct dt_layer_spec *specs;
    int n;
    memset(m, 0, sizeof *m); /* freeable whatever fails */
    int rc = dt_model_specs(name, classes, dropout, &specs, &n, st);
    if (rc == DT_OK) rc = dt_model_build_specs(m, name, input, classes, specs, n, st);
    free(specs);
    return rc;
}

int dt_model_check_backend(const struct dt_model *m, const struct dt_backend *be, dt_status *st)
{
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (l->ops->supported && !l->ops->supported(be))
            return dt_fail(st, DT_EUSAGE, "model %s: layer %s (%s) is not implemented on the %s backend yet; run "
                           "it with --device cpu", m->name, l->name, l->ops->type, be->name);
    }
    return DT_OK;
}

int dt_model_check_capture(const struct dt_model *m, const struct dt_backend *be, const char *flag, dt_status *st)
{
    if (!be->capture_begin)
        return dt_fail(st, DT_EUSAGE, "%s: the %s backend cannot record a step", flag, be->name);
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (l->ops->host_roundtrip)
            return dt_fail(st, DT_EUSAGE, "%s: model %s: layer %s (%s) cannot be recorded into a graph: %s; run "
                           "this model without %s", flag, m->name, l->name, l->ops->type, l->ops->host_roundtrip, flag);
    }
    return DT_OK;
}

int dt_model_is_branched(const struct dt_model *m)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].src >= 0) return 1;
    return 0;
}

int dt_model_is_file(const char *name)
{
    size_t n = strlen(name);
    return strchr(name, '/') != NULL || (n > 4 && !strcmp(name + n - 4, ".cfg"));
}

int dt_model_pieces(const struct dt_model *m, int lo, int hi, int *start)
{
    int n = 0;
    start[n++] = lo;
    for (int c = lo + 1; c < hi; c++)
        if (dt_model_can_cut(m, c)) start[n++] = c;
    start[n] = hi;
    return n;
}

int dt_model_recomputed(const int *start, int n, int k) { return k + 1 < n && start[k + 1] - start[k] >= 2; }

int dt_model_set_recompute(struct dt_model *m, dt_status *st)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].ops == &dt_batchnorm_ops)
            return dt_fail(st, DT_EUSAGE, "--recompute: model %s has batch normalization (%s), whose moving "
                           "statistics a second forward pass would update twice; run it without --recompute",
                           m->name, m->layers[i].name);
    m->recompute = 1;
    return DT_OK;
}

/* The piece of start[0..n] layer i is in. */
static int piece_of(const int *start, int n, int i)
{
    int k = 0;
    while (k + 1 < n && start[k + 1] <= i) k++;
    return k;
}

int dt_model_state_owner(const struct dt_model *m, const int *start, int n, int i)
{
    const int k = piece_of(start, n, i);
    const struct dt_layer *l = &m->layers[i];
    if (!l->ops->share_state || !dt_model_recomputed(start, n, k) || i >= start[k + 1] - 1) return i;
    for (int q = 0; q < k; q++) { /* the first (a transformer's pieces alternate attention and MLP) */
        const int o = start[q] + (i - start[k]);
        if (!dt_model_recomputed(start, n, q) || o >= start[q + 1] - 1) continue;
        const struct dt_layer *w = &m->layers[o];
        if (w->ops == l->ops && !memcmp(&w->in, &l->in, sizeof l->in) && !memcmp(&w->out, &l->out, sizeof l->out) &&
            w->spec.heads == l->spec.heads && w->spec.activation == l->spec.activation)
            return o;
    }
    return i;
}

/* --recompute's layout (model.h): which act index of [lo, hi] is position
 * j of a recomputed piece's inner outputs (where[i] = j), or kept (-1). */
static void plan_pieces(struct dt_model *m, int *where)
{
    for (int i = m->lo; i <= m->hi; i++) where[i - m->lo] = -1;
    if (!m->recompute) return;
    m->piece = dt_xcalloc((size_t)(m->hi - m->lo) + 2, sizeof *m->piece);
    m->npieces = dt_model_pieces(m, m->lo, m->hi, m->piece);
    m->piece_rng = dt_xcalloc((size_t)m->npieces, sizeof *m->piece_rng);
    for (int k = 0; k < m->npieces; k++) {
        if (!dt_model_recomputed(m->piece, m->npieces, k)) continue;
        for (int i = m->piece[k] + 1; i < m->piece[k + 1]; i++) where[i - m->lo] = i - m->piece[k] - 1;
        if (m->piece[k + 1] - m->piece[k] - 1 > m->nshared) m->nshared = m->piece[k + 1] - m->piece[k] - 1;
    }
}

/* A stage's activations (lo > 0): its input act[lo] is a buffer of its own,
 * where the previous stage's output arrives, and an alias that reached back
 * before lo (through a route of act[lo]) now means that buffer. */
static void rebase_aliases(struct dt_model *m)
{
    for (int i = m->lo; i <= m->hi; i++) {
        if (m->act_alias[i] < m->lo) m->act_alias[i] = m->lo;
        if (m->dact_alias[i] < m->lo) m->dact_alias[i] = m->lo;
    }
    m->act_alias[m->lo] = m->dact_alias[m->lo] = m->lo;
}

int dt_model_conv_pool2(const struct dt_model *m, int c)
{
    if (c <= 0 || c >= m->nlayers) return 0;
    const struct dt_layer *conv = &m->layers[c - 1];
    if (conv->ops != &dt_conv2d_ops || !conv->relu_bwd_by_next) return 0; /* so layer c is a max pool */
    const struct dt_conv_shape *ps = dt_maxpool_shape(&m->layers[c]);
    return ps->kh == 2 && ps->kw == 2 && ps->stride == 2;
}

/* Fold a first layer's conv2d - ReLU - 2x2/2 max pool into the conv where
 * the backend pools in the same pass (layer.h's fold_pool): the conv writes
 * the pool's output buffer, its own (4x larger) is never made. Only the
 * model's first layer (it needs no input gradient, which the fold does not
 * give), and only where both layers are this model's (a pipeline stage may
 * end between them). DTRAIN_NO_FUSION=1 keeps them apart. */
static void plan_conv_pool(struct dt_model *m, const struct dt_backend *be)
{
    if (fusion_off() || !be->conv_pool_fits || m->lo != 0 || m->hi < 2 || !dt_model_conv_pool2(m, 1)) return;
    struct dt_layer *conv = &m->layers[0], *pool = &m->layers[1];
    if (!be->conv_pool_fits(dt_conv2d_shape(conv))) return;
    conv->fold_pool = 1;
    conv->fold_out = pool->out;
    pool->folded = 1;
    m->act_alias[1] = m->dact_alias[1] = 2;
}

/* Fold each 2x2/2 max pool's backward into the conv2d before it where the
 * backend takes the pair (backend.h's conv_poolgrad; layer.h's pool_bwd):
 * the conv's output gradient (4x the pool's, mostly zeros) is never made.
 * Both layers this model's, the conv's ReLU's backward the pool's to do
 * (so its output is read by no other layer: dt_model_conv_pool2).
 * DTRAIN_NO_FUSION=1 keeps them apart. */
static void plan_poolgrad(struct dt_model *m, const struct dt_backend *be)
{
    if (fusion_off() || !be->conv_poolgrad_fits) return;
    for (int i = m->lo; i + 1 < m->hi; i++) {
        struct dt_layer *conv = &m->layers[i], *pool = &m->layers[i + 1];
        if (!dt_model_conv_pool2(m, i + 1) || conv->fold_pool) continue;
        if (!be->conv_poolgrad_fits(dt_conv2d_shape(conv), dt_maxpool_shape(pool))) continue;
        conv->pool_bwd = pool;
        conv->pool_bwd_out = i + 2;
        pool->bwd_folded = 1;
        m->dact_alias[i + 1] = i + 2;
    }
}

void dt_model_create(struct dt_model *m, const struct dt_backend *be, int max_n)
{
    m->be = be;
    m->max_n = max_n > 0 ? max_n : 1;
    m->act_type = be->act_type();
    if (m->hi <= 0 || m->hi > m->nlayers) m->hi = m->nlayers;
    if (m->lo < 0 || m->lo > m->hi) m->lo = 0;
    if (m->lo > 0) rebase_aliases(m);
    plan_conv_pool(m, be);
    plan_poolgrad(m, be);
    if (!m->hook) m->params = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1)); /* a hook says where they are */
    if (!m->sharded) { /* a sharded model's gradients are its strategy's, bucket by bucket */
        m->grads = be->alloc(sizeof(float) * (m->nparams ? m->nparams : 1));
        be->zero(m->grads, sizeof(float) * m->nparams);
    }
    m->buffers = be->alloc(sizeof(float) * (m->nbuffers ? m->nbuffers : 1));
    for (int i = 0; i < m->nlayers; i++) m->layers[i].buffers = m->buffers + m->layers[i].buffer_offset;
    m->act = dt_xcalloc((size_t)m->nlayers + 1, sizeof *m->act);
    m->dact = dt_xcalloc((size_t)m->nlayers + 1, sizeof *m->dact);
    /* A language model's logits (T x V a window: its largest tensor) are not
     * read after the loss, which writes their gradient over them. */
    m->dlogits_in_place = m->tokens && m->hi == m->nlayers && m->dact_alias[m->nlayers] == m->nlayers;
    int *where = dt_xmalloc(sizeof(int) * ((size_t)(m->hi - m->lo) + 1));
    plan_pieces(m, where);
    size_t *widest = dt_xcalloc((size_t)m->nshared + 1, sizeof *widest);
    for (int pass = 0; pass < 2; pass++) { /* the shared positions' sizes, then every buffer */
        for (int i = m->lo; i <= m->hi; i++) {
            struct dt_shape s = i == 0 ? m->input : m->layers[i - 1].out;
            size_t bytes = dt_act_size(m->act_type) * dt_shape_size(s) * (size_t)m->max_n;
            const int own_dact = i > 0 && m->dact_alias[i] == i && !(m->dlogits_in_place && i == m->nlayers);
            const int j = where[i - m->lo];
            if (pass == 0) {
                if (j >= 0 && bytes > widest[j]) widest[j] = bytes;
                continue;
            }
            if (j >= 0) { /* an inner output of a recomputed piece: position j's buffers */
                if (m->act_alias[i] == i) m->act[i] = m->shared_act[j];
                if (own_dact) m->dact[i] = m->shared_dact[j];
                continue;
            }
            if (m->act_alias[i] == i) m->act[i] = be->alloc(bytes);
            if (own_dact) m->dact[i] = be->alloc(bytes);
            m->act_bytes += (m->act_alias[i] == i) * bytes + own_dact * bytes;
        }
        if (pass == 1 || !m->nshared) continue;
        m->shared_act = dt_xcalloc((size_t)m->nshared, sizeof *m->shared_act);
        m->shared_dact = dt_xcalloc((size_t)m->nshared, sizeof *m->shared_dact);
        for (int j = 0; j < m->nshared; j++) {
            m->shared_act[j] = be->alloc(widest[j]);
            m->shared_dact[j] = be->alloc(widest[j]);
            m->act_bytes += 2 * widest[j];
        }
    }
    free(widest);
    for (int i = m->lo; i <= m->hi; i++) { /* aliases point at their owners */
        m->act[i] = m->act[m->act_alias[i]];
        if (i > 0) m->dact[i] = m->dact[m->dact_alias[i]];
    }
    free(where);
    if (m->dlogits_in_place) m->dact[m->nlayers] = m->act[m->nlayers];
    for (int i = m->lo; i < m->hi; i++)
        if (m->layers[i].ops->create) m->layers[i].ops->create(&m->layers[i], be, m->max_n);
    for (int i = m->lo; i < m->hi && m->npieces; i++) { /* --recompute: a place's state once */
        const int o = dt_model_state_owner(m, m->piece, m->npieces, i);
        if (o != i) m->layers[i].ops->share_state(&m->layers[i], &m->layers[o], be);
    }
}

int dt_model_can_decode(const struct dt_model *m, dt_status *st)
{
    if (!dt_model_is_lm(m))
        return dt_fail(st, DT_EUSAGE, "model %s is not a language model (an [embedding] first, an [lm_head] last)",
                       m->name);
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        if (!l->ops->decode || l->folded || l->fold_add)
            return dt_fail(st, DT_EUSAGE, "model %s: layer %s (%s) cannot generate one position at a time", m->name,
                           l->name, l->ops->type);
    }
    return DT_OK;
}

void dt_model_decode(struct dt_model *m, int token, int pos, float *logits_host)
{
    struct dt_ctx c = {.be = m->be, .n = 1, .train = 0, .act = m->act, .act_size = dt_act_size(m->act_type)};
    const int T = m->layers[0].out.w, V = m->layers[m->nlayers - 1].out.c;
    const int32_t tok = token;
    if (pos < 0 || pos >= T) DT_DIE("dt_model_decode: position %d outside the block of %d", pos, T);
    m->be->upload(m->act[0], &tok, sizeof tok);
    for (int i = 0; i < m->nlayers; i++) {
        struct dt_layer *l = &m->layers[i];
        const int pl = l->tie >= 0 && !l->nparams ? l->tie : i; /* a tied head: the embedding's */
        l->ops->decode(l, &c, pos, m->act[i + 1], m->act[i], m->params + m->layers[pl].param_offset);
    }
    if (m->act_type == DT_PREC_FP32) {
        m->be->download(logits_host, m->act[m->nlayers], sizeof(float) * (size_t)V);
        return;
    }
    uint16_t *h = dt_xmalloc(sizeof(uint16_t) * (size_t)V); /* 16-bit activations: decoded on the host */
    m->be->download(h, m->act[m->nlayers], sizeof(uint16_t) * (size_t)V);
    dt_act_decode(m->act_type, logits_host, h, (size_t)V);
    free(h);
}

int dt_model_can_cut(const struct dt_model *m, int c)
{
    if (c <= 0 || c >= m->nlayers) return 0;
    if (m->layers[c - 1].fold_add || m->layers[c].folded) return 0;
    for (int j = c; j < m->nlayers; j++)
        if (m->layers[j].src >= 0 && m->layers[j].src < c) return 0;
    return 1;
}

void dt_model_init_params(struct dt_model *m, uint64_t seed)
{
    /* Layer by layer through one host buffer of the largest layer (the
     * generator's stream runs through the layers in order, as before): a
     * host copy of the whole model would add its size to the peak memory. */
    size_t widest = 1;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].nparams > widest) widest = m->layers[i].nparams;
    float *host = dt_xmalloc(sizeof(float) * widest);
    dt_rng rng;
    dt_rng_seed(&rng, seed, 0x1417); /* the initialiser's own stream */
    m->be->zero(m->params, sizeof(float) * m->nparams); /* layers without an initialiser start at 0 */
    for (int i = 0; i < m->nlayers; i++) {
        struct dt_layer *l = &m->layers[i];
        if (!l->ops->init) continue;
        memset(host, 0, sizeof(float) * l->nparams);
        l->ops->init(l, host, &rng);
        m->be->upload(m->params + l->param_offset, host, sizeof(float) * l->nparams);
    }
    free(host);
    host = dt_xcalloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        struct dt_layer *l = &m->layers[i];
        if (l->ops->init_buffers) l->ops->init_buffers(l, host + l->buffer_offset);
    }
    m->be->upload(m->buffers, host, sizeof(float) * m->nbuffers);
    free(host);
}

/* Whether act[i] is an inner output of a recomputed piece (plan_pieces). */
static int inner(const struct dt_model *m, int i)
{
    if (m->npieces <= 0 || i <= m->piece[0]) return 0;
    const int k = piece_of(m->piece, m->npieces, i);
    return dt_model_recomputed(m->piece, m->npieces, k) && m->piece[k] < i && i < m->piece[k + 1];
}

void dt_model_free(struct dt_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        struct dt_layer *l = &m->layers[i];
        if (!l->ops) continue; /* building stopped before this layer */
        /* Without a backend (built, never initialised, or another pipeline
         * stage's layer) destroy still frees what setup allocated, e.g.
         * batchnorm's statistics buffers. */
        const int created = m->be && i >= m->lo && i < m->hi;
        if (l->ops->destroy) l->ops->destroy(l, created ? m->be : NULL);
        else free(l->state);
    }
    if (m->be) {
        for (int i = m->lo; i <= m->hi; i++) {
            const int shared = m->recompute && inner(m, i);
            if (m->act_alias[i] == i && !shared) m->be->free(m->act[i]); /* an alias is freed with its owner */
            if (m->dact[i] && m->dact_alias[i] == i && !shared && !(m->dlogits_in_place && i == m->nlayers))
                m->be->free(m->dact[i]);
        }
        for (int j = 0; j < m->nshared; j++) {
            m->be->free(m->shared_act[j]);
            m->be->free(m->shared_dact[j]);
        }
        if (!m->params_borrowed && m->params) m->be->free(m->params);
        if (!m->grads_borrowed && m->grads) m->be->free(m->grads);
        if (m->tie_grad) m->be->free(m->tie_grad);
        m->be->free(m->buffers);
    }
    free(m->act);
    free(m->dact);
    free(m->piece);
    free(m->piece_rng);
    free(m->shared_act);
    free(m->shared_dact);
    free(m->act_alias);
    free(m->dact_alias);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

/* Layers [from, to) forward. again: --recompute's second pass in backward,
 * which asks the hook for the parameters as backward does (fsdp holds the
 * bucket for its backward next) and lets it release nothing. */
static void forward_layers(struct dt_model *m, const struct dt_ctx *c, int from, int to, int again)
{
    const struct dt_param_hook *h = m->hook;
    for (int i = from; i < to; i++) {
        struct dt_layer *l = &m->layers[i];
        const int pl = l->tie >= 0 && !l->nparams ? l->tie : i; /* a tied head: the embedding's */
        float *unused;
        const float *p = !h ? m->params + m->layers[pl].param_offset
                         : again && pl == i ? h->at(h->arg, pl, 1, &unused) : h->at(h->arg, pl, 0, NULL);
        DT_TL_BEGIN(tl0);
        l->ops->forward(l, c, m->act[i + 1], m->act[i], p);
        DT_TL_END2(tl0, DT_TL_COMPUTE, again ? "recompute" : "forward", l->name, NULL);
        if (h && !again) h->after(h->arg, i, 0);
    }
}

void dt_model_forward(struct dt_model *m, int n, int train, dt_rng *rng)
{
    struct dt_ctx c = {.be = m->be, .n = n, .train = train, .rng = rng, .act = m->act,
                       .act_size = dt_act_size(m->act_type), .reduce = m->reduce, .reduce_arg = m->reduce_arg};
    if (!m->npieces) {
        forward_layers(m, &c, m->lo, m->hi, 0);
        return;
    }
    for (int k = 0; k < m->npieces; k++) { /* each piece's dropout stream kept for its second pass */
        if (rng) m->piece_rng[k] = *rng;
        forward_layers(m, &c, m->piece[k], m->piece[k + 1], 0);
    }
}

struct dt_loss_result dt_model_loss(struct dt_model *m, const uint8_t *labels, int n, float grad_scale)
{
    if (m->tokens) {
        const struct dt_shape o = m->layers[m->nlayers - 1].out;
        return dt_token_xent(m->be, grad_scale != 0.0f ? m->dact[m->nlayers] : NULL, m->act[m->nlayers],
                             (const int32_t *)labels, n, o.w, o.c, grad_scale);
    }
    return dt_softmax_xent(m->be, grad_scale != 0.0f ? m->dact[m->nlayers] : NULL,
                           m->act[m->nlayers], labels, n, m->classes, grad_scale);
}

void dt_model_backward_notify(struct dt_model *m, int n, dt_rng *rng,
                              void (*done)(void *ctx, size_t offset), void *ctx)
{
    struct dt_ctx c = {.be = m->be, .n = n, .train = 1, .rng = rng, .act = m->act,
                       .act_size = dt_act_size(m->act_type), .reduce = m->reduce, .reduce_arg = m->reduce_arg};
    const struct dt_param_hook *h = m->hook;
    int pc = m->npieces - 1; /* the piece layer i is in (--recompute) */
    for (int i = m->hi - 1; i >= m->lo; i--) {
        struct dt_layer *l = &m->layers[i];
        while (pc > 0 && m->piece[pc] > i) pc--;
        if (m->npieces && i == m->piece[pc + 1] - 1 && dt_model_recomputed(m->piece, m->npieces, pc)) {
            /* --recompute: the piece's inner outputs again, from its kept input,
             * its last layer's output being kept (and every layer's own state
             * written again as it was) */
            dt_rng again = m->piece_rng[pc];
            struct dt_ctx rc = c;
            rc.rng = rng ? &again : NULL;
            forward_layers(m, &rc, m->piece[pc], i, 1);
        }
        const int pl = l->tie >= 0 && !l->nparams ? l->tie : i; /* a tied head: the embedding's */
        float *g = m->grads ? m->grads + m->layers[pl].param_offset : NULL;
        const float *p;
        if (h && pl != i) { /* a tied head under a hook: the table as in forward, its gradient aside */
            const size_t wte = (size_t)m->layers[pl].spec.vocab * m->layers[pl].out.c;
            if (!m->tie_grad) m->tie_grad = m->be->alloc(sizeof(float) * wte);
            p = h->at(h->arg, pl, 0, NULL);
            g = m->tie_grad;
        }
        else
            p = h ? h->at(h->arg, pl, 1, &g) : m->params + m->layers[pl].param_offset;
        if (h && l->tie >= 0 && l->nparams) /* the tied embedding: the head's part of wte's gradient first */
            m->be->copy(g, m->tie_grad, sizeof(float) * (size_t)l->spec.vocab * l->out.c);
        DT_TL_BEGIN(tl0);
        l->ops->backward(l, &c, m->dact[i], m->dact[i + 1], m->act[i], m->act[i + 1], p, g);
        /* act[i] also fed adds and routes further on: their output gradients
         * (final by now: backward ran past them) join its gradient. */
        for (int k = i; k < m->hi && m->dact[i] && n > 0; k++)
            if (m->layers[k].src == i)
                m->be->act_add(m->dact[i], m->dact[k + 1], dt_shape_size(m->layers[i - 1].out) * (size_t)n);
        DT_TL_END2(tl0, DT_TL_COMPUTE, "backward", l->name, NULL);
        if (h) h->after(h->arg, i, 1);
        if (done && l->nparams) done(ctx, l->param_offset);
    }
}

void dt_model_notify_all(const struct dt_model *m, void (*done)(void *ctx, size_t offset), void *ctx)
{
    for (int i = m->hi - 1; i >= m->lo; i--)
        if (m->layers[i].nparams) done(ctx, m->layers[i].param_offset);
}

void dt_model_backward(struct dt_model *m, int n, dt_rng *rng)
{
    dt_model_backward_notify(m, n, rng, NULL, NULL);
}

void dt_model_summary(const struct dt_model *m, FILE *out)
{
    fprintf(out, "Model: %s (input %dx%dx%d, %d classes)\n", m->name, m->input.h, m->input.w,
            m->input.c, m->classes);
    for (int i = 0; i < m->nlayers; i++) {
        const struct dt_layer *l = &m->layers[i];
        char from[48] = "";
        if (l->src >= 0) snprintf(from, sizeof from, "  (with %s)", l->src ? m->layers[l->src - 1].name : "input");
        if (l->out.h != l->full.h || l->out.w != l->full.w) /* crop.c */
            snprintf(from, sizeof from, "  (computes %dx%d: read no further)", l->out.h, l->out.w);
        fprintf(out, "  %-26s %-14s -> %4d x %4d x %4d  %10zu params%s\n", l->name, l->ops->type,
                l->full.h, l->full.w, l->full.c, l->nparams, from);
    }
    fprintf(out, "  total parameters: %zu\n", m->nparams);
}

int dt_layer_kernel(const struct dt_layer *l, size_t *rows, size_t *cols)
{
    if (!l->nparams || (l->ops != &dt_conv2d_ops && l->ops != &dt_dense_ops && l->ops != &dt_linear_ops) ||
        l->spec.filters < 1)
        return 0;
    *cols = (size_t)l->spec.filters;
    *rows = (l->nparams - *cols) / *cols;
    return 1;
}
