/* allreduce.h: reducing flat buffers across replicas.
 *
 * This is the seam the collectives issue fills with its own algorithms (ring,
 * hierarchical, NCCL); today it is MPI_Allreduce. It knows nothing about
 * layers or models. */
#ifndef DT_ALLREDUCE_H
#define DT_ALLREDUCE_H

#include <mpi.h>
#include <stddef.h>

/* In place: buf[i] = sum over ranks of buf[i]. Every rank ends with the same
 * bits (MPI_Allreduce's reduction order is fixed for a given communicator). */
void dt_allreduce_sum_f32(float *buf, size_t n, MPI_Comm comm);
void dt_allreduce_sum_f64(double *buf, size_t n, MPI_Comm comm);

#endif
