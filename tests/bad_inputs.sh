#!/bin/sh
# bad_inputs.sh: the malformed-input corpus (tests/bad-inputs/), each at 2 ranks.
#
# tests/bad-inputs/make_bad_inputs.py writes the inputs into a scratch
# directory; each is given to dtrain with --checkpoint-dir, --metrics and
# --export-keras pointing into an empty directory. Every case must give
# exactly one "dtrain: error:" line (from rank 0) naming the file and what
# was expected or found, the documented exit code on every rank (each rank's
# own code is logged by a wrapper), no hang (the launcher's timeout fails
# it) and nothing written: the output directory stays empty and an existing
# checkpoint directory unchanged. Ends with "N bad inputs, N clean errors".
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/bad.$$
rm -rf "$T"
mkdir -p "$T"
B=$T/in
bad_inputs_corpus "$B"
DT_TEST_TIMEOUT=${DT_TEST_TIMEOUT:-60}
tried=0 clean=0
small="--epochs 2 --batch-size 8"

# Each rank's exit code into $T/codes; the wrapper itself exits 0, so that
# mpirun does not end the other ranks before they have logged theirs.
wrap='"$@"; echo "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}} $?" >>"$CODES"'
CODES=$T/codes; export CODES

# bad CODE PATTERN ARGS...: the input in ARGS must be refused cleanly.
bad() {
  code=$1; pattern=$2; shift 2
  tried=$((tried + 1))
  rm -rf "$T/out" "$CODES"; mkdir -p "$T/out"
  launch 2 sh -c "$wrap" sh "$DTRAIN" "$@" $small --metrics "$T/out/m.csv" --export-keras "$T/out/k.weights.h5" \
    --checkpoint-dir "$T/out/ckpt" >"$T/o" 2>"$T/e"
  lrc=$?
  what="dtrain $(echo "$*" | sed "s|$T/||g")"
  if [ "$lrc" = 124 ] || [ "$lrc" = 137 ]; then fail "$what: timed out (hang)"; return; fi
  codes=$(sort "$CODES" 2>/dev/null | awk '{printf "%s%s", sep, $2; sep=","}')
  if [ "$codes" != "$code,$code" ]; then fail "$what: rank exit codes '$codes', expected $code on both"; tail -5 "$T/e" >&2; return; fi
  n=$(grep -c '^dtrain: error: ' "$T/e")
  if [ "$n" != 1 ]; then fail "$what: $n error lines, expected 1"; cat "$T/e" >&2; return; fi
  msg=$(grep '^dtrain: error: ' "$T/e")
  if ! echo "$msg" | grep -q -- "$pattern"; then fail "$what: message does not match '$pattern': $msg"; return; fi
  if LC_ALL=C grep -q '[^[:print:][:space:]]' "$T/e"; then fail "$what: unprintable bytes on stderr"; return; fi
  left=$(find "$T/out" -mindepth 1 | head -3)
  if [ -n "$left" ]; then fail "$what: left behind: $left"; return; fi
  clean=$((clean + 1))
  pass "$what -> $code: $(echo "$msg" | sed "s|$T/||g")"
}

# --- data files: exit 3, the message names the file ---
bad 3 "$B/float-images.h5: /train/images holds float32; expected uint8 pixels" "$B/float-images.h5"
bad 3 "$B/float64-images.h5: /train/images holds float64; expected uint8" "$B/float64-images.h5"
bad 3 "$B/int8-images.h5: /train/images holds int8; expected uint8" "$B/int8-images.h5"
bad 3 "$B/int16-labels.h5: /train/labels is int16 \[64\]; expected uint8 \[N\]" "$B/int16-labels.h5"
bad 3 "$B/float-labels.h5: /train/labels is float32 \[64\]; expected uint8" "$B/float-labels.h5"
bad 3 "$B/string-labels.h5: /train/labels is strings \[64\]; expected uint8" "$B/string-labels.h5"
bad 3 "$B/rank3-images.h5: /train/images has rank 3 \[64,28,28\]; expected rank 4 \[N,H,W,C\]" "$B/rank3-images.h5"
bad 3 "$B/rank5-images.h5: /train/images has rank 5 \[64,28,28,1,1\]; expected rank 4" "$B/rank5-images.h5"
bad 3 "$B/rank9-images.h5: /train/images has rank 9 \[64,1,1,1,1,1,1,1,2\]; expected rank 4" "$B/rank9-images.h5"
bad 3 "$B/scalar-images.h5: /train/images has rank 0 \[\]; expected rank 4" "$B/scalar-images.h5"
bad 3 "$B/rank2-labels.h5: /train/labels is uint8 \[64,1\]; expected uint8 \[N\]" "$B/rank2-labels.h5"
bad 3 "$B/rank12-labels.h5: /train/labels is uint8 \[64,1,1,1,1,1,1,1,1,1,1,1\]; expected uint8 \[N\]" "$B/rank12-labels.h5"
bad 3 "$B/zero-height.h5: /train/images has shape \[64,0,28,1\]; expected \[N,H,W,C\] with non-empty images" "$B/zero-height.h5"
bad 3 "$B/zero-samples.h5: /train/images holds no samples" "$B/zero-samples.h5"
bad 3 "$B/huge-sparse.h5: /train/images declares \[1099511627776,28,28,1\] but none of its data is stored" "$B/huge-sparse.h5"
bad 3 "$B/huge-sparse-labels.h5: /train/labels declares \[64\] but none of its data is stored" "$B/huge-sparse-labels.h5"
bad 3 "$B/huge-image.h5: /train/images has shape \[64,65536,65536,1\]: 4294967296 bytes an image; expected at most" "$B/huge-image.h5"
bad 3 "$B/truncated.h5: HDF5 cannot open it: truncated file: eof = " "$B/truncated.h5"
bad 3 "$B/truncated-head.h5: HDF5 cannot open it: truncated file" "$B/truncated-head.h5"
bad 3 "$B/not-hdf5.h5: not an HDF5 file (expected a dataset written by dtrain-prep)" "$B/not-hdf5.h5"
bad 3 "$B/empty.h5: not an HDF5 file" "$B/empty.h5"
bad 3 "$B/label-255.h5: /train/labels\[7\] = 255, but num_classes is 10 (labels must be 0..9)" "$B/label-255.h5"
bad 3 "$B/test-label-out.h5: /test/labels\[3\] = 10, but num_classes is 10" "$B/test-label-out.h5"
# class counts (issue 23): an inferred count with a gap, a stated one a label exceeds, two that disagree
bad 3 "$B/stray-200.h5: /train/labels\[17\] = 200, and no num_classes attribute: the largest label is 200, but only 11 distinct labels .* state the count with --num-classes N" "$B/stray-200.h5"
bad 3 "$B/stray-200.h5: /train/labels\[17\] = 200, but --num-classes is 10 (labels must be 0..9)" "$B/stray-200.h5" --num-classes 10
bad 3 "$B/stray-200-declared.h5: /train/labels\[17\] = 200, but num_classes is 10 (labels must be 0..9)" "$B/stray-200-declared.h5"
bad 3 "$B/stray-200-declared.h5: root attribute num_classes is 10, but --num-classes is 201 (they must agree" "$B/stray-200-declared.h5" --num-classes 201
bad 3 "$B/three-missing.h5: /train/labels\[6\] = 9, .* only 7 distinct labels .* leaves 3 without a sample (at most 2 may be missing)" "$B/three-missing.h5"
bad 3 "$B/num-classes-zero.h5: root attribute num_classes is 0; expected one integer in \[2, 256\]" "$B/num-classes-zero.h5"
bad 3 "$B/num-classes-300.h5: root attribute num_classes is 300; expected one integer in \[2, 256\] (labels are uint8)" "$B/num-classes-300.h5"
bad 3 "$B/num-classes-string.h5: root attribute num_classes is strings; expected one integer" "$B/num-classes-string.h5"
bad 3 "$B/num-classes-float.h5: root attribute num_classes is float64; expected one integer" "$B/num-classes-float.h5"
bad 3 "$B/num-classes-array.h5: root attribute num_classes is 64 values; expected one integer" "$B/num-classes-array.h5"
bad 3 "$B/mismatched-counts.h5: /train/images has 64 samples but /train/labels has 60 labels" "$B/mismatched-counts.h5"
bad 3 "$B/test-mismatched.h5: /test/images has 64 samples but /test/labels has 65 labels" "$B/test-mismatched.h5"
bad 3 "$B/no-train.h5: no dataset /train/images (expected uint8 images" "$B/no-train.h5"
bad 3 "$B/no-test-labels.h5: no dataset /test/labels (expected uint8 labels \[N\])" "$B/no-test-labels.h5"
bad 3 "$B/images-group.h5: cannot open /train/images as a dataset (expected uint8 images" "$B/images-group.h5"
bad 3 "$B/test-28x28x3.h5: /test/images has shape \[64,28,28,3\]; the other data has 28x28x1 images" "$B/test-28x28x3.h5"
bad 3 "$B/corrupt-labels.h5: cannot read /train/labels\[0..63\] (inflate() failed); the file is damaged" "$B/corrupt-labels.h5"
# damaged image chunks pass validation (labels only) and fail the first read, on every rank
bad 3 "$B/corrupt-images.h5: cannot read rows .* of /train/images (.*); the file is damaged" "$B/corrupt-images.h5"
bad 3 "$B: is a directory; expected an HDF5 file" "$B"
ln -s "$B/gone.h5" "$B/dangling.h5"
bad 3 "$B/dangling.h5: cannot open: No such file or directory" "$B/dangling.h5"

# --- shards that disagree: the odd one out is named ---
bad 3 "$B/shard-32x32x3.h5: /train/images has shape \[64,32,32,3\]; the other data has 28x28x1 images" "$B/good.h5" "$B/shard-32x32x3.h5"
bad 3 "$B/shard-classes-5.h5: num_classes = 5, but $B/good.h5 says 10" "$B/good.h5" "$B/shard-classes-5.h5"
bad 3 "$B/shard-no-test.h5: no /test split, but 1 of the 2 shard files have one" "$B/good.h5" "$B/shard-no-test.h5"
bad 3 "$B/rank3-images.h5: /train/images has rank 3" "$B/good.h5" "$B/good.h5" "$B/rank3-images.h5"

# --- model files: exit 2 ---
bad 2 "$B/garbage.cfg:1: not a text model file (byte 0x" "$B/good.h5" --model "$B/garbage.cfg"
bad 2 "$B/garbage-text.cfg:1: unknown section \[convolutional\]" "$B/good.h5" --model "$B/garbage-text.cfg"

# --- checkpoints: exit 3 ---
launch 2 "$DTRAIN" "$B/good.h5" $small --checkpoint-dir "$T/ck" >"$T/o" 2>&1 || { cat "$T/o"; echo "making a checkpoint failed"; exit 99; }
ck=$T/ck/$(cat "$T/ck/latest")
ls -l --time-style=+%s.%N "$T/ck" >"$T/ck.before"
head -c 20000 "$ck" >"$B/trunc-ckpt.h5"
bad 3 "checkpoint $ck: layer 1 with parameters is conv2d in the file but dense in the model" "$B/good.h5" --model mlp --resume "$ck"
bad 3 "checkpoint $B/trunc-ckpt.h5: HDF5 cannot open it (the file is truncated or damaged)" "$B/good.h5" --resume "$B/trunc-ckpt.h5"
bad 3 "checkpoint $B/good.h5: not a dtrain checkpoint" "$B/good.h5" --resume "$B/good.h5"
bad 3 "checkpoint $B/not-hdf5.h5: not an HDF5 file" "$B/good.h5" --resume "$B/not-hdf5.h5"
# through latest, in the checkpoint directory itself: refused, and the directory is left as it was
rm -rf "$T/out" "$CODES"; mkdir -p "$T/out"
tried=$((tried + 1))
launch 2 sh -c "$wrap" sh "$DTRAIN" "$B/good.h5" $small --model mlp --checkpoint-dir "$T/ck" --resume latest >"$T/o" 2>"$T/e"
ls -l --time-style=+%s.%N "$T/ck" >"$T/ck.after"
if [ "$(sort "$CODES" | awk '{print $2}' | tr '\n' ,)" = "3,3," ] && [ "$(grep -c '^dtrain: error: ' "$T/e")" = 1 ] &&
   grep -q "^dtrain: error: checkpoint $ck: layer 1 with parameters is conv2d in the file but dense" "$T/e" &&
   cmp -s "$T/ck.before" "$T/ck.after"; then
  clean=$((clean + 1)); pass "--model mlp --resume latest on a cnn directory: refused, directory unchanged"
else
  fail "--model mlp --resume latest: codes $(cat "$CODES")"; cat "$T/e" >&2; diff "$T/ck.before" "$T/ck.after" >&2
fi

# --- accepted, not errors: num_classes absent (inferred, 2 classes missing, or 3
# missing in /train that /test has), an empty /test ---
for ok in num-classes-missing two-missing only-in-test zero-test; do
  run_np 2 "$B/$ok.h5" $small
  [ "$rc" = 0 ] && grep -q '^Epoch 2/2' "$out" && pass "$ok.h5 is accepted and trains" || { fail "$ok.h5: rc=$rc"; cat "$err" >&2; }
done
run_np 2 "$B/num-classes-missing.h5" $small
grep -q "model cnn (225034 parameters)" "$out" || fail "num_classes inferred from the labels: not 10 classes"
run_np 2 "$B/zero-test.h5" $small
grep -q '; /test is empty, so there is no validation$' "$out" && ! grep -q 'val_loss' "$out" ||
  fail "an empty /test: the header should say there is no validation"

echo "$tried bad inputs, $clean clean errors"
[ "$tried" = "$clean" ] || fail "$((tried - clean)) bad input(s) without a clean error"
rm -rf "$T"
finish
