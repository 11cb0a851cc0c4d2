#!/usr/bin/env bash
# shaped-study.sh: the shaped-link study of doc/scaling.md in one command.
#
# Two hosts of tests/cluster/cluster.sh (network namespaces joined by TCP,
# one core each; root only), their links shaped with tc to 100 Mbit/s,
# 300 Mbit/s and 1 Gbit/s. At each rate:
#   fit      dtrain-bench-allreduce's ring at 4 KiB-4 MiB, and the link's
#            alpha and beta fitted to it (dtrain-predict --fit)
#   compress resnet32-wide4 (batch 16 per replica) on 1 and 2 hosts,
#            --grad-compression none, bf16, fp16, powersgd:4, --overlap on and
#            off (jobscripts/scaling-study --cluster)
# and at 1 Gbit/s, where communication is shorter than backward:
#   grid     resnet32-wide4, --allreduce mpi and ring x --bucket-mb 0.25, 1,
#            4, 16 x overlap on and off
#   overlap  resnet32-wide4 on 2 hosts, every compression, overlap on and
#            off, 3 repeats more: how much of the exchange overlap hides
#   autotune --autotune on the same model and link (fresh cache), then the
#            kept choice against the grid's best, alternating --repeats times
# and at 100 Mbit/s:
#   algos    the CNN and ResNet-20, --allreduce mpi, ring, hier, auto
#   hosts    (last, on 4 hosts: two share each core) resnet32-wide4 on 1-4
#            hosts, --grad-compression none, bf16, powersgd:4
# Every summary is then compared with dtrain-predict --compare (and plotted
# by bench/shaped-plots.sh), given the
# fitted link and the hosts' network-stack cost per byte (--cpu-ns-per-byte,
# default 3.8: calibrated on one run, see doc/scaling.md). Finally (one host, 2 ranks, no shaping needed):
#   accuracy the CNN on Fashion-MNIST for 10 epochs with none, bf16 and
#            powersgd:4: final validation accuracy
#
#   bench/shaped-study.sh [--build DIR] [--out DIR] [--repeats R] [--parts LIST] [--cpu-ns-per-byte K]
#
# Defaults: build/, bench/results/shaped-DATE, 2 repeats, every part
# (fit,compress,grid,overlap,autotune,algos,hosts,predict,accuracy). About 50 minutes on 2
# cores. The hosts share one machine: a link here is tbf on a veth pair, and
# the CPU time a host spends on TCP comes out of its one core.
set -euo pipefail
prog=shaped-study.sh
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$repo/build out='' repeats=2 parts=fit,compress,grid,overlap,autotune,algos,hosts,predict,accuracy cpu_ns=3.8
die() { echo "$prog: error: $*" >&2; exit 2; }
while (($#)); do
    case $1 in
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --repeats) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--repeats: expected a positive integer, found '$2'"; repeats=$2; shift 2 ;;
        --parts) parts=$2; shift 2 ;;
        --cpu-ns-per-byte) cpu_ns=$2; shift 2 ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ $(id -u) == 0 ]] || die "needs root (it makes hosts in network namespaces)"
dtrain=$build/dtrain bench=$build/dtrain-bench-allreduce predict=$build/dtrain-predict
[[ -x $dtrain && -x $bench && -x $predict ]] || die "no dtrain, dtrain-bench-allreduce, dtrain-predict in $build (--build DIR)"
out=${out:-$repo/bench/results/shaped-$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
has() { [[ ,$parts, == *,$1,* ]]; }
cluster=$repo/tests/cluster/cluster.sh
export DTC_STATE=${DTC_STATE:-/run/dtcluster}
[[ -e $DTC_STATE/env ]] && die "a cluster is up already ($DTC_STATE); take it down first (tests/cluster/cluster.sh down)"
export DTC_SHARE="$build $out"
trap 'bash "$cluster" down >/dev/null 2>&1' EXIT
bash "$cluster" up 2 >/dev/null
flags=$(sed -n "s/^DTC_MPIRUN_FLAGS='\(.*\)'$/\1/p" "$DTC_STATE/env")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
study=("$repo/jobscripts/scaling-study" --cluster --dtrain "$dtrain" --scaling weak --no-plots)
wide=(--models resnet32-wide4 --batch 16 --epochs 3 --steps 4)
echo "# shaped-study: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo ?), results in $out"

for rate in 100mbit 300mbit 1gbit; do
    bash "$cluster" shape "$rate" >/dev/null
    if has fit; then
        # shellcheck disable=SC2086  # flags is a list of words
        mpirun $flags --host h1:1,h2:1 -n 2 "$bench" -b 4K -e 4M -f 4 -a ring,mpi --outofplace -r 3 \
            --csv "$out/bench-$rate.csv" >"$out/bench-$rate.txt" 2>&1
        "$predict" --fit "$out/bench-$rate.csv" --fit-out "$out/link-$rate.conf" --ranks-per-node 1 | tee "$out/fit-$rate.txt"
        sed -i "s/^cpu_ns_per_byte = .*/cpu_ns_per_byte = $cpu_ns/" "$out/link-$rate.conf"
    fi
    if has compress; then
        r=$repeats
        [[ $rate == 100mbit ]] || r=1
        "${study[@]}" "${wide[@]}" --nodes 1,2 --allreduce ring --grad-compression none,bf16,fp16,powersgd:4 \
            --overlap on,off --repeats "$r" --out "$out/compress-$rate" >"$out/compress-$rate.log" 2>&1 ||
            echo "$prog: compress at $rate: a run failed (see $out/compress-$rate.log)"
        echo "compress $rate: $out/compress-$rate/summary.csv"
    fi
    if [[ $rate == 1gbit ]] && has grid; then
        "${study[@]}" "${wide[@]}" --nodes 1,2 --allreduce mpi,ring --bucket-mb 0.25,1,4,16 --overlap on,off \
            --repeats 1 --out "$out/grid" >"$out/grid.log" 2>&1 || echo "$prog: grid: a run failed (see $out/grid.log)"
        echo "grid: $out/grid/summary.csv"
    fi
    if [[ $rate == 1gbit ]] && has overlap; then
        "${study[@]}" "${wide[@]}" --nodes 2 --allreduce ring --grad-compression none,bf16,fp16,powersgd:4 \
            --overlap on,off --repeats 3 --out "$out/overlap" >"$out/overlap.log" 2>&1 ||
            echo "$prog: overlap: a run failed (see $out/overlap.log)"
        echo "overlap: $out/overlap/summary.csv"
    fi
    if [[ $rate == 1gbit ]] && has autotune; then
        "$here/autotune-check.sh" --build "$build" --out "$out/autotune" --grid "$out/grid/summary.csv" \
            --repeats "$repeats" --flags "$flags" | tee "$out/autotune.txt"
    fi
    if [[ $rate == 100mbit ]] && has algos; then
        "${study[@]}" --models cnn,resnet20 --batch 32 --epochs 3 --steps 10 --nodes 1,2 \
            --allreduce mpi,ring,hier,auto --repeats "$repeats" --out "$out/algos" >"$out/algos.log" 2>&1 ||
            echo "$prog: algos: a run failed (see $out/algos.log)"
        echo "algos: $out/algos/summary.csv"
    fi
done
bash "$cluster" down >/dev/null

if has hosts; then
    bash "$cluster" up 4 >/dev/null
    bash "$cluster" shape 100mbit >/dev/null
    "${study[@]}" "${wide[@]}" --nodes 1,2,3,4 --allreduce ring --grad-compression none,bf16,powersgd:4 \
        --repeats 1 --out "$out/hosts4" >"$out/hosts4.log" 2>&1 || echo "$prog: hosts: a run failed (see $out/hosts4.log)"
    echo "hosts: $out/hosts4/summary.csv"
    bash "$cluster" down >/dev/null
fi

if has predict; then
    for f in "$out"/compress-*/summary.csv "$out"/grid/summary.csv "$out"/algos/summary.csv "$out"/hosts4/summary.csv; do
        [[ -f $f ]] || continue
        d=$(basename "$(dirname "$f")")
        rate=${d#compress-}
        [[ $d == grid ]] && rate=1gbit
        [[ $d == algos || $d == hosts4 ]] && rate=100mbit
        [[ -f $out/link-$rate.conf ]] || continue
        # shellcheck disable=SC2013  # model names have no spaces
        for m in $(awk -F, 'NR > 1 { print $1 }' "$f" | sort -u); do
            mpath=$m
            [[ -f $repo/$m ]] && mpath=$repo/$m
            "$predict" --model "$mpath" --cluster "$out/link-$rate.conf" --compare "$f" \
                >"$out/predict-$d-$(basename "$m" .cfg).txt" 2>&1 || true
            echo "predict $d $(basename "$m" .cfg): $(grep '^mean |error|' "$out/predict-$d-$(basename "$m" .cfg).txt")"
        done
    done
fi

if has accuracy; then
    data=$repo/data/fashion-mnist.h5
    [[ -f $data ]] || die "no $data (make it: jobscripts/local/setup.sh, or dtrain-prep)"
    for c in none bf16 powersgd:4; do
        # --allreduce ring: on one node hier sums in shared memory and never compresses
        mpirun --bind-to core -n 2 "$dtrain" "$data" --epochs 10 --allreduce ring --grad-compression "$c" --seed 1 --metrics \
            "$out/accuracy-${c/:/}.csv" >"$out/accuracy-${c/:/}.log" 2>&1
        echo "accuracy $c: $(grep -o 'val_accuracy: [0-9.]*' "$out/accuracy-${c/:/}.log" | tail -1)"
    done
fi
has predict && "$here/shaped-plots.sh" "$out"
echo "# shaped-study: done $(date -u '+%H:%M UTC')"
