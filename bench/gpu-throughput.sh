#!/usr/bin/env bash
# gpu-throughput.sh: dtrain --device cuda against PyTorch on the same GPU, at
# fp32, bf16 and fp16, at the seed batch (64) and a larger one, in one
# invocation.
#
# The design decision a reader must know: the reference CNN is far too small
# to keep a large GPU busy at batch 64 (each step is a few dozen tiny kernels,
# so launch latency rules), so every precision also runs at a larger batch.
# As in cnn-throughput.sh the baseline is never taken from an earlier run:
# each round runs dtrain and PyTorch back to back for every configuration
# (which of the two goes first alternates from round to round), every run is
# a fresh process, its first epoch (CUDA context, cuDNN/cuBLAS plans, memory
# pools) is dropped, and the ratio quoted is the median over the rounds of
# each round's own dtrain / PyTorch ratio.
#
# Usage: bench/gpu-throughput.sh [--build DIR] [--data FILE] [--repeats R]
#            [--epochs E] [--batches "64 512"] [--precisions "fp32 bf16 fp16"]
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

Trains the seed CNN (conv32-pool-conv64-pool-dense128-dropout-dense10, Adam
1e-3) on one GPU with dtrain (--device cuda, one rank) and with PyTorch, at
each precision and batch size, R rounds interleaved, and prints a table of
median samples/s (epochs 2..E of each run) and dtrain's ratio to PyTorch.

Options:
  --build DIR        directory holding dtrain (a --with-cuda build; default: ./)
  --data FILE        HDF5 file from dtrain-prep (default: $repo/data/fashion-mnist.h5,
                     made with dtrain-prep if missing)
  --repeats R        rounds (default: 3)
  --epochs E         epochs per run, at least 2; the first is dropped (default: 3)
  --batches "B ..."  batch sizes (default: "64 512")
  --precisions "P ..."  any of fp32 bf16 fp16 (default: "fp32 bf16 fp16")
  --no-torch         dtrain only
  --deadline S       start no run that would end more than S seconds after
                     the start (judged by the longest run so far); report
                     what was measured (default: 0, no deadline)
  --run-timeout S    a run still going after S seconds is killed and counts
                     as failed (default: 120)
  --out CSV          raw numbers (default: bench/results/gpu-throughput-DATE.csv);
                     every run's output goes to the same name with .log
  -h, --help         show this help

Environment:
  MPIRUN                 launcher (default: mpirun)
  MPIRUN_FLAGS           extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
  TORCH_PYTHON           interpreter with torch (CUDA) and h5py (default: python3)
  TORCH_LD_LIBRARY_PATH  if set, LD_LIBRARY_PATH for the PyTorch runs (keeps a
                         carried MPI bundle's libraries away from PyTorch)
EOF
}

die() { echo "$prog: $*" >&2; exit 2; }
say() { echo "$prog: $*" >&2; }
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

positive() { # FLAG VALUE
    [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, found '$2'"
}

build=. data="" repeats=3 epochs=3 batches="64 512" precisions="fp32 bf16 fp16" out=""
want_torch=1 deadline=0 run_timeout=120
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
        --batches) (($# > 1)) || die "--batches needs a list"; batches=$2; shift 2 ;;
        --batches=*) batches=${1#*=}; shift ;;
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
positive --run-timeout "$run_timeout"
[[ $deadline =~ ^[0-9]+$ ]] || die "--deadline: expected seconds, found '$deadline'"
read -r -a batch_list <<<"$batches"
read -r -a prec_list <<<"$precisions"
((${#batch_list[@]})) || die "--batches: empty list"
((${#prec_list[@]})) || die "--precisions: empty list"
for b in "${batch_list[@]}"; do positive --batches "$b"; done
for p in "${prec_list[@]}"; do
    [[ $p == fp32 || $p == bf16 || $p == fp16 ]] || die "--precisions: expected fp32, bf16 or fp16, found '$p'"
done

# ---- What to run ---------------------------------------------------------------
[[ -d $build ]] || die "--build $build: not a directory"
dtrain=$(cd "$build" && pwd)/dtrain
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (point --build at a --with-cuda build directory)"
bench_default_data "$dtrain"

mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || die "no MPI launcher '$mpirun' (set MPIRUN)"
mpi_flags=()
# Open MPI refuses to start as root unless told; CI, containers and GPU machines run as root.
mpi_version=$("$mpirun" --version 2>/dev/null | head -n 1) || mpi_version=""
if [[ $(id -u) == 0 && ($mpi_version == *"Open MPI"* || $mpi_version == *OpenRTE*) ]]; then
    mpi_flags+=(--allow-run-as-root)
fi
read -r -a extra_flags <<<"${MPIRUN_FLAGS:-}"
mpi_flags+=("${extra_flags[@]}")

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

torch_python=${TORCH_PYTHON:-python3}
torch_env=()
[[ -z ${TORCH_LD_LIBRARY_PATH+set} ]] || torch_env=(env "LD_LIBRARY_PATH=$TORCH_LD_LIBRARY_PATH")
torch_note=""
if ((want_torch)); then
    if ! torch_version=$("${torch_env[@]}" "$torch_python" -c 'import torch, h5py; print(torch.__version__)' 2>/dev/null); then
        torch_note="PyTorch not available: dtrain figures only ($torch_python cannot import torch and h5py)"
    elif ! "${torch_env[@]}" "$torch_python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        torch_note="PyTorch $torch_version sees no GPU: dtrain figures only"
    fi
    if [[ -n $torch_note ]]; then
        echo "$torch_note"
        want_torch=0
    fi
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
dtrain_version=$("$dtrain" --version 2>/dev/null | head -n 1) || dtrain_version=""
bench_git_rev
smi="nvidia-smi not found"
if command -v nvidia-smi >/dev/null; then
    smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -n 1)
fi
meta=(
    "gpu-throughput: seed CNN, Adam 1e-3, dropout 0.5, one GPU, one rank / one process"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n) ($(uname -sr)), $(getconf _NPROCESSORS_ONLN) CPUs"
    "gpu: $gpu_line; nvidia-smi: $smi"
    "dtrain: ${dtrain_version:-version unknown}, $dtrain, git $git_rev"
    "mpi: ${mpi_version:-version unknown} ($mpirun ${mpi_flags[*]})"
)
if ((want_torch)); then
    meta+=("pytorch: $torch_version ($torch_python, channels_last, autocast for bf16/fp16, GradScaler for fp16)")
else
    meta+=("pytorch: $torch_note")
fi
meta+=(
    "data: $data"
    "rounds: $repeats; each run trains $epochs epochs, epoch 1 dropped, the median of epochs 2-$epochs quoted"
    "configurations: precision ${prec_list[*]} x batch ${batch_list[*]}"
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
median() { # "x y z ..." -> the median (empty for no values)
    tr ' ' '\n' <<<"$1" | awk NF | sort -g | awk '{ v[NR] = $1 }
        END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
range() { # "x y z ..." -> "min-max" ("-" for no values)
    tr ' ' '\n' <<<"$1" | awk NF | sort -g |
        awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%.0f-%.0f", lo, hi; else printf "-" }'
}
num() { # "x" -> x rounded to D decimals, or "-" for no value
    if [[ -n $1 ]]; then printf "%.${2}f" "$1"; else echo -; fi
}

echo "round,run,precision,batch,epoch,epochs,quoted,seconds,samples_per_s,loss,accuracy" >"$out"
failures=0 skipped=0 longest=0 start=$SECONDS
declare -A results # "dtrain fp32 64" -> one figure per round that gave one; likewise "pytorch ..."
declare -A paired  # "fp32 64" -> one dtrain/pytorch ratio per round where both ran

# measure ROUND WHO PREC BATCH COMMAND...: one run, checked and recorded; its
# figure (the median samples/s of epochs 2..E) is left in $figure.
measure() {
    local round=$1 who=$2 prec=$3 bs=$4 rc=0 file rows quoted why="" t0
    shift 4
    figure=""
    file=$rundir/$round-$who-$prec-$bs.out
    t0=$SECONDS
    timeout -k 5 "$run_timeout" "$@" >"$file" 2>&1 </dev/null || rc=$?
    ((SECONDS - t0 <= longest)) || longest=$((SECONDS - t0))
    { echo "==== round $round: $who $prec batch $bs (exit $rc, $((SECONDS - t0)) s): $*"; cat "$file"; } >>"$log"
    if [[ $who == dtrain ]]; then rows=$(parse_dtrain "$file"); else rows=$(parse_result "$file"); fi
    quoted=$(awk -v e="$epochs" '$1 >= 2 && $1 <= e' <<<"$rows")
    if ((rc == 124 || rc == 137)); then
        why="killed after $run_timeout s (--run-timeout)"
    elif ((rc != 0)); then
        why="exited with status $rc"
    elif (($(wc -l <<<"$quoted") != epochs - 1)) || [[ -z $quoted ]]; then
        why="printed no throughput for epochs 2-$epochs"
    elif ! tail -n 1 <<<"$quoted" | awk '{ exit !($3 > 0 && $4 == $4 + 0 && $4 < 2.302585) }'; then
        why="epoch $epochs looks wrong: $(tail -n 1 <<<"$quoted" | awk '{ print $3 " samples/s, loss " $4 }') (want > 0, and a loss below ln 10 = 2.3026)"
    fi
    if [[ -n $rows ]]; then
        awk -v r="$round" -v w="$who" -v p="$prec" -v b="$bs" -v e="$epochs" -v OFS=, \
            '{ print r, w, p, b, $1, e, ($1 >= 2), $2, $3, $4, $5 }' <<<"$rows" >>"$out"
    fi
    if [[ -n $why ]]; then
        failures=$((failures + 1))
        say "round $round: $who $prec batch $bs $why; its last lines:"
        tail -n 15 "$file" | sed 's/^/    /' >&2
        return 1
    fi
    figure=$(median "$(awk '{ printf "%s ", $3 }' <<<"$quoted")")
    results[$who $prec $bs]+="$figure "
    say "$(printf 'round %d/%d: %-7s %-4s batch %-5s %10.0f samples/s  loss %s' "$round" "$repeats" "$who" "$prec" "$bs" \
        "$figure" "$(tail -n 1 <<<"$quoted" | awk '{ print $4 }')")"
}

# time_left: whether a run as long as the longest so far still ends before the deadline.
time_left() { ((deadline == 0 || SECONDS - start + longest <= deadline)); }

plan="dtrain --device cuda"
((want_torch)) && plan+=" and PyTorch, alternating"
say "$repeats round(s) of $plan at precision ${prec_list[*]} x batch ${batch_list[*]}; $epochs epochs each"
stopped=""
for ((r = 1; r <= repeats; r++)); do
    for prec in "${prec_list[@]}"; do
        for bs in "${batch_list[@]}"; do
            order=(dtrain)
            if ((want_torch)); then
                if ((r % 2)); then order=(dtrain pytorch); else order=(pytorch dtrain); fi
            fi
            d="" t=""
            for who in "${order[@]}"; do
                if ! time_left; then
                    stopped="stopped at round $r, $prec batch $bs: the next run would pass the --deadline of $deadline s"
                    break 4
                fi
                if [[ $who == dtrain ]]; then
                    measure "$r" dtrain "$prec" "$bs" "$mpirun" "${mpi_flags[@]}" -np 1 "$dtrain" "$data" \
                        --device cuda --precision "$prec" --batch-size "$bs" --epochs "$epochs" \
                        --no-validation --threads 1 && d=$figure
                else
                    measure "$r" pytorch "$prec" "$bs" "${torch_env[@]}" "$torch_python" "$here/torch_cnn.py" \
                        --data "$data" --device cuda --precision "$prec" --batch-size "$bs" --epochs "$epochs" \
                        --threads 1 && t=$figure
                fi
            done
            # The same round's two figures side by side: the fairest ratio on a shared machine.
            if [[ -n $d && -n $t ]]; then
                paired[$prec $bs]+="$(awk -v a="$d" -v b="$t" 'BEGIN { print a / b }') "
            fi
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
fmt='%-9s %6s %10s %13s %10s %13s %8s %9s\n'
# shellcheck disable=SC2059  # the format is this one fixed string
printf "$fmt" precision batch dtrain "(min-max)" pytorch "(min-max)" ratio runs
for prec in "${prec_list[@]}"; do
    for bs in "${batch_list[@]}"; do
        dv=${results[dtrain $prec $bs]:-} tv=${results[pytorch $prec $bs]:-}
        dm=$(median "$dv") tm=$(median "$tv") ratio=$(median "${paired[$prec $bs]:-}")
        runs="$(wc -w <<<"$dv")/$repeats"
        if ((want_torch)); then runs+=" $(wc -w <<<"$tv")/$repeats"; fi
        # shellcheck disable=SC2059
        printf "$fmt" "$prec" "$bs" "$(num "$dm" 0)" "$(range "$dv")" "$(num "$tm" 0)" "$(range "$tv")" \
            "$(num "$ratio" 2)" "$runs"
    done
done
[[ -z $torch_note ]] || echo "# $torch_note"

if ((failures)); then
    say "$failures run(s) failed or gave no valid throughput (details above and in $log)"
    exit 1
fi
((skipped == 0)) || say "not every round ran (--deadline); the table holds what was measured"
exit 0
