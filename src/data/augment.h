/* augment.h: per-epoch data augmentation of training images (CIFAR-style:
 * random horizontal flip, random crop from a zero-padded image).
 *
 * --augment flip,crop[:PAD] (PAD 4 by default). What happens to a sample is
 * drawn from (seed, epoch, sample index) alone, so it does not depend on the
 * rank count or on which rank reads the sample, and a resumed run augments
 * exactly as the uninterrupted one. Applied to the uint8 rows after they
 * are read, before the upload; validation data is never augmented. */
#ifndef DT_AUGMENT_H
#define DT_AUGMENT_H

#include <stdint.h>

#include "runtime/status.h"

struct dt_augment {
    int flip;   /* random horizontal flip, probability 1/2 */
    int pad;    /* random crop: shift by -pad..pad in each direction, zero fill; 0 = off */
};

/* The option's value ("flip", "crop", "crop:4", "flip,crop:2"). */
int dt_augment_parse(const char *spec, struct dt_augment *a, dt_status *st);
/* What to do to sample index in epoch: flip or not, and the shift. */
void dt_augment_draw(const struct dt_augment *a, uint64_t seed, int64_t epoch, int64_t index, int *flip,
                     int *dy, int *dx);
/* Apply to one HxWxC image in place: out[y][x] = in[y + dy][x' + dx] (x' mirrored when flip), 0 outside. */
void dt_augment_image(uint8_t *img, int h, int w, int c, int flip, int dy, int dx, uint8_t *scratch);

#endif
