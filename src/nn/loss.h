/* loss.h: softmax cross-entropy with integer labels (Keras's
 * SparseCategoricalCrossentropy(from_logits=True)), fused and stable. */
#ifndef DT_LOSS_H
#define DT_LOSS_H

#include <stdint.h>

#include "backend.h"

struct dt_loss_result {
    double loss_sum;  /* summed over the batch's samples (a window: the mean over its positions) */
    double correct;   /* argmax == label (a window: the fraction of its positions) */
};

/* dlogits (may be NULL for evaluation) receives d(sum loss)/d(logits) scaled
 * by grad_scale; the trainer passes 1/global_batch so that summing replicas'
 * gradients yields the mean over the global batch. */
struct dt_loss_result dt_softmax_xent(const struct dt_backend *be, dt_act *dlogits,
                                      const dt_act *logits, const uint8_t *labels, int n,
                                      int classes, float grad_scale);

/* Token-level cross-entropy over logits [n][T][V] against the windows'
 * targets (tokens [n][T+1], targets 1..T): each window counts as one sample
 * whose loss is the mean over its T positions, so grad_scale (1 / the
 * global batch's windows) makes the gradient that of the mean over every
 * position of the global batch. */
struct dt_loss_result dt_token_xent(const struct dt_backend *be, dt_act *dlogits, const dt_act *logits,
                                    const int32_t *tokens, int n, int T, int V, float grad_scale);

#endif
