# dt_libs.m4: the libraries dtrain needs, each with a clear error naming the
# Debian package and the configure option that points at another install.

# DT_CHECK_HDF5: parallel HDF5 for the MPI library in use (pkg-config
# hdf5-openmpi / hdf5-mpich, or --with-hdf5=DIR).
AC_DEFUN([DT_CHECK_HDF5], [
  AC_ARG_WITH([hdf5],
    [AS_HELP_STRING([--with-hdf5=DIR], [parallel HDF5 install prefix (default: pkg-config hdf5-$MPI_FLAVOUR)])],
    [], [with_hdf5=check])
  AS_IF([test "x$with_hdf5" != xcheck && test "x$with_hdf5" != xyes], [
    HDF5_CFLAGS="-I$with_hdf5/include"; HDF5_LIBS="-L$with_hdf5/lib -lhdf5"
  ], [
    PKG_CHECK_MODULES([HDF5], [hdf5-$MPI_FLAVOUR], [],
      [PKG_CHECK_MODULES([HDF5], [hdf5-mpi], [], [HDF5_CFLAGS=""; HDF5_LIBS="-lhdf5"])])
  ])
  dt_save_CPPFLAGS="$CPPFLAGS"; dt_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $HDF5_CFLAGS"; LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([for parallel HDF5 (H5Pset_fapl_mpio)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>
#ifndef H5_HAVE_PARALLEL
#error HDF5 is not built with MPI
#endif]], [[H5Pset_fapl_mpio(H5P_DEFAULT, MPI_COMM_WORLD, MPI_INFO_NULL);]])],
    [AC_MSG_RESULT([yes]); dt_have_hdf5=yes],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([parallel HDF5 for $MPI_FLAVOUR not found.
  Install it (Debian: libhdf5-openmpi-dev for Open MPI, libhdf5-mpich-dev for MPICH)
  or give its prefix: ./configure --with-hdf5=DIR])])
  CPPFLAGS="$dt_save_CPPFLAGS"; LIBS="$dt_save_LIBS"
  AC_SUBST([HDF5_CFLAGS])
  AC_SUBST([HDF5_LIBS])
])

# DT_CHECK_DNNL: oneDNN (the CPU backend's convolutions and pooling).
AC_DEFUN([DT_CHECK_DNNL], [
  AC_ARG_WITH([dnnl],
    [AS_HELP_STRING([--with-dnnl=DIR], [oneDNN install prefix (default: system)])],
    [DNNL_CFLAGS="-I$withval/include"; DNNL_LIBS="-L$withval/lib -ldnnl"],
    [DNNL_CFLAGS=""; DNNL_LIBS="-ldnnl"])
  dt_save_CPPFLAGS="$CPPFLAGS"; dt_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $DNNL_CFLAGS"; LIBS="$DNNL_LIBS $LIBS"
  AC_MSG_CHECKING([for oneDNN >= 2.0 (dnnl_primitive_create)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR < 2
#error oneDNN too old
#endif]], [[dnnl_engine_t e; dnnl_engine_create(&e, dnnl_cpu, 0);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([oneDNN not found (needed for CPU convolutions).
  Install it (Debian: libdnnl-dev) or give its prefix: ./configure --with-dnnl=DIR])])
  CPPFLAGS="$dt_save_CPPFLAGS"; LIBS="$dt_save_LIBS"
  AC_SUBST([DNNL_CFLAGS])
  AC_SUBST([DNNL_LIBS])
])

# DT_CHECK_CBLAS: a CBLAS for dense layers; OpenBLAS by default.
AC_DEFUN([DT_CHECK_CBLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=LIB], [CBLAS library to link (default: openblas via pkg-config)])],
    [], [with_blas=openblas])
  AS_IF([test "x$with_blas" = xopenblas],
    [PKG_CHECK_MODULES([BLAS], [openblas], [], [BLAS_CFLAGS=""; BLAS_LIBS="-lopenblas"])],
    [BLAS_CFLAGS=""; BLAS_LIBS="-l$with_blas"])
  dt_save_CPPFLAGS="$CPPFLAGS"; dt_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"; LIBS="$BLAS_LIBS $LIBS"
  AC_MSG_CHECKING([for cblas_sgemm in $BLAS_LIBS])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 0, 0, 0, 1.0f, 0, 1, 0, 1, 0.0f, 0, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([no CBLAS found (needed for dense layers).
  Install OpenBLAS (Debian: libopenblas-dev) or name another: ./configure --with-blas=LIB])])
  AC_CHECK_FUNCS([openblas_set_num_threads openblas_get_corename])
  CPPFLAGS="$dt_save_CPPFLAGS"; LIBS="$dt_save_LIBS"
  AC_SUBST([BLAS_CFLAGS])
  AC_SUBST([BLAS_LIBS])
])

# DT_CHECK_ZLIB: dtrain-prep reads gzip-compressed IDX files.
AC_DEFUN([DT_CHECK_ZLIB], [
  AC_CHECK_HEADER([zlib.h], [], [AC_MSG_ERROR([zlib.h not found (dtrain-prep reads .gz IDX files). Install zlib (Debian: zlib1g-dev)])])
  AC_CHECK_LIB([z], [gzopen], [ZLIB_LIBS="-lz"], [AC_MSG_ERROR([libz not found. Install zlib (Debian: zlib1g-dev)])])
  AC_SUBST([ZLIB_LIBS])
])

# DT_CHECK_CHECK: the unit-test framework. Without it dtrain builds, but
# `make check` refuses to run rather than silently skipping the unit tests.
AC_DEFUN([DT_CHECK_CHECK], [
  PKG_CHECK_MODULES([CHECK], [check >= 0.11], [dt_have_check=yes],
    [dt_have_check=no
     AC_MSG_WARN([Check (unit-test framework) not found: make check will fail. Install it (Debian: check)])])
  AM_CONDITIONAL([HAVE_CHECK], [test "x$dt_have_check" = xyes])
])

# DT_SUMMARY: what configure found, one line each.
AC_DEFUN([DT_SUMMARY], [
  dt_ok="✓"; dt_no="✗"
  AS_IF([test "x$dt_have_check" = xyes], [dt_check_mark=$dt_ok], [dt_check_mark=$dt_no])
  AS_IF([test "x$ac_cv_func_openblas_set_num_threads" = xyes], [dt_ob="(openblas_set_num_threads)"], [dt_ob=""])
  AS_IF([test "x$dt_have_cuda" = xyes],
        [dt_cuda_line="$dt_ok CUDA         $dt_cuda_version: $NVCC $NVCC_GENCODE; $CUDA_LIBS"],
        [dt_cuda_line="$dt_no CUDA         not requested (./configure --with-cuda for the GPU backend)"])
  cat <<DT_EOF

dtrain $PACKAGE_VERSION configured
  $dt_ok MPI          $MPI_FLAVOUR via $CC
  $dt_ok launcher     $MPIEXEC $MPIEXEC_FLAGS
  $dt_ok HDF5         parallel: $HDF5_CFLAGS $HDF5_LIBS
  $dt_ok oneDNN       $DNNL_CFLAGS $DNNL_LIBS
  $dt_ok CBLAS        $BLAS_LIBS $dt_ob
  $dt_ok OpenMP       $OPENMP_CFLAGS
  $dt_ok zlib         $ZLIB_LIBS
  $dt_check_mark Check        ${CHECK_LIBS:-not found: make check will fail}
  $dt_cuda_line
  warnings:   $WARN_CFLAGS
  sanitizers: ${SANITIZER_CFLAGS:-none (./configure --enable-sanitizers for ASan+UBSan)}
  fuzzing:    ${FUZZ_CFLAGS:+libFuzzer harnesses (make fuzz): }${FUZZ_CFLAGS:-off (./configure --enable-fuzzing CC=clang for make fuzz)}
  prefix:     $prefix
DT_EOF
])
