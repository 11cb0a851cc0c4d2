#!/bin/sh
# map_threads.sh: --map-threads N splits each batch's reads and augmentation
# over N threads and changes nothing else: end to end at 2 ranks, every
# step's and epoch's figures with 3 threads are those of 1 thread, bit for
# bit as printed:
#
# - pread through the address table, with --augment flip,crop;
# - --prefetch 0 (rows through HDF5 in the training loop; the threads
#   augment);
# - --cache (epoch 2 from memory) with augmentation;
# - --synthetic rows, generated on the threads;
# - a resume mid-epoch from a checkpoint written with 1 thread.
# The run summary names the thread count, and auto says how it chose.
# A negative control: another --seed prints other figures.
# (Bad values of the flag: cli_errors.sh; the batches byte for byte:
# check_loader.)
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/map_threads.$$
rm -rf "$T"; mkdir -p "$T"
# Step and epoch lines without timings.
figures() { sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' "$1" | grep -E '^(step|Epoch)'; }

# same NAME ARGS...: --map-threads 3 prints the figures of --map-threads 1
same() {
  name=$1; shift
  run_np 2 "$@" --map-threads 1 --verbose
  rc1=$rc; figures "$out" >"$T/m1"; cp "$err" "$T/err1"
  run_np 2 "$@" --map-threads 3 --verbose
  figures "$out" >"$T/m3"
  line=$(grep '^  input pipeline ' "$out")
  if [ "$rc1" = 0 ] && [ "$rc" = 0 ] && [ "$(grep -c '^Epoch' "$T/m3")" = 2 ] && cmp -s "$T/m1" "$T/m3" &&
     echo "$line" | grep -q ', 3 map threads, '; then
    pass "$name: 3 map threads print the figures of 1 ($(grep -c '^step' "$T/m3") steps, 2 epochs); $line"
  else
    fail "$name: rc=$rc1/$rc, '$line'"; diff "$T/m1" "$T/m3" | head >&2; cat "$T/err1" "$err" >&2
  fi
}
base="--epochs 2 --batch-size 32 --steps-per-epoch 24"
same "pread, --augment flip,crop" "$fm" $base --augment flip,crop
same "--prefetch 0 (HDF5 reads)" "$fm" $base --augment flip,crop:2 --prefetch 0
same "--cache" "$fm" $base --augment flip --cache
same "--synthetic" --synthetic 16x16x3:10:2048 --epochs 2 --batch-size 32 --steps-per-epoch 20 --augment crop

# Resume mid-epoch: a checkpoint of 1 thread, resumed with 3, ends as the
# uninterrupted run of 1 thread.
args="$fm --epochs 2 --batch-size 32 --steps-per-epoch 20 --augment flip,crop --dropout 0"
run_np 2 $args --map-threads 1 --verbose
figures "$out" | tail -n 15 >"$T/whole"
run_np 2 $args --map-threads 1 --checkpoint-dir "$T/ck" --checkpoint-every 5step --keep 0
rc1=$rc; mid=$T/ck/ckpt-000001-00000005.h5
[ -f "$mid" ] || { fail "no checkpoint $mid:"; ls "$T/ck" >&2; }
run_np 2 $args --map-threads 3 --resume "$mid" --verbose
figures "$out" | tail -n 15 >"$T/resumed"
if [ "$rc1" = 0 ] && [ "$rc" = 0 ] && [ -s "$T/whole" ] && cmp -s "$T/whole" "$T/resumed"; then
  pass "resume mid-epoch with 3 threads from a checkpoint of 1: the last 15 figures of the whole run"
else
  fail "resume: rc=$rc1/$rc"; diff "$T/whole" "$T/resumed" | head >&2; cat "$err" >&2
fi

# auto: the summary says how it chose
run_np 1 "$fm" --epochs 1 --batch-size 32 --steps-per-epoch 4
line=$(grep '^  input pipeline ' "$out")
if [ "$rc" = 0 ] && echo "$line" | grep -Eq 'map threads? \(auto: [0-9]+ CPUs? for this rank \(.*\), 1 for --threads\), rows read with pread\(\)'; then
  pass "auto: $line"
else
  fail "auto: rc=$rc, '$line'"; cat "$err" >&2
fi

# Negative control: the comparison tells runs apart.
run_np 2 "$fm" $base --augment flip,crop --map-threads 3 --seed 7 --verbose
figures "$out" >"$T/seed7"
if [ "$rc" = 0 ] && ! cmp -s "$T/m1" "$T/seed7" && [ -s "$T/seed7" ]; then
  pass "negative control: another seed prints other figures"
else
  fail "negative control: rc=$rc, same figures for another seed"
fi
rm -rf "$T"
finish
