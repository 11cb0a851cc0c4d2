#!/bin/sh
# installcheck.sh: libdtrain as a user gets it (make installcheck).
#
#   tests/installcheck.sh PREFIX SRCDIR
#
# After `make install` into PREFIX: the installed header is the only dtrain
# header there, pkg-config finds dtrain.pc, and doc/examples/custom_loop.c
# builds against the installed header and library with nothing but
# `pkg-config --cflags --libs dtrain` and MPI's compiler wrapper, then trains
# 2 ranks on a file the installed dtrain-prep generates. pkg-config's
# --define-prefix takes the prefix from where dtrain.pc lies, so a
# `make install prefix=DIR` into another directory than configure's works.
set -u
prefix=$1 srcdir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-installcheck.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

[ -f "$prefix/include/dtrain.h" ] || fail "$prefix/include/dtrain.h is not installed"
others=$(find "$prefix/include" -name '*.h' ! -name dtrain.h | head -3)
[ -z "$others" ] || fail "headers other than dtrain.h installed: $others"
pcdir=$prefix/lib/pkgconfig
[ -f "$pcdir/dtrain.pc" ] || pcdir=$(dirname "$(find "$prefix" -name dtrain.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
flags="$(pkg-config --define-prefix --cflags dtrain)" || fail "pkg-config --cflags dtrain"
libs="$(pkg-config --define-prefix --libs dtrain)" || fail "pkg-config --libs dtrain"
libdir=$(pkg-config --define-prefix --variable=libdir dtrain)
echo "pkg-config: --cflags '$flags' --libs '$libs'"
# shellcheck disable=SC2086  # the flags are words
${CC:-mpicc} $flags "$srcdir/doc/examples/custom_loop.c" -o "$T/custom_loop" $libs -Wl,-rpath,"$libdir" ||
  fail "custom_loop.c does not build against the installed library"
ldd "$T/custom_loop" | grep -q "$libdir/libdtrain.so" || fail "custom_loop is not linked to $libdir/libdtrain.so"
"$prefix/bin/dtrain-prep" --quiet --synthetic 28x28x1:10:1024:256 "$T/syn.h5" >/dev/null || fail "dtrain-prep --synthetic"
# shellcheck disable=SC2086
timeout -k 5 300 ${MPIEXEC:-mpiexec} ${MPIEXEC_FLAGS:-} -n 2 "$T/custom_loop" "$T/syn.h5" >"$T/out" 2>"$T/err" ||
  { cat "$T/err" >&2; fail "custom_loop under 2 ranks"; }
[ "$(grep -cE '^epoch [12]: loss [0-9]+\.[0-9]+' "$T/out")" = 2 ] || { cat "$T/out" >&2; fail "custom_loop's epoch lines"; }
echo "ok: custom_loop built with pkg-config against $prefix and trained 2 ranks:"
cat "$T/out"
