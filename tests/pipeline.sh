#!/bin/sh
# pipeline.sh: --pipeline-stages P --micro-batches M train the model data
# parallelism trains, and move their state in the common checkpoint format.
#
# - 50 updates (2 epochs of 25), global batch 32: the pipelined run's
#   per-step losses against the data-parallel run's with the same samples
#   in each update: M micro-batches are data parallelism's --grad-accum M
#   with a batch M times smaller (the gradient summed over the same parts,
#   in the same order). The CNN at P = 2 and 3 (np = P, one replica) with
#   M = 1 and 4, and M = 4 with --precision bf16; a 2 x 2 mesh (P = 2, D = 2) against mirrored at np = 2
#   (M = 4: 1e-3, see below);
#   tests/pipeline.cfg (batchnorm, residual add, route; cut by its [stage]
#   lines) at P = 3 with M = 1 and M = 3, where batchnorm normalises each
#   micro-batch by its own statistics (as frameworks do), as --grad-accum
#   does; that differs from one batch of 30, by little. Tolerance 1e-4
#   relative. Another --seed is told apart.
# - Validation runs through the stages: its loss is data parallelism's.
# - Checkpoints move: a pipelined run's epoch-1 checkpoint (P = 2, M = 4)
#   resumed without stages (np = 1) gives the pipelined run's epoch 2;
#   data parallelism's resumed at P = 3 gives its own; a P = 2 checkpoint
#   holds data parallelism's /model and /optimizer (h5diff, 1e-5); fsdp's
#   resumed at P = 2 and a P = 2 one resumed by fsdp continue as their
#   own runs (fsdp sums two ranks' halves of each batch).
# - The run says its layout (stages, cut, micro-batches) and its bubble;
#   the memory report has a line a stage whose parameters add up to the
#   model's, with min(M, P-k) copies of stage k for micro-batches in flight.
# - Refused, one message, exit 2: stages that do not divide the ranks, more
#   stages than layers, a [stage] count that is not P - 1, a [stage] that
#   cuts through a residual block, [stage] lines out of place in the file,
#   the parameter server / fsdp / --grad-accum / --sync-bn / --allreduce /
#   --overlap with stages, --micro-batches alone or above the batch, a
#   micro-batch's activations beyond one MPI message.
# - A stage that stops coming is named by the stall watchdog of the stage
#   that waits for it, and the job ends.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/pipeline.$$
rm -rf "$T"; mkdir -p "$T"
cfg=$TOP_SRCDIR/tests/pipeline.cfg
tol=1e-4
base="--epochs 2 --steps-per-epoch 25 --no-validation --verbose --shard-policy data"
drop="--dropout 0" # the CNN's; a model file has its own
losses() { step_losses "$@"; } # NAME NP ARGS...: $T/NAME, $T/NAME.out (common.sh)
agree() { loss_agree "$@"; } # A B N WHAT

losses dp 1 --batch-size 32 $drop
losses p2m1 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 1
agree dp p2m1 50 "CNN, P=2 M=1 (np=2) against data parallelism at np=1"
losses p3m1 3 --batch-size 32 $drop --pipeline-stages 3 --micro-batches 1
agree dp p3m1 50 "CNN, P=3 M=1"
losses dpga 1 --batch-size 8 --grad-accum 4 --steps-per-epoch 100 $drop
losses p2m4 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 4
agree dpga p2m4 50 "CNN, P=2 M=4 against --grad-accum 4 of batches of 8"
losses p3m4 3 --batch-size 32 $drop --pipeline-stages 3 --micro-batches 4
agree dpga p3m4 50 "CNN, P=3 M=4"
losses dp2 2 --batch-size 16 --strategy mirrored $drop
losses mesh1 4 --batch-size 16 $drop --pipeline-stages 2 --micro-batches 1
agree dp2 mesh1 50 "CNN, a 2 x 2 mesh (P=2, D=2, M=1) against mirrored at np=2"
# (--grad-accum 4 at np=2 deals each update's 32 samples to the two ranks'
# micro-batches in another grouping than a mesh's replicas do: the same
# sum in other parts, whose last bits Adam carries on; data_order.sh's
# tolerance.)
losses dp2ga 2 --batch-size 4 --grad-accum 4 --steps-per-epoch 100 --strategy mirrored $drop
losses mesh 4 --batch-size 16 $drop --pipeline-stages 2 --micro-batches 4
tol=1e-3; agree dp2ga mesh 50 "CNN, a 2 x 2 mesh (P=2, D=2, M=4) against mirrored --grad-accum 4 at np=2"; tol=1e-4
if cpu_bf16; then
  losses bf-p2 2 --batch-size 32 $drop --precision bf16 --pipeline-stages 2 --micro-batches 4
  losses bf-ga 1 --batch-size 8 --grad-accum 4 --steps-per-epoch 100 $drop --precision bf16
  agree bf-ga bf-p2 50 "--precision bf16 (16-bit activations between the stages), P=2 M=4 against --grad-accum 4"
else no_bf16 "--precision bf16 between pipeline stages"; fi
losses seed 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 4 --seed 7
w=$(loss_worst p2m4 seed)
awk "BEGIN{exit !($w > 100 * $tol)}" && pass "negative control: another seed differs by $w" ||
  fail "negative control: another seed within $w"

# The layout line and the bubble line.
if grep -q '^layout: .*strategy pipeline: 3 stages x 1 replica, layers 0-[0-9] | [0-9]-[0-9] | [0-9]-6 (balanced by measured layer times), 4 micro-batches of 8, 1F1B' "$T/p3m4.out" &&
   grep -q '^dtrain [^ ]*: 1 replica x batch 32 = global batch 32' "$T/p3m4.out" &&
   grep -Eq '^  pipeline +3 stages x 1 replica, 4 micro-batches: bubble [0-9.]+% .*ideal \(P-1\)/\(M\+P-1\) = 33.3%' "$T/p3m4.out"; then
  pass "P=3 M=4: the layout (stages, cut, micro-batches) and the bubble against the ideal 33.3%"
  n=$(sed -n 's/^pipeline: layer times measured for the cut (forward + backward of a micro-batch, ms): //p' "$T/p3m4.out" | tr ',' '\n' | grep -c '^ *[a-z_0-9]* [0-9.]*$')
  [ "$n" = 7 ] && pass "--verbose: the 7 layers' measured times the cut balanced" || fail "measured layer times: $n of 7"
else
  fail "layout or bubble line:"; grep -E '^(layout|dtrain |  pipeline)' "$T/p3m4.out" >&2
fi

# The memory report: a line a stage; the stages' parameters make the model's
# (225034 floats), and stage k holds min(M, P-k) copies for micro-batches in flight.
sum=$(sed -n 's/^pipeline stage [0-9] (.*): parameters \([0-9.]*\) MiB.*/\1/p' "$T/p3m4.out" | awk '{ s += $1 } END { print s + 0 }')
if [ "$(grep -c '^pipeline stage ' "$T/p3m4.out")" = 3 ] &&
   awk "BEGIN { exit !($sum > 225034 * 4 / 1048576 - 0.02 && $sum < 225034 * 4 / 1048576 + 0.02) }" &&
   grep -q '^pipeline stage 0 (layers 0-.*(3 copies of the stage)' "$T/p3m4.out" &&
   grep -q '^pipeline stage 1 .*(2 copies of the stage)' "$T/p3m4.out" &&
   grep -q '^pipeline stage 2 .*(1 copy of the stage)' "$T/p3m4.out"; then
  pass "memory report at P=3 M=4: the stages' parameters add up to the model's ($sum MiB), 3/2/1 copies in flight"
else
  fail "memory report ($sum MiB):"; grep '^pipeline stage' "$T/p3m4.out" >&2
fi

# A model with batchnorm and residuals, cut by its [stage] lines.
losses bn-dp 1 --batch-size 32 --model "$cfg"
losses bn-p3 3 --batch-size 32 --model "$cfg" --pipeline-stages 3 --micro-batches 1
agree bn-dp bn-p3 50 "pipeline.cfg (batchnorm, add, route), P=3 M=1 by its [stage] lines"
grep -q 'strategy pipeline: 3 stages x 1 replica, layers 0-1 | 2-4 | 5-10 (\[stage\] lines)' "$T/bn-p3.out" &&
  pass "pipeline.cfg: the cut is its [stage] lines' (0-1 | 2-4 | 5-10)" || fail "pipeline.cfg's cut: $(grep '^layout' "$T/bn-p3.out")"
losses bn-dpga 1 --batch-size 10 --grad-accum 3 --steps-per-epoch 75 --model "$cfg"
losses bn-p3m3 3 --batch-size 30 --model "$cfg" --pipeline-stages 3 --micro-batches 3
agree bn-dpga bn-p3m3 50 "pipeline.cfg, P=3 M=3: batchnorm by micro-batch, as --grad-accum 3 of batches of 10"
losses bn-30 3 --batch-size 30 --model "$cfg" --pipeline-stages 3 --micro-batches 1
w=$(loss_worst bn-30 bn-p3m3)
awk "BEGIN{exit !($w > 1e-6 && $w < 0.05)}" &&
  pass "M=3 against one batch of 30: batchnorm's statistics per micro-batch differ, by $w (within 5%)" ||
  fail "M=3 against M=1 with batchnorm: worst relative difference $w (expected between 1e-6 and 0.05)"

# Validation through the stages.
vloss() { sed -n 's/^Epoch 1\/1 .*val_loss: \([0-9.]*\).*/\1/p' "$out"; }
run_np 1 "$fm" --epochs 1 --steps-per-epoch 10 --batch-size 32 $drop
v1=$(vloss)
run_np 3 "$fm" --epochs 1 --steps-per-epoch 10 --batch-size 32 $drop --pipeline-stages 3 --micro-batches 2
v3=$(vloss)
[ -n "$v1" ] && [ "$v1" = "$v3" ] && pass "validation through 3 stages: val_loss $v3 = data parallelism's" ||
  fail "validation: np=1 '$v1', P=3 '$v3' (rc=$rc)"

# Checkpoints move between the layouts.
ck() { epoch_ckpt "$@"; } # NAME NP ARGS...: epoch 1, its checkpoint in $T/NAME
tail -25 "$T/p2m4" >"$T/p2m4-2"
tail -25 "$T/dp" >"$T/dp-2"
ck ck-p2 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 4
losses p2-to-dp 1 --batch-size 8 --grad-accum 4 --steps-per-epoch 100 $drop --resume "$T/ck-p2"
agree p2m4-2 p2-to-dp 25 "a P=2 M=4 checkpoint resumed without stages (np=1, --grad-accum 4): the pipelined run's epoch 2"
ck ck-dp 1 --batch-size 32 $drop
losses dp-to-p3 3 --batch-size 32 $drop --pipeline-stages 3 --micro-batches 1 --resume "$T/ck-dp"
agree dp-2 dp-to-p3 25 "a data-parallel checkpoint resumed at P=3: data parallelism's epoch 2"
ck ck-p2m1 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 1
# And with fsdp (ZeRO-3), the third layout: the same 32 samples an update,
# summed over 2 ranks' halves there (fsdp.sh's tolerance against mirrored).
losses fs 2 --batch-size 16 $drop --strategy fsdp --bucket-mb 0.1
tail -25 "$T/fs" >"$T/fs-2"
ck ck-fs 2 --batch-size 16 $drop --strategy fsdp --bucket-mb 0.1
losses fs-to-p2 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 1 --resume "$T/ck-fs"
losses p2-to-fs 2 --batch-size 16 $drop --strategy fsdp --bucket-mb 0.1 --resume "$T/ck-p2m1"
agree fs-2 fs-to-p2 25 "an fsdp checkpoint (np=2) resumed at P=2: fsdp's epoch 2"
agree dp-2 p2-to-fs 25 "a P=2 M=1 checkpoint resumed by fsdp (np=2): data parallelism's epoch 2"
a=$(ls "$T"/ck-p2m1/ckpt-*.h5 | head -1) b=$(ls "$T"/ck-dp/ckpt-*.h5 | head -1)
if [ -n "$a" ] && [ -n "$b" ] && h5diff -d 1e-5 "$a" "$b" /model >"$T/h5diff.out" 2>&1 &&
   h5diff -d 1e-5 "$a" "$b" /optimizer >>"$T/h5diff.out" 2>&1; then
  pass "the pipelined and the data-parallel epoch-1 checkpoints hold the same /model and /optimizer (1e-5)"
else
  fail "/model or /optimizer differs between $a and $b:"; head "$T/h5diff.out" >&2
fi

# A stage that stops coming (DTRAIN_TEST_STALL=RANK:UPDATE sleeps 600 s
# there): the stage waiting for it is named by the stall watchdog.
t0=$(date +%s)
DTRAIN_TEST_STALL=1:5 launch 2 -x DTRAIN_TEST_STALL "$DTRAIN" --synthetic 8x8x3:4:2048 --model mlp --epochs 1 \
  --batch-size 32 --pipeline-stages 2 --stall-timeout 2 >"$T/stall.out" 2>"$T/stall.err"; rc=$?
t1=$(date +%s)
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((t1 - t0)) -le 30 ] && [ "$(grep -c '^dtrain: error: ' "$T/stall.err")" = 1 ] &&
   grep -q '^dtrain: error: rank 0 waited 2 s in a pipeline receive of gradients at epoch 1 step 5 (--stall-timeout 2): not arrived: rank 1 ' "$T/stall.err"; then
  pass "--stall-timeout 2: stage 1 stopped at update 5; stage 0 waiting for its gradients named it, the job ended in $((t1 - t0)) s"
else fail "pipeline stall (rc=$rc, $((t1 - t0)) s)"; cat "$T/stall.err" >&2; fi

# Refusals.
expect_fail 2 "--pipeline-stages 2 does not divide the job's 3 ranks" 3 "$fm" --pipeline-stages 2
expect_fail 2 "--pipeline-stages 3: more stages than model mlp's 2 layers" 3 "$fm" --model mlp --pipeline-stages 3
expect_fail 2 "--pipeline-stages 2: model .*pipeline.cfg has 2 \[stage\] lines, which make 3 stages; give --pipeline-stages 3" \
  2 "$fm" --model "$cfg" --pipeline-stages 2
printf '[conv2d]\nfilters = 4\nkernel = 3\npadding = same\n[batchnorm]\n[conv2d]\nfilters = 4\nkernel = 3\npadding = same\n[stage]\n[add]\nfrom = -2\n[flatten]\n[dense]\nunits = classes\n' >"$T/through.cfg"
expect_fail 2 "the \[stage\] before layer add cuts through a residual block" 2 "$fm" --model "$T/through.cfg" --pipeline-stages 2
printf '[stage]\n[dense]\nunits = classes\n' >"$T/first.cfg"
expect_fail 2 "first.cfg:1: \[stage\] before the first layer" 2 "$fm" --model "$T/first.cfg" --pipeline-stages 2
printf '[dense]\nunits = 8\n[stage]\n[stage]\n[dense]\nunits = classes\n' >"$T/twice.cfg"
expect_fail 2 "twice.cfg:4: \[stage\] twice with no layer between" 2 "$fm" --model "$T/twice.cfg" --pipeline-stages 2
printf '[dense]\nunits = classes\n[stage]\n' >"$T/last.cfg"
expect_fail 2 "last.cfg:3: \[stage\] after the last layer" 2 "$fm" --model "$T/last.cfg" --pipeline-stages 2
printf '[dense]\nunits = 8\n[stage]\nunits = 3\n[dense]\nunits = classes\n' >"$T/keys.cfg"
expect_fail 2 "keys.cfg:4: 'units = 3' after \[stage\], which takes no keys" 2 "$fm" --model "$T/keys.cfg" --pipeline-stages 2
printf '[dense]\nunits = 5120\n[dense]\nunits = classes\n' >"$T/wide.cfg"
expect_fail 2 "--pipeline-stages 2: a micro-batch's activations after layer dense are 2457600000 bytes, more than one MPI message holds" \
  2 --synthetic 8x8x3:4:64 --model "$T/wide.cfg" --pipeline-stages 2 --micro-batches 1 --batch-size 120000
expect_fail 2 "--pipeline-stages 2 with --strategy parameter-server: " 2 "$fm" --pipeline-stages 2 --strategy parameter-server
expect_fail 2 "--pipeline-stages 2 with --strategy fsdp: " 2 "$fm" --pipeline-stages 2 --strategy fsdp
expect_fail 2 "--grad-accum 2 with --pipeline-stages: .*use --micro-batches M" 2 "$fm" --pipeline-stages 2 --grad-accum 2
expect_fail 2 "--sync-bn with --pipeline-stages: " 2 "$fm" --pipeline-stages 2 --sync-bn
expect_fail 2 "--micro-batches: splits a batch between pipeline stages; give --pipeline-stages P" 2 "$fm" --micro-batches 4
expect_fail 2 "--micro-batches 40: more micro-batches than the 32 samples of a batch" 2 "$fm" --pipeline-stages 2 \
  --batch-size 32 --micro-batches 40
expect_fail 2 "--pipeline-stages: runs on the CPU only so far" 2 "$fm" --pipeline-stages 2 --device cuda
expect_fail 2 "--allreduce with --pipeline-stages: .*one MPI_Allreduce after its last micro-batch" 2 "$fm" --pipeline-stages 2 \
  --allreduce ring
expect_fail 2 "--overlap with --pipeline-stages: " 2 "$fm" --pipeline-stages 2 --overlap
rm -rf "$T"
finish
