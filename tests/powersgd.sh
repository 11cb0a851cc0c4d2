#!/bin/sh
# powersgd.sh: --grad-compression powersgd:R trains, at 2 and 3 ranks.
#
# Small Fashion-MNIST, the CNN, rank 2: the start-up line says what is
# compressed, the replicas stay bitwise identical after every epoch (the
# trainer compares hashes of every rank's parameters), and the loss falls,
# with the ring and MPI's all-reduce, overlapped with backward or not; a
# resumed run notes that the compressor's state starts afresh. Then
# the usage errors: a malformed R, and the strategies and options PowerSGD
# cannot work with, each with its message and exit 2 on every rank.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?

loss() { sed -n "s/^Epoch $2\/3 - .* - loss: \([0-9.]*\) .*/\1/p" "$1"; }

train() { # train NP ALLREDUCE --overlap|--no-overlap
  np=$1 algo=$2 ov=$3
  run_np "$np" "$fm" --epochs 3 --steps-per-epoch 15 --batch-size 32 --no-validation --verbose \
    --grad-compression powersgd:2 --allreduce "$algo" "$ov"
  what="np=$np powersgd:2 --allreduce $algo $ov"
  same=$(grep -c "^epoch [123]: parameters and statistics bitwise identical on all $np ranks" "$out")
  first=$(loss "$out" 1) last=$(loss "$out" 3)
  how=$([ "$ov" = --overlap ] && echo "overlapped with backward" || echo "after backward")
  if [ "$rc" != 0 ]; then fail "$what: exit $rc"; cat "$err" >&2; return; fi
  if ! grep -q '^powersgd:2: [1-9][0-9]* of [0-9]* tensors compressed, .* floats per step' "$out" ||
     ! grep -q "all-reduce $algo (powersgd:2), .*$how" "$out"; then
    fail "$what: no start-up line saying what is compressed and how"; head -5 "$out" >&2; return
  fi
  if [ "$same" != 3 ]; then fail "$what: $same of 3 epochs bitwise identical on all ranks"; cat "$out" >&2; return; fi
  if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }'; then
    pass "$what: replicas bitwise identical after each epoch, loss $first -> $last"
  else
    fail "$what: the loss did not fall ($first -> $last)"
  fi
}
train 2 ring --overlap
train 2 ring --no-overlap
train 2 mpi --overlap
train 2 mpi --no-overlap
train 3 ring --overlap
train 3 mpi --no-overlap

# A resumed run says that the error buffers and Q start afresh.
ck=$TEST_TMP/psgd-ck.$$
rm -rf "$ck"; mkdir -p "$ck"
run_np 2 "$fm" --epochs 1 --steps-per-epoch 3 --no-validation --grad-compression powersgd:2 --checkpoint-dir "$ck"
run_np 2 "$fm" --epochs 2 --steps-per-epoch 3 --no-validation --grad-compression powersgd:2 --checkpoint-dir "$ck" \
  --resume latest
if [ "$rc" = 0 ] && grep -q '^dtrain: note: powersgd:2 starts afresh: checkpoints hold neither its error buffers' "$out"; then
  pass "a resumed powersgd run says its error buffers and Q start afresh"
else
  fail "resumed powersgd run: rc=$rc, no note"; cat "$out" "$err" >&2
fi
rm -rf "$ck"

# --- usage errors: exit 2, one message from rank 0 ---
rank_form="expected powersgd:R with a rank R in 1..256 (e.g. powersgd:4)"
expect_fail 2 "--grad-compression: $rank_form, found 'powersgd'" 2 "$fm" --grad-compression powersgd
expect_fail 2 "--grad-compression: $rank_form, found 'powersgd:0'" 2 "$fm" --grad-compression powersgd:0
expect_fail 2 "--grad-compression: $rank_form, found 'powersgd:x'" 2 "$fm" --grad-compression powersgd:x
expect_fail 2 "--grad-compression: $rank_form, found 'powersgd:257'" 2 "$fm" --grad-compression powersgd:257
expect_fail 2 "--grad-compression: expected none, fp16, bf16 or powersgd:R, found 'int8'" 2 "$fm" --grad-compression int8
only="only with the mirrored and multi-worker strategies (or auto), whose all-reduce sums the whole gradient"
for s in sharded central-storage parameter-server; do
  expect_fail 2 "--grad-compression powersgd:2: $only on every rank (strategy $s)" 2 "$fm" \
    --grad-compression powersgd:2 --strategy "$s" --epochs 1
done
expect_fail 2 "--compress-cross-only: compresses the fp16/bf16 transport between nodes; --grad-compression powersgd:2" \
  2 "$fm" --grad-compression powersgd:2 --compress-cross-only
finish
