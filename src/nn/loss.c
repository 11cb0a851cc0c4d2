/* loss.c: the losses that end every model (see loss.h): softmax
 * cross-entropy over classes, and over the vocabulary at every position of
 * a token window. */
#include "config.h"

#include "nn/loss.h"

struct dt_loss_result dt_softmax_xent(const struct dt_backend *be, dt_act *dlogits,
                                      const dt_act *logits, const uint8_t *labels, int n,
                                      int classes, float grad_scale)
{
    struct dt_loss_result r = {0.0, 0.0};
    long correct = 0;
    if (n > 0) r.loss_sum = be->softmax_xent(dlogits, &correct, logits, labels, n, classes, grad_scale);
    r.correct = (double)correct;
    return r;
}

struct dt_loss_result dt_token_xent(const struct dt_backend *be, dt_act *dlogits, const dt_act *logits,
                                    const int32_t *tokens, int n, int T, int V, float grad_scale)
{
    struct dt_loss_result r = {0.0, 0.0};
    long correct = 0;
    if (n > 0) r.loss_sum = be->token_xent(dlogits, &correct, logits, tokens, n, T, V, grad_scale / (float)T) / T;
    r.correct = (double)correct / T;
    return r;
}
