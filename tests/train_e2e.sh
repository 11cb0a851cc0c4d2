#!/bin/sh
# train_e2e.sh: dtrain end to end on a few thousand Fashion-MNIST samples.
#
# - it learns: validation accuracy far above chance (10%), for the CNN and MLP;
# - determinism: the same seed and rank count print identical losses;
#   another seed prints different ones;
# - shards: three shard files hold the same samples in the same global order
#   as the single file, so the data policy gives identical losses; the file
#   policy trains too;
# - awkward sizes: fewer samples than ranks, and uneven remainders, finish.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/e2e.$$
mkdir -p "$T"

val_acc() { sed -n 's/.*val_accuracy: \([0-9.]*\).*/\1/p' "$1" | tail -1; }
# Per-step and per-epoch figures without the timings, which legitimately vary.
losses() { sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//' "$1" | grep -E '^(step|Epoch)'; }

# --- it learns ---
run_np 2 "$fm" --epochs 2 --batch-size 32
acc=$(val_acc "$out")
if [ "$rc" = 0 ] && awk "BEGIN{exit !($acc > 0.70)}"; then pass "cnn np=2 learns: val_accuracy $acc"
else fail "cnn np=2: rc=$rc val_accuracy '$acc' (want > 0.70)"; cat "$out" "$err"; fi
grep -q '^Epoch 2/2 - .* samples/s - loss: .* - accuracy: .* - val_loss: .* - val_accuracy: ' "$out" ||
  fail "epoch line format: $(tail -1 "$out")"

run_np 1 "$fm" --model mlp --epochs 3 --batch-size 32
acc=$(val_acc "$out")
if [ "$rc" = 0 ] && awk "BEGIN{exit !($acc > 0.70)}"; then pass "mlp np=1 learns: val_accuracy $acc"
else fail "mlp np=1: rc=$rc val_accuracy '$acc'"; cat "$out" "$err"; fi

# --- determinism ---
args="--epochs 1 --steps-per-epoch 15 --batch-size 32 --verbose"
run_np 2 "$fm" $args; losses "$out" >"$T/a"
run_np 2 "$fm" $args; losses "$out" >"$T/b"
run_np 2 "$fm" $args --seed 7; losses "$out" >"$T/c"
if [ -s "$T/a" ] && cmp -s "$T/a" "$T/b"; then pass "same seed, same losses ($(wc -l <"$T/a") lines)"
else fail "same seed gave different output"; diff "$T/a" "$T/b" | head; fi
if cmp -s "$T/a" "$T/c"; then fail "--seed 7 gave the same losses as --seed 42"; else pass "another seed, other losses"; fi

# --- shards: same global order as the single file ---
"$DTRAIN_PREP" --quiet --force --limit-train 4096 --limit-test 1024 --shards 3 "$T/fm.h5" >/dev/null ||
  fail "dtrain-prep --shards 3"
shards="$T/fm-00000-of-00003.h5 $T/fm-00001-of-00003.h5 $T/fm-00002-of-00003.h5"
run_np 2 $shards $args --shard-policy data; losses "$out" >"$T/s"
if [ "$rc" = 0 ] && cmp -s "$T/a" "$T/s"; then pass "3 shards, data policy: identical losses to the single file"
else fail "3 shards (data policy) differ from the single file (rc=$rc)"; diff "$T/a" "$T/s" | head; cat "$err"; fi
run_np 3 $shards --epochs 1 --batch-size 32 --shard-policy file
acc=$(val_acc "$out")
if [ "$rc" = 0 ] && awk "BEGIN{exit !($acc > 0.5)}"; then pass "3 shards, file policy, np=3: val_accuracy $acc"
else fail "file policy np=3: rc=$rc val_accuracy '$acc'"; cat "$err"; fi

# --- awkward sizes: no hang, every rank finishes ---
"$MKFIXTURE" good "$T/tiny.h5" 3 >/dev/null
run_np 4 "$T/tiny.h5" --epochs 2 --batch-size 2
if [ "$rc" = 0 ] && grep -q '^Epoch 2/2' "$out"; then pass "3 samples on 4 ranks"; else fail "3 samples on 4 ranks: rc=$rc"; cat "$err"; fi
"$MKFIXTURE" good "$T/odd.h5" 37 >/dev/null
run_np 3 "$T/odd.h5" --epochs 1 --batch-size 4 --model mlp --verbose
steps=$(grep -c '^step ' "$out")
# 37 samples, global batch 12: 4 steps, the last with one sample.
if [ "$rc" = 0 ] && [ "$steps" = 4 ]; then pass "37 samples, np=3, batch 4: 4 steps"; else fail "37 samples np=3: rc=$rc steps=$steps"; cat "$err"; fi

rm -rf "$T"
finish
