/* schedule.c: learning-rate schedules (see schedule.h). */
#include "config.h"

#include <math.h>

#include "optim/schedule.h"

float dt_lr_at(const struct dt_lr_schedule *s, long step)
{
    if (step < s->warmup) /* linear from start to the peak, reaching it at step warmup */
        return s->start + (s->peak - s->start) * (float)(step + 1) / (float)s->warmup;
    switch (s->kind) {
    case DT_LR_STEP: {
        double lr = (double)s->peak;
        long epoch = s->steps_per_epoch > 0 ? step / s->steps_per_epoch : 0;
        for (int i = 0; i < s->nboundaries; i++)
            if (epoch >= s->boundaries[i]) lr *= (double)s->factor;
        return (float)lr;
    }
    case DT_LR_COSINE: {
        long span = s->total - s->warmup;
        double x = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
        if (x > 1.0) x = 1.0;
        double pi = acos(-1.0);
        double lo = s->min_lr, hi = s->peak;
        return (float)(lo + (hi - lo) * 0.5 * (1.0 + cos(pi * x)));
    }
    default:
        return s->peak;
    }
}
