/* model.h: a model is an array of layers over one flat parameter block.
 *
 * All parameters live in one contiguous allocation and all gradients in a
 * matching one, so the trainer reduces the whole model with one call and a
 * layer's parameters are just an offset. Activations are kept per layer for
 * backward: act[0] is the input batch, act[i+1] the output of layer i; their
 * element type is the backend's (float32, or 16 bits: backend.h). */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "nn/layer.h"
#include "nn/loss.h"

/* Where a layer's parameters are when the model holds no whole block
 * (--strategy fsdp: ZeRO-3 keeps 1/P of them per rank and gathers a bucket
 * just before its layers run). Called for every layer, in the order the
 * layers run: at(layer, backward, &grads) before it (the parameters, and in
 * backward where its gradients go; NULL for a layer without parameters),
 * after(layer, backward) once it has run. */
struct dt_param_hook {
    const float *(*at)(void *arg, int layer, int backward, float **grads);
    void (*after)(void *arg, int layer, int backward);
    void *arg;
};

struct dt_model {
    char name[32];
    const struct dt_backend *be;
    struct dt_shape input;
    int classes;     /* the data's classes, or a language model's vocabulary */
    int tokens;      /* 1: the input is windows of token ids (an embedding first), int32
                        [n][T+1] copied into act[0] as they are (dt_model_load_input) */
    int nlayers;
    struct dt_layer *layers;
    size_t nparams;
    float *params;   /* [nparams], device */
    int params_borrowed; /* params belongs to someone else (a node-shared window) */
    float *grads;    /* [nparams], device: d(loss)/d(params) of the last backward */
    int grads_borrowed; /* grads belongs to someone else (a shared window) */
    int sharded;     /* set before dt_model_create: no gradient block (grads NULL), and
                        after placement no parameter block either: hook says where they are */
    const struct dt_param_hook *hook; /* NULL: params and grads hold every layer's */
    float *tie_grad; /* a tied head under a hook: its part of wte's gradient, [V][C] (device),
                        until the embedding's backward adds it (the hook's buffers move between) */
    int lo, hi;      /* the layers this rank runs, [lo, hi): a pipeline stage (set before
                        dt_model_create; hi 0: all). Activations exist for act[lo..hi] only,
                        and dact[lo] too when lo > 0 (the gradient the previous stage gets) */
    int max_n;       /* largest batch the buffers hold */
    int act_type;    /* element type of act and dact (the backend's act_type at create) */
    dt_act **act;    /* [nlayers+1][max_n * shape] */
    dt_act **dact;   /* gradients of act; dact[0] is NULL (no one needs d input) */
    /* act[i] shares act[act_alias[i]]'s buffer where a fold makes one
     * layer write another's output (act_alias[i] == i: its own); likewise
     * dact. dt_model_build sets them; DTRAIN_NO_FUSION=1 turns folding off
     * (the reference path). */
    int *act_alias, *dact_alias;
    size_t act_bytes; /* activation memory: act and dact at max_n, each shared buffer once */
    int dlogits_in_place; /* a language model's dact[nlayers] is act[nlayers]: the loss writes the
                             logits' gradient over them */
    /* --recompute (set before dt_model_create): the model runs as pieces cut
     * where a pipeline stage may start (dt_model_pieces); a piece of two or
     * more layers that is not the last keeps its input and output only, its
     * inner outputs and their gradients in buffers all such pieces share,
     * and runs its forward again just before its backward (with the
     * dropout stream as it was: the same bits). */
    int recompute;
    int npieces;          /* pieces of [lo, hi) at create; piece k is [piece[k], piece[k+1]) */
    int *piece;           /* [npieces + 1] */
    dt_rng *piece_rng;    /* [npieces]: the dropout stream at each piece's forward */
    int nshared;          /* inner positions of the widest recomputed piece */
    dt_act **shared_act, **shared_dact; /* [nshared]: position j of every recomputed piece */
    size_t nbuffers; /* non-trained state (batchnorm's moving statistics) */
    float *buffers;  /* [nbuffers], device; each rank its own (see dt_model_has_batchnorm) */
    /* --sync-bn: how batchnorm sums its statistics over the replicas (layer.h) */
    void (*reduce)(void *arg, double *buf, int n);
    void *reduce_arg;
};

/* The built-in models: "cnn" (the seed's Keras CNN) and "mlp", or a model
 * file (nn/model_file.h). dropout is the built-in CNN's dropout rate (the
 * seed's 0.5). Shapes are checked against input. m can be freed whatever
 * fails. dt_model_specs then dt_model_build_specs, for callers that tell a
 * wrong name or file from a model that does not fit the data. */
int dt_model_build(struct dt_model *m, const char *name, struct dt_shape input, int classes,
                   float dropout, dt_status *st);
/* The layer list that name stands for, into *specs (allocated: the
 * caller frees it, even on failure): a built-in's, or the model file's,
 * parsed here once (its errors name the file and line). */
int dt_model_specs(const char *name, int classes, float dropout, struct dt_layer_spec **specs, int *n,
                   dt_status *st);
/* A --model value naming a file (a '/' in it, or a .cfg name) rather than a
 * built-in; nn/model_file.h describes the format. */
int dt_model_is_file(const char *name);
/* Build from an explicit layer list (used by tests and built-ins); a name
 * with a '/' (a model file's path) is shown as its file name. */
int dt_model_build_specs(struct dt_model *m, const char *name, struct dt_shape input, int classes,
                         const struct dt_layer_spec *specs, int nspecs, dt_status *st);
/* Layer c a 2x2/2 max pool that applies the ReLU backward of the conv2d
 * right before it: the pair the CPU folds (model.c's plan_conv_pool and
 * plan_poolgrad) and a pipeline cut keeps together (dt_pipe_balance). */
int dt_model_conv_pool2(const struct dt_model *m, int c);
/* Whether some add or route reads act[k] as its second input. */
static inline int dt_model_read_as_src(const struct dt_model *m, int k)
{
    for (int j = 0; j < m->nlayers; j++)
        if (m->layers[j].src == k) return 1;
    return 0;
}
/* crop.c: shrink layers to the part of their output some layer reads
 * (dt_model_build_specs calls it; DTRAIN_NO_CROP=1 turns it off). */
void dt_model_plan_crops(struct dt_model *m);
/* Whether every layer can run on be; if not, st names the first that cannot. */
int dt_model_check_backend(const struct dt_model *m, const struct dt_backend *be, dt_status *st);
/* Whether the backend can record a training step of this model into one
 * graph (backend.h's capture_begin); if not, st says why, for `flag`. */
int dt_model_check_capture(const struct dt_model *m, const struct dt_backend *be, const char *flag, dt_status *st);
/* Whether the model branches: it has add or route layers, which read an
 * output other than the previous layer's (a residual network; not a Keras
 * Sequential). */
int dt_model_is_branched(const struct dt_model *m);
/* Allocate device buffers for batches of up to max_n samples; activations
 * in be->act_type() as it is now. */
void dt_model_create(struct dt_model *m, const struct dt_backend *be, int max_n);
/* Keras's initialisers, drawn from seed (host RNG), uploaded; buffers too. */
void dt_model_init_params(struct dt_model *m, uint64_t seed);
void dt_model_free(struct dt_model *m);

/* Whether m is a language model: an embedding first, an lm_head last (its
 * loss is over every position of every window). */
int dt_model_is_lm(const struct dt_model *m);
/* The tied lm_head (layer.h's tie: it uses the embedding's parameters), or -1. */
int dt_model_tied_head(const struct dt_model *m);
/* The batch's rows (device memory, bytes of them: images as uint8, or
 * token windows as int32) into dst (act[0]) as the model's first layer
 * reads them. */
void dt_model_load_input(const struct dt_model *m, dt_act *dst, const uint8_t *rows, size_t bytes);
/* act[lo] must hold the batch (act[0]) or the previous stage's output. */
void dt_model_forward(struct dt_model *m, int n, int train, dt_rng *rng);
/* Generation with a cache (dtrain-generate): whether every layer of m has
 * a decode op (layer.h) and m is a language model; if not, st says which
 * layer cannot. */
int dt_model_can_decode(const struct dt_model *m, dt_status *st);
/* One position of one sequence: token (int32, below the vocabulary) at
 * position pos (0 <= pos < block_size; 0 starts a new sequence, and
 * positions 0..pos-1 must have been decoded before, in order) through
 * every layer's decode op; logits_host [vocab] receives that position's
 * logits as float. Each position costs one position's work: attention
 * keeps the keys and values of the earlier ones. Needs dt_model_create
 * (any max_n) and dt_model_can_decode; overwrites row 0 of the
 * activations (act[i] holds one position while decoding). */
void dt_model_decode(struct dt_model *m, int token, int pos, float *logits_host);
/* Whether a pipeline stage may start at layer c (0 < c < nlayers): no layer
 * from c on reads an output before c (an add's or route's from), and no
 * fold joins layers c-1 and c. */
int dt_model_can_cut(const struct dt_model *m, int c);
/* The pieces of layers [lo, hi) between the places the model may be cut:
 * start[0] = lo < start[1] < ... < start[n] = hi (start has room for
 * hi - lo + 1); returns n. --recompute runs again the inner outputs of
 * every piece of two or more layers but the last (dt_model_recomputed). */
int dt_model_pieces(const struct dt_model *m, int lo, int hi, int *start);
int dt_model_recomputed(const int *start, int n, int k);
/* Under --recompute with those pieces: the layer whose state (layer.h's
 * share_state) layer i uses: the layer at i's place in the first earlier
 * recomputed piece where one of the same type and shapes is, neither being
 * its piece's last (whose output is kept, so it does not run again); else i. */
int dt_model_state_owner(const struct dt_model *m, const int *start, int n, int i);
/* --recompute for m (before dt_model_create), or st says why it cannot run
 * (batch normalization would count each batch twice in its moving
 * statistics). */
int dt_model_set_recompute(struct dt_model *m, dt_status *st);
/* Loss of the last forward; with grad_scale != 0 also fills dact[nlayers].
 * labels: the batch's targets on the device: a uint8 class per sample, or
 * for a token model the token windows themselves (int32 [n][T+1]: the
 * targets are tokens 1..T), whose loss is the mean over positions. */
struct dt_loss_result dt_model_loss(struct dt_model *m, const uint8_t *labels, int n,
                                    float grad_scale);
void dt_model_backward(struct dt_model *m, int n, dt_rng *rng);
/* The same, calling done(ctx, offset) after each layer that has parameters:
 * gradients from offset to the end of the block are then final (backward
 * runs last layer first), so they can be reduced while backward goes on. */
void dt_model_backward_notify(struct dt_model *m, int n, dt_rng *rng,
                              void (*done)(void *ctx, size_t offset), void *ctx);
/* The calls dt_model_backward_notify makes to done, in the same order,
 * without running backward (it ran already, e.g. inside a replayed graph). */
void dt_model_notify_all(const struct dt_model *m, void (*done)(void *ctx, size_t offset), void *ctx);
/* One line per layer: name, type, output shape, parameter count. */
void dt_model_summary(const struct dt_model *m, FILE *out);

#endif
