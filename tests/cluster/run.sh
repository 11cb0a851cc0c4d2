#!/usr/bin/env bash
# run.sh: dtrain across real hosts: the cross-host tests (make check-cluster).
#
# Brings up tests/cluster/cluster.sh's cluster (3 hosts joined by TCP, each
# with its own hostname, /tmp and core, and a real Slurm from Debian's
# packages on them), runs every check below against it, and takes it all
# down again, also when a check fails or the run is interrupted. Each check
# leaves tests/cluster/NAME.log and an Automake-style NAME.trs in the build
# directory (tests/run-all.sh counts them); ends with "cluster: N passed, N
# failed".
#
#   make -C build check-cluster            (as root; about 10 minutes on 2 cores, half of it the elastic check)
#   tests/cluster/run.sh [CHECK...]         (from a build directory, make's environment)
#
# The checks:
#   hosts        each host is its own node to MPI (hostname, split by shared memory)
#   preflight    dtrain --preflight across hosts passes, and fails naming a
#                checkpoint directory or an input file that one host cannot see
#   strategies   every strategy with its defaults at 2x1, 2x2, 3x1 and 2+1
#                ranks: trains, every rank bitwise identical after every epoch
#                (mirrored is refused across nodes, and says so)
#   ps           the parameter server with servers and workers on different
#                hosts, async/ssp/sync with 1 and 2 servers (two-sided: no
#                one-sided windows across hosts here); sync equals a one-host,
#                one-sided run bit for bit
#   allreduce    every algorithm exact across hosts (dtrain-bench-allreduce
#                --check) at 2x1, 2x2, 3x1 and the uneven 2+1, with bf16
#                transport too; each --allreduce trains with identical ranks
#   resume       a checkpoint mid-epoch across hosts resumes to the bits of a
#                run never stopped; auto's timed choice comes back from the
#                checkpoint; a 2x2 checkpoint resumes on 3 hosts
#   faults       kill -9 of a rank on one host ends the job on every host,
#                named, nothing left running; a rank that stops coming is
#                named by the stall watchdog over two-sided reports
#   slurm        the Slurm job script with its defaults exits 0; with a
#                short --time and --signal it checkpoints, the real `scontrol
#                requeue` requeues it, it resumes and ends equal (h5diff) to
#                a run never interrupted; srun direct launch trains
#   elastic      jobscripts/slurm/dtrain-elastic.sbatch on 3 hosts, the CNN
#                on 20000 Fashion-MNIST images for 6 or 10 epochs: h2 marked
#                down mid-epoch 3 of 6 -> the job ends on h1+h3 no more than 1 point below
#                an undisturbed run's validation accuracy; every process of
#                h2 killed (slurmd too) and slurmd back -> h2 used again from
#                the next epoch; MIN_NODES=3 and h3 lost -> exit 1 naming h3;
#                jobscripts/local/dtrain.sh ELASTIC=1 (mpirun): h2 killed and
#                its link down -> h1+h3 -> link up -> h2 used again.
#                Prints the death -> first-step times (detection, probe,
#                launch and resume)
#   local        jobscripts/local/dtrain.sh across hosts: SIGUSR1, restart,
#                the same final checkpoint as a run never interrupted
#   shaped       cluster.sh shape 200mbit: one TCP stream gets 80-105% of it,
#                a ring all-reduce of 4 MiB in the pieces used across
#                nodes (63 KiB x 8) at least 60%; shape none removes every qdisc;
#                a bad rate is refused with a message
#   study        jobscripts/scaling-study --cluster on a 100 Mbit/s link: 1
#                and 2 hosts x 2 bucket sizes x 2 compressions, 8 summary
#                rows, the link recorded in every one
# PBS has no Debian package: tests/jobscripts.sh keeps its stand-in.
# SYN, args and the flag lists are lists of words on purpose; "a && ok || bad"
# is the suite's idiom (ok never fails).
# shellcheck disable=SC2086,SC2015
set -uo pipefail
: "${TOP_SRCDIR:?run from make check-cluster (or set TOP_SRCDIR, TOP_BUILDDIR, DTRAIN, TEST_TMP)}"
: "${TOP_BUILDDIR:?}" "${DTRAIN:?}"
TEST_TMP=${TEST_TMP:-$TOP_BUILDDIR/tests/tmp}
BENCH=$TOP_BUILDDIR/dtrain-bench-allreduce
MKFIXTURE=${MKFIXTURE:-$TOP_BUILDDIR/tests/mkfixture}
CLUSTER=$TOP_SRCDIR/tests/cluster/cluster.sh
R=$TOP_BUILDDIR/tests/cluster # results
W=$TEST_TMP/cluster           # work files: under the build directory, which every host sees
mkdir -p "$R"
rm -f "$R"/*.trs

skip_all() {
  echo "SKIP: cluster tests: $*"
  printf ':test-result: SKIP\n' >"$R/cluster.trs"
  exit 0
}
[[ $(id -u) == 0 ]] || skip_all "need root (network namespaces, a bridge, Slurm's daemons)"
[[ ${MPI_FLAVOUR:-openmpi} == openmpi ]] || skip_all "the launcher's rsh agent is Open MPI's (this build: ${MPI_FLAVOUR})"
for c in ip nsenter unshare munged slurmctld slurmd sbatch srun scontrol h5diff; do
  command -v "$c" >/dev/null || skip_all "$c is missing (jobscripts/local/setup.sh --cluster installs it)"
done

export DTC_STATE=${DTC_STATE:-/run/dtcluster}
# A cluster left over from an interrupted run goes first: a second run works.
[[ -e $DTC_STATE/env ]] && bash "$CLUSTER" down >/dev/null 2>&1
export DTC_SHARE="$TOP_BUILDDIR $TEST_TMP"
trap 'bash "$CLUSTER" down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM
bash "$CLUSTER" up 3 --slurm || { echo "FAIL: the cluster did not come up"; printf ':test-result: FAIL\n' >"$R/cluster.trs"; exit 1; }
# shellcheck disable=SC1091
. "$DTC_STATE/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Three hosts share this machine's two cores (and 2x2 runs two ranks per
# host's one core): ranks that wait must yield, as on real nodes they need not.
export OMPI_MCA_mpi_yield_when_idle=1
rm -rf "$W"
mkdir -p "$W"
cd "$W" || exit 1

npass=0 nfail=0 problems=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; problems=$((problems + 1)); }
# mpirun across HOSTS (h1:1,h2:1,...), ranks = the sum of the slots, within
# T_LIMIT seconds (default 180). A job still running then has hung: where
# every rank's threads stand goes to stderr first (hung_stacks), then the job
# is ended, with timeout's status 124. Ending this function ends the job.
across() {
  local hosts=$1 n=0 s pid i rc
  shift
  for s in ${hosts//,/ }; do n=$((n + ${s#*:})); done
  # shellcheck disable=SC2086
  mpirun $DTC_MPIRUN_FLAGS --host "$hosts" -np "$n" "$@" &
  pid=$!
  trap 'kill -TERM $pid 2>/dev/null' TERM
  for ((i = 0; i < ${T_LIMIT:-180} * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "across: the job ran past ${T_LIMIT:-180} s; its ranks' threads:" >&2
    hung_stacks >&2
    kill -TERM "$pid" 2>/dev/null
    sleep 5
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    trap - TERM
    return 124
  fi
  wait "$pid"
  rc=$?
  trap - TERM
  return $rc
}
# Every dtrain rank on every host: each thread's stack (gdb), or where
# /proc says it waits when gdb is missing. A hang found in CI is then
# diagnosable from its log.
hung_stacks() {
  local h p t
  for h in ${DTC_HOSTS:-h1 h2 h3}; do
    for p in $(host_ranks "$h"); do
      echo "== $h: dtrain pid $p"
      if command -v gdb >/dev/null; then
        timeout 60 gdb -q -batch -p "$p" -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)'
      else
        for t in /proc/"$p"/task/*; do
          echo "thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): waits in $(cat "$t/wchan" 2>/dev/null), syscall $(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
        done
      fi
    done
  done
}
ranks_of() { local n=0 s; for s in ${1//,/ }; do n=$((n + ${s#*:})); done; echo "$n"; }
same_ckpt() { # same_ckpt A.h5 B.h5: parameters and optimizer state identical
  h5diff -q "$1" "$2" /model /model >/dev/null 2>&1 && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null 2>&1
}
latest() { echo "$1/$(cat "$1/latest" 2>/dev/null)"; }
# identical LOG NRANKS EPOCHS: -v -v's per-epoch agreement lines, all of them
identical() {
  local n
  n=$(grep -c "parameters and statistics bitwise identical on all $2 ranks" "$1")
  [[ $n == "$3" ]]
}

run_check() { # run_check NAME: runs check_NAME, its output in NAME.log
  local name=$1 t0 rc
  t0=$(date +%s)
  problems=0
  ( set +e; "check_$name" ) >"$R/$name.log" 2>&1
  rc=$?
  # the subshell's count is lost: the log keeps the FAIL lines
  if ((rc == 0)) && ! grep -q '^FAIL: ' "$R/$name.log"; then
    npass=$((npass + 1))
    printf ':test-result: PASS\n' >"$R/$name.trs"
    echo "PASS: cluster $name ($(($(date +%s) - t0)) s, $(grep -c '^ok: ' "$R/$name.log") assertions)"
  else
    nfail=$((nfail + 1))
    printf ':test-result: FAIL\n' >"$R/$name.trs"
    echo "FAIL: cluster $name ($(($(date +%s) - t0)) s): see $R/$name.log"
    grep '^FAIL: ' "$R/$name.log" | head -20
    tail -30 "$R/$name.log"
  fi
}

SYN="--synthetic 8x8x3:4:4096 --model mlp --batch-size 16"
H2_ADDR=$(cat "$DTC_STATE/hosts/h2/addr")

check_hosts() {
  local got
  got=$("$TOP_SRCDIR/tests/cluster/rsh" h2 hostname)
  [[ $got == h2 ]] && ok "rsh h2 hostname: $got" || bad "rsh h2 hostname gave '$got'"
  got=$(across h1:1,h2:1,h3:1 hostname | sort | tr '\n' ' ')
  [[ $got == "h1 h2 h3 " ]] && ok "mpirun --host h1:1,h2:1,h3:1 runs on $got" || bad "mpirun ran on '$got'"
  across h1:2,h2:1 "$DTRAIN" $SYN --epochs 1 >out 2>err
  grep -q '^layout: 2 nodes of 2+1 ranks;' out && ok "dtrain sees $(grep -o '^layout: [^;]*' out)" ||
    { bad "dtrain's layout at h1:2,h2:1"; cat out err; }
  # The hosts' /tmp are their own (PMIx needs it; a file system is not shared by accident).
  "$TOP_SRCDIR/tests/cluster/rsh" h1 "echo h1 >/tmp/dtc-mine"
  if "$TOP_SRCDIR/tests/cluster/rsh" h2 "test ! -e /tmp/dtc-mine" && [[ ! -e /tmp/dtc-mine ]]; then
    ok "h1's /tmp is its own"
  else
    bad "a file in h1's /tmp is seen elsewhere"
  fi
}

check_preflight() {
  "$MKFIXTURE" good "$W/data.h5" 64 >/dev/null || bad "mkfixture"
  across h1:1,h2:1,h3:1 "$DTRAIN" --preflight --checkpoint-dir "$W/pf-ck" "$W/data.h5" >out 2>err
  local rc=$?
  cat out err
  if [[ $rc == 0 ]] && grep -q '^one-sided windows across the job *warn *MPI_ERR_WIN' out &&
     grep -q '^checkpoint directory on every node ok .*written from each of 3 nodes' out &&
     grep -q '^input files on every node *ok' out && grep -Eq '^network between nodes *(ok|warn) .*GB/s' out &&
     grep -q '^preflight: no check failed' out && [[ ! -e $W/pf-ck ]]; then
    ok "--preflight on 3 hosts: exit 0, one-sided windows a warning, the directory made and removed again"
  else
    bad "--preflight on 3 hosts: exit $rc"
  fi
  # A directory in /tmp is each host's own: not a checkpoint directory for a job.
  across h1:1,h2:1 "$DTRAIN" --preflight --checkpoint-dir /tmp/dtc-private "$W/data.h5" >out 2>err
  rc=$?
  cat out err
  if [[ $rc == 1 ]] && [[ $(grep -c '^dtrain: error: ' err) == 1 ]] &&
     grep -q '^dtrain: error: preflight: checkpoint directory on every node: .*does not see the file node 1 wrote' err; then
    ok "--checkpoint-dir in a host's own /tmp: exit 1, $(grep '^dtrain: error' err | cut -c1-120)..."
  else
    bad "--checkpoint-dir /tmp/dtc-private: exit $rc"
  fi
  # An input file only h1 has.
  "$TOP_SRCDIR/tests/cluster/rsh" h1 "cp '$W/data.h5' /tmp/dtc-only-h1.h5"
  across h1:1,h2:1 "$DTRAIN" --preflight /tmp/dtc-only-h1.h5 >out 2>err
  rc=$?
  cat out err
  if [[ $rc == 1 ]] && grep -q '^dtrain: error: preflight: input files on every node: rank 1 on h2: /tmp/dtc-only-h1.h5: No such file' err; then
    ok "an input file on h1 only: exit 1, rank 1 on h2 named"
  else
    bad "input on h1 only: exit $rc"
  fi
}

check_strategies() {
  local hosts st n
  for hosts in h1:1,h2:1 h1:2,h2:2 h1:1,h2:1,h3:1 h1:2,h2:1; do
    n=$(ranks_of "$hosts")
    for st in auto multi-worker central-storage sharded parameter-server; do
      [[ $hosts == h1:2,h2:2 || $hosts == h1:1,h2:1,h3:1 || $st == auto ]] || continue
      across "$hosts" "$DTRAIN" $SYN --epochs 2 --strategy "$st" -v -v >out 2>err
      local rc=$?
      if [[ $rc == 0 ]] && identical out "$n" 2 && grep -q '^Epoch 2/2 ' out; then
        ok "$hosts --strategy $st: $(grep -o '^layout: .*' out | cut -c1-110)..., identical on $n ranks after both epochs"
      else
        bad "$hosts --strategy $st: exit $rc"; cat out err | grep -v '^step' | tail -20
      fi
    done
  done
  across h1:1,h2:1 "$DTRAIN" $SYN --epochs 1 --strategy mirrored >out 2>err
  local rc=$?
  if [[ $rc == 2 ]] && grep -q "^dtrain: error: --strategy mirrored: the ranks span 2 nodes x 1 rank" err; then
    ok "mirrored across hosts: refused, exit 2: $(grep '^dtrain: error' err | cut -c1-100)..."
  else
    bad "mirrored across hosts: exit $rc"; cat err
  fi
}

check_ps() {
  local k mode n=3
  for k in 1 2; do
    for mode in async ssp sync; do
      across h1:1,h2:1,h3:1 "$DTRAIN" $SYN --epochs 2 --strategy parameter-server --num-ps "$k" --ps-mode "$mode" \
        -v -v --checkpoint-dir "$W/ps-$k-$mode" >out 2>err
      local rc=$?
      if [[ $rc == 0 ]] && identical out $n 2 && grep -Eq "strategy parameter-server \(${mode}[^)]*, two-sided\): $k server" out &&
         grep -q 'parameter server: no one-sided windows here (MPI_ERR_WIN' err; then
        ok "$k server(s) on $( ((k == 1)) && echo h1 || echo h1,h2), workers on the others, $mode: two-sided, identical ranks after each epoch"
      else
        bad "parameter server $k $mode: exit $rc"; grep -v '^step' out | tail; cat err
      fi
    done
    # Sync mode: the same bits as on one host over one-sided windows.
    timeout 120 mpirun -np 3 "$DTRAIN" $SYN --epochs 2 --strategy parameter-server --num-ps "$k" --ps-mode sync \
      --ps-transport one-sided --checkpoint-dir "$W/ps-$k-local" --quiet
    if same_ckpt "$(latest "$W/ps-$k-sync")" "$(latest "$W/ps-$k-local")"; then
      ok "$k server(s), sync: across hosts (two-sided) = one host (one-sided), bit for bit (h5diff)"
    else
      bad "$k server(s), sync: across hosts differs from one host"
    fi
  done
  # Open MPI's UCX one-sided component works over TCP: then the windows are
  # made across hosts, and sync still equals the one-host run.
  OMPI_MCA_osc=sm,ucx across h1:1,h2:1,h3:1 "$DTRAIN" $SYN --epochs 2 --strategy parameter-server --ps-mode sync \
    -v -v --checkpoint-dir "$W/ps-ucx" >out 2>err
  local rc=$?
  if [[ $rc == 0 ]] && identical out $n 2 && grep -q 'strategy parameter-server (sync, one-sided): 1 server' out &&
     ! grep -q 'no one-sided window' err && same_ckpt "$(latest "$W/ps-ucx")" "$(latest "$W/ps-1-local")"; then
    ok "--mca osc sm,ucx: one-sided windows across hosts, the watchdog's too; sync = the one-host run (h5diff)"
  else
    bad "osc ucx: exit $rc"; grep -v '^step' out | tail; cat err
  fi
  # Naming ucx alone leaves no component for shared windows: one line says so.
  OMPI_MCA_osc=ucx across h1:1,h2:1 "$DTRAIN" $SYN --epochs 1 >out 2>err
  rc=$?
  if [[ $rc == 1 ]] && [[ $(grep -c '^dtrain: error: ' err) == 1 ]] && ! grep -q 'MPI_ERRORS_ARE_FATAL' err &&
     grep -q '^dtrain: error: this MPI cannot make shared-memory windows inside a node (MPI_Win_allocate_shared: .*--mca osc sm,ucx, not --mca osc ucx' err; then
    ok "--mca osc ucx (no sm): exit 1, one line naming the setting"
  else
    bad "osc ucx alone: exit $rc"; cat err
  fi
  across h1:1,h2:1 "$DTRAIN" $SYN --epochs 1 --strategy parameter-server --ps-transport one-sided >out 2>err
  rc=$?
  if [[ $rc == 1 ]] && [[ $(grep -c '^dtrain: error: ' err) == 1 ]] &&
     grep -q "^dtrain: error: --ps-transport one-sided: this MPI cannot make the servers' one-sided windows (MPI_ERR_WIN" err &&
     ! grep -q 'MPI_ERRORS_ARE_FATAL' err; then
    ok "--ps-transport one-sided across hosts: one error line naming the setting, no MPI abort text"
  else
    bad "--ps-transport one-sided across hosts: exit $rc"; cat err
  fi
}

check_allreduce() {
  local hosts
  for hosts in h1:1,h2:1 h1:2,h2:2 h1:1,h2:1,h3:1 h1:2,h2:1; do
    across "$hosts" "$BENCH" -b 4 -e 4M -f 16 -n 3 -w 1 --window --outofplace >out 2>err
    local rc=$?
    if [[ $rc == 0 ]] && grep -q '^# Wrong elements: 0 OK' out && grep -q 'auto:' out; then
      ok "$hosts: mpi, ring, hier, auto exact at 4 B-4 MiB, window and out of place$(grep -q '^# hier: skipped' out && echo ' (hier skipped: uneven)')"
    else
      bad "$hosts: dtrain-bench-allreduce exit $rc"; cat out err | tail -30
    fi
  done
  across h1:2,h2:2 "$BENCH" -b 4 -e 1M -f 16 -n 3 -w 1 -a ring,hier,auto --grad-compression bf16 >out 2>err &&
    grep -q '^# Wrong elements: 0 OK' out && ok "2x2, bf16 transport: ring, hier, auto exact" ||
    { bad "2x2 bf16"; tail -20 out err; }
  local a
  for a in mpi ring hier auto; do
    across h1:2,h2:2 "$DTRAIN" $SYN --epochs 2 --allreduce "$a" -v -v >out 2>err
    local rc=$?
    if [[ $rc == 0 ]] && identical out 4 2; then
      ok "2x2 --allreduce $a: trains, identical ranks ($(grep -o 'all-reduce [^,]*' out | head -1))"
    else
      bad "2x2 --allreduce $a: exit $rc"; grep -v '^step' out | tail; cat err
    fi
  done
  across h1:2,h2:1 "$DTRAIN" $SYN --epochs 1 --allreduce hier >out 2>err
  local rc=$?
  [[ $rc == 2 ]] && grep -q '^dtrain: error: --allreduce hier: needs the same number of ranks on every node' err &&
    ok "2+1 --allreduce hier: refused, exit 2, the layout named" || { bad "2+1 hier: exit $rc"; cat err; }
}

check_resume() {
  # 4096 samples, 4 ranks x 16: 64 steps an epoch; a checkpoint every 20 steps, all kept.
  local args="$SYN --epochs 3 --allreduce ring --checkpoint-every 20step --keep 0 --no-validation" rc
  across h1:2,h2:2 "$DTRAIN" $args --checkpoint-dir "$W/r-ref" --quiet || bad "reference run"
  # From the second one written inside epoch 2, into a directory of its own.
  local mid
  mid=$(cd "$W/r-ref" && printf '%s\n' ckpt-000001-*.h5 | sed -n 2p) # the glob sorts as ls would
  mkdir -p "$W/r-cut"
  cp "$W/r-ref/$mid" "$W/r-cut/" && echo "$mid" >"$W/r-cut/latest"
  across h1:2,h2:2 "$DTRAIN" $args --checkpoint-dir "$W/r-cut" --resume latest >out 2>err
  rc=$?
  local step=${mid#ckpt-000001-}
  step=$((10#${step%.h5}))
  if [[ $rc == 0 ]] && ((step > 0)) && grep -q "resuming from .*$mid: 1 epoch and $step steps done" out &&
     same_ckpt "$(latest "$W/r-ref")" "$(latest "$W/r-cut")"; then
    ok "2x2: resumed at epoch 2 step $step across hosts, final parameters and optimizer = the run never stopped (h5diff)"
  else
    bad "resume mid-epoch: exit $rc"; cat out err | tail
  fi
  # auto's timed choice is written with the checkpoint and used again on resume.
  across h1:1,h2:1 "$DTRAIN" $SYN --epochs 1 --checkpoint-dir "$W/r-auto" >out 2>err
  local first
  first=$(grep -o 'all-reduce auto (timed at start-up: [^)]*)' out)
  across h1:1,h2:1 "$DTRAIN" $SYN --epochs 2 --checkpoint-dir "$W/r-auto" --resume latest >out 2>err
  # the choice alone: the start-up line may add the margin, "(1.37x mpi)"
  local choice=${first#*start-up: }
  choice=${choice%%)*}
  choice=${choice%% (*}
  if [[ -n $first ]] && grep -qF "all-reduce auto (as the checkpoint's run timed it: $choice)" out; then
    ok "auto across hosts: '$first', and the resumed run takes the same from the checkpoint"
  else
    bad "auto's choice on resume: first '$first', then $(grep -o 'all-reduce auto ([^)]*)' out)"
  fi
  # Another layout: re-sharded, noted, trains on.
  across h1:1,h2:1,h3:1 "$DTRAIN" ${args/--keep 0/} --epochs 4 --checkpoint-dir "$W/r-cut" --resume latest >out 2>err
  rc=$?
  if [[ $rc == 0 ]] && grep -q 'checkpoint was written by 4 ranks x batch 16, this run has 3 x 16' err && grep -q '^Epoch 4/4' out; then
    ok "a 2x2 checkpoint resumed on 3 hosts: re-sharded (noted), epoch 4 done"
  else
    bad "resume on another layout: exit $rc"; cat out err | tail
  fi
}

# The pids of dtrain ranks running on a host.
host_ranks() { local p; for p in $(ip netns pids "dtc-$1" 2>/dev/null); do [[ $(cat /proc/"$p"/comm 2>/dev/null) == dtrain ]] && echo "$p"; done; }

# kill_rank HOST JOB OUT: once the job (pid JOB, its stdout in OUT) has
# finished an epoch, kill -9 its first rank on HOST and wait for the job.
# Sets rc (the job's status, or empty: no rank found), ms (kill to job end)
# and left (dtrain processes still on any host).
kill_rank() {
  local host=$1 job=$2 out=$3 victim t0 t1 h i
  rc='' ms=0 left=''
  for ((i = 0; i < 200; i++)); do [[ -n $(host_ranks "$host") ]] && grep -q '^Epoch 1/' "$out" && break; sleep 0.1; done
  victim=$(host_ranks "$host" | head -1)
  if [[ -z $victim ]]; then
    kill "$job" 2>/dev/null
    wait "$job"
    return
  fi
  t0=$(date +%s%N)
  kill -9 "$victim"
  wait "$job"
  rc=$?
  t1=$(date +%s%N)
  ms=$(((t1 - t0) / 1000000))
  for h in h1 h2 h3; do left+=$(host_ranks $h); done
}

check_faults() {
  local t0 t1 rc ms left
  T_LIMIT=120 across h1:1,h2:1,h3:1 "$DTRAIN" $SYN --epochs 100000 --stall-timeout 10 >"$W/kill.out" 2>"$W/kill.err" &
  kill_rank h2 $! "$W/kill.out"
  head -20 "$W/kill.err"
  if [[ -z $rc ]]; then
    bad "no rank found on h2"
  elif [[ $rc != 0 ]] && [[ -z $left ]] && ((ms < 15000)) && grep -q 'on node h2 exited on signal 9' "$W/kill.err"; then
    ok "kill -9 of rank 1 on h2: the job ends on all 3 hosts in $ms ms (exit $rc), h2 and the signal named, no rank left"
  else
    bad "kill -9 on h2: exit $rc after $ms ms, left: $left"
  fi
  # A rank that stops coming (outside the collectives): the watchdog, over
  # two-sided reports, names it within --stall-timeout plus its grace.
  t0=$(date +%s%N)
  DTRAIN_TEST_STALL=2:20 across h1:1,h2:1,h3:1 -x DTRAIN_TEST_STALL "$DTRAIN" $SYN --epochs 100 --stall-timeout 4 >out 2>err
  rc=$?
  t1=$(date +%s%N)
  head err
  if [[ $rc != 0 ]] && (((t1 - t0) / 1000000 < 30000)) &&
     grep -q 'the watchdog gathers progress with two-sided messages' err &&
     grep -q '^dtrain: error: rank 0 waited 4 s in the gradient exchange at epoch 1 step 20 (--stall-timeout 4): not arrived: rank 2 (alive, at this step, outside the collectives); waiting in the collective: ranks 0, 1' err; then
    ok "a rank on h3 that stops at update 20: named by rank 0's watchdog, job over in $(((t1 - t0) / 1000000)) ms"
  else
    bad "stalled rank: exit $rc after $(((t1 - t0) / 1000000)) ms"
  fi
  # Under srun, as the job script runs it (--kill-on-bad-exit): a killed
  # task ends the step on every node at once, named by srun.
  srun_kill "--kill-on-bad-exit=1" 15000
  # Plain srun leaves the others waiting in MPI for the dead rank: the
  # stall watchdog ends them within --stall-timeout (8) and its grace.
  srun_kill "" 25000 --stall-timeout 8
}

srun_kill() { # srun_kill SRUN-FLAGS LIMIT-MS [DTRAIN-FLAGS...]
  local flags=$1 limit=$2 rc ms left
  shift 2
  # shellcheck disable=SC2086
  timeout 120 srun -N3 -n3 --mpi=pmix $flags "$DTRAIN" $SYN --epochs 100000 "$@" >"$W/srun-kill.out" 2>"$W/srun-kill.err" &
  kill_rank h3 $! "$W/srun-kill.out"
  grep -v '^ *$' "$W/srun-kill.err" | head
  if [[ -z $rc ]]; then
    bad "srun ${flags:-(plain)}: no rank found on h3"
  elif [[ $rc != 0 && $rc != 124 ]] && [[ -z $left ]] && ((ms < limit)) &&
     grep -q 'h3: task 2: Killed' "$W/srun-kill.err" &&
     { [[ -n $flags ]] || grep -q '^dtrain: error: rank 0 waited 8 s in ' "$W/srun-kill.err"; }; then
    ok "srun ${flags:-(plain) --stall-timeout 8}: kill -9 of task 2 on h3 ends the step on all hosts in $ms ms (under $limit), h3 named by srun, no rank left"
  else
    bad "srun ${flags:-(plain)} kill: exit $rc after $ms ms, left: $left"
  fi
}

check_slurm() {
  local rc job log
  # The job script with its defaults (2 epochs instead of 10, and one rank
  # per node and one core per rank: the hosts here have one core each).
  DTRAIN=$DTRAIN CKPT_DIR=$W/sb-default DTRAIN_ARGS="--epochs 2" \
    timeout 600 sbatch --wait -N2 --ntasks-per-node=1 --cpus-per-task=1 -o "$W/sb-default.out" \
    "$TOP_SRCDIR/jobscripts/slurm/dtrain.sbatch" >"$W/sbatch.out"
  rc=$?
  cat "$W/sb-default.out"
  if [[ $rc == 0 ]] && grep -q '^Epoch 2/2 ' "$W/sb-default.out" && grep -q 'dtrain exited with status 0' "$W/sb-default.out" &&
     grep -q '^layout: 2 nodes x 1 rank;' "$W/sb-default.out"; then
    ok "sbatch jobscripts/slurm/dtrain.sbatch (defaults, --epochs 2) on h1+h2: exit 0 through srun --mpi=pmix"
  else
    bad "the default job script: sbatch exit $rc"
  fi
  # Requeue. Slurm checks time limits every 30 s or so, so the signal comes
  # up to about 35 s into a run: the job gets at least 60 s of work (epochs
  # sized from the default job's second epoch just above: the same data,
  # model and nodes; in the job they ran up to 1.3x slower than a run
  # measured outside Slurm, never faster), so that its first run is still
  # training then. Each resumed run is signalled at the next check, 5-35 s
  # in, so the job takes one restart per 30 s of work: no more epochs than
  # the 60 s need (at least 3; a floor of 9 took 6 restarts and 3.5 minutes
  # in CI).
  local secs epochs
  secs=$(sed -n 's/^Epoch 2\/2 - \([0-9.]*\) s .*/\1/p' "$W/sb-default.out")
  epochs=$(awk -v s="${secs:-1}" 'BEGIN { e = int(60 / s) + 1; print e < 3 ? 3 : e }')
  echo "# an epoch of the default job takes $secs s across h1+h2: the requeue job runs $epochs epochs"
  # The reference first, never interrupted (the same data, ranks, hosts and
  # all-reduce; ring is named so both runs sum alike).
  local args="--epochs $epochs --checkpoint-every 1 --no-validation --allreduce ring"
  T_LIMIT=300 across h1:1,h2:1 "$DTRAIN" --synthetic 28x28x1:10:60000 $args --checkpoint-dir "$W/sb-ref" --quiet ||
    bad "reference run"
  DTRAIN=$DTRAIN CKPT_DIR=$W/sb-requeue DTRAIN_ARGS="$args" \
    timeout 900 sbatch --wait -N2 --ntasks-per-node=1 --cpus-per-task=1 --time=1 --signal=B:USR1@55 \
    -o "$W/sb-requeue.out" "$TOP_SRCDIR/jobscripts/slurm/dtrain.sbatch" >"$W/sbatch.out" &
  local pid=$! tsig='' tres=''
  log=$W/sb-requeue.out
  # Watch the log: when the signal reaches the job script, and when the
  # resumed run is set up and starts its first step (its layout line, which
  # dtrain flushes just before training).
  while kill -0 $pid 2>/dev/null; do
    [[ -z $tsig ]] && grep -q 'SIGUSR1: asking dtrain' "$log" 2>/dev/null && tsig=$(date +%s.%N)
    [[ -n $tsig && -z $tres ]] && (($(grep -c '^layout: ' "$log" 2>/dev/null) >= 2)) && tres=$(date +%s.%N)
    sleep 0.1
  done
  wait $pid
  rc=$?
  job=$(grep -o '[0-9]*' "$W/sbatch.out" | head -1)
  cat "$log"
  if [[ $rc == 0 ]] && grep -q 'restart 1, resuming' "$log" && grep -q 'requeueing job' "$log" &&
     grep -q '^dtrain: SIGUSR1 received: checkpoint ' "$log" && grep -q "^Epoch $epochs/$epochs " "$log" &&
     grep -q 'dtrain exited with status 0' "$log"; then
    ok "sbatch --time=1 --signal=B:USR1@55: SIGUSR1 -> checkpoint -> exit 75 -> scontrol requeue -> $(grep -c 'restart [0-9]*, resuming' "$log") restart(s) -> $epochs epochs"
    [[ -n $tsig && -n $tres ]] &&
      echo "# requeue cycle: signal seen at the job script -> resumed run starts its first step, $(awk -v a="$tsig" -v b="$tres" 'BEGIN { printf "%.1f", b - a }') s (job $job)"
  else
    bad "requeue job: sbatch exit $rc"
  fi
  if same_ckpt "$(latest "$W/sb-ref")" "$(latest "$W/sb-requeue")"; then
    ok "the requeued job's final checkpoint equals the uninterrupted run's (h5diff /model /optimizer)"
  else
    bad "requeued job's final checkpoint $(latest "$W/sb-requeue") differs from $(latest "$W/sb-ref")"
  fi
  # srun direct launch from the login side.
  timeout 120 srun -N2 -n4 --mpi=pmix "$DTRAIN" $SYN --epochs 2 -v -v >out 2>err
  rc=$?
  if [[ $rc == 0 ]] && identical out 4 2 && grep -q '^layout: 2 nodes x 2 ranks;' out; then
    ok "srun -N2 -n4 --mpi=pmix dtrain: 2 nodes x 2 ranks, identical ranks"
  else
    bad "srun direct: exit $rc"; tail out err
  fi
}

check_local() {
  local args="--epochs 12 --checkpoint-every 1 --no-validation --allreduce ring" rc
  T_LIMIT=300 across h1:1,h2:1 "$DTRAIN" --synthetic 8x8x3:4:32768 --model mlp --batch-size 16 $args \
    --checkpoint-dir "$W/loc-ref" --quiet || bad "reference run"
  MPIEXEC=mpirun MPIEXEC_FLAGS="$DTC_MPIRUN_FLAGS --host h1:1,h2:1" NP=2 DTRAIN=$DTRAIN CKPT_DIR=$W/loc \
    DATA="--synthetic 8x8x3:4:32768" DTRAIN_ARGS="--model mlp --batch-size 16 $args" \
    timeout 300 "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$W/loc.out" 2>&1 &
  local pid=$!
  for ((i = 0; i < 600; i++)); do [[ -e $W/loc/ckpt-000001-00000000.h5 ]] && break; sleep 0.05; done
  local spid
  spid=$(pgrep -P $pid -f jobscripts/local/dtrain.sh | head -1)
  [[ -n $spid ]] && kill -USR1 "$spid"
  wait $pid
  rc=$?
  cat "$W/loc.out"
  if [[ $rc == 0 ]] && grep -q 'restart 1: resuming' "$W/loc.out" && grep -q '^Epoch 12/12 ' "$W/loc.out" &&
     same_ckpt "$(latest "$W/loc-ref")" "$(latest "$W/loc")"; then
    ok "jobscripts/local/dtrain.sh across h1+h2: SIGUSR1 -> checkpoint -> restart -> the uninterrupted run's bits"
  else
    bad "local script across hosts: exit $rc"
  fi
}

# Every process of a host (slurmd, slurmstepd, dtrain's ranks): the host dies.
kill_host() { local p; for p in $(ip netns pids "dtc-$1" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; }
slurmd_up() { "$TOP_SRCDIR/tests/cluster/rsh" "$1" "slurmd -f '$SLURM_CONF' -N $1"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# decisions LOG: the elastic script's choices in LOG, on one line (for a failure's message).
decisions() { grep -o 'elastic: .*\|step ended: .*\|dtrain exited .*' "$1" | paste -sd '|'; }
final_val() { sed -n 's/^Epoch \([0-9]*\)\/\1 .* val_accuracy: \([0-9.]*\).*/\2/p' "$1" | tail -1; }

# elastic_job NAME EPOCHS [VAR=VALUE...]: the elastic job script on h1-h3
# in the background, EPOCHS epochs, its log $W/NAME.out; sets job (the pid
# of sbatch --wait).
elastic_job() {
  local name=$1 epochs=$2
  shift 2
  rm -rf "$W/${name:?}" "$W/$name.out" "$W/$name.jsonl"
  env "$@" DTRAIN="$DTRAIN" CKPT_DIR="$W/$name" DATA="$W/fm.h5" METRICS="$W/$name.jsonl" PROBE_TIMEOUT=5 STALL_TIMEOUT=10 \
    DTRAIN_ARGS="--epochs $epochs --allreduce ring" \
    timeout 600 sbatch --wait -N3 --ntasks-per-node=1 --cpus-per-task=1 -o "$W/$name.out" \
    "$TOP_SRCDIR/jobscripts/slurm/dtrain-elastic.sbatch" >/dev/null &
  job=$!
}
# wait_for PATTERN FILE: until a line of FILE matches (ERE), the job ends, or 300 s.
wait_for() {
  local i
  for ((i = 0; i < 3000; i++)); do
    grep -Eq "$1" "$2" 2>/dev/null && return 0
    kill -0 "$job" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# timings NAME T_DEATH: death -> step ended -> survivors' step launched -> its first step.
timings() {
  local log=$W/$1.out t0=$2 tend='' tlaunch='' tfirst='' n
  n=$(grep -c '^layout: ' "$log")
  while kill -0 "$job" 2>/dev/null; do
    [[ -z $tend ]] && grep -q 'step ended: exit' "$log" && tend=$(now)
    [[ -z $tlaunch ]] && (($(grep -c ': step on ' "$log") >= 2)) && tlaunch=$(now)
    (($(grep -c '^layout: ' "$log") > n)) && { tfirst=$(now); break; }
    sleep 0.05
  done
  if [[ -n $tfirst ]]; then
    echo "# $1: death -> first step on the survivors $(since "$t0" "$tfirst") s: detection (step ends) $(since "$t0" "${tend:-$t0}") s," \
      "probe $(since "${tend:-$t0}" "${tlaunch:-$t0}") s, srun + dtrain start + resume $(since "${tlaunch:-$t0}" "$tfirst") s"
    awk -v a="$t0" -v b="$tfirst" 'BEGIN { exit !(b - a <= 30) }' && ok "$1: the survivors' first step $(since "$t0" "$tfirst") s after the death (goal 30)" ||
      bad "$1: the survivors' first step $(since "$t0" "$tfirst") s after the death (goal 30)"
  fi
}

# lose_h2 NAME EPOCHS WHAT BACK...: in epoch 3 of the job (pid $job, log
# NAME.out) every process of h2 is killed (and its link cut for the local
# launcher, whose probe would reach it otherwise); the time to the
# survivors' first step is measured, then BACK... brings h2 back. The job
# must shrink without h2, grow back to 3 nodes from an end-of-epoch
# checkpoint after epoch 3 (the next after the death) or later, say so in
# its log and METRICS, and end its EPOCHS at 3 nodes.
lose_h2() {
  local name=$1 epochs=$2 what=$3 log=$W/$1.out t0 rc
  shift 3
  wait_for "^Epoch 2/$epochs " "$log" && sleep 1
  kill_host h2
  [[ $name == el-loc ]] && ip -n dtc-h2 link set eth0 down
  t0=$(now)
  timings "$name" "$t0"
  "$@"
  wait "$job"; rc=$?
  cat "$log"
  if [[ $rc == 0 ]] && grep -q 'elastic: shrink: .*h2 lost' "$log" &&
    grep -Eq 'elastic: grow: h2 answering again after epoch [3-9]: resuming from ckpt-0*[3-9]-0+\.h5 at 3 nodes' "$log" &&
    grep -q '"event":"grow".*"nodes":3' "$W/$name.jsonl" && grep -q "^Epoch $epochs/$epochs " "$log" &&
    [[ $(grep '^layout: ' "$log" | tail -1) == 'layout: 3 nodes x 1 rank;'* ]]; then
    ok "$what: $(grep -o 'elastic: grow: .*' "$log"), $epochs epochs"
  else
    bad "$what: exit $rc; the script said: $(decisions "$log")"
  fi
}

check_elastic() {
  local rc t0 ref got
  "$TOP_BUILDDIR/dtrain-prep" --limit-train 20000 --limit-test 5000 "$W/fm.h5" >/dev/null || { bad "dtrain-prep"; return; }
  # (a) the reference, undisturbed, through the same script: 6 epochs, as
  # the shrunk job it is compared with (time: most of the stage is jobs).
  elastic_job el-ref 6
  wait $job; rc=$?
  ref=$(final_val "$W/el-ref.out")
  if [[ $rc == 0 && -n $ref ]] && grep -q 'elastic: start: 3 of 3 nodes healthy' "$W/el-ref.out" && ! grep -q 'elastic: shrink' "$W/el-ref.out" &&
     grep -q '"event":"start".*"nodes":3' "$W/el-ref.jsonl" && [[ $(grep -c '"kind":"epoch"' "$W/el-ref.jsonl") == 6 ]]; then
    ok "undisturbed elastic job on h1-h3: 6 epochs, val_accuracy $ref, the start event and 6 epoch rows in METRICS"
  else
    bad "undisturbed elastic job: exit $rc"; cat "$W/el-ref.out"
  fi
  # h2 marked down by Slurm mid-epoch 3: the job goes on on h1+h3.
  elastic_job el-down 6
  wait_for '^Epoch 2/6 ' "$W/el-down.out" && sleep 1
  scontrol update nodename=h2 state=down reason=elastic-test
  t0=$(now)
  timings el-down "$t0"
  wait $job; rc=$?
  scontrol update nodename=h2 state=resume 2>/dev/null # unless it is back already (ReturnToService=2)
  cat "$W/el-down.out"
  got=$(final_val "$W/el-down.out")
  if [[ $rc == 0 && -n $got ]] && grep -q 'elastic: shrink: step failed (exit [0-9]*), restart 1: h2 lost; resuming from ckpt-' "$W/el-down.out" &&
     grep -q 'this run has 2 x ' "$W/el-down.out" && grep -q '"event":"shrink".*"nodes":2.*"hosts":"h1,h3"' "$W/el-down.jsonl" &&
     [[ $(grep -c "elastic: h2 has left job [0-9]*'s allocation (Slurm marked it DOWN): it cannot rejoin this job" "$W/el-down.out") == 1 ]] &&
     [[ $(grep '^layout: ' "$W/el-down.out" | tail -1) == 'layout: 2 nodes x 1 rank;'* ]]; then
    ok "h2 down mid-epoch 3: shrunk to h1+h3 (re-sharded), 6 epochs done, the change in the log and METRICS, h2's leaving the allocation said once"
  else
    bad "h2 down: exit $rc; the script said: $(decisions "$W/el-down.out")"
  fi
  # Learning survives the shrink: no more than 1 point below the undisturbed
  # run (above it is no fault). The step at which h2 dies depends on the
  # machine's load, so the re-sharded job trains on other batches from then
  # on, and the two accuracies scatter by about half a point either way
  # (seen: 0.8820 against 0.8764, a CI run with the release compiling beside).
  awk -v a="$ref" -v b="$got" 'BEGIN { exit !(a > 0.5 && a - b <= 0.01) }' &&
    ok "final val_accuracy $got with h2 lost, $ref undisturbed: not more than 1 point below" ||
    bad "final val_accuracy $got with h2 lost, $ref undisturbed: more than 1 point below"
  # (b) every process of h2 killed mid-epoch 3; its slurmd back once the
  # survivors run: h2 is used again from the next epoch (10 epochs: the job
  # must still be running). slurmd must be back within Slurm's SlurmdTimeout
  # (120 s here, cluster.sh) or Slurm takes h2 from the job for good; the
  # survivors' first step, after which it comes back, took 15-26 s.
  elastic_job el-back 10
  lose_h2 el-back 10 "h2 killed (slurmd and all), slurmd back" slurmd_up h2
  # (c) MIN_NODES=3 and h3 lost: exit 1, h3 named.
  elastic_job el-min 10 MIN_NODES=3
  wait_for '^Epoch 1/10 ' "$W/el-min.out"
  kill_host h3
  wait $job; rc=$?
  slurmd_up h3
  cat "$W/el-min.out"
  if [[ $rc == 1 ]] && grep -q 'elastic: stop: only 2 of 3 nodes healthy, fewer than MIN_NODES=3; lost: h3$' "$W/el-min.out" &&
     grep -q '"event":"stop"' "$W/el-min.jsonl"; then
    ok "MIN_NODES=3, h3 lost: exit 1, $(grep -o 'elastic: stop: .*' "$W/el-min.out")"
  else
    bad "MIN_NODES=3: exit $rc"
  fi
  # (d) The local launcher (ELASTIC=1: the same loop over mpirun): h2 dies
  # whole (its orted and rank killed, its link down) and comes back (link up).
  rm -rf "$W/el-loc" "$W/el-loc.jsonl"
  ELASTIC=1 HOSTS=h1:1,h2:1,h3:1 MPIEXEC=mpirun MPIEXEC_FLAGS="$DTC_MPIRUN_FLAGS" DTRAIN=$DTRAIN CKPT_DIR=$W/el-loc \
    DATA=$W/fm.h5 METRICS=$W/el-loc.jsonl PROBE_TIMEOUT=5 STALL_TIMEOUT=10 DTRAIN_ARGS="--epochs 6 --allreduce ring" \
    timeout 400 "$TOP_SRCDIR/jobscripts/local/dtrain.sh" >"$W/el-loc.out" 2>&1 &
  job=$!
  lose_h2 el-loc 6 "local launcher across hosts: h2 killed and cut off, link back" ip -n dtc-h2 link set eth0 up
  # The hosts back in Slurm for the checks after this one (those that come
  # later use mpirun only): nodes still down are resumed.
  local i
  for ((i = 0; i < 60; i++)); do [[ $(sinfo -h -N -o '%t' | grep -c '^idle$') == 3 ]] && break; sleep 0.5; done
  echo "# Slurm's nodes at the end: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"
  for i in $(sinfo -h -N -t down,drain -o '%N'); do scontrol update nodename="$i" state=resume; done
  return 0
}

check_shaped() {
  local rsh=$TOP_SRCDIR/tests/cluster/rsh gbs busbw
  bash "$CLUSTER" shape 200mbit || bad "shape 200mbit failed"
  if bash "$CLUSTER" status | grep '^link: rate=200mbit$' >/dev/null && tc qdisc show dev dtc-h1 | grep 'tbf .*rate 200Mbit' >/dev/null &&
     ip netns exec dtc-h2 tc qdisc show dev eth0 | grep 'tbf .*rate 200Mbit' >/dev/null; then
    ok "shape 200mbit: tbf on both ends of the links, recorded in the state"
  else bad "shape 200mbit: $(bash "$CLUSTER" status | grep link; tc qdisc show dev dtc-h1)"; fi
  "$rsh" h2 "python3 $TOP_SRCDIR/bench/tcp_bandwidth.py serve $H2_ADDR 5999" &
  sleep 0.5
  gbs=$("$rsh" h1 "python3 $TOP_SRCDIR/bench/tcp_bandwidth.py send $H2_ADDR 5999 8 3")
  wait
  awk -v g="$gbs" 'BEGIN { exit !(g >= 0.8 * 0.025 && g <= 1.05 * 0.025) }' &&
    ok "one TCP stream h1 -> h2: $gbs GB/s of 0.025" || bad "one TCP stream h1 -> h2: $gbs GB/s, expected 0.020-0.026"
  across h1:1,h2:1 "$BENCH" -b 4M -e 4M -a ring --outofplace -n 3 >out 2>&1
  busbw=$(awk '$3 == "ring" && $1 ~ /^[0-9]+$/ { print $10 }' out)
  awk -v b="$busbw" 'BEGIN { exit !(b >= 0.6 * 0.025) }' &&
    ok "ring all-reduce of 4 MiB across the shaped link, in the default pieces across nodes ($(grep -o 'ring chunk: .*' out)): busbw $busbw GB/s of 0.025" ||
    { bad "ring across the shaped link: busbw '$busbw' GB/s, expected >= 0.015"; cat out; }
  bash "$CLUSTER" shape none >/dev/null
  if ! tc qdisc show dev dtc-h1 | grep tbf >/dev/null && ! ip netns exec dtc-h2 tc qdisc show dev eth0 | grep tbf >/dev/null &&
     ! bash "$CLUSTER" status | grep '^link:' >/dev/null; then
    ok "shape none: no tbf left, no link recorded"
  else bad "shape none left $(tc qdisc show dev dtc-h1)"; fi
  bash "$CLUSTER" shape 10xyz >out 2>&1 && bad "shape 10xyz succeeded" ||
    { grep -q "shape: expected a rate like 100mbit or 1gbit .* found '10xyz'" out && ok "shape 10xyz: $(cat out)" ||
      bad "shape 10xyz: $(cat out)"; }
}

check_study() {
  local rc
  bash "$CLUSTER" shape 100mbit >/dev/null
  timeout 300 "$TOP_SRCDIR/jobscripts/scaling-study" --cluster --nodes 1,2 --models mlp --synthetic 8x8x3:4:4096 \
    --scaling weak --batch 16 --repeats 1 --epochs 2 --steps 4 --bucket-mb 0.25,4 --grad-compression none,bf16 \
    --no-plots --dtrain "$DTRAIN" --out "$W/study" >"$W/study.log" 2>&1
  rc=$?
  bash "$CLUSTER" shape none >/dev/null
  if [[ $rc == 0 && $(($(wc -l <"$W/study/summary.csv") - 1)) == 8 ]] &&
     grep -q '^layout: 2 nodes x 1 rank;' "$W/study/logs/"*n2x1*-b4-gcbf16-r1.log &&
     [[ $(awk -F, 'NR > 1 { print $NF }' "$W/study/summary.csv" | sort -u) == rate=100mbit ]]; then
    ok "scaling-study --cluster: 2 buckets x 2 compressions on h1, h1+h2, link rate=100mbit"
  else
    bad "scaling-study --cluster: exit $rc"; tail -20 "$W/study.log"
  fi
}

checks=${*:-hosts preflight strategies ps allreduce resume faults slurm elastic local shaped study}
t_all=$(date +%s)
for c in $checks; do run_check "$c"; done
echo "cluster: $npass passed, $nfail failed ($(($(date +%s) - t_all)) s)"
((nfail == 0))
