#!/bin/sh
# faults.sh: a rank killed mid-step, a checkpoint directory that fills up or
# turns read-only mid-run, missing and unreadable shard files.
#
# - kill -9 of one of 3 ranks while they step: the job ends within 30 s (the
#   time to full exit is printed), mpirun names the dead rank and signal, no
#   dtrain process is left, and the last checkpoint resumes.
# - A full disk (a small tmpfs) at the second checkpoint, and a directory
#   remounted read-only after the first: the run fails (exit 1) with a
#   message naming the checkpoint and the reason, latest and the first
#   checkpoint are untouched, no temporary file is left, and --resume latest
#   works once there is room again (the tmpfs grown, or remounted rw). Skipped visibly without tmpfs mounts.
# - A shard that is missing, a directory, or a dangling symlink (root
#   ignores chmod 000) is named in the error, exit 3.
# tests/checkpoint.sh covers a crash mid-write and corrupt files.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/faults.$$
rm -rf "$T"
mkdir -p "$T"
good=$T/good.h5
"$MKFIXTURE" good "$good" 64 >/dev/null || { echo "mkfixture failed"; exit 99; }
latest() { cat "$1/latest"; }

# --- kill -9 one rank mid-step ---
kd=$T/kill
( launch 3 "$DTRAIN" "$good" --batch-size 8 --epochs 100000 --verbose --model mlp --checkpoint-dir "$kd" \
    --checkpoint-every 10step >"$T/kill.out" 2>"$T/kill.err"
  echo $? >"$T/kill.rc" ) &
i=0
while { ! [ -f "$kd/latest" ] || ! grep -q '^step' "$T/kill.out"; } && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
pids=$(pgrep -f "^$DTRAIN .*$kd" | sort -n)
victim=$(echo "$pids" | sed -n 2p)
if [ -z "$victim" ]; then
  fail "kill: no rank to kill (pids: $pids)"; cat "$T/kill.out" "$T/kill.err" | tail >&2
else
  t0=$(date +%s%N)
  kill -9 "$victim"
  i=0
  while [ ! -f "$T/kill.rc" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  left=$(pgrep -f "^$DTRAIN .*$kd")
  krc=$(cat "$T/kill.rc" 2>/dev/null)
  echo "# kill -9 of rank pid $victim: mpirun exited $krc after $ms ms"
  if [ -n "$krc" ] && [ "$krc" != 0 ] && [ -z "$left" ] && grep -q 'exited on signal 9' "$T/kill.err"; then
    pass "kill -9 of one of 3 ranks: the job ends in $ms ms (exit $krc), the dead rank is named, no dtrain left"
  else
    fail "kill -9: rc='$krc' after $ms ms, left: $left"; tail -20 "$T/kill.err" >&2
    [ -n "$left" ] && kill -9 $left
  fi
  wait
  before=$(latest "$kd")
  run_np 3 "$good" --batch-size 8 --epochs 100000 --model mlp --checkpoint-dir "$kd" --resume latest --steps-per-epoch 1 \
    --no-validation --epochs "$(($(echo "$before" | sed 's/ckpt-0*\([0-9]*\)-.*/\1/') + 2))"
  if [ "$rc" = 0 ] && grep -q "^dtrain: resuming from .*$before" "$out"; then
    pass "the last checkpoint before the kill ($before) resumes"
  else
    fail "resume after kill: rc=$rc"; cat "$out" "$err" | tail >&2
  fi
fi

# --- a full disk and a read-only directory under a checkpoint ---
mnt=$T/mnt
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null' EXIT
run_np 2 "$good" --batch-size 8 --epochs 1 --model mlp --checkpoint-dir "$T/size"
size=$(wc -c <"$T/size/$(latest "$T/size")")
# room for one checkpoint and a half: the second cannot be written
if [ "$rc" = 0 ] && mount -t tmpfs -o size=$((size * 3 / 2 / 1024 + 8))k tmpfs "$mnt" 2>/dev/null; then
  run_np 2 "$good" --batch-size 8 --epochs 3 --model mlp --checkpoint-dir "$mnt/ck" --keep 1
  n=$(grep -c '^dtrain: error: ' "$err")
  if [ "$rc" = 1 ] && [ "$n" = 1 ] && grep -q "^dtrain: error: checkpoint $mnt/ck/ckpt-000002-00000000.h5: .*No space left on device" "$err" &&
     [ "$(latest "$mnt/ck")" = ckpt-000001-00000000.h5 ] && [ "$(ls -A "$mnt/ck" | tr '\n' ' ')" = "ckpt-000001-00000000.h5 latest " ]; then
    pass "disk full at the second checkpoint: $(grep '^dtrain: error: ' "$err" | sed "s|$T/||g"); the first and latest kept"
  else
    fail "disk full: rc=$rc, $n error lines, dir: $(ls -A "$mnt/ck")"; cat "$err" >&2
  fi
  mount -o remount,size=$((size * 4 / 1024))k "$mnt"
  run_np 2 "$good" --batch-size 8 --epochs 2 --model mlp --checkpoint-dir "$mnt/ck" --resume latest --keep 1
  [ "$rc" = 0 ] && grep -q "^dtrain: resuming from $mnt/ck/ckpt-000001-00000000.h5" "$out" &&
    pass "with room again, --resume latest resumes from the first checkpoint" ||
    { fail "resume after disk full: rc=$rc"; cat "$err" >&2; }
  umount "$mnt"

  # read-only after the first checkpoint, while the job runs. Checkpoints
  # 2000 steps apart (a few hundred ms): the remount lands while none is
  # being written. (Every 20 steps the directory was busy almost always,
  # and the remount could land between a checkpoint's close and its
  # rename, where a read-only file system leaves the renamed file behind:
  # one CI run in many failed so.)
  mount -t tmpfs -o size=16m tmpfs "$mnt"
  ( launch 2 "$DTRAIN" "$good" --batch-size 8 --epochs 100000 --model mlp --checkpoint-dir "$mnt/ro" \
      --checkpoint-every 2000step >"$T/ro.out" 2>"$T/ro.err"
    echo $? >"$T/ro.rc" ) &
  i=0
  while ! [ -f "$mnt/ro/latest" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
  i=0  # busy while a checkpoint is being written: retry
  until mount -o remount,ro "$mnt" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.02; i=$((i + 1)); done
  first=$(latest "$mnt/ro")
  list=$(ls -A "$mnt/ro" | tr '\n' ' ')
  wait
  rrc=$(cat "$T/ro.rc")
  if [ "$rrc" = 1 ] && [ "$(grep -c '^dtrain: error: ' "$T/ro.err")" = 1 ] &&
     grep -q "^dtrain: error: checkpoint $mnt/ro/ckpt-.*: cannot create .*: Read-only file system" "$T/ro.err" &&
     [ "$(latest "$mnt/ro")" = "$first" ] && [ "$(ls -A "$mnt/ro" | tr '\n' ' ')" = "$list" ]; then
    pass "directory read-only after $first: $(grep '^dtrain: error: ' "$T/ro.err" | sed "s|$T/||g"); nothing changed"
  else
    fail "read-only: rc=$rrc, latest $(latest "$mnt/ro") (was $first)"; tail -5 "$T/ro.err" >&2
  fi
  mount -o remount,rw "$mnt"
  run_np 2 "$good" --batch-size 8 --epochs "$(($(echo "$first" | sed 's/ckpt-0*\([0-9]*\)-.*/\1/') + 2))" --model mlp \
    --checkpoint-dir "$mnt/ro" --resume latest --steps-per-epoch 1
  [ "$rc" = 0 ] && grep -q "^dtrain: resuming from $mnt/ro/$first" "$out" &&
    pass "writable again: --resume latest resumes from $first" || { fail "resume after read-only: rc=$rc"; cat "$err" >&2; }
  umount "$mnt"
else
  echo "SKIP (part): cannot mount a tmpfs here (needs root and mount rights); disk-full and read-only cases not run"
fi

# --- missing and unreadable shards ---
expect_fail 3 "$T/missing.h5: cannot open: No such file or directory" 2 "$good" "$T/missing.h5"
mkdir -p "$T/adir.h5"
expect_fail 3 "$T/adir.h5: is a directory; expected an HDF5 file" 2 "$good" "$T/adir.h5" --shard-policy file
ln -s "$T/nowhere.h5" "$T/dangling.h5"
expect_fail 3 "$T/dangling.h5: cannot open: No such file or directory" 2 "$good" "$T/dangling.h5"
if [ "$(id -u)" != 0 ]; then
  cp "$good" "$T/noperm.h5"; chmod 000 "$T/noperm.h5"
  expect_fail 3 "$T/noperm.h5: cannot open: Permission denied" 2 "$good" "$T/noperm.h5"
fi

rm -rf "$T"
finish
