#!/bin/sh
# bench_fsdp.sh: bench/fsdp.sh end to end at a toy size (its figures come
# from benchmark runs; the memory part needs the 456 M-parameter model and
# about 11 GB, so it is not run here).
#
# - bad --only, --np, --models and --pairs: exit 2, one line naming the flag;
# - ResNet-20 at 2 ranks, one pair of 2-step epochs: both runs in the CSV
#   (mirrored and fsdp) and a report row with numbers in every column.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/bench_fsdp.$$
rm -rf "$T"
mkdir -p "$T"
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS

refused() { bench_refused fsdp.sh "$@"; } # MESSAGE ARGS...
refused "--only: expected throughput or memory, found 'speed'" --only speed
refused "--np: expected a comma list of rank counts, found '2,'" --np 2,
refused "--models: no model file inputs/resnet99.cfg" --models resnet99
refused "--pairs: expected a positive whole number, found '0'" --pairs 0

bash "$TOP_SRCDIR/bench/fsdp.sh" --build "$TOP_BUILDDIR" --only throughput --models resnet20 --np 2 --pairs 1 \
  --steps 2 --batch 8 --out "$T/runs.csv" >"$T/out" 2>"$T/err"
rc=$?
rows=$(grep -c '^resnet20,2,1,\(mirrored\|fsdp\),2,' "$T/runs.csv")
if [ "$rc" = 0 ] && [ "$rows" = 2 ] && grep -q '^resnet20  *2  *[0-9][0-9.]*  *[0-9][0-9.]*  *[0-9][0-9.]*  *1/1$' "$T/out"; then
  pass "fsdp.sh --only throughput: 2 runs in the CSV, $(grep '^resnet20 ' "$T/out")"
else
  fail "fsdp.sh toy run: rc=$rc, rows=$rows"; cat "$T/out" "$T/err" "$T/runs.csv" >&2
fi
rm -rf "$T"
finish
