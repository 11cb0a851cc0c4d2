#!/usr/bin/env bash
# ab.sh: two builds of dtrain side by side on the same workloads, in one
# invocation: is a change (a refactor, a compiler flag) neutral for speed?
#
# The design decision a reader must know: these machines are shared and
# noisy, so neither side is measured in an earlier run. Each round runs A
# and B back to back on each workload (odd rounds put B first, so a slow
# drift favours neither), every run is a fresh process that trains E epochs
# and only the last epoch is quoted, and the figure to quote is the median
# over rounds of each round's own ratio B/A.
#
# Usage: bench/ab.sh --a DTRAIN --b DTRAIN [--repeats R] [--epochs E]
#            [--np N] [--precision P] [--data FILE] [--workloads cnn,resnet20]
#            [--out CSV]
set -euo pipefail

prog=ab.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

usage() {
    cat <<USAGE
Usage: bench/$prog --a DTRAIN --b DTRAIN [OPTIONS]

Trains each workload with two dtrain executables (A: the baseline, B: the
candidate), R rounds interleaved, and reports the median last-epoch samples/s
of each and the median of the per-round ratios B/A.

Workloads:
  cnn        the reference CNN on Fashion-MNIST (--data), batch 64
  resnet20   inputs/resnet20.cfg on 6,400 synthetic 32x32x3 images, batch 64

Options:
  --a DTRAIN        the baseline executable (or a build directory holding it)
  --b DTRAIN        the candidate executable (or a build directory)
  --repeats R       rounds (default: 5)
  --epochs E        epochs per run; the last one is quoted (default: 2)
  --np N            ranks per run (default: 1)
  --precision P     fp32 or bf16, passed to both sides (default: fp32)
  --data FILE       the CNN's HDF5 file (default: data/fashion-mnist.h5,
                    made with dtrain-prep when missing)
  --workloads LIST  comma-separated, from the list above (default: both)
  --out CSV         also write every run: workload,round,side,samples_per_s
  -h, --help        this text
USAGE
}

a= b= repeats=5 epochs=2 np=1 data= workloads=cnn,resnet20 out= precision=fp32
while (($#)); do
    case $1 in
        --a) a=${2:?--a needs a value}; shift 2 ;;
        --b) b=${2:?--b needs a value}; shift 2 ;;
        --repeats) positive "$1" "${2:-}"; repeats=$2; shift 2 ;;
        --epochs) positive "$1" "${2:-}"; epochs=$2; shift 2 ;;
        --np) positive "$1" "${2:-}"; np=$2; shift 2 ;;
        --data) data=${2:?--data needs a value}; shift 2 ;;
        --workloads) workloads=${2:?--workloads needs a value}; shift 2 ;;
        --precision) precision=${2:?--precision needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ -n $a && -n $b ]] || die "--a and --b are both required (see --help)"
[[ $precision == fp32 || $precision == bf16 ]] || die "--precision: expected fp32 or bf16, found '$precision'"
for side in a b; do
    v=${!side}
    [[ -d $v ]] && v=$v/dtrain
    [[ -x $v ]] || die "--$side $v: no such executable"
    printf -v "$side" '%s' "$(cd "$(dirname "$v")" && pwd)/$(basename "$v")"
done
IFS=, read -r -a wl <<<"$workloads"
for w in "${wl[@]}"; do
    [[ $w == cnn || $w == resnet20 ]] || die "--workloads: expected cnn or resnet20, found '$w'"
    [[ $w == cnn ]] && bench_default_data "$a"
done
bench_launcher
bench_about "$b" "$np"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run SIDE WORKLOAD -> the last epoch's global samples/s on stdout
run() {
    local bin=$1 w=$2 args
    case $w in
        cnn) args=("$data" --batch-size 64) ;;
        resnet20) args=(--synthetic "32x32x3:10:6400" --model "$repo/inputs/resnet20.cfg" --batch-size 64) ;;
    esac
    (cd "$work" && "$mpirun" "${mpi_flags[@]}" -np "$np" "$bin" "${args[@]}" --epochs "$epochs" --threads 1 \
        --precision "$precision" --progress plain --no-validation --seed 42) >"$work/log" 2>&1 || {
        cat "$work/log" >&2
        die "$bin failed on $w"
    }
    awk -v e="Epoch $epochs/$epochs" 'index($0, e) == 1 { for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") v = $i }
        END { if (v == "") exit 1; print v }' "$work/log" || die "no samples/s for epoch $epochs in $bin's output"
}

declare -A sps ratios
[[ -z $out ]] || echo "workload,round,side,samples_per_s" >"$out"
echo "# A: $a"
echo "# B: $b"
echo "# $dtrain_version, commit $git_rev, $cpu_model, $np rank(s), --precision $precision, $repeats rounds, epoch $epochs of $epochs quoted"
for ((r = 1; r <= repeats; r++)); do
    for w in "${wl[@]}"; do
        order=(a b)
        ((r % 2)) || order=(b a)
        for side in "${order[@]}"; do
            v=$(run "${!side}" "$w")
            sps[$w $side $r]=$v
            sps[$w $side]+="$v "
            [[ -z $out ]] || echo "$w,$r,$side,$v" >>"$out"
        done
        ratios[$w]+="$(awk -v x="${sps[$w b $r]}" -v y="${sps[$w a $r]}" 'BEGIN { printf "%.4f", x / y }') "
        say "round $r $w: A ${sps[$w a $r]} B ${sps[$w b $r]} samples/s"
    done
done
printf '%-10s %14s %14s %16s %s\n' workload "A median" "B median" "B/A (median)" "B/A per round"
for w in "${wl[@]}"; do
    printf '%-10s %14s %14s %16s %s\n' "$w" "$(median <<<"${sps[$w a]}")" "$(median <<<"${sps[$w b]}")" \
        "$(median <<<"${ratios[$w]}")" "${ratios[$w]}"
done
