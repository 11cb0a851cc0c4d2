/* preflight.h: dtrain --preflight, the checks a user runs on an allocation
 * before a big job, on the same launcher and with the same options.
 *
 * Each check is collective and ends in one row: ok, warn (the run works, on
 * a fallback or slower), FAIL (a run would fail) or skip. Rank 0 prints the
 * table; the verdict is agreed by every rank, so the job exits with the same
 * code everywhere: 0 without a FAIL, else 1, with one error line naming the
 * first failed check. Checks: dtrain and MPI the same on every rank, the MPI
 * thread level, shared-memory windows inside each node, one-sided windows
 * across the job, the input files and the checkpoint directory as every
 * node sees them, the network between nodes beside the all-reduce, and one
 * GPU per rank with --device cuda. */
#ifndef DT_PREFLIGHT_H
#define DT_PREFLIGHT_H

#include <mpi.h>
#include <stdio.h>

#include "options.h"
#include "runtime/status.h"

/* Collective over comm. DT_OK when no check failed; otherwise DT_ERUNTIME
 * with st naming the first failure. */
int dt_preflight(const struct dt_config *cfg, MPI_Comm comm, FILE *out, dt_status *st);

#endif
