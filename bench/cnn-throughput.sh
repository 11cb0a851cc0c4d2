#!/usr/bin/env bash
# cnn-throughput.sh: dtrain's CNN training throughput against PyTorch and
# Keras on the same model, data, batch size and one core, in one invocation.
#
# The design decision a reader must know: the machines this runs on are shared
# and noisy, so the baselines are never taken from an earlier run. Each round
# runs dtrain, PyTorch and Keras back to back (interleaved), every run is a
# fresh process that trains E epochs of the full train split, and only the
# last epoch is quoted: the first pays one-off costs (Keras's tracing, cold
# caches) and can also run faster than later ones, before denormal floats
# appear (bench/README.md). Medians over the rounds are compared; with
# --precision fp32,bf16 also each round's own ratios (dtrain-bf16 /
# PyTorch-fp32 and the like), as bench/resnet.sh reports them.
#
# Usage: bench/cnn-throughput.sh [--build DIR] [--data FILE] [--repeats R]
#            [--epochs E] [--precision LIST] [--no-keras] [--no-torch] [--no-scaling]
#            [--pin-baselines] [--dtrain-flags FLAGS] [--out CSV]
# See bench/README.md for how to read the report.
set -euo pipefail

prog=cnn-throughput.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains the seed CNN (conv32-pool-conv64-pool-dense128-dropout-dense10, Adam
1e-3, batch 64, one thread) with dtrain, PyTorch and Keras, R rounds
interleaved, and reports min/median/max samples/s of the last epoch of each
run, dtrain's ratios to the baselines, and dtrain's 2-rank scaling.

Options:
  --build DIR    directory holding dtrain and dtrain-prep (default: ./dtrain)
  --data FILE    HDF5 file from dtrain-prep (default: $repo/data/fashion-mnist.h5,
                 made with dtrain-prep if missing)
  --repeats R    rounds (default: 3)
  --epochs E     epochs per run; the last one is quoted (default: 2)
  --precision LIST  comma list of fp32, bf16 (default: fp32): each round runs
                 dtrain --precision P and PyTorch at P (bf16: torch.autocast
                 on the CPU) for each; Keras and the scaling runs use the
                 first; with both, the report adds the median per-round
                 ratios dtrain-bf16/PyTorch-fp32 and dtrain-bf16/dtrain-fp32
  --no-keras     skip Keras (and the .venv-bench/ it needs)
  --no-torch     skip PyTorch
  --no-scaling   skip the -np 2 and concurrent -np 1 runs
  --pin-baselines  run PyTorch and Keras under taskset -c 0 (default: not
                 pinned; they use one compute thread, and the report shows
                 how many cores' worth of CPU time they really used)
  --dtrain-flags FLAGS  more dtrain options for every dtrain run, one word
                 list (e.g. --winograd); the report names them
  --out CSV      raw numbers (default: bench/results/cnn-throughput-DATE.csv);
                 every run's output goes to the same name with .log
  -h, --help     show this help

Environment:
  MPIRUN          launcher (default: mpirun)
  MPIRUN_FLAGS    extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
  TORCH_PYTHON    interpreter that has torch and h5py (default: /usr/bin/python3)
  VENV_PYTHON     interpreter that makes .venv-bench/ (default: /usr/bin/python3)
EOF
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"


build="" data="" repeats=3 epochs=2 out="" precision_list=fp32 dtrain_flags=""
want_keras=1 want_torch=1 want_scaling=1 want_pin=0
while (($#)); do
    case $1 in
        --build) (($# > 1)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --data) (($# > 1)) || die "--data needs a file"; data=$2; shift 2 ;;
        --data=*) data=${1#*=}; shift ;;
        --repeats) (($# > 1)) || die "--repeats needs a number"; repeats=$2; shift 2 ;;
        --repeats=*) repeats=${1#*=}; shift ;;
        --epochs) (($# > 1)) || die "--epochs needs a number"; epochs=$2; shift 2 ;;
        --epochs=*) epochs=${1#*=}; shift ;;
        --out) (($# > 1)) || die "--out needs a file name"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --precision) (($# > 1)) || die "--precision needs a list (fp32, bf16 or fp32,bf16)"; precision_list=$2; shift 2 ;;
        --precision=*) precision_list=${1#*=}; shift ;;
        --no-keras) want_keras=0; shift ;;
        --no-torch) want_torch=0; shift ;;
        --no-scaling) want_scaling=0; shift ;;
        --pin-baselines) want_pin=1; shift ;;
        --dtrain-flags) (($# > 1)) || die "--dtrain-flags needs a list of dtrain options"; dtrain_flags=$2; shift 2 ;;
        --dtrain-flags=*) dtrain_flags=${1#*=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --repeats "$repeats"
positive --epochs "$epochs"
bench_precisions "$precision_list"
read -r -a extra_flags <<<"$dtrain_flags"
[[ ${#extra_flags[@]} == 0 || ${extra_flags[0]} == -* ]] ||
    die "--dtrain-flags: expected dtrain options (--winograd ...), found '$dtrain_flags'"

# ---- What to run ---------------------------------------------------------------
if [[ -n $build ]]; then
    [[ -d $build ]] || die "--build $build: not a directory"
    dtrain=$(cd "$build" && pwd)/dtrain
else
    dtrain=$PWD/dtrain
fi
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
bench_default_data "$dtrain"

bench_launcher

torch_python=${TORCH_PYTHON:-/usr/bin/python3}
if ((want_torch)) && ! "$torch_python" -c 'import torch, h5py' 2>/dev/null; then
    die "$torch_python cannot import torch and h5py (Debian: apt-get install python3-torch python3-h5py; or set TORCH_PYTHON, or pass --no-torch)"
fi

ncpu=$(nproc)
if ((want_scaling)) && ((ncpu < 2)); then
    say "only $ncpu CPU: skipping the scaling runs"
    want_scaling=0
fi
# Not pinned by default: TensorFlow hands work between its compute thread and
# helper threads, and squeezed onto one core it idles a third of the time
# (measured: 0.68 cores busy, 30% fewer samples/s), while unpinned it still
# uses 1.0 cores' worth of CPU time. The report prints that figure.
pin=() pin_note="not pinned"
if ((want_pin)); then
    command -v taskset >/dev/null || die "--pin-baselines needs taskset (Debian: util-linux)"
    pin=(taskset -c 0) pin_note="pinned to CPU 0"
fi

stamp=$(date +%Y%m%d-%H%M%S)
if [[ -z $out ]]; then
    out=$repo/bench/results/cnn-throughput-$stamp.csv
fi
mkdir -p "$(dirname "$out")"
log=${out%.csv}.log
: >"$log"
rundir=$(mktemp -d "${TMPDIR:-/tmp}/cnn-throughput.XXXXXX")
bg_pids=()
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$rundir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- Keras's virtual environment ---------------------------------------------------
venv=$repo/.venv-bench
keras_note=""
keras_check='import keras, tensorflow, h5py'
if ((want_keras)) && ! "$venv/bin/python" -c "$keras_check" 2>/dev/null; then
    venv_python=${VENV_PYTHON:-/usr/bin/python3}
    say "installing tensorflow-cpu and h5py into $venv (a few minutes; output in $log)"
    if { echo "==== venv: $venv_python -m venv $venv && pip install tensorflow-cpu h5py"
         "$venv_python" -m venv "$venv" &&
         "$venv/bin/python" -m pip install tensorflow-cpu h5py; } >>"$log" 2>&1 &&
       "$venv/bin/python" -c "$keras_check" 2>>"$log"; then
        say "installed"
    else
        keras_note="not run: installing tensorflow-cpu into $venv failed (see $log)"
        say "Keras $keras_note; going on without it"
        want_keras=0
    fi
fi

# ---- Metadata ------------------------------------------------------------------------
py_version() { # PYTHON CODE
    "$1" -c "$2" 2>/dev/null || echo unknown
}
bench_about "$dtrain" "$(nproc)"
# The CPU, its ISA and peaks, and the oneDNN kernel of every convolution
# (bench/lib.sh), printed before any figure.
bench_machine "$dtrain" "$(dirname "$dtrain")/bench/peak" "${precisions[@]}" -- \
    "$data" --batch-size 64 --threads 1 --no-validation "${extra_flags[@]}"
printf '# %s\n' "${machine[@]}"
meta=(
    "cnn-throughput: seed CNN, batch 64, Adam 1e-3, one thread per process"
    "precision: ${precisions[*]} (dtrain --precision P, PyTorch bf16 under torch.autocast on the CPU; Keras and the scaling runs at ${precisions[0]})"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n) ($(uname -sr)), $ncpu CPUs: ${cpu_model:-unknown}; $busy_cores cores busy before the start"
    "dtrain: $dtrain_version, $dtrain, git $git_rev; options added to every run: ${dtrain_flags:-none}"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1) ($mpirun ${mpi_flags[*]} --bind-to core)"
)
if ((want_torch)); then
    meta+=("pytorch: $(py_version "$torch_python" 'import torch; print(torch.__version__)') ($torch_python, channels_last, $pin_note)")
else
    meta+=("pytorch: not run (--no-torch)")
fi
if ((want_keras)); then
    meta+=("keras: $(py_version "$venv/bin/python" 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"; import keras, tensorflow as tf; print(keras.__version__, "tensorflow", tf.__version__)') ($venv, $pin_note)")
else
    meta+=("keras: ${keras_note:-not run (--no-keras)}")
fi
meta+=(
    "${machine[@]}"
    "data: $data"
    "rounds: $repeats; each run trains $epochs epoch(s), epoch $epochs is quoted"
    "csv: $out"
    "log: $log"
)

# ---- Running and parsing ---------------------------------------------------------------
# Every run's epochs become rows "epoch seconds samples_per_s loss accuracy cpu_cores"
# (cpu_cores "-" where the program does not report it).
parse_dtrain() { # dtrain's progress: "Epoch 2/2 - 9.81 s - 6116 samples/s - loss: 0.51 - accuracy: 0.81"
    awk '/^Epoch [0-9]+\/[0-9]+ / {
        split($2, ep, "/"); secs = "nan"; sps = ""; loss = "nan"; acc = "nan"
        if (match($0, / - [0-9.]+ s - /)) secs = substr($0, RSTART + 3, RLENGTH - 8)
        if (match($0, /[0-9.]+ samples\/s/)) sps = substr($0, RSTART, RLENGTH - 10)
        if (match($0, / loss: [^ ]+/)) loss = substr($0, RSTART + 7, RLENGTH - 7)
        if (match($0, / accuracy: [^ ]+/)) acc = substr($0, RSTART + 11, RLENGTH - 11)
        if (sps != "") print ep[1], secs, sps, loss, acc, "-"
    }' "$1"
}
parse_result() { # the Python baselines: "RESULT framework=... epoch=K ... samples_per_s=X loss=L accuracy=A cpu_cores=C"
    awk '$1 == "RESULT" {
        delete f
        for (i = 2; i <= NF; i++) { eq = index($i, "="); f[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
        if (f["samples_per_s"] != "") print f["epoch"], f["seconds"], f["samples_per_s"], f["loss"], f["accuracy"], (f["cpu_cores"] == "" ? "-" : f["cpu_cores"])
    }' "$1"
}

csv_header="round,run,precision,np,epoch,epochs,quoted,seconds,samples_per_s,loss,accuracy,cpu_cores"
{ printf '# %s\n' "${meta[@]}"; echo "$csv_header"; } >"$out"

failures=0
# RUN is "LABEL PRECISION", e.g. "pytorch bf16".
declare -A results # RUN -> space-separated quoted samples/s, one per round
declare -A cores   # RUN -> likewise, the quoted epoch's cpu_cores
declare -A sps     # "RUN ROUND" -> that round's quoted samples/s (ratio_row: bench/lib.sh)

# finish ROUND LABEL PRECISION NP PARSER RC LOGFILE: checks and records one
# finished run. A run counts only if it exited 0, printed its last epoch, and
# learned something in it (mean loss below ln 10, the loss of a uniform guess).
finish() {
    local round=$1 label=$2 prec=$3 np=$4 parser=$5 rc=$6 file=$7 rows quoted why=""
    { echo "==== round $round: $label $prec (exit $rc)"; cat "$file"; } >>"$log"
    rows=$("$parser" "$file")
    quoted=$(awk -v e="$epochs" '$1 == e { print; exit }' <<<"$rows")
    if ((rc != 0)); then
        why="exited with status $rc"
    elif [[ -z $quoted ]]; then
        why="printed no throughput for epoch $epochs"
    elif ! awk '{ exit !($3 > 0 && $4 == $4 + 0 && $4 < 2.302585) }' <<<"$quoted"; then
        read -r _ _ last_sps last_loss _ <<<"$quoted"
        why="epoch $epochs looks wrong: $last_sps samples/s, loss $last_loss (want > 0, and a loss below ln 10 = 2.3026)"
    fi
    if [[ -n $rows ]]; then
        awk -v r="$round" -v l="$label" -v p="$prec" -v np="$np" -v e="$epochs" -v OFS=, \
            '{ print r, l, p, np, $1, e, ($1 == e), $2, $3, $4, $5, ($6 == "-" ? "" : $6) }' <<<"$rows" >>"$out"
    fi
    if [[ -n $why ]]; then
        failures=$((failures + 1))
        say "round $round: $label $prec $why; its last lines:"
        tail -n 15 "$file" | sed 's/^/    /' >&2
        last_sps=""
        return 1
    fi
    read -r _ _ last_sps last_loss last_acc last_cores <<<"$quoted"
    results["$label $prec"]+="$last_sps "
    sps["$label $prec $round"]=$last_sps
    [[ $last_cores == - ]] || cores["$label $prec"]+="$last_cores "
    say "round $round/$repeats: $(printf '%-22s %8.0f samples/s  loss %s  accuracy %s' "$label $prec" "$last_sps" "$last_loss" "$last_acc")"
}

# run ROUND LABEL PRECISION NP PARSER COMMAND...: runs one measurement in the foreground.
run() {
    local round=$1 label=$2 prec=$3 np=$4 parser=$5 rc=0 file
    shift 5
    file=$rundir/$round-$label-$prec.out
    "$@" >"$file" 2>&1 </dev/null || rc=$?
    finish "$round" "$label" "$prec" "$np" "$parser" "$rc" "$file"
}

p0=${precisions[0]}
dtrain_args=("$data" --epochs "$epochs" --batch-size 64 --no-validation --threads 1 "${extra_flags[@]}")
# One thread everywhere, including any OpenMP/BLAS pool a library starts on its own.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2

plan="dtrain -np 1"
((want_torch)) && plan+=", PyTorch"
((${#precisions[@]} == 1)) || plan+=" (each at ${precisions[*]})"
((want_keras)) && plan+=", Keras"
((want_scaling)) && plan+=", dtrain -np 2, 2 x dtrain -np 1 at once"
say "$repeats round(s) of: $plan; $epochs epoch(s) each"
for ((r = 1; r <= repeats; r++)); do
    order=("${precisions[@]}")
    ((r % 2)) || for ((i = 0; i < ${#precisions[@]}; i++)); do order[i]=${precisions[-1 - i]}; done
    for p in "${order[@]}"; do
        run "$r" dtrain-np1 "$p" 1 parse_dtrain "$mpirun" "${mpi_flags[@]}" -np 1 --bind-to core "$dtrain" \
            "${dtrain_args[@]}" --precision "$p" || true
        if ((want_torch)); then
            run "$r" pytorch "$p" 1 parse_result "${pin[@]}" "$torch_python" "$here/torch_cnn.py" \
                --data "$data" --epochs "$epochs" --batch-size 64 --threads 1 --precision "$p" || true
        fi
    done
    if ((want_keras)); then
        run "$r" keras "$p0" 1 parse_result "${pin[@]}" "$venv/bin/python" "$here/keras_cnn.py" \
            --data "$data" --epochs "$epochs" --batch-size 64 --threads 1 || true
    fi
    if ((want_scaling)); then
        np2_sps=""
        if run "$r" dtrain-np2 "$p0" 2 parse_dtrain "$mpirun" "${mpi_flags[@]}" -np 2 --bind-to core "$dtrain" "${dtrain_args[@]}" --precision "$p0"; then
            np2_sps=$last_sps
        fi
        # Two independent single-rank jobs at once, one per core: what two cores
        # deliver with no communication at all, the ceiling for -np 2.
        bg_pids=()
        for c in 0 1; do
            "$mpirun" "${mpi_flags[@]}" -np 1 --cpu-set "$c" --bind-to core "$dtrain" "${dtrain_args[@]}" --precision "$p0" \
                >"$rundir/$r-dtrain-np1-cpu$c.out" 2>&1 </dev/null &
            bg_pids+=($!)
        done
        pair=0 pair_ok=1
        for c in 0 1; do
            rc=0
            wait "${bg_pids[c]}" || rc=$?
            if finish "$r" "dtrain-np1-cpu$c" "$p0" 1 parse_dtrain "$rc" "$rundir/$r-dtrain-np1-cpu$c.out"; then
                pair=$(awk -v a="$pair" -v b="$last_sps" 'BEGIN { print a + b }')
            else
                pair_ok=0
            fi
        done
        bg_pids=()
        if ((pair_ok)); then results[concurrent-sum]+="$pair "; fi
        # The same round's two figures, side by side: the fairest ratio on a noisy machine.
        if ((pair_ok)) && [[ -n $np2_sps ]]; then
            results[paired-ceiling]+="$(awk -v a="$np2_sps" -v b="$pair" 'BEGIN { print a / b }') "
        fi
    fi
done

# ---- Report ------------------------------------------------------------------------------
# stats and median: bench/lib.sh
ratio() { # A B -> A/B with 2 decimals, or "-" when either is missing
    if [[ -n $1 && -n $2 ]]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo "-"; fi
}
header() { printf '%-28s %10s %10s %10s %6s %6s\n' "run" min median max runs cores; }
row() { # LABEL RUN-KEY [CORES-TEXT]: CORES-TEXT when the program does not measure it
    local s n c
    s=$(stats <<<"${results[$2]:-}")
    n=$(wc -w <<<"${results[$2]:-}")
    c=${3:-$(median <<<"${cores[$2]:-}")}
    [[ ! $c =~ ^[0-9.]+$ ]] || c=$(printf '%.2f' "$c")
    if [[ -n $s ]]; then
        read -r mn md mx <<<"$s"
        printf '%-28s %10.0f %10.0f %10.0f %6s %6s\n' "$1" "$mn" "$md" "$mx" "$n/$repeats" "${c:--}"
    else
        printf '%-28s %10s %10s %10s %6s %6s\n' "$1" - - - "0/$repeats" -
    fi
}

printf '# %s\n' "${meta[@]}"
echo "#"
echo "# training samples/s, epoch $epochs of $epochs, over $repeats round(s); runs = rounds that gave a valid figure;"
echo "# cores = median CPU time / wall time of that epoch, all threads; bound = one rank per core, bound by mpirun"
header
# One precision: the rows and ratios as before; several: named by precision.
tag() { ((${#precisions[@]} == 1)) || echo " $1"; }
for p in "${precisions[@]}"; do
    row "dtrain$(tag "$p") -np 1" "dtrain-np1 $p" bound
    ((want_torch)) && row "pytorch$(tag "$p")" "pytorch $p"
done
((want_keras)) && row "keras$(tag "$p0")" "keras $p0"
d1=$(median <<<"${results[dtrain-np1 $p0]:-}")
((want_torch || want_keras)) && echo
for p in "${precisions[@]}"; do
    if ((want_torch)); then
        printf '%-44s %s\n' "dtrain$(tag "$p") / pytorch$(tag "$p") (medians)" \
            "$(ratio "$(median <<<"${results[dtrain-np1 $p]:-}")" "$(median <<<"${results[pytorch $p]:-}")")"
    fi
done
if ((want_keras)); then
    printf '%-44s %s\n' "dtrain$(tag "$p0") / keras (medians)" "$(ratio "$d1" "$(median <<<"${results[keras $p0]:-}")")"
fi
if ((${#precisions[@]} == 2)); then
    echo
    echo "# median over the rounds of each round's own ratio (range, rounds with both figures)"
    if ((want_torch)); then
        for p in fp32 bf16; do ratio_row "dtrain-$p / pytorch-$p" "dtrain-np1 $p" "pytorch $p"; done
        ratio_row "dtrain-bf16 / pytorch-fp32" "dtrain-np1 bf16" "pytorch fp32"
    fi
    ratio_row "dtrain-bf16 / dtrain-fp32" "dtrain-np1 bf16" "dtrain-np1 fp32"
    ((want_torch)) && ratio_row "pytorch-bf16 / pytorch-fp32" "pytorch bf16" "pytorch fp32"
fi
if ((want_torch)); then # the seed CNN's goals (issue 35): fp32 2.5x PyTorch fp32, bf16 4x
    for p in "${precisions[@]}"; do
        [[ $p == fp32 ]] && f=2.5 || f=4
        goal_row "goal dtrain-$p >= $f x pytorch-fp32" "$f" "$(median <<<"${results[pytorch fp32]:-}")" "$p" 64
    done
fi
if ((want_scaling)); then
    echo
    echo "# dtrain scaling: global samples/s of 2 ranks; the ceiling is 2 independent 1-rank runs at once"
    header
    row "dtrain -np 2" "dtrain-np2 $p0" bound
    row "2 x -np 1 at once (sum)" concurrent-sum bound
    d2=$(median <<<"${results[dtrain-np2 $p0]:-}")
    two=""
    [[ -z $d1 ]] || two=$(awk -v a="$d1" 'BEGIN { print 2 * a }')
    echo
    printf '%-44s %s\n' "weak-scaling efficiency np2 / (2 x np1)" "$(ratio "$d2" "$two")"
    printf '%-44s %s\n' "vs ceiling np2 / (2 x np1 at once)" "$(ratio "$d2" "$(median <<<"${results[concurrent-sum]:-}")")"
    printf '%-44s %s\n' "vs ceiling, paired by round (median)" "$(ratio "$(median <<<"${results[paired-ceiling]:-}")" 1)"
fi

if ((failures)); then
    say "$failures run(s) failed or gave no valid throughput (details above and in $log)"
    exit 1
fi
