/* consistency.h: ranks agreeing on what they are about to do together.
 *
 * A job whose ranks disagree (another model file on one node, a different
 * step count after a mistaken restart, a bucket layout from another build)
 * would otherwise pass mismatched buffers to a collective: MPI truncation
 * errors, wrong sums or a hang. Before that, the ranks compare a few numbers
 * in one small all-reduce (each value's maximum and the negated minimum
 * together); only when they differ does anyone gather more, so that rank 0
 * can say which ranks hold which value. */
#ifndef DT_CONSISTENCY_H
#define DT_CONSISTENCY_H

#include <mpi.h>

#include "runtime/status.h"

/* Collective. n <= 16 values named by names; when describes the moment
 * ("before the first step"). DT_OK when every rank holds the same values;
 * otherwise DT_ERUNTIME on every rank, and on rank 0 a message naming each
 * differing value and which ranks hold what. */
int dt_consistency_check(MPI_Comm comm, const char *when, const long *vals, const char *const *names, int n,
                         dt_status *st);
/* The same, where text[k] != NULL says value k is the hash of that string:
 * the message then shows the strings (their first 63 bytes). */
int dt_consistency_check_text(MPI_Comm comm, const char *when, const long *vals, const char *const *names,
                              const char *const *text, int n, dt_status *st);
/* A 63-bit FNV-1a hash of a string or of n longs, for values that are not numbers. */
long dt_consistency_hash(const char *s);
long dt_consistency_hash_longs(const long *v, size_t n);

#endif
