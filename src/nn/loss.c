/* loss.c: the softmax-cross-entropy "layer" that ends every model (see loss.h). */
#include "config.h"

#include "nn/loss.h"

struct dt_loss_result dt_softmax_xent(const struct dt_backend *be, dt_act *dlogits,
                                      const dt_act *logits, const uint8_t *labels, int n,
                                      int classes, float grad_scale)
{
    struct dt_loss_result r = {0.0, 0};
    if (n > 0) r.loss_sum = be->softmax_xent(dlogits, &r.correct, logits, labels, n, classes, grad_scale);
    return r;
}
