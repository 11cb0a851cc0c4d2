/* keras.h: a model's weights as a Keras 3 .weights.h5 file.
 *
 * The layout model.load_weights() reads (checked against Keras 3.0.5, 3.8
 * and 3.15 by tests/interop/): /layers/<name>/vars/0 (kernel) and /1 (bias)
 * for each layer, names by class in snake case numbered per model
 * (conv2d, conv2d_1, dense, ...), which dtrain's layer names already are;
 * weightless layers get an empty vars group, including the Flatten that
 * Keras has before a Dense on an image (dtrain's Dense flattens NHWC itself,
 * the same order); /vars for the model; every vars group has a "name"
 * attribute. Kernels are HWIO for Conv2D and [in][units] for Dense, as in
 * dtrain's parameter block, so no value is moved. */
#ifndef DT_KERAS_H
#define DT_KERAS_H

#include "nn/model.h"
#include "runtime/status.h"

/* Serial (one rank). params: host [m->nparams]; buffers: host
 * [m->nbuffers] (a BatchNormalization's vars are gamma, beta, moving_mean,
 * moving_variance). Sequential models only: one with add or route layers is
 * refused (its Keras form would be a functional model whose layer names
 * depend on how it was built). Written to a temporary name and renamed, so
 * a failed export leaves no half-written file. */
int dt_keras_export(const char *path, const struct dt_model *m, const float *params, const float *buffers,
                    dt_status *st);

#endif
