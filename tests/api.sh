#!/bin/sh
# api.sh: libdtrain's public API (include/dtrain.h) through its examples.
#
# 1. doc/examples/custom_loop (the seed's custom loop written against the API)
#    on 2 ranks prints the same per-epoch losses as
#    `dtrain --model mlp --epochs 2 --batch-size 64 --shard-policy data
#    --no-validation`, to the 4 decimals both print: the API's step is
#    dtrain's step (same init on rank 0 + broadcast, same shard plan, same
#    loss scaling by 1/global batch), not an approximation of it.
#    With map_threads 3 (the dataset option): the same losses; with -1:
#    DTRAIN_EUSAGE (2) on every rank and one message naming map_threads.
# 2. doc/examples/split_comm on 4 ranks: MPI_COMM_WORLD split in halves, each
#    half's communicator given to dtrain_init; half 0 also runs its own
#    collective on that communicator, half 1 trains two models in one
#    process. Both halves have 2 ranks, so their Adam MLP must again print
#    dtrain's losses (the second model in the process changes nothing), and
#    the SGD model's losses must be finite and falling.
# 3. A missing input file: every rank returns DTRAIN_EINPUT (3), rank 0's
#    message names the file, and nothing hangs.
# 4. custom_loop's dtrain_write_histograms: the same histograms, read by
#    TensorBoard, as dtrain --histogram-freq 1 --histograms weights,grads.
#
# Builds nothing: the examples come from the build (DTRAIN_EXAMPLE and
# DTRAIN_EXAMPLE_SPLIT override where).
. "$TOP_SRCDIR/tests/common.sh"
EX=${DTRAIN_EXAMPLE:-$TOP_BUILDDIR/doc/examples/custom_loop}
SPLIT=${DTRAIN_EXAMPLE_SPLIT:-$TOP_BUILDDIR/doc/examples/split_comm}
for b in "$EX" "$SPLIT"; do
  if [ ! -x "$b" ]; then echo "ERROR: $b was not built (make check builds doc/examples)"; exit 99; fi
done
fm=$(fm_small) || exit $?
T=$TEST_TMP/api.$$
mkdir -p "$T"

# dtrain's reference losses, one per line ("1 1.2293").
run_np 2 "$fm" --model mlp --epochs 2 --batch-size 64 --shard-policy data --no-validation --progress plain
sed -n 's|^Epoch \([0-9]*\)/2 .* - loss: \([0-9.]*\) .*|\1 \2|p' "$out" >"$T/dtrain"
if [ "$rc" != 0 ] || [ "$(wc -l <"$T/dtrain")" != 2 ]; then
  fail "dtrain --model mlp: exit $rc, $(wc -l <"$T/dtrain") epoch lines"; cat "$out" "$err" >&2
fi

# 1. the custom loop
launch 2 "$EX" "$fm" >"$T/loop.out" 2>"$T/loop.err"
rc=$?
sed -n 's|^epoch \([0-9]*\): loss \([0-9.]*\)$|\1 \2|p' "$T/loop.out" >"$T/loop"
if [ "$rc" = 0 ] && [ -s "$T/dtrain" ] && cmp -s "$T/dtrain" "$T/loop"; then
  pass "custom_loop -n 2 matches dtrain --model mlp: $(tr '\n' ' ' <"$T/loop")"
else
  fail "custom_loop -n 2 (exit $rc) vs dtrain --model mlp:"; paste "$T/dtrain" "$T/loop" >&2; cat "$T/loop.err" >&2
fi

launch 2 "$EX" "$fm" 2 map_threads=3 >"$T/loop3.out" 2>"$T/loop3.err"
rc=$?
sed -n 's|^epoch \([0-9]*\): loss \([0-9.]*\)$|\1 \2|p' "$T/loop3.out" >"$T/loop3"
if [ "$rc" = 0 ] && [ -s "$T/dtrain" ] && cmp -s "$T/dtrain" "$T/loop3"; then
  pass "custom_loop -n 2 with map_threads 3 matches dtrain --model mlp"
else
  fail "custom_loop -n 2 map_threads 3 (exit $rc):"; paste "$T/dtrain" "$T/loop3" >&2; cat "$T/loop3.err" >&2
fi
# shellcheck disable=SC2016
launch 2 sh -c '"$0" "$1" 2 map_threads=-1; echo "rank-exit $?"' "$EX" "$fm" >"$T/badmt.out" 2>"$T/badmt.err"
n2=$(grep -c '^rank-exit 2$' "$T/badmt.out")
nmsg=$(grep -c "^custom_loop: dtrain_dataset_open: dtrain_dataset: map_threads: expected 0 (auto) or 1 to 64 threads, found -1" "$T/badmt.err")
if [ "$n2" = 2 ] && [ "$nmsg" = 1 ]; then
  pass "map_threads -1: both ranks return 2, one message: $(grep '^custom_loop:' "$T/badmt.err")"
else
  fail "map_threads -1: $n2 of 2 ranks returned 2, $nmsg messages"; cat "$T/badmt.out" "$T/badmt.err" >&2
fi

# 2. inside a larger MPI program, on split communicators
launch 4 "$SPLIT" "$fm" >"$T/split.out" 2>"$T/split.err"
rc=$?
sed -n 's|^group 0 model 0 (mlp, adam) epoch \([0-9]*\): loss \([0-9.]*\)$|\1 \2|p' "$T/split.out" >"$T/g0"
sed -n 's|^group 1 model 0 (mlp, adam) epoch \([0-9]*\): loss \([0-9.]*\)$|\1 \2|p' "$T/split.out" >"$T/g1"
sed -n 's|^group 1 model 1 (mlp, sgd) epoch \([0-9]*\): loss \([0-9.]*\)$|\2|p' "$T/split.out" >"$T/sgd"
if [ "$rc" = 0 ] && grep -q '^split_comm: done$' "$T/split.out" &&
   grep -q '^group 0: 2 ranks, own MPI work on its communicator: ok$' "$T/split.out" &&
   cmp -s "$T/dtrain" "$T/g0" && cmp -s "$T/dtrain" "$T/g1" &&
   [ "$(wc -l <"$T/sgd")" = 2 ] && awk 'NR == 1 {a = $1} NR == 2 {b = $1} END {exit !(a > 0 && b > 0 && b < a)}' "$T/sgd"; then
  pass "split_comm -n 4: two halves train side by side; both Adam MLPs match dtrain; SGD $(tr '\n' ' ' <"$T/sgd")"
else
  fail "split_comm -n 4 (exit $rc):"; cat "$T/split.out" "$T/split.err" >&2
fi

# 4. dtrain_write_histograms: custom_loop's histograms (weights and gradients
#    after each epoch) are, as TensorBoard reads them, dtrain's own with
#    --histogram-freq 1 --histograms weights,grads for the same run.
venv=${TB_VENV:-$TOP_BUILDDIR/.venv-tensorboard}
if sh "$TOP_SRCDIR/tests/interop/setup-tensorboard.sh" "$venv" >"$T/tbsetup.log" 2>&1; then
  launch 2 "$EX" "$fm" 2 logdir="$T/tb-loop" >"$T/hl.out" 2>"$T/hl.err"
  rc1=$?
  run_np 2 "$fm" --model mlp --epochs 2 --batch-size 64 --shard-policy data --no-validation --logdir "$T/tb-dtrain" \
    --histogram-freq 1 --histograms weights,grads
  "$venv/bin/python" "$TOP_SRCDIR/tests/interop/tb_histograms.py" "$T/tb-loop/train" >"$T/h-loop" 2>&1
  "$venv/bin/python" "$TOP_SRCDIR/tests/interop/tb_histograms.py" "$T/tb-dtrain/train" >"$T/h-dtrain" 2>&1
  nh=$(grep -c '^HISTO .* step=[01] ' "$T/h-loop")
  ng=$(grep -c '^HISTO tag=[^ ]*_grad/histogram ' "$T/h-loop")
  if [ "$rc1" = 0 ] && [ "$rc" = 0 ] && [ "$nh" -ge 8 ] && [ "$ng" = $((nh / 2)) ] && cmp -s "$T/h-loop" "$T/h-dtrain"; then
    pass "dtrain_write_histograms: $nh histograms ($ng of gradients) over 2 epochs, the same as dtrain --histogram-freq 1"
  else
    fail "dtrain_write_histograms (exit $rc1; dtrain exit $rc; $nh histograms, $ng of gradients):"
    diff "$T/h-loop" "$T/h-dtrain" >&2; cat "$T/hl.err" "$err" >&2
  fi
else
  echo "SKIP (part): TensorBoard's reader could not be installed (no PyPI?): $(tail -1 "$T/tbsetup.log")"
fi

# 3. a missing file: DTRAIN_EINPUT on every rank, named, no hang
missing=$T/no-such-file.h5
# shellcheck disable=SC2016
launch 2 sh -c '"$0" "$1"; echo "rank-exit $?"' "$EX" "$missing" >"$T/bad.out" 2>"$T/bad.err"
rc=$?
n3=$(grep -c '^rank-exit 3$' "$T/bad.out")
nmsg=$(grep -c "^custom_loop: dtrain_dataset_open: .*no-such-file.h5" "$T/bad.err")
if [ "$rc" = 0 ] && [ "$n3" = 2 ] && [ "$nmsg" = 1 ]; then
  pass "missing file: both ranks return 3, one message: $(grep '^custom_loop:' "$T/bad.err")"
else
  fail "missing file: launcher exit $rc (124/137: a hang), $n3 of 2 ranks returned 3, $nmsg messages naming the file"
  cat "$T/bad.out" "$T/bad.err" >&2
fi

rm -rf "$T"
finish
