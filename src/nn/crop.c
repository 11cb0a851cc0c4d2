/* crop.c: outputs that no layer reads are not computed.
 *
 * A 'valid' max pool whose windows do not tile its input drops the input's
 * last rows and columns (Keras's floor): a 2x2/2 pool over an 11x11 map
 * reads its top-left 10x10 only. The layer that makes the map then need not
 * make the rest. A max pool just computes fewer windows; a 'valid'
 * convolution makes a top-left part of its output from a top-left part of
 * its input, so it shrinks where the layer before it can give just that
 * part, and so on up the chain. In the seed CNN the 32 -> 64 convolution,
 * 83% of the model's multiply-adds, computes 10x10 of its 11x11 outputs from
 * 12x12 of the first pool's 13x13 (which computes 12x12 windows).
 *
 * Exact: a pixel left out fed nothing but windows no one computes. Its
 * gradient was zero: it added zero products to the weight gradients and
 * gave zero to the input pixels only it read, which get zero now (a pool's
 * backward clears what its windows do not cover). What can change is the
 * order in which a library sums a shorter row (oneDNN's backward-weights);
 * tests/check_crop.c holds the logits to their uncropped bits and the
 * gradients to 1e-6.
 *
 * A strided 'valid' convolution whose windows leave a last row or column
 * out starts a chain too. Chains run through conv2d ('valid') and maxpool
 * layers whose outputs no add or route also reads; any other layer ends
 * one (a batchnorm's statistics or a dropout's random stream would change;
 * the model's input is read whole). Each layer's full keeps its Keras
 * shape for the summary.
 * DTRAIN_NO_CROP=1 leaves every layer whole. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "nn/model.h"

/* The input rows and columns that h x w windows of s reach. */
static void reach(const struct dt_conv_shape *s, int h, int w, int *ih, int *iw)
{
    *ih = (h - 1) * s->stride + s->kh;
    *iw = (w - 1) * s->stride + s->kw;
}

/* Make layer j's output its top-left h x w (and its input what that
 * needs, where the layers before can shrink too); 0 if it cannot, and then
 * nothing changed. */
static int shrink(struct dt_model *m, int j, int h, int w)
{
    if (j < 0) return 0;
    struct dt_layer *l = &m->layers[j];
    if (h == l->out.h && w == l->out.w) return 1;
    if (dt_model_read_as_src(m, j + 1)) return 0;
    if (l->ops == &dt_conv2d_ops && !l->spec.same) {
        int ih, iw;
        reach(dt_conv2d_shape(l), h, w, &ih, &iw);
        if (!shrink(m, j - 1, ih, iw)) return 0;
        dt_conv2d_resize(l, ih, iw);
        return 1;
    }
    if (l->ops == &dt_maxpool_ops) {
        int ih, iw;
        reach(dt_maxpool_shape(l), h, w, &ih, &iw);
        if (!shrink(m, j - 1, ih, iw)) ih = l->in.h, iw = l->in.w; /* fewer windows on the whole input */
        dt_maxpool_resize(l, ih, iw, h, w);
        return 1;
    }
    return 0;
}

void dt_model_plan_crops(struct dt_model *m)
{
    const char *off = getenv("DTRAIN_NO_CROP");
    if (off && *off && strcmp(off, "0")) return;
    /* from the end, so a layer's reader has shrunk before the layer is asked to */
    for (int i = m->nlayers - 1; i > 0; i--) {
        struct dt_layer *l = &m->layers[i];
        const int pool = l->ops == &dt_maxpool_ops;
        if (!pool && (l->ops != &dt_conv2d_ops || l->spec.same)) continue;
        const struct dt_conv_shape *s = pool ? dt_maxpool_shape(l) : dt_conv2d_shape(l);
        int ih, iw;
        reach(s, s->oh, s->ow, &ih, &iw);
        if ((ih == l->in.h && iw == l->in.w) || !shrink(m, i - 1, ih, iw)) continue;
        if (pool) dt_maxpool_resize(l, ih, iw, s->oh, s->ow);
        else dt_conv2d_resize(l, ih, iw);
    }
}
