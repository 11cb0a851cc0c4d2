#!/usr/bin/env bash
# fsdp.sh: --strategy fsdp (ZeRO-3) against data parallelism (mirrored), in
# one invocation: training samples/s where both fit, and memory where only
# fsdp does.
#
#   throughput  ResNet-20 and resnet32-wide4 on generated 32x32x3 data, at 2
#               and 4 ranks: P pairs of runs, mirrored and fsdp back to back
#               (which goes first alternates); epoch 2's samples/s from
#               dtrain's --metrics; the ratio fsdp / mirrored is the median of
#               the pairs' own ratios.
#   memory      inputs/wide-mlp.cfg (456 M parameters) at 4 ranks: mirrored
#               must be refused by dtrain's memory check before it starts
#               (its message is quoted); fsdp trains a few steps, and the
#               ranks' peak RSS added up is set against the machine's memory
#               and each rank's against ZeRO's 16P/N.
#
# The design decision a reader must know: the machines are shared and noisy,
# so the strategies are compared only inside a pair, never across
# invocations. Ranks are not bound (--bind-to none, --oversubscribe): at 4
# ranks on a 2-core machine both strategies share the cores alike.
#
# Usage: bench/fsdp.sh [--build DIR] [--only throughput|memory] [--models LIST]
#            [--np LIST] [--pairs P] [--steps S] [--batch B] [--out CSV]
set -euo pipefail

prog=fsdp.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Options:
  --build DIR      directory holding dtrain (default: $repo/build)
  --only PART      throughput or memory (default: both)
  --models LIST    model files of inputs/, without .cfg (default: resnet20,resnet32-wide4)
  --np LIST        rank counts (default: 2,4)
  --pairs P        pairs of runs per model and rank count (default: 3)
  --steps S        --steps-per-epoch of each run; epoch 2 is quoted (default: 12)
  --batch B        --batch-size per rank (default: 32)
  --out CSV        raw numbers, one row per run (default: none)
  -h, --help       show this help
EOF
    bench_usage_env
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

build=$repo/build only="" models=resnet20,resnet32-wide4 nps=2,4 pairs=3 steps=12 batch=32 out=""
while (($#)); do
    case $1 in
        --build | --only | --models | --np | --pairs | --steps | --batch | --out)
            (($# > 1)) || die "$1 needs a value"
            case $1 in
                --build) build=$2 ;; --only) only=$2 ;; --models) models=$2 ;; --np) nps=$2 ;;
                --pairs) pairs=$2 ;; --steps) steps=$2 ;; --batch) batch=$2 ;; --out) out=$2 ;;
            esac
            shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
[[ -z $only || $only == throughput || $only == memory ]] || die "--only: expected throughput or memory, found '$only'"
positive --pairs "$pairs"
positive --steps "$steps"
positive --batch "$batch"
[[ $nps =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--np: expected a comma list of rank counts, found '$nps'"
IFS=, read -r -a nplist <<<"$nps"
IFS=, read -r -a modellist <<<"$models"
for m in "${modellist[@]}"; do
    [[ -r $repo/inputs/$m.cfg ]] || die "--models: no model file inputs/$m.cfg"
done
dtrain=$build/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
grep -q 'fsdp' <<<"$("$dtrain" --help 2>&1 || true)" || die "$dtrain has no --strategy fsdp (an older build?)"

bench_launcher
mpi_flags+=(--bind-to none --oversubscribe)
ncpu=$(env -u OMP_NUM_THREADS nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rundir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM
bench_about "$dtrain" "$ncpu"
printf '# fsdp: --strategy fsdp against mirrored\n# date: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '# host: %s, %s CPUs: %s; %s cores busy before the start\n' "$(uname -n)" "$ncpu" "${cpu_model:-unknown}" "$busy_cores"
printf '# dtrain: %s, %s, git %s\n# mpi: %s (%s %s)\n' "$dtrain_version" "$dtrain" "$git_rev" \
    "$("$mpirun" --version 2>/dev/null | head -n 1)" "$mpirun" "${mpi_flags[*]}"
[[ -z $out ]] || echo "model,np,pair,strategy,steps,seconds,samples_per_s" >"$out"
failures=0

# ---- throughput -------------------------------------------------------------------------
declare -A sps # "MODEL-NP PAIR STRATEGY" -> samples/s
run() { # MODEL NP PAIR STRATEGY
    local m=$1 np=$2 pair=$3 s=$4 rc=0 one=$rundir/$1-$2-$3-$4 row
    "$mpirun" "${mpi_flags[@]}" -np "$np" "$dtrain" --synthetic 32x32x3:10:8192 --model "$repo/inputs/$m.cfg" \
        --strategy "$s" --epochs 2 --steps-per-epoch "$steps" --batch-size "$batch" --no-validation --threads 1 \
        --metrics "$one.csv" >"$one.out" 2>&1 </dev/null || rc=$?
    row=""
    ((rc != 0)) || row=$(bench_epoch_row "$one.csv" 2)
    if [[ -z $row ]]; then
        bench_no_figures "$m np=$np pair $pair $s" "$rc" "$one.out" 2
        return 0
    fi
    read -r st secs rate _ <<<"$row"
    sps["$m-$np $pair $s"]=$rate
    [[ -z $out ]] || echo "$m,$np,$pair,$s,$st,$secs,$rate" >>"$out"
    say "$m np=$np pair $pair/$pairs: $s $(printf '%.0f' "$rate") samples/s"
}
if [[ $only != memory ]]; then
    echo "# throughput: --synthetic 32x32x3, batch $batch per rank, epochs of $steps steps, epoch 2 quoted; $pairs pair(s)"
    printf '%-16s %3s %14s %14s %12s %8s\n' model np "mirrored sps" "fsdp sps" "fsdp/mirr" pairs
    for m in "${modellist[@]}"; do
        for np in "${nplist[@]}"; do
            for ((p = 1; p <= pairs; p++)); do
                order=(mirrored fsdp)
                ((p % 2)) || order=(fsdp mirrored)
                for s in "${order[@]}"; do run "$m" "$np" "$p" "$s"; done
            done
            pair_ratio sps "$m-$np" mirrored fsdp
            a=$(pair_median sps "$m-$np" mirrored) b=$(pair_median sps "$m-$np" fsdp)
            printf '%-16s %3s %14s %14s %12s %8s\n' "$m" "$np" "$(printf '%.1f' "${a:-0}")" "$(printf '%.1f' "${b:-0}")" \
                "${ratio:--}" "$nratios/$pairs"
        done
    done
fi

# ---- memory -----------------------------------------------------------------------------
if [[ $only != throughput ]]; then
    big=(--synthetic 64x64x3:10:2048 --model "$repo/inputs/wide-mlp.cfg" --epochs 1 --steps-per-epoch 3
         --batch-size 16 --no-validation --threads 1)
    total=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
    echo "# memory: inputs/wide-mlp.cfg at 4 ranks, batch 16, 3 steps; the machine has $(awk -v t="$total" 'BEGIN { printf "%.1f", t / 2^30 }') GiB"
    rc=0
    "$mpirun" "${mpi_flags[@]}" -np 4 "$dtrain" "${big[@]}" --strategy mirrored >"$rundir/big-mirrored.out" 2>&1 || rc=$?
    if ((rc == 2)) && grep -q '^dtrain: error: --strategy mirrored: model .* needs about' "$rundir/big-mirrored.out"; then
        echo "mirrored: refused before it starts (exit 2): $(grep -m1 '^dtrain: error: ' "$rundir/big-mirrored.out")"
    else
        bench_no_figures "wide-mlp mirrored (expected the memory check's refusal, exit 2)" "$rc" "$rundir/big-mirrored.out" 1
    fi
    rc=0
    "$mpirun" "${mpi_flags[@]}" -np 4 "$dtrain" "${big[@]}" --strategy fsdp >"$rundir/big-fsdp.out" 2>&1 || rc=$?
    sum=$(sed -n "s/.*the ranks' peak RSS added up: \\([0-9.]*\\) MiB.*/\\1/p" "$rundir/big-fsdp.out")
    per=$(sed -n 's/^memory per rank: peak RSS \([0-9.]*\)-\([0-9.]*\) MiB.*/\1 \2/p' "$rundir/big-fsdp.out")
    nparams=$(sed -n 's/.*(\([0-9]*\) parameters).*/\1/p' "$rundir/big-fsdp.out" | head -1)
    if ((rc == 0)) && [[ -n $sum && -n $per ]]; then
        read -r lo hi <<<"$per"
        echo "fsdp: trained; peak RSS per rank $lo-$hi MiB, added up $sum MiB = $(awk -v s="$sum" -v t="$total" \
            'BEGIN { printf "%.1f%%", 100 * s * 1048576 / t }') of the machine (goal <= 60%)"
        [[ -z $nparams ]] || echo "fsdp: ZeRO's 16P/N = $(awk -v p="$nparams" 'BEGIN { printf "%.1f", 16 * p / 4 / 1048576 }') MiB a rank for $nparams parameters; $(grep '^fsdp: ' "$rundir/big-fsdp.out")"
        grep '^Epoch ' "$rundir/big-fsdp.out" | sed 's/^/fsdp: /'
        [[ -z $out ]] || echo "wide-mlp,4,1,fsdp-memory,$lo,$hi,$sum" >>"$out"
    else
        bench_no_figures "wide-mlp fsdp" "$rc" "$rundir/big-fsdp.out" 1
    fi
fi
if ((failures)); then
    say "$failures run(s) failed or gave no figures (details above)"
    exit 1
fi
