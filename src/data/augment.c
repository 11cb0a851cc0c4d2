/* augment.c: random flip and crop (see augment.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "runtime/rng.h"

int dt_augment_parse(const char *spec, struct dt_augment *a, dt_status *st)
{
    char buf[64];
    memset(a, 0, sizeof *a);
    size_t len = strlen(spec);
    if (len >= sizeof buf || !len || spec[0] == ',' || spec[len - 1] == ',' || strstr(spec, ",,")) goto bad;
    strcpy(buf, spec);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "flip")) a->flip = 1;
        else if (!strcmp(tok, "crop")) a->pad = 4;
        else if (!strncmp(tok, "crop:", 5)) {
            char *end;
            long p = strtol(tok + 5, &end, 10);
            if (end == tok + 5 || *end || p < 1 || p > 64) goto bad;
            a->pad = (int)p;
        }
        else goto bad;
    }
    if (a->flip || a->pad) return DT_OK;
bad:
    return dt_fail(st, DT_EUSAGE, "--augment: expected flip, crop or crop:PAD (PAD 1-64), comma-separated, "
                   "e.g. flip,crop:4, found '%s'", spec);
}

void dt_augment_draw(const struct dt_augment *a, uint64_t seed, int64_t epoch, int64_t index, int *flip,
                     int *dy, int *dx)
{
    uint64_t r = dt_mix64(dt_mix64(seed ^ 0xa06e7ULL) ^ dt_mix64((uint64_t)epoch * 0x100000001b3ULL + (uint64_t)index));
    uint64_t span = 2 * (uint64_t)a->pad + 1;
    *flip = a->flip ? (int)(r & 1) : 0;
    *dy = a->pad ? (int)((r >> 8) % span) - a->pad : 0;
    *dx = a->pad ? (int)((r >> 32) % span) - a->pad : 0;
}

void dt_augment_image(uint8_t *img, int h, int w, int c, int flip, int dy, int dx, uint8_t *scratch)
{
    size_t row = (size_t)w * (size_t)c;
    memcpy(scratch, img, (size_t)h * row);
    for (int y = 0; y < h; y++) {
        int sy = y + dy;
        uint8_t *out = img + (size_t)y * row;
        if (sy < 0 || sy >= h) {
            memset(out, 0, row);
            continue;
        }
        for (int x = 0; x < w; x++) {
            int sx = (flip ? w - 1 - x : x) + dx;
            if (sx < 0 || sx >= w) memset(out + (size_t)x * c, 0, (size_t)c);
            else memcpy(out + (size_t)x * c, scratch + (size_t)sy * row + (size_t)sx * c, (size_t)c);
        }
    }
}
