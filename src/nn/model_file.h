/* model_file.h: a model described in a small text file (inputs/cnn.cfg, ...).
 *
 * darknet-style sections, one per layer, in order, with key = value lines;
 * '#' starts a comment:
 *
 *   [conv2d]      filters = 32, kernel = 3, stride = 1, padding = valid|same,
 *                 activation = none|relu
 *   [maxpool]     size = 2, stride = size
 *   [dense]       units = N | classes (the data's class count), activation
 *   [relu]
 *   [dropout]     rate = 0.5
 *   [avgpool]     size = 2, stride = size
 *   [global_avgpool]            the mean over h x w: 1x1xC
 *   [batchnorm]   momentum = 0.99, epsilon = 0.001, activation = none|relu
 *   [add]         from = -k (the output k layers back), activation: a residual
 *   [route]       from = -k: continue from the output k layers back (a branch)
 *   [flatten]
 *   [reshape]     shape = HxWxC
 *   [embedding]   width = C, block_size = T, vocab = N | classes (default: the
 *                 data's vocabulary): token + position embedding of a window
 *   [layernorm]   epsilon = 1e-5: over the channels of each position
 *   [attention]   heads = H (dividing the width): causal self-attention
 *   [linear]      units = N, activation = none|relu|gelu: a dense layer on
 *                 each position of a sequence
 *   [gelu]
 *   [lm_head]     tied = 1|0 (1: the embedding's table), vocab = N | classes
 *   [stage]       no keys, not a layer: a pipeline stage starts at the next
 *                 layer (--pipeline-stages; train/pipeline.h)
 *
 * Errors name the file and line: an unknown section or key, a bad value, a
 * missing required key. Shapes are checked when the model is built against
 * the data (dt_model_build_specs), and that message names the file too. */
#ifndef DT_MODEL_FILE_H
#define DT_MODEL_FILE_H

#include <stddef.h>

#include "nn/layer.h"
#include "runtime/status.h"

enum { DT_MAX_LAYERS = 256 };

/* Parse path into specs[0..*n). classes replaces "units = classes". */
int dt_model_file_parse(const char *path, int classes, struct dt_layer_spec *specs, int *n, dt_status *st);
/* The same from a model file's text (len bytes, e.g. a checkpoint's
 * /model_text), name standing for the file in messages. */
int dt_model_file_parse_text(const char *name, const char *text, size_t len, int classes, struct dt_layer_spec *specs,
                             int *n, dt_status *st);

#endif
