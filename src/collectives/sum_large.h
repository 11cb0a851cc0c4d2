/* sum_large.h: MPI_Allreduce sums of host buffers of any length.
 *
 * For small host-side sums outside the gradient path (batch-norm running
 * statistics, metrics, replica checks); the gradient algorithms live in
 * src/collectives/, one file each, registered in coll.c. Counts beyond
 * INT_MAX elements are sent in pieces. */
#ifndef DT_SUM_LARGE_H
#define DT_SUM_LARGE_H

#include <mpi.h>
#include <stddef.h>

/* In place: buf[i] = sum over ranks of buf[i]. Every rank ends with the same
 * bits (MPI_Allreduce's reduction order is fixed for a given communicator). */
void dt_allreduce_sum_f32(float *buf, size_t n, MPI_Comm comm);
void dt_allreduce_sum_f64(double *buf, size_t n, MPI_Comm comm);

#endif
