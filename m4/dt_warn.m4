# dt_warn.m4: strict warnings, each kept only if the compiler accepts it.
AC_DEFUN([DT_WARN_CFLAGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [turn warnings into errors (CI does)])],
    [], [enable_werror=no])
  WARN_CFLAGS=""
  dt_save_CFLAGS="$CFLAGS"
  for dt_flag in -Wall -Wextra -Wshadow -Wpointer-arith -Wstrict-prototypes \
                 -Wmissing-prototypes -Wformat=2 -Wundef -Wcast-align \
                 -Wwrite-strings -Wvla -Wnull-dereference -Wdouble-promotion; do
    CFLAGS="$dt_save_CFLAGS -Werror $dt_flag"
    AC_MSG_CHECKING([whether $CC accepts $dt_flag])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
      [WARN_CFLAGS="$WARN_CFLAGS $dt_flag"; AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])])
  done
  CFLAGS="$dt_save_CFLAGS"
  AS_IF([test "x$enable_werror" = xyes], [WARN_CFLAGS="$WARN_CFLAGS -Werror"])
  AC_SUBST([WARN_CFLAGS])
])
