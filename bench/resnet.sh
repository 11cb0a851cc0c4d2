#!/usr/bin/env bash
# resnet.sh: dtrain against PyTorch training the same ResNet (ResNet-20, or
# any file inputs/gen-resnet.py writes) on synthetic 32x32x3 data, at 1 and 2
# data-parallel ranks and at fp32 and/or bf16, in one invocation.
#
# The design decision a reader must know: the machines this runs on are shared
# and noisy, so the baseline is never taken from an earlier run. Each round
# runs dtrain -np 1, PyTorch 1 process, dtrain -np 2 and PyTorch 2 processes
# (DDP over gloo) back to back (even rounds put PyTorch first within each rank
# count, so a slow drift favours neither), every run is a fresh process that
# trains E epochs, and only the last epoch is quoted (the first pays one-off
# costs: primitive creation, cold caches). With several precisions each rank
# count runs every precision's pair in turn (the order reversed on even
# rounds). The figures to quote are the medians over the rounds of each
# round's own ratios (dtrain/PyTorch at a rank count and precision,
# dtrain-bf16/PyTorch-fp32, dtrain-bf16/dtrain-fp32, np2/np1 for one
# framework), which cancel what a round's neighbours did to both sides.
#
# Usage: bench/resnet.sh [--build DIR] [--model FILE] [--precision LIST]
#            [--repeats R] [--epochs E] [--samples N] [--batch-size B]
#            [--dtrain-flags FLAGS] [--no-torch] [--out CSV]
# See bench/README-resnet.md for how to read the report.
set -euo pipefail

prog=resnet.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains a CIFAR ResNet (default ResNet-20, inputs/resnet20.cfg, 273,258
parameters; Adam 1e-3, one thread per rank) on N synthetic 32x32x3 images
with dtrain and with PyTorch (bench/torch_resnet.py), at 1 and 2 ranks and
at each precision, R rounds interleaved, and reports min/median/max global
samples/s of the last epoch of each run, the median per-round ratios
dtrain/PyTorch (and, with fp32 and bf16, dtrain-bf16/PyTorch-fp32 and
dtrain-bf16/dtrain-fp32), and each framework's 2-rank scaling.

Options:
  --build DIR       directory holding dtrain (default: $repo/build)
  --model FILE      a ResNet model file that inputs/gen-resnet.py writes
                    (default: $repo/inputs/resnet20.cfg; also
                    inputs/resnet32-wide4.cfg)
  --precision LIST  comma list of fp32, bf16 (default: fp32): dtrain
                    --precision P; PyTorch fp32 plain, bf16 under
                    torch.autocast("cpu", dtype=torch.bfloat16)
  --repeats R       rounds (default: 3)
  --epochs E        epochs per run; the last one is quoted (default: 2)
  --samples N       synthetic samples, all ranks together (default: 12800)
  --batch-size B    samples per rank per step (default: 64)
  --dtrain-flags FLAGS  more dtrain options for every dtrain run, one
                    word list (e.g. --winograd); the report names them
  --no-torch        skip PyTorch (dtrain at 1 and 2 ranks only)
  --out CSV         raw numbers, one row per epoch of every run (default:
                    $repo/bench/results/resnet-DATE.csv); every run's output
                    goes to the same name ending .log
  -h, --help        show this help

Environment:
  MPIRUN          launcher (default: mpirun)
  MPIRUN_FLAGS    extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
  TORCH_PYTHON    interpreter that has torch with gloo (default: /usr/bin/python3)
EOF
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"


build=$repo/build repeats=3 epochs=2 samples=12800 batch=64 out="" want_torch=1
model=$repo/inputs/resnet20.cfg precision_list=fp32 dtrain_flags=""
while (($#)); do
    case $1 in
        --build) (($# > 1)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --repeats) (($# > 1)) || die "--repeats needs a number"; repeats=$2; shift 2 ;;
        --repeats=*) repeats=${1#*=}; shift ;;
        --epochs) (($# > 1)) || die "--epochs needs a number"; epochs=$2; shift 2 ;;
        --epochs=*) epochs=${1#*=}; shift ;;
        --samples) (($# > 1)) || die "--samples needs a number"; samples=$2; shift 2 ;;
        --samples=*) samples=${1#*=}; shift ;;
        --batch-size) (($# > 1)) || die "--batch-size needs a number"; batch=$2; shift 2 ;;
        --batch-size=*) batch=${1#*=}; shift ;;
        --out) (($# > 1)) || die "--out needs a file name"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --model) (($# > 1)) || die "--model needs a file"; model=$2; shift 2 ;;
        --model=*) model=${1#*=}; shift ;;
        --precision) (($# > 1)) || die "--precision needs a list (fp32, bf16 or fp32,bf16)"; precision_list=$2; shift 2 ;;
        --precision=*) precision_list=${1#*=}; shift ;;
        --dtrain-flags) (($# > 1)) || die "--dtrain-flags needs a list of dtrain options"; dtrain_flags=$2; shift 2 ;;
        --dtrain-flags=*) dtrain_flags=${1#*=}; shift ;;
        --no-torch) want_torch=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --repeats "$repeats"
positive --epochs "$epochs"
positive --samples "$samples"
positive --batch-size "$batch"
((samples >= 2)) || die "--samples $samples: the 2-rank runs need at least 2"
bench_precisions "$precision_list"
read -r -a extra_flags <<<"$dtrain_flags"
[[ ${#extra_flags[@]} == 0 || ${extra_flags[0]} == -* ]] ||
    die "--dtrain-flags: expected dtrain options (--winograd ...), found '$dtrain_flags'"
[[ -f $model && -r $model ]] || die "--model $model: no such readable file"
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
# The PyTorch twin is built from the file's shape: n = [add] layers / 3 blocks
# per stage (depth 6n + 2), width = the first convolution's filters / 16. A
# file not of gen-resnet.py's form is refused; the parameter counts, compared
# after the runs, catch any difference left.
depth="" width=""
read -r depth width < <(awk '
    /^\[add\]/ { adds++ } /^\[conv2d\]/ { convs++ }
    /^filters *=/ && !f { f = $3 }
    END { if (adds % 3 == 0 && adds > 0 && f % 16 == 0 && f > 0 && convs == 2 * adds + 3) print 2 * adds + 2, f / 16 }' "$model") || true
[[ -n $depth ]] ||
    die "--model $model: not a ResNet of inputs/gen-resnet.py's form (3n [add] blocks, 6n + 3 [conv2d] layers, first filters a multiple of 16)"
model_name="ResNet-$depth"
((width == 1)) || model_name+=" x$width wide"

# ---- What to run ---------------------------------------------------------------
[[ -d $build ]] || die "--build $build: not a directory"
build=$(cd "$build" && pwd)
dtrain=$build/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
# Not "dtrain --help | grep -q": under pipefail grep's early exit fails the pipe.
dtrain_help=$("$dtrain" --help 2>&1) || true
[[ $dtrain_help == *--synthetic* ]] ||
    die "$dtrain has no --synthetic (built before it existed? rebuild it, or point --build elsewhere)"
# --oversubscribe lets -np 2 start on a one-CPU container (binding still holds
# where there are enough cores).
bench_launcher --oversubscribe

torch_python=${TORCH_PYTHON:-/usr/bin/python3}
if ((want_torch)) && ! "$torch_python" -c 'import numpy, torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    die "$torch_python cannot import numpy and torch with gloo (Debian: apt-get install python3-torch; or set TORCH_PYTHON, or pass --no-torch)"
fi

ncpu=$(nproc) # before OMP_NUM_THREADS is set: GNU nproc reports that instead
((ncpu >= 2)) || say "warning: only $ncpu CPU: the 2-rank runs share it and their figures mean little"

stamp=$(date +%Y%m%d-%H%M%S)
[[ -n $out ]] || out=$repo/bench/results/resnet-$stamp.csv
mkdir -p "$(dirname "$out")"
log=${out%.csv}.log
: >"$log"
rundir=$(mktemp -d "${TMPDIR:-/tmp}/resnet.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM

# The build directory may be rebuilt by someone else while this runs; every
# round must time the same binary, so time a copy (a libtool wrapper script
# cannot be copied, and is run in place).
if [[ $(head -c 4 "$dtrain" | od -An -c | tr -d ' ') == 177ELF ]]; then
    cp "$dtrain" "$rundir/dtrain"
    dtrain_run=$rundir/dtrain
else
    dtrain_run=$dtrain
fi

# ---- Metadata ------------------------------------------------------------------------
bench_about "$dtrain" "$ncpu"
# The CPU, its ISA and peaks, and the oneDNN kernel of every convolution
# (bench/lib.sh), printed before any figure.
bench_machine "$dtrain" "$build/bench/peak" "${precisions[@]}" -- \
    --synthetic "32x32x3:10:$((5 * batch))" --model "$model" --batch-size "$batch" --threads 1 --no-validation \
    "${extra_flags[@]}"
printf '# %s\n' "${machine[@]}"
meta=(
    "resnet: $model_name ($model), synthetic 32x32x3, 10 classes, $samples samples, batch $batch per rank, Adam 1e-3, one thread per rank"
    "precision: ${precisions[*]} (dtrain --precision P; PyTorch fp32 plain, bf16 under torch.autocast(\"cpu\", dtype=torch.bfloat16) around forward and loss)"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n) ($(uname -sr)), $ncpu CPUs: ${cpu_model:-unknown}; $busy_cores cores busy before the start"
    "dtrain: $dtrain_version, $dtrain, git $git_rev; options added to every run: ${dtrain_flags:-none}"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1) ($mpirun ${mpi_flags[*]} -np P --bind-to core)"
)
if ((want_torch)); then
    meta+=("pytorch: $("$torch_python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown) ($torch_python bench/torch_resnet.py --depth $depth --width $width, channels_last, DDP over gloo at 2 processes, process r bound to CPU r)")
else
    meta+=("pytorch: not run (--no-torch)")
fi
meta+=(
    "${machine[@]}"
    "rounds: $repeats; each run trains $epochs epoch(s), epoch $epochs is quoted"
    "csv: $out"
    "log: $log"
)

# ---- Running and parsing ---------------------------------------------------------------
# Every run's epochs become rows "epoch seconds samples_per_s loss accuracy cpu_cores comm_ms"
# ("-" where the program does not report the figure).
parse_dtrain() { # FILE: dtrain's --metrics csv, its "epoch" rows, columns found by name
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["kind"] == "epoch" {
            comm = (col["comm_ms"] && $col["comm_ms"] != "") ? $col["comm_ms"] : "-"
            print $col["epoch"], $col["seconds"], $col["samples_per_s"], $col["loss"], $col["accuracy"], "-", comm
        }' "$1"
}
parse_result() { # FILE: "RESULT framework=... epoch=K ... samples_per_s=X loss=L accuracy=A cpu_cores=C"
    awk '$1 == "RESULT" {
        delete f
        for (i = 2; i <= NF; i++) { eq = index($i, "="); f[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
        if (f["samples_per_s"] != "") print f["epoch"], f["seconds"], f["samples_per_s"], f["loss"], f["accuracy"], (f["cpu_cores"] == "" ? "-" : f["cpu_cores"]), "-"
    }' "$1"
}

{ printf '# %s\n' "${meta[@]}"; echo "round,run,precision,np,epoch,epochs,quoted,seconds,samples_per_s,loss,accuracy,cpu_cores,comm_ms_per_step,run_cpu_cores"; } >"$out"

failures=0
# RUN is "LABEL PRECISION", e.g. "dtrain-np1 bf16".
declare -A sps   # "RUN ROUND" -> the quoted epoch's global samples/s
declare -A cores # RUN -> space-separated CPU time / wall time of each whole run
declare -A comm  # RUN -> likewise, communication ms per step
declare -A params # framework -> trainable parameters it reported

# The CPU time of this shell's finished children, in seconds. The launchers
# (mpirun, torch.multiprocessing) wait for their ranks, so a run's ranks are
# in it once the run has ended: one measure of starvation for both frameworks.
hz=$(getconf CLK_TCK)
child_cpu() {
    awk -v hz="$hz" '{ sub(/.*\) /, ""); printf "%.2f\n", ($14 + $15) / hz }' "/proc/$$/stat"
}

# run ROUND LABEL PRECISION NP PARSER RESULTFILE COMMAND...: one measurement.
# It counts only if it exited 0 and printed its last epoch with a finite loss
# and positive samples/s (synthetic data: nothing to learn, so no loss bound).
run() {
    local round=$1 label=$2 prec=$3 np=$4 parser=$5 result=$6 rc=0 file rows quoted why="" s l a m cpu0 t0 run_cores
    shift 6
    file=$rundir/$round-$label-$prec.out
    cpu0=$(child_cpu) t0=$(date +%s.%N)
    "$@" >"$file" 2>&1 </dev/null || rc=$?
    run_cores=$(awk -v c0="$cpu0" -v c1="$(child_cpu)" -v t0="$t0" -v t1="$(date +%s.%N)" \
        'BEGIN { printf "%.2f", (c1 - c0) / (t1 - t0) }')
    { echo "==== round $round: $label $prec (exit $rc): $*"; cat "$file"; } >>"$log"
    rows=""
    [[ ! -r $result ]] || rows=$("$parser" "$result")
    quoted=$(awk -v e="$epochs" '$1 == e { print; exit }' <<<"$rows")
    if ((rc != 0)); then
        why="exited with status $rc"
    elif [[ -z $quoted ]]; then
        why="printed no throughput for epoch $epochs"
    elif ! awk '{ exit !($3 > 0 && $4 == $4 + 0 && $4 > -1e30 && $4 < 1e30) }' <<<"$quoted"; then
        why="epoch $epochs looks wrong: $quoted"
    fi
    if [[ -n $rows ]]; then
        awk -v r="$round" -v lb="$label" -v p="$prec" -v np="$np" -v e="$epochs" -v rc="$run_cores" -v OFS=, '{
            for (i = 6; i <= 7; i++) if ($i == "-") $i = ""
            print r, lb, p, np, $1, e, ($1 == e), $2, $3, $4, $5, $6, $7, rc }' <<<"$rows" >>"$out"
    fi
    case $label in
        dtrain-np1) params[dtrain]=$(sed -n 's/.*(\([0-9]*\) parameters).*/\1/p' "$file" | head -n 1) ;;
        pytorch-np1) params[pytorch]=$(sed -n 's/^torch_resnet.py: ResNet-.*, \([0-9]*\) trainable parameters.*/\1/p' "$file" | head -n 1) ;;
    esac
    if [[ -n $why ]]; then
        failures=$((failures + 1))
        say "round $round: $label $prec $why; its last lines:"
        tail -n 15 "$file" | sed 's/^/    /' >&2
        return 1
    fi
    read -r _ _ s l a _ m <<<"$quoted"
    sps["$label $prec $round"]=$s
    cores["$label $prec"]+="$run_cores "
    [[ $m == - ]] || comm["$label $prec"]+="$m "
    say "round $round/$repeats: $(printf '%-17s %7.0f samples/s  loss %.4f  accuracy %.4f  %s cores' "$label $prec" "$s" "$l" "$a" "$run_cores")"
}

dtrain_case() { # ROUND NP PRECISION
    local metrics=$rundir/$1-dtrain-np$2-$3.csv
    run "$1" "dtrain-np$2" "$3" "$2" parse_dtrain "$metrics" \
        "$mpirun" "${mpi_flags[@]}" -np "$2" --bind-to core "$dtrain_run" \
        --synthetic "32x32x3:10:$samples" --model "$model" --batch-size "$batch" --epochs "$epochs" \
        --threads 1 --no-validation --precision "$3" --metrics "$metrics" "${extra_flags[@]}" || true
}
torch_case() { # ROUND NP PRECISION
    local file=$rundir/$1-pytorch-np$2-$3.out
    # Bound like mpirun --bind-to core binds dtrain: rank r on CPU r.
    run "$1" "pytorch-np$2" "$3" "$2" parse_result "$file" \
        "$torch_python" "$here/torch_resnet.py" --samples "$samples" --epochs "$epochs" \
        --batch-size "$batch" --world-size "$2" --threads 1 --bind-to-core \
        --depth "$depth" --width "$width" --precision "$3" || true
}

# One thread everywhere, including any OpenMP/BLAS pool a library starts on its own.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

plan="dtrain -np 1"
((want_torch)) && plan+=", PyTorch 1 process"
plan+=", dtrain -np 2"
((want_torch)) && plan+=", PyTorch 2 processes"
((${#precisions[@]} == 1)) || plan="{$plan} at each of ${precisions[*]}"
say "$repeats round(s) of: $plan; $epochs epoch(s) of $samples samples each (output: $log)"
for ((r = 1; r <= repeats; r++)); do
    order=("${precisions[@]}")
    ((r % 2)) || for ((i = 0; i < ${#precisions[@]}; i++)); do order[i]=${precisions[-1 - i]}; done
    for np in 1 2; do
        for p in "${order[@]}"; do
            if ((!want_torch)); then
                dtrain_case "$r" "$np" "$p"
            elif ((r % 2)); then
                dtrain_case "$r" "$np" "$p"; torch_case "$r" "$np" "$p"
            else
                torch_case "$r" "$np" "$p"; dtrain_case "$r" "$np" "$p"
            fi
        done
    done
done

# ---- Report ------------------------------------------------------------------------------
# stats, median, ratios and ratio_row: bench/lib.sh
values() { # RUN -> its quoted samples/s, one per valid round
    local r
    for ((r = 1; r <= repeats; r++)); do [[ -z ${sps["$1 $r"]:-} ]] || echo "${sps["$1 $r"]}"; done
}
row() { # TEXT RUN
    local s n c m
    s=$(values "$2" | stats)
    n=$(values "$2" | wc -l)
    c=$(median <<<"${cores[$2]:-}")
    m=$(median <<<"${comm[$2]:-}")
    [[ -z $c ]] || c=$(printf '%.2f' "$c")
    [[ -z $m ]] || m=$(printf '%.1f' "$m")
    if [[ -n $s ]]; then
        read -r mn md mx <<<"$s"
        printf '%-27s %9.0f %9.0f %9.0f %6s %6s %8s\n' "$1" "$mn" "$md" "$mx" "$n/$repeats" "${c:--}" "${m:--}"
    else
        printf '%-27s %9s %9s %9s %6s %6s %8s\n' "$1" - - - "0/$repeats" - -
    fi
}

printf '# %s\n' "${meta[@]}"
echo "#"
echo "# global training samples/s, epoch $epochs of $epochs, over $repeats round(s); runs = rounds that gave a valid figure;"
echo "# cores = median CPU time / wall time of the whole run, all its processes, start-up included"
echo "#   (well under 1 at one rank or 2 at two: other work took the CPU from it);"
echo "# comm = dtrain's median all-reduce time per step, waiting for the other rank included"
printf '%-27s %9s %9s %9s %6s %6s %8s\n' run min median max runs cores "comm ms"
for p in "${precisions[@]}"; do
    row "dtrain $p -np 1" "dtrain-np1 $p"
    ((want_torch)) && row "pytorch $p 1 process" "pytorch-np1 $p"
    row "dtrain $p -np 2" "dtrain-np2 $p"
    ((want_torch)) && row "pytorch $p 2 processes" "pytorch-np2 $p"
done
echo
echo "# median over the rounds of each round's own ratio (range, rounds with both figures)"
for p in "${precisions[@]}"; do
    if ((want_torch)); then
        ratio_row "dtrain-$p / pytorch-$p at 1 rank" "dtrain-np1 $p" "pytorch-np1 $p"
        ratio_row "dtrain-$p / pytorch-$p at 2 ranks" "dtrain-np2 $p" "pytorch-np2 $p"
    fi
done
if ((${#precisions[@]} == 2)); then
    if ((want_torch)); then
        ratio_row "dtrain-bf16 / pytorch-fp32 at 1 rank" "dtrain-np1 bf16" "pytorch-np1 fp32"
        ratio_row "dtrain-bf16 / pytorch-fp32 at 2 ranks" "dtrain-np2 bf16" "pytorch-np2 fp32"
    fi
    ratio_row "dtrain-bf16 / dtrain-fp32 at 1 rank" "dtrain-np1 bf16" "dtrain-np1 fp32"
    ratio_row "dtrain-bf16 / dtrain-fp32 at 2 ranks" "dtrain-np2 bf16" "dtrain-np2 fp32"
    if ((want_torch)); then
        ratio_row "pytorch-bf16 / pytorch-fp32 at 1 rank" "pytorch-np1 bf16" "pytorch-np1 fp32"
        ratio_row "pytorch-bf16 / pytorch-fp32 at 2 ranks" "pytorch-np2 bf16" "pytorch-np2 fp32"
    fi
fi
for p in "${precisions[@]}"; do
    ratio_row "dtrain-$p scaling np2 / np1" "dtrain-np2 $p" "dtrain-np1 $p"
    ((want_torch)) && ratio_row "pytorch-$p scaling 2 / 1 processes" "pytorch-np2 $p" "pytorch-np1 $p"
done
echo "# (ideal scaling on 2 idle cores: 2.00)"
if ((want_torch)); then
    for p in "${precisions[@]}"; do
        goal_row "goal dtrain-$p >= 1.5 x pytorch-$p at 1 rank" 1.5 "$(values "pytorch-np1 $p" | median)" "$p" "$batch"
    done
    echo
    echo "trainable parameters: dtrain ${params[dtrain]:-?}, pytorch ${params[pytorch]:-?}"
    if [[ -n ${params[dtrain]:-} && -n ${params[pytorch]:-} && ${params[dtrain]} != "${params[pytorch]}" ]]; then
        say "the two models differ: dtrain has ${params[dtrain]} parameters, PyTorch ${params[pytorch]}"
        failures=$((failures + 1))
    fi
fi

if ((failures)); then
    say "$failures run(s) failed or gave no valid throughput (details above and in $log)"
    exit 1
fi
