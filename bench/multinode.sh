#!/usr/bin/env bash
# multinode.sh: dtrain across real hosts against one host, in one invocation,
# on tests/cluster/cluster.sh's hosts (network namespaces joined by TCP, each
# with its own core; root only):
#
#   1. the raw TCP bandwidth h1 -> h2 (bench/tcp_bandwidth.py: one stream,
#      the floor under MPI's);
#   2. the all-reduce across 2 hosts x 1 rank: dtrain-bench-allreduce, mpi,
#      ring, hier and auto interleaved in --rounds, out of place and in the
#      trainer's window buffer, busbw and vs_mpi (medians of the rounds);
#   3. the reference CNN on Fashion-MNIST at 2 hosts x 1 rank against 1 host
#      x 2 ranks (the same two cores), the two alternating --repeats times:
#      samples/s, the median of each run's epochs after the first, then the
#      median over repeats.
#
#   bench/multinode.sh [--build DIR] [--data FILE] [--epochs E] [--repeats R] [--rounds N]
#
# Defaults: build/, data/fashion-mnist.h5 (made with dtrain-prep if missing),
# 4 epochs, 3 repeats, 7 rounds. About 3 minutes on 2 cores. The hosts here
# share one machine's memory bus and kernel: their TCP is a veth pair, not a
# wire (about 3 GB/s here), so the figures say what crossing hosts costs
# dtrain itself, not what a cluster's network does.
set -euo pipefail
prog=multinode.sh
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
build=$repo/build data='' epochs=4 repeats=3 rounds=7
while (($#)); do
    case $1 in
        --build) build=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --epochs) whole --epochs "$2" 2; epochs=$2; shift 2 ;;
        --repeats) positive --repeats "$2"; repeats=$2; shift 2 ;;
        --rounds) positive --rounds "$2"; rounds=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ $(id -u) == 0 ]] || die "needs root (it makes hosts in network namespaces)"
dtrain=$build/dtrain bench=$build/dtrain-bench-allreduce
[[ -x $dtrain && -x $bench ]] || die "no dtrain and dtrain-bench-allreduce in $build (--build DIR)"
bench_default_data "$dtrain"
ncpu=$(nproc --all)
bench_about "$dtrain" "$ncpu"
cluster=$repo/tests/cluster/cluster.sh
export DTC_STATE=${DTC_STATE:-/run/dtcluster}
[[ -e $DTC_STATE/env ]] && die "a cluster is up already ($DTC_STATE); take it down first (tests/cluster/cluster.sh down)"
DTC_SHARE="$build $(dirname "$data")"
export DTC_SHARE
trap 'bash "$cluster" down >/dev/null 2>&1' EXIT
bash "$cluster" up 2 >/dev/null
# shellcheck disable=SC1091
. "$DTC_STATE/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log=$(mktemp)

echo "# multinode: 2 hosts (network namespaces, TCP over veth, one core each) against 1 host"
echo "# $dtrain_version, commit $git_rev; $cpu_model, $ncpu cores; other work before the start: $busy_cores cores"
echo "# $(date -u +%FT%TZ); $(mpirun --version | head -1)"

# 1. Raw TCP.
"$repo/tests/cluster/rsh" h2 "python3 '$here/tcp_bandwidth.py' serve $(cat "$DTC_STATE/hosts/h2/addr") 29999" &
srv=$!
sleep 1
tcp=$("$repo/tests/cluster/rsh" h1 "python3 '$here/tcp_bandwidth.py' send $(cat "$DTC_STATE/hosts/h2/addr") 29999 256 5")
wait $srv || true
echo "#"
echo "# 1. raw TCP h1 -> h2: $tcp GB/s (one stream, 256 MiB, median of 5)"

# 2. The all-reduce.
echo "#"
echo "# 2. all-reduce, 2 hosts x 1 rank (dtrain-bench-allreduce --rounds $rounds; busbw = algbw at 2 ranks)"
# shellcheck disable=SC2086
mpirun $DTC_MPIRUN_FLAGS --host h1:1,h2:1 -np 2 "$bench" -b 64K -e 16M -f 4 --outofplace --window -r "$rounds" >"$log"
grep -E '^# auto across|^ +[0-9]+ ' "$log" | sed 's/^/  /'
grep -E '^# Avg bus|^# Wrong' "$log" | sed 's/^/  /'
awk -v tcp="$tcp" '/^ +[0-9]+ +[0-9]+  mpi / { if ($10 > best) best = $10 }
    END { printf "  mpi'"'"'s best busbw %.3f GB/s = %.2fx raw TCP\n", best, (tcp > 0 ? best / tcp : 0) }' "$log"

# 3. The CNN.
echo "#"
echo "# 3. CNN, Fashion-MNIST, batch 64 per rank, $epochs epochs, samples/s = median of epochs 2..$epochs; $repeats repeats alternating"
rate() { # median (bench/lib.sh) of the epochs after the first; 0 for none
    local m
    m=$(grep '^Epoch ' "$1" | tail -n +2 | sed 's/.* - \([0-9]*\) samples\/s.*/\1/' | median)
    echo "${m:-0}"
}
one=() two=()
for ((r = 1; r <= repeats; r++)); do
    mpirun --bind-to core -np 2 "$dtrain" "$data" --epochs "$epochs" --no-validation >"$log" 2>&1 ||
        { tail "$log" >&2; die "the 1-host run failed"; }
    one+=("$(rate "$log")")
    # shellcheck disable=SC2086
    mpirun $DTC_MPIRUN_FLAGS --host h1:1,h2:1 -np 2 "$dtrain" "$data" --epochs "$epochs" --no-validation >"$log" 2>&1 ||
        { tail "$log" >&2; die "the 2-host run failed"; }
    two+=("$(rate "$log")")
    printf '  repeat %d: 1 host x 2 ranks %s samples/s, 2 hosts x 1 rank %s samples/s (%s)\n' "$r" "${one[-1]}" "${two[-1]}" \
        "$(grep -o 'all-reduce [^,]*' "$log" | head -1)"
done
m1=$(median <<<"${one[*]}") m2=$(median <<<"${two[*]}")
printf '  median: 1 host x 2 ranks %s, 2 hosts x 1 rank %s samples/s: %.3fx\n' "$m1" "$m2" \
    "$(awk -v a="$m2" -v b="$m1" 'BEGIN { print (b > 0 ? a / b : 0) }')"
rm -f "$log"
