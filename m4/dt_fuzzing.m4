# dt_fuzzing.m4: --enable-fuzzing builds the libFuzzer harnesses in tests/fuzz/
# (make fuzz, make fuzz-run FUZZ_SECONDS=N).
#
# libFuzzer ships with clang only, so the compiler must be clang; MPI then
# comes from the wrapper's flags, e.g.
#   ../configure --enable-fuzzing CC=clang \
#       CPPFLAGS="$(mpicc --showme:compile)" LIBS="$(mpicc --showme:link)"
# Everything (the core library, the programs, the harnesses) is compiled with
# coverage instrumentation plus ASan and UBSan, so a bug deep in the core is
# seen by the harness that reached it; only the harnesses link libFuzzer's
# main (FUZZ_MAIN_LDFLAGS). UBSan is fatal, so libFuzzer keeps its input.
AC_DEFUN([DT_CHECK_FUZZING], [
  AC_ARG_ENABLE([fuzzing],
    [AS_HELP_STRING([--enable-fuzzing],
      [build the libFuzzer harnesses of tests/fuzz/ (make fuzz; needs CC=clang)
       and instrument everything with ASan+UBSan for them])],
    [], [enable_fuzzing=no])
  FUZZ_CFLAGS=""
  FUZZ_LDFLAGS=""
  FUZZ_MAIN_LDFLAGS=""
  AS_IF([test "x$enable_fuzzing" = xyes], [
    AC_MSG_CHECKING([whether $CC is clang])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [[
#ifndef __clang__
#error not clang
#endif]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-fuzzing needs clang (libFuzzer is part of it): configure with
  CC=clang CPPFLAGS="\$(mpicc --showme:compile)" LIBS="\$(mpicc --showme:link)"])])
    dt_fuzz_san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    AC_MSG_CHECKING([whether $CC links libFuzzer (-fsanitize=fuzzer)])
    dt_save_CFLAGS="$CFLAGS"
    CFLAGS="$CFLAGS -fsanitize=fuzzer $dt_fuzz_san"
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { (void)data; (void)size; return 0; }]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-fuzzing: $CC cannot link -fsanitize=fuzzer (Debian: the libclang-rt-dev package of your clang)])])
    CFLAGS="$dt_save_CFLAGS"
    FUZZ_CFLAGS="-fsanitize=fuzzer-no-link $dt_fuzz_san"
    # clang < 15 has no _Float16 on x86 (runtime/half.h's fp16 conversions
    # use it); its storage-only __fp16 converts the same.
    AC_MSG_CHECKING([whether $CC supports _Float16])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [[_Float16 h = (_Float16)1.5f; return (int)(float)h;]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no, using __fp16])
       FUZZ_CFLAGS="$FUZZ_CFLAGS -D_Float16=__fp16"])
    FUZZ_LDFLAGS="$dt_fuzz_san"
    FUZZ_MAIN_LDFLAGS="-fsanitize=fuzzer"
  ])
  AC_SUBST([FUZZ_CFLAGS])
  AC_SUBST([FUZZ_LDFLAGS])
  AC_SUBST([FUZZ_MAIN_LDFLAGS])
  AM_CONDITIONAL([DT_FUZZING], [test "x$enable_fuzzing" = xyes])
])
