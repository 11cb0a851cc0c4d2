/* mpi_check.h: the start and the end every MPI Check test program shares.
 *
 * mpi_check_init: MPI at dtrain's thread level, this rank and the count, and
 * a scratch directory TEST_TMP/NAME.NRANKS made by rank 0 before anyone uses
 * it. mpi_check_run: runs the suite without fork() (MPI cannot survive it),
 * logs each test's result on every rank as it ends, prints the summary from
 * rank 0, and fails the program on every rank when any rank failed a check. mpi_check_expect: records a rank's first failed
 * expectation, for dt_status_agree to carry to every rank before asserting. */
#ifndef DT_MPI_CHECK_H
#define DT_MPI_CHECK_H

#include "ck_fast.h"
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/status.h"

static inline void mpi_check_init(int *argc, char ***argv, const char *name, int *rank, int *nranks, char *dir,
                                  size_t dirlen)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided); /* as dtrain does */
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    const char *tmp = getenv("TEST_TMP");
    snprintf(dir, dirlen, "%s/%s.%d", tmp ? tmp : "/tmp", name, *nranks);
    if (*rank == 0) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "cannot create %s\n", dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Record this rank's first failed expectation (later ones are dropped). */
__attribute__((format(printf, 4, 5))) static inline void mpi_check_expect(dt_status *st, int rank, int cond,
                                                                          const char *fmt, ...)
{
    if (cond || st->code != DT_OK) return;
    int k = snprintf(st->msg, sizeof st->msg, "rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg + k, sizeof st->msg - (size_t)k, fmt, ap);
    va_end(ap);
    st->code = DT_ERUNTIME;
}

static inline int mpi_check_run(Suite *s, int rank)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* MPI cannot survive fork() */
    /* Each rank logs every test's result to stdout as it ends ("-"): a check
     * failed on one rank leaves the others waiting in a collective, and the
     * timeout that ends that hang must find the failure already printed. */
    srunner_set_log(sr, "-");
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    /* A failure on any rank fails the test program on every rank. */
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
