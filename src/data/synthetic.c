/* synthetic.c: generated datasets (see synthetic.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "data/synthetic.h"
#include "runtime/rng.h"

int dt_synthetic_parse(const char *spec, struct dt_synthetic *s, dt_status *st)
{
    char *end;
    long v[5] = {0, 0, 0, 0, 51200};
    const char *p = spec;
    static const char sep[] = {'x', 'x', ':', ':', '\0'};
    int k = 0;
    memset(s, 0, sizeof *s);
    for (; k < 5; k++) {
        errno = 0;
        v[k] = strtol(p, &end, 10);
        if (errno || end == p) break;
        p = end;
        if (*p == '\0') {
            k++;
            break;
        }
        if (k == 4 || *p != sep[k]) break;
        p++;
    }
    if ((k != 4 && k != 5) || *p != '\0')
        return dt_fail(st, DT_EUSAGE, "--synthetic: expected HxWxC:CLASSES or HxWxC:CLASSES:SAMPLES, e.g. "
                       "32x32x3:10, found '%s'", spec);
    if (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[0] > 4096 || v[1] > 4096 || v[2] > 64)
        return dt_fail(st, DT_EUSAGE, "--synthetic %s: image sides must be in [1, 4096] and channels in [1, 64]", spec);
    if (v[3] < 2 || v[3] > 256)
        return dt_fail(st, DT_EUSAGE, "--synthetic %s: expected 2 to 256 classes (uint8 labels), found %ld", spec, v[3]);
    if (v[4] < 1 || v[4] > (1L << 40))
        return dt_fail(st, DT_EUSAGE, "--synthetic %s: expected 1 to 2^40 samples, found %ld", spec, v[4]);
    *s = (struct dt_synthetic){(int)v[0], (int)v[1], (int)v[2], (int)v[3], v[4]};
    return DT_OK;
}

void dt_dataset_open_synthetic(struct dt_dataset *ds, const struct dt_synthetic *s, uint64_t seed)
{
    memset(ds, 0, sizeof *ds);
    ds->synthetic = 1;
    ds->synth_seed = seed ^ 0x5f17ec0ffeeULL;
    ds->nfiles = 1;
    ds->shape = (struct dt_shape){s->h, s->w, s->c};
    ds->classes = s->classes;
    struct dt_split *tr = &ds->split[DT_TRAIN];
    tr->present = 1;
    tr->n = s->n;
    tr->file_start = dt_xcalloc(2, sizeof(int64_t));
    tr->file_start[1] = s->n;
    ds->split[DT_TEST].file_start = dt_xcalloc(2, sizeof(int64_t));
}

void dt_synthetic_rows(const struct dt_dataset *ds, const int64_t *idx, int n, uint8_t *images, uint8_t *labels)
{
    size_t row = dt_shape_size(ds->shape);
    for (int i = 0; i < n; i++) {
        uint64_t base = dt_mix64(ds->synth_seed ^ (uint64_t)idx[i] * 0xd1342543de82ef95ULL);
        uint8_t *img = images + (size_t)i * row;
        for (size_t j = 0; j < row; j += 8) {
            uint64_t r = dt_mix64(base + j);
            size_t k = row - j < 8 ? row - j : 8;
            memcpy(img + j, &r, k);
        }
        labels[i] = (uint8_t)(dt_mix64(base ^ 0x1abe1ULL) % (uint64_t)ds->classes);
    }
}
