#!/bin/sh
# batchnorm.sh: batch normalization and residual models end to end.
#
# --sync-bn at np=2 with per-replica batch B trains exactly as plain batch
# normalization at np=1 with batch 2B (the same step losses to 6 digits, the
# same validation), while without --sync-bn the two differ (so the check can
# fail); a residual model with batchnorm resumes from a checkpoint (after an
# epoch and mid-epoch) to the same parameters and moving statistics, bit for
# bit; --export-keras writes a BatchNormalization's four variables; and the
# refusals (--sync-bn with --overlap or a parameter server, exporting a model
# with add/route layers) are clear errors.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/bn.$$
mkdir -p "$T"
"$DTRAIN_PREP" --quiet --synthetic 8x8x3:4:512:128 --seed 7 "$T/syn.h5" >/dev/null || { fail "dtrain-prep --synthetic"; finish; }
cat >"$T/res.cfg" <<'CFG'
# conv, batchnorm+relu, strided conv, batchnorm, a residual add over the
# projection of the block input (route + 1x1 conv), global average pooling
[conv2d]
filters = 8
kernel = 3
padding = same
[batchnorm]
activation = relu
[conv2d]
filters = 8
kernel = 3
stride = 2
padding = same
[batchnorm]
[route]
from = -3
[conv2d]
filters = 8
kernel = 1
stride = 2
[add]
from = -3
activation = relu
[global_avgpool]
[dense]
units = classes
CFG
base="$T/syn.h5 --model $T/res.cfg --epochs 2 --shard-policy data --verbose --verbose"
steps() { grep -E '^(step|Epoch)' "$1" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//'; }
# numbers on matching lines within a relative tolerance
close() {
  paste -d'|' "$1" "$2" | awk -F'|' -v tol="$3" '
    { n = split($1, a, / /); m = split($2, b, / /); if (n != m) { bad++; next }
      for (i = 1; i <= n; i++) if (a[i] ~ /^-?[0-9]+\.[0-9]+$/) {
        d = a[i] - b[i]; if (d < 0) d = -d; s = a[i] < 0 ? -a[i] : a[i]
        if (d > tol * (s > 1 ? s : 1)) bad++ } }
    END { exit bad > 0 }'
}

run_np 1 $base --batch-size 32; steps "$out" >"$T/np1"
run_np 2 $base --batch-size 16 --sync-bn; rc2=$rc; steps "$out" >"$T/sync"
if [ "$rc" = 0 ] && [ "$(wc -l <"$T/np1")" = 34 ] && [ "$(wc -l <"$T/sync")" = 34 ] && close "$T/np1" "$T/sync" 2e-4; then
  pass "--sync-bn np=2 x batch 16 = batchnorm np=1 x batch 32 (34 lines: step losses, val_loss, val_accuracy)"
else
  fail "--sync-bn np=2 differs from np=1 with the global batch (rc=$rc2)"; diff "$T/np1" "$T/sync" | head >&2; cat "$err" >&2
fi
run_np 2 $base --batch-size 16; steps "$out" >"$T/local"
if [ "$rc" = 0 ] && ! close "$T/np1" "$T/local" 1e-3; then
  pass "without --sync-bn each replica normalizes its own half batch: the losses differ"
else
  fail "plain batchnorm at np=2 matched the global batch (rc=$rc): the comparison above cannot fail"
fi

# Resume: after epoch 1 and mid-epoch 2 (step 5), bit for bit.
C=$T/ckpt
run_np 2 $base --batch-size 16 --checkpoint-dir "$C/full" --keep 0
full_rc=$rc
for at in epoch step; do
  rm -rf "$C/$at"
  if [ $at = epoch ]; then run_np 2 $base --batch-size 16 --checkpoint-dir "$C/$at" --epochs 1
  else run_np 2 $base --batch-size 16 --checkpoint-dir "$C/$at" --checkpoint-every 21step --epochs 2 --keep 0
    rm -f "$C/$at/latest"; ls "$C/$at" | grep -v -- -00000005.h5 | sed "s|^|$C/$at/|" | xargs rm -f; fi
  run_np 2 $base --batch-size 16 --checkpoint-dir "$C/$at" --resume latest
  a=$(ls "$C/full"/ckpt-000002-*.h5 2>/dev/null | tail -1); b=$(ls "$C/$at"/ckpt-000002-*.h5 2>/dev/null | tail -1)
  if [ "$full_rc" = 0 ] && [ "$rc" = 0 ] && [ -n "$a" ] && [ -n "$b" ] &&
     h5diff -q "$a" "$b" /model /model >/dev/null 2>&1 && h5diff -q "$a" "$b" /optimizer /optimizer >/dev/null 2>&1 &&
     h5ls "$b/model/batch_normalization.moving" 2>/dev/null | grep -q kernel; then
    pass "resumed after the $at checkpoint: parameters, moving statistics and optimizer bit for bit"
  else
    fail "resume after the $at checkpoint differs (rc=$rc, $a vs $b)"; cat "$err" >&2
  fi
done

# Keras export: gamma, beta, moving mean, moving variance.
cat >"$T/seq.cfg" <<'CFG'
[conv2d]
filters = 4
kernel = 3
[batchnorm]
activation = relu
[flatten]
[dense]
units = classes
CFG
run_np 2 "$T/syn.h5" --model "$T/seq.cfg" --epochs 1 --export-keras "$T/seq.weights.h5"
if [ "$rc" = 0 ] && [ "$(h5ls "$T/seq.weights.h5/layers/batch_normalization/vars" 2>/dev/null | grep -c 'Dataset {4}')" = 4 ]; then
  pass "--export-keras: batch_normalization/vars/0..3 (gamma, beta, moving mean, moving variance)"
else
  fail "--export-keras of a batchnorm model (rc=$rc)"; cat "$err" >&2
fi

expect_fail 2 "--sync-bn: cannot run with --overlap" 2 "$T/syn.h5" --model "$T/res.cfg" --sync-bn --overlap
expect_fail 2 "--sync-bn: the parameter server's workers do not step together" 3 "$T/syn.h5" --model "$T/res.cfg" \
  --sync-bn --strategy parameter-server
expect_fail 2 "--export-keras $T/r.weights.h5: model res.cfg has add or route layers" 2 "$T/syn.h5" --model "$T/res.cfg" \
  --epochs 1 --export-keras "$T/r.weights.h5"
if [ ! -e "$T/r.weights.h5" ] && ! ls "$T"/r.weights.h5.tmp* >/dev/null 2>&1; then pass "no file left by the refused export"
else fail "the refused export left a file"; fi
rm -rf "$T"
finish
