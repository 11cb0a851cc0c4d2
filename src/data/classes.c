/* classes.c: the inferred class count's plausibility check (see classes.h).
 *
 * A table of 256 flags, filled while the labels are read anyway: the check
 * costs one store per label and no second pass. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "data/classes.h"

void dt_labels_init(struct dt_labels *l)
{
    memset(l, 0, sizeof *l);
    l->max = -1;
}

long dt_labels_add(struct dt_labels *l, const uint8_t *lab, size_t n)
{
    long at = -1;
    for (size_t i = 0; i < n; i++) {
        if (!l->seen[lab[i]]) {
            l->seen[lab[i]] = 1;
            l->distinct++;
        }
        if (lab[i] > l->max) { /* strictly: the first place of the largest */
            at = (long)i;
            l->max = lab[i];
        }
    }
    return at;
}

/* 10%, and at least 2: a 10-class file whose test split (or --limit-train
 * slice) misses a class or two is normal; a gap of a tenth of the classes
 * is not a few rare ones any more but a label that does not belong. */
int dt_labels_missing_allowed(int classes)
{
    return classes / 10 > 2 ? classes / 10 : 2;
}

int dt_labels_gap(const struct dt_labels *l)
{
    int classes = l->max + 1;
    return classes - l->distinct > dt_labels_missing_allowed(classes);
}

void dt_labels_describe_gap(const struct dt_labels *l, char *buf, size_t len)
{
    int classes = l->max + 1;
    snprintf(buf, len, "the largest label is %d, but only %d distinct labels occur in all the data: inferring %d "
             "classes leaves %d without a sample (at most %d may be missing)", l->max, l->distinct, classes,
             classes - l->distinct, dt_labels_missing_allowed(classes));
}
