#!/bin/sh
# predict.sh: dtrain-predict end to end.
#
# The model's gradient is the one dtrain builds (parameter counts of the
# shipped models); the efficiency table and CSV have a row per algorithm and
# bucket size and a column per node count; one rank alone is exactly 100%
# efficient; a 1-rank dtrain --metrics file gives the compute time; --compare
# reads a scaling study's summary and prints the error; --pipeline-stages
# cuts the model as its [stage] lines say (or balanced), each stage holds its
# layers' bytes, and the step follows the 1F1B formula; bad options, bad
# cluster files and bad input files get one clear message and exit 2 or 3.
. "$TOP_SRCDIR/tests/common.sh"
P=${DTRAIN_PREDICT:-$TOP_BUILDDIR/dtrain-predict}
T=$TEST_TMP/predict.$$
mkdir -p "$T"
expect_p() { # expect_p CODE PATTERN ARGS...
  code=$1 pattern=$2; shift 2
  "$P" "$@" >"$T/out" 2>"$T/err"; rc=$?
  if [ "$rc" = "$code" ] && [ "$(grep -c '^dtrain-predict: error: ' "$T/err")" = 1 ] && grep -q -- "$pattern" "$T/err"; then
    pass "dtrain-predict $* -> $code: $(cat "$T/err")"
  else fail "dtrain-predict $*: exit $rc, expected $code with '$pattern'"; cat "$T/err" >&2; fi
}

"$P" --model cnn --compute-ms 20 >"$T/cnn" 2>&1; rc=$?
rows=$(grep -cE '^(ring|mpi|hier) ' "$T/cnn")
if [ "$rc" = 0 ] && grep -q '^model cnn: 225034 parameters' "$T/cnn" && [ "$rows" = 9 ] &&
   grep -q '^algo .* 1024   90% up to$' "$T/cnn"; then
  pass "cnn on hdr200-cpu: 225034 parameters, 9 rows (3 algorithms x 3 bucket sizes), 1..1024 nodes"
else fail "cnn table (rc=$rc, $rows rows)"; cat "$T/cnn" >&2; fi

# The memory table (strategy/memplan.h): wide-mlp.cfg's 456263690 parameters
# at 4 ranks a node. mirrored: 4 + 4 + 8 bytes a parameter on every rank;
# fsdp: the same over the ranks, plus parameters and gradients of its two
# buffers gathered (bucket k in buffer k % 2: the first layer's 62919680
# parameters and a 5120x5120 layer's 26219520); sharded: the slots over the
# ranks. mirrored's RSS also maps the 3 other ranks' gradient windows.
mem() { # STRATEGY NODES: GiB per rank, from the table's row
  "$P" --model "$TOP_SRCDIR/inputs/wide-mlp.cfg" --input 64x64x3:10 --ranks-per-node 4 --batch 16 --memory \
    --strategy "$1" --nodes "$2" 2>&1 | sed -n 's/^ *[0-9]* nodes* *, *[0-9]* ranks: .* = \([0-9.]*\) (.*/\1/p'
}
G=1073741824
P4=$((456263690 * 4))
want_m=$(awk -v p="$P4" -v g="$G" 'BEGIN { printf "%.3f", (4 * p) / g }')  # + activations (0.010)
want_f=$(awk -v p="$P4" -v g="$G" 'BEGIN { printf "%.3f", (4 * p / 8 + 2 * 4 * (62919680 + 26219520)) / g }')
got_m=$(mem mirrored 1) got_f=$(mem fsdp 2) got_s=$(mem sharded 1)
if awk -v a="$got_m" -v b="$want_m" -v c="$got_f" -v d="$want_f" -v s="$got_s" \
   'BEGIN { exit !(a - b > 0.005 && a - b < 0.02 && c - d > 0.005 && c - d < 0.02 && s < a && s > c) }'; then
  pass "--memory: wide-mlp.cfg mirrored $got_m GiB a rank (16P = $want_m + activations), fsdp at 8 ranks $got_f (16P/8 + 2 buffers x 2 = $want_f + activations), sharded between ($got_s)"
else
  fail "--memory: mirrored $got_m (want $want_m + activations), fsdp $got_f (want $want_f + activations), sharded $got_s"
fi
# The plan's activations against what dtrain allocates (the header's
# activation memory): ResNet-20 at batch 64, whose nine batch norms fold
# into the adds after them and write the adds' outputs and gradients
# (model.h's act_alias), so each of those buffers exists once. The plan
# adds the layers' saved state (none in ResNet-20: nn/layer.h's
# state_bytes); counting the aliases twice put it 24% over (251 MiB
# against 202.8).
plan_mib=$("$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --input 32x32x3:10 --ranks-per-node 1 --batch 64 --memory \
  --strategy mirrored --nodes 1 2>&1 | sed -n 's/^ *1 node *, *1 ranks: .* + \([0-9.]*\) = .*/\1/p' |
  awk '{ printf "%.1f", $1 * 1024 }')
run_np 1 --synthetic 32x32x3:10:64 --model "$TOP_SRCDIR/inputs/resnet20.cfg" --batch-size 64 --epochs 1 --no-validation
made=$(sed -n 's/.*activation memory \([0-9.]*\) MiB per rank at batch 64.*/\1/p' "$out" | head -1)
if [ "$rc" = 0 ] && [ -n "$plan_mib" ] && [ -n "$made" ] &&
   awk -v p="$plan_mib" -v m="$made" 'BEGIN { d = p - m; if (d < 0) d = -d; exit !(d <= 0.01 * m) }'; then
  pass "--memory: ResNet-20's activations at batch 64 planned $plan_mib MiB, allocated $made MiB (within 1%)"
else
  fail "--memory: ResNet-20's activations planned '$plan_mib' MiB, dtrain allocated '$made' MiB (rc=$rc; want within 1%)"
  cat "$err" >&2
fi
mapped=$("$P" --model "$TOP_SRCDIR/inputs/wide-mlp.cfg" --input 64x64x3:10 --ranks-per-node 4 --batch 16 --memory \
  --strategy mirrored --nodes 1 2>&1 | sed -n "s/.*RSS also counts the node's other ranks' shared windows it maps: + \([0-9.]*\) = .*/\1/p")
want_w=$(awk -v p="$P4" -v g="$G" 'BEGIN { printf "%.3f", 3 * p / g }')
[ "$mapped" = "$want_w" ] && pass "--memory: mirrored's RSS at 4 ranks a node maps 3 peers' gradient windows, + $mapped GiB" ||
  fail "--memory: mirrored's mapped windows '$mapped', expected $want_w"
"$P" --model cnn --compute-ms 20 --nodes 8 --algorithms ring --bucket-mb 1 >"$T/dp" 2>&1
"$P" --model cnn --compute-ms 20 --nodes 8 --algorithms ring --bucket-mb 1 --strategy fsdp >"$T/fs" 2>&1
e_dp=$(sed -n 's/^ring .*1M *\([0-9.]*\) .*/\1/p' "$T/dp") e_fs=$(sed -n 's/^ring .*1M *\([0-9.]*\) .*/\1/p' "$T/fs")
if [ -n "$e_dp" ] && [ -n "$e_fs" ] && awk -v a="$e_dp" -v b="$e_fs" 'BEGIN { exit !(b < a) }' &&
   grep -q 'strategy fsdp, buckets all-gathered and reduce-scattered' "$T/fs" && grep -q '^memory per rank under fsdp' "$T/fs"; then
  pass "--strategy fsdp: 8 nodes of cnn at $e_fs efficiency against data parallelism's $e_dp (1.5x the bytes), and its memory table"
else
  fail "--strategy fsdp: efficiency $e_fs against $e_dp"; cat "$T/fs" >&2
fi
expect_p 2 "--strategy: expected mirrored, sharded or fsdp, found 'zero3'" --strategy zero3
expect_p 2 "--optimizer: expected adam or sgd, found 'lamb'" --optimizer lamb

# Pipeline stages: a model file whose [stage] lines cut it after layers 1 and
# 2 (dense 784-256-256 | 64 | classes on 28x28x1:10); its stages hold
# exactly their layers' parameters, and the cut printed is the lines'.
printf '[dense]\nunits = 256\nactivation = relu\n\n[dense]\nunits = 256\nactivation = relu\n\n[stage]\n' >"$T/staged.cfg"
printf '[dense]\nunits = 64\nactivation = relu\n\n[stage]\n[dense]\nunits = classes\n' >>"$T/staged.cfg"
stage_params() { sed -n 's/^ *stage *[0-9]*, layers [0-9-]* *\([0-9]*\) parameters: .*/\1/p' "$1" | tr '\n' ' '; }
want=$(awk 'BEGIN { printf "%d %d %d ", 784 * 256 + 256 + 256 * 256 + 256, 256 * 64 + 64, 64 * 10 + 10 }')
"$P" --model "$T/staged.cfg" --pipeline-stages 3 --memory >"$T/st" 2>&1; rc=$?
got=$(stage_params "$T/st")
if [ "$rc" = 0 ] && [ "$got" = "$want" ] &&
   grep -q "^pipeline: 3 stages x 4 micro-batches, cut at the model file's \[stage\] lines: layers 0-1 | 2 | 3 (" "$T/st"; then
  pass "--pipeline-stages 3: the [stage] lines' cut 0-1 | 2 | 3, stages of $got parameters"
else fail "--pipeline-stages 3 on [stage] lines (rc=$rc): parameters '$got', expected '$want'"; cat "$T/st" >&2; fi

# A balanced cut of resnet20.cfg: the stages are contiguous, cover the 55
# layers, their parameters add up to the model's, each row's total is its
# parts' sum, and the ratio is the largest stage's total over data
# parallelism's.
for p in 2 4; do
  "$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --pipeline-stages "$p" --memory >"$T/r$p" 2>&1; rc=$?
  if [ "$rc" = 0 ] && awk -v P="$p" '
      /^ *stage *[0-9]+, layers / { split($4, r, "-"); if (r[2] == "") r[2] = r[1]
        if (r[1] != next_layer) bad = bad " gap at " r[1]; next_layer = r[2] + 1
        n++; params += $5; t = $7 + $9 + $11 + $13; if (t - $15 > 0.0025 || $15 - t > 0.0025) bad = bad " sum " $15
        if ($15 > most) most = $15 }
      /^largest stage / { big = $3; dp = $10; ratio = $NF; sub(/x$/, "", ratio) }
      END { if (n != P || next_layer != 55 || params != 273258 || bad != "" || big != most ||
                (most / dp - ratio) ^ 2 > 0.0001) { print n, next_layer, params, bad, most, dp, ratio > "/dev/stderr"; exit 1 } }' "$T/r$p"; then
    pass "--pipeline-stages $p of resnet20.cfg: $(grep '^pipeline' "$T/r$p" | sed 's/.*: layers/layers/'), 273258 parameters in all"
  else fail "--pipeline-stages $p of resnet20.cfg (rc=$rc)"; cat "$T/r$p" >&2; fi
done

# wide-mlp.cfg in 4 stages: the parameters' and Adam's slots' bytes add up
# to data parallelism's (P4 bytes of parameters, twice that of slots).
"$P" --model "$TOP_SRCDIR/inputs/wide-mlp.cfg" --input 64x64x3:10 --ranks-per-node 4 --batch 16 --memory \
  --pipeline-stages 4 >"$T/w4" 2>&1; rc=$?
if [ "$rc" = 0 ] && awk -v p="$P4" -v g="$G" '
    /^ *stage *[0-9]+, layers / { n++; params += $7; slots += $11 }
    END { d1 = params - p / g; d2 = slots - 2 * p / g; exit !(n == 4 && d1 * d1 < 9e-6 && d2 * d2 < 9e-6) }' "$T/w4"; then
  pass "--pipeline-stages 4 of wide-mlp.cfg: the stages' parameters and slots add up to data parallelism's; $(grep '^largest' "$T/w4")"
else fail "--pipeline-stages 4 of wide-mlp.cfg (rc=$rc)"; cat "$T/w4" >&2; fi

# The step at P = 4, M = 8: the ideal bubble 3/11; the stages' compute adds
# up to --compute-ms; the slots are (M+P-1) of the slowest stage's
# micro-batch; the bubble with the imbalance is 1 - sum / (P (M+P-1) slot).
"$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --compute-ms 120 --pipeline-stages 4 --micro-batches 8 --nodes 1,4 \
  >"$T/rs" 2>&1; rc=$?
want_b=$(awk 'BEGIN { printf "%.1f", 100 * 3 / 11 }')
if [ "$rc" = 0 ] && grep -q "^bubble $want_b% ideal" "$T/rs" && awk '
    /^compute per stage, ms:/ { line = $0; sub(/^compute per stage, ms: /, "", line); sub(/;.*/, "", line)
      n = split(line, t, " [|] "); for (k = 1; k <= n; k++) { sum += t[k]; if (t[k] > most) most = t[k] } }
    /^bubble / { real = $5; sub(/%$/, "", real) }
    /^ *1 +16 +4 / { slots = $4 }
    END { want = (8 + 4 - 1) * most / 8; b = 100 * (1 - sum / (4 * (8 + 4 - 1) * most / 8))
          exit !(n == 4 && (sum - 120) ^ 2 < 1e-4 && (slots - want) ^ 2 < 1e-4 && (real - b) ^ 2 < 0.0025) }' "$T/rs"; then
  pass "--pipeline-stages 4 --micro-batches 8: $(grep '^bubble' "$T/rs"); slots 11 x the slowest micro-batch"
else fail "--pipeline-stages 4 --micro-batches 8 step (rc=$rc, bubble '$want_b%' expected)"; cat "$T/rs" >&2; fi

# The sends and the stages' all-reduce on a slow link (1 ms + 1 GB/s
# between nodes, 1 us + 10 GB/s inside; a rank a node): each of the 2 (M+P-1) sends carries layer 1's 256 outputs
# of a 16-sample micro-batch, and on 6 nodes stage 0's 266752 parameters
# are ring-all-reduced over its 2 replicas.
printf 'name = slowlink\nranks_per_node = 1\nalpha_intra_us = 1\nbw_intra_gbs = 10\nalpha_inter_us = 1000\nbw_inter_gbs = 1\n' >"$T/link.conf"
"$P" --model "$T/staged.cfg" --pipeline-stages 3 --cluster "$T/link.conf" --nodes 2,3,6 --algorithms ring --compute-ms 10 \
  >"$T/sl" 2>&1; rc=$?
want_p=$(awk 'BEGIN { printf "%.3f", 1e3 * 2 * (4 + 3 - 1) * (1e-3 + 256 * 16 * 4 / 1e9) }')
want_a=$(awk 'BEGIN { printf "%.3f", 1e3 * 2 * (1e-3 + 266752 * 4 / 2 / 1e9) }')
if [ "$rc" = 0 ] && grep -qE "^ +3 +3 +1 +[0-9.]+ +$want_p +0\.000 " "$T/sl" && grep -qE "^ +6 +6 +2 +[0-9.]+ +$want_p +$want_a " "$T/sl" &&
   grep -q '^ *2 *2  (not a multiple of 3 stages)' "$T/sl"; then
  pass "--pipeline-stages 3 on a slow link: sends $want_p ms, the stages' all-reduce over 2 replicas $want_a ms"
else fail "--pipeline-stages 3 on a slow link (rc=$rc): expected sends $want_p ms, all-reduce $want_a ms"; cat "$T/sl" >&2; fi
# Two ranks a node: a stage's 2 replicas share a node (their all-reduce
# inside it), and the 2 sends leaving a node share its interface.
"$P" --model "$T/staged.cfg" --pipeline-stages 3 --cluster "$T/link.conf" --ranks-per-node 2 --nodes 3 --algorithms ring \
  --compute-ms 10 >"$T/sl2" 2>&1; rc=$?
want_p=$(awk 'BEGIN { printf "%.3f", 1e3 * 2 * (4 + 3 - 1) * (1e-3 + 2 * 256 * 16 * 4 / 1e9) }')
want_a=$(awk 'BEGIN { printf "%.3f", 1e3 * 2 * (1e-6 + 266752 * 4 / 2 / 10e9) }')
if [ "$rc" = 0 ] && grep -qE "^ +3 +6 +2 +[0-9.]+ +$want_p +$want_a " "$T/sl2"; then
  pass "--pipeline-stages 3, 2 ranks a node: sends $want_p ms (2 flows a node), the all-reduce inside a node $want_a ms"
else fail "--pipeline-stages 3, 2 ranks a node (rc=$rc): expected sends $want_p ms, all-reduce $want_a ms"; cat "$T/sl2" >&2; fi

# The refusals: what dtrain refuses, dtrain-predict refuses too.
expect_p 2 "--micro-batches: splits a batch between pipeline stages; give --pipeline-stages P (P > 1) too" \
  --micro-batches 8 --compute-ms 3
expect_p 2 "--pipeline-stages 2 with --strategy fsdp: a pipeline's stages all-reduce" --pipeline-stages 2 --strategy fsdp --memory
expect_p 2 "--pipeline-stages 2 with --strategy sharded: " --pipeline-stages 2 --strategy sharded --memory
expect_p 2 "--micro-batches 65: more micro-batches than the 64 samples of a batch" --pipeline-stages 2 --micro-batches 65 --memory
expect_p 2 "--pipeline-stages 2: model staged.cfg has 2 \[stage\] lines, which make 3 stages; give --pipeline-stages 3" \
  --model "$T/staged.cfg" --pipeline-stages 2 --memory
expect_p 2 "--pipeline-stages 2 with --csv: predicted for data parallelism only" --pipeline-stages 2 --compute-ms 3 --csv "$T/x.csv"
# resnet20.cfg's most stages: as many as it says is accepted, one more is not.
"$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --pipeline-stages 64 --memory >/dev/null 2>"$T/e64"
most=$(sed -n 's/.*can be cut in only [0-9]* places (\([0-9]*\) stages at most).*/\1/p' "$T/e64")
if [ -n "$most" ] && [ "$most" -gt 4 ] &&
   "$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --pipeline-stages "$most" --memory >/dev/null 2>&1; then
  expect_p 2 "--pipeline-stages $((most + 1)): model resnet20.cfg can be cut in only $((most - 1)) places ($most stages at most)" \
    --model "$TOP_SRCDIR/inputs/resnet20.cfg" --pipeline-stages $((most + 1)) --memory
else fail "resnet20.cfg's most stages: '$most' ($(cat "$T/e64"))"; fi

"$P" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --compute-ms 120 --cluster dgx-h100 --bucket-mb 0,4 \
  --algorithms hier,ring --csv "$T/r.csv" >"$T/res" 2>&1; rc=$?
n=$(($(wc -l <"$T/r.csv") - 1))
if [ "$rc" = 0 ] && grep -q '^model resnet20.cfg: 273258 parameters' "$T/res" && [ "$n" = 44 ] &&
   head -1 "$T/r.csv" | grep -q '^model,cluster,algorithm,bucket_mb,overlap,nodes,ranks_per_node,ranks,comm_ms,exposed_ms,step_ms,samples_per_s,efficiency$' &&
   awk -F, 'NR > 1 && ($13 <= 0 || $13 > 1 || $11 < 120) { bad++ } END { exit bad > 0 }' "$T/r.csv"; then
  pass "resnet20 on dgx-h100 --csv: 44 rows (2 algorithms x 2 buckets x 11 node counts), 0 < efficiency <= 1, step >= compute"
else fail "resnet20 csv (rc=$rc, $n rows)"; cat "$T/res" >&2; head -3 "$T/r.csv" >&2; fi

# One rank alone: no communication, efficiency exactly 1.
"$P" --compute-ms 10 --ranks-per-node 1 --nodes 1 --algorithms ring --bucket-mb 1 --csv "$T/one.csv" >/dev/null 2>&1
if [ "$(tail -1 "$T/one.csv" | cut -d, -f9,13)" = "0.000000,1.00000" ]; then pass "one rank: 0 ms of communication, efficiency 1"
else fail "one rank: $(tail -1 "$T/one.csv")"; fi

# More latency, lower efficiency: the model moves the way it should.
printf 'name = slow\nranks_per_node = 4\nalpha_intra_us = 1\nbw_intra_gbs = 10\nalpha_inter_us = 500\nbw_inter_gbs = 1\n' >"$T/slow.conf"
"$P" --compute-ms 10 --cluster "$T/slow.conf" --nodes 64 --algorithms ring --bucket-mb 1 --csv "$T/slow.csv" >/dev/null 2>&1
"$P" --compute-ms 10 --cluster hdr200-cpu --ranks-per-node 4 --nodes 64 --algorithms ring --bucket-mb 1 --csv "$T/fast.csv" >/dev/null 2>&1
es=$(tail -1 "$T/slow.csv" | cut -d, -f13); ef=$(tail -1 "$T/fast.csv" | cut -d, -f13)
if awk -v s="$es" -v f="$ef" 'BEGIN { exit !(s + 0 < f + 0 && s + 0 > 0) }'; then
  pass "a slow network (500 us, 1 GB/s) is less efficient at 64 nodes: $es against $ef"
else fail "slow network efficiency $es, fast $ef"; fi

# The compute time from a measured 1-rank run.
fm=$(fm_small) || exit $?
run_np 1 "$fm" --model mlp --epochs 2 --batch-size 64 --metrics "$T/one-rank.csv"
"$P" --model mlp --metrics "$T/one-rank.csv" --nodes 1,4 >"$T/m" 2>&1; prc=$?
if [ "$rc" = 0 ] && [ "$prc" = 0 ] && grep -qE '^compute [0-9]+\.[0-9]+ ms per step' "$T/m"; then
  pass "--metrics: $(grep '^compute' "$T/m")"
else fail "--metrics (dtrain rc=$rc, predict rc=$prc)"; cat "$T/m" "$err" >&2; fi

# --compare: a summary CSV as jobscripts/scaling-study writes it.
cat >"$T/summary.csv" <<'CSV'
model,strategy,allreduce,scaling,ranks,nodes,batch_per_replica,global_batch,samples_per_s,step_ms,comm_ms,wait_ms,data_ms,compute_ms,speedup,efficiency
cnn,mirrored,auto,weak,1,1,64,64,3200,20.0,0,0,0.1,19.9,1,1
cnn,mirrored,auto,weak,2,1,64,128,6000,21.3,0.3,0.3,0.1,20.9,1.875,0.94
mlp,mirrored,auto,weak,1,1,64,64,1,1,0,0,0,1,1,1
CSV
"$P" --model cnn --cluster this-machine --compare "$T/summary.csv" >"$T/cmp" 2>&1; rc=$?
if [ "$rc" = 0 ] && grep -qE '^cnn +weak +auto +1 +on +none +2 +1 +64 +21\.30 +[0-9.]+ +[-+][0-9.]+% +0\.300 +[0-9.]+$' "$T/cmp" &&
   grep -q '^mean |error| of the step time over 1 multi-rank run: ' "$T/cmp" && ! grep -q '^mlp' "$T/cmp"; then
  pass "--compare: $(grep '^cnn .* 2 ' "$T/cmp" | tr -s ' '); $(grep '^mean' "$T/cmp")"
else fail "--compare (rc=$rc)"; cat "$T/cmp" >&2; fi

# --compare with the study's own columns: each row is predicted with its
# bucket size, overlap and compression; bf16 moves half the bytes of none,
# so its predicted all-reduce is about half (alpha aside).
cat >"$T/sum2.csv" <<'CSV'
model,strategy,allreduce,scaling,ranks,nodes,batch_per_replica,global_batch,samples_per_s,step_ms,comm_ms,wait_ms,data_ms,compute_ms,speedup,efficiency,bucket_mb,overlap,grad_compression,link
cnn,multi-worker,ring,weak,1,1,64,64,3200,20.0,0,0,0.1,19.9,1,1,4,off,none,100mbit
cnn,multi-worker,ring,weak,2,2,64,128,3000,60.0,40,40,0.1,20,0.9,0.45,4,off,none,100mbit
cnn,multi-worker,ring,weak,1,1,64,64,3200,20.0,0,0,0.1,19.9,1,1,4,off,bf16,100mbit
cnn,multi-worker,ring,weak,2,2,64,128,4000,40.0,20,20,0.1,20,1.2,0.6,4,off,bf16,100mbit
CSV
printf 'name = slow\nranks_per_node = 1\nalpha_intra_us = 1\nbw_intra_gbs = 10\nalpha_inter_us = 50\nbw_inter_gbs = 0.0125\n' >"$T/l100.conf"
"$P" --model cnn --cluster "$T/l100.conf" --compare "$T/sum2.csv" >"$T/cmp2" 2>&1; rc=$?
c0=$(awk '$1 == "cnn" && $6 == "none" && $7 == 2 { print $NF }' "$T/cmp2")
c1=$(awk '$1 == "cnn" && $6 == "bf16" && $7 == 2 { print $NF }' "$T/cmp2")
if [ "$rc" = 0 ] && awk -v a="$c0" -v b="$c1" 'BEGIN { exit !(a > 0 && b / a > 0.45 && b / a < 0.55) }'; then
  pass "--compare per row: none's predicted all-reduce $c0 ms, bf16's $c1 ms"
else fail "--compare per row (rc=$rc): none $c0, bf16 $c1"; cat "$T/cmp2" >&2; fi

# PowerSGD: the CNN's kernels as two thin factors; dtrain says 47x at R = 2.
"$P" --model cnn --compute-ms 20 --cluster "$T/l100.conf" --nodes 2 --algorithms ring --bucket-mb 0 --csv "$T/n.csv" >/dev/null 2>&1
"$P" --model cnn --compute-ms 20 --cluster "$T/l100.conf" --nodes 2 --algorithms ring --bucket-mb 0 --csv "$T/p.csv" \
  --grad-compression powersgd:2 >/dev/null 2>&1; rc=$?
cn=$(tail -1 "$T/n.csv" | cut -d, -f9) cp=$(tail -1 "$T/p.csv" | cut -d, -f9)
if [ "$rc" = 0 ] && awk -v a="$cn" -v b="$cp" 'BEGIN { exit !(b > 0 && a / b > 20 && a / b < 60) }'; then
  pass "--grad-compression powersgd:2: the CNN's all-reduce $cn ms -> $cp ms"
else fail "powersgd:2 (rc=$rc): $cn ms -> $cp ms"; fi

# --fit: a benchmark whose ring follows 50 us + 12.5 MB/s exactly gives them
# back, and its MPI_Allreduce, at half that rate, a mpi_beta_factor of 2.
{
  echo "buffer,size_bytes,count,algorithm,picked,ranks,iters,warmup,time_min_us,time_med_us,time_max_us,algbw_GBps,busbw_GBps,vs_mpi,wrong,ranks_differ,nodes,ranks_per_node,ring_chunk,ring_depth"
  for n in 4096 65536 1048576 16777216; do
    awk -v n=$n 'BEGIN { t = 2 * 50 + n / 12.5e6 * 1e6; printf "oop,%d,%d,ring,,2,5,2,%.3f,%.3f,%.3f,0,0,,0,0,2,1,64512,8\n", n, n / 4, t, t, t }'
    awk -v n=$n 'BEGIN { t = 50 + 2 * n / 12.5e6 * 1e6; printf "oop,%d,%d,mpi,,2,5,2,%.3f,%.3f,%.3f,0,0,,0,0,2,1,64512,8\n", n, n / 4, t, t, t }'
  done
} >"$T/bench.csv"
"$P" --fit "$T/bench.csv" --fit-out "$T/fit.conf" >"$T/fit" 2>&1; rc=$?
"$P" --cluster "$T/fit.conf" --compute-ms 10 --nodes 2 >"$T/fit2" 2>&1
if [ "$rc" = 0 ] && grep -q '^fit .*: between nodes 50.0 us + 0.0125 GB/s per message (0.1 Gbit/s); the line is within 0% ' "$T/fit" &&
   grep -q 'between nodes 50.0 us + 0.0125 GB/s' "$T/fit2" && grep -q '^mpi_beta_factor = 2$' "$T/fit.conf" &&
   grep -q '^fit: MPI_Allreduce moves bytes 2.00x as slowly' "$T/fit"; then
  pass "--fit: $(head -1 "$T/fit"); --fit-out's file reads back"
else fail "--fit (rc=$rc)"; cat "$T/fit" "$T/fit2" >&2; fi
sed 's/,2,1,64512,8$/,1,2,64512,8/' "$T/bench.csv" >"$T/bench2.csv"
expect_p 3 "the run had 2 ranks per node; fit a run with one rank per node" --fit "$T/bench2.csv"
printf 'a,b\n1,2\n' >"$T/bad.csv"
expect_p 3 "--fit $T/bad.csv: no column buffer (expected dtrain-bench-allreduce --csv)" --fit "$T/bad.csv"
expect_p 2 "--fit-out: needs --fit BENCH.csv" --fit-out "$T/x.conf" --compute-ms 3
expect_p 2 "--grad-compression: expected none, fp16, bf16 or powersgd:R (R 1-256), found 'powersgd:0'" \
  --compute-ms 3 --grad-compression powersgd:0

expect_p 2 "unknown option '--bogus'" --bogus
expect_p 2 "give the compute time per step: --compute-ms T or --metrics FILE.csv" --model cnn
expect_p 2 "--metrics and --compute-ms: give one of them" --compute-ms 3 --metrics "$T/one-rank.csv"
expect_p 2 "--algorithms: expected ring, mpi or hier, found 'nccl'" --compute-ms 3 --algorithms ring,nccl
expect_p 2 "--bucket-mb: expected a comma-separated list of numbers >= 0, found 'x'" --compute-ms 3 --bucket-mb 1,x
expect_p 2 "--cluster nowhere: neither a built-in cluster (this-machine, hdr200-cpu, dgx-h100) nor a readable file" \
  --compute-ms 3 --cluster nowhere
printf 'ranks_per_node = 4\nalpha_intra_us = -1\n' >"$T/bad.conf"
expect_p 2 "bad.conf:2: alpha_intra_us: expected a positive number, found '-1'" --compute-ms 3 --cluster "$T/bad.conf"
expect_p 2 "--input: expected HxWxC:CLASSES" --compute-ms 3 --input 28x28
expect_p 2 "--model: expected cnn, mlp or a model file" --compute-ms 3 --model vgg
printf 'a,b\n1,2\n' >"$T/bad.csv"
expect_p 3 "--compare $T/bad.csv: no column model" --compare "$T/bad.csv"
expect_p 3 "--metrics $T/bad.csv: expected a dtrain --metrics CSV (kind, step, seconds, ... columns)" --metrics "$T/bad.csv"
"$P" --help >"$T/h" 2>&1
for opt in --model --input --batch --compute-ms --metrics --data-ms --forward-fraction --cluster --ranks-per-node \
           --algorithms --bucket-mb --no-overlap --grad-compression --compress-gflops --fit --fit-out --nodes --threshold \
           --csv --compare --pipeline-stages --micro-batches --help --version; do
  grep -q -- "$opt" "$T/h" || fail "--help does not document $opt"
  grep -q -- "$(echo "$opt" | sed 's/-/\\\\-/g')" "$TOP_SRCDIR/doc/dtrain-predict.1" || fail "dtrain-predict.1 does not document $opt"
done
rm -rf "$T"
finish
