#!/bin/sh
# jobscripts.sh: the job scripts under jobscripts/ parse, and each one's
# walltime path works end to end: signal -> forwarded to dtrain -> checkpoint
# -> exit 75 -> requeue -> --resume latest -> all epochs done.
#
# Slurm and PBS are played by the stand-ins in tests/jobscripts/bin (sbatch,
# srun, scontrol, qsub, qstat), first on PATH, which run the batch script here
# with 2 ranks. The stand-in sbatch sends SIGUSR1 (--signal=B:USR1) and the
# stand-in qsub SIGTERM (the PBS walltime) to the batch shell as soon as the
# checkpoint of epoch 1 exists; the local script gets SIGUSR1 from here.
# Where dtrain then stops is not fixed (the step the signal reaches), but
# a resumed run is exact at any step, so each job's final checkpoint must
# equal (h5diff /model and /optimizer) that of a run never interrupted.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/jobscripts.$$
rm -rf "$T"
mkdir -p "$T"
FAKE_SCHED=$T/sched
mkdir -p "$FAKE_SCHED"
PATH=$TOP_SRCDIR/tests/jobscripts/bin:$PATH
export PATH FAKE_SCHED MPIEXEC MPIEXEC_FLAGS DTRAIN
# 12 epochs of 1024 steps (about 0.1 s each here): the signal after epoch 1
# lands well before the end.
DATA="--synthetic 8x8x3:4:32768"
DTRAIN_ARGS="--model mlp --batch-size 16 --epochs 12 --checkpoint-every 1 --no-validation"
export DATA DTRAIN_ARGS
FAKE_NTASKS=2; export FAKE_NTASKS
# Each job takes about 3 s here; the limit only turns a hang into a failure,
# so it is generous for a loaded machine (CI runs builds beside this test),
# longer where the caller says so (tests/release.sh, at nice 19 in CI).
DT_TEST_TIMEOUT=${DT_TEST_TIMEOUT:-240}

scripts="jobscripts/slurm/dtrain.sbatch jobscripts/pbs/dtrain.pbs jobscripts/local/dtrain.sh"
for s in $scripts jobscripts/slurm/dtrain-elastic.sbatch jobscripts/local/fashion-mnist.sh jobscripts/local/setup.sh; do
  bash -n "$TOP_SRCDIR/$s" && pass "bash -n $s" || fail "bash -n $s"
done
for s in $scripts jobscripts/slurm/dtrain-elastic.sbatch; do
  n=$(grep -c '^#\(SBATCH\|PBS\) ' "$TOP_SRCDIR/$s")
  # every directive has its reason on the line above it
  bad=$(awk '/^#(SBATCH|PBS) / && prev !~ /^# / { print FNR } { prev = $0 }' "$TOP_SRCDIR/$s")
  [ -z "$bad" ] || fail "$s: directives without a comment above them at lines $bad"
  [ "$n" -gt 0 ] || case $s in *local*) ;; *) fail "$s: no directives" ;; esac
done

# final CKPT_DIR: the checkpoint DIR/latest names
final() { echo "$1/$(cat "$1/latest" 2>/dev/null)"; }
same_model() { # same_model A.h5 B.h5: parameters and optimizer state identical
  h5diff -q "$1" "$2" /model /model >/dev/null 2>&1 && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null 2>&1
}

# --- the reference: the same run, never interrupted ---
# shellcheck disable=SC2086
run_np 2 $DATA --checkpoint-dir "$T/ref" $DTRAIN_ARGS
ref=$(final "$T/ref")
if [ "$rc" = 0 ] && [ -f "$ref" ]; then
  pass "uninterrupted reference run: $(basename "$ref")"
else
  fail "reference run: rc=$rc"; cat "$err" >&2
fi

# check NAME LOG RC CKPT_DIR SIG: the job got SIG, dtrain checkpointed, the job
# was requeued once, and its second run resumed and finished like the reference
check() {
  name=$1 log=$2 jrc=$3 dir=$4 sig=$5
  if [ "$jrc" = 0 ] &&
     grep -q '^dtrain: SIGUSR1 received: checkpoint .* written after epoch' "$log" &&
     grep -q "checkpointed after SIG$sig (exit 75)" "$log" &&
     grep -q 'restart 1[,:] resuming' "$log" && grep -q '^dtrain: resuming from ' "$log" &&
     grep -q '^Epoch 12/12 ' "$log" && ! grep -q 'restart 2[,:]' "$log"; then
    pass "$name: SIG$sig -> checkpoint ($(grep -o 'after epoch [0-9]* step [0-9]*' "$log" | head -1)) -> exit 75 -> requeue -> resumed, 12 epochs done"
  else
    fail "$name: job exit $jrc, or a step missing from its log:"; cat "$log" >&2; return
  fi
  if same_model "$ref" "$(final "$dir")"; then
    pass "$name: final checkpoint equals the uninterrupted run's (h5diff /model /optimizer)"
  else
    fail "$name: final checkpoint $(final "$dir") differs from $ref"
  fi
}

# --- Slurm: sbatch -> SIGUSR1 to the batch shell -> scontrol requeue ---
CKPT_DIR=$T/slurm FAKE_SIGNAL_FILE=$T/slurm/ckpt-000001-00000000.h5 \
  timeout -k 5 $DT_TEST_TIMEOUT sbatch "$TOP_SRCDIR/jobscripts/slurm/dtrain.sbatch" >/dev/null
jrc=$?
job=$(cat "$FAKE_SCHED/last-job" 2>/dev/null)
check "slurm" "$FAKE_SCHED/$job.out" "$jrc" "$T/slurm" USR1
grep -q -- '^srun --mpi=pmix .* --resume latest ' "$FAKE_SCHED/srun.log" ||
  fail "slurm: srun line: $(cat "$FAKE_SCHED/srun.log")"

# --- PBS: qsub -> SIGTERM to the batch shell -> the job submits itself again ---
CKPT_DIR=$T/pbs FAKE_SIGNAL_FILE=$T/pbs/ckpt-000001-00000000.h5 \
  timeout -k 5 $DT_TEST_TIMEOUT qsub "$TOP_SRCDIR/jobscripts/pbs/dtrain.pbs" >/dev/null
jrc=$?
check "pbs" "$FAKE_SCHED/pbs.out" "$jrc" "$T/pbs" TERM
[ "$(tr '\n' ' ' 2>/dev/null <"$FAKE_SCHED/pbs/done")" = "1 75 2 0 " ] ||
  fail "pbs: jobs run and their codes: $(cat "$FAKE_SCHED/pbs/done" 2>/dev/null)"

# --- PBS, qdel: a SIGTERM long before the walltime (qstat shows 1 hour)
# checkpoints but does not submit the job again ---
rm -rf "$FAKE_SCHED/pbs" "$FAKE_SCHED/pbs.out"
CKPT_DIR=$T/qdel FAKE_SIGNAL_FILE=$T/qdel/ckpt-000001-00000000.h5 FAKE_WALLTIME=01:00:00 \
  timeout -k 5 $DT_TEST_TIMEOUT qsub "$TOP_SRCDIR/jobscripts/pbs/dtrain.pbs" >/dev/null
jrc=$?
if [ "$jrc" = 75 ] && [ "$(cat "$FAKE_SCHED/pbs/done" 2>/dev/null)" = "1 75" ] &&
   grep -q 'walltime 3600s: checkpointing in 3480s' "$FAKE_SCHED/pbs.out" &&
   grep -q 'SIGTERM before the walltime (qdel?): not resubmitted' "$FAKE_SCHED/pbs.out" && [ -f "$T/qdel/latest" ]; then
  pass "pbs: SIGTERM an hour before the walltime (qdel): checkpoint, exit 75, not resubmitted"
else
  fail "pbs qdel: exit $jrc, jobs: $(cat "$FAKE_SCHED/pbs/done" 2>/dev/null)"; cat "$FAKE_SCHED/pbs.out" >&2
fi

# --- local: SIGUSR1 to dtrain.sh -> mpirun again with --resume latest ---
CKPT_DIR=$T/local timeout -k 5 $DT_TEST_TIMEOUT "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$T/local.out" 2>&1 &
pid=$!
i=0
while [ ! -e "$T/local/ckpt-000001-00000000.h5" ] && kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
  sleep 0.05; i=$((i + 1))
done
# timeout runs the script as its child
spid=$(pgrep -P $pid -f jobscripts/local/dtrain.sh | head -1)
[ -n "$spid" ] && kill -USR1 "$spid"
wait $pid
check "local" "$T/local.out" $? "$T/local" USR1

# --- local, ELASTIC=1 (jobscripts/slurm/dtrain-elastic.sbatch with mpirun):
# a rank killed after epoch 2 -> the run starts again on the hosts that
# answer (all: a restart, not a shrink) from the last checkpoint, and the
# METRICS file holds both runs' epoch rows and the events ---
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
ELASTIC=1 HOSTS=localhost:2 CKPT_DIR=$T/elastic METRICS=$T/elastic.jsonl DATA="--synthetic 8x8x3:4:131072" \
  DTRAIN_ARGS="--model mlp --batch-size 16 --epochs 6 --no-validation" \
  timeout -k 5 $DT_TEST_TIMEOUT "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$T/elastic.out" 2>&1 &
pid=$!
i=0
while [ ! -e "$T/elastic/ckpt-000002-00000000.h5" ] && kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
  sleep 0.05; i=$((i + 1))
done
victim=''
for p in $(descendants $pid); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = dtrain ] && victim=$p && break; done
[ -n "$victim" ] && kill -9 "$victim"
wait $pid
jrc=$?
if [ -n "$victim" ] && [ "$jrc" = 0 ] &&
   grep -q 'elastic: restart: step failed (exit [0-9]*), restart 1: no node lost; resuming from ckpt-00000[2-5]-' "$T/elastic.out" &&
   grep -q '^dtrain: resuming from ' "$T/elastic.out" && grep -q '^Epoch 6/6 ' "$T/elastic.out" &&
   [ "$(grep -c '"kind":"epoch"' "$T/elastic.jsonl")" -ge 6 ] && grep -q '"event":"restart".*"ranks":2' "$T/elastic.jsonl"; then
  pass "local ELASTIC=1: a rank killed -> restarted on the hosts answering, resumed, 6 epochs, events in METRICS"
else
  fail "local ELASTIC=1: exit $jrc, victim '$victim'"; cat "$T/elastic.out" >&2
fi
# MIN_NODES=2 with a host that does not answer: exit 1, naming it.
ELASTIC=1 HOSTS=localhost:1,dtrain-no-such-host:1 MIN_NODES=2 PROBE_TIMEOUT=20 CKPT_DIR=$T/elastic-min \
  timeout -k 5 $DT_TEST_TIMEOUT "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$T/elastic-min.out" 2>&1
jrc=$?
if [ "$jrc" = 1 ] &&
   grep -q 'elastic: stop: only 1 of 2 nodes healthy, fewer than MIN_NODES=2; lost: dtrain-no-such-host$' "$T/elastic-min.out"; then
  pass "local ELASTIC=1 MIN_NODES=2, one host not answering: exit 1, the host named"
else
  fail "local ELASTIC=1 MIN_NODES=2: exit $jrc"; cat "$T/elastic-min.out" >&2
fi
ELASTIC=1 timeout 10 "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$T/elastic-nohosts.out" 2>&1
jrc=$?
[ "$jrc" = 2 ] && grep -q 'ELASTIC=1 needs HOSTS=host:slots' "$T/elastic-nohosts.out" &&
  pass "ELASTIC=1 without HOSTS: exit 2, says so" || fail "ELASTIC=1 without HOSTS: exit $jrc"

rm -rf "$T"
finish
