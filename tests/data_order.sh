#!/bin/sh
# data_order.sh: the same run at any rank count, also in short epochs.
#
# With the same seed and global batch, global step k trains on the same
# samples at every rank count, so with dropout off the losses agree step by
# step up to the all-reduce's rounding (tests/equivalence.sh's tolerance,
# 1e-3 relative). Checked over 3 epochs cut short by --steps-per-epoch
# (each epoch draws its own permutation; the rest of it is not used):
# - np=1 batch 96 against np=2 batch 48 and np=3 batch 32 (30 steps each);
#   at np=1 --shard-policy auto resolves to file with one file, and its
#   order must equal the data policy's, bit for bit;
# - np=1's checkpoint at epoch 2 step 5 resumed at np=2 batch 48: the epoch
#   goes on where it stopped, with np=1's last 15 losses;
# - --grad-accum 2: np=1 batch 48 against np=3 batch 16 (--steps-per-epoch
#   counts batches, as Keras's does: 10 batches are 5 updates);
# - the check can fail: another --seed differs from epoch 1 on.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/order.$$
mkdir -p "$T"
tol=${EQ_TOL:-1e-3}
args="--dropout 0 --epochs 3 --steps-per-epoch 10 --no-validation --verbose"
losses() { # NAME NP ARGS...: the step losses of a run into $T/NAME
  name=$1; np=$2; shift 2
  run_np "$np" "$fm" $args "$@"
  [ "$rc" = 0 ] || { fail "$name: rc=$rc"; cat "$err" >&2; }
  grep '^step ' "$out" | sed 's/.*loss: \([0-9.]*\).*/\1/' >"$T/$name"
}
worst() { loss_worst "$@"; }
agree() { loss_agree "$@"; } # A B N WHAT

losses one 1 --batch-size 96
losses data1 1 --batch-size 96 --shard-policy data
losses two 2 --batch-size 48
losses three 3 --batch-size 32
cmp -s "$T/one" "$T/data1" && [ -s "$T/one" ] &&
  pass "np=1: --shard-policy file (auto with one file) and data give the same losses, bit for bit" ||
  { fail "np=1: file and data policies differ"; paste "$T/one" "$T/data1" | head -12 >&2; }
agree one two 30 "np=1 batch 96 vs np=2 batch 48"
agree one three 30 "np=1 batch 96 vs np=3 batch 32"

losses acc1 1 --batch-size 48 --grad-accum 2
losses acc3 3 --batch-size 16 --grad-accum 2
agree acc1 acc3 15 "--grad-accum 2: np=1 batch 48 vs np=3 batch 16"

# Resumed mid-epoch at another rank count with the same global batch: the
# epoch goes on where it stopped, on the same samples.
run_np 1 "$fm" $args --batch-size 96 --checkpoint-dir "$T/ck" --checkpoint-every 5step --keep 0
mid=$T/ck/ckpt-000001-00000005.h5
if [ "$rc" = 0 ] && [ -f "$mid" ]; then
  losses resumed 2 --batch-size 48 --resume "$mid"
  tail -15 "$T/one" >"$T/one-tail"
  if grep -q 'dtrain: note: --resume: .*the same global batch deals the same samples.*the interrupted epoch goes on where it stopped' "$err"; then
    pass "resumed at np=2 from np=1's checkpoint at epoch 2 step 5: noted, the epoch goes on"
  else
    fail "resume at np=2: no note that the epoch goes on"; cat "$err" >&2
  fi
  agree one-tail resumed 15 "np=1's checkpoint at epoch 2 step 5 resumed at np=2 batch 48 (the last 15 of np=1's losses)"
else
  fail "np=1 run with checkpoints: rc=$rc, no $mid"; cat "$err" >&2
fi

losses seed 1 --batch-size 96 --seed 2
w=$(worst one seed)
awk "BEGIN{exit !($w > 10 * $tol)}" && pass "another --seed is told apart ($w)" ||
  fail "the comparison cannot tell --seed 2 from the default ($w)"
rm -rf "$T"
finish
