#!/usr/bin/env bash
# strategies.sh: every distribution strategy on the CNN and Fashion-MNIST, in
# one invocation: training samples/s (median over the epochs after the
# first), validation accuracy after the last epoch, and memory per rank.
#
#   bench/strategies.sh [--build DIR] [--data FILE] [--epochs E] [--out FILE]
#
# Synchronous strategies run at -np 2 (multi-worker as 2 emulated nodes of 1
# rank); the parameter server at -np 3 (one server, two workers), in each mode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=$top/build data=$top/data/fashion-mnist.h5 epochs=5 out=""
while (($#)); do
    case $1 in
        --build) build=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "strategies.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
dtrain=$build/dtrain
[[ -x $dtrain ]] || { echo "strategies.sh: no dtrain in $build (--build DIR)" >&2; exit 2; }
[[ -f $data ]] || { echo "strategies.sh: no dataset $data (make one with dtrain-prep, or --data FILE)" >&2; exit 2; }
mpirun=(mpiexec.openmpi --bind-to none)
[[ $(id -u) == 0 ]] && mpirun+=(--allow-run-as-root)
mpirun+=(--oversubscribe)
export OMP_NUM_THREADS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT

printf '# strategies: CNN on %s, %d epochs, batch 64 per replica, Adam 1e-3\n' "$data" "$epochs"
printf '# date: %s; host: %s, %s CPUs; %s\n' "$(date -u +%FT%TZ)" "$(hostname)" "$(nproc)" "$("$dtrain" --version)"
printf '# samples/s: median of epochs 2..%d (all replicas); memory: min-max over ranks\n' "$epochs"
printf '%-34s %4s %10s %8s %22s %22s %14s\n' strategy np samples/s val_acc "peak RSS MiB" "PSS MiB" "optim MiB"
[[ -z $out ]] || echo "strategy,np,samples_per_s,val_accuracy,rss_min,rss_max,pss_min,pss_max,optim_min,optim_max" >"$out"
status=0
run() { # LABEL NP ARGS...
    local label=$1 np=$2; shift 2
    if ! "${mpirun[@]}" -np "$np" "$dtrain" "$data" --epochs "$epochs" "$@" >"$log" 2>&1; then
        echo "strategies.sh: $label failed:" >&2; tail -5 "$log" >&2; status=1; return
    fi
    local sps acc mem
    sps=$(grep '^Epoch ' "$log" | tail -n +2 | sed 's/.* - \([0-9]*\) samples\/s.*/\1/' | sort -n |
          awk '{v[NR] = $1} END {print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "-"}')
    acc=$(grep '^Epoch ' "$log" | tail -1 | sed 's/.*val_accuracy: \([0-9.]*\).*/\1/')
    mem=$(sed -n 's/^memory per rank: peak RSS \([0-9.]*\)-\([0-9.]*\) MiB, PSS \([0-9.]*\)-\([0-9.]*\) MiB, optimizer state \([0-9.]*\)-\([0-9.]*\) MiB.*/\1 \2 \3 \4 \5 \6/p' "$log")
    read -r r0 r1 p0 p1 o0 o1 <<<"$mem"
    printf '%-34s %4s %10s %8s %22s %22s %14s\n' "$label" "$np" "$sps" "$acc" "$r0-$r1" "$p0-$p1" "$o0-$o1"
    [[ -z $out ]] || echo "$label,$np,$sps,$acc,$r0,$r1,$p0,$p1,$o0,$o1" >>"$out"
}
run mirrored 2 --strategy mirrored
run "multi-worker (2 nodes x 1)" 2 --strategy multi-worker --ranks-per-node 1
run central-storage 2 --strategy central-storage
run sharded 2 --strategy sharded
run fsdp 2 --strategy fsdp
run "parameter-server async" 3 --strategy parameter-server --ps-mode async
run "parameter-server ssp (S=2)" 3 --strategy parameter-server --ps-mode ssp --staleness 2
run "parameter-server sync" 3 --strategy parameter-server --ps-mode sync
exit $status
