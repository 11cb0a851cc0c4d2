#!/bin/sh
# synthetic.sh: --synthetic SHAPE trains without a dataset (2 ranks).
#
# Any shape the model accepts; the same seed gives the same losses at any
# time and the rows do not depend on the rank count; bad specs are refused.
. "$TOP_SRCDIR/tests/common.sh"
losses() { grep -E '^(step|Epoch)' "$1" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//'; }
T=$TEST_TMP/syn.$$
mkdir -p "$T"

run_np 2 --synthetic 32x32x3:10:1024 --epochs 1 --batch-size 32 --verbose
if [ "$rc" = 0 ] && grep -q '^dtrain .*model cnn (315722 parameters); 1024 training samples$' "$out" &&
   grep -q '^Epoch 1/1 - .* samples/s - loss: ' "$out" && grep -q '^  best accuracy ' "$out"; then
  pass "cnn on synthetic 32x32x3, 10 classes: 1024 samples, 1 epoch"
else
  fail "synthetic cnn: rc=$rc"; cat "$out" "$err" >&2
fi
losses "$out" >"$T/a"
run_np 2 --synthetic 32x32x3:10:1024 --epochs 1 --batch-size 32 --verbose
losses "$out" >"$T/b"
[ -s "$T/a" ] && cmp -s "$T/a" "$T/b" && pass "same seed, same losses" || fail "synthetic runs differ"
# the data do not depend on the rank count: 1 rank x 64 sees the same global batches as 2 x 32
run_np 1 --synthetic 32x32x3:10:1024 --epochs 1 --batch-size 64 --dropout 0 --verbose
losses "$out" | head -3 >"$T/c"
run_np 2 --synthetic 32x32x3:10:1024 --epochs 1 --batch-size 32 --dropout 0 --verbose
losses "$out" | head -3 >"$T/d"
if awk 'NR == FNR { a[FNR] = $5; next } { if ($4 != "loss:") bad = 1; d = $5 - a[FNR]; if (d < 0) d = -d; if (d > 1e-5) bad = 1 } END { exit bad }' "$T/c" "$T/d" &&
   [ -s "$T/c" ]; then
  pass "1 x 64 and 2 x 32 see the same samples (first 3 step losses agree)"
else
  fail "rank count changes the data"; paste "$T/c" "$T/d" >&2
fi
run_np 2 --synthetic 8x8x1:4:256 --model mlp --epochs 1 --batch-size 16
[ "$rc" = 0 ] && pass "mlp on 8x8x1, 4 classes" || { fail "synthetic mlp: rc=$rc"; cat "$err" >&2; }

# --augment: deterministic, and it changes what is trained on
run_np 2 --synthetic 16x16x3:4:512 --epochs 1 --batch-size 32 --verbose --augment flip,crop:2
losses "$out" >"$T/g1"
run_np 2 --synthetic 16x16x3:4:512 --epochs 1 --batch-size 32 --verbose --augment flip,crop:2
losses "$out" >"$T/g2"
run_np 2 --synthetic 16x16x3:4:512 --epochs 1 --batch-size 32 --verbose
losses "$out" >"$T/g3"
if [ "$rc" = 0 ] && [ -s "$T/g1" ] && cmp -s "$T/g1" "$T/g2" && ! cmp -s "$T/g1" "$T/g3"; then
  pass "--augment flip,crop:2: reproducible, and different from no augmentation"
else
  fail "--augment"; paste "$T/g1" "$T/g3" | head -3 >&2
fi
expect_fail 2 "--augment: expected flip, crop or crop:PAD (PAD 1-64), comma-separated, e.g. flip,crop:4, found 'rotate'" \
  2 --synthetic 16x16x3:4 --augment rotate
expect_fail 2 "--synthetic: expected HxWxC:CLASSES or HxWxC:CLASSES:SAMPLES, e.g. 32x32x3:10, found '32x32:10'" 2 --synthetic 32x32:10
expect_fail 2 "--synthetic 32x32x3:1: expected 2 to 256 classes (uint8 labels), found 1" 2 --synthetic 32x32x3:1
expect_fail 2 "--synthetic 0x32x3:10: image sides must be in" 2 --synthetic 0x32x3:10
expect_fail 2 "--synthetic: give either --synthetic or input files, not both (found 'x.h5')" 2 --synthetic 32x32x3:10 x.h5
expect_fail 2 "--monitor val_loss: there is no validation (the input has no /test split)" 2 --synthetic 32x32x3:10 --early-stopping 2
rm -rf "$T"
finish
