#!/bin/sh
# scaling_study.sh: jobscripts/scaling-study end to end, on a tiny sweep.
#
# - mlp on 8x8x1 synthetic data, ranks 1 and 2, strong and weak, 1 repeat:
#   runs.csv and summary.csv have one row per configuration and the
#   documented columns; the batches follow the scaling mode (strong: G/P per
#   replica; weak: B per replica); the 1-rank rows have speedup and
#   efficiency 1; every figure is positive (the all-reduce and data waits
#   non-negative) and compute_ms = step_ms - wait_ms - data_ms; the three
#   plots exist as PNG and SVG when gnuplot is installed (SKIP said otherwise).
# - Without gnuplot the CSVs are still written and a message says how to
#   install it (with two emulated nodes: --emulate-nodes passes
#   --ranks-per-node and the run reports "2 nodes ... (emulated)").
# - --dry-run prints one command per run and creates nothing; under a Slurm
#   stand-in (SLURM_* variables) it sweeps nodes x ranks per node with srun.
# - The gradient-exchange dimensions: --dry-run passes each combination of
#   --bucket-mb, --overlap and --grad-compression exactly once (powersgd:R
#   as written), and nothing of them when they are not given; a real sweep
#   over two bucket sizes x two compressions writes their columns, one
#   baseline per combination, dtrain's layout line confirms each run's
#   setting, and the plots against each dimension exist.
# - --cluster reads a harness state directory (a stand-in: hosts, launcher
#   flags, the shaped link), runs every run on its hosts (a stand-in
#   launcher records the command) and writes the link column; without a
#   cluster it says how to start one. --hosts with --launcher-args.
# - A bad option, rank list, indivisible global batch, bucket size, overlap
#   or compression, or --cluster without a cluster: exit 2, one message.
. "$TOP_SRCDIR/tests/common.sh"
if [ ! -x /usr/bin/python3 ]; then echo "SKIP: /usr/bin/python3 missing (Debian package python3)"; exit 77; fi
STUDY=$TOP_SRCDIR/jobscripts/scaling-study
T=$TEST_TMP/scaling.$$
rm -rf "$T"; mkdir -p "$T"
# Never the cluster a person may have up: --cluster reads only stand-ins here.
DTC_STATE=$T/no-cluster; export DTC_STATE
tiny="--models mlp --synthetic 8x8x1:4:1024 --ranks 1,2 --repeats 1 --epochs 2 --steps 4 --global-batch 32 --batch 16 --timeout 120"

# col FILE NAME: the values of column NAME, one per line
col() { awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } c { print $c }' "$1"; }
# rows FILE: data rows
rows() { echo $(($(wc -l <"$1") - 1)); }
# check WHAT AWK-CONDITION FILE: every data row satisfies it (fields by name: v["ranks"])
check() {
  if awk -F, -v cond="$2" 'NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i; next }
       { for (i = 1; i <= NF; i++) v[h[i]] = $i; n++ }
       cond == "ones" && v["ranks"] == 1 && (v["speedup"] != 1 || v["efficiency"] != 1) { bad++ }
       cond == "positive" && !(v["samples_per_s"] > 0 && v["step_ms"] > 0 && v["compute_ms"] > 0 && v["speedup"] > 0 &&
                               v["efficiency"] > 0 && v["comm_ms"] >= 0 && v["wait_ms"] >= 0 && v["data_ms"] >= 0) { bad++ }
       cond == "sum" { d = v["step_ms"] - v["wait_ms"] - v["data_ms"] - v["compute_ms"]; if (d * d > 1e-6 * v["step_ms"] ^ 2) bad++ }
       cond == "batches" && v["scaling"] == "strong" && !(v["global_batch"] == 32 && v["batch_per_replica"] * v["replicas"] == 32) { bad++ }
       cond == "batches" && v["scaling"] == "weak" && !(v["batch_per_replica"] == 16 && v["global_batch"] == 16 * v["replicas"]) { bad++ }
       END { exit bad > 0 || n == 0 }' "$3"; then
    pass "$1"
  else
    fail "$1:"; cat "$3" >&2
  fi
}

# ---- The tiny sweep --------------------------------------------------------------
# shellcheck disable=SC2086
"$STUDY" $tiny --out "$T/out" >"$T/log" 2>&1; rc=$?
runs=$T/out/runs.csv sum=$T/out/summary.csv
if [ "$rc" = 0 ] && [ -f "$runs" ] && [ -f "$sum" ] && [ "$(rows "$runs")" = 4 ] && [ "$(rows "$sum")" = 4 ]; then
  pass "tiny sweep (2 rank counts x strong, weak): 4 runs, 4 summary rows"
else
  fail "tiny sweep: exit $rc"; cat "$T/log" "$runs" "$sum" >&2
  finish
fi
missing=
for c in model strategy allreduce scaling ranks nodes batch_per_replica global_batch repeat samples_per_s step_ms \
  comm_ms wait_ms data_ms compute_ms speedup efficiency; do
  head -1 "$runs" | tr , '\n' | grep -qx "$c" || missing="$missing $c"
done
for c in model strategy allreduce scaling ranks nodes batch_per_replica global_batch repeats samples_per_s \
  samples_per_s_min samples_per_s_max ideal_samples_per_s step_ms comm_ms wait_ms data_ms compute_ms speedup efficiency; do
  head -1 "$sum" | tr , '\n' | grep -qx "$c" || missing="$missing summary:$c"
done
if [ -z "$missing" ]; then pass "runs.csv and summary.csv have the documented columns"
else fail "columns missing:$missing"; head -1 "$runs" "$sum" >&2; fi
if [ "$(col "$runs" ranks | sort | tr '\n' ' ')" = "1 1 2 2 " ] &&
   [ "$(col "$runs" scaling | sort | tr '\n' ' ')" = "strong strong weak weak " ] &&
   [ "$(col "$runs" model | sort -u)" = mlp ]; then
  pass "one run per rank count and scaling mode"
else
  fail "the runs are not ranks {1,2} x {strong,weak}"; cat "$runs" >&2
fi
check "strong: global batch 32 = batch per replica x replicas; weak: 16 per replica" batches "$runs"
check "the 1-rank runs: speedup 1, efficiency 1 (runs.csv)" ones "$runs"
check "the 1-rank rows: speedup 1, efficiency 1 (summary.csv)" ones "$sum"
check "every figure positive (runs.csv)" positive "$runs"
check "every figure positive (summary.csv)" positive "$sum"
check "compute_ms = step_ms - wait_ms - data_ms (summary.csv)" sum "$sum"
if [ "$(col "$sum" bucket_mb | sort -u)" = 1 ] && [ "$(col "$sum" overlap | sort -u)" = auto ] &&
   [ "$(col "$sum" grad_compression | sort -u)" = none ] && [ -z "$(col "$runs" link | sort -u)" ] &&
   ! grep -q -- '--bucket-mb\|overlap\|--grad-compression' "$T/out/logs/"*.log; then
  pass "dimensions not given: dtrain's defaults in the columns (1, auto, none; no link), nothing passed"
else
  fail "default dimensions"; cat "$sum" >&2
fi
if [ "$(find "$T/out/metrics" -name '*.csv' | wc -l)" = 4 ] && [ "$(find "$T/out/logs" -name '*.log' | wc -l)" = 4 ] && grep -q 'load average after' "$T/out/study.txt"; then
  pass "each run's --metrics file and log kept; study.txt records the load"
else
  fail "metrics/, logs/ or study.txt incomplete"; ls -R "$T/out" >&2
fi

if command -v gnuplot >/dev/null 2>&1; then
  n=0
  for s in strong weak; do for k in throughput efficiency breakdown; do
    f=$T/out/plots/mlp-$s-$k
    [ -s "$f.png" ] && [ "$(head -c 4 "$f.png" | tail -c 3)" = PNG ] && grep -q '<svg' "$f.svg" && n=$((n + 1))
  done; done
  if [ "$n" = 6 ]; then pass "plots: throughput, efficiency, breakdown x strong, weak as PNG and SVG"
  else fail "plots: $n of 6 as PNG and SVG"; ls "$T/out/plots" >&2; cat "$T/log" >&2; fi
else
  echo "SKIP (this part): gnuplot is not installed (Debian: gnuplot-nox), plots not checked"
fi

# ---- Without gnuplot; two emulated nodes ------------------------------------------------
GNUPLOT=$T/no-gnuplot "$STUDY" --models mlp --synthetic 8x8x1:4:1024 --ranks 1 --nodes 1,2 --emulate-nodes \
  --scaling weak --repeats 1 --epochs 2 --steps 4 --batch 16 --timeout 120 --out "$T/nogp" >"$T/log2" 2>&1; rc=$?
if [ "$rc" = 0 ] && [ "$(rows "$T/nogp/summary.csv")" = 2 ] && grep -q 'gnuplot not found' "$T/log2" &&
   grep -q 'apt-get install gnuplot-nox' "$T/log2" && ! ls "$T/nogp/plots/"*.png >/dev/null 2>&1; then
  pass "no gnuplot: the CSVs are written and the message says to install gnuplot-nox"
else
  fail "no gnuplot: exit $rc"; cat "$T/log2" >&2
fi
if [ "$(col "$T/nogp/summary.csv" nodes | tr '\n' ' ')" = "1 2 " ] &&
   grep -q -- '--ranks-per-node 1' "$T/nogp/logs/"*n2x1*.log && grep -q 'layout: 2 nodes x 1 rank (emulated)' "$T/nogp/logs/"*n2x1*.log; then
  pass "--emulate-nodes: 2 nodes x 1 rank via dtrain --ranks-per-node 1"
else
  fail "--emulate-nodes"; cat "$T/nogp/summary.csv" "$T/nogp/logs/"*n2x1*.log >&2
fi

# ---- The gradient-exchange dimensions ------------------------------------------------------
"$STUDY" --models mlp --synthetic 8x8x1:4:1024 --ranks 1,2 --scaling weak --repeats 1 --epochs 2 --steps 4 --batch 16 \
  --timeout 120 --bucket-mb 4,0.25 --grad-compression none,bf16 --dtrain-args '--no-overlap' --link 'veth,unshaped' \
  --out "$T/dims" >"$T/log3" 2>&1; rc=$?
sum=$T/dims/summary.csv
if [ "$rc" = 0 ] && [ "$(rows "$sum")" = 8 ] && [ "$(rows "$T/dims/runs.csv")" = 8 ] &&
   [ "$(col "$sum" bucket_mb | sort | uniq -c | tr -s ' ' | tr '\n' ';')" = " 4 0.25; 4 4;" ] &&
   [ "$(col "$sum" grad_compression | sort | uniq -c | tr -s ' ' | tr '\n' ';')" = " 4 bf16; 4 none;" ] &&
   [ "$(col "$T/dims/runs.csv" overlap | sort -u)" = off ] && [ "$(col "$T/dims/runs.csv" link | sort -u)" = "veth unshaped" ]; then
  pass "2 bucket sizes x 2 compressions x ranks 1, 2: 8 rows with bucket_mb, grad_compression, overlap (from --dtrain-args), link"
else
  fail "dimensions sweep: exit $rc"; cat "$T/log3" "$sum" >&2
fi
check "one baseline per bucket size x compression: every 1-rank row has speedup 1" ones "$sum"
check "every figure positive (dimensions sweep)" positive "$sum"
n=0
for b in 0.25 4; do for c in none bf16; do
  f=$(grep -l -- "--bucket-mb $b --grad-compression $c --no-overlap\$" "$T/dims/logs/"*n1x2*.log)
  # dtrain's layout line, e.g. "all-reduce auto (bf16), 1 bucket of >= 0.25 MiB, after backward"
  z=; [ "$c" = bf16 ] && z=' (bf16)'
  [ "$(echo "$f" | grep -c .)" = 1 ] && grep -q "^layout: .*all-reduce auto$z, [0-9]* buckets* of >= $(printf %.2f "$b") MiB, after backward" "$f" &&
    n=$((n + 1))
done; done
if [ "$n" = 4 ]; then pass "each 2-rank run got its --bucket-mb and --grad-compression (dtrain's layout line says so)"
else fail "$n of 4 runs confirm their settings"; grep -h '^\$\|^layout' "$T/dims/logs/"*n1x2*.log >&2; fi
if command -v gnuplot >/dev/null 2>&1; then
  n=0
  for d in bucket-mb grad-compression; do for k in throughput breakdown; do
    f=$T/dims/plots/mlp-weak-by-$d-$k
    [ -s "$f.png" ] && grep -q '<svg' "$f.svg" && n=$((n + 1))
  done; done
  if [ "$n" = 4 ] && [ ! -e "$T/dims/plots/mlp-weak-by-overlap-throughput.png" ]; then
    pass "plots against bucket size and compression (not overlap: one value)"
  else fail "plots by dimension: $n of 4"; ls "$T/dims/plots" >&2; fi
fi
"$STUDY" --models mlp --ranks 2 --scaling weak --repeats 1 --bucket-mb 0.25,16 --overlap on,off,auto \
  --grad-compression none,bf16,powersgd:2 --dry-run >"$T/dims.txt" 2>&1; rc=$?
n=0
for b in 0.25 16; do for o in on off auto; do for c in none bf16 powersgd:2; do
  k=$(awk -v b="$b" -v o="$o" -v c="$c" '/--metrics/ {
        ov = "auto"; if ($0 ~ / --overlap( |$)/) ov = "on"; if ($0 ~ / --no-overlap( |$)/) ov = (ov == "on" ? "both" : "off")
        if (index($0, " --bucket-mb " b " ") && ov == o && index($0, " --grad-compression " c)) k++ } END { print k + 0 }' "$T/dims.txt")
  [ "$k" = 1 ] && n=$((n + 1))
done; done; done
if [ "$rc" = 0 ] && [ "$n" = 18 ] && [ "$(grep -c -- '--metrics' "$T/dims.txt")" = 18 ] &&
   grep -q -- '-b0.25-ovoff-gcpowersgd2-r1.csv' "$T/dims.txt"; then
  pass "--dry-run: 2 bucket sizes x 3 overlaps x 3 compressions, each combination's flags exactly once"
else
  fail "--dry-run over the dimensions: exit $rc, $n of 18 combinations"; cat "$T/dims.txt" >&2
fi

# ---- Across hosts: --cluster (a stand-in state directory), --hosts -------------------------
C=$T/cluster
mkdir -p "$C/hosts/h1" "$C/hosts/h2"
echo 0 >"$C/hosts/h1/core"; echo 1 >"$C/hosts/h2/core"
{
  echo "# tests/cluster/cluster.sh: 2 hosts up; source this file."
  echo "DTC_STATE='$C'"
  echo "DTC_HOSTS='h1 h2'"
  echo "DTC_MPIRUN_FLAGS='--mca plm_rsh_agent $C/rsh --mca btl_tcp_if_include 10.77.13.0/24'"
  echo "export DTC_STATE DTC_HOSTS DTC_MPIRUN_FLAGS"
} >"$C/env"
echo rate=100mbit >"$C/link"
# A launcher that says it is Open MPI, records its command and runs dtrain as one rank here.
# shellcheck disable=SC2016  # the script's own $ words
{
  echo '#!/bin/sh'
  echo '[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }'
  echo 'echo "$*" >>"${0%/*}/launched"'
  echo 'while [ $# -gt 0 ] && [ "${1##*/}" != dtrain ]; do shift; done'
  echo 'exec "$@"'
} >"$T/fake-mpirun"
chmod +x "$T/fake-mpirun"
DTC_STATE=$C "$STUDY" --cluster --launcher "$T/fake-mpirun" --models mlp --synthetic 8x8x1:4:1024 --nodes 1 --scaling weak \
  --repeats 1 --epochs 2 --steps 4 --batch 16 --timeout 120 --no-plots --out "$T/cl" >"$T/log4" 2>&1; rc=$?
if [ "$rc" = 0 ] && [ "$(col "$T/cl/runs.csv" link)" = rate=100mbit ] && [ "$(col "$T/cl/summary.csv" link)" = rate=100mbit ] &&
   grep -q -- "-x OMP_NUM_THREADS -n 1 --host h1:1 --map-by ppr:1:node --mca plm_rsh_agent $C/rsh --mca btl_tcp_if_include" "$T/launched" &&
   grep -q '^hosts: h1 h2 (1 cores each)' "$T/cl/study.txt" && grep -q '^link: rate=100mbit' "$T/cl/study.txt"; then
  pass "--cluster: 1 node on h1 with the harness's flags; link column rate=100mbit from its link file"
else
  fail "--cluster (stand-in): exit $rc"; cat "$T/log4" "$T/launched" "$T/cl/runs.csv" >&2
fi
DTC_STATE=$C MPIEXEC=mpiexec.openmpi MPIEXEC_FLAGS='--mca btl self,vader' "$STUDY" --cluster --models cnn --scaling weak \
  --repeats 1 --dry-run >"$T/cl.txt" 2>&1; rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c -- '--metrics' "$T/cl.txt")" = 2 ] && grep -q -- ' -n 1 --host h1:1 ' "$T/cl.txt" &&
   grep -q -- ' -n 2 --host h1:1,h2:1 --map-by ppr:1:node --mca plm_rsh_agent' "$T/cl.txt" && ! grep -q 'vader' "$T/cl.txt"; then
  pass "--cluster: nodes 1, 2 (the hosts' count) x 1 rank per host, without the one-host \$MPIEXEC_FLAGS"
else
  fail "--cluster nodes sweep: exit $rc"; cat "$T/cl.txt" >&2
fi
"$STUDY" --hosts a,b,c --nodes 2,3 --ranks 2 --launcher mpirun --launcher-args '--mca plm_rsh_agent ssh' --models cnn \
  --scaling weak --repeats 1 --dry-run >"$T/hosts.txt" 2>&1; rc=$?
if [ "$rc" = 0 ] && grep -q -- '-n 4 --host a:2,b:2 --map-by ppr:2:node --mca plm_rsh_agent ssh ' "$T/hosts.txt" &&
   grep -q -- '-n 6 --host a:2,b:2,c:2 ' "$T/hosts.txt"; then
  pass "--hosts a,b,c --nodes 2,3 --ranks 2: --host a:2,b:2 and a:2,b:2,c:2 with --launcher-args"
else
  fail "--hosts: exit $rc"; cat "$T/hosts.txt" >&2
fi

# ---- --dry-run ----------------------------------------------------------------------
# shellcheck disable=SC2086
"$STUDY" $tiny --repeats 2 --out "$T/dry" --dry-run >"$T/dry.txt" 2>&1; rc=$?
ncmd=$(grep -c -- '--metrics' "$T/dry.txt")
if [ "$rc" = 0 ] && [ "$ncmd" = 8 ] && [ "$(grep -c -- ' -n 2 ' "$T/dry.txt")" = 4 ] && [ ! -e "$T/dry" ] &&
   grep -q -- '--batch-size 32 ' "$T/dry.txt" && grep -q '^# 4 configurations x 2 repeats = 8 runs' "$T/dry.txt"; then
  pass "--dry-run: 8 commands (4 configurations x 2 repeats), nothing created"
else
  fail "--dry-run: exit $rc, $ncmd commands"; cat "$T/dry.txt" >&2
fi
SLURM_JOB_ID=1 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS_PER_NODE=2 "$STUDY" --models cnn --scaling strong --repeats 1 \
  --dry-run >"$T/slurm.txt" 2>&1; rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c '^srun ' "$T/slurm.txt")" = 4 ] &&
   grep -q '^srun --nodes=2 --ntasks=4 --ntasks-per-node=2 .* --batch-size 32 ' "$T/slurm.txt"; then
  pass "Slurm stand-in (2 nodes x 2 tasks): srun over nodes {1,2} x ranks per node {1,2}"
else
  fail "Slurm stand-in: exit $rc"; cat "$T/slurm.txt" >&2
fi

# ---- Bad command lines ------------------------------------------------------------------
bad() { # bad PATTERN ARGS...: exit 2 and one error line matching PATTERN
  pattern=$1; shift
  "$STUDY" "$@" --dry-run >"$T/bad.out" 2>"$T/bad.err"; rc=$?
  if [ "$rc" = 2 ] && [ "$(grep -c 'error: ' "$T/bad.err")" = 1 ] && grep 'error: ' "$T/bad.err" | grep -q -- "$pattern"; then
    pass "$* -> 2: $(grep 'error: ' "$T/bad.err")"
  else
    fail "$*: exit $rc, expected 2 and '$pattern'"; cat "$T/bad.err" >&2
  fi
}
bad 'unrecognized arguments: --bogus' --bogus
bad '--ranks 0,2: expected positive integers' --ranks 0,2
bad '--global-batch 100 does not divide evenly over 3 replicas' --ranks 1,3 --global-batch 100 --scaling strong
bad "invalid choice: 'sideways'" --scaling sideways
bad "--models: 'nosuch' is neither cnn, mlp nor a model file" --models nosuch
bad "--bucket-mb x: expected sizes in MB from 0 to 65536 (0: one bucket), e.g. 0.25,1,4,16 separated by commas, found 'x'" --bucket-mb x
bad "--bucket-mb 1,-2: expected sizes in MB" --bucket-mb 1,-2
bad "--overlap maybe: expected on, off or auto separated by commas, found 'maybe'" --overlap maybe
bad "--grad-compression none,zip: expected none, fp16, bf16 or powersgd:R separated by commas, found 'zip'" --grad-compression none,zip
bad "--overlap on and --dtrain-args '--overlap' both set it" --overlap on --dtrain-args --overlap
bad "--cluster: no cluster is up ($T/no-cluster/env not found): start one with .tests/cluster/cluster.sh up N." --cluster
DTC_STATE=$C; bad "--nodes 3: the cluster has 2 host(s)" --cluster --nodes 3; DTC_STATE=$T/no-cluster
bad "--cluster and --hosts: give one" --cluster --hosts a,b
bad "--emulate-nodes imitates nodes on this machine" --hosts a,b --emulate-nodes

rm -rf "$T"
finish
