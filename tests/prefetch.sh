#!/bin/sh
# prefetch.sh: --prefetch and --cache change where batches come from, never
# which batches: end to end at 2 ranks.
#
# - 2 epochs print the same step and epoch figures with --prefetch 0 and 2:
#   plain, with --augment flip,crop, with --grad-accum 2, with --shard-policy
#   file over shard files, and with --synthetic rows.
# - --cache: the same figures, and from epoch 2 reads come from memory.
# - Streaming: a generated file several times larger than --cache-limit 1
#   trains to the same figures as --prefetch 0, and the cache holds at most
#   1 MiB.
# - A compressed file cannot be read without HDF5: one note from rank 0
#   naming the file, and the same figures (read in the training loop).
# - A read error on one rank (injected: DTRAIN_TEST_READ_ERROR=RANK:N) ends
#   the run on every rank with one message naming the file, exit 1.
# (Bad values of the flags: cli_errors.sh.)
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/prefetch.$$
rm -rf "$T"; mkdir -p "$T"
# Step and epoch lines without timings.
figures() { sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' "$1" | grep -E '^(step|Epoch)'; }

# same NAME ARGS...: --prefetch 0 and --prefetch 2 print the same figures
same() {
  name=$1; shift
  run_np 2 "$@" --prefetch 0 --verbose
  rc0=$rc; figures "$out" >"$T/p0"; cp "$err" "$T/err0"
  run_np 2 "$@" --prefetch 2 --verbose
  figures "$out" >"$T/p2"
  if [ "$rc0" = 0 ] && [ "$rc" = 0 ] && [ "$(grep -c '^Epoch' "$T/p2")" = 2 ] && cmp -s "$T/p0" "$T/p2"; then
    pass "$name: --prefetch 2 prints the figures of --prefetch 0 ($(grep -c '^step' "$T/p2") steps, 2 epochs)"
  else
    fail "$name: rc=$rc0/$rc"; diff "$T/p0" "$T/p2" | head >&2; cat "$T/err0" "$err" >&2
  fi
}
base="--epochs 2 --batch-size 32 --steps-per-epoch 24"
same "plain" "$fm" $base
same "--augment flip,crop" "$fm" $base --augment flip,crop
same "--grad-accum 2" "$fm" $base --grad-accum 2 --augment flip
"$DTRAIN_PREP" --quiet --limit-train 1000 --limit-test 100 --shards 3 "$T/sh.h5" >/dev/null || fail "dtrain-prep --shards"
same "--shard-policy file, 3 shards" "$T"/sh-0000[0-2]-of-00003.h5 --epochs 2 --batch-size 32 --shard-policy file
same "--synthetic" --synthetic 16x16x3:10:2048 --epochs 2 --batch-size 32 --steps-per-epoch 20

# --cache: the same figures; epoch 2 hits (file policy: every sample)
run_np 2 "$T"/sh-0000[0-2]-of-00003.h5 --epochs 2 --batch-size 32 --shard-policy file --prefetch 0 --verbose
figures "$out" >"$T/nocache"
run_np 2 "$T"/sh-0000[0-2]-of-00003.h5 --epochs 2 --batch-size 32 --shard-policy file --cache --verbose
figures "$out" >"$T/cache"
line=$(grep '^  data cache ' "$out")
if [ "$rc" = 0 ] && cmp -s "$T/nocache" "$T/cache" && echo "$line" | grep -q ' 50.0% of sample reads from memory'; then
  pass "--cache, file policy: same figures; $line"
else
  fail "--cache: rc=$rc, '$line'"; diff "$T/nocache" "$T/cache" | head >&2; cat "$err" >&2
fi

# Streaming: 6000 samples of 16x16x3 (4.4 MiB of rows) through a 1 MiB cache
"$DTRAIN_PREP" --quiet --synthetic 16x16x3:10:6000 "$T/big.h5" >/dev/null || fail "dtrain-prep --synthetic"
args="$T/big.h5 --epochs 2 --batch-size 50 --model mlp --verbose"
run_np 2 $args --prefetch 0
figures "$out" >"$T/s0"
run_np 2 $args --prefetch 2 --cache --cache-limit 1
figures "$out" >"$T/s2"
line=$(grep '^  data cache ' "$out")
held=$(echo "$line" | sed -n 's/.*cache *\([0-9.]*\) MiB held.*/\1/p')
if [ "$rc" = 0 ] && cmp -s "$T/s0" "$T/s2" && [ -n "$held" ] &&
   awk -v h="$held" 'BEGIN { exit !(h > 0.9 && h <= 1.0) }' && echo "$line" | grep -q 'limit 1.00 MiB'; then
  pass "streaming 4.4 MiB through --cache-limit 1: same figures as --prefetch 0; $line"
else
  fail "streaming: rc=$rc, '$line'"; diff "$T/s0" "$T/s2" | head >&2; cat "$err" >&2
fi

# A compressed copy: rows need HDF5, so the training loop reads them
h5repack -f /train/images:GZIP=1 "$fm" "$T/gz.h5" || fail "h5repack"
run_np 2 "$T/gz.h5" $base --prefetch 2 --verbose
figures "$out" >"$T/gz"
notes=$(grep -c "^dtrain: note: --prefetch 2: $T/gz.h5: /train/images is chunked with filters (compressed)" "$err")
run_np 2 "$fm" $base --prefetch 0 --verbose
figures "$out" >"$T/plain"
if [ "$notes" = 1 ] && cmp -s "$T/gz" "$T/plain"; then
  pass "compressed file: one note naming it, same figures"
else
  fail "compressed file: $notes notes"; cat "$err" >&2; diff "$T/gz" "$T/plain" | head >&2
fi

# Read errors: the failing rank's message, on every rank, exit 1
for p in 2 0; do
  export DTRAIN_TEST_READ_ERROR=1:30
  expect_fail 1 "^dtrain: error: $fm: reading step 6 of epoch 2: Input/output error" 2 "$fm" $base --prefetch $p
  unset DTRAIN_TEST_READ_ERROR
done
export DTRAIN_TEST_READ_ERROR=2:5
expect_fail 1 "^dtrain: error: $fm: reading step 5 of epoch 1" 3 "$fm" $base --strategy parameter-server --cache
unset DTRAIN_TEST_READ_ERROR

rm -rf "$T"
finish
