#!/usr/bin/env bash
# autotune-check.sh: does --autotune land near the best configuration of a
# measured grid? Part of bench/shaped-study.sh; runs across the hosts of a
# tests/cluster/cluster.sh cluster that is up (2 hosts, link shaped).
#
#   bench/autotune-check.sh --grid SUMMARY.csv --flags 'MPIRUN FLAGS' [--build DIR] [--out DIR] [--repeats R]
#
# 1. dtrain --autotune with a fresh cache on resnet32-wide4 (batch 16 per
#    replica, 2 hosts): its report (every candidate and the choice).
# 2. The grid's best 2-host configuration (least step_ms in SUMMARY.csv, a
#    jobscripts/scaling-study summary of the same model and batch) and a run
#    with --autotune that starts from the kept choice, alternating R times;
#    each run's step time is the median of its epochs after the first
#    (--metrics). Prints both medians and their ratio.
set -euo pipefail
prog=autotune-check.sh
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$repo/build out='' grid='' flags='' repeats=2
die() { echo "$prog: error: $*" >&2; exit 2; }
while (($#)); do
    case $1 in
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --grid) grid=$2; shift 2 ;;
        --flags) flags=$2; shift 2 ;;
        --repeats) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--repeats: expected a positive integer, found '$2'"; repeats=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ -f $grid ]] || die "--grid: expected a scaling-study summary.csv, found '${grid}'"
[[ -n $flags ]] || die "--flags: the mpirun flags that reach the hosts (DTC_MPIRUN_FLAGS) are needed"
out=${out:-$repo/bench/results/autotune-$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
dtrain=$build/dtrain
model=$repo/inputs/resnet32-wide4.cfg
base=(--synthetic 32x32x3:10 --model "$model" --batch-size 16 --no-validation --seed 1)
# shellcheck disable=SC2206,SC2054  # flags is a list of words; h1:1,h2:1 is one
launch=(mpirun $flags -x OMP_NUM_THREADS --host h1:1,h2:1 -n 2)

# step_ms METRICS.csv: the median over the epochs after the first of seconds/step.
step_ms() {
    /usr/bin/python3 - "$1" <<'EOF'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("kind") == "epoch"]
rows = rows[1:] if len(rows) > 1 else rows
print("%.1f" % statistics.median(1e3 * float(r["seconds"]) / float(r["step"]) for r in rows))
EOF
}

# The grid's best 2-host row, as dtrain flags and its step time.
read -r best best_ms < <(/usr/bin/python3 - "$grid" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["nodes"] == "2"]
b = min(rows, key=lambda r: float(r["step_ms"]))
ov = {"on": "--overlap", "off": "--no-overlap"}.get(b["overlap"], "")
print("--allreduce=%s,--bucket-mb=%s%s %s" % (b["allreduce"], b["bucket_mb"], "," + ov if ov else "", b["step_ms"]))
EOF
)
IFS=, read -r -a best_args <<<"$best"
echo "autotune: the grid's best on 2 hosts: ${best_args[*]} ($best_ms ms/step in the grid)"

cache=$out/autotune.tsv
rm -f "$cache"
"${launch[@]}" "$dtrain" "${base[@]}" --epochs 4 --steps-per-epoch 20 --autotune --autotune-cache "$cache" \
    >"$out/tune.log" 2>&1 || die "the tuning run failed (see $out/tune.log)"
grep '^dtrain: autotune' "$out/tune.log"

tuned=() fixed=()
for ((r = 1; r <= repeats; r++)); do
    "${launch[@]}" "$dtrain" "${base[@]}" --epochs 3 --steps-per-epoch 6 --autotune --autotune-cache "$cache" \
        --metrics "$out/tuned-$r.csv" >"$out/tuned-$r.log" 2>&1 || die "run failed (see $out/tuned-$r.log)"
    tuned+=("$(step_ms "$out/tuned-$r.csv")")
    "${launch[@]}" "$dtrain" "${base[@]}" --epochs 3 --steps-per-epoch 6 "${best_args[@]}" \
        --metrics "$out/best-$r.csv" >"$out/best-$r.log" 2>&1 || die "run failed (see $out/best-$r.log)"
    fixed+=("$(step_ms "$out/best-$r.csv")")
done
/usr/bin/python3 - "${tuned[*]}" "${fixed[*]}" <<'EOF'
import statistics, sys
t = [float(x) for x in sys.argv[1].split()]
f = [float(x) for x in sys.argv[2].split()]
mt, mf = statistics.median(t), statistics.median(f)
print("autotune: kept choice %.1f ms/step (runs: %s), grid's best %.1f ms/step (runs: %s): %.3fx the best"
      % (mt, " ".join(sys.argv[1].split()), mf, " ".join(sys.argv[2].split()), mt / mf))
EOF
