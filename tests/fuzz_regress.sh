#!/bin/sh
# fuzz_regress.sh: replay the fuzzing corpus through every parser, no crash.
#
# tests/fuzz/regress_NAME is the libFuzzer harness tests/fuzz/fuzz_NAME.c
# linked with tests/fuzz/standalone.c by the normal compiler, so this runs in
# every build (gcc, no libFuzzer): each file of tests/fuzz/corpus/NAME (the
# seeds: valid inputs and near-misses) and of tests/fuzz/crashes/NAME (inputs
# that once crashed a parser) goes through the parser once. A crash, a
# sanitizer report (--enable-sanitizers) or a refusal without a message
# (the harness aborts) fails the test and names the input. The model files
# dtrain ships (inputs/*.cfg) are seeds of model_file too, read from inputs/.
. "$TOP_SRCDIR/tests/common.sh"
# The MPI harnesses never call MPI_Finalize (see tests/fuzz/fuzz_dataset.c):
# Open MPI's allocations at exit are not leaks of ours.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}leak_check_at_exit=0"
for name in idx model_file options dataset checkpoint; do
  prog=$TOP_BUILDDIR/tests/fuzz/regress_$name
  dirs=$TOP_SRCDIR/tests/fuzz/corpus/$name
  [ -d "$TOP_SRCDIR/tests/fuzz/crashes/$name" ] && dirs="$dirs $TOP_SRCDIR/tests/fuzz/crashes/$name"
  [ "$name" = model_file ] && dirs="$dirs $TOP_SRCDIR/inputs/*.cfg"
  log=$TEST_TMP/fuzz_regress.$name.$$
  # shellcheck disable=SC2086
  if timeout -k 5 "${DT_TEST_TIMEOUT:-300}" "$prog" $dirs >"$log" 2>&1; then
    pass "$name: $(tail -1 "$log")"
  else
    fail "$name: $prog crashed (exit $?) after: $(grep '^# ' "$log" | tail -1)"
    tail -20 "$log" >&2
  fi
  rm -f "$log"
done
[ "$failures" -eq 0 ]
