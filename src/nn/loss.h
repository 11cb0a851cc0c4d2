/* loss.h: softmax cross-entropy with integer labels (Keras's
 * SparseCategoricalCrossentropy(from_logits=True)), fused and stable. */
#ifndef DT_LOSS_H
#define DT_LOSS_H

#include <stdint.h>

#include "backend.h"

struct dt_loss_result {
    double loss_sum;  /* summed over the batch's samples */
    long correct;     /* argmax == label */
};

/* dlogits (may be NULL for evaluation) receives d(sum loss)/d(logits) scaled
 * by grad_scale; the trainer passes 1/global_batch so that summing replicas'
 * gradients yields the mean over the global batch. */
struct dt_loss_result dt_softmax_xent(const struct dt_backend *be, dt_act *dlogits,
                                      const dt_act *logits, const uint8_t *labels, int n,
                                      int classes, float grad_scale);

#endif
