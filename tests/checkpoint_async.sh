#!/bin/sh
# checkpoint_async.sh: --checkpoint-async, checkpoints written on a thread
# of their own while training goes on.
#
# - The same run with and without it (2 ranks, mirrored and sharded, a
#   checkpoint every 5 steps): the same losses, the same checkpoint files,
#   and each pair of files equal (h5diff and h5dump) in everything but when
#   and how it was made: the creation time, the command line, the epochs'
#   wall-clock seconds in /history and the checksum that covers them. A
#   negative control: two different checkpoints are told apart.
# - The run summary says how long training stood still for checkpoints,
#   and how many the writer thread wrote.
# - rank 0 killed mid-write on the writer thread (DTRAIN_TEST_CKPT_CRASH:
#   after the flush, before the rename): the job ends, latest still names
#   the previous checkpoint, and --resume latest finishes the run.
# - A full disk (a small tmpfs) at the second checkpoint: the failed write
#   is reported by rank 0 at the first step after it ended (one message
#   naming the file, the reason, the state it held and the step), every
#   rank exits 1, the first checkpoint and latest are kept, no temporary
#   file is left. Skipped visibly without tmpfs mounts.
# - --checkpoint-async without --checkpoint-dir is refused.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/ckasync.$$
rm -rf "$T"
mkdir -p "$T"
base="$fm --batch-size 32 --steps-per-epoch 12 --verbose"
latest() { cat "$1/latest"; }
losses() { sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' "$1" | grep -E '^(step|Epoch)'; }
# Root and group attributes but the three that say when and how.
attrs() {
  h5dump -A "$1" | sed 1d | awk 'skip == 0 && /ATTRIBUTE "(created|state_checksum|command_line)"/ { skip = 1; depth = 0 }
    skip { depth += gsub(/{/, "{"); depth -= gsub(/}/, "}"); if (depth == 0) skip = 0; next } { print }'
}
# /history without its seconds column (the fifth).
hist() { h5dump -y -w 0 -d /history "$1" | sed 1d | sed -E 's/^( *([^,]*,){4})[^,]*,/\1 -,/'; }
same_file() {
  h5diff -q --exclude-path /config --exclude-path /history --exclude-attribute / "$1" "$2" >/dev/null 2>&1 &&
    [ "$(attrs "$1")" = "$(attrs "$2")" ] && [ "$(hist "$1")" = "$(hist "$2")" ]
}

# --- the same files, written either way ---
for strategy in mirrored sharded; do
  common="$base --epochs 2 --strategy $strategy --checkpoint-every 5step --keep 0"
  run_np 2 $common --checkpoint-dir "$T/sync-$strategy"
  [ "$rc" = 0 ] || { fail "$strategy synchronous run: rc=$rc"; cat "$err" >&2; }
  losses "$out" >"$T/sync-$strategy.txt"
  sync_summary=$(grep '^  checkpoints ' "$out")
  run_np 2 $common --checkpoint-dir "$T/async-$strategy" --checkpoint-async
  [ "$rc" = 0 ] || { fail "$strategy asynchronous run: rc=$rc"; cat "$err" >&2; }
  losses "$out" >"$T/async-$strategy.txt"
  async_summary=$(grep '^  checkpoints ' "$out")
  cmp -s "$T/sync-$strategy.txt" "$T/async-$strategy.txt" && [ -s "$T/sync-$strategy.txt" ] &&
    pass "$strategy: the same losses with and without --checkpoint-async" ||
    { fail "$strategy: losses differ"; diff "$T/sync-$strategy.txt" "$T/async-$strategy.txt" | head >&2; }
  files=$(ls "$T/sync-$strategy" | grep '^ckpt-' | tr '\n' ' ')
  afiles=$(ls "$T/async-$strategy" | grep '^ckpt-' | tr '\n' ' ')
  n=0; bad=""
  for f in $files; do
    n=$((n + 1))
    same_file "$T/sync-$strategy/$f" "$T/async-$strategy/$f" || bad="$bad $f"
  done
  if [ "$files" = "$afiles" ] && [ "$n" = 5 ] && [ -z "$bad" ] &&
     [ "$(latest "$T/sync-$strategy")" = "$(latest "$T/async-$strategy")" ]; then
    pass "$strategy: $n checkpoints, each equal to its synchronous twin (h5diff, h5dump)"
  else
    fail "$strategy: files '$files' vs '$afiles', different:$bad"
  fi
  # The comparison can fail: two checkpoints of the same run differ.
  set -- $files
  same_file "$T/sync-$strategy/$1" "$T/async-$strategy/$2" &&
    fail "$strategy: same_file does not tell $1 from $2"
  echo "# $strategy synchronous:$sync_summary"
  echo "# $strategy asynchronous:$async_summary"
  echo "$sync_summary" | grep -qE '^  checkpoints +5: 5 in the step, training stood still [0-9.]+ s \([0-9.]+ ms each\)$' &&
    echo "$async_summary" | grep -qE '^  checkpoints +5: 4 on the writer thread, training stood still [0-9.]+ s \([0-9.]+ ms each\), written there in [0-9.]+ s; 1 in the step, training stood still [0-9.]+ s \([0-9.]+ ms each\)$' &&
    pass "$strategy: the run summary counts the checkpoints and the time training stood still for them" ||
    fail "$strategy: summary lines '$sync_summary' / '$async_summary'"
done

# --- a crash on the writer thread keeps the previous checkpoint ---
mkdir -p "$T/crash"
cp "$T/async-mirrored/$(latest "$T/async-mirrored")" "$T/async-mirrored/latest" "$T/crash/"
before=$(latest "$T/crash")
DTRAIN_TEST_CKPT_CRASH=1; export DTRAIN_TEST_CKPT_CRASH
run_np 2 $base --epochs 4 --checkpoint-dir "$T/crash" --resume latest --checkpoint-async --checkpoint-every 5step
unset DTRAIN_TEST_CKPT_CRASH
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$(latest "$T/crash")" = "$before" ]; then
  pass "rank 0 killed mid-write on the writer thread (rc=$rc): latest still $before"
else
  fail "crash mid-write: rc=$rc, latest $(latest "$T/crash") (was $before)"; tail -5 "$err" >&2
fi
run_np 2 $base --epochs 4 --checkpoint-dir "$T/crash" --resume latest --checkpoint-async --checkpoint-every 5step
[ "$rc" = 0 ] && grep -q "^dtrain: resuming from .*$before" "$out" && grep -q '^Epoch 4/4' "$out" &&
  pass "after the crash, --resume latest finishes" || { fail "resume after crash: rc=$rc"; cat "$err" >&2; }

# --- a full disk: the failed write is reported, by rank 0, on every rank ---
mnt=$T/mnt
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null' EXIT
good=$T/good.h5
"$MKFIXTURE" good "$good" 64 >/dev/null || { echo "mkfixture failed"; exit 99; }
run_np 2 "$good" --batch-size 8 --epochs 1 --model mlp --checkpoint-dir "$T/size"
size=$(wc -c <"$T/size/$(latest "$T/size")")
# room for one checkpoint and a half: the second cannot be written
if [ "$rc" = 0 ] && mount -t tmpfs -o size=$((size * 3 / 2 / 1024 + 8))k tmpfs "$mnt" 2>/dev/null; then
  run_np 2 "$good" --batch-size 8 --epochs 3 --model mlp --checkpoint-dir "$mnt/ck" --keep 1 --checkpoint-every 3step \
    --checkpoint-async
  msg=$(grep '^dtrain: error: ' "$err")
  if [ "$rc" = 1 ] && [ "$(echo "$msg" | wc -l)" = 1 ] &&
     echo "$msg" | grep -q "^dtrain: error: checkpoint $mnt/ck/ckpt-000001-00000002.h5: .*No space left on device (--checkpoint-async: the state of epoch 2 step 2, written on the writer thread); found failed at global step [0-9]*$" &&
     [ "$(latest "$mnt/ck")" = ckpt-000000-00000003.h5 ] &&
     [ "$(ls -A "$mnt/ck" | tr '\n' ' ')" = "ckpt-000000-00000003.h5 latest " ]; then
    pass "disk full on the writer thread: $(echo "$msg" | sed "s|$T/||g"); exit 1, the first and latest kept"
  else
    fail "disk full: rc=$rc, dir: $(ls -A "$mnt/ck")"; cat "$err" >&2
  fi
  umount "$mnt"
else
  echo "SKIP (part): cannot mount a tmpfs here (needs root and mount rights); the disk-full case not run"
fi

expect_fail 2 "--checkpoint-async: needs --checkpoint-dir DIR" 2 $base --checkpoint-async

rm -rf "$T"
finish
