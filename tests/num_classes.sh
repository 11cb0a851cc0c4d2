#!/bin/sh
# num_classes.sh: a class count inferred from a stray label is refused, and
# --num-classes states it (issue 23), in dtrain and in dtrain-prep.
#
# The file is tests/bad-inputs/make_bad_inputs.py's stray-200.h5: labels
# 0..9 and one 200 at /train/labels[17], no num_classes attribute. On one
# rank (bad_inputs.sh has the 2-rank cases, each rank's exit code checked)
# dtrain refuses it with exit 3, one message naming the file, the label, the
# 11 distinct labels and --num-classes, and leaves nothing in its output
# directory; with --num-classes 201 it trains a 201-way CNN (249,673
# parameters, 225,034 at 10 classes). dtrain-prep refuses the same labels
# as IDX files, leaves no output, and with --num-classes 201 (its alias of
# --classes) writes num_classes 201, which dtrain then trains on; a file
# missing two classes is accepted. --num-classes out of range or with
# --synthetic is a usage error (exit 2). libdtrain's
# dtrain_dataset_options.num_classes, through doc/examples/custom_loop's
# num_classes=N argument: the same refusal, a 201-way MLP, 1 refused.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/numcls.$$
rm -rf "$T"
mkdir -p "$T/out"
B=$T/in
bad_inputs_corpus "$B"
DT_TEST_TIMEOUT=${DT_TEST_TIMEOUT:-60}
small="--epochs 1 --batch-size 8"
outs() { echo "--metrics $T/out/m.csv --export-keras $T/out/k.weights.h5 --checkpoint-dir $T/out/ckpt"; }

# ---- dtrain, one rank: refused, every part of the message, nothing written ----
# shellcheck disable=SC2046
expect_fail 3 "$B/stray-200.h5: /train/labels\[17\] = 200, and no num_classes attribute: the largest label is 200, but only 11 distinct labels occur" \
  1 "$B/stray-200.h5" $small $(outs)
grep '^dtrain: error: ' "$err" | grep -q -- "state the count with --num-classes N" || fail "np=1: the message does not point to --num-classes N"
left=$(find "$T/out" -mindepth 1 | head -3)
[ -z "$left" ] || fail "np=1 refusal left behind: $left"
# shellcheck disable=SC2046
expect_fail 3 "$B/stray-200.h5: /train/labels\[17\] = 200, but --num-classes is 10 (labels must be 0..9)" \
  1 "$B/stray-200.h5" --num-classes 10 $small $(outs)

# ---- dtrain: --num-classes 201 is accepted and builds a 201-way model ----
for np in 1 2; do
  run_np "$np" "$B/stray-200.h5" --num-classes 201 $small
  if [ "$rc" = 0 ] && grep -q 'model cnn (249673 parameters)' "$out" && grep -q '^Epoch 1/1' "$out"; then
    pass "np=$np --num-classes 201: trains, 249673 parameters"
  else
    fail "np=$np --num-classes 201: rc=$rc"; head -3 "$out" "$err" >&2
  fi
done
run_np 1 "$B/two-missing.h5" $small
[ "$rc" = 0 ] && grep -q 'model cnn (225034 parameters)' "$out" && pass "two classes missing: accepted, 10 classes" ||
  { fail "two-missing.h5: rc=$rc"; head -3 "$out" "$err" >&2; }

# ---- usage errors: exit 2 ----
expect_fail 2 "--num-classes: expected an integer in \[2, 256\], found 1" 1 "$B/good.h5" --num-classes 1
expect_fail 2 "--num-classes: expected an integer in \[2, 256\], found 257" 1 "$B/good.h5" --num-classes 257
expect_fail 2 "--num-classes: not used with --synthetic" 1 --synthetic 8x8x1:10 --num-classes 10

# ---- dtrain-prep: the same rule, and --num-classes ----
prep() { "$DTRAIN_PREP" --quiet --train-images "$B/stray-200-images.idx" "$@" >"$T/po" 2>"$T/pe"; prc=$?; }
prep --train-labels "$B/stray-200-labels.idx" "$T/p.h5"
if [ "$prc" = 3 ] && grep -q "^dtrain-prep: $B/stray-200-labels.idx: label 200 at index 17, and no --classes: the largest label is 200, but only 11 distinct labels" "$T/pe" &&
   grep -q -- "--num-classes N" "$T/pe" && [ "$(wc -l <"$T/pe")" = 1 ]; then
  pass "dtrain-prep refuses the stray 200: $(cat "$T/pe")"
else
  fail "dtrain-prep on the stray 200: rc=$prc"; cat "$T/pe" >&2
fi
left=$(find "$T" -maxdepth 1 -name 'p.h5*' | head -3)
[ -z "$left" ] || fail "dtrain-prep's refusal left behind: $left"
prep --train-labels "$B/stray-200-labels.idx" --num-classes 10 "$T/p.h5"
[ "$prc" = 3 ] && grep -q "label 200 at index 17 is out of range for --classes 10" "$T/pe" &&
  pass "dtrain-prep --num-classes 10: the stray label is out of range" || { fail "dtrain-prep --num-classes 10: rc=$prc"; cat "$T/pe" >&2; }
attr() { h5dump -a /num_classes "$1" 2>/dev/null | sed -n 's/^ *(0): *//p'; }
prep --train-labels "$B/stray-200-labels.idx" --num-classes 201 "$T/p201.h5"
[ "$prc" = 0 ] && [ "$(attr "$T/p201.h5")" = 201 ] && pass "dtrain-prep --num-classes 201: num_classes 201" ||
  { fail "dtrain-prep --num-classes 201: rc=$prc, num_classes '$(attr "$T/p201.h5")'"; cat "$T/pe" >&2; }
prep --train-labels "$B/two-missing-labels.idx" "$T/p10.h5"
[ "$prc" = 0 ] && [ "$(attr "$T/p10.h5")" = 10 ] && pass "dtrain-prep, two classes missing: accepted, num_classes 10" ||
  { fail "dtrain-prep two missing: rc=$prc, num_classes '$(attr "$T/p10.h5")'"; cat "$T/pe" >&2; }
# the attribute it wrote is the count dtrain trains with
run_np 2 "$T/p201.h5" $small --no-validation
[ "$rc" = 0 ] && grep -q 'model cnn (249673 parameters)' "$out" && pass "dtrain on dtrain-prep's 201-class file: 249673 parameters" ||
  { fail "dtrain on $T/p201.h5: rc=$rc"; head -3 "$out" "$err" >&2; }

# ---- libdtrain: dtrain_dataset_options.num_classes (doc/examples/custom_loop's num_classes=N) ----
EX=${DTRAIN_EXAMPLE:-$TOP_BUILDDIR/doc/examples/custom_loop}
launch 1 "$EX" "$B/stray-200.h5" 1 >"$T/ao" 2>"$T/ae"; arc=$?
[ "$arc" = 3 ] && grep -q "stray-200.h5: /train/labels\[17\] = 200, and no num_classes attribute: the largest label is 200, but only 11 distinct" "$T/ae" &&
  pass "libdtrain: the stray 200 is DTRAIN_EINPUT" || { fail "libdtrain on the stray 200: rc=$arc"; cat "$T/ae" >&2; }
launch 1 "$EX" "$B/stray-200.h5" 1 num_classes=201 >"$T/ao" 2>"$T/ae"; arc=$?
# the MLP: 784x128 + 128, then 128x201 + 201
[ "$arc" = 0 ] && grep -q "model mlp (126409 parameters)" "$T/ao" &&
  pass "libdtrain: num_classes 201 builds a 201-way MLP" || { fail "libdtrain num_classes 201: rc=$arc"; cat "$T/ao" "$T/ae" >&2; }
launch 1 "$EX" "$B/stray-200.h5" 1 num_classes=1 >"$T/ao" 2>"$T/ae"; arc=$?
[ "$arc" = 2 ] && grep -q "num_classes: expected 0 (from the files) or 2 to 256, found 1" "$T/ae" &&
  pass "libdtrain: num_classes 1 is DTRAIN_EUSAGE" || { fail "libdtrain num_classes 1: rc=$arc"; cat "$T/ae" >&2; }

rm -rf "$T"
finish
