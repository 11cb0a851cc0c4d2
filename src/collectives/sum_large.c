/* sum_large.c: MPI_Allreduce on flat buffers, split into INT_MAX-sized
 * pieces so counts beyond 2^31 elements work. */
#include "config.h"

#include <limits.h>

#include "runtime/checks.h"
#include "collectives/sum_large.h"

static void sum(void *buf, size_t n, MPI_Datatype type, size_t size, MPI_Comm comm)
{
    char *p = buf;
    while (n > 0) {
        int c = n > INT_MAX ? INT_MAX : (int)n;
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, c, type, MPI_SUM, comm));
        p += (size_t)c * size;
        n -= (size_t)c;
    }
}

void dt_allreduce_sum_f32(float *buf, size_t n, MPI_Comm comm) { sum(buf, n, MPI_FLOAT, sizeof(float), comm); }
void dt_allreduce_sum_f64(double *buf, size_t n, MPI_Comm comm) { sum(buf, n, MPI_DOUBLE, sizeof(double), comm); }
