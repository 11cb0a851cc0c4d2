# dt_sanitizers.m4: --enable-sanitizers builds everything (the core, the
# programs and the tests) with AddressSanitizer + UndefinedBehaviorSanitizer.
#
# The flags go into SANITIZER_CFLAGS / SANITIZER_LDFLAGS, which Makefile.am
# adds to AM_CFLAGS / AM_LDFLAGS, so a user's CFLAGS stay as given. UBSan is
# made fatal (-fno-sanitize-recover) so a report fails the test that caused
# it instead of scrolling past in a log. The DT_SANITIZERS conditional makes
# `make check` export the sanitizer options and suppression files
# (tests/sanitizers/) that silence MPI's and HDF5's own leaks.
AC_DEFUN([DT_CHECK_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers],
      [build with AddressSanitizer and UndefinedBehaviorSanitizer (gcc/clang;
       make check then runs under them with tests/sanitizers/ suppressions)])],
    [], [enable_sanitizers=no])
  SANITIZER_CFLAGS=""
  SANITIZER_LDFLAGS=""
  AS_IF([test "x$enable_sanitizers" = xyes], [
    dt_san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    AC_MSG_CHECKING([whether $CC builds and links with $dt_san])
    dt_save_CFLAGS="$CFLAGS"; dt_save_LDFLAGS="$LDFLAGS"
    CFLAGS="$CFLAGS $dt_san"; LDFLAGS="$LDFLAGS $dt_san"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-sanitizers: $CC cannot link with $dt_san (gcc needs libasan and libubsan; Debian: gcc installs them)])])
    CFLAGS="$dt_save_CFLAGS"; LDFLAGS="$dt_save_LDFLAGS"
    SANITIZER_CFLAGS="$dt_san"
    SANITIZER_LDFLAGS="$dt_san"
  ])
  AC_SUBST([SANITIZER_CFLAGS])
  AC_SUBST([SANITIZER_LDFLAGS])
  AM_CONDITIONAL([DT_SANITIZERS], [test "x$enable_sanitizers" = xyes])
])
