#!/bin/sh
# lr_schedule.sh: learning-rate schedules end to end (2 ranks).
#
# The rate each epoch ended with (the metrics file's lr column) follows the
# schedule's formula; --lr-scale linear doubles it at 2 ranks; a step
# schedule drops at the listed epochs; resuming mid-schedule continues the
# same rates and losses; bad combinations are refused.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/lr.$$
rm -rf "$T"; mkdir -p "$T"
base="$fm --batch-size 32 --steps-per-epoch 10 --epochs 4"
lrs() { grep '^epoch,' "$1" | cut -d, -f12 | tr '\n' ' '; }

run_np 2 $base --lr-schedule cosine --warmup-epochs 1 --lr-scale linear --metrics "$T/cos.csv"
# peak 0.002 (0.001 x 2), warm-up 10 steps, cosine over the next 30 to 0
want=$(awk 'BEGIN { pi = atan2(0, -1); printf "%.7g ", 0.002
                    for (k = 19; k <= 39; k += 10) printf "%.7g ", 0.001 * (1 + cos(pi * (k - 10) / 30)) }')
got=$(lrs "$T/cos.csv")
if [ "$rc" = 0 ] && awk -v g="$got" -v w="$want" 'BEGIN { n = split(g, a, " "); split(w, b, " ")
      for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > 1e-9 + 1e-6 * b[i]) exit 1 } exit !(n == 4) }'; then
  pass "cosine with warm-up and --lr-scale linear: epoch-end rates $got"
else
  fail "cosine rates: got '$got', want '$want' (rc=$rc)"; cat "$err" >&2
fi
run_np 2 $base --lr-schedule step --lr-steps 2,4 --lr-factor 0.5 --metrics "$T/step.csv"
got=$(lrs "$T/step.csv")
[ "$rc" = 0 ] && [ "$got" = "0.001 0.0005 0.0005 0.00025 " ] && pass "step schedule: $got" ||
  fail "step rates: '$got' (rc=$rc)"
# constant is the default: the same losses as before schedules existed
run_np 2 $base --metrics "$T/const.csv"
[ "$(lrs "$T/const.csv")" = "0.001 0.001 0.001 0.001 " ] && pass "constant by default" || fail "constant: $(lrs "$T/const.csv")"
# resuming in the middle of a schedule gives the same rates and losses
run_np 2 $base --lr-schedule cosine --warmup-epochs 1 --checkpoint-dir "$T/ck" --metrics "$T/a.csv"
# (the schedule spans --epochs, so the interrupted run is the same 4-epoch
# run, restarted from its epoch-2 checkpoint)
run_np 2 $base --lr-schedule cosine --warmup-epochs 1 --checkpoint-dir "$T/ck2" --resume "$T/ck/ckpt-000002-00000000.h5" \
  --metrics "$T/b.csv"
a=$(grep '^epoch,[34],' "$T/a.csv" | cut -d, -f2,8,12); b=$(grep '^epoch,[34],' "$T/b.csv" | cut -d, -f2,8,12)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "resumed after epoch 2: epochs 3-4 have the same loss and rate" ||
  { fail "resume: '$a' vs '$b'"; }

expect_fail 2 "--lr-schedule: expected constant, step or cosine, found 'poly'" 2 $base --lr-schedule poly
expect_fail 2 "--lr-schedule step: needs --lr-steps E1,E2,..." 2 $base --lr-schedule step
expect_fail 2 "--lr-steps: expected up to 16 increasing epoch numbers above 1, e.g. 30,60,80, found '3,2'" 2 $base --lr-schedule step --lr-steps 3,2
expect_fail 2 "--lr-min: only with --lr-schedule cosine" 2 $base --lr-min 0.1
expect_fail 2 "--lr-scale: expected linear or none, found 'sqrt'" 2 $base --lr-scale sqrt
expect_fail 2 "--lr-schedule/--warmup-epochs: the parameter server applies gradients as they arrive" \
  3 $base --strategy parameter-server --lr-schedule cosine
rm -rf "$T"
finish
