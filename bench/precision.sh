#!/usr/bin/env bash
# precision.sh: dtrain's seed CNN at --precision fp32 and bf16 on the CPU, side
# by side in one invocation: training samples/s, and validation accuracy after
# the same number of epochs from the same seed.
#
# The design decision a reader must know: the machines this runs on are shared
# and noisy, so the two precisions are never compared across separate
# invocations. Throughput runs come in pairs, one fp32 and one bf16 run back to
# back (which goes first alternates from pair to pair, so a slow drift does not
# favour either), and the figure to quote is the median over the pairs of each
# pair's own bf16/fp32 ratio. Every run is a fresh process that trains E epochs
# of the full train split; only the last epoch is quoted, as in
# cnn-throughput.sh (the first pays one-off costs: primitive creation, cold
# caches).
#
# Usage: bench/precision.sh [--build DIR] [--data FILE] [--pairs P] [--epochs E]
#            [--acc-epochs N] [--out CSV]
set -euo pipefail

prog=precision.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains the seed CNN (conv32-pool-conv64-pool-dense128-dropout-dense10, Adam
1e-3, batch 64, one rank, one thread) with --precision fp32 and bf16: P pairs
of E-epoch runs for throughput, then one N-epoch run of each with validation
for accuracy.

Options:
  --build DIR       directory holding dtrain (default: $repo/build)
  --data FILE       HDF5 file from dtrain-prep (default: $repo/data/fashion-mnist.h5)
  --pairs P         fp32/bf16 pairs of throughput runs (default: 3)
  --epochs E        epochs per throughput run; the last is quoted (default: 2)
  --acc-epochs N    epochs of the accuracy runs (default: 5; 0 skips them)
  --out CSV         raw numbers, one row per epoch of every run (default: none);
                    every run's output goes to the same name ending .log
  -h, --help        show this help
EOF
    bench_usage_env
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"


build=$repo/build data=$repo/data/fashion-mnist.h5 pairs=3 epochs=2 acc_epochs=5 out=""
while (($#)); do
    case $1 in
        --build) (($# > 1)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --data) (($# > 1)) || die "--data needs a file"; data=$2; shift 2 ;;
        --data=*) data=${1#*=}; shift ;;
        --pairs) (($# > 1)) || die "--pairs needs a number"; pairs=$2; shift 2 ;;
        --pairs=*) pairs=${1#*=}; shift ;;
        --epochs) (($# > 1)) || die "--epochs needs a number"; epochs=$2; shift 2 ;;
        --epochs=*) epochs=${1#*=}; shift ;;
        --acc-epochs) (($# > 1)) || die "--acc-epochs needs a number"; acc_epochs=$2; shift 2 ;;
        --acc-epochs=*) acc_epochs=${1#*=}; shift ;;
        --out) (($# > 1)) || die "--out needs a file name"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
whole --pairs "$pairs" 1
whole --epochs "$epochs" 1
whole --acc-epochs "$acc_epochs" 0

dtrain=$build/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
[[ -r $data ]] || die "--data $data: no such readable file (make one with dtrain-prep)"

bench_launcher
# One rank held to one core, as cnn-throughput.sh measures dtrain.
mpi_flags+=(-np 1 --bind-to core)
ncpu=$(nproc) # before OMP_NUM_THREADS is set: GNU nproc reports that instead
# One thread everywhere, including any OpenMP/BLAS pool a library starts on its own.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

rundir=$(mktemp -d "${TMPDIR:-/tmp}/precision.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM
log=/dev/null
if [[ -n $out ]]; then
    mkdir -p "$(dirname "$out")"
    log=${out%.csv}.log
    : >"$log"
fi

# bf16 needs AVX512-BF16 or AMX-BF16; dtrain refuses it otherwise, and then
# there is nothing to compare.
probe=$rundir/probe.out
if ! "$mpirun" "${mpi_flags[@]}" "$dtrain" "$data" --precision bf16 --epochs 1 --steps-per-epoch 1 \
        --no-validation --threads 1 >"$probe" 2>&1 </dev/null; then
    say "dtrain --precision bf16 does not run here:"
    tail -n 5 "$probe" | sed 's/^/    /' >&2
    exit 1
fi

bench_about "$dtrain" "$ncpu"
bf16_flags=$(grep -o -w 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | paste -s -d ' ')
meta=(
    "precision: seed CNN, batch 64, Adam 1e-3, one rank, one thread, fp32 against bf16"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n), $ncpu CPUs: ${cpu_model:-unknown}; bf16 flags: ${bf16_flags:-none}; $busy_cores cores busy before the start"
    "dtrain: $dtrain_version, $dtrain, git $git_rev"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1) ($mpirun ${mpi_flags[*]})"
    "data: $data"
    "throughput: $pairs pair(s) of $epochs-epoch runs, epoch $epochs quoted; accuracy: $acc_epochs epochs each"
)
[[ -z $out ]] || { printf '# %s\n' "${meta[@]}"; echo "kind,pair,precision,epoch,seconds,samples_per_s,loss,accuracy,val_loss,val_accuracy"; } >"$out"

# dtrain's progress lines, as "epoch seconds samples_per_s loss accuracy val_loss val_accuracy"
# ("nan" where a field is absent): "Epoch 2/2 - 9.81 s - 6116 samples/s - loss: 0.51 - accuracy: 0.81 - val_loss: ..."
parse() {
    awk '/^Epoch [0-9]+\/[0-9]+ / {
        split($2, ep, "/"); secs = sps = loss = acc = vloss = vacc = "nan"
        if (match($0, / - [0-9.]+ s - /)) secs = substr($0, RSTART + 3, RLENGTH - 8)
        if (match($0, /[0-9.]+ samples\/s/)) sps = substr($0, RSTART, RLENGTH - 10)
        if (match($0, / loss: [^ ]+/)) loss = substr($0, RSTART + 7, RLENGTH - 7)
        if (match($0, / accuracy: [^ ]+/)) acc = substr($0, RSTART + 11, RLENGTH - 11)
        if (match($0, / val_loss: [^ ]+/)) vloss = substr($0, RSTART + 11, RLENGTH - 11)
        if (match($0, / val_accuracy: [^ ]+/)) vacc = substr($0, RSTART + 15, RLENGTH - 15)
        print ep[1], secs, sps, loss, acc, vloss, vacc
    }' "$1"
}

failures=0
# train KIND PAIR PRECISION EPOCHS [ARGS...]: one run; sets $quoted to its last
# epoch's row. A run counts only if it exited 0, printed that epoch, and
# learned something (mean loss below ln 10, the loss of a uniform guess).
train() {
    local kind=$1 pair=$2 prec=$3 n=$4 rc=0 file rows why=""
    shift 4
    file=$rundir/$kind-$pair-$prec.out
    "$mpirun" "${mpi_flags[@]}" "$dtrain" "$data" --precision "$prec" --epochs "$n" --batch-size 64 \
        --threads 1 "$@" >"$file" 2>&1 </dev/null || rc=$?
    [[ $log == /dev/null ]] || { echo "==== $kind $pair $prec (exit $rc)"; cat "$file"; } >>"$log"
    rows=$(parse "$file")
    quoted=$(awk -v e="$n" '$1 == e { print; exit }' <<<"$rows")
    if ((rc != 0)); then
        why="exited with status $rc"
    elif [[ -z $quoted ]]; then
        why="printed no figures for epoch $n"
    elif ! awk '{ exit !($3 > 0 && $4 == $4 + 0 && $4 < 2.302585) }' <<<"$quoted"; then
        why="epoch $n looks wrong: $quoted"
    fi
    if [[ -n $out && -n $rows ]]; then
        awk -v k="$kind" -v p="$pair" -v pr="$prec" -v OFS=, '{ print k, p, pr, $1, $2, $3, $4, $5, $6, $7 }' \
            <<<"$rows" >>"$out"
    fi
    if [[ -n $why ]]; then
        failures=$((failures + 1))
        say "$kind $pair $prec: $why; its last lines:"
        tail -n 10 "$file" | sed 's/^/    /' >&2
        quoted=""
        return 1
    fi
}

# ---- Throughput: pairs, alternating order ------------------------------------------
declare -A sps # "PAIR PRECISION" -> samples/s of the quoted epoch
say "$pairs pair(s) of fp32 and bf16 runs, $epochs epoch(s) each"
for ((p = 1; p <= pairs; p++)); do
    order=(fp32 bf16)
    ((p % 2)) || order=(bf16 fp32)
    for prec in "${order[@]}"; do
        if train throughput "$p" "$prec" "$epochs" --no-validation; then
            read -r _ _ s _ <<<"$quoted"
            sps["$p $prec"]=$s
            say "pair $p/$pairs: $(printf '%s %8.0f samples/s' "$prec" "$s")"
        fi
    done
done

# ---- Accuracy: the same seed, N epochs, validation on the test split ----------------
declare -A acc # PRECISION -> "val_accuracy val_loss loss seconds_per_epoch"
if ((acc_epochs > 0)); then
    say "accuracy: $acc_epochs epochs of fp32, then of bf16"
    for prec in fp32 bf16; do
        if train accuracy 1 "$prec" "$acc_epochs"; then
            read -r _ _ _ l _ vl va <<<"$quoted"
            acc[$prec]="$va $vl $l"
            say "accuracy: $prec val_accuracy $va after $acc_epochs epochs"
        fi
    done
fi

# ---- Report -----------------------------------------------------------------------------
printf '# %s\n' "${meta[@]}"
echo "#"
echo "# training samples/s of epoch $epochs; ratio = bf16 / fp32 within the pair (first = which ran first)"
printf '%-6s %-6s %12s %12s %8s\n' pair first fp32 bf16 ratio
ratios=()
for ((p = 1; p <= pairs; p++)); do
    f=${sps["$p fp32"]:-} b=${sps["$p bf16"]:-} r=-
    if [[ -n $f && -n $b ]]; then
        r=$(awk -v a="$b" -v c="$f" 'BEGIN { printf "%.3f", a / c }')
        ratios+=("$r")
    fi
    first=fp32
    ((p % 2)) || first=bf16
    printf '%-6s %-6s %12s %12s %8s\n' "$p" "$first" "${f:--}" "${b:--}" "$r"
done
med_f=$(for ((p = 1; p <= pairs; p++)); do [[ -z ${sps["$p fp32"]:-} ]] || echo "${sps["$p fp32"]}"; done | median)
med_b=$(for ((p = 1; p <= pairs; p++)); do [[ -z ${sps["$p bf16"]:-} ]] || echo "${sps["$p bf16"]}"; done | median)
med_r=""
((${#ratios[@]} == 0)) || med_r=$(printf '%s\n' "${ratios[@]}" | median)
printf '%-13s %12s %12s %8s\n' "median" "${med_f:--}" "${med_b:--}" "${med_r:--}"
echo
echo "median of the per-pair ratios bf16/fp32: ${med_r:--} (${#ratios[@]} of $pairs pairs valid)"
if ((acc_epochs > 0)); then
    echo
    echo "# after $acc_epochs epochs from the same seed (42); val = the file's test split, train loss = running mean of epoch $acc_epochs"
    printf '%-10s %13s %9s %11s\n' precision val_accuracy val_loss train_loss
    for prec in fp32 bf16; do
        if [[ -n ${acc[$prec]:-} ]]; then
            read -r va vl l <<<"${acc[$prec]}"
            printf '%-10s %13s %9s %11s\n' "$prec" "$va" "$vl" "$l"
        else
            printf '%-10s %13s %9s %11s\n' "$prec" - - -
        fi
    done
fi

if ((failures)); then
    say "$failures run(s) failed or gave no valid figures (details above${out:+ and in $log})"
    exit 1
fi
