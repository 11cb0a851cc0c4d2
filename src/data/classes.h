/* classes.h: how many classes a dataset has when nobody said so.
 *
 * dtrain (data/dataset.c) and dtrain-prep (prep/prep_input.c) both infer the
 * class count as the largest label + 1 when it is not declared (--num-classes,
 * dtrain-prep --classes, or the file's num_classes attribute). One stray
 * label (a 200 among 0..9) would then make a 201-way classifier without a
 * word, so both keep a table of the label values seen and refuse a count
 * that leaves too many classes without a single sample.
 *
 * The rule, kept here only: at most max(2, count / 10) of the inferred
 * classes may be missing, counted over every split and file together (a
 * small test split that lacks a class or two is fine; a gap of 190 is not).
 *
 * Needs no MPI and no HDF5: dtrain-prep links this file on its own. */
#ifndef DT_CLASSES_H
#define DT_CLASSES_H

#include <stddef.h>
#include <stdint.h>

/* The label values seen so far (all files, all splits). */
struct dt_labels {
    unsigned char seen[256]; /* seen[v]: label v occurs */
    int distinct;            /* values with seen[v] */
    int max;                 /* the largest label; -1 before any */
};

void dt_labels_init(struct dt_labels *l);
/* Adds n labels; returns the index in lab of the first occurrence of the
 * new largest label when these labels raised it, else -1. */
long dt_labels_add(struct dt_labels *l, const uint8_t *lab, size_t n);
/* The classes that may be missing when the count is inferred as classes. */
int dt_labels_missing_allowed(int classes);
/* 1 when max + 1 classes leave more than that many without a label. */
int dt_labels_gap(const struct dt_labels *l);
/* The middle of the refusal, the same in both programs: "the largest label
 * is 200, but only 11 distinct labels occur in all the data: inferring 201
 * classes leaves 190 without a sample (at most 20 may be missing)". */
void dt_labels_describe_gap(const struct dt_labels *l, char *buf, size_t len);

#endif
