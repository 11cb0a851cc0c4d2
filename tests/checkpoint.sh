#!/bin/sh
# checkpoint.sh: checkpoints, exact resume, callbacks and signals, end to end.
#
# - An interrupted run resumed from its checkpoint prints the same losses and
#   ends with the same parameters (h5diff: bit for bit) as the uninterrupted
#   run: at an epoch boundary and mid-epoch, for mirrored and sharded.
# - A crash while writing leaves the previous checkpoint and "latest" valid;
#   corrupt and truncated files are detected, and latest falls back.
# - SIGUSR1 to one rank: every rank checkpoints at the next step, exit 75;
#   --resume latest finishes the run.
# - EarlyStopping stops at the right epoch and restores the best weights;
#   --save-best keeps the best epoch.
# - Another rank count resumes and says so. Bad flags are refused.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/ckpt.$$
rm -rf "$T"
mkdir -p "$T"
base="$fm --batch-size 32 --steps-per-epoch 12 --verbose"

# Losses and epoch figures without timings.
losses() { sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' "$1" | grep -E '^(step|Epoch)'; }
latest() { cat "$1/latest"; }
same_params() { # same_params A.h5 B.h5: /model and /optimizer identical
  h5diff -q "$1" "$2" /model /model >/dev/null 2>&1 && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null 2>&1
}

for strategy in mirrored sharded; do
  # --- uninterrupted: 3 epochs, a checkpoint each epoch ---
  run_np 2 $base --epochs 3 --strategy $strategy --checkpoint-dir "$T/full-$strategy"
  [ "$rc" = 0 ] || { fail "$strategy full run: rc=$rc"; cat "$err" >&2; }
  losses "$out" >"$T/full-$strategy.txt"
  # --- interrupted after epoch 1, resumed ---
  run_np 2 $base --epochs 1 --strategy $strategy --checkpoint-dir "$T/part-$strategy"
  run_np 2 $base --epochs 3 --strategy $strategy --checkpoint-dir "$T/part-$strategy" --resume latest
  [ "$rc" = 0 ] || { fail "$strategy resumed run: rc=$rc"; cat "$err" >&2; }
  losses "$out" >"$T/resumed-$strategy.txt"
  grep -q "^dtrain: resuming from .*ckpt-000001-00000000.h5: 1 epoch and 0 steps done" "$out" ||
    fail "$strategy: no resume line"
  if [ "$(grep -c '^step' "$T/resumed-$strategy.txt")" = 24 ] &&
     tail -26 "$T/full-$strategy.txt" | cmp -s - "$T/resumed-$strategy.txt"; then
    pass "$strategy: resumed at epoch 1, epochs 2-3 print the same losses"
  else
    fail "$strategy: resumed losses differ"; diff "$T/full-$strategy.txt" "$T/resumed-$strategy.txt" | head >&2
  fi
  if same_params "$T/full-$strategy/$(latest "$T/full-$strategy")" "$T/part-$strategy/$(latest "$T/part-$strategy")"; then
    pass "$strategy: final parameters and optimizer state identical (h5diff)"
  else
    fail "$strategy: final checkpoints differ"
  fi
  # --- mid-epoch: a checkpoint every 5 steps of the run (12 a epoch): the
  # one at run step 15 is epoch 2, step 3 ---
  run_np 2 $base --epochs 3 --strategy $strategy --checkpoint-dir "$T/mid-$strategy" --checkpoint-every 5step --keep 0
  mid=$T/mid-$strategy/ckpt-000001-00000003.h5
  if [ -f "$mid" ]; then
    run_np 2 $base --epochs 3 --strategy $strategy --checkpoint-dir "$T/mid2-$strategy" --resume "$mid"
    losses "$out" >"$T/mid-$strategy.txt"
    # the resumed run prints steps 4..12 of epoch 2, its epoch line, then epoch 3
    if [ "$rc" = 0 ] && tail -23 "$T/full-$strategy.txt" | cmp -s - "$T/mid-$strategy.txt" &&
       same_params "$T/full-$strategy/$(latest "$T/full-$strategy")" "$T/mid2-$strategy/$(latest "$T/mid2-$strategy")"; then
      pass "$strategy: resumed mid-epoch (epoch 2 step 3): same losses and parameters"
    else
      fail "$strategy: mid-epoch resume differs (rc=$rc)"; diff "$T/full-$strategy.txt" "$T/mid-$strategy.txt" | head >&2
      cat "$err" >&2
    fi
  else
    fail "$strategy: --checkpoint-every 5step wrote no $mid"; ls "$T/mid-$strategy" >&2
  fi
done

# --- central storage (node-shared parameters) and the parameter server
# (server-held optimizer shards), 3 ranks: epoch-boundary resume is exact ---
for st in central-storage "parameter-server --ps-mode sync"; do
  name=$(echo "$st" | cut -d' ' -f1)
  run_np 3 $base --epochs 3 --strategy $st --checkpoint-dir "$T/full-$name"
  grep '^Epoch' "$out" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' | tail -2 >"$T/a-$name.txt"
  run_np 3 $base --epochs 1 --strategy $st --checkpoint-dir "$T/part-$name"
  run_np 3 $base --epochs 3 --strategy $st --checkpoint-dir "$T/part-$name" --resume latest
  grep '^Epoch' "$out" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' >"$T/b-$name.txt"
  if [ "$rc" = 0 ] && [ -s "$T/b-$name.txt" ] && cmp -s "$T/a-$name.txt" "$T/b-$name.txt" &&
     same_params "$T/full-$name/$(latest "$T/full-$name")" "$T/part-$name/$(latest "$T/part-$name")"; then
    pass "$st at np=3: resumed after epoch 1, same epochs 2-3 and parameters"
  else
    fail "$st: resume differs (rc=$rc)"; cat "$T/a-$name.txt" "$T/b-$name.txt" "$err" >&2
  fi
done

# --- the file: documented layout, readable by h5dump ---
f=$T/full-mirrored/$(latest "$T/full-mirrored")
if h5dump -H "$f" >"$T/dump.txt" 2>&1 && grep -q 'DATASET "kernel"' "$T/dump.txt" &&
   h5dump -d /model/conv2d/kernel -H "$f" | grep -q 'DATASPACE  SIMPLE { ( 3, 3, 1, 32 )' &&
   h5dump -d /model/dense_1/bias -H "$f" | grep -q 'DATASPACE  SIMPLE { ( 10 )' &&
   h5dump -d /optimizer/m -H "$f" | grep -q 'DATASPACE  SIMPLE { ( 225034 )' &&
   h5dump -a /format "$f" | grep -q '"dtrain-checkpoint"'; then
  pass "h5dump reads the layout: /model/conv2d/kernel 3x3x1x32, /optimizer/m, /format"
else
  fail "checkpoint layout"; head -40 "$T/dump.txt" >&2
fi
[ "$(ls "$T/full-mirrored" | grep -c '^ckpt-.*\.h5$')" = 3 ] && pass "--keep 3 default: 3 checkpoints kept" ||
  fail "checkpoint count: $(ls "$T/full-mirrored")"

# --- a crash while writing keeps the previous checkpoint ---
cp -r "$T/part-mirrored" "$T/crash"
before=$(latest "$T/crash")
DTRAIN_TEST_CKPT_CRASH=1; export DTRAIN_TEST_CKPT_CRASH
run_np 2 $base --epochs 4 --checkpoint-dir "$T/crash" --resume latest
unset DTRAIN_TEST_CKPT_CRASH
if [ "$rc" != 0 ] && [ "$(latest "$T/crash")" = "$before" ]; then
  pass "crash mid-write (rc=$rc): latest still $before"
else
  fail "crash mid-write: rc=$rc, latest $(latest "$T/crash") (was $before)"
fi
run_np 2 $base --epochs 4 --checkpoint-dir "$T/crash" --resume latest
[ "$rc" = 0 ] && grep -q '^Epoch 4/4' "$out" && pass "after the crash, --resume latest finishes" ||
  { fail "resume after crash: rc=$rc"; cat "$err" >&2; }

# --- corrupt and truncated files ---
d=$T/full-mirrored
newest=$(latest "$d")
cp "$d/$newest" "$T/good.h5"
size=$(wc -c <"$d/$newest")
head -c $((size / 2)) "$T/good.h5" >"$d/$newest"
expect_fail 3 "checkpoint .*$newest" 2 $base --epochs 3 --resume "$d/$newest"
run_np 2 $base --epochs 3 --checkpoint-dir "$d" --resume latest
if [ "$rc" = 0 ] && grep -q "dtrain: note: checkpoint .*$newest skipped" "$err" &&
   grep -q "^dtrain: resuming from .*ckpt-000002-00000000.h5" "$out"; then
  pass "truncated newest: latest falls back to ckpt-000002"
else
  fail "fallback after truncation: rc=$rc"; cat "$out" "$err" >&2
fi
cp "$T/good.h5" "$T/flip.h5"
off=$(h5dump -p -H -d /model/dense/kernel "$T/flip.h5" | sed -n 's/^ *OFFSET \([0-9]*\).*/\1/p' | head -1)
if [ -n "$off" ]; then
  printf '\377' | dd of="$T/flip.h5" bs=1 seek=$((off + 1000)) conv=notrunc 2>/dev/null
  expect_fail 3 "checksum mismatch" 2 $base --resume "$T/flip.h5"
else
  fail "could not find /model/dense/kernel's offset with h5dump -p"
fi

# --- SIGUSR1 to one rank: checkpoint at the next step, exit 75, resume ---
sigdir=$T/sig
( launch 2 "$DTRAIN" $fm --batch-size 32 --epochs 2 --verbose --checkpoint-dir "$sigdir" >"$T/sig.out" 2>"$T/sig.err"
  echo $? >"$T/sig.rc" ) &
i=0
while ! grep -q '^step 3/' "$T/sig.out" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
pid=$(pgrep -f "^$DTRAIN .*$sigdir" | tail -1)
if [ -n "$pid" ]; then kill -USR1 "$pid"; fi
wait
src=$(cat "$T/sig.rc" 2>/dev/null)
if [ "$src" = 75 ] && grep -q '^dtrain: SIGUSR1 received: checkpoint .* written after epoch 1 step' "$T/sig.err" &&
   [ -f "$sigdir/latest" ]; then
  pass "SIGUSR1 to one rank: checkpoint, exit 75 ($(grep -o 'step [0-9]*' "$T/sig.err" | head -1))"
else
  fail "signal: rc=$src, pid=$pid"; cat "$T/sig.out" "$T/sig.err" | tail -20 >&2
fi
run_np 2 $fm --batch-size 32 --epochs 2 --checkpoint-dir "$sigdir" --resume latest
[ "$rc" = 0 ] && grep -q '^Epoch 2/2' "$out" && pass "requeued run resumes and finishes" ||
  { fail "resume after signal: rc=$rc"; cat "$err" >&2; }

# --- early stopping with restore, and save-best ---
run_np 2 $base --epochs 5 --early-stopping 1 --min-delta 10 --restore-best --save-best "$T/best"
v1=$(sed -n 's/^Epoch 1\/5 .*val_loss: \([0-9.]*\).*/\1/p' "$out")
vr=$(sed -n 's/^restored weights: val_loss: \([0-9.]*\).*/\1/p' "$out")
if [ "$rc" = 0 ] && grep -q '^Epoch 2: early stopping' "$out" && ! grep -q '^Epoch 3/5' "$out" &&
   grep -q '^Restoring model weights from the end of the best epoch: 1\.' "$out" && [ -n "$v1" ] && [ "$v1" = "$vr" ]; then
  pass "early stopping (patience 1, min-delta 10): stops after epoch 2, restores epoch 1 (val_loss $vr)"
else
  fail "early stopping: rc=$rc v1=$v1 restored=$vr"; cat "$out" >&2
fi
run_np 2 $base --epochs 3 --save-best "$T/best2" --monitor val_accuracy
best=$(grep '^Epoch [0-9]/3' "$out" | sed 's/^Epoch \([0-9]\).*val_accuracy: \([0-9.]*\).*/\2 \1/' | sort -k1,1nr -k2,2n | head -1 | cut -d' ' -f2)
saved=$(h5dump -a /epoch "$T/best2/$(latest "$T/best2")" 2>/dev/null | sed -n 's/^ *(0): \([0-9]*\).*/\1/p')
if [ "$rc" = 0 ] && [ -n "$best" ] && [ "$saved" = "$best" ] && [ "$(ls "$T/best2" | grep -c '^ckpt-')" = 1 ]; then
  pass "--save-best val_accuracy keeps epoch $best, the best"
else
  fail "--save-best: best epoch '$best', saved '$saved'"; cat "$out" >&2; ls "$T/best2" >&2
fi

# --- --restore-best across a restart: the best weights are kept in DIR/best ---
# min-delta 10: only epoch 1 counts as an improvement, so the weights to
# restore are from before the restart
rb="$base --early-stopping 5 --min-delta 10 --restore-best"
run_np 2 $rb --epochs 3 --checkpoint-dir "$T/rb-full"
full_restore=$(grep -E '^(Restoring|restored weights)' "$out")
run_np 2 $rb --epochs 2 --checkpoint-dir "$T/rb-part"
run_np 2 $rb --epochs 3 --checkpoint-dir "$T/rb-part" --resume latest
part_restore=$(grep -E '^(Restoring|restored weights)' "$out")
if [ "$rc" = 0 ] && [ -n "$full_restore" ] && [ "$full_restore" = "$part_restore" ] && ! grep -q 'cannot be read' "$err" &&
   echo "$part_restore" | grep -q 'best epoch: 1\.' &&
   [ -f "$T/rb-full/best/latest" ]; then
  pass "--restore-best across a restart restores the same epoch's weights: $(echo "$part_restore" | tail -1)"
else
  fail "--restore-best across a restart: rc=$rc"; echo "full: $full_restore" >&2; echo "resumed: $part_restore" >&2; cat "$err" >&2
fi

# --- another rank count resumes, and says so ---
run_np 1 $base --epochs 4 --checkpoint-dir "$T/part-mirrored" --resume latest
if [ "$rc" = 0 ] && grep -q 'dtrain: note: --resume: the checkpoint was written by 2 ranks x batch 32, this run has 1 x 32' "$err" &&
   grep -q '^Epoch 4/4' "$out"; then
  pass "2-rank checkpoint resumed on 1 rank, with a note"
else
  fail "resume at np=1: rc=$rc"; cat "$err" >&2
fi

# --- --resume latest on a first run: nothing there yet, start fresh ---
run_np 2 $base --epochs 1 --checkpoint-dir "$T/first" --resume latest
if [ "$rc" = 0 ] && grep -q "^dtrain: --resume latest: no checkpoint in $T/first yet; starting from the beginning" "$out" &&
   [ -f "$T/first/latest" ]; then
  pass "--resume latest with an empty directory starts fresh (a requeued job's first run)"
else
  fail "--resume latest, empty dir: rc=$rc"; cat "$out" "$err" >&2
fi

# --- refusals ---
expect_fail 2 "--checkpoint-every: expected a positive count with an optional unit, e.g. 2, 2epoch or 500step, found '0'" \
  2 $base --checkpoint-dir "$T/x" --checkpoint-every 0
expect_fail 2 "--keep: needs --checkpoint-dir DIR" 2 $base --keep 2
expect_fail 2 "--resume latest: needs --checkpoint-dir DIR" 2 $base --resume latest
expect_fail 2 "--restore-best: needs --early-stopping PATIENCE" 2 $base --restore-best
expect_fail 2 "--monitor val_loss: there is no validation (--no-validation was given)" 2 $base --early-stopping 2 --no-validation
expect_fail 2 "--monitor: expected val_loss, val_accuracy, loss or accuracy, found 'f1'" 2 $base --monitor f1
expect_fail 3 "$T/nothing.h5" 2 $base --resume "$T/nothing.h5"
: >"$T/plainfile"
expect_fail 1 "checkpoint $T/plainfile" 2 $base --epochs 1 --checkpoint-dir "$T/plainfile"

rm -rf "$T"
finish
