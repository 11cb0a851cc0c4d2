#!/usr/bin/env bash
# checkpoint-async.sh: what a checkpoint every K steps costs the training,
# written in the step (the default) against --checkpoint-async, with a run
# that takes none as the control, side by side in one invocation.
#
# Each round runs three fresh jobs, in an order that rotates from round to
# round: no checkpoints, synchronous ones, asynchronous ones; each trains
# one epoch of S steps of MODEL on synthetic data with a checkpoint every K
# steps, and dtrain's --metrics-every 1 gives every step's end time. A
# checkpoint after step c costs the steps c+1..c+W (W = min(5, K-1)): the
# synchronous write or the snapshot lands in step c+1, the writer thread's
# competition for cores and disk in the steps after. So the cost is measured
# inside each run, where the noise of a shared machine cancels:
#   - excess: the sum over those windows of (step time - the run's median
#     step outside them), per checkpoint; the control run, measured over the
#     same windows, shows the noise floor;
#   - blocked: the time training stood still per checkpoint, from dtrain's
#     run summary (snapshot and hand-over for async, the whole write for
#     sync), and the per-round ratio async / sync;
#   - overhead at every 50 steps: excess / (50 x the run's median step).
# The writer's own time per write is printed, to check it fits in W steps.
# Quoted are medians over the rounds; settings are compared only inside a
# round.
#
# Usage: bench/checkpoint-async.sh [--build DIR] [--model CFG] [--np N]
#            [--precision P] [--batch B] [--steps S] [--every K] [--rounds R]
#            [--dir DIR] [--out CSV]
set -euo pipefail

prog=checkpoint-async.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

usage() {
    cat <<EOF
Usage: bench/$prog [OPTIONS]

Times one epoch of S steps with no checkpoints, with a checkpoint every K
steps written in the step, and with --checkpoint-async; R rounds; medians.

  --build DIR       build directory holding dtrain (default: build)
  --model CFG       model (default: inputs/resnet32-wide4.cfg, 7.4 M parameters)
  --np N            ranks (default 2)
  --precision P     fp32 or bf16 (default bf16 where the CPU has AVX512-BF16
                    or AMX-BF16, else fp32)
  --batch B         batch per rank (default 64)
  --steps S         steps in the epoch (default 60)
  --every K         a checkpoint every K steps (default 20; K < S)
  --rounds R        rounds of the three runs (default 3)
  --dir DIR         where checkpoints go (default: a fresh directory under
                    \${TMPDIR:-/tmp}, removed at the end)
  --out CSV         one row per run (default: no file)
  -h, --help        this text
EOF
}

build=$repo/build model=$repo/inputs/resnet32-wide4.cfg np=2 precision= batch=64 steps=60 every=20 rounds=3
dir="" out=""
while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --build | --model | --np | --precision | --batch | --steps | --every | --rounds | --dir | --out)
            (($# >= 2)) || die "$1: needs a value"
            v=$2
            case $1 in
                --build) build=$v ;; --model) model=$v ;; --np) positive "$1" "$v"; np=$v ;;
                --precision) [[ $v == fp32 || $v == bf16 ]] || die "--precision: expected fp32 or bf16, found '$v'"
                             precision=$v ;;
                --batch) positive "$1" "$v"; batch=$v ;; --steps) positive "$1" "$v"; steps=$v ;;
                --every) positive "$1" "$v"; every=$v ;; --rounds) positive "$1" "$v"; rounds=$v ;;
                --dir) dir=$v ;; --out) out=$v ;;
            esac
            shift 2 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done
((every < steps)) || die "--every $every: expected fewer than --steps ($steps), so that a checkpoint falls inside the epoch"
dtrain=$build/dtrain
[[ -x $dtrain ]] || die "--build $build: no dtrain there (run make first)"
[[ -r $model ]] || die "--model $model: no such readable file"
if [[ -z $precision ]]; then # dtrain refuses bf16 on a CPU without bf16 instructions
    precision=fp32
    bench_cpu_bf16 && precision=bf16
fi
mid=$(((steps - 1) / every))
win=$((every - 1 < 5 ? every - 1 : 5))
((win >= 1)) || die "--every $every: expected 2 or more, so that a window of steps follows each checkpoint"
if [[ -z $dir ]]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-ckbench.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir" || die "--dir $dir: cannot create it"
bench_launcher
bench_about "$dtrain" "$np"
[[ -z $out ]] || echo "round,setting,epoch_s,median_step_ms,checkpoints_mid,excess_ms_each,blocked_ms_each,write_s_each" >"$out"

# One run: sets secs (the epoch's), med (its median step outside the
# windows, ms), excess (ms per checkpoint window), blocked (ms per checkpoint
# of the kind the setting takes mid-epoch; empty for none) and wrote (the
# writer thread's seconds per write; empty but for async).
run() { # SETTING
    local args=(--synthetic "32x32x3:10:$((np * batch * steps))" --model "$model" --precision "$precision"
                --batch-size "$batch" --epochs 1 --steps-per-epoch "$steps" --no-validation --threads 1 --seed 7
                --metrics "$dir/steps.csv" --metrics-every 1)
    rm -rf "$dir/ck" "$dir/steps.csv"
    case $1 in
        sync) args+=(--checkpoint-dir "$dir/ck" --checkpoint-every "${every}step" --keep 1) ;;
        async) args+=(--checkpoint-dir "$dir/ck" --checkpoint-every "${every}step" --keep 1 --checkpoint-async) ;;
    esac
    local log
    # shellcheck disable=SC2154  # mpirun, mpi_flags: bench_launcher
    log=$("$mpirun" "${mpi_flags[@]}" -np "$np" "$dtrain" "${args[@]}" 2>&1) || { echo "$log" >&2; die "dtrain failed ($1)"; }
    secs=$(sed -n 's/^Epoch 1\/1 - \([0-9.]*\) s - .*/\1/p' <<<"$log")
    [[ -n $secs ]] || { echo "$log" >&2; die "no epoch line ($1)"; }
    read -r med excess < <(awk -F, -v K="$every" -v W="$win" -v S="$steps" '
        $1 == "step" { t[$3] = $6 }
        END {
            for (k = 1; k <= S; k++) {
                d[k] = 1000 * (t[k] - (k > 1 ? t[k - 1] : 0))
                c = int((k - 1) / K) * K  # the last checkpoint step before k
                inwin[k] = c > 0 && c < S && k - c <= W
            }
            n = 0
            for (k = 2; k <= S; k++) if (!inwin[k]) v[++n] = d[k]  # step 1 pays one-off costs
            for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
            med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            sum = 0; m = 0
            for (k = 1; k <= S; k++) if (inwin[k]) sum += d[k] - med
            for (c = K; c < S; c += K) m++
            printf "%.1f %.1f\n", med, m ? sum / m : 0
        }' "$dir/steps.csv")
    blocked="" wrote=""
    case $1 in
        sync) blocked=$(sed -n 's/.* in the step, training stood still [0-9.]* s (\([0-9.]*\) ms each).*/\1/p' <<<"$log") ;;
        async) blocked=$(sed -n 's/.* on the writer thread, training stood still [0-9.]* s (\([0-9.]*\) ms each).*/\1/p' <<<"$log")
               wrote=$(sed -n 's/.* on the writer thread, .* (\([0-9.]*\) ms each), written there in \([0-9.]*\) s.*/\2/p' <<<"$log") ;;
    esac
    [[ -z $wrote ]] || wrote=$(awk -v w="$wrote" -v m="$mid" 'BEGIN { printf "%.2f", w / m }')
}

declare -A M X B
settings=(none sync async)
echo "# $prog: $rounds round(s) of {none, sync, async}: $(basename "$model"), $np rank(s), $precision, batch $batch per rank, $steps steps, a checkpoint every $every steps ($mid mid-epoch, $win-step windows), into $dir"
# shellcheck disable=SC2154  # bench_about's
echo "# $dtrain_version; $git_rev; $cpu_model; cores busy before: $busy_cores"
for ((r = 1; r <= rounds; r++)); do
    for ((i = 0; i < 3; i++)); do
        s=${settings[$(((i + r - 1) % 3))]}
        run "$s"
        M[$s $r]=$med X[$s $r]=$excess B[$s $r]=$blocked
        printf '%s: round %d/%d: %-5s epoch %7.2f s  median step %7.1f ms  excess %7.1f ms/ckpt%s%s\n' "$prog" "$r" \
            "$rounds" "$s" "$secs" "$med" "$excess" "${blocked:+  blocked $blocked ms each}" "${wrote:+  writer $wrote s/write}"
        [[ -z $out ]] || echo "$r,$s,$secs,$med,$mid,$excess,$blocked,$wrote" >>"$out"
    done
done

col() { # EXPR over rounds: awk expression of mn ms ma (median steps), xn xs xa (excess), bs ba (blocked)
    for ((r = 1; r <= rounds; r++)); do
        awk -v mn="${M[none $r]}" -v ms="${M[sync $r]}" -v ma="${M[async $r]}" -v xn="${X[none $r]}" \
            -v xs="${X[sync $r]}" -v xa="${X[async $r]}" -v bs="${B[sync $r]}" -v ba="${B[async $r]}" \
            "BEGIN { print $1 }"
    done | median
}
echo "# medians over $rounds round(s):"
echo "median step ms       none $(col 'mn')  sync $(col 'ms')  async $(col 'ma')"
echo "excess ms / ckpt     none $(col 'xn')  sync $(col 'xs')  async $(col 'xa')"
echo "blocked ms / ckpt    sync $(col 'bs')  async $(col 'ba')  async/sync $(col 'ba/bs')"
echo "overhead, every 50   none $(col '100*xn/(50*mn)')%  sync $(col '100*xs/(50*ms)')%  async $(col '100*xa/(50*ma)')%"
