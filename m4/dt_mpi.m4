# dt_mpi.m4: find MPI through its compiler wrapper and the matching launcher.
#
# DT_PROG_MPICC: CC becomes the MPI compiler wrapper (MPICC if given, else the
# first of mpicc, mpicc.openmpi, mpicc.mpich on PATH). A CC set by the user is
# kept as it is, so `CC=mpicc.mpich ./configure` selects MPICH.
AC_DEFUN([DT_PROG_MPICC], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc on PATH)])
  AS_IF([test -z "$CC"], [
    AS_IF([test -z "$MPICC"], [AC_CHECK_PROGS([MPICC], [mpicc mpicc.openmpi mpicc.mpich])])
    AS_IF([test -z "$MPICC"],
      [AC_MSG_ERROR([no MPI C compiler wrapper (mpicc) found.
  Install Open MPI (Debian: libopenmpi-dev openmpi-bin) or MPICH (Debian: libmpich-dev mpich),
  or point MPICC at your wrapper: ./configure MPICC=/path/to/mpicc])])
    CC="$MPICC"
  ])
])

# DT_CHECK_MPI: MPI_Init links; which MPI it is (openmpi | mpich | other);
# the launcher that belongs to it (MPIEXEC) and the flags tests pass to it.
AC_DEFUN([DT_CHECK_MPI], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[MPI_Init(0, 0); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build MPI programs: set CC or MPICC to an MPI compiler wrapper (mpicc)])])
  AC_MSG_CHECKING([which MPI implementation])
  dt_mpi_flavour=other
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef OPEN_MPI
#error not Open MPI
#endif]], [])], [dt_mpi_flavour=openmpi])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef MPICH_VERSION
#error not MPICH
#endif]], [])], [dt_mpi_flavour=mpich])
  AC_MSG_RESULT([$dt_mpi_flavour])
  MPI_FLAVOUR=$dt_mpi_flavour
  AC_SUBST([MPI_FLAVOUR])

  AC_ARG_VAR([MPIEXEC], [MPI launcher used by make check (default: the one matching the MPI library)])
  AC_ARG_VAR([MPIEXEC_FLAGS], [extra flags make check passes to MPIEXEC])
  AS_CASE([$dt_mpi_flavour],
    [openmpi], [dt_launchers="mpiexec.openmpi mpirun.openmpi mpiexec mpirun"],
    [mpich],   [dt_launchers="mpiexec.mpich mpiexec.hydra mpirun.mpich mpiexec mpirun"],
               [dt_launchers="mpiexec mpirun"])
  AS_IF([test -z "$MPIEXEC"], [AC_PATH_PROGS([MPIEXEC], [$dt_launchers])])
  AS_IF([test -z "$MPIEXEC"],
    [AC_MSG_ERROR([no MPI launcher (mpiexec/mpirun) for $dt_mpi_flavour found; set MPIEXEC])])
  # Tests run as root in CI and with more ranks than cores; Open MPI needs to
  # be told both; its shared-memory transport starts 3x faster than the default;
  # and a job whose ranks all exit with an error code ends at once, not after 2 s.
  # One-sided (osc) components stay at Debian's defaults, which the RMA code must work with.
  AS_IF([test -z "$MPIEXEC_FLAGS"], [
    AS_CASE([$dt_mpi_flavour],
      [openmpi], [MPIEXEC_FLAGS="--oversubscribe --mca pml ob1 --mca btl self,vader --mca odls_base_sigkill_timeout 0"
                  AS_IF([test "`id -u`" = 0], [MPIEXEC_FLAGS="--allow-run-as-root $MPIEXEC_FLAGS"])],
      [MPIEXEC_FLAGS=""])
  ])
])
