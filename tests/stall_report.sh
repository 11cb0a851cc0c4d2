#!/bin/sh
# stall_report.sh: the stall watchdog names the rank that stopped.
#
# One rank of 2 or 3 is stopped with SIGSTOP mid-epoch, with and without
# --overlap. The job ends (the watchdog's MPI_Abort) within --stall-timeout
# and a few seconds, and rank 0's one error line names the stopped rank by
# its pid, says it has been silent (its heartbeat stopped) and that /proc
# shows its process stopped, with the last step it reported and whether it
# was in a collective, then the ranks waiting in the collective. (Heartbeats need
# MPI_THREAD_MULTIPLE, which Open MPI and MPICH here both give.)
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/stall.$$
mkdir -p "$T"

# rank_pid DIR R: the pid of rank R of the run whose command line holds DIR.
rank_pid() {
  for p in $(pgrep -f "^$DTRAIN .*$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qE "^(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2\$"; then
      echo "$p"; return
    fi
  done
}

for np in 2 3; do
  for ov in --no-overlap --overlap; do
    name=np$np$ov
    d=$T/$name
    ( launch "$np" "$DTRAIN" "$fm" --batch-size 32 --epochs 1000 --verbose --stall-timeout 4 $ov \
        --metrics "$d.csv" >"$d.out" 2>"$d.err"
      echo $? >"$d.rc" ) &
    i=0
    while ! grep -q '^step 5/' "$d.out" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    victim_rank=$((np - 1))
    victim=$(rank_pid "$d.csv" $victim_rank)
    if [ -z "$victim" ]; then
      fail "$name: no pid for rank $victim_rank"; pkill -9 -f "^$DTRAIN .*$d.csv"; wait; continue
    fi
    t0=$(date +%s)
    kill -STOP "$victim"
    i=0
    while [ ! -f "$d.rc" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    t1=$(date +%s)
    kill -9 "$victim" 2>/dev/null
    wait
    rc=$(cat "$d.rc" 2>/dev/null)
    line=$(grep '^dtrain: error: rank 0 waited' "$d.err")
    # The stopped rank named; another may be listed as alive but still in
    # the previous step's collective (it waits for the stopped one there).
    want="rank $victim_rank (pid $victim: silent for [0-9.]* s, its process is stopped (SIGSTOP, or a debugger); last at epoch [0-9]* step [0-9]*, \(outside the collectives\|waiting in a collective\))"
    if [ -n "$rc" ] && [ "$rc" != 0 ] && [ $((t1 - t0)) -le 20 ] && echo "$line" | grep -q -- "not arrived: .*$want" &&
       echo "$line" | grep -q -- "; waiting in the collective: ranks* 0[0-9, ]*; ending the job\$"; then
      pass "$name: rank $victim_rank stopped, the job ended in $((t1 - t0)) s (exit $rc): $(echo "$line" | sed 's/.*not arrived: //')"
    else
      fail "$name: rc=$rc after $((t1 - t0)) s, line: $line"; tail -5 "$d.err" >&2
    fi
    left=$(pgrep -f "^$DTRAIN .*$d.csv")
    [ -z "$left" ] || { fail "$name: ranks left: $left"; kill -9 $left; }
  done
done
rm -rf "$T"
finish
