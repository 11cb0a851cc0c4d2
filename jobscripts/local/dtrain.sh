#!/bin/bash
# dtrain.sh: the job of jobscripts/slurm/dtrain.sbatch on one machine with
# plain mpirun, requeue included, to try the checkpoint-and-requeue path
# without a scheduler.
#
# SIGUSR1 to this script plays the scheduler's walltime warning: it is passed
# on to dtrain, which writes a checkpoint and exits 75, and the script starts
# dtrain again with `--resume latest` ("requeues"), up to MAX_RESTARTS times.
# SIGTERM (or Ctrl-C's SIGINT) also checkpoints, but then the script stops;
# run it again to continue. WALLTIME=S sends the warning S seconds into
# every run, as a short time limit would.
#
#   jobscripts/local/dtrain.sh                      # 2 ranks, synthetic data
#   NP=4 DATA=data/fashion-mnist.h5 DTRAIN_ARGS="--epochs 20" WALLTIME=30 jobscripts/local/dtrain.sh
#   kill -USR1 <pid of dtrain.sh>                   # from another shell
#
# Settings (environment variables):
#   NP            ranks (default 2)
#   DTRAIN        the dtrain binary (default: build/dtrain of this tree if it
#                 is there, else dtrain on PATH)
#   DATA          input file(s) or a --synthetic spec, split at spaces, globs
#                 expanded (default: --synthetic 28x28x1:10:60000)
#   CKPT_DIR      checkpoint directory (default: dtrain-ckpt/local here)
#   DTRAIN_ARGS   further dtrain options, split at spaces
#   MPIEXEC, MPIEXEC_FLAGS  the launcher and its flags (default mpirun; the
#                 script adds Open MPI's --allow-run-as-root as root and
#                 --oversubscribe with more ranks than cores)
#   WALLTIME      seconds into each run to send SIGUSR1 (default: none)
#   MAX_RESTARTS  stop requeueing after this many (default 10); with
#                 ELASTIC=1, restarts after failures (growing not counted)
#
# Elastic (ELASTIC=1 and HOSTS=host:slots,..., in place of NP and of a --host
# in MPIEXEC_FLAGS): this script runs jobscripts/slurm/dtrain-elastic.sbatch
# with mpirun as its launcher, the one implementation of elastic runs (see
# its header). A run that fails (a host or rank died: any exit but 0, 75,
# 2 and 3) is started again with `--resume latest` on the hosts that answer
# `$MPIEXEC --host HOST:1 -np 1 true`; hosts that come back are used again
# from the next end-of-epoch checkpoint. Its settings MIN_NODES, METRICS
# (.jsonl), PROBE_TIMEOUT and STALL_TIMEOUT apply; WALLTIME does not.
#   HOSTS=h1:2,h2:2,h3:2 ELASTIC=1 MIN_NODES=2 jobscripts/local/dtrain.sh
set -u
me=dtrain.sh
log() { echo "$me: $(date '+%F %T'): $*"; }
top=$(cd "$(dirname "$0")/../.." && pwd)

NP=${NP:-2}
if [ -z "${DTRAIN:-}" ]; then
  if [ -x "$top/build/dtrain" ]; then DTRAIN=$top/build/dtrain; else DTRAIN=dtrain; fi
fi
DATA=${DATA:---synthetic 28x28x1:10:60000}
CKPT_DIR=${CKPT_DIR:-$PWD/dtrain-ckpt/local}
DTRAIN_ARGS=${DTRAIN_ARGS:-}
WALLTIME=${WALLTIME:-}
MAX_RESTARTS=${MAX_RESTARTS:-10}
if [ -z "${MPIEXEC:-}" ]; then
  MPIEXEC=mpirun MPIEXEC_FLAGS=${MPIEXEC_FLAGS:-}
  # Open MPI refuses to run as root unless told, and more ranks than cores.
  [ "$(id -u)" = 0 ] && MPIEXEC_FLAGS="$MPIEXEC_FLAGS --allow-run-as-root"
  [ "$NP" -gt "$(nproc)" ] && MPIEXEC_FLAGS="$MPIEXEC_FLAGS --oversubscribe"
fi
MPIEXEC_FLAGS=${MPIEXEC_FLAGS:-}
mkdir -p "$CKPT_DIR" || exit 1
if [ "${ELASTIC:-0}" = 1 ]; then
  [ -n "${HOSTS:-}" ] || { log "ELASTIC=1 needs HOSTS=host:slots,... (the hosts to run on)"; exit 2; }
  export DTRAIN DATA CKPT_DIR DTRAIN_ARGS MPIEXEC MPIEXEC_FLAGS MAX_RESTARTS HOSTS
  exec bash "$top/jobscripts/slurm/dtrain-elastic.sbatch"
fi

pid='' stop='' timer=''
forward() {
  interrupted=1 stop=$1
  log "SIG$1: asking dtrain to checkpoint and stop"
  # Open MPI's mpirun passes SIGUSR1 on to the ranks; SIGTERM would end them.
  [ -n "$pid" ] && kill -USR1 "$pid" 2>/dev/null
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
trap 'forward INT' INT

restart=0
while :; do
  if [ "$restart" -gt 0 ]; then
    log "restart $restart: resuming from $CKPT_DIR"
  else
    log "first run: $DTRAIN on $NP ranks, data: $DATA, checkpoints in $CKPT_DIR"
  fi
  stop=
  # MPIEXEC_FLAGS and the rest are lists of words.
  # shellcheck disable=SC2086
  $MPIEXEC $MPIEXEC_FLAGS -n "$NP" "$DTRAIN" $DATA --checkpoint-dir "$CKPT_DIR" --resume latest $DTRAIN_ARGS &
  pid=$!
  if [ -n "$WALLTIME" ]; then
    ( sleep "$WALLTIME" & s=$!; trap 'kill $s 2>/dev/null; exit 0' TERM; wait $s && kill -USR1 $$ ) &
    timer=$!
  fi
  # A trapped signal ends `wait` early (status > 128) while dtrain is still
  # writing its checkpoint: wait again until a wait was not interrupted.
  while :; do
    interrupted=0
    wait "$pid"
    rc=$?
    [ "$interrupted" = 1 ] || break
  done
  pid=
  if [ -n "$timer" ]; then kill "$timer" 2>/dev/null; wait "$timer" 2>/dev/null; timer=; fi

  if [ "$rc" != 75 ]; then
    log "dtrain exited with status $rc"
    exit "$rc"
  elif [ "$stop" != USR1 ]; then
    log "dtrain checkpointed after SIG${stop:-?} (exit 75): stopped; run this again to continue"
    exit "$rc"
  elif [ "$restart" -ge "$MAX_RESTARTS" ]; then
    log "dtrain checkpointed (exit 75), but this was restart $restart of MAX_RESTARTS=$MAX_RESTARTS: stopped"
    exit "$rc"
  fi
  log "dtrain checkpointed after SIGUSR1 (exit 75): requeueing"
  restart=$((restart + 1))
done
