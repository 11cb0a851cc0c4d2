#!/bin/sh
# reliability.sh: failing fast and saying why (issue 10's guards).
#
# --nan-policy: a NaN or infinity injected into the gradient ends the job
# with the epoch, step and layer under every strategy (a parameter-server
# worker ends it before a server applies the push), or is skipped and
# counted with --nan-policy skip; --stall-timeout: a rank that stops coming
# (in a step, at an epoch's first step, at the epoch's end, in fsdp's
# forward gather; in validation and a checkpoint write when its process
# stopped, while a rank merely late there is waited for) ends the job
# within the timeout, rank 0 naming it, with no rank left behind; the
# consistency check: ranks started with different models are stopped before
# the first collective, each value that differs named; --debug-collectives
# changes nothing in a healthy run.
. "$TOP_SRCDIR/tests/common.sh"
syn="--synthetic 8x8x3:4:512 --model mlp --epochs 1 --batch-size 32"

export DTRAIN_TEST_OVERFLOW_STEPS=3,5 # an infinity in the first replica's loss gradient at updates 3 and 5
MPIEXEC_FLAGS="$MPIEXEC_FLAGS -x DTRAIN_TEST_OVERFLOW_STEPS"
for strategy in mirrored sharded central-storage; do
  expect_fail 1 "epoch 1 step 3: the gradient holds a NaN or infinity (first in layer dense, parameter [0-9]* of the block); the loss was finite on every rank (it came up in backward); try a smaller --lr, or --nan-policy skip" \
    2 $syn --strategy $strategy
done
expect_fail 1 "rank 1 (a parameter-server worker): the gradient of its push 3 holds a NaN or infinity" \
  3 $syn --strategy parameter-server
run_np 2 $syn --nan-policy skip --verbose --verbose
if [ "$rc" = 0 ] && grep -q ' - 2 non-finite steps skipped' "$out" &&
   [ "$(grep -c 'the gradient holds a NaN or infinity: step skipped (--nan-policy skip)' "$out")" = 2 ] &&
   grep -E '^Epoch 1/1 .* - loss: [0-9]+\.[0-9]+ ' "$out" >/dev/null; then
  pass "--nan-policy skip: steps 3 and 5 skipped and counted, the epoch's loss finite"
else fail "--nan-policy skip (rc=$rc)"; cat "$out" "$err" >&2; fi
unset DTRAIN_TEST_OVERFLOW_STEPS
MPIEXEC_FLAGS=$(echo "$MPIEXEC_FLAGS" | sed 's/ -x DTRAIN_TEST_OVERFLOW_STEPS//')
expect_fail 2 "--nan-policy skip: the parameter server applies each push as it comes" 3 $syn --strategy parameter-server --nan-policy skip
expect_fail 2 "--nan-policy: expected abort or skip, found 'ignore'" 2 $syn --nan-policy ignore
expect_fail 2 "--stall-timeout: expected a number" 2 $syn --stall-timeout soon

# A rank that stops coming (DTRAIN_TEST_STALL=RANK:UPDATE sleeps 600 s there).
t0=$(date +%s)
out=$TEST_TMP/out.$$; err=$TEST_TMP/err.$$
DTRAIN_TEST_STALL=1:5 launch 2 -x DTRAIN_TEST_STALL "$DTRAIN" --synthetic 8x8x3:4:2048 --model mlp --epochs 1 \
  --batch-size 32 --stall-timeout 2 >"$out" 2>"$err"; rc=$?
t1=$(date +%s)
left=$(ps -eo args | grep -c '[d]train --synthetic 8x8x3:4:2048')
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((t1 - t0)) -le 30 ] && [ "$left" = 0 ] &&
   [ "$(grep -c '^dtrain: error: ' "$err")" = 1 ] &&
   grep -q '^dtrain: error: rank 0 waited 2 s in the gradient exchange at epoch 1 step 5 (--stall-timeout 2): not arrived: rank 1 ' "$err"; then
  pass "--stall-timeout 2: rank 1 stopped at update 5; the job ended in $((t1 - t0)) s (exit $rc), rank 0 named rank 1, no rank left"
else fail "stall (rc=$rc, $((t1 - t0)) s, $left left)"; cat "$err" >&2; fi

# Where MPI cannot make one-sided windows (across hosts over TCP; here
# DTRAIN_NO_RMA=1 plays it), the watchdog gathers progress over two-sided
# messages and still names the rank, with --overlap's thread running too.
t0=$(date +%s)
DTRAIN_TEST_STALL=1:5 DTRAIN_NO_RMA=1 launch 2 -x DTRAIN_TEST_STALL -x DTRAIN_NO_RMA "$DTRAIN" --synthetic 8x8x3:4:2048 \
  --model mlp --epochs 1 --batch-size 32 --stall-timeout 2 --overlap >"$out" 2>"$err"; rc=$?
t1=$(date +%s)
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((t1 - t0)) -le 30 ] && [ "$(grep -c '^dtrain: error: ' "$err")" = 1 ] &&
   grep -q '^dtrain: note: --stall-timeout: no one-sided window here (one-sided windows turned off (DTRAIN_NO_RMA=1)); the watchdog gathers progress with two-sided messages instead' "$err" &&
   grep -q '^dtrain: error: rank 0 waited 2 s in the gradient exchange at epoch 1 step 5 (--stall-timeout 2): not arrived: rank 1 (alive, at this step, outside the collectives); waiting in the collective: rank 0' "$err"; then
  pass "no one-sided windows, --overlap: the two-sided watchdog named rank 1 in $((t1 - t0)) s"
else fail "two-sided stall (rc=$rc, $((t1 - t0)) s)"; cat "$err" >&2; fi
# A rank lost outside the gradient exchange is found there too: at the next
# epoch's first step (the ranks' consistency check), at the epoch's end
# (rank 0 itself lost: rank 1 fires after its grace), under fsdp in the
# forward pass's parameter gather, and in validation and a checkpoint write
# when the rank's process has stopped (SIGSTOP: silent, as on a dead host),
# and after an update's exchange, in the ranks' per-step agreement on a
# checkpoint, before the run's summary and before an --export-keras
# (stopped as well). A host killed
# at an epoch's start, in a checkpoint write or after an exchange once left
# its peers waiting until Slurm's SlurmdTimeout (120 s: the elastic job's
# survivors).
"$DTRAIN_PREP" --quiet --synthetic 8x8x3:4:2048:512 "$TEST_TMP/stall.$$.h5" >/dev/null || fail "dtrain-prep --synthetic"
for c in "1:33|0||the ranks' consistency check at epoch 2 step 1 (--stall-timeout 2): not arrived: rank 1 (alive, at this step, outside the collectives)" \
         "1:validation-stop:1|0||the validation's end at epoch 1 step 32 (--stall-timeout 2): not arrived: rank 1 (pid " \
         "0:epoch-end:1|1||the epoch's end at epoch 1 step 32 (--stall-timeout 2): not arrived: rank 0 did not end the job first" \
         "1:5|0|--strategy fsdp|an fsdp parameter gather at epoch 1 step 5 (--stall-timeout 2): not arrived: rank 1 (alive, at this step, outside the collectives)" \
         "1:checkpoint-stop:1|0|--checkpoint-dir $TEST_TMP/ckst.$$|a checkpoint write at epoch 1 step 32 (--stall-timeout 2): not arrived: rank 1 (pid " \
         "1:update-end-stop:5|0|--checkpoint-dir $TEST_TMP/ckup.$$|the ranks' agreement on a checkpoint at epoch 1 step 5 (--stall-timeout 2): not arrived: rank 1 (pid " \
         "1:summary-stop:2|0||the run's summary at epoch 2 step 32 (--stall-timeout 2): not arrived: rank 1 (pid " \
         "1:export-stop:2|0|--export-keras $TEST_TMP/exp.$$.weights.h5|the weights' export at epoch 2 step 32 (--stall-timeout 2): not arrived: rank 1 (pid "; do
  where=${c%%|*} rest=${c#*|}
  who=${rest%%|*} rest=${rest#*|}
  flags=${rest%%|*} msg=${rest#*|}
  t0=$(date +%s)
  # shellcheck disable=SC2086  # flags: words
  DTRAIN_TEST_STALL=$where launch 2 -x DTRAIN_TEST_STALL "$DTRAIN" "$TEST_TMP/stall.$$.h5" --model mlp --epochs 2 \
    --batch-size 32 --stall-timeout 2 $flags >"$out" 2>"$err"; rc=$?
  t1=$(date +%s)
  left=$(ps -eo args | grep -c "[d]train $TEST_TMP/stall.$$.h5")
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((t1 - t0)) -le 30 ] && [ "$left" = 0 ] &&
     [ "$(grep -c '^dtrain: error: ' "$err")" = 1 ] && grep -q "^dtrain: error: rank $who waited [0-9]* s in " "$err" &&
     grep -qF " s in $msg" "$err"; then
    pass "DTRAIN_TEST_STALL=$where${flags:+ $flags}: the job ended in $((t1 - t0)) s (exit $rc), rank $who waited in $msg"
  else fail "DTRAIN_TEST_STALL=$where${flags:+ $flags} (rc=$rc, $((t1 - t0)) s, $left left)"; cat "$err" >&2; fi
done
[ -e "$TEST_TMP/ckst.$$" ] && fail "the checkpoint write that rank 0 ended left $(ls -A "$TEST_TMP/ckst.$$")"
# Rank 0 holds every weight (mirrored): it writes the whole file, then waits
# for rank 1 in the agreement that ends the export. The file must be whole.
[ ! -e "$TEST_TMP/exp.$$.weights.h5" ] || h5ls -r "$TEST_TMP/exp.$$.weights.h5" >/dev/null ||
  fail "the export that rank 0 ended left a file HDF5 cannot read"
rm -f "$TEST_TMP/exp.$$.weights.h5"
# A checkpoint write may rightly outlast --stall-timeout, and between epochs
# rank 0 writes reports alone: rank 1, then rank 0, 8 s late into the write,
# and rank 1 8 s late into validation, alive, with the timeout at 2 (rank
# 1's own limit with its grace is 7 s): waited for. The three runs at once:
# they mostly sleep.
slow="1:checkpoint-slow:1 0:checkpoint-slow:1 1:validation-slow:1"
for where in $slow; do
  rm -rf "$TEST_TMP/ckst.$where.$$"
  DTRAIN_TEST_STALL=$where launch 2 -x DTRAIN_TEST_STALL "$DTRAIN" "$TEST_TMP/stall.$$.h5" --model mlp --epochs 2 \
    --batch-size 32 --stall-timeout 2 --checkpoint-dir "$TEST_TMP/ckst.$where.$$" >"$out.$where" 2>"$err.$where" &
done
wait
for where in $slow; do
  if ! grep -q '^dtrain: error' "$err.$where" && grep -q '^Epoch 2/2 ' "$out.$where" &&
     [ -f "$TEST_TMP/ckst.$where.$$/ckpt-000002-00000000.h5" ]; then
    pass "DTRAIN_TEST_STALL=$where: a rank 8 s late between epochs under --stall-timeout 2, alive: waited for"
  else fail "DTRAIN_TEST_STALL=$where: a rank 8 s late between epochs"; cat "$err.$where" >&2; fi
  rm -rf "$TEST_TMP/ckst.$where.$$" "$out.$where" "$err.$where"
done
rm -rf "$TEST_TMP/stall.$$.h5" "$TEST_TMP/ckst.$$" "$TEST_TMP/ckup.$$"
# The parameter server: auto falls back to its two-sided transport and says
# so; asking for one-sided is one clear error, not MPI's abort text.
DTRAIN_NO_RMA=1 launch 3 -x DTRAIN_NO_RMA "$DTRAIN" --synthetic 8x8x3:4:2048 --model mlp --epochs 1 \
  --strategy parameter-server >"$out" 2>"$err"; rc=$?
if [ "$rc" = 0 ] && grep -q 'strategy parameter-server (async, two-sided)' "$out" &&
   grep -q '^dtrain: note: parameter server: no one-sided windows here (one-sided windows turned off (DTRAIN_NO_RMA=1)); pushes and pulls go as two-sided messages' "$err"; then
  pass "parameter server without one-sided windows: two-sided, noted"
else fail "parameter server fallback (rc=$rc)"; cat "$out" "$err" >&2; fi
DTRAIN_NO_RMA=1 launch 3 -x DTRAIN_NO_RMA "$DTRAIN" --synthetic 8x8x3:4:2048 --model mlp --epochs 1 \
  --strategy parameter-server --ps-transport one-sided >"$out" 2>"$err"; rc=$?
if [ "$rc" = 1 ] && [ "$(grep -c '^dtrain: error: ' "$err")" = 1 ] && ! grep -q 'MPI_ERRORS_ARE_FATAL' "$err" &&
   grep -q "^dtrain: error: --ps-transport one-sided: this MPI cannot make the servers' one-sided windows (one-sided windows turned off (DTRAIN_NO_RMA=1)); use --ps-transport two-sided" "$err"; then
  pass "--ps-transport one-sided without windows: one error line naming the setting, exit 1"
else fail "one-sided refusal (rc=$rc)"; cat "$err" >&2; fi

# A parameter server serves a whole epoch inside one wait: applying updates
# is progress, so an epoch longer than --stall-timeout completes.
launch 3 "$DTRAIN" --synthetic 28x28x1:10:24000 --epochs 1 --no-validation --strategy parameter-server \
  --stall-timeout 0.5 >"$out" 2>"$err"; rc=$?
secs=$(sed -n 's/^Epoch 1\/1 - \([0-9.]*\) s .*/\1/p' "$out")
if [ "$rc" = 0 ] && [ -n "$secs" ] && awk -v s="$secs" 'BEGIN { exit !(s > 0.5) }'; then
  pass "parameter server: a $secs s epoch under --stall-timeout 0.5 completes (the servers' updates count as progress)"
else fail "parameter server, long epoch (rc=$rc, epoch '$secs' s)"; cat "$out" "$err" >&2; fi

# Ranks started with different models: stopped before they exchange anything.
out=$TEST_TMP/out.$$; err=$TEST_TMP/err.$$
timeout -k 5 120 $MPIEXEC $MPIEXEC_FLAGS -n 1 "$DTRAIN" --synthetic 28x28x1:10:512 --model mlp --epochs 1 : \
  -n 1 "$DTRAIN" --synthetic 28x28x1:10:512 --model cnn --epochs 1 >"$out" 2>"$err"; rc=$?
if [ "$rc" = 1 ] && [ "$(grep -c '^dtrain: error: ' "$err")" = 1 ] &&
   grep -q "^dtrain: error: the ranks disagree before the first collective of training: parameters: rank 0 has 101770; rank 1 has 225034\. layers: rank 0 has 2; rank 1 has 7\. model: rank 0 has 'mlp'; rank 1 has 'cnn'\." "$err"; then
  pass "mlp on rank 0, cnn on rank 1: $(cat "$err")"
else fail "different models (rc=$rc)"; cat "$err" >&2; fi

# --debug-collectives: the same run, every step and bucket call compared.
steps() { grep -E '^(step|Epoch)' "$1" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//'; }
run_np 2 $syn --verbose --verbose; steps "$out" >"$TEST_TMP/plain.$$"
run_np 2 $syn --verbose --verbose --debug-collectives --bucket-mb 0.01; r2=$rc; steps "$out" >"$TEST_TMP/debug.$$"
run_np 2 $syn --verbose --verbose --bucket-mb 0.01; steps "$out" >"$TEST_TMP/plain2.$$"
if [ "$r2" = 0 ] && [ -s "$TEST_TMP/debug.$$" ] && cmp -s "$TEST_TMP/debug.$$" "$TEST_TMP/plain2.$$"; then
  pass "--debug-collectives (small buckets): the same losses as without, every call checked"
else fail "--debug-collectives (rc=$r2)"; diff "$TEST_TMP/debug.$$" "$TEST_TMP/plain2.$$" | head >&2; fi
rm -f "$TEST_TMP/plain.$$" "$TEST_TMP/debug.$$" "$TEST_TMP/plain2.$$"
finish
