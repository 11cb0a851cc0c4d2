#!/bin/sh
# layering.sh: the source tree keeps the shape its headers promise.
#
# (a) Layers and data code need no MPI: each src/nn/*.c, each src/data/*.c
#     that does not read HDF5, and each header of nn/ and data/ (and the
#     MPI-free ones they stand on) compiles with a plain C compiler, no MPI
#     or HDF5 include path, and an mpi.h and hdf5.h first on the path that
#     stop the compiler if anything includes them.
# (b) No dependency cycles between the libraries' object files, nor between
#     the objects of each program built of several (dtrain-prep,
#     dtrain-generate) (tests/depcycles.py: A uses a symbol B defines, and B
#     one of A's), nor in the include graph of src/ (A includes B ... includes A).
# (c) No function over 120 lines and no .c/.cu file over 800 lines in src/
#     (tests/codelen.py, a brace counter of its own: no ctags needed).
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/layering.$$
rm -rf "$T"
mkdir -p "$T/poison"
S=$TOP_SRCDIR/src

# The data/ files that read HDF5 files, and so need parallel HDF5, whose
# hdf5.h includes mpi.h: dataset.c opens and reads them through HDF5's
# MPI-IO driver (tokens.c its token streams), rowmap.c asks HDF5 where each
# dataset's rows lie.
NEEDS_HDF5="dataset.c tokens.c rowmap.c"
# Headers of data/ with a collective in them: dataset.h (dt_dataset_open).
NEEDS_MPI_H="dataset.h"

# ---- (a) nn/ and data/ without MPI -----------------------------------------
echo '#error "this file must compile without MPI (see tests/layering.sh)"' >"$T/poison/mpi.h"
echo '#error "this file must compile without HDF5 (see tests/layering.sh)"' >"$T/poison/hdf5.h"
PLAIN_CC=
for c in ${LAYERING_CC:-} cc gcc clang; do
  if command -v "$c" >/dev/null 2>&1; then PLAIN_CC=$c; break; fi
done
# gnu11, not c11: the code uses POSIX (clock_gettime, sigset_t), which strict
# C11 hides; what matters here is the include path.
plain() {
  "$PLAIN_CC" -std=gnu11 -fsyntax-only -Werror=implicit-function-declaration \
    -I"$T/poison" -I"$S" -I"$TOP_BUILDDIR" "$@"
}
if [ -z "$PLAIN_CC" ]; then
  fail "(a) no plain C compiler (cc, gcc or clang) on PATH"
else
  n=0
  files="$S/nn/*.c $S/nn/*.h $S/tensor.h $S/backend.h $S/runtime/status.h $S/runtime/log.h $S/runtime/half.h"
  for f in "$S"/data/*.c "$S"/data/*.h; do
    case " $NEEDS_HDF5 $NEEDS_MPI_H " in *" $(basename "$f") "*) continue ;; esac
    files="$files $f"
  done
  for f in $files; do
    n=$((n + 1))
    case $f in
      *.c) src=$f ;;
      *) src=$T/h.c; printf '#include "config.h"\n#include "%s"\n' "${f#"$S"/}" >"$src" ;; # self-contained
    esac
    plain "$src" >"$T/err" 2>&1 || { fail "(a) ${f#"$TOP_SRCDIR"/} needs MPI or HDF5 (or lacks an include):"; cat "$T/err" >&2; }
  done
  pass "(a) $n files of nn/ and data/ (and their headers) compiled with $PLAIN_CC, no MPI or HDF5"
fi

# ---- (b) no dependency cycles between object files --------------------------
if python3 "$TOP_SRCDIR/tests/depcycles.py" "$TOP_BUILDDIR" "$TOP_SRCDIR" >"$T/cycles" 2>&1; then
  pass "(b) $(tail -1 "$T/cycles")"
else
  fail "(b) dependency cycles (move what both files need into a file of its own):"
  cat "$T/cycles" >&2
fi

for prog in dtrain_prep dtrain_generate; do
  # shellcheck disable=SC2046  # the objects' names have no spaces
  set -- $(find "$TOP_BUILDDIR/src" -name "$prog-*.o" | sort)
  if [ $# -lt 2 ]; then
    fail "(b) no objects of $prog under $TOP_BUILDDIR/src (not built?)"
  elif python3 "$TOP_SRCDIR/tests/depcycles.py" "$@" >"$T/cycles" 2>&1; then
    pass "(b) $prog: $(tail -1 "$T/cycles")"
  else
    fail "(b) dependency cycles in $prog (move what both files need into a file of its own):"
    cat "$T/cycles" >&2
  fi
done
if python3 "$TOP_SRCDIR/tests/depcycles.py" --includes "$TOP_SRCDIR" >"$T/cycles" 2>&1; then
  pass "(b) $(tail -1 "$T/cycles")"
else
  fail "(b) include cycles:"
  cat "$T/cycles" >&2
fi

# ---- (c) function and file lengths ------------------------------------------
if python3 "$TOP_SRCDIR/tests/codelen.py" --function-lines 120 --file-lines 800 "$S" >"$T/len" 2>&1; then
  pass "(c) no function over 120 lines, no .c/.cu file over 800 lines in src/"
else
  fail "(c) too long to read:"
  cat "$T/len" >&2
fi

rm -rf "$T"
finish
