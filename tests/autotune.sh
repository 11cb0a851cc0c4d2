#!/bin/sh
# autotune.sh: --autotune times configurations on the run's first steps,
# chooses by measured time, keeps the choice, and refuses what it cannot do.
#
# At 2 ranks on a synthetic set (the cnn, one 0.9 MB gradient block):
# - the report lists every configuration and the choice; the cache (in a
#   directory made for it) holds one line with the run's key; the replicas
#   stay bitwise identical at every epoch end while tuning spans epochs;
# - a second run with the same key uses the kept choice, times nothing, trains;
# - DTRAIN_TEST_SLOW_ALLREDUCE (runtime/fault.h) adds 150 ms to each call of
#   the named algorithms: with auto, mpi and hier slowed, ring (the one left)
#   is chosen; with ring slowed, ring is not chosen and the choice is the
#   fastest line of the report;
# - bad input: --autotune-steps 0, an unwritable cache (a warning, the run
#   succeeds), a corrupt cache line (a warning naming file:line, the valid
#   line still used), --strategy sharded (usage error, exit 2), and a run too
#   short to finish tuning (says so, keeps nothing).
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/autotune.$$
rm -rf "$T"
mkdir -p "$T"
base="--synthetic 28x28x1:10:1024 --batch-size 16 --no-validation --autotune --autotune-steps 1"
long="--epochs 3 --steps-per-epoch 8"

# --- report, cache, identical replicas ---
run_np 2 $base $long -v --autotune-cache "$T/c/a.tsv"
n=$(grep -c '^dtrain: autotune:   --allreduce ' "$out")
if [ "$rc" = 0 ] && grep -q '^dtrain: autotune: [0-9]* configurations in [0-9]* steps' "$out" && [ "$n" -ge 4 ] &&
   grep -q "^dtrain: autotune: chose --allreduce [a-z]* --bucket-mb [0-9.]* --[a-z-]*overlap: .*; kept in $T/c/a.tsv\$" "$out"; then
  pass "report: $n configurations listed, $(grep '^dtrain: autotune: chose' "$out" | cut -d: -f3)"
else
  fail "report: rc=$rc, $n configurations"; cat "$out" "$err" >&2
fi
grep -q '^dtrain: autotune:   --allreduce auto --bucket-mb 1 --no-overlap .* (defaults)$' "$out" &&
  pass "the configured settings are timed first" || fail "defaults not first: $(grep autotune: "$out" | head -3)"
key=$(printf '1x2\tmirrored\t225034:[0-9a-f]*\t16\tfp32\tnone\t[a-z]*\t[0-9.]*\to[nf]*\t[0-9.]*\t')
[ "$(wc -l <"$T/c/a.tsv")" = 1 ] && grep -q "^$key" "$T/c/a.tsv" && pass "cache: one line with the key" ||
  { fail "cache file:"; cat "$T/c/a.tsv" >&2; }
[ "$(grep -c '^epoch [123]: parameters and statistics bitwise identical on all 2 ranks' "$out")" = 3 ] &&
  pass "replicas bitwise identical at each epoch end while tuning" || { fail "identical lines"; cat "$out" >&2; }

# --- the kept choice, no tuning ---
run_np 2 $base $long --autotune-cache "$T/c/a.tsv"
if [ "$rc" = 0 ] && grep -q "^dtrain: autotune: using the choice kept in $T/c/a.tsv from " "$out" &&
   ! grep -q 'configurations in' "$out" && grep -q '^Epoch 3/3' "$out" && [ "$(wc -l <"$T/c/a.tsv")" = 1 ]; then
  pass "second run: $(grep 'using the choice' "$out" | cut -d: -f3-)"
else
  fail "second run: rc=$rc"; cat "$out" "$err" >&2
fi

# --- the choice follows measured time ---
DTRAIN_TEST_SLOW_ALLREDUCE=auto:150,mpi:150,hier:150 run_np 2 $base $long --autotune-cache "$T/slow1.tsv"
[ "$rc" = 0 ] && grep -q '^dtrain: autotune: chose --allreduce ring ' "$out" &&
  pass "auto, mpi, hier slowed: ring chosen" || { fail "slowed all but ring: rc=$rc"; cat "$out" "$err" >&2; }
DTRAIN_TEST_SLOW_ALLREDUCE=ring:150 run_np 2 $base $long --autotune-cache "$T/slow2.tsv"
chosen=$(sed -n 's/^dtrain: autotune: chose .*: \([0-9.]*\) ms\/step (defaults.*/\1/p' "$out")
least=$(sed -n 's/^dtrain: autotune:   --allreduce .* \([0-9.]*\) ms\/step.*/\1/p' "$out" | sort -g | head -1)
ring=$(sed -n 's/^dtrain: autotune:   --allreduce ring .* \([0-9.]*\) ms\/step.*/\1/p' "$out")
if [ "$rc" = 0 ] && [ -n "$chosen" ] && [ "$chosen" = "$least" ] && ! grep -q '^dtrain: autotune: chose --allreduce ring' "$out" &&
   awk "BEGIN{exit !($ring >= 150)}"; then
  pass "ring slowed ($ring ms/step): not chosen; the fastest line ($least ms/step) is"
else
  fail "ring slowed: rc=$rc chosen=$chosen least=$least ring=$ring"; cat "$out" "$err" >&2
fi

# --- bad input ---
expect_fail 2 '--autotune-steps: expected an integer in \[1, 1000\], found 0' 2 $base --autotune-steps 0
expect_fail 2 '--autotune: tunes the all-reduce of --strategy mirrored and multi-worker; this run.s strategy is sharded' \
  2 $base --strategy sharded
: >"$T/file"
run_np 2 $base $long --autotune-cache "$T/file/a.tsv"
[ "$rc" = 0 ] && grep -q "^dtrain: warning: --autotune-cache $T/file/a.tsv: cannot write it (.*); the choice is not kept" "$err" &&
  grep -q 'not kept$' "$out" && pass "unwritable cache: a warning, the run succeeds" ||
  { fail "unwritable cache: rc=$rc"; cat "$out" "$err" >&2; }
{ echo "not a cache line"; cat "$T/c/a.tsv"; } >"$T/bad.tsv"
run_np 2 $base $long --autotune-cache "$T/bad.tsv"
[ "$rc" = 0 ] && grep -q "^dtrain: warning: --autotune-cache $T/bad.tsv:1: expected 11 tab-separated fields" "$err" &&
  grep -q 'using the choice kept in' "$out" && pass "corrupt line: a warning naming file:line, the valid line used" ||
  { fail "corrupt line: rc=$rc"; cat "$out" "$err" >&2; }
run_np 2 $base --epochs 1 --steps-per-epoch 4 --autotune-cache "$T/short.tsv"
[ "$rc" = 0 ] && grep -q '^dtrain: autotune: the run ended after 4 steps, with 1 of [0-9]* configurations timed' "$out" &&
  [ ! -e "$T/short.tsv" ] && pass "a run shorter than the tuning says so and keeps nothing" ||
  { fail "short run: rc=$rc"; cat "$out" "$err" >&2; }

rm -rf "$T"
finish
