/* loss_scale.c: dynamic and fixed loss scaling (see loss_scale.h). */
#include "config.h"

#include <string.h>

#include "optim/loss_scale.h"

void dt_loss_scale_init(struct dt_loss_scale *ls, float value)
{
    memset(ls, 0, sizeof *ls);
    ls->scale = 1.0f;
    ls->growth_interval = 2000;
    if (value == 0.0f) return;
    ls->on = 1;
    ls->dynamic = value < 0.0f;
    ls->scale = ls->dynamic ? 32768.0f : value;
}

int dt_loss_scale_update(struct dt_loss_scale *ls, int finite)
{
    if (!ls->on) return 1;
    if (!finite) {
        ls->skipped++;
        ls->clean = 0;
        /* Halving stops at 2^-24 (fp16's smallest subnormal): below it the
         * loss gradient itself would vanish. */
        if (ls->dynamic && ls->scale > 0x1p-24f) ls->scale *= 0.5f;
        return 0;
    }
    if (ls->dynamic && ++ls->clean >= ls->growth_interval) {
        ls->clean = 0;
        if (ls->scale < 0x1p100f) ls->scale *= 2.0f;
    }
    return 1;
}
