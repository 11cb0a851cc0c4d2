#!/bin/sh
# fsdp.sh: --strategy fsdp (ZeRO-3) trains the model data parallelism
# trains, and moves its state in the common checkpoint format.
#
# - 50 updates (2 epochs of 25) at 2 ranks: fsdp's per-step losses are the
#   mirrored strategy's within 1e-4 relative (the sums run in another order):
#   the CNN; tests/sanitizers/small.cfg (conv, batchnorm, add, route, pools,
#   dense) split into one bucket per layer at 3 ranks; --grad-accum 2;
#   --precision bf16. Another --seed is told apart.
# - The gathered parameters never exceed its two buffers (the largest even
#   and odd bucket; fsdp's own count of the bytes it holds, printed by
#   --verbose), and stay below the whole model where there are more than two
#   buckets.
# - Checkpoints move: fsdp's epoch-1 checkpoint at 2 ranks resumed by
#   mirrored (2 ranks) and by sharded (3 ranks, the same global batch) gives
#   fsdp's own epoch-2 losses; mirrored's resumed by fsdp at 3 ranks gives
#   mirrored's. fsdp's checkpoint holds the parameters mirrored's does at the
#   same step (/model, h5diff, 1e-5).
# - --export-keras from fsdp equals mirrored's (h5diff, 1e-5).
# - --fsdp-shard node (HSDP) at 4 ranks as 2 emulated nodes of 2: the
#   multi-worker strategy's losses within 1e-4.
# - The memory check at start (the node's memory claimed to be 1 MB): the
#   plan's message for mirrored, pointing to fsdp, and for fsdp itself.
# - Refused: --device cuda, a loss scale, --fsdp-shard without fsdp.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/fsdp.$$
rm -rf "$T"; mkdir -p "$T"
small=$TOP_SRCDIR/tests/sanitizers/small.cfg
tol=1e-4
base="--epochs 2 --steps-per-epoch 25 --batch-size 32 --no-validation --verbose --shard-policy data"
losses() { step_losses "$@"; } # NAME NP ARGS...: $T/NAME, $T/NAME.out (common.sh)
worst() { loss_worst "$@"; }
agree() { loss_agree "$@"; } # A B N WHAT

losses mir 2 --strategy mirrored --dropout 0
losses fs 2 --strategy fsdp --bucket-mb 0.1 --dropout 0
agree mir fs 50 "CNN, np=2: fsdp against mirrored"
losses mir-small 3 --strategy mirrored --model "$small" --batch-size 16
losses fs-small 3 --strategy fsdp --model "$small" --batch-size 16 --bucket-mb 0.00001
agree mir-small fs-small 50 "small.cfg, np=3, one bucket per layer: fsdp against mirrored"
# (mirrored sums each rank's micro-batches, then the ranks; fsdp the ranks,
# then the micro-batches: the same sum in another order, whose last bits
# Adam carries on, so the tolerance is data_order.sh's.)
losses mir-acc 2 --strategy mirrored --grad-accum 2 --dropout 0
losses fs-acc 2 --strategy fsdp --grad-accum 2 --bucket-mb 0.1 --dropout 0
tol=1e-3; agree mir-acc fs-acc 26 "--grad-accum 2 (13 updates an epoch): fsdp against mirrored"; tol=1e-4
if cpu_bf16; then
  losses mir-bf 2 --strategy mirrored --precision bf16 --dropout 0
  losses fs-bf 2 --strategy fsdp --precision bf16 --bucket-mb 0.1 --dropout 0
  agree mir-bf fs-bf 50 "--precision bf16: fsdp against mirrored"
else no_bf16 "--precision bf16, fsdp against mirrored"; fi
losses fs-seed 2 --strategy fsdp --bucket-mb 0.1 --seed 7 --dropout 0
w=$(worst fs fs-seed)
awk "BEGIN{exit !($w > 100 * $tol)}" && pass "negative control: another seed differs by $w" ||
  fail "negative control: another seed within $w"

# The bytes of gathered parameters held, as fsdp counts them.
line=$(grep '^fsdp: ' "$T/fs-small.out")
held=$(echo "$line" | sed -n 's/.*held at most \([0-9]*\) bytes.*/\1/p')
two=$(echo "$line" | sed -n 's/.*its two buffers, the largest even and odd bucket: \([0-9]*\) bytes.*/\1/p')
whole=$(echo "$line" | sed -n 's/.*the model: \([0-9]*\)).*/\1/p')
nb=$(sed -n 's/^layout: .*strategy fsdp, \([0-9]*\) buckets.*/\1/p' "$T/fs-small.out")
if [ -n "$held" ] && [ -n "$two" ] && [ -n "$whole" ] && [ "${nb:-0}" -gt 2 ] &&
   [ "$held" -gt 0 ] && [ "$held" -le "$two" ] && [ "$held" -lt "$whole" ]; then
  pass "small.cfg in $nb buckets: gathered parameters held at most $held bytes <= its two buffers ($two) < the model ($whole)"
else
  fail "held bytes: '$line', $nb buckets"
fi

# Checkpoints move between the layouts and rank counts.
ck() { epoch_ckpt "$@"; } # NAME NP ARGS...: epoch 1, its checkpoint in $T/NAME
tail -25 "$T/fs" >"$T/fs-2"
tail -25 "$T/mir" >"$T/mir-2"
ck ck-fs 2 --strategy fsdp --bucket-mb 0.1 --dropout 0
ck ck-mir 2 --strategy mirrored --dropout 0
losses fs-to-mir 2 --strategy mirrored --dropout 0 --resume "$T/ck-fs"
agree fs-2 fs-to-mir 25 "fsdp's checkpoint (np=2) resumed by mirrored (np=2): fsdp's epoch 2"
losses fs-to-sh 3 --strategy sharded --dropout 0 --batch-size 21 --resume "$T/ck-fs"
n=$(wc -l <"$T/fs-to-sh")
[ "$n" -ge 25 ] && [ "$(grep -c 'dtrain: note: --resume' "$err")" -ge 1 ] &&
  pass "fsdp's checkpoint (np=2) resumed by sharded at np=3: $n updates, with the re-shard note" ||
  fail "fsdp's checkpoint resumed by sharded at np=3: $n updates"
losses mir-to-fs 3 --strategy fsdp --bucket-mb 0.1 --dropout 0 --batch-size 21 --resume "$T/ck-mir"
losses mir-to-sh3 3 --strategy sharded --dropout 0 --batch-size 21 --resume "$T/ck-mir"
agree mir-to-sh3 mir-to-fs "$(wc -l <"$T/mir-to-sh3")" "mirrored's checkpoint resumed at np=3 by fsdp and by sharded: the same continuation"
a=$(ls "$T"/ck-fs/ckpt-*.h5 | head -1) b=$(ls "$T"/ck-mir/ckpt-*.h5 | head -1)
if [ -n "$a" ] && [ -n "$b" ] && h5diff -d 1e-5 "$a" "$b" /model >"$T/h5diff.out" 2>&1; then
  pass "fsdp's and mirrored's epoch-1 checkpoints hold the same /model weights (1e-5)"
else
  fail "/model differs between $a and $b:"; head "$T/h5diff.out" >&2; h5ls -r "$a" | head >&2
fi

# --export-keras
run_np 2 "$fm" $base --epochs 1 --strategy fsdp --bucket-mb 0.1 --dropout 0 --export-keras "$T/fs.weights.h5"
rc1=$rc
run_np 2 "$fm" $base --epochs 1 --strategy mirrored --dropout 0 --export-keras "$T/mir.weights.h5"
if [ "$rc1" = 0 ] && [ "$rc" = 0 ] && h5diff -d 1e-5 "$T/fs.weights.h5" "$T/mir.weights.h5" >"$T/kd.out" 2>&1; then
  pass "--export-keras: fsdp's weights are mirrored's (1e-5)"
else
  fail "--export-keras: rc=$rc1/$rc"; head "$T/kd.out" >&2
fi

# HSDP: shards inside each of 2 emulated nodes, replicas across them.
losses mw4 4 --strategy multi-worker --ranks-per-node 2 --batch-size 16 --dropout 0
losses hs4 4 --strategy fsdp --fsdp-shard node --ranks-per-node 2 --batch-size 16 --bucket-mb 0.1 --dropout 0
agree mw4 hs4 50 "--fsdp-shard node, 2 emulated nodes x 2 ranks: HSDP against multi-worker"

# The memory check at start, with the node's available memory claimed small.
export DTRAIN_TEST_MEM_AVAILABLE=1000000
expect_fail 2 "--strategy mirrored: model cnn (225034 parameters) needs about [0-9.]* GiB per rank (parameters [0-9.]*, gradients [0-9.]*, optimizer slots [0-9.]*, activations [0-9.]*), [0-9.]* GiB for this node's 2 ranks, and the node has 0.0 GiB available; --strategy fsdp keeps 1/2 of the parameters" \
  2 "$fm" --strategy mirrored
expect_fail 2 "--strategy fsdp: model cnn .*gathered buckets .* fewer ranks per node, more nodes, or a smaller --batch-size" \
  2 "$fm" --strategy fsdp
unset DTRAIN_TEST_MEM_AVAILABLE

expect_fail 2 "--fsdp-shard node: only with --strategy fsdp" 2 "$fm" --fsdp-shard node
expect_fail 2 "--strategy fsdp: runs on the CPU only so far" 2 "$fm" --strategy fsdp --device cuda
expect_fail 2 "--loss-scale: only the mirrored and multi-worker strategies apply a loss scale (strategy fsdp)" 2 "$fm" \
  --strategy fsdp --loss-scale 128
rm -rf "$T"
finish
