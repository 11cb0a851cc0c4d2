#!/usr/bin/env bash
# monitoring-overhead.sh: what --timeline and --logdir cost in samples/s.
#
#   bench/monitoring-overhead.sh DATA.h5 [PAIRS] [NP]
#
# Runs dtrain (build/dtrain, or $DTRAIN) at NP ranks (default 2) PAIRS times
# (default 5) without and with `--timeline --logdir --metrics`, alternating
# which goes first, and prints each pair's epoch-2 samples/s, their ratio,
# the median ratio, and the timeline's span count per rank. Same script,
# same machine, side by side: this machine is shared and noisy.
set -euo pipefail
prog=monitoring-overhead.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
data=${1:?usage: monitoring-overhead.sh DATA.h5 [PAIRS] [NP]}
pairs=${2:-5} np=${3:-2}
top=$(cd "$(dirname "$0")/.." && pwd)
dtrain=${DTRAIN:-$top/build/dtrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to core --mca pml ob1 --mca btl self,vader -np "$np")
args=("$data" --epochs 2 --steps-per-epoch 300 --batch-size 64 --no-validation)
rate() { sed -n 's/^Epoch 2\/2 - [0-9.]* s - \([0-9]*\) samples\/s.*/\1/p' "$1"; }
run() { "${mpi[@]}" "$dtrain" "${args[@]}" "$@" >"$tmp/out" 2>&1; rate "$tmp/out"; }
ratios=()
for ((i = 1; i <= pairs; i++)); do
  on=(--timeline "$tmp/tl.json" --logdir "$tmp/tb" --metrics "$tmp/m.csv")
  if ((i % 2)); then off=$(run); with=$(run "${on[@]}"); else with=$(run "${on[@]}"); off=$(run); fi
  r=$(awk -v a="$with" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$r")
  echo "pair $i: off $off samples/s, on $with samples/s, on/off $r"
done
med=$(median <<<"${ratios[*]}")
echo "median on/off: $med ($pairs pairs, np=$np, 2 x 300 steps of batch 64, epoch 2)"
/usr/bin/python3 - "$tmp/tl.json" <<'PY'
import collections, json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
for pid, n in sorted(collections.Counter(e["pid"] for e in ev).items()):
    kinds = collections.Counter(e["name"].split(" ")[0] for e in ev if e["pid"] == pid)
    print(f"timeline rank {pid}: {n} spans: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
PY
