#!/usr/bin/env bash
# pipeline.sh: --pipeline-stages P --micro-batches M against data parallelism
# on the same ranks with the same global batch, in one invocation: dtrain's
# own pipeline bubble beside the 1F1B ideal (P-1)/(M+P-1), and the step time
# against data parallel.
#
#   pipelined      P ranks, one replica (D = 1): --pipeline-stages P
#                  --micro-batches M --batch-size B (B is the replica's batch);
#   data parallel  the same P ranks: --batch-size B/P each, global batch B.
#
# Each round runs, for every P, data parallel once and the pipelined run at
# every M, back to back (even rounds in the reverse order). Every run is a
# fresh process of 2 epochs of S steps. The bubble is the run summary's (time
# in receives and waits over that plus busy time, summed over the ranks, for
# the whole run); samples/s are epoch 2's from --metrics. Figures are medians
# over the rounds; the step-time ratio pipelined / data parallel is the
# median of each round's own ratio (data parallel's samples/s over the
# pipelined run's: the same global batch, so the inverse of the step times).
#
# The design decision a reader must know: ranks are not bound (--bind-to
# none, --oversubscribe), and where P exceeds the cores both runs get
# --mca mpi_yield_when_idle 1 and share the cores alike. A pipelined rank
# waiting for a core is then counted as waiting for its neighbour, so above
# one rank a core the measured bubble is wall clock, not the schedule's alone.
#
# Usage: bench/pipeline.sh [--build DIR] [--model NAME] [--synthetic SPEC]
#            [--stages LIST] [--micro LIST] [--repeats R] [--steps S]
#            [--batch B] [--out CSV]
set -euo pipefail

prog=pipeline.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Options:
  --build DIR        directory holding dtrain (default: $repo/build)
  --model NAME       model file inputs/NAME.cfg (default: resnet20)
  --synthetic SPEC   --synthetic HxWxC:CLASSES:N of every run (default: 32x32x3:10:4096)
  --stages LIST      pipeline stages P, each run on P ranks (default: 2,4)
  --micro LIST       micro-batches M (default: 1,2,4,8)
  --repeats R        rounds (default: 3)
  --steps S          --steps-per-epoch of each 2-epoch run (default: 20)
  --batch B          global batch: the pipeline's, data parallel's B/P a rank (default: 64)
  --out CSV          raw numbers, one row per run (default: none)
  -h, --help         show this help
EOF
    bench_usage_env
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

build=$repo/build model=resnet20 synth=32x32x3:10:4096 stages=2,4 micros=1,2,4,8 repeats=3 steps=20 batch=64 out=""
while (($#)); do
    case $1 in
        --build | --model | --synthetic | --stages | --micro | --repeats | --steps | --batch | --out)
            (($# > 1)) || die "$1 needs a value"
            case $1 in
                --build) build=$2 ;; --model) model=$2 ;; --synthetic) synth=$2 ;; --stages) stages=$2 ;;
                --micro) micros=$2 ;; --repeats) repeats=$2 ;; --steps) steps=$2 ;; --batch) batch=$2 ;;
                --out) out=$2 ;;
            esac
            shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --repeats "$repeats"
positive --steps "$steps"
positive --batch "$batch"
[[ $synth =~ ^[0-9]+x[0-9]+x[0-9]+:[0-9]+:[0-9]+$ ]] || die "--synthetic: expected HxWxC:CLASSES:N, found '$synth'"
[[ $stages =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--stages: expected a comma list of stage counts, found '$stages'"
[[ $micros =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--micro: expected a comma list of micro-batch counts, found '$micros'"
IFS=, read -r -a plist <<<"$stages"
IFS=, read -r -a mlist <<<"$micros"
for P in "${plist[@]}"; do
    ((P >= 2)) || die "--stages: a pipeline needs at least 2 stages, found '$P'"
    ((batch % P == 0)) || die "--batch: $batch does not split evenly over $P data-parallel ranks"
done
for M in "${mlist[@]}"; do
    ((M <= batch)) || die "--micro: $M micro-batches of a batch of $batch leave some empty"
done
[[ -r $repo/inputs/$model.cfg ]] || die "--model: no model file inputs/$model.cfg"
dtrain=$build/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
grep -q -- '--pipeline-stages' <<<"$("$dtrain" --help 2>&1 || true)" || die "$dtrain has no --pipeline-stages (an older build?)"

bench_launcher
mpi_flags+=(--bind-to none --oversubscribe)
ncpu=$(env -u OMP_NUM_THREADS nproc) # GNU nproc reports OMP_NUM_THREADS when set
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rundir=$(mktemp -d "${TMPDIR:-/tmp}/pipeline.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM
bench_about "$dtrain" "$ncpu"
# pair_median and pair_ratio (lib.sh) go over rounds 1..$pairs.
pairs=$repeats
printf '# pipeline: --pipeline-stages P --micro-batches M against data parallel on the same P ranks\n# date: %s\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '# host: %s, %s CPUs: %s; %s cores busy before the start\n' "$(uname -n)" "$ncpu" "${cpu_model:-unknown}" "$busy_cores"
printf '# dtrain: %s, %s, git %s\n# mpi: %s (%s %s)\n' "$dtrain_version" "$dtrain" "$git_rev" \
    "$("$mpirun" --version 2>/dev/null | head -n 1)" "$mpirun" "${mpi_flags[*]}"
echo "# $model on --synthetic $synth, global batch $batch, 2 epochs of $steps steps: bubble over the whole run," \
    "samples/s of epoch 2; $repeats round(s)"
[[ -z $out ]] || echo "P,M,round,run,steps,seconds,samples_per_s,bubble_pct,ideal_pct,busy_min_s,busy_max_s" >"$out"
failures=0

declare -A sps bub ideal imb # "P-M ROUND pipe|dp" -> samples/s; "P-M ROUND pipe" -> bubble %, ideal %, busy max/min
declare -A cut               # "P-M" -> the first successful run's stage cut
# shellcheck disable=SC2034  # bub, ideal and imb are read through pair_median's nameref
run() { # P M ROUND: M 0 is data parallel
    local P=$1 M=$2 r=$3 rc=0 one=$rundir/$1-$2-$3 row what args=() yield=() line
    if ((M == 0)); then
        what="P=$P round $r data parallel"
        args=(--batch-size $((batch / P)))
    else
        what="P=$P M=$M round $r pipelined"
        args=(--batch-size "$batch" --pipeline-stages "$P" --micro-batches "$M")
    fi
    ((P <= ncpu)) || yield=(--mca mpi_yield_when_idle 1) # more ranks than cores: a waiting rank gives its core up
    timeout -k 5 600 "$mpirun" "${mpi_flags[@]}" "${yield[@]}" -np "$P" "$dtrain" --synthetic "$synth" \
        --model "$repo/inputs/$model.cfg" "${args[@]}" --epochs 2 --steps-per-epoch "$steps" --seed 3 \
        --no-validation --threads 1 --metrics "$one.csv" >"$one.out" 2>&1 </dev/null || rc=$?
    row=""
    ((rc != 0)) || row=$(bench_epoch_row "$one.csv" 2)
    line=""
    if ((M > 0)); then
        line=$(sed -n 's/.*: bubble \([0-9.]*\)% of .* = \([0-9.]*\)%); busy \([0-9.]*\)-\([0-9.]*\) s a rank$/\1 \2 \3 \4/p' \
            "$one.out")
        [[ -n $line ]] || row=""
    fi
    if [[ -z $row ]]; then
        bench_no_figures "$what" "$rc" "$one.out" 2
        return 0
    fi
    read -r st secs rate _ <<<"$row"
    if ((M == 0)); then
        for M in "${mlist[@]}"; do sps["$P-$M $r dp"]=$rate; done
        [[ -z $out ]] || echo "$P,,$r,dp,$st,$secs,$rate,,,," >>"$out"
        say "$what: $(printf '%.0f' "$rate") samples/s"
        return 0
    fi
    local b i lo hi
    read -r b i lo hi <<<"$line"
    sps["$P-$M $r pipe"]=$rate bub["$P-$M $r pipe"]=$b ideal["$P-$M $r pipe"]=$i
    imb["$P-$M $r pipe"]=$(awk -v l="$lo" -v h="$hi" 'BEGIN { if (l > 0) printf "%.3f", h / l }')
    [[ -n ${cut["$P-$M"]:-} ]] || cut["$P-$M"]=$(sed -n 's/.*strategy pipeline: [^,]*, \(layers [^)]*)\).*/\1/p' "$one.out")
    [[ -z $out ]] || echo "$P,$M,$r,pipe,$st,$secs,$rate,$b,$i,$lo,$hi" >>"$out"
    say "$what: $(printf '%.0f' "$rate") samples/s, bubble $b% (ideal $i%)"
}

for ((r = 1; r <= repeats; r++)); do
    for P in "${plist[@]}"; do
        order=(0 "${mlist[@]}")
        if ((r % 2 == 0)); then # reversed: a slow drift favours no run
            order=()
            for M in 0 "${mlist[@]}"; do order=("$M" "${order[@]}"); done
        fi
        for M in "${order[@]}"; do run "$P" "$M" "$r"; done
    done
done

head='%2s %3s %5s %9s %8s %9s %7s %9s %9s %12s %7s\n'
# shellcheck disable=SC2059
printf "$head" P M ranks "bubble %" "ideal %" "diff pts" imbal "pipe sps" "dp sps" "step pipe/dp" rounds
for P in "${plist[@]}"; do
    for M in "${mlist[@]}"; do
        k="$P-$M"
        b=$(pair_median bub "$k" pipe) i=$(pair_median ideal "$k" pipe) m=$(pair_median imb "$k" pipe)
        a=$(pair_median sps "$k" pipe) d=$(pair_median sps "$k" dp)
        pair_ratio sps "$k" pipe dp
        diff=-
        [[ -z $b || -z $i ]] || diff=$(awk -v b="$b" -v i="$i" 'BEGIN { printf "%+.1f", b - i }')
        [[ -z $b ]] || b=$(printf '%.1f' "$b")
        [[ -z $i ]] || i=$(printf '%.1f' "$i")
        [[ -z $m ]] || m=$(printf '%.2f' "$m")
        [[ -z $ratio ]] || ratio=$(printf '%.3f' "$ratio")
        # shellcheck disable=SC2059
        printf "$head" "$P" "$M" "$P" "${b:--}" "${i:--}" "$diff" "${m:--}" "$(printf '%.1f' "${a:-0}")" \
            "$(printf '%.1f' "${d:-0}")" "${ratio:--}" "$nratios/$repeats"
    done
done
echo "# bubble: dtrain's (receives and waits over busy + those, all ranks, whole run); ideal: its (P-1)/(M+P-1);"
echo "# imbal: slowest stage's busy time over the fastest's; step pipe/dp: the median of each round's own ratio"
for P in "${plist[@]}"; do
    if ((P > ncpu)); then
        echo "# P=$P: $P ranks share this machine's $ncpu cores (oversubscribed, mpi_yield_when_idle): a rank waiting" \
            "for a core counts as bubble, so this bubble is wall clock, not the schedule's alone"
    fi
done
for P in "${plist[@]}"; do
    for M in "${mlist[@]}"; do
        [[ -z ${cut["$P-$M"]:-} ]] || echo "# cut P=$P M=$M (first run): ${cut["$P-$M"]}"
    done
done
if ((failures)); then
    say "$failures run(s) failed or gave no figures (details above)"
    exit 1
fi
