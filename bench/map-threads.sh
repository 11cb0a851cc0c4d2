#!/usr/bin/env bash
# map-threads.sh: dtrain with --map-threads 1 (one thread reads and augments
# each batch, as before the option existed) against --map-threads N, side by
# side in one invocation: the share of step time spent waiting for data, and
# training samples/s, on two workloads:
#
#   resnet20  ResNet-20 (inputs/resnet20.cfg) with --augment flip,crop on a
#             generated 32x32x3 file that the page cache holds: augmentation
#             is the map stage's work;
#   cold      the MLP with --augment flip,crop on a generated file several
#             times larger than the page cache the run may use: every epoch
#             reads from the disk, and the map threads keep N reads in flight;
#   io        the same file and augmentation with a model that costs almost
#             nothing (4x4 average pooling, then one dense layer): the run is
#             bound by its reads, which shows what the map stage can give.
#
# The design decision a reader must know: "larger than the page cache" is
# made, not hoped for. Each cold run is started inside a memory cgroup (v1 or
# v2, needs root) whose limit (--page-cache MIB) caps the page cache it can
# fill, and the file is dropped from the cache before every run (dd
# iflag=nocache), so neither setting profits from the other's reads. Runs
# come in pairs, one of each setting back to back (which goes first
# alternates); the figures are medians over the pairs, the ratio the median
# of each pair's own ratio. Each run is a fresh process of E epochs; the last
# is quoted. One rank, one compute thread, not bound (--bind-to none), so the
# map threads have the node's other cores.
#
# Usage: bench/map-threads.sh [--build DIR] [--threads N] [--pairs P]
#            [--epochs E] [--steps S] [--cold SPEC] [--page-cache MIB]
#            [--only W[,W]] [--dir DIR] [--out CSV]
set -euo pipefail

prog=map-threads.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains with --map-threads 1 and --map-threads N, P pairs of E-epoch runs on
each workload, and reports the median data-wait share of step time and
samples/s of the last epoch for each setting, and the ratio N / 1.

Workloads:
  resnet20  inputs/resnet20.cfg, --augment flip,crop, a generated 32x32x3 file
            (20000 samples, 59 MiB) held by the page cache
  cold      the MLP, --augment flip,crop, a generated file of --cold SPEC read
            from disk: the run's page cache is capped at --page-cache MiB by a
            memory cgroup (root only), and the file is dropped from the cache
            before each run
  io        as cold, with a model that costs almost nothing ([avgpool] 4x4,
            [dense] classes): bound by its reads

Options:
  --build DIR        directory holding dtrain and dtrain-prep (default: $repo/build)
  --threads N        the map threads compared with 1 (default: 2)
  --pairs P          pairs of runs per workload (default: 3)
  --epochs E         epochs per run; the last is quoted (default: 2)
  --steps S          --steps-per-epoch of every run (default: 40 for resnet20,
                     150 for cold)
  --cold SPEC        HxWxC:CLASSES:N of the cold file (default: 64x64x3:10:350000,
                     4.0 GiB)
  --page-cache MIB   the cold runs' memory cgroup limit (default: 512)
  --only W[,W]       run only these workloads (resnet20, cold, io)
  --dir DIR          where the generated files are made and kept (default: a
                     scratch directory under \$TMPDIR, removed at the end)
  --out CSV          raw numbers, one row per quoted epoch (default: none); every
                     run's output goes to the same name ending .log
  -h, --help         show this help
EOF
    bench_usage_env
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

build=$repo/build nthreads=2 pairs=3 epochs=2 steps="" cold=64x64x3:10:350000 cache_mib=512 only="" dir="" out=""
while (($#)); do
    case $1 in
        --build | --threads | --pairs | --epochs | --steps | --cold | --page-cache | --only | --dir | --out)
            (($# > 1)) || die "$1 needs a value"
            case $1 in
                --build) build=$2 ;; --threads) nthreads=$2 ;; --pairs) pairs=$2 ;; --epochs) epochs=$2 ;;
                --steps) steps=$2 ;; --cold) cold=$2 ;; --page-cache) cache_mib=$2 ;; --only) only=$2 ;;
                --dir) dir=$2 ;; --out) out=$2 ;;
            esac
            shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --threads "$nthreads"
((nthreads >= 2 && nthreads <= 64)) || die "--threads: expected 2 to 64 map threads to compare with 1, found '$nthreads'"
positive --pairs "$pairs"
positive --epochs "$epochs"
[[ -z $steps ]] || positive --steps "$steps"
positive --page-cache "$cache_mib"
[[ $cold =~ ^[0-9]+x[0-9]+x[0-9]+:[0-9]+:[0-9]+$ ]] || die "--cold: expected HxWxC:CLASSES:N, found '$cold'"
workloads=(resnet20 cold io)
if [[ -n $only ]]; then
    [[ $only =~ ^(resnet20|cold|io)(,(resnet20|cold|io))*$ ]] ||
        die "--only: expected a comma list of resnet20, cold and io, found '$only'"
    IFS=, read -r -a workloads <<<"$only"
fi

dtrain=$build/dtrain prep=$build/dtrain-prep
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
[[ -x $prep ]] || die "no dtrain-prep executable at $prep"
grep -q -- --map-threads <<<"$("$dtrain" --help 2>&1 || true)" || die "$dtrain has no --map-threads (an older build?)"

# The memory cgroup of the cold runs: v2 (memory.max) or v1 (memory.limit_in_bytes).
cgroup="" limit_file=""
make_cgroup() {
    local base
    for base in /sys/fs/cgroup /sys/fs/cgroup/memory; do
        if [[ $base == /sys/fs/cgroup && -f $base/cgroup.controllers ]] && grep -qw memory "$base/cgroup.controllers"; then
            limit_file=memory.max
        elif [[ -f $base/memory.limit_in_bytes ]]; then
            limit_file=memory.limit_in_bytes
        else
            continue
        fi
        cgroup=$base/dtrain-map-threads.$$
        if mkdir "$cgroup" 2>/dev/null && echo $((cache_mib * 1048576)) >"$cgroup/$limit_file" 2>/dev/null; then
            return 0
        fi
        rmdir "$cgroup" 2>/dev/null || true
        cgroup=""
    done
    die "--page-cache: cannot make a memory cgroup (needs root and a writable /sys/fs/cgroup, v1 or v2); try --only resnet20"
}
[[ " ${workloads[*]} " != *" cold "* && " ${workloads[*]} " != *" io "* ]] || make_cgroup

bench_launcher
mpi_flags+=(-np 1 --bind-to none)
ncpu=$(env -u OMP_NUM_THREADS nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

scratch=""
if [[ -z $dir ]]; then
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/map-threads.XXXXXX")
    dir=$scratch
fi
mkdir -p "$dir"
cleanup() {
    [[ -z $scratch ]] || rm -rf "$scratch"
    [[ -z $cgroup ]] || rmdir "$cgroup" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log=/dev/null
if [[ -n $out ]]; then
    mkdir -p "$(dirname "$out")"
    log=${out%.csv}.log
    : >"$log"
fi

declare -A file=([resnet20]=$dir/resnet20-32x32x3.h5 [cold]=$dir/cold-${cold//[:x]/-}.h5)
file[io]=${file[cold]}
declare -A spec=([resnet20]=32x32x3:10:20000 [cold]=$cold [io]=$cold)
declare -A model=([resnet20]=$repo/inputs/resnet20.cfg [cold]=mlp [io]=$dir/pool-dense.cfg)
declare -A nsteps=([resnet20]=${steps:-40} [cold]=${steps:-150} [io]=${steps:-150})
printf '# io: almost no compute, so the run is bound by its reads\n[avgpool]\nsize = 4\nstride = 4\n\n[dense]\nunits = classes\n' \
    >"${model[io]}"
for w in "${workloads[@]}"; do
    if [[ ! -s ${file[$w]} ]]; then
        say "making the $w file ${spec[$w]}"
        "$prep" --quiet --synthetic "${spec[$w]}" "${file[$w]}.part" || die "dtrain-prep --synthetic ${spec[$w]} failed"
        mv "${file[$w]}.part" "${file[$w]}"
    fi
done

bench_about "$dtrain" "$ncpu"
meta=(
    "map-threads: --map-threads 1 against --map-threads $nthreads, one rank, one compute thread, not bound (--bind-to none)"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n), $ncpu CPUs: ${cpu_model:-unknown}; $busy_cores cores busy before the start"
    "dtrain: $dtrain_version, $dtrain, git $git_rev"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1) ($mpirun ${mpi_flags[*]})"
)
for w in "${workloads[@]}"; do
    mib=$(($(stat -c %s "${file[$w]}") / 1048576))
    what="$w: ${spec[$w]} ($mib MiB), model $(basename "${model[$w]}"), --augment flip,crop, batch 64, ${nsteps[$w]} steps"
    [[ $w == resnet20 ]] || what+="; page cache capped at $cache_mib MiB (cgroup $limit_file), the file dropped before each run"
    meta+=("$what")
done
meta+=("runs: $pairs pair(s) per workload of $epochs-epoch runs, epoch $epochs quoted")
if [[ -n $out ]]; then
    printf '# %s\n' "${meta[@]}" >"$out"
    echo "workload,pair,map_threads,epoch,steps,seconds,samples_per_s,data_ms,data_share" >>"$out"
fi

failures=0
# run WORKLOAD PAIR THREADS: one run; sets $quoted to "samples_per_s data_share"
# of its last epoch, from the metrics file (columns by name).
run() {
    local w=$1 pair=$2 n=$3 rc=0 one metrics
    one=$dir/$w-$pair-$n.out
    metrics=$dir/$w-$pair-$n.csv
    local cmd=("$mpirun" "${mpi_flags[@]}" "$dtrain" "${file[$w]}" --model "${model[$w]}" --map-threads "$n"
        --epochs "$epochs" --steps-per-epoch "${nsteps[$w]}" --batch-size 64 --augment flip,crop
        --no-validation --threads 1 --metrics "$metrics")
    if [[ $w != resnet20 ]]; then
        dd if="${file[$w]}" iflag=nocache count=0 status=none
        (echo "$BASHPID" >"$cgroup/cgroup.procs" && exec "${cmd[@]}") >"$one" 2>&1 </dev/null || rc=$?
    else
        "${cmd[@]}" >"$one" 2>&1 </dev/null || rc=$?
    fi
    [[ $log == /dev/null ]] || { echo "==== $w pair $pair --map-threads $n (exit $rc)"; cat "$one"; } >>"$log"
    quoted=""
    ((rc != 0)) || quoted=$(bench_epoch_row "$metrics" "$epochs")
    if [[ -z $quoted ]]; then
        bench_no_figures "$w pair $pair --map-threads $n" "$rc" "$one" "$epochs"
        return 1
    fi
    [[ -z $out ]] || awk -v w="$w" -v p="$pair" -v n="$n" -v e="$epochs" -v OFS=, \
        '{ print w, p, n, e, $1, $2, $3, $4, $5 }' <<<"$quoted" >>"$out"
    local s x
    read -r _ _ s _ x <<<"$quoted"
    quoted="$s $x"
}

declare -A sps share # "WORKLOAD PAIR THREADS" -> figure
for w in "${workloads[@]}"; do
    say "$w: $pairs pair(s) of --map-threads 1 and $nthreads, $epochs epoch(s) of ${nsteps[$w]} steps each"
    for ((p = 1; p <= pairs; p++)); do
        order=(1 "$nthreads")
        ((p % 2)) || order=("$nthreads" 1)
        for n in "${order[@]}"; do
            if run "$w" "$p" "$n"; then
                read -r s x <<<"$quoted"
                sps["$w $p $n"]=$s
                share["$w $p $n"]=$x
                say "$w pair $p/$pairs: --map-threads $n $(printf '%8.0f samples/s, data wait %5.1f%% of the step' "$s" \
                    "$(awk -v x="$x" 'BEGIN { print 100 * x }')")"
            fi
        done
    done
done

# ---- Report -----------------------------------------------------------------------------
pct() { [[ -z $1 ]] && echo - || awk -v x="$1" 'BEGIN { printf "%.2f%%", 100 * x }'; }
printf '# %s\n' "${meta[@]}"
echo "#"
echo "# medians over the pairs of the last epoch; data wait = data_ms / step time;"
echo "# speed ratio = samples/s at $nthreads threads / at 1, the median of the per-pair ratios"
printf '%-10s %14s %14s %12s %12s %12s %8s\n' workload "data wait 1" "data wait $nthreads" "samples/s 1" \
    "samples/s $nthreads" "speed ratio" pairs
for w in "${workloads[@]}"; do
    pair_ratio sps "$w" 1 "$nthreads"
    s1=$(pair_median sps "$w" 1) sn=$(pair_median sps "$w" "$nthreads")
    [[ -z $s1 ]] || s1=$(printf '%.0f' "$s1")
    [[ -z $sn ]] || sn=$(printf '%.0f' "$sn")
    printf '%-10s %14s %14s %12s %12s %12s %8s\n' "$w" "$(pct "$(pair_median share "$w" 1)")" \
        "$(pct "$(pair_median share "$w" "$nthreads")")" "${s1:--}" "${sn:--}" "${ratio:--}" "$nratios/$pairs"
done

if ((failures)); then
    say "$failures run(s) failed or gave no figures (details above${out:+ and in $log})"
    exit 1
fi
