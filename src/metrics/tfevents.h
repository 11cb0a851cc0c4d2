/* tfevents.h: TensorBoard event files, written by hand (no protobuf library).
 *
 * A writer owns one file, DIR/events.out.tfevents.<unix s>.<host>.<pid>.<n>.v2,
 * a sequence of TFRecords each holding one serialized tensorflow.Event
 * (tensorflow/core/util/event.proto). TensorBoard treats each directory as a
 * run, so a trainer opens one writer per run (LOGDIR/train, LOGDIR/validation);
 * <n> counts writers in this process, so two opened in the same second never
 * share a name.
 *
 * The one design decision: only the handful of proto fields a scalar needs are
 * encoded, byte by byte:
 *
 *   TFRecord  = uint64 length (LE) | uint32 masked crc32c(length bytes)
 *             | data[length]       | uint32 masked crc32c(data)
 *   Event     = 1: wall_time double (fixed64) | 2: step int64 (varint)
 *             | 3: file_version string        | 5: summary Summary
 *   Summary   = 1: value Summary.Value (repeated; we write one)
 *   Value     = 1: tag string | 2: simple_value float (fixed32)
 *             | 5: histo HistogramProto (metrics/histogram.h encodes it)
 *
 * Fields are written in order and a zero step is left out, as proto3 does, so
 * each record is byte for byte what protobuf would serialize. The first Event
 * of a file carries file_version "brain.Event:2" (readers check it); every
 * later one a single scalar. The writer is plain C: it uses
 * no MPI, and callers decide which rank writes (rank 0).
 *
 * API:
 *   dt_tfevents_open(dir, st)      create dir (and parents), open a new file in
 *                                  it and write the version Event; NULL and st
 *                                  filled (path and strerror) on failure
 *   dt_tfevents_scalar(w, tag, value, step, wall_time, st)
 *                                  append one scalar; DT_OK or st filled
 *   dt_tfevents_histo(w, tag, histo, n, step, wall_time, st)
 *                                  append one histogram: histo[0..n) is an
 *                                  encoded HistogramProto
 *   dt_tfevents_flush(w, st)       fflush, so TensorBoard sees the events now
 *   dt_tfevents_close(w)           flush and close (NULL is fine); call flush
 *                                  first to learn of a write error
 *   dt_crc32c, dt_crc32c_mask      the checksums, exposed for tests
 *   dt_tfevents_decode             read one record back, for tests */
#ifndef DT_TFEVENTS_H
#define DT_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

struct dt_tfevents;

struct dt_tfevents *dt_tfevents_open(const char *dir, dt_status *st);
/* wall_time: seconds since the epoch (TensorBoard's relative-time axis). */
int dt_tfevents_scalar(struct dt_tfevents *w, const char *tag, float value, int64_t step,
                       double wall_time, dt_status *st);
int dt_tfevents_histo(struct dt_tfevents *w, const char *tag, const void *histo, size_t n, int64_t step,
                      double wall_time, dt_status *st);
int dt_tfevents_flush(struct dt_tfevents *w, dt_status *st);
void dt_tfevents_close(struct dt_tfevents *w);

/* CRC-32C (Castagnoli, reflected; init and final xor 0xffffffff), as TFRecord
 * uses, and TFRecord's mask of it: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t dt_crc32c(const void *data, size_t n);
uint32_t dt_crc32c_mask(uint32_t crc);

/* Decode the TFRecord-framed Event at buf[0..len), checking both CRCs. Fills
 * wall_time and step, file_version (NUL-terminated, "" when absent) and tag
 * and value of the first summary value ("" and 0 when absent); any output
 * pointer may be NULL, and strings are cut to fit. Returns the bytes consumed,
 * 0 when len is 0 (a clean end), -1 on a bad, short or truncated record. */
long dt_tfevents_decode(const unsigned char *buf, size_t len, double *wall_time, int64_t *step,
                        char *tag, size_t taglen, float *value, char *file_version,
                        size_t fvlen);

#endif
