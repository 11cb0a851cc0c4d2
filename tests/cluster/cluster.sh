#!/usr/bin/env bash
# cluster.sh: a cluster of real hosts on this one machine, for the cross-host
# tests (tests/cluster/run.sh) and for trying dtrain as on several nodes.
#
# Each host is a network namespace with its own hostname (UTS namespace), its
# own /tmp (mount namespace) and its own core, joined to the others by real
# TCP over veth pairs on one bridge. The machine itself (outside every host)
# holds the bridge's first address: mpirun and slurmctld run there and reach
# the hosts through it, as a login node would. With --slurm, a real Slurm
# from Debian's packages runs on them: a private munged, slurmctld outside,
# one slurmd per host.
#
#   tests/cluster/cluster.sh up N [--slurm]   make hosts h1..hN (N <= 8)
#   tests/cluster/cluster.sh down             stop and remove all of it
#   tests/cluster/cluster.sh shape RATE|none  shape every host's link (tc tbf):
#                                             RATE in each direction, e.g. 100mbit, 1gbit
#   tests/cluster/cluster.sh status
#   tests/cluster/rsh HOST COMMAND...         run a command on a host (ssh's semantics)
#   . /run/dtcluster/env                      DTC_HOSTS, DTC_MPIRUN_FLAGS, SLURM_CONF, ...
#
# Without a cpuset cgroup to use (or with DTC_CPUSET=none), hosts are pinned
# with taskset only and $DTC_MPIRUN_FLAGS adds --bind-to none, since Open MPI
# would bind every host's first rank to core 0.
#
# Root only (namespaces, a bridge, daemons). Everything it makes is named in
# the state directory ($DTC_STATE, default /run/dtcluster), and `down` removes
# exactly that: the daemons it started (by pid file), the namespaces, the
# veths and the bridge. Traffic goes only to the addresses it gave its hosts
# ($DTC_SUBNET.1 outside, .11 and up for h1...; default subnet 10.77.13).
#
# Facts this rests on (found by trying, Debian 12, Open MPI 4.1.4, Slurm 22.05):
# - hosts sharing a core make Open MPI bind every host's first rank to core 0
#   (a 1 KiB ping-pong took 8 ms instead of about 15 us): each host gets its
#   own core, round-robin over the cores this script may use;
# - `ip netns exec` remounts /sys, which slurmd then cannot read: hosts are
#   entered with nsenter into persistent UTS and mount namespaces instead;
# - Slurm's PMIx plugin makes its per-step directories under TmpFS (/tmp) and
#   fails when two hosts share it ("File exists"): hence a private /tmp, with
#   the checkout bind-mounted back in when it lives under /tmp (a shared file
#   system, as on a real cluster);
# - shaping is tc's token bucket (tbf) on both ends of each host's veth: the
#   host's egress (eth0 inside) and its ingress (the bridge port outside), so
#   each host has a full-duplex NIC of RATE, as a node on a switch has. This
#   kernel has no sch_netem (nor cake, fq, fq_codel): latency cannot be added,
#   the links keep their own (measured in doc/scaling.md);
# - Slurm 22.05 without systemd needs cgroup.conf's CgroupPlugin=cgroup/v1,
#   proctrack/linuxproc and task/none; Debian's Open MPI has no PMI-2, so
#   srun uses --mpi=pmix.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
S=${DTC_STATE:-/run/dtcluster}
NET=${DTC_SUBNET:-10.77.13}
NET=${NET%.0/24} # the env file's form (10.77.13.0/24) too, so a shell that sourced it can run this again
BR=dtcbr0
SLURM_PORTS=${DTC_SLURM_PORTS:-26817-26818} # slurmctld-slurmd; off Slurm's defaults so a site's daemons are not touched
me=cluster.sh
say() { echo "$me: $*"; }
die() { echo "$me: error: $*" >&2; exit 1; }

need_root() {
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, a bridge, daemons); run the cluster tests as root"
  if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
    die "needs ip (iproute2), nsenter and unshare (util-linux)"
  fi
}

# Where this script can make cpuset cgroups (v1, or v2 with the cpuset
# controller enabled for children), or nothing.
cpuset_root() {
  local v2
  if [[ ${DTC_CPUSET:-} == none ]]; then
    return 0
  elif [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus && -w /sys/fs/cgroup/cpuset ]]; then
    echo /sys/fs/cgroup/cpuset
  elif v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts) && [[ -n $v2 ]] &&
       grep -qw cpuset "$v2/cgroup.subtree_control" 2>/dev/null; then
    echo "$v2"
  fi
}

# The cores this process may run on, one per line.
cores() {
  taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done
}

host_up() { # host_up I CORE
  local i=$1 core=$2 h=h$1 ns=dtc-h$1 addr=$NET.$((10 + $1))
  ip netns add "$ns"
  ip link add "dtc-h$i" type veth peer name eth0 netns "$ns"
  ip link set "dtc-h$i" master "$BR" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  mkdir -p "$S/hosts/$h/tmp"
  chmod 1777 "$S/hosts/$h/tmp"
  echo "$core" >"$S/hosts/$h/core"
  # A cpuset cgroup, not only an affinity mask: hwloc (so Open MPI's binding)
  # takes the allowed cores from the cgroup and ignores taskset's mask.
  if [[ -n $CG ]]; then
    mkdir "$CG/dtc-$h"
    cat "$CG/cpuset.mems" >"$CG/dtc-$h/cpuset.mems"
    echo "$core" >"$CG/dtc-$h/cpuset.cpus"
    echo "$CG/dtc-$h" >"$S/hosts/$h/cgroup"
  fi
  echo "$addr" >"$S/hosts/$h/addr"
  : >"$S/ns/$h.uts"
  : >"$S/ns/$h.mnt"
  # The checkout, and any path named in DTC_SHARE, under /tmp: bound into the
  # host's private /tmp at the same path (a shared file system).
  local share=() p
  for p in "$top" ${DTC_SHARE:-}; do
    [[ $p == /tmp/* ]] && share+=("${p#/tmp/}")
  done
  # shellcheck disable=SC2016  # expanded by the inner bash
  nsenter --net="/run/netns/$ns" unshare --uts="$S/ns/$h.uts" --mount="$S/ns/$h.mnt" --propagation private \
    bash -euc '
      hostname "$1"; t=$2; shift 2
      for p in "$@"; do mkdir -p "$t/$p"; mount --bind "/tmp/$p" "$t/$p"; done
      mount --rbind "$t" /tmp' _ "$h" "$S/hosts/$h/tmp" "${share[@]}"
}

slurm_conf() { # slurm_conf N
  local n=$1 ctl=${SLURM_PORTS%-*} d=${SLURM_PORTS#*-} i
  mkdir -p "$S/slurm/etc" "$S/slurm/state" "$S/slurm/log" "$S/slurm/spool"
  {
    echo "# Written by tests/cluster/cluster.sh for its hosts; removed by 'cluster.sh down'."
    echo "ClusterName=dtc"
    echo "SlurmctldHost=$(hostname)($NET.1)"
    echo "SlurmctldPort=$ctl"
    echo "SlurmdPort=$d"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    # cred_expire is also how long a requeued job waits before it may start
    # again (120 s by default), and a pending job waits for the main
    # scheduling loop (every 60 s by default): both short, for the tests'
    # requeue cycles.
    echo "AuthInfo=socket=$S/munge/munge.socket,cred_expire=5"
    echo "SchedulerParameters=sched_interval=2"
    echo "StateSaveLocation=$S/slurm/state"
    echo "SlurmctldPidFile=$S/slurm/slurmctld.pid"
    echo "SlurmctldLogFile=$S/slurm/log/slurmctld.log"
    echo "SlurmdPidFile=$S/slurm/slurmd-%n.pid"
    echo "SlurmdLogFile=$S/slurm/log/slurmd-%n.log"
    echo "SlurmdSpoolDir=$S/slurm/spool/%n"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SchedulerType=sched/builtin"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=pmix"
    echo "TmpFS=/tmp"
    echo "ReturnToService=2"
    echo "SlurmctldTimeout=30"
    # A node silent this long is marked DOWN, and a --no-kill job loses it
    # for good. The elastic check brings a killed h2's slurmd back after the
    # survivors' first step, 15-26 s after the death (25 s in CI), so 30
    # was too short (a CI run lost h2 that way). Slurm's own default is 300.
    echo "SlurmdTimeout=120"
    echo "KillWait=5"
    echo "MinJobAge=3600"
    echo "InactiveLimit=0"
    # Each host has one core but may run two ranks (oversubscribed, as the
    # tests at 2 ranks per host want): CPUs=2, whatever slurmd counts.
    echo "SlurmdParameters=config_overrides"
    for ((i = 1; i <= n; i++)); do
      echo "NodeName=h$i NodeAddr=$NET.$((10 + i)) CPUs=2 State=UNKNOWN"
    done
    echo "PartitionName=dtc Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$S/slurm/etc/slurm.conf"
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' >"$S/slurm/etc/cgroup.conf"
}

slurm_up() { # slurm_up N
  local n=$1 i h
  for c in munged slurmctld slurmd sbatch srun; do
    command -v "$c" >/dev/null || die "--slurm needs $c (Debian: munge slurmctld slurmd slurm-client)"
  done
  mkdir -p "$S/munge"
  chmod 700 "$S/munge"
  dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$S/munge/munge.key"
  munged --socket="$S/munge/munge.socket" --key-file="$S/munge/munge.key" --pid-file="$S/munge/munged.pid" \
    --log-file="$S/munge/munged.log" --seed-file="$S/munge/munged.seed" --force
  slurm_conf "$n"
  export SLURM_CONF=$S/slurm/etc/slurm.conf
  slurmctld -f "$SLURM_CONF" -i # -i: no state from an earlier cluster
  for ((i = 1; i <= n; i++)); do
    h=h$i
    mkdir -p "$S/slurm/spool/$h"
    DTC_STATE=$S "$here/rsh" "$h" "slurmd -f '$SLURM_CONF' -N $h"
  done
  # Wait until every node is idle (slurmd registered) or give up.
  local t
  for ((t = 0; t < 300; t++)); do
    if [[ $(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle$') == "$n" ]]; then
      say "Slurm up: slurmctld on $(hostname) ($NET.1:${SLURM_PORTS%-*}), slurmd on h1-h$n"
      return 0
    fi
    sleep 0.2
  done
  sinfo -N >&2 || true
  tail -5 "$S/slurm/log/"*.log >&2 || true
  die "Slurm: the nodes did not register within 60 s (logs in $S/slurm/log)"
}

up() {
  local n=${1:-}
  [[ $n =~ ^[1-8]$ ]] || die "up: expected a host count 1-8, found '${n}'"
  shift
  local slurm=no
  for a in "$@"; do
    case $a in --slurm) slurm=yes ;; *) die "up: unknown option '$a' (expected --slurm)" ;; esac
  done
  need_root
  [[ -e $S/env ]] && die "a cluster is already up ($S/env); run '$0 down' first"
  ip link show "$BR" >/dev/null 2>&1 && die "bridge $BR exists but no state in $S: remove it ('ip link del $BR')"
  mkdir -p "$S/ns" "$S/hosts"
  # Persistent namespaces are bind mounts of nsfs files; they may not sit on a shared mount.
  mount --bind "$S/ns" "$S/ns"
  mount --make-private "$S/ns"
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  mapfile -t cs < <(cores)
  CG=$(cpuset_root)
  [[ -n $CG ]] || say "no cpuset cgroup to use: hosts are pinned with taskset only, and mpirun must not bind (--bind-to none)"
  local i
  for ((i = 1; i <= n; i++)); do host_up "$i" "${cs[$(((i - 1) % ${#cs[@]}))]}"; done
  local hosts='' bind=''
  [[ -n $CG ]] || bind=' --bind-to none'
  for ((i = 1; i <= n; i++)); do hosts+="h$i "; done
  hosts=${hosts% }
  {
    echo "# tests/cluster/cluster.sh: $n hosts up; source this file."
    echo "DTC_STATE='$S'"
    echo "DTC_HOSTS='$hosts'"
    echo "DTC_SUBNET='$NET.0/24'"
    # mpirun outside the hosts: start orted through the rsh agent, and keep
    # both MPI's traffic and its out-of-band wire-up on the bridge.
    echo "DTC_MPIRUN_FLAGS='--mca plm_rsh_agent $here/rsh --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24$bind'"
    echo "export DTC_STATE DTC_HOSTS DTC_SUBNET DTC_MPIRUN_FLAGS"
    [[ $slurm == no ]] || echo "SLURM_CONF='$S/slurm/etc/slurm.conf'; export SLURM_CONF"
  } >"$S/env.part"
  mv "$S/env.part" "$S/env"
  for ((i = 1; i <= n; i++)); do
    say "h$i: $(cat "$S/hosts/h$i/addr") core $(cat "$S/hosts/h$i/core")"
  done
  [[ $slurm == yes ]] && slurm_up "$n"
  return 0
}

stop_pidfile() { # stop_pidfile FILE: TERM, then KILL after 5 s
  local f=$1 pid t
  [[ -f $f ]] || return 0
  pid=$(cat "$f" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  kill "$pid" 2>/dev/null || return 0
  for ((t = 0; t < 50; t++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

down() {
  need_root
  local h f ns
  # Slurm: the slurmds, then slurmctld, then munged (by their pid files).
  for f in "$S"/slurm/slurmd-*.pid; do [[ -e $f ]] && stop_pidfile "$f"; done
  stop_pidfile "$S/slurm/slurmctld.pid"
  stop_pidfile "$S/munge/munged.pid"
  # Anything still running on a host (a job step, an orted) goes with it.
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^dtc-h[0-9]+$/ { print $1 }'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086  # a list of pids
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null || true
  done
  for f in /sys/class/net/dtc-h*; do [[ -e $f ]] && ip link del "$(basename "$f")" 2>/dev/null; done
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  for f in "$S"/hosts/*/cgroup; do [[ -e $f ]] && rmdir "$(cat "$f")" 2>/dev/null; done
  if [[ -d $S/ns ]]; then
    for f in "$S"/ns/*; do [[ -e $f ]] && umount "$f" 2>/dev/null; done
    umount "$S/ns" 2>/dev/null || true
  fi
  # The hosts' /tmp held bind mounts only inside their (now gone) mount namespaces.
  rm -rf "$S"
  say "down: hosts, links, bridge and daemons removed"
}

# The tbf burst: 2 ms at the rate, and at least 64 KiB (veth hands over
# segments up to 64 KiB; a smaller bucket drops or splits them).
tbf_args() { # tbf_args RATE
  local bits
  bits=$(rate_bits "$1") || return 1
  local burst=$((bits / 8 / 500))
  ((burst >= 65536)) || burst=65536
  echo "rate $1 burst $burst latency 50ms"
}

rate_bits() { # rate_bits 100mbit -> 100000000
  local r=${1,,} n unit
  [[ $r =~ ^([0-9]+)(kbit|mbit|gbit)$ ]] || return 1
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;; esac
}

shape() {
  local rate=${1:-} d i q
  need_root
  [[ -e $S/env ]] || die "shape: no cluster up ($S/env); run '$0 up N' first"
  [[ $rate == none ]] || q=$(tbf_args "$rate") ||
    die "shape: expected a rate like 100mbit or 1gbit (kbit, mbit, gbit; at least 1mbit), or none; found '${rate}'"
  if [[ $rate != none ]] && (($(rate_bits "$rate") < 1000000)); then
    die "shape: expected a rate of at least 1mbit, found '$rate'"
  fi
  for d in "$S"/hosts/h*; do
    i=${d##*/h}
    tc qdisc del dev "dtc-h$i" root 2>/dev/null || true
    ip netns exec "dtc-h$i" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == none ]] && continue
    # shellcheck disable=SC2086  # q is a list of tc words
    tc qdisc add dev "dtc-h$i" root tbf $q
    # shellcheck disable=SC2086
    ip netns exec "dtc-h$i" tc qdisc add dev eth0 root tbf $q
  done
  if [[ $rate == none ]]; then
    rm -f "$S/link"
    say "links unshaped"
  else
    echo "rate=$rate" >"$S/link.part"
    mv "$S/link.part" "$S/link"
    say "every host's link shaped to $rate each way (tbf $q)"
  fi
}

status() {
  if [[ ! -f $S/env ]]; then echo "no cluster up (no $S/env)"; return 1; fi
  cat "$S/env"
  [[ -f $S/link ]] && echo "link: $(cat "$S/link")"
  for d in "$S"/hosts/*; do
    h=$(basename "$d")
    echo "$h: $(cat "$d/addr") core $(cat "$d/core")"
  done
  [[ -f $S/slurm/etc/slurm.conf ]] && SLURM_CONF=$S/slurm/etc/slurm.conf sinfo -N
  return 0
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  shape) shape "$@" ;;
  *) echo "usage: $0 up N [--slurm] | shape RATE|none | down | status" >&2; exit 2 ;;
esac
