#!/usr/bin/env bash
# gpu-throughput.sh: dtrain --device cuda against PyTorch on the same GPU, at
# fp32, bf16 and fp16, for the seed CNN and ResNet-20, in one invocation.
#
# The design decision a reader must know: the reference CNN is far too small
# to keep a large GPU busy (each step is a few dozen tiny kernels, so launch
# latency rules), so every precision also runs at a larger batch, and a
# larger convolutional model, ResNet-20 (inputs/resnet20.cfg, on synthetic
# 32x32x3 data, PyTorch's side in torch_resnet.py), runs beside it.
# As in cnn-throughput.sh the baseline is never taken from an earlier run:
# each round runs dtrain and PyTorch back to back for every configuration
# (which of the two goes first alternates from round to round), every run is
# a fresh process, its first epoch (CUDA context, cuDNN/cuBLAS plans, memory
# pools) is dropped, and the ratio quoted is the median over the rounds of
# each round's own dtrain / PyTorch ratio.
#
# Usage: bench/gpu-throughput.sh [--build DIR] [--models "cnn resnet20"]
#            [--data FILE] [--samples N] [--repeats R] [--epochs E]
#            [--batches [MODEL=]"B ..."] [--precisions "fp32 bf16 fp16"]
#            [--no-torch] [--deadline S] [--run-timeout S] [--out CSV]
# Exit status: 0 every run gave a figure, 1 some did not, 2 bad usage,
# 77 no usable GPU (dtrain's reason is printed).
set -euo pipefail

prog=gpu-throughput.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains each model on one GPU with dtrain (--device cuda, one rank) and with
PyTorch, at each precision and batch size, R rounds interleaved, and prints a
table of median samples/s (epochs 2..E of each run) and dtrain's ratio to
PyTorch. Models (Adam 1e-3 for both):
  cnn        the seed CNN (conv32-pool-conv64-pool-dense128-dropout-dense10)
             on --data; PyTorch: bench/torch_cnn.py
  cnn-graphs the same, dtrain with --cuda-graphs (each step replayed as one
             CUDA graph); PyTorch as for cnn, run again beside it
  resnet20   ResNet-20 (inputs/resnet20.cfg, batchnorm, residual adds) on N
             synthetic 32x32x3 images, 10 classes; PyTorch: bench/torch_resnet.py

Options:
  --build DIR        directory holding dtrain (a --with-cuda build; default: ./)
  --models "M ..."   any of cnn cnn-graphs resnet20, run in that order within
                     a precision (default: "cnn cnn-graphs resnet20")
  --data FILE        cnn's HDF5 file from dtrain-prep (default:
                     $repo/data/fashion-mnist.h5, made with dtrain-prep if missing)
  --samples N        resnet20's synthetic samples per epoch (default: 25600)
  --repeats R        rounds (default: 3)
  --epochs E         epochs per run, at least 2; the first is dropped (default: 3)
  --batches "B ..."  batch sizes for every model; --batches MODEL="B ..." for
                     one model (repeatable) (defaults: cnn "64 512", the seed's
                     batch and one that keeps the GPU busier, and so cnn-graphs;
                     resnet20 "256 1024")
  --precisions "P ..."  any of fp32 bf16 fp16 (default: "fp32 bf16 fp16")
  --no-torch         dtrain only
  --deadline S       start no run that would end more than S seconds after
                     the start (judged by the longest run so far); report
                     what was measured (default: 0, no deadline). Rounds run
                     precision by precision, so fp16 and later rounds are the
                     first a deadline drops
  --run-timeout S    a run still going after S seconds is killed and counts
                     as failed (default: 120)
  --out CSV          raw numbers (default: bench/results/gpu-throughput-DATE.csv);
                     every run's output goes to the same name with .log
  -h, --help         show this help

Environment:
  MPIRUN                 launcher (default: mpirun)
  MPIRUN_FLAGS           extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
  TORCH_PYTHON           interpreter with torch (CUDA), h5py for cnn and numpy
                         for resnet20 (default: python3)
  TORCH_LD_LIBRARY_PATH  if set, LD_LIBRARY_PATH for the PyTorch runs (keeps a
                         carried MPI bundle's libraries away from PyTorch)
EOF
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"


known_models=(cnn cnn-graphs resnet20)
declare -A batches=([cnn]="64 512" [cnn-graphs]="64 512" [resnet20]="256 1024") # MODEL -> its batch sizes
set_batches() { # [MODEL=]"B ...": one model's batch sizes, or every model's
    local m
    if [[ $1 =~ ^([a-z0-9-]+)=(.*)$ ]]; then
        m=${BASH_REMATCH[1]}
        [[ -v batches[$m] ]] || die "--batches $1: expected cnn=, cnn-graphs= or resnet20=, found '$m='"
        batches[$m]=${BASH_REMATCH[2]}
    else
        for m in "${known_models[@]}"; do batches[$m]=$1; done
    fi
}

build=. models="cnn cnn-graphs resnet20" data="" samples=25600 repeats=3 epochs=3 precisions="fp32 bf16 fp16" out=""
want_torch=1 deadline=0 run_timeout=120
while (($#)); do
    case $1 in
        --build) (($# > 1)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --models) (($# > 1)) || die "--models needs a list"; models=$2; shift 2 ;;
        --models=*) models=${1#*=}; shift ;;
        --samples) (($# > 1)) || die "--samples needs a number"; samples=$2; shift 2 ;;
        --samples=*) samples=${1#*=}; shift ;;
        --data) (($# > 1)) || die "--data needs a file"; data=$2; shift 2 ;;
        --data=*) data=${1#*=}; shift ;;
        --repeats) (($# > 1)) || die "--repeats needs a number"; repeats=$2; shift 2 ;;
        --repeats=*) repeats=${1#*=}; shift ;;
        --epochs) (($# > 1)) || die "--epochs needs a number"; epochs=$2; shift 2 ;;
        --epochs=*) epochs=${1#*=}; shift ;;
        --batches) (($# > 1)) || die "--batches needs a list"; set_batches "$2"; shift 2 ;;
        --batches=*) set_batches "${1#*=}"; shift ;;
        --precisions) (($# > 1)) || die "--precisions needs a list"; precisions=$2; shift 2 ;;
        --precisions=*) precisions=${1#*=}; shift ;;
        --deadline) (($# > 1)) || die "--deadline needs seconds"; deadline=$2; shift 2 ;;
        --deadline=*) deadline=${1#*=}; shift ;;
        --run-timeout) (($# > 1)) || die "--run-timeout needs seconds"; run_timeout=$2; shift 2 ;;
        --run-timeout=*) run_timeout=${1#*=}; shift ;;
        --out) (($# > 1)) || die "--out needs a file name"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --no-torch) want_torch=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --repeats "$repeats"
positive --epochs "$epochs"
((epochs >= 2)) || die "--epochs: expected at least 2 (the first epoch is dropped), found $epochs"
positive --samples "$samples"
positive --run-timeout "$run_timeout"
[[ $deadline =~ ^[0-9]+$ ]] || die "--deadline: expected seconds, found '$deadline'"
read -r -a model_list <<<"$models"
read -r -a prec_list <<<"$precisions"
((${#model_list[@]})) || die "--models: empty list"
((${#prec_list[@]})) || die "--precisions: empty list"
declare -A seen=()
for m in "${model_list[@]}"; do
    [[ -v batches[$m] ]] || die "--models: expected cnn, cnn-graphs or resnet20, found '$m'"
    [[ ! -v seen[$m] ]] || die "--models: $m named twice"
    seen[$m]=1
    read -r -a list <<<"${batches[$m]}"
    ((${#list[@]})) || die "--batches: empty list for $m"
    for b in "${list[@]}"; do positive "--batches ($m)" "$b"; done
done
for p in "${prec_list[@]}"; do
    [[ $p == fp32 || $p == bf16 || $p == fp16 ]] || die "--precisions: expected fp32, bf16 or fp16, found '$p'"
done

# ---- What to run ---------------------------------------------------------------
[[ -d $build ]] || die "--build $build: not a directory"
dtrain=$(cd "$build" && pwd)/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (point --build at a --with-cuda build directory)"
resnet_cfg=$repo/inputs/resnet20.cfg
if [[ -v seen[resnet20] ]]; then
    [[ -r $resnet_cfg ]] || die "no model file $resnet_cfg"
    # Not "dtrain --help | grep -q": under pipefail grep's early exit fails the pipe.
    dtrain_help=$("$dtrain" --help 2>&1) || true
    [[ $dtrain_help == *--synthetic* ]] || die "$dtrain has no --synthetic, which resnet20 needs (rebuild it)"
fi
if [[ -v seen[cnn-graphs] ]]; then
    dtrain_help=$("$dtrain" --help 2>&1) || true
    [[ $dtrain_help == *--cuda-graphs* ]] || die "$dtrain has no --cuda-graphs, which cnn-graphs needs (rebuild it)"
fi

# shellcheck disable=SC2119  # no extra flags for root
bench_launcher
mpi_version=$("$mpirun" --version 2>/dev/null) || mpi_version=""
mpi_version=${mpi_version%%$'\n'*}

# No GPU (or a dtrain built without CUDA): say why, in dtrain's words, and stop.
gpu_rc=0
gpu_out=$(timeout -k 5 60 "$mpirun" "${mpi_flags[@]}" -np 1 "$dtrain" --devices --device cuda 2>&1) || gpu_rc=$?
if ((gpu_rc)); then
    why=$(sed -n 's/^dtrain: error: //p' <<<"$gpu_out" | head -n 1)
    case $why in
        "--device cuda: no GPU on this node"* | "--device cuda: this dtrain was built without CUDA"*)
            echo "$prog: no GPU: $why"; exit 77 ;;
    esac
    echo "$prog: '$mpirun ${mpi_flags[*]} -np 1 $dtrain --devices --device cuda' failed (exit $gpu_rc):"
    head -n 20 <<<"$gpu_out"
    exit 1
fi
gpu_line=$(grep -m 1 '^rank 0: ' <<<"$gpu_out" | sed 's/.*: cuda:/cuda:/')
# The data only once there is a GPU to train on (making it takes a while).
if [[ -v seen[cnn] || -v seen[cnn-graphs] ]]; then bench_default_data "$dtrain"; fi

torch_python=${TORCH_PYTHON:-python3}
torch_env=()
[[ -z ${TORCH_LD_LIBRARY_PATH+set} ]] || torch_env=(env "LD_LIBRARY_PATH=$TORCH_LD_LIBRARY_PATH")
declare -A torch_for=()                           # MODEL -> 1 where PyTorch runs it too
declare -A torch_needs=([cnn]=h5py [cnn-graphs]=h5py [resnet20]=numpy) # what the model's script imports besides torch
torch_note=""
if ((want_torch)); then
    if ! torch_version=$("${torch_env[@]}" "$torch_python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
        torch_note="PyTorch not available: dtrain figures only ($torch_python cannot import torch)"
    elif ! "${torch_env[@]}" "$torch_python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        torch_note="PyTorch $torch_version sees no GPU: dtrain figures only"
    else
        # A missing h5py (common in GPU images) costs only cnn's baseline.
        for m in "${model_list[@]}"; do
            if "${torch_env[@]}" "$torch_python" -c "import ${torch_needs[$m]}" 2>/dev/null; then
                torch_for[$m]=1
            else
                torch_note+="${torch_note:+; }no PyTorch figures for $m ($torch_python cannot import ${torch_needs[$m]})"
            fi
        done
    fi
    [[ -z $torch_note ]] || echo "$torch_note"
    ((${#torch_for[@]})) || want_torch=0
else
    torch_note="PyTorch not run (--no-torch): dtrain figures only"
fi

stamp=$(date +%Y%m%d-%H%M%S)
[[ -n $out ]] || out=$repo/bench/results/gpu-throughput-$stamp.csv
mkdir -p "$(dirname "$out")"
log=${out%.csv}.log
: >"$log"
rundir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-throughput.XXXXXX")
trap 'rm -rf "$rundir"' EXIT
trap 'exit 130' INT TERM

# ---- Metadata ------------------------------------------------------------------------
bench_about "$dtrain"
smi="nvidia-smi not found"
if command -v nvidia-smi >/dev/null; then
    smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -n 1)
fi
meta=(
    "gpu-throughput: ${model_list[*]}; one GPU, one rank / one process"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n) ($(uname -sr)), $(getconf _NPROCESSORS_ONLN) CPUs"
    "gpu: $gpu_line; nvidia-smi: $smi"
    "dtrain: $dtrain_version, $dtrain, git $git_rev"
    "mpi: ${mpi_version:-version unknown} ($mpirun ${mpi_flags[*]})"
)
if ((want_torch)); then
    meta+=("pytorch: $torch_version ($torch_python, channels_last, autocast for bf16/fp16, GradScaler for fp16)${torch_note:+; $torch_note}")
else
    meta+=("pytorch: $torch_note")
fi
configs="precision ${prec_list[*]} x"
for m in "${model_list[@]}"; do
    case $m in
        cnn) meta+=("cnn: the seed CNN, Adam 1e-3, dropout 0.5, data $data") ;;
        cnn-graphs) meta+=("cnn-graphs: as cnn, dtrain with --cuda-graphs") ;;
        resnet20) meta+=("resnet20: ResNet-20 ($resnet_cfg), Adam 1e-3, synthetic 32x32x3, 10 classes, $samples samples") ;;
    esac
    configs+=" ($m batch ${batches[$m]})"
done
meta+=(
    "rounds: $repeats; each run trains $epochs epochs, epoch 1 dropped, the median of epochs 2-$epochs quoted"
    "configurations: $configs"
    "csv: $out"
    "log: $log"
)
printf '# %s\n' "${meta[@]}"

# ---- Running and parsing ---------------------------------------------------------------
# Every run's epochs become rows "epoch seconds samples_per_s loss accuracy".
parse_dtrain() { # "Epoch 2/3 - 0.81 s - 24616 samples/s - loss: 0.51 - accuracy: 0.81"
    awk '/^Epoch [0-9]+\/[0-9]+ / {
        split($2, ep, "/"); secs = "nan"; sps = ""; loss = "nan"; acc = "nan"
        if (match($0, / - [0-9.]+ s - /)) secs = substr($0, RSTART + 3, RLENGTH - 8)
        if (match($0, /[0-9.]+ samples\/s/)) sps = substr($0, RSTART, RLENGTH - 10)
        if (match($0, / loss: [^ ]+/)) loss = substr($0, RSTART + 7, RLENGTH - 7)
        if (match($0, / accuracy: [^ ]+/)) acc = substr($0, RSTART + 11, RLENGTH - 11)
        if (sps != "") print ep[1], secs, sps, loss, acc
    }' "$1"
}
parse_result() { # torch_cnn.py: "RESULT framework=pytorch epoch=K ... samples_per_s=X loss=L accuracy=A ..."
    awk '$1 == "RESULT" {
        delete f
        for (i = 2; i <= NF; i++) { eq = index($i, "="); f[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
        if (f["samples_per_s"] != "") print f["epoch"], f["seconds"], f["samples_per_s"], f["loss"], f["accuracy"]
    }' "$1"
}
range() { # "x y z ..." -> "min-max" ("-" for no values)
    tr ' ' '\n' <<<"$1" | awk NF | sort -g |
        awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%.0f-%.0f", lo, hi; else printf "-" }'
}
num() { # "x" -> x rounded to D decimals, or "-" for no value
    if [[ -n $1 ]]; then printf "%.${2}f" "$1"; else echo -; fi
}

echo "round,run,model,precision,batch,epoch,epochs,quoted,seconds,samples_per_s,loss,accuracy" >"$out"
failures=0 skipped=0 longest=0 start=$SECONDS
declare -A results # "dtrain cnn fp32 64" -> one figure per round that gave one; likewise "pytorch ..."
declare -A paired  # "cnn fp32 64" -> one dtrain/pytorch ratio per round where both ran

# The last epoch's loss must be finite; the cnn's must also be below ln 10
# (chance), as Fashion-MNIST is learnable. Synthetic data are not (labels are
# noise), so resnet20's may sit above chance.
loss_ok() { # MODEL "epoch seconds samples_per_s loss accuracy"
    awk -v m="$1" '{ exit !($3 > 0 && $4 == $4 + 0 && $4 > -1e30 && $4 < (m ~ /^cnn/ ? 2.302585 : 1e30)) }' <<<"$2"
}

# measure ROUND WHO MODEL PREC BATCH COMMAND...: one run, checked and recorded;
# its figure (the median samples/s of epochs 2..E) is left in $figure.
measure() {
    local round=$1 who=$2 model=$3 prec=$4 bs=$5 rc=0 file rows quoted last why="" t0
    shift 5
    figure=""
    file=$rundir/$round-$who-$model-$prec-$bs.out
    t0=$SECONDS
    timeout -k 5 "$run_timeout" "$@" >"$file" 2>&1 </dev/null || rc=$?
    ((SECONDS - t0 <= longest)) || longest=$((SECONDS - t0))
    { echo "==== round $round: $who $model $prec batch $bs (exit $rc, $((SECONDS - t0)) s): $*"; cat "$file"; } >>"$log"
    if [[ $who == dtrain ]]; then rows=$(parse_dtrain "$file"); else rows=$(parse_result "$file"); fi
    quoted=$(awk -v e="$epochs" '$1 >= 2 && $1 <= e' <<<"$rows")
    last=$(tail -n 1 <<<"$quoted")
    if ((rc == 124 || rc == 137)); then
        why="killed after $run_timeout s (--run-timeout)"
    elif ((rc != 0)); then
        why="exited with status $rc"
    elif (($(wc -l <<<"$quoted") != epochs - 1)) || [[ -z $quoted ]]; then
        why="printed no throughput for epochs 2-$epochs"
    elif ! loss_ok "$model" "$last"; then
        why="epoch $epochs looks wrong: $(awk '{ print $3 " samples/s, loss " $4 }' <<<"$last") (want > 0, and a finite loss"
        [[ $model != cnn* ]] || why+=" below ln 10 = 2.3026"
        why+=")"
    elif grep -q '(dtrain has [0-9]*)' "$file"; then
        why="trained a different model from dtrain's: $(grep -m 1 'dtrain has' "$file")"
    fi
    if [[ -n $rows ]]; then
        awk -v r="$round" -v w="$who" -v m="$model" -v p="$prec" -v b="$bs" -v e="$epochs" -v OFS=, \
            '{ print r, w, m, p, b, $1, e, ($1 >= 2), $2, $3, $4, $5 }' <<<"$rows" >>"$out"
    fi
    if [[ -n $why ]]; then
        failures=$((failures + 1))
        say "round $round: $who $model $prec batch $bs $why; its last lines:"
        tail -n 15 "$file" | sed 's/^/    /' >&2
        return 1
    fi
    figure=$(awk '{ print $3 }' <<<"$quoted" | median)
    results[$who $model $prec $bs]+="$figure "
    say "$(printf 'round %d/%d: %-7s %-8s %-4s batch %-5s %10.0f samples/s  loss %s' "$round" "$repeats" "$who" "$model" \
        "$prec" "$bs" "$figure" "$(awk '{ print $4 }' <<<"$last")")"
}

# What each model trains on: dtrain's input arguments, and PyTorch's script with its own.
dtrain_input() { # MODEL -> sets input
    case $1 in
        cnn) input=("$data") ;;
        cnn-graphs) input=("$data" --cuda-graphs) ;;
        resnet20) input=(--synthetic "32x32x3:10:$samples" --model "$resnet_cfg") ;;
    esac
}
torch_script() { # MODEL -> sets script
    case $1 in
        cnn | cnn-graphs) script=("$here/torch_cnn.py" --data "$data") ;;
        resnet20) script=("$here/torch_resnet.py" --samples "$samples") ;;
    esac
}

# time_left: whether a run as long as the longest so far still ends before the deadline.
time_left() { ((deadline == 0 || SECONDS - start + longest <= deadline)); }

plan="dtrain --device cuda"
((want_torch)) && plan+=" and PyTorch, alternating"
say "$repeats round(s) of $plan at $configs; $epochs epochs each"
stopped=""
for ((r = 1; r <= repeats; r++)); do
    for prec in "${prec_list[@]}"; do
        for model in "${model_list[@]}"; do
            dtrain_input "$model"
            torch_script "$model"
            read -r -a batch_list <<<"${batches[$model]}"
            for bs in "${batch_list[@]}"; do
                order=(dtrain)
                if [[ -v torch_for[$model] ]]; then
                    if ((r % 2)); then order=(dtrain pytorch); else order=(pytorch dtrain); fi
                fi
                d="" t=""
                for who in "${order[@]}"; do
                    if ! time_left; then
                        stopped="stopped at round $r, $prec $model batch $bs: the next run would pass the --deadline of $deadline s"
                        break 5
                    fi
                    if [[ $who == dtrain ]]; then
                        measure "$r" dtrain "$model" "$prec" "$bs" "$mpirun" "${mpi_flags[@]}" -np 1 "$dtrain" \
                            "${input[@]}" --device cuda --precision "$prec" --batch-size "$bs" --epochs "$epochs" \
                            --no-validation --threads 1 && d=$figure
                    else
                        measure "$r" pytorch "$model" "$prec" "$bs" "${torch_env[@]}" "$torch_python" "${script[@]}" \
                            --device cuda --precision "$prec" --batch-size "$bs" --epochs "$epochs" \
                            --threads 1 && t=$figure
                    fi
                done
                # The same round's two figures side by side: the fairest ratio on a shared machine.
                if [[ -n $d && -n $t ]]; then
                    paired[$model $prec $bs]+="$(awk -v a="$d" -v b="$t" 'BEGIN { print a / b }') "
                fi
            done
        done
    done
done
if [[ -n $stopped ]]; then
    say "$stopped"
    skipped=1
fi

# ---- Report ------------------------------------------------------------------------------
echo "#"
echo "# training samples/s on one GPU: per run the median of epochs 2-$epochs, then the median over rounds"
echo "# (min-max over rounds); ratio = median over rounds of that round's dtrain / PyTorch; runs = valid / rounds"
[[ -z $stopped ]] || echo "# $stopped"
fmt='%-9s %-9s %6s %10s %13s %10s %13s %8s %9s\n'
# shellcheck disable=SC2059  # the format is this one fixed string
printf "$fmt" model precision batch dtrain "(min-max)" pytorch "(min-max)" ratio runs
for model in "${model_list[@]}"; do
    read -r -a batch_list <<<"${batches[$model]}"
    for prec in "${prec_list[@]}"; do
        for bs in "${batch_list[@]}"; do
            key="$model $prec $bs"
            dv=${results[dtrain $key]:-} tv=${results[pytorch $key]:-}
            dm=$(median <<<"$dv") tm=$(median <<<"$tv") ratio=$(median <<<"${paired[$key]:-}")
            runs="$(wc -w <<<"$dv")/$repeats"
            if [[ -v torch_for[$model] ]]; then runs+=" $(wc -w <<<"$tv")/$repeats"; fi
            # shellcheck disable=SC2059
            printf "$fmt" "$model" "$prec" "$bs" "$(num "$dm" 0)" "$(range "$dv")" "$(num "$tm" 0)" "$(range "$tv")" \
                "$(num "$ratio" 2)" "$runs"
        done
    done
done
[[ -z $torch_note ]] || echo "# $torch_note"

if ((failures)); then
    say "$failures run(s) failed or gave no valid throughput (details above and in $log)"
    exit 1
fi
((skipped == 0)) || say "not every round ran (--deadline); the table holds what was measured"
exit 0
