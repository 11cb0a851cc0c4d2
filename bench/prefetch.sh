#!/usr/bin/env bash
# prefetch.sh: dtrain with --prefetch 0 (each batch read in the training
# loop) against --prefetch 2 (a thread reads two batches ahead), side by side
# in one invocation: the share of step time spent waiting for data, and
# training samples/s, on Fashion-MNIST and on a larger generated file.
#
# The design decision a reader must know: the machines this runs on are shared
# and noisy, so the two settings are never compared across invocations. Runs
# come in pairs, one of each setting back to back (which goes first alternates
# from pair to pair), and the figures to quote are medians over the pairs, the
# ratio being the median of each pair's own ratio. Each run is a fresh process
# of E epochs; only the last epoch is quoted (the first pays one-off costs and
# reads a cold page cache). The data-wait share is dtrain's own figure from
# its --metrics file: data_ms / step time (seconds x 1000 / steps). One rank,
# one compute thread, and NOT bound to one core (--bind-to none): the reading
# thread needs a core of its own to overlap anything, as it has on a cluster
# node with spare cores per rank.
#
# Usage: bench/prefetch.sh [--build DIR] [--data FILE] [--synthetic SPEC]
#            [--pairs P] [--epochs E] [--steps S] [--out CSV]
set -euo pipefail

prog=prefetch.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains with --prefetch 0 and --prefetch 2, P pairs of E-epoch runs on each
dataset, and reports the median data-wait share of step time and samples/s
of the last epoch for each setting, and the ratios 2 / 0.

Datasets:
  fashion-mnist   --data FILE: the seed CNN (batch 64, Adam), --augment flip,crop
  synthetic       a generated file of SPEC (dtrain-prep --synthetic), made once
                  in a scratch directory: the MLP (batch 64), --augment flip,crop;
                  larger rows and less compute per byte, so reading matters more

Options:
  --build DIR       directory holding dtrain and dtrain-prep (default: $repo/build)
  --data FILE       HDF5 file from dtrain-prep (default: $repo/data/fashion-mnist.h5,
                    made with dtrain-prep if missing)
  --synthetic SPEC  HxWxC:CLASSES:N of the generated file (default: 64x64x3:10:20000,
                    235 MiB)
  --pairs P         pairs of runs per dataset (default: 3)
  --epochs E        epochs per run; the last is quoted (default: 2)
  --steps S         --steps-per-epoch of every run (default: 150)
  --out CSV         raw numbers, one row per quoted epoch (default: none); every
                    run's output goes to the same name ending .log
  -h, --help        show this help
EOF
    bench_usage_env
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"


build=$repo/build data="" synth=64x64x3:10:20000 pairs=3 epochs=2 steps=150 out=""
while (($#)); do
    case $1 in
        --build) (($# > 1)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --data) (($# > 1)) || die "--data needs a file"; data=$2; shift 2 ;;
        --data=*) data=${1#*=}; shift ;;
        --synthetic) (($# > 1)) || die "--synthetic needs HxWxC:CLASSES:N"; synth=$2; shift 2 ;;
        --synthetic=*) synth=${1#*=}; shift ;;
        --pairs) (($# > 1)) || die "--pairs needs a number"; pairs=$2; shift 2 ;;
        --pairs=*) pairs=${1#*=}; shift ;;
        --epochs) (($# > 1)) || die "--epochs needs a number"; epochs=$2; shift 2 ;;
        --epochs=*) epochs=${1#*=}; shift ;;
        --steps) (($# > 1)) || die "--steps needs a number"; steps=$2; shift 2 ;;
        --steps=*) steps=${1#*=}; shift ;;
        --out) (($# > 1)) || die "--out needs a file name"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
whole --pairs "$pairs" 1
whole --epochs "$epochs" 1
whole --steps "$steps" 1
[[ $synth =~ ^[0-9]+x[0-9]+x[0-9]+:[0-9]+:[0-9]+$ ]] || die "--synthetic: expected HxWxC:CLASSES:N, found '$synth'"

dtrain=$build/dtrain prep=$build/dtrain-prep
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
[[ -x $prep ]] || die "no dtrain-prep executable at $prep"
bench_default_data "$dtrain"
help_text=$("$dtrain" --help 2>&1) || true
grep -q -- --prefetch <<<"$help_text" || die "$dtrain has no --prefetch (an older build?)"

bench_launcher
# One rank, free to use a second core for its reading thread (see the top).
mpi_flags+=(-np 1 --bind-to none)
ncpu=$(env -u OMP_NUM_THREADS nproc) # GNU nproc reports OMP_NUM_THREADS when set
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

rundir=$(mktemp -d "${TMPDIR:-/tmp}/prefetch.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM
log=/dev/null
if [[ -n $out ]]; then
    mkdir -p "$(dirname "$out")"
    log=${out%.csv}.log
    : >"$log"
fi

say "making the synthetic file $synth"
big=$rundir/synthetic.h5
"$prep" --quiet --synthetic "$synth" "$big" || die "dtrain-prep --synthetic $synth failed"
big_mib=$(($(stat -c %s "$big") / 1048576))

bench_about "$dtrain" "$ncpu"
meta=(
    "prefetch: --prefetch 0 against --prefetch 2, one rank, one compute thread, not bound (--bind-to none)"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n), $ncpu CPUs: ${cpu_model:-unknown}; $busy_cores cores busy before the start"
    "dtrain: $dtrain_version, $dtrain, git $git_rev"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1) ($mpirun ${mpi_flags[*]})"
    "data: fashion-mnist = $data (cnn); synthetic = $synth, $big_mib MiB (mlp); both --augment flip,crop, batch 64"
    "runs: $pairs pair(s) per dataset of $epochs-epoch runs of $steps steps, epoch $epochs quoted"
)
[[ -z $out ]] || { printf '# %s\n' "${meta[@]}"; echo "dataset,pair,prefetch,epoch,steps,seconds,samples_per_s,data_ms,data_share"; } >"$out"

failures=0
# run DATASET PAIR PREFETCH: one run; sets $quoted to "samples_per_s data_share"
# of its last epoch, from the metrics file (columns by name, not position).
run() {
    local ds=$1 pair=$2 pf=$3 rc=0 file metrics args
    file=$rundir/$ds-$pair-$pf.out
    metrics=$rundir/$ds-$pair-$pf.csv
    if [[ $ds == fashion-mnist ]]; then args=("$data" --model cnn); else args=("$big" --model mlp); fi
    "$mpirun" "${mpi_flags[@]}" "$dtrain" "${args[@]}" --prefetch "$pf" --epochs "$epochs" --steps-per-epoch "$steps" \
        --batch-size 64 --augment flip,crop --no-validation --threads 1 --metrics "$metrics" >"$file" 2>&1 </dev/null || rc=$?
    [[ $log == /dev/null ]] || { echo "==== $ds pair $pair prefetch $pf (exit $rc)"; cat "$file"; } >>"$log"
    quoted=""
    ((rc != 0)) || quoted=$(bench_epoch_row "$metrics" "$epochs")
    if [[ -z $quoted ]]; then
        bench_no_figures "$ds pair $pair --prefetch $pf" "$rc" "$file" "$epochs"
        return 1
    fi
    [[ -z $out ]] || awk -v d="$ds" -v p="$pair" -v f="$pf" -v e="$epochs" -v OFS=, \
        '{ print d, p, f, e, $1, $2, $3, $4, $5 }' <<<"$quoted" >>"$out"
    read -r _ _ sps _ share <<<"$quoted"
    quoted="$sps $share"
}

declare -A sps share # "DATASET PAIR PREFETCH" -> figure
for ds in fashion-mnist synthetic; do
    say "$ds: $pairs pair(s) of --prefetch 0 and 2, $epochs epoch(s) of $steps steps each"
    for ((p = 1; p <= pairs; p++)); do
        order=(0 2)
        ((p % 2)) || order=(2 0)
        for pf in "${order[@]}"; do
            if run "$ds" "$p" "$pf"; then
                read -r s w <<<"$quoted"
                sps["$ds $p $pf"]=$s
                share["$ds $p $pf"]=$w
                say "$ds pair $p/$pairs: --prefetch $pf $(printf '%8.0f samples/s, data wait %5.1f%% of the step' "$s" \
                    "$(awk -v w="$w" 'BEGIN { print 100 * w }')")"
            fi
        done
    done
done

# ---- Report -----------------------------------------------------------------------------
pct() { [[ -z $1 ]] && echo - || awk -v w="$1" 'BEGIN { printf "%.2f%%", 100 * w }'; }
printf '# %s\n' "${meta[@]}"
echo "#"
echo "# medians over the pairs of the last epoch; data wait = data_ms / step time; ratio = prefetch 2 / prefetch 0, median of the per-pair ratios"
printf '%-14s %16s %16s %12s %12s %12s %10s\n' dataset "data wait p=0" "data wait p=2" "samples/s 0" "samples/s 2" "speed ratio" "pairs"
for ds in fashion-mnist synthetic; do
    w0=$(pair_median share "$ds" 0) w2=$(pair_median share "$ds" 2)
    s0=$(pair_median sps "$ds" 0) s2=$(pair_median sps "$ds" 2)
    pair_ratio sps "$ds" 0 2
    [[ -z $s0 ]] || s0=$(printf '%.0f' "$s0")
    [[ -z $s2 ]] || s2=$(printf '%.0f' "$s2")
    printf '%-14s %16s %16s %12s %12s %12s %10s\n' "$ds" "$(pct "$w0")" "$(pct "$w2")" "${s0:--}" "${s2:--}" \
        "${ratio:--}" "$nratios/$pairs"
done

if ((failures)); then
    say "$failures run(s) failed or gave no figures (details above${out:+ and in $log})"
    exit 1
fi
