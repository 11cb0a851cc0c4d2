#!/bin/sh
# preflight.sh: dtrain --preflight on one host (tests/cluster/run.sh runs it
# across hosts): every row is there and the verdict is the exit code; each
# failing check ends the run with exit 1 and one error line naming the check
# and where; the checkpoint directory it probes is left as it was; with
# one-sided windows turned off (DTRAIN_NO_RMA) their row is a warning, not a
# failure; an emulated second node (--ranks-per-node 1) gets the network row.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/preflight.$$
rm -rf "$T"
mkdir -p "$T"
"$MKFIXTURE" good "$T/good.h5" 64 >/dev/null || { echo "mkfixture failed"; exit 99; }
"$MKFIXTURE" not-hdf5 "$T/text.h5" 64 >/dev/null || { echo "mkfixture failed"; exit 99; }

rows='same dtrain and MPI everywhere|MPI thread level|shared memory inside each node|one-sided windows across the job|input files on every node|checkpoint directory on every node|network between nodes|one GPU per rank'
run_np 2 --preflight --checkpoint-dir "$T/ck/sub" "$T/good.h5"
n=$(grep -Ec "^($rows) " "$out")
if [ "$rc" = 0 ] && [ "$n" = 8 ] && grep -q '^preflight: no check failed' "$out" &&
   grep -q '^input files on every node *ok *1 file' "$out" &&
   grep -q '^checkpoint directory on every node ok .*written from each of 1 node, seen by all 2 ranks' "$out" &&
   grep -q '^network between nodes *skip *one node' "$out" && [ ! -e "$T/ck" ] && [ ! -s "$err" ]; then
  pass "2 ranks: 8 rows, exit 0, the checkpoint directory it made is gone again"
else
  fail "preflight ok case: rc=$rc, $n rows"; cat "$out" "$err" >&2
fi

expect_fail 1 "^dtrain: error: preflight: input files on every node: rank 0 on .*: $T/none.h5: No such file or directory" \
  2 --preflight "$T/none.h5"
expect_fail 1 "^dtrain: error: preflight: input files on every node: rank 0 on .*: $T/text.h5: not an HDF5 file" \
  2 --preflight "$T/text.h5"
: >"$T/plain-file"
expect_fail 1 "^dtrain: error: preflight: checkpoint directory on every node: rank 0 on .*: cannot create $T/plain-file/ck" \
  2 --preflight --checkpoint-dir "$T/plain-file/ck"
expect_fail 1 "^dtrain: error: preflight: one GPU per rank: " 2 --preflight --device cuda

# No one-sided windows: a warning naming what falls back, and exit 0.
out=$TEST_TMP/out.$$; err=$TEST_TMP/err.$$
DTRAIN_NO_RMA=1 launch 2 -x DTRAIN_NO_RMA "$DTRAIN" --preflight >"$out" 2>"$err"; rc=$?
if [ "$rc" = 0 ] && grep -q '^one-sided windows across the job *warn *one-sided windows turned off (DTRAIN_NO_RMA=1): the stall watchdog reports with two-sided messages' "$out" &&
   grep -q '^input files on every node *skip *no input files given' "$out"; then
  pass "DTRAIN_NO_RMA=1: the one-sided row warns and names the fallbacks; no inputs: skipped; exit 0"
else
  fail "no-RMA preflight: rc=$rc"; cat "$out" "$err" >&2
fi

# Two emulated nodes: each link measured beside the all-reduce.
run_np 2 --preflight --ranks-per-node 1 --synthetic 8x8x3:4
if [ "$rc" = 0 ] && grep -Eq '^network between nodes *(ok|warn) .*<->.*: [0-9.]+ GB/s, [0-9.]+ us one way; all-reduce auto \((mpi|ring|hier)\) at 1 MiB: busbw [0-9.]+ GB/s' "$out" &&
   grep -q '^input files on every node *skip *--synthetic' "$out"; then
  pass "--ranks-per-node 1: $(grep '^network' "$out" | cut -c1-150)"
else
  fail "emulated nodes: rc=$rc"; cat "$out" "$err" >&2
fi

rm -rf "$T"
finish
