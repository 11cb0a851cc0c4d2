/* rma.h: one-sided windows that a site's MPI may not provide.
 *
 * MPI_Win_allocate works everywhere inside a node, but across nodes it needs
 * a one-sided component that the transport supports: Debian's Open MPI 4.1
 * over TCP picks osc/rdma, which then fails ("MPI_ERR_WIN: invalid window"),
 * and MPI's default error handler aborts the job with its own text. Here the
 * window is created with errors returned, every rank learns the verdict, and
 * the caller falls back to a two-sided path and says which it took. */
#ifndef DT_RMA_H
#define DT_RMA_H

#include <mpi.h>
#include <stddef.h>

/* Collective over comm: MPI_Win_allocate(bytes, disp_unit) with errors
 * returned. 0 on every rank when it worked everywhere; otherwise non-zero on
 * every rank, why holding MPI's error string (from the lowest failing rank),
 * and no window. DTRAIN_NO_RMA=1 makes it fail as if the MPI had no
 * one-sided component (to try the fallbacks on one host). */
int dt_rma_allocate(MPI_Aint bytes, int disp_unit, MPI_Comm comm, void *base, MPI_Win *win, char *why,
                    size_t len);

/* MPI_Win_allocate_shared(bytes, disp_unit) over comm with errors returned
 * (comm's own handler is put back). Not collective beyond the call itself:
 * returns MPI's error code, MPI_SUCCESS when it worked; callers agree. */
int dt_rma_allocate_shared(MPI_Aint bytes, int disp_unit, MPI_Info info, MPI_Comm comm, void *base, MPI_Win *win);

/* The thread level MPI gives this process (MPI_Query_thread). */
int dt_mpi_thread_level(void);
const char *dt_mpi_thread_level_name(int level);

#endif
