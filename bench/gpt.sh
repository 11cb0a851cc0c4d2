#!/usr/bin/env bash
# gpt.sh: dtrain's decoder-only transformer against an independent PyTorch
# GPT-2 (bench/torch_gpt.py) on real text, in one invocation: correctness,
# speed and learning.
#
# (a) correctness: dtrain's initial weights (from a checkpoint after one
#     update that changes nothing: --optimizer sgd --lr 1.2e-38) go into the
#     PyTorch model, which then trains on the windows dtrain's --sample-log
#     lists with the same AdamW, clipping and schedule; the worst relative
#     difference of the step losses over N steps at np=1 (target 1e-4), and
#     np=2 against np=1 at the same global batch (the same sample log).
# (b) speed: R interleaved rounds of dtrain fp32, PyTorch fp32, dtrain bf16,
#     PyTorch bf16 (torch.autocast on the CPU), one core and one thread each;
#     then dtrain -np 2 on 2 cores and two -np 1 runs at once (one per core).
#     Medians of tokens/s and of each round's own ratios; and bench/attention
#     (the attention kernel's GFLOP/s) against bench/peak.
# (c) learning: both train on the whole text for S steps (the same windows,
#     PyTorch following dtrain's sample log as it is written), validating K
#     times; the two validation curves go into one SVG plot (gnuplot).
#
# The design decision a reader must know: the machines are shared and noisy,
# so no figure is taken from an earlier run: each round runs every speed case
# back to back (even rounds put PyTorch first), and the figures quoted are
# medians over the rounds of each round's own ratios.
#
# Usage: bench/gpt.sh [--build DIR] [--rounds R] [--model FILE] [--data FILE] ...
# See bench/README.md ("GPT") for how to read the report.
set -euo pipefail

prog=gpt.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Trains a GPT (default inputs/gpt-mini.cfg) on the King James Bible tokenized
by dtrain-prep (bpe:4096) with dtrain and with PyTorch (bench/torch_gpt.py):
(a) step losses compared (np=1 against PyTorch, np=2 against np=1), (b)
tokens/s at fp32 and bf16 on one core each, R rounds interleaved, -np 2
against 2 x -np 1, and the attention kernel's GFLOP/s against bench/peak,
(c) validation-loss curves of both, plotted into one SVG.

Options:
  --build DIR        directory holding dtrain, dtrain-prep, bench/peak and
                     bench/attention (default: $repo/build)
  --rounds R         speed rounds (default: 3)
  --model FILE       a GPT file of inputs/gen-gpt.py's form (default:
                     $repo/inputs/gpt-mini.cfg)
  --data FILE        a token dataset (default: $repo/data/kjv-bpe4096.h5,
                     made from \`bible gen1:1-rev22:21\` with dtrain-prep
                     --tokenizer bpe:4096 when missing)
  --batch-size B     windows per step, all ranks together (default: 8; even)
  --check-steps N    (a): steps, as 2 epochs of N/2 (default: 50)
  --speed-steps N    (b): steps per epoch; 2 epochs, the second timed
                     (default: 6)
  --learn-steps N    (c): steps (default: 240)
  --learn-evals K    (c): validations, one every N/K steps (default: 8)
  --skip LIST        comma list of check, speed, learn: parts not run
  --no-torch         dtrain only (no PyTorch runs, no comparisons)
  --plot FILE        (c)'s SVG (default: $repo/doc/gpt-learning.svg)
  --out CSV          raw numbers (default: $repo/bench/results/gpt-DATE.csv);
                     every run's output goes to the same name ending .log
  -h, --help         show this help

Environment:
  MPIRUN          launcher (default: mpirun)
  MPIRUN_FLAGS    extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
  TORCH_PYTHON    interpreter that imports torch, numpy and h5py (default:
                  /usr/bin/python3; PyTorch >= 2.0 for its fused attention)
EOF
}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

build=$repo/build rounds=3 model=$repo/inputs/gpt-mini.cfg data="" batch=8 out="" want_torch=1
check_steps=50 speed_steps=6 learn_steps=240 learn_evals=8 skip="" plot=$repo/doc/gpt-learning.svg
need() { (($2 > 1)) || die "$1 needs $3"; } # FLAG ARGS-LEFT WHAT
while (($#)); do
    case $1 in
        --build) need "$1" $# "a directory"; build=$2; shift 2 ;;
        --rounds) need "$1" $# "a number"; rounds=$2; shift 2 ;;
        --model) need "$1" $# "a file"; model=$2; shift 2 ;;
        --data) need "$1" $# "a file"; data=$2; shift 2 ;;
        --batch-size) need "$1" $# "a number"; batch=$2; shift 2 ;;
        --check-steps) need "$1" $# "a number"; check_steps=$2; shift 2 ;;
        --speed-steps) need "$1" $# "a number"; speed_steps=$2; shift 2 ;;
        --learn-steps) need "$1" $# "a number"; learn_steps=$2; shift 2 ;;
        --learn-evals) need "$1" $# "a number"; learn_evals=$2; shift 2 ;;
        --skip) need "$1" $# "a list (check, speed, learn)"; skip=$2; shift 2 ;;
        --no-torch) want_torch=0; shift ;;
        --plot) need "$1" $# "a file name"; plot=$2; shift 2 ;;
        --out) need "$1" $# "a file name"; out=$2; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
positive --rounds "$rounds"
positive --batch-size "$batch"
((batch % 2 == 0)) || die "--batch-size $batch: the np=2 runs split it over 2 ranks, so it must be even"
whole --check-steps "$check_steps" 2
positive --speed-steps "$speed_steps"
positive --learn-steps "$learn_steps"
positive --learn-evals "$learn_evals"
((learn_evals <= learn_steps)) || die "--learn-evals $learn_evals: more validations than the $learn_steps steps"
want_check=1 want_speed=1 want_learn=1
if [[ -n $skip ]]; then
    IFS=, read -r -a words <<<"$skip"
    [[ $skip != *, && $skip != ,* && $skip != *,,* ]] || die "--skip: expected a comma list of check, speed and learn, found '$skip'"
    for w in "${words[@]}"; do
        case $w in
            check) want_check=0 ;; speed) want_speed=0 ;; learn) want_learn=0 ;;
            *) die "--skip: expected a comma list of check, speed and learn, found '$w' in '$skip'" ;;
        esac
    done
fi
[[ -f $model && -r $model ]] || die "--model $model: no such readable file"
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
# The model's numbers, as torch_gpt.py reads them (it refuses a file of another form).
read -r nlayer width block hidden < <(awk '
    { sub(/#.*/, "") } /^\[attention\]/ { n++ } /^\[linear\]/ { lin++ }
    /^width *=/ { w = $3 } /^block_size *=/ { t = $3 } /^units *=/ && lin % 2 == 1 && !h { h = $3 }
    END { print n + 0, w + 0, t + 0, h + 0 }' "$model")
((nlayer > 0 && width > 0 && block > 0 && hidden > 0)) ||
    die "--model $model: not a GPT of inputs/gen-gpt.py's form ([embedding] width and block_size, [attention] blocks)"

# ---- What to run ---------------------------------------------------------------
[[ -d $build ]] || die "--build $build: not a directory"
build=$(cd "$build" && pwd)
dtrain=$build/dtrain prep=$build/dtrain-prep peak=$build/bench/peak attn=$build/bench/attention
[[ -x $dtrain ]] || die "no dtrain executable at $dtrain (build it, or point --build at the build directory)"
dtrain_help=$("$dtrain" --help 2>&1) || true
[[ $dtrain_help == *--sample-log* ]] ||
    die "$dtrain has no --sample-log (built before it existed? rebuild it, or point --build elsewhere)"
data_about="" # the text, in the plot's title
if [[ -z $data ]]; then
    data=$repo/data/kjv-bpe4096.h5 data_about="the King James Bible"
    if [[ ! -e $data ]]; then
        [[ -x $prep ]] || die "$data is missing and there is no $prep to make it (or pass --data FILE)"
        command -v bible >/dev/null || die "$data is missing and there is no 'bible' to make it from (Debian: apt-get install bible-kjv; or pass --data FILE)"
        say "making $data: the King James Bible (bible gen1:1-rev22:21), dtrain-prep --tokenizer bpe:4096"
        mkdir -p "$(dirname "$data")"
        bible gen1:1-rev22:21 >"$data.txt.$$"
        "$prep" --quiet --text "$data.txt.$$" --tokenizer bpe:4096 "$data.part.$$" || { rm -f "$data.txt.$$" "$data.part.$$"; die "dtrain-prep failed to make $data"; }
        mv "$data.part.$$" "$data"
        rm -f "$data.txt.$$"
    fi
fi
[[ -r $data ]] || die "--data $data: no such readable file"
data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")
data_about="${data_about:+$data_about (}$(basename "$data")${data_about:+)}"
bench_launcher --oversubscribe
torch_python=${TORCH_PYTHON:-/usr/bin/python3}
if ((want_torch)) && ! "$torch_python" -c 'import numpy, h5py, torch' 2>/dev/null; then
    die "$torch_python cannot import numpy, h5py and torch (set TORCH_PYTHON, or pass --no-torch)"
fi
if ((want_learn)) && [[ $plot != */* ]]; then plot=./$plot; fi
ncpu=$(nproc)
((ncpu >= 2)) || say "warning: only $ncpu CPU: the 2-core runs share it and their figures mean little"

stamp=$(date +%Y%m%d-%H%M%S)
[[ -n $out ]] || out=$repo/bench/results/gpt-$stamp.csv
mkdir -p "$(dirname "$out")"
log=${out%.csv}.log
: >"$log"
rundir=$(mktemp -d "${TMPDIR:-/tmp}/gpt.XXXXXX")
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    rm -rf "$rundir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Every round times the same binary, even if the build directory is rebuilt meanwhile.
if [[ $(head -c 4 "$dtrain" | od -An -c | tr -d ' ') == 177ELF ]]; then
    cp "$dtrain" "$rundir/dtrain"
    dtrain_run=$rundir/dtrain
else
    dtrain_run=$dtrain
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 # one thread everywhere

# ---- Metadata ------------------------------------------------------------------------
bench_about "$dtrain" "$ncpu"
bench_isa # flags, isa (bench/lib.sh)
precisions=(fp32)
[[ " $flags " == *" avx512_bf16 "* || " $flags " == *" amx_bf16 "* ]] && precisions+=(bf16)
bench_peaks "$peak" # peak_gflops[UNIT] (bench/lib.sh)
vocab=$("$torch_python" -c 'import sys, h5py; print(int(h5py.File(sys.argv[1], "r").attrs["num_classes"]))' "$data" 2>/dev/null ||
    h5dump -a /num_classes "$data" 2>/dev/null | sed -n 's/.*(0): \([0-9]*\).*/\1/p')
[[ $vocab =~ ^[0-9]+$ ]] || die "--data $data: no num_classes attribute (not a token dataset of dtrain-prep --text?)"
# FLOP per token trained (forward + backward, no recomputation): 6 per weight
# of every matrix product (the tied head's too) plus causal attention's
# 2 x 2 C (T + 1) / 2 per layer forward, 3x for forward + backward.
flop_token=$(awk -v L="$nlayer" -v C="$width" -v T="$block" -v H="$hidden" -v V="$vocab" \
    'BEGIN { printf "%.0f", 6 * (L * (4 * C * C + 2 * C * H) + V * C) + 3 * L * 2 * C * (T + 1) }')
# OpenBLAS's own choice of kernels, then the one dtrain runs (src/cpu/cpu_blas_core.c).
blas_cores=$(OPENBLAS_VERBOSE=2 "$dtrain" --version 2>&1 | sed -n 's/^Core: //p' | awk 'NR == 1 { a = $0 } { b = $0 }
    END { if (!NR) print "not OpenBLAS"; else if (a == b) print a; else print a " chosen by OpenBLAS, " b " run by dtrain" }')
meta=(
    "gpt: $(basename "$model") ($nlayer blocks, width $width, block_size $block, MLP $hidden, vocabulary $vocab), $(basename "$data"), batch $batch windows of $block tokens"
    "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "host: $(uname -n) ($(uname -sr)), $ncpu CPUs: ${cpu_model:-unknown}; $busy_cores cores busy before the start"
    "isa: ${isa:-none of avx2 avx512f avx512_bf16 amx}; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; OpenBLAS kernels: $blas_cores"
    "peak (bench/peak, one core): fp32_fma ${peak_gflops[fp32_fma]:-?} GFLOP/s, bf16_dot ${peak_gflops[bf16_dot]:-?}, amx_bf16 ${peak_gflops[amx_bf16]:-?}"
    "dtrain: $dtrain_version, $dtrain, git $git_rev"
    "mpi: $("$mpirun" --version 2>/dev/null | head -n 1)"
)
if ((want_torch)); then
    meta+=("pytorch: $("$torch_python" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($torch_python bench/torch_gpt.py)")
else
    meta+=("pytorch: not run (--no-torch)")
fi
meta+=("model FLOP per token: $flop_token (6 per weight of the matrix products + causal attention)" "csv: $out" "log: $log")
{ printf '# %s\n' "${meta[@]}"; echo "part,round,run,precision,np,metric,value"; } >"$out"
csv() { local IFS=,; echo "$*" >>"$out"; }

failures=0
# runlog NAME COMMAND...: runs it with its output into $rundir/NAME.out and the log; its exit status.
runlog() {
    local name=$1 rc=0
    shift
    "$@" >"$rundir/$name.out" 2>&1 </dev/null || rc=$?
    { echo "==== $name (exit $rc): $*"; cat "$rundir/$name.out"; } >>"$log"
    return "$rc"
}
why() { # NAME WHY: says why run NAME gave nothing, with its last lines
    say "$1: $2; its last lines:"
    tail -n 12 "$rundir/$1.out" 2>/dev/null | sed 's/^/    /' >&2
}
failed() { failures=$((failures + 1)); why "$@"; } # the same, counted (not in a subshell)
dtrain_np() { # NP CPUS ARGS...: dtrain on NP ranks (NP 1: under taskset -c CPUS)
    local np=$1 cpus=$2
    shift 2
    if ((np == 1)); then
        taskset -c "$cpus" "$mpirun" "${mpi_flags[@]}" -np 1 --bind-to none "$dtrain_run" "$data" --model "$model" --threads 1 "$@"
    else
        "$mpirun" "${mpi_flags[@]}" -np "$np" --bind-to core "$dtrain_run" "$data" --model "$model" --threads 1 "$@"
    fi
}
step_losses() { sed -n 's/^step [0-9]*\/[0-9]* - loss: \([0-9.]*\).*/\1/p' "$1"; }
worst_rel() { # FILE-A FILE-B: the worst relative difference of two columns of numbers, and where
    paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (NR == 1 || r > m) { m = r; at = NR } }
        END { if (NR) printf "%.3g %d\n", m, at }'
}
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
kv() { awk -v k="$1" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) { print substr($i, length(k) + 2); exit } }'; } # KEY <<<"a=1 b=2"

# The optimizer of (a) and (c): GPT-2's AdamW with weight decay 0.1 on the
# matrices, clipping at 1, cosine from 1e-3 to 1e-4 after a linear warm-up.
opt_d=(--optimizer adamw --lr 1e-3 --weight-decay 0.1 --clip-norm 1 --lr-schedule cosine --lr-min 1e-4)
opt_t=(--lr 1e-3 --weight-decay 0.1 --clip-norm 1 --lr-schedule cosine --lr-min 1e-4)
report=()

# ---- dtrain's initial weights --------------------------------------------------------
init=""
if ((want_torch && (want_check || want_learn))); then
    # Two updates of 1.2e-38 x the gradient: every product is below float32's
    # smallest normal and flushed to zero (dtrain runs with FTZ/DAZ), so the
    # weights after step 1 are the initial ones; step 2 must leave them equal.
    if runlog init dtrain_np 1 0 --optimizer sgd --lr 1.2e-38 --batch-size 1 --epochs 1 --steps-per-epoch 2 \
        --checkpoint-dir "$rundir/init" --checkpoint-every 1step --keep 0 --no-validation --quiet &&
        [[ -f $rundir/init/ckpt-000000-00000001.h5 ]]; then
        init=$rundir/init/ckpt-000000-00000001.h5
        if command -v h5diff >/dev/null; then
            if h5diff -d 0 "$init" "$rundir/init/ckpt-000001-00000000.h5" /model /model >"$rundir/h5diff.out" 2>&1; then
                report+=("initial weights: a checkpoint after --optimizer sgd --lr 1.2e-38; a second such update leaves every weight equal (h5diff -d 0): ok")
            else
                failures=$((failures + 1))
                report+=("initial weights: a second --lr 1.2e-38 update changed weights (h5diff -d 0): NOT the initial weights")
            fi
        else
            report+=("initial weights: a checkpoint after --optimizer sgd --lr 1.2e-38 (no h5diff here to confirm it)")
        fi
    else
        failed init "the run for the initial weights failed"
    fi
fi

# ---- (a) correctness ---------------------------------------------------------------------
if ((want_check)); then
    spe=$(((check_steps + 1) / 2)) nsteps=$((2 * ((check_steps + 1) / 2)))
    args=("${opt_d[@]}" --warmup-epochs 0.2 --epochs 2 --steps-per-epoch "$spe" --no-validation --verbose)
    say "(a) $nsteps steps at np=1, np=2 and in PyTorch, batch $batch"
    if runlog check-np1 dtrain_np 1 0 "${args[@]}" --batch-size "$batch" --sample-log "$rundir/check-np1.samples"; then
        step_losses "$rundir/check-np1.out" >"$rundir/np1.losses"
    else
        failed check-np1 "dtrain np=1 failed"
    fi
    if runlog check-np2 dtrain_np 2 0 "${args[@]}" --batch-size $((batch / 2)) --sample-log "$rundir/check-np2.samples"; then
        step_losses "$rundir/check-np2.out" >"$rundir/np2.losses"
        read -r w at < <(worst_rel "$rundir/np1.losses" "$rundir/np2.losses") || true
        same=$(cmp -s "$rundir/check-np1.samples" "$rundir/check-np2.samples" && echo "the same" || echo "DIFFERENT")
        n=$(wc -l <"$rundir/np2.losses")
        verdict=ok
        if [[ -z ${w:-} || $n != "$nsteps" || $same != "the same" ]] || ! below "$w" 1e-4; then verdict=FAILED; failures=$((failures + 1)); fi
        report+=("np=2 (batch $((batch / 2)) each) against np=1 (batch $batch): $n steps, worst relative loss difference ${w:--} (step ${at:--}); sample logs $same: $verdict")
        csv check "" dtrain-np2-vs-np1 fp32 2 worst_rel "${w:-}"
    else
        failed check-np2 "dtrain np=2 failed"
    fi
    if ((want_torch)) && [[ -n $init && -s $rundir/np1.losses ]]; then
        if runlog check-torch taskset -c 0 "$torch_python" "$here/torch_gpt.py" --model "$model" --data "$data" --init "$init" \
            --sample-log "$rundir/check-np1.samples" --check "$rundir/check-np1.out" --tol 1e-4 \
            "${opt_t[@]}" --warmup-epochs 0.2 --epochs 2 --steps-per-epoch "$spe" --threads 1 ||
            grep -q '^CHECK ' "$rundir/check-torch.out"; then
            line=$(grep '^CHECK ' "$rundir/check-torch.out")
            w=$(kv worst_rel <<<"$line") at=$(kv at_step <<<"$line") n=$(kv steps <<<"$line")
            verdict=ok
            if [[ $n != "$nsteps" ]] || ! below "$w" 1e-4; then verdict=FAILED; failures=$((failures + 1)); fi
            report+=("dtrain np=1 against PyTorch: $n steps, worst relative loss difference $w (step $at; target 1e-4): $verdict")
            csv check "" dtrain-vs-pytorch fp32 1 worst_rel "$w"
        else
            failed check-torch "torch_gpt.py --check failed"
        fi
    fi
fi

# ---- (b) speed -------------------------------------------------------------------------------
declare -A tps # "RUN PRECISION ROUND" -> tokens/s
comm_ms="" step_ms="" # dtrain -np 2's all-reduce and step milliseconds, one a round
# dtrain's epoch-2 tokens/s from its --metrics file (global samples/s x block_size).
dtrain_tps() { bench_epoch_row "$1" 2 | awk -v T="$block" '{ printf "%.1f\n", $3 * T }'; }
speed_dtrain() { # ROUND NP PRECISION [CPUS]
    local r=$1 np=$2 p=$3 cpus=${4:-0} name="speed-$1-dtrain-np$2-$3${4:+-cpu$4}" v
    if runlog "$name" dtrain_np "$np" "$cpus" --optimizer adamw --clip-norm 1 --batch-size "$batch" --epochs 2 \
        --steps-per-epoch "$speed_steps" --no-validation --precision "$p" --metrics "$rundir/$name.csv" --quiet &&
        v=$(dtrain_tps "$rundir/$name.csv") && [[ -n $v ]]; then
        { echo "---- $name: --metrics"; cat "$rundir/$name.csv"; } >>"$log"
        echo "$v"
    else
        why "$name" "no tokens/s"
        return 1
    fi
}
speed_torch() { # ROUND PRECISION
    local name="speed-$1-pytorch-$2" v
    if runlog "$name" taskset -c 0 "$torch_python" "$here/torch_gpt.py" --model "$model" --data "$data" --bench \
        --batch-size "$batch" --warmup "$speed_steps" --steps "$speed_steps" --precision "$2" --clip-norm 1 --threads 1 &&
        v=$(grep '^RESULT ' "$rundir/$name.out" | kv tokens_per_s) && [[ -n $v ]]; then
        echo "$v"
    else
        why "$name" "no tokens/s"
        return 1
    fi
}
record() { # RUN PRECISION ROUND VALUE
    tps["$1 $2 $3"]=$4
    csv speed "$3" "$1" "$2" "$([[ $1 == dtrain-np2 ]] && echo 2 || echo 1)" tokens_per_s "$4"
    say "round $3/$rounds: $(printf '%-12s %s %9.1f tokens/s' "$1" "$2" "$4")"
}
if ((want_speed)); then
    say "(b) $rounds round(s) of: dtrain and PyTorch at ${precisions[*]} on one core, dtrain -np 2, 2 x -np 1 at once; $speed_steps steps x 2 epochs each"
    for ((r = 1; r <= rounds; r++)); do
        for p in "${precisions[@]}"; do
            if ((r % 2 == 0 && want_torch)); then { v=$(speed_torch "$r" "$p") && record pytorch "$p" "$r" "$v"; } || failures=$((failures + 1)); fi
            { v=$(speed_dtrain "$r" 1 "$p") && record dtrain "$p" "$r" "$v"; } || failures=$((failures + 1))
            if ((r % 2 == 1 && want_torch)); then { v=$(speed_torch "$r" "$p") && record pytorch "$p" "$r" "$v"; } || failures=$((failures + 1)); fi
        done
        { v=$(speed_dtrain "$r" 2 fp32) && record dtrain-np2 fp32 "$r" "$v"; } || failures=$((failures + 1))
        # its all-reduce's share: epoch 2's comm_ms per step against the step's milliseconds
        m=$rundir/speed-$r-dtrain-np2-fp32.csv
        if [[ -s $m ]]; then
            comm_ms+=" $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                $c["kind"] == "epoch" && $c["epoch"] == 2 { print $c["comm_ms"] }' "$m")"
            step_ms+=" $(bench_epoch_row "$m" 2 | awk '{ printf "%.1f", 1e3 * $2 / $1 }')"
        fi
        # Two independent np=1 runs at once, one per core: what 2 cores give without any communication.
        speed_dtrain "$r" 1 fp32 0 >"$rundir/pair0" &
        p0=$!
        speed_dtrain "$r" 1 fp32 1 >"$rundir/pair1" &
        p1=$!
        ok=1
        wait "$p0" || ok=0
        wait "$p1" || ok=0
        if ((ok)); then
            record pair fp32 "$r" "$(awk '{ s += $1 } END { printf "%.1f", s }' "$rundir/pair0" "$rundir/pair1")"
        else
            failures=$((failures + 1))
        fi
    done
    if [[ -x $attn ]] && runlog attention taskset -c 0 "$attn" --n "$batch" --T "$block" --C "$width" \
        --H "$(awk '{ sub(/#.*/, "") } /^heads *=/ { print $3; exit }' "$model")"; then
        :
    else
        failed attention "bench/attention failed or is missing ($attn)"
    fi
fi

# ---- (c) learning ------------------------------------------------------------------------------
declare -A val # "RUN STEP" -> validation loss
learn_spe=$(((learn_steps + learn_evals - 1) / learn_evals))
learn_total=$((learn_spe * learn_evals))
if ((want_learn)); then
    say "(c) $learn_total steps of batch $batch, validated every $learn_spe steps; dtrain on CPU 0$( ((want_torch)) && echo ", PyTorch following its sample log on CPU 1")"
    largs=("${opt_d[@]}" --warmup-epochs 1 --epochs "$learn_evals" --steps-per-epoch "$learn_spe" --batch-size "$batch" --verbose)
    runlog learn-dtrain dtrain_np 1 0 "${largs[@]}" --sample-log "$rundir/learn.samples" --metrics "$rundir/learn.csv" &
    pd=$!
    pt=""
    if ((want_torch)) && [[ -n $init ]]; then
        runlog learn-torch taskset -c 1 "$torch_python" "$here/torch_gpt.py" --model "$model" --data "$data" --init "$init" \
            --sample-log "$rundir/learn.samples" --follow --validate "${opt_t[@]}" --warmup-epochs 1 \
            --epochs "$learn_evals" --steps-per-epoch "$learn_spe" --threads 1 &
        pt=$!
    fi
    if ! wait "$pd"; then
        failed learn-dtrain "dtrain failed"
        [[ -z $pt ]] || kill "$pt" 2>/dev/null || true # it would wait for lines that never come
    fi
    [[ -z $pt ]] || wait "$pt" || failed learn-torch "torch_gpt.py failed"
    # dtrain: each epoch row's global step and val_loss; PyTorch: its VAL lines.
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["kind"] == "epoch" && $c["val_loss"] != "" { print $c["global_step"], $c["val_loss"] }' \
        "$rundir/learn.csv" 2>/dev/null >"$rundir/val-dtrain" || true
    awk '$1 == "VAL" { print $3, $4 }' "$rundir/learn-torch.out" 2>/dev/null >"$rundir/val-torch" || true
    step_losses "$rundir/learn-dtrain.out" | awk '{ print NR, $1 }' >"$rundir/train-dtrain"
    awk '$1 == "STEP" { print $2, $3 }' "$rundir/learn-torch.out" 2>/dev/null >"$rundir/train-torch" || true
    while read -r s v; do val["dtrain $s"]=$v; csv learn "" dtrain fp32 1 "val_loss@$s" "$v"; done <"$rundir/val-dtrain"
    while read -r s v; do val["pytorch $s"]=$v; csv learn "" pytorch fp32 1 "val_loss@$s" "$v"; done <"$rundir/val-torch"
    [[ $(wc -l <"$rundir/val-dtrain") == "$learn_evals" ]] || failed learn-dtrain "$(wc -l <"$rundir/val-dtrain") of $learn_evals validations"
    if command -v gnuplot >/dev/null && [[ -s $rundir/val-dtrain ]]; then
        mkdir -p "$(dirname "$plot")"
        # |PyTorch - dtrain| / dtrain, step by step and at each validation (the lower panel).
        join <(sort -k1,1 "$rundir/train-dtrain") <(sort -k1,1 "$rundir/train-torch") | sort -g |
            awk '{ d = ($3 - $2) / $2; print $1, (d < 0 ? -d : d) + 1e-12 }' >"$rundir/diff-train"
        join <(sort -k1,1 "$rundir/val-dtrain") <(sort -k1,1 "$rundir/val-torch") | sort -g |
            awk '{ d = ($3 - $2) / $2; print $1, (d < 0 ? -d : d) + 1e-12 }' >"$rundir/diff-val"
        upper="plot '$rundir/train-dtrain' using 1:2 with lines lw 1.5 lc rgb '#92c5de' title 'dtrain, training batch', \
     '$rundir/val-dtrain' using 1:2 with linespoints lw 3 pt 7 ps 1.1 lc rgb '#0571b0' title 'dtrain, validation'"
        lower="" height=440 top=1 bottom=0
        if [[ -s $rundir/val-torch ]]; then
            upper+=", '$rundir/train-torch' using 1:2 with lines lw 1 dt 2 lc rgb '#ca0020' title 'PyTorch, training batch', \
     '$rundir/val-torch' using 1:2 with linespoints lw 1.5 dt 2 pt 6 ps 1.6 lc rgb '#ca0020' title 'PyTorch, validation'"
            lower="set size 1, 0.32; set origin 0, 0; set title ''; set logscale y; set format y '10^{%L}'
set ylabel '|PyTorch - dtrain| / dtrain'; set yrange [1e-9:1e-1]; set key top left
plot '$rundir/diff-train' using 1:2 with impulses lw 1 lc rgb '#999999' title 'training batch loss', \
     '$rundir/diff-val' using 1:2 with points pt 7 ps 1.1 lc rgb '#ca0020' title 'validation loss'"
            height=620 top=0.68 bottom=0.32
        fi
        gnuplot <<EOF >"$rundir/gnuplot.out" 2>&1 || failed gnuplot "gnuplot failed"
set terminal svg size 720,$height font "sans,12"
set output "$plot"
set multiplot
set size 1, $top; set origin 0, $bottom
set title "$(basename "$model" .cfg) on $data_about, batch $batch x $block tokens, fp32"
set xlabel "update"
set ylabel "mean token cross-entropy (nats)"
set key top right
set grid
$upper
$lower
unset multiplot
EOF
    else
        say "no gnuplot (Debian: gnuplot-nox) or no validation figures: no plot"
    fi
fi

# ---- Report ---------------------------------------------------------------------------------------
values() { local r; for ((r = 1; r <= rounds; r++)); do [[ -z ${tps["$1 $r"]:-} ]] || echo "${tps["$1 $r"]}"; done; }
ratios() { # A B [FACTOR]: per round A / (FACTOR x B)
    local r
    for ((r = 1; r <= rounds; r++)); do
        [[ -n ${tps["$1 $r"]:-} && -n ${tps["$2 $r"]:-} ]] &&
            awk -v a="${tps["$1 $r"]}" -v b="${tps["$2 $r"]}" -v f="${3:-1}" 'BEGIN { printf "%.4f\n", a / (f * b) }'
    done
    return 0
}
row() { # TEXT RUN
    local s n mn md mx
    s=$(values "$2" | stats)
    n=$(values "$2" | wc -l)
    if [[ -n $s ]]; then
        read -r mn md mx <<<"$s"
        printf '%-34s %9.0f %9.0f %9.0f %6s %9.1f\n' "$1" "$mn" "$md" "$mx" "$n/$rounds" \
            "$(awk -v t="$md" -v f="$flop_token" 'BEGIN { print t * f / 1e9 }')"
    else
        printf '%-34s %9s %9s %9s %6s %9s\n' "$1" - - - "0/$rounds" -
    fi
}
# What the 1.5x target asks of this core: 1.5 x PyTorch's median tokens/s as
# model GFLOP/s, against the peak of the unit dtrain's matrix products run
# on (AMX where bench/peak found it, else AVX512-BF16 dot products, for
# bf16; FMAs for fp32), beside both sides' own shares of that peak. Above
# 100%, no kernel reaches the target on this CPU; the model FLOP (6 per
# weight) leave out the layer norms, GELU and softmax, so every share is a
# lower bound of the work done.
ceiling_line() { # PRECISION
    local u=fp32_fma pt dt
    [[ $1 != bf16 ]] || { [[ -n ${peak_gflops[amx_bf16]:-} ]] && u=amx_bf16 || u=bf16_dot; }
    pt=$(values "pytorch $1" | median) dt=$(values "dtrain $1" | median)
    [[ -n $pt && -n $dt && -n ${peak_gflops[$u]:-} ]] || return 0
    awk -v pt="$pt" -v dt="$dt" -v f="$flop_token" -v pk="${peak_gflops[$u]}" -v p="$1" -v u="$u" 'BEGIN {
        n = 1.5 * pt * f / 1e9
        printf "# %s: 1.5x pytorch = %.1f GFLOP/s = %.0f%% of the %s peak %s (dtrain at %.0f%%, pytorch at %.0f%%)\n",
            p, n, 100 * n / pk, u, pk, 100 * dt * f / 1e9 / pk, 100 * pt * f / 1e9 / pk }'
}
ratio_line() { # TEXT A B FACTOR TARGET
    local s n mn md mx verdict=""
    s=$(ratios "$2" "$3" "$4" | stats)
    n=$(ratios "$2" "$3" "$4" | wc -l)
    if [[ -n $s ]]; then
        read -r mn md mx <<<"$s"
        [[ -z $5 ]] || { below "$5" "$md" && verdict="target >= $5: met" || verdict="target >= $5: NOT met"; }
        printf '%-44s %6.2f   (%.2f-%.2f, %d/%d rounds)  %s\n' "$1" "$md" "$mn" "$mx" "$n" "$rounds" "$verdict"
        csv speed "" "$2/$3" "" "" ratio_median "$md"
    else
        printf '%-44s %6s   (0/%d rounds)\n' "$1" - "$rounds"
    fi
}

printf '# %s\n' "${meta[@]}"
if ((want_check)) || [[ -n $init ]]; then
    echo
    echo "## (a) correctness: fp32 step losses, $((2 * ((check_steps + 1) / 2))) steps (2 epochs), AdamW + clipping + cosine schedule"
    printf '%s\n' "${report[@]}"
fi
if ((want_speed)); then
    echo
    echo "## (b) speed: tokens/s of the timed epoch ($speed_steps steps of $batch x $block tokens), $rounds round(s)"
    printf '%-34s %9s %9s %9s %6s %9s\n' run min median max runs "GFLOP/s"
    for p in "${precisions[@]}"; do
        row "dtrain $p, 1 core" "dtrain $p"
        ((want_torch)) && row "pytorch $p, 1 core" "pytorch $p"
    done
    row "dtrain fp32 -np 2, 2 cores" "dtrain-np2 fp32"
    row "2 x dtrain fp32 -np 1 at once" "pair fp32"
    echo "# GFLOP/s: the median tokens/s x $flop_token model FLOP per token"
    echo
    echo "# median over the rounds of each round's own ratio (range, rounds with both figures)"
    for p in "${precisions[@]}"; do
        ((want_torch)) && ratio_line "dtrain / pytorch, $p, 1 core" "dtrain $p" "pytorch $p" 1 1.5
    done
    if ((want_torch)); then for p in "${precisions[@]}"; do ceiling_line "$p"; done; fi
    if ((${#precisions[@]} == 2)); then
        ((want_torch)) && ratio_line "dtrain bf16 / pytorch fp32, 1 core" "dtrain bf16" "pytorch fp32" 1 ""
        ratio_line "dtrain bf16 / dtrain fp32" "dtrain bf16" "dtrain fp32" 1 ""
        ((want_torch)) && ratio_line "pytorch bf16 / pytorch fp32" "pytorch bf16" "pytorch fp32" 1 ""
    fi
    ratio_line "dtrain np=2 / (2 x np=1), fp32" "dtrain-np2 fp32" "dtrain fp32" 2 0.9
    ratio_line "dtrain np=2 / 2 x np=1 at once, fp32" "dtrain-np2 fp32" "pair fp32" 1 ""
    [[ -z ${comm_ms// /} ]] || printf '# dtrain np=2: all-reduce %.1f ms of a %.1f ms step (medians; the wait for the other rank included)\n' \
        "$(median <<<"$comm_ms")" "$(median <<<"$step_ms")"
    if [[ -s $rundir/attention.out ]]; then
        echo
        echo "# attention kernel (bench/attention: n $batch, T $block, C $width; causal; FLOP counted as products computed)"
        while read -r _ p rest; do
            g=$(kv fwdbwd_gflops <<<"$rest") f=$(kv fwd_gflops <<<"$rest") b=$(kv bwd_gflops <<<"$rest")
            u=$(kv unit <<<"$rest") u=${u:-fp32_fma} # the unit its products ran on
            printf 'attention %-5s forward %6.1f  backward %6.1f  forward+backward %6.1f GFLOP/s = %s of %s peak %s\n' \
                "$p" "$f" "$b" "$g" "$(awk -v g="$g" -v pk="${peak_gflops[$u]:-0}" 'BEGIN { if (pk > 0) printf "%.0f%%", 100 * g / pk; else print "?" }')" "$u" "${peak_gflops[$u]:-?}"
            csv speed "" attention "$p" 1 fwdbwd_gflops "$g"
        done < <(grep '^attention .*fwdbwd_gflops=' "$rundir/attention.out")
    fi
fi
if ((want_learn)); then
    echo
    echo "## (c) learning: $learn_total updates (batch $batch, AdamW 1e-3 cosine to 1e-4, warm-up $learn_spe, decay 0.1, clip 1), validation loss every $learn_spe"
    printf '%8s %12s %12s %12s\n' update dtrain pytorch difference
    while read -r s v; do
        t=${val["pytorch $s"]:-}
        printf '%8s %12.6f %12s %12s\n' "$s" "$v" "${t:--}" "$([[ -n $t ]] && awk -v a="$v" -v b="$t" 'BEGIN { printf "%+.2e", (b - a) / a }' || echo -)"
    done <"$rundir/val-dtrain"
    [[ ! -s $plot ]] || echo "plot: $plot"
fi

if ((failures)); then
    say "$failures run(s) or check(s) failed (details above and in $log)"
    exit 1
fi
