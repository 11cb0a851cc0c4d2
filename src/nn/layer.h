/* layer.h: what every layer is, and the table of operations it fills.
 *
 * A layer type is one file in src/nn/ that fills a const dt_layer_ops; the
 * model loop calls layer->ops->forward(...) and never switches on the type.
 * Layers see tensors (tensor.h) and the backend (backend.h), never MPI
 * (tests/layering.sh compiles nn/ without it). Shapes are per sample, NHWC;
 * a dense layer reads its input flattened (Keras's Flatten of an NHWC
 * tensor is the same memory). */
#ifndef DT_LAYER_H
#define DT_LAYER_H

#include <stddef.h>

#include "backend.h"
#include "runtime/rng.h"
#include "runtime/status.h"
#include "tensor.h"

enum dt_activation { DT_ACT_NONE = 0, DT_ACT_RELU = 1, DT_ACT_GELU = 2 };

/* What a layer is asked to be; each type reads the fields it needs. */
struct dt_layer_spec {
    const char *type;   /* "conv2d", "maxpool", "avgpool", "global_avgpool", "dense", "relu",
                           "dropout", "batchnorm", "add", "route", "flatten", "reshape",
                           "embedding", "layernorm", "attention", "linear", "gelu", "lm_head" */
    int filters;        /* conv2d: output channels; dense, linear: units; embedding: width */
    int vocab;          /* embedding: tokens in the vocabulary (the data's) */
    int block;          /* embedding: block_size, the positions of a window */
    int heads;          /* attention: heads (dividing the width) */
    int tied;           /* lm_head: 1 shares the embedding's table (GPT-2's), 0 a matrix of its own */
    int kernel;         /* conv2d/maxpool window size */
    int stride;         /* 0 = default (1 for conv2d, the window for maxpool) */
    int same;           /* conv2d: 'same' padding instead of 'valid' */
    int activation;     /* conv2d, dense: fused activation */
    float rate;         /* dropout */
    float momentum;     /* batchnorm: moving-average momentum (0 = Keras's 0.99) */
    float epsilon;      /* batchnorm: added to the variance (0 = Keras's 1e-3); layernorm (0 = 1e-5) */
    int from;           /* add, route: the output of the layer `from` places back (-1 = the
                           previous layer's, which is also this layer's input) */
    struct dt_shape shape; /* reshape: the output shape */
    int stage;          /* 1: a pipeline stage starts at this layer (a [stage] line before it) */
};

struct dt_layer;

/* Per-step context a layer's forward/backward may need. */
struct dt_ctx {
    const struct dt_backend *be;
    int n;            /* samples in this batch (may be 0) */
    int train;        /* dropout active, pool keeps argmax, batchnorm uses batch statistics */
    dt_rng *rng;      /* the replica's dropout stream */
    dt_act *const *act; /* the model's activations: act[0] input, act[i+1] layer i's output */
    size_t act_size;  /* bytes per activation element (dt_act_size of the backend's act_type) */
    /* --sync-bn: sums n doubles over all replicas in place (NULL: this
     * replica's batch alone). Every replica calls it at the same layers. */
    void (*reduce)(void *arg, double *buf, int n);
    void *reduce_arg;
};

struct dt_layer_ops {
    const char *type;
    /* Validate the spec against the input shape; set out shape and nparams. */
    int (*setup)(struct dt_layer *l, const struct dt_layer_spec *spec, dt_status *st);
    /* Allocate backend state for batches of up to max_n samples. */
    void (*create)(struct dt_layer *l, const struct dt_backend *be, int max_n);
    /* The device bytes create() allocates for batches of n samples of
     * act_size-byte activations (the memory plan, strategy/memplan.h);
     * NULL: none worth counting. */
    double (*state_bytes)(const struct dt_layer *l, int n, size_t act_size);
    /* Scratch shared by the layers of the process (one runs at a time): the
     * plan counts the largest once. NULL: none. */
    double (*scratch_bytes)(const struct dt_layer *l, int n, size_t act_size);
    /* --recompute (nn/model.h): l's forward-to-backward state (attention's
     * q, k, v and output, a GELU's input, a dropout mask) lives in with's,
     * a layer of the same type and shapes at the same place of another
     * recomputed piece, whose buffers l's own (freed here) were the size of;
     * both write it again before their backward. Runs after create. NULL:
     * the layer keeps its own. */
    void (*share_state)(struct dt_layer *l, const struct dt_layer *with, const struct dt_backend *be);
    /* Free the state of setup and create; be is NULL when create never ran. */
    void (*destroy)(struct dt_layer *l, const struct dt_backend *be);
    /* Keras's default initialisers into host memory: Glorot-uniform kernels,
     * zero biases. NULL for layers without parameters. */
    void (*init)(struct dt_layer *l, float *params, dt_rng *rng);
    /* Non-trained state (batchnorm's moving statistics) into host memory;
     * NULL for layers without any (nbuffers == 0). */
    void (*init_buffers)(struct dt_layer *l, float *buffers);
    /* The parts of this layer's parameters that weight decay applies to
     * (AdamW): its weight matrices, not biases, normalization gains or
     * embeddings. Fills up to max (offset, length) pairs relative to the
     * layer's param_offset and returns their count; NULL: none. */
    int (*decayed)(const struct dt_layer *l, size_t *off, size_t *len, int max);
    /* Whether the backend has what this layer needs (NULL: always). */
    int (*supported)(const struct dt_backend *be);
    /* Non-NULL when a pass brings values to the host between its kernels
     * (batchnorm's statistics), which a recorded graph cannot hold: why. */
    const char *host_roundtrip;
    void (*forward)(struct dt_layer *l, const struct dt_ctx *c, dt_act *out, const dt_act *inp,
                    const float *params);
    /* dout may be overwritten (activations are undone in place). dinp is NULL
     * for the first layer. dparams is overwritten, never accumulated. */
    void (*backward)(struct dt_layer *l, const struct dt_ctx *c, dt_act *dinp, dt_act *dout,
                     const dt_act *inp, const dt_act *out, const float *params, float *dparams);
    /* Generation with a cache (model.h's dt_model_decode): this layer on
     * position pos alone of one sequence, positions 0..pos-1 having been
     * decoded before (pos 0 starts a new sequence). inp and out hold one
     * position: [in.c] and [out.c] elements (an embedding's inp: one int32
     * token); c->n is 1 and c->act the model's one-position activations
     * (an add reads act[src] there). A layer that looks back (attention)
     * keeps what it needs of earlier positions, up to its block_size, in
     * state allocated on first use and freed by destroy; the others keep
     * nothing. Runs after create; may overwrite the state forward left for
     * backward. NULL: this layer type cannot generate. */
    void (*decode)(struct dt_layer *l, const struct dt_ctx *c, int pos, dt_act *out, const dt_act *inp,
                   const float *params);
};

struct dt_layer {
    const struct dt_layer_ops *ops;
    char name[32];          /* e.g. "conv2d_1", as Keras names them */
    struct dt_shape in, out;
    struct dt_shape full;   /* the output's shape as Keras gives it; out is its top-left
                               part where crop.c finds the rest read by no one */
    size_t param_offset;    /* into the model's flat parameter block */
    size_t nparams;
    size_t buffer_offset;   /* into the model's buffer block (moving statistics) */
    size_t nbuffers;
    float *buffers;         /* this layer's part of it (device), set by dt_model_create */
    int src;                /* add, route: index into act of the other input; -1 otherwise */
    int tie;                /* a tied lm_head: the layer whose parameters it uses (the
                               embedding, whose table it reads and to whose gradient it
                               contributes); -1 otherwise */
    struct dt_layer_spec spec;
    /* Fusion set up by the model: a ReLU's backward done by the next layer
     * (a max pool applies it on its smaller output, bit for bit the same). */
    int relu_bwd_by_next;   /* this layer skips its fused ReLU's backward */
    int relu_bwd_of_prev;   /* this layer applies the previous layer's */
    /* A batchnorm followed by an add (conv - BN - add - ReLU, a residual
     * block's end): the batchnorm's one pass also adds act[add_src] and
     * applies add_relu, writing the add's output; its output buffer is the
     * add's (the model aliases them), and the add (folded) does nothing.
     * Backward, the batchnorm applies the add's ReLU in its sums pass. */
    int fold_add;           /* 1: an add is folded into this layer */
    int add_src, add_relu;  /* that add's other input (index into act) and ReLU */
    /* A first-layer conv2d with its ReLU and a 2x2/2 max pool right after,
     * where the backend pools in the same pass (backend.h's conv_pool): the
     * conv writes the pool's output (the model aliases them; the pool is
     * folded) and, backward, reads the pool's gradient. Set by
     * dt_model_create, which knows the backend. */
    int fold_pool;
    struct dt_shape fold_out; /* fold_pool: the pool's output (as crop.c leaves it) */
    int folded;             /* this layer's work is done by the previous one */
    /* A conv2d with its ReLU and a 2x2/2 max pool right after, further in:
     * forward stays apart; backward, the conv reads the pool's gradient and
     * places (backend.h's conv_poolgrad) and the pool does nothing (its
     * bwd_folded). The model aliases the conv's output gradient to the
     * pool's. Set by dt_model_create. */
    const struct dt_layer *pool_bwd; /* that pool */
    int pool_bwd_out;                /* its output's index in act */
    int bwd_folded;
    void *state;            /* type-private */
};

extern const struct dt_layer_ops dt_conv2d_ops, dt_maxpool_ops, dt_dense_ops, dt_relu_ops,
    dt_dropout_ops, dt_avgpool_ops, dt_global_avgpool_ops, dt_batchnorm_ops, dt_add_ops, dt_route_ops,
    dt_flatten_ops, dt_reshape_ops, dt_embedding_ops, dt_layernorm_ops, dt_attention_ops, dt_linear_ops,
    dt_gelu_ops, dt_lm_head_ops;

/* A dense or convolution layer's kernel as a rows x filters matrix (dense:
 * inputs x units; conv: kh*kw*in x filters), its bias left out: 1, or 0 for
 * other layers. PowerSGD compresses these (strategy/mirrored.c, and
 * dtrain-predict's model of it). */
int dt_layer_kernel(const struct dt_layer *l, size_t *rows, size_t *cols);

/* A conv2d or maxpool layer's shape (after setup). */
const struct dt_conv_shape *dt_conv2d_shape(const struct dt_layer *l);
const struct dt_conv_shape *dt_maxpool_shape(const struct dt_layer *l);
dt_pool_plan *dt_maxpool_plan(const struct dt_layer *l); /* its backend plan (the places it kept) */

/* crop.c's resizing (before create): a 'valid' conv2d onto an ih x iw input
 * (its output follows, one pixel per window); a max pool onto an ih x iw
 * input, giving oh x ow of its windows (the top-left ones). */
void dt_conv2d_resize(struct dt_layer *l, int ih, int iw);
void dt_maxpool_resize(struct dt_layer *l, int ih, int iw, int oh, int ow);

/* init.c: N(0, std^2) (GPT-2's initialiser: std 0.02). */
void dt_normal_init(float *w, size_t n, float std, dt_rng *rng);

/* init.c: Glorot-uniform, U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)). */
void dt_glorot_uniform(float *w, size_t n, int fan_in, int fan_out, dt_rng *rng);

#endif
