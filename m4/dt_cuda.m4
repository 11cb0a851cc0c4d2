# dt_cuda.m4: the optional CUDA backend.
#
# --with-cuda[=DIR] (DIR defaults to /usr/local/cuda) finds nvcc, the CUDA
# runtime, cuBLAS, cuDNN and NCCL; --with-cudnn=DIR and --with-nccl=DIR name
# separate installs. NVCC_GENCODE overrides the architectures (default:
# Ampere sm_80 and Hopper sm_90 code plus compute_90 PTX, which newer GPUs
# JIT-compile). Without --with-cuda nothing about CUDA is looked for.
# Sets HAVE_CUDA (automake), DT_HAVE_CUDA (config.h), NVCC, NVCCFLAGS,
# CUDA_CFLAGS and CUDA_LIBS.

AC_DEFUN([DT_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA backend (DIR: toolkit root, default /usr/local/cuda)])],
    [], [with_cuda=no])
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn=DIR], [cuDNN install root (default: the CUDA root)])], [], [with_cudnn=])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL install root (default: the CUDA root)])], [], [with_nccl=])
  AC_ARG_VAR([NVCC], [the CUDA compiler (default: DIR/bin/nvcc)])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc (default: -O3 -g)])
  AC_ARG_VAR([NVCC_GENCODE], [nvcc -gencode flags (default: sm_80, sm_90 and compute_90 PTX)])
  dt_have_cuda=no
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_cuda" = xyes], [dt_cuda_dir=/usr/local/cuda], [dt_cuda_dir=$with_cuda])
    AS_IF([test -z "$with_cudnn"], [with_cudnn=$dt_cuda_dir])
    AS_IF([test -z "$with_nccl"], [with_nccl=$dt_cuda_dir])
    AS_IF([test -z "$NVCC"], [NVCC=$dt_cuda_dir/bin/nvcc])
    AC_MSG_CHECKING([for nvcc])
    AS_IF([test -x "$NVCC"], [AC_MSG_RESULT([$NVCC])],
          [AC_MSG_RESULT([no])
           AC_MSG_ERROR([--with-cuda: no nvcc at $NVCC; give the toolkit root (--with-cuda=DIR) or NVCC=...])])
    : ${NVCCFLAGS="-O3 -g"}
    : ${NVCC_GENCODE="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
    dt_cuda_libdir=$dt_cuda_dir/lib64
    AS_IF([test -d "$dt_cuda_libdir"], [], [dt_cuda_libdir=$dt_cuda_dir/lib])
    CUDA_CFLAGS="-isystem $dt_cuda_dir/include"  # -isystem: their headers do not pass our warnings
    CUDA_LIBS="-L$dt_cuda_libdir -Wl,-rpath,$dt_cuda_libdir"
    AS_IF([test "x$with_cudnn" != "x$dt_cuda_dir"], [
      CUDA_CFLAGS="$CUDA_CFLAGS -isystem $with_cudnn/include"
      CUDA_LIBS="$CUDA_LIBS -L$with_cudnn/lib64 -L$with_cudnn/lib -Wl,-rpath,$with_cudnn/lib64 -Wl,-rpath,$with_cudnn/lib"])
    AS_IF([test "x$with_nccl" != "x$dt_cuda_dir"], [
      CUDA_CFLAGS="$CUDA_CFLAGS -isystem $with_nccl/include"
      CUDA_LIBS="$CUDA_LIBS -L$with_nccl/lib64 -L$with_nccl/lib -Wl,-rpath,$with_nccl/lib64 -Wl,-rpath,$with_nccl/lib"])
    dt_save_CPPFLAGS=$CPPFLAGS; dt_save_LIBS=$LIBS; dt_save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LDFLAGS="$LDFLAGS $CUDA_LIBS"
    AC_CHECK_HEADERS([cuda_runtime_api.h cublas_v2.h cudnn.h nccl.h], [],
      [AC_MSG_ERROR([--with-cuda: $ac_header not found under $CUDA_CFLAGS (use --with-cudnn=DIR or --with-nccl=DIR)])])
    AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [], [AC_MSG_ERROR([--with-cuda: libcudart not found in $dt_cuda_libdir])])
    AC_CHECK_LIB([cublas], [cublasCreate_v2], [], [AC_MSG_ERROR([--with-cuda: libcublas not found])])
    AC_CHECK_LIB([cudnn], [cudnnCreate], [], [AC_MSG_ERROR([--with-cuda: libcudnn not found (--with-cudnn=DIR)])])
    AC_CHECK_LIB([nccl], [ncclCommInitRank], [], [AC_MSG_ERROR([--with-cuda: libnccl not found (--with-nccl=DIR)])])
    CPPFLAGS=$dt_save_CPPFLAGS; LIBS=$dt_save_LIBS; LDFLAGS=$dt_save_LDFLAGS
    CUDA_LIBS="$CUDA_LIBS -lnccl -lcudnn -lcublas -lcudart -lstdc++"
    dt_cuda_version=`$NVCC --version | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
    dt_have_cuda=yes
    AC_DEFINE([DT_HAVE_CUDA], [1], [Define to 1 to build the CUDA backend.])
  ])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$dt_have_cuda" = xyes])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
])
