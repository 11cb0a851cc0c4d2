#!/bin/sh
# gpu_train.sh: dtrain --device cuda end to end, against the CPU backend.
#
# - fp32 on the GPU follows the CPU's per-step losses (dropout off, the same
#   seed, so the same initial weights and batches) within 2e-3 at every step;
# - bf16 and fp16 on the GPU train and end near fp32's loss, with 16-bit
#   activations (the default) and with --fp32-activations;
# - fp16 with injected overflows (DTRAIN_TEST_OVERFLOW_STEPS) skips exactly
#   those steps, halves the loss scale twice, and goes on learning;
# - two ranks that act as two nodes (--ranks-per-node 1) on one GPU reduce
#   through the cross-node MPI path and match two CPU ranks step by step;
# - ResNet-20 (batchnorm, residual adds, average pooling) follows the CPU,
#   alone and with --sync-bn over two emulated nodes;
# - --cuda-graphs prints the plain run's step lines exactly, and refuses a
#   model with batchnorm;
# - strategies that cannot run on the GPU are refused.
# Without a usable GPU the whole test is skipped (exit 77), with dtrain's
# reason. DTRAIN_TEST_DATA=FILE.h5 (a small dtrain-prep file) replaces the
# Fashion-MNIST subset that fm_small makes, for machines without the dataset.
# shellcheck source=tests/common.sh
. "$TOP_SRCDIR/tests/common.sh"

# Skipped only when dtrain itself says there is no GPU (or no CUDA in this
# build); a crash, a missing library or a launcher failure is an error.
run_np 1 --devices --device cuda
if [ "$rc" != 0 ]; then
  why=$(sed -n 's/^dtrain: error: //p' "$err" | head -n 1)
  case $why in
    "--device cuda: no GPU on this node"* | "--device cuda: this dtrain was built without CUDA"*)
      echo "SKIP: no GPU: $why"; rm -f "$out" "$err"; exit 77 ;;
  esac
  echo "FAIL: dtrain --devices --device cuda: exit $rc"; cat "$out" "$err"; exit 99
fi
echo "GPU: $(head -n 1 "$out")"

if [ -n "${DTRAIN_TEST_DATA:-}" ]; then
  [ -r "$DTRAIN_TEST_DATA" ] || { echo "DTRAIN_TEST_DATA=$DTRAIN_TEST_DATA: no such readable file"; exit 99; }
  fm=$DTRAIN_TEST_DATA
else
  fm=$(fm_small) || { rc=$?; echo "$fm"; exit "$rc"; }
fi
T=$TEST_TMP/gpu.$$
mkdir -p "$T"

# --winograd is the CPU's (oneDNN's kernels); cuDNN picks its own algorithms.
expect_fail 2 "--winograd: the cuda backend has no Winograd choice (cuDNN picks its own convolution algorithms); drop --winograd" \
  1 "$fm" --device cuda --winograd --epochs 1

# train NP ARGS...: 40 steps of batch 32, no dropout, no validation, every
# step's loss printed.
train() {
  n=$1; shift
  run_np "$n" "$fm" --epochs 1 --steps-per-epoch 40 --batch-size 32 --dropout 0 --no-validation --verbose "$@"
}

# losses FILE: "step loss" for each verbose step line of the last run.
losses() { sed -n 's/^step \([0-9]*\)\/[0-9]* - loss: \([^ ]*\) .*/\1 \2/p' "$out" >"$1"; }
# close A B TOL: B has A's steps (at least one), every loss a number, and
# |A - B| <= TOL at every step; prints the largest difference either way.
close() {
  awk -v tol="$3" '
    NR == FNR { a[$1] = $2; n++; next }
    { m++
      if (!($1 in a) || $2 !~ /^[0-9]+\.[0-9]+$/ || a[$1] !~ /^[0-9]+\.[0-9]+$/) { bad++; next }
      d = $2 - a[$1]; if (d < 0) d = -d
      if (d > tol) bad++
      if (at == "" || d > worst) { worst = d; at = $1 } }
    END { printf "max |diff| %.2g at step %s, %d of %d steps compared", worst, at, m, n
          exit !(bad == 0 && m == n && m > 0) }' "$1" "$2"
}
# tail_mean FILE [K]: the mean loss of the last K (default 5) steps, which
# says where a run ended with less batch-to-batch noise than one step.
tail_mean() { tail -n "${2:-5}" "$1" | awk '{ s += $2; n++ } END { if (n) printf "%.4f", s / n }'; }
# ran WHAT FILE: the last run exited 0 and printed 40 step lines, whose
# losses go to FILE (left empty otherwise, so what compares it fails).
ran() {
  if [ "$rc" = 0 ] && [ "$(grep -c '^step ' "$out")" = 40 ]; then losses "$2"; return 0; fi
  : >"$2"
  fail "$1: rc=$rc, $(grep -c '^step ' "$out") step lines (want 40)"; cat "$out" "$err" >&2; return 1
}

# --- (a) fp32: the GPU follows the CPU step by step ---
train 1 --device cuda
ran "cuda fp32 np=1" "$T/cuda32"
train 1
ran "cpu fp32 np=1" "$T/cpu32"
if msg=$(close "$T/cpu32" "$T/cuda32" 2e-3); then
  pass "cuda fp32 vs cpu fp32, np=1: $msg (tolerance 2e-3)"
else
  fail "cuda fp32 vs cpu fp32, np=1: $msg (tolerance 2e-3)"; paste "$T/cpu32" "$T/cuda32" | head -n 40 >&2
fi

# --- (b) bf16 and fp16 learn about as well as fp32 ---
l32=$(tail_mean "$T/cuda32")
for p in bf16 fp16; do
  for acts in "$p" fp32; do
    if [ "$acts" = fp32 ]; then train 1 --device cuda --precision "$p" --fp32-activations
    else train 1 --device cuda --precision "$p"; fi
    ran "cuda $p np=1, activations $acts" "$T/cuda-$p-$acts" || continue
    if ! grep -q "precision $p (activations $acts)" "$out"; then
      fail "cuda $p: the run does not report 'precision $p (activations $acts)'"; cat "$out" >&2
    fi
    lp=$(tail_mean "$T/cuda-$p-$acts")
    if awk -v a="$lp" -v b="$l32" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && d < 0.15) }'; then
      pass "cuda $p, activations $acts: mean loss of steps 36-40 is $lp, fp32's $l32 (within 0.15)"
    else
      fail "cuda $p, activations $acts: mean loss of steps 36-40 is '$lp', fp32's '$l32' (want within 0.15)"
    fi
  done
done

# --- (c) fp16 (dynamic loss scale by default): injected overflows are skipped ---
DTRAIN_TEST_OVERFLOW_STEPS=3,5; export DTRAIN_TEST_OVERFLOW_STEPS
train 1 --device cuda --precision fp16
unset DTRAIN_TEST_OVERFLOW_STEPS
if ran "cuda fp16 with overflows at steps 3,5" "$T/inj"; then
  if grep -q '^step 3/40 .*gradient overflow: step skipped, loss scale now 16384' "$out" &&
     grep -q '^step 5/40 .*gradient overflow: step skipped, loss scale now 8192' "$out" &&
     [ "$(grep -c 'gradient overflow' "$out")" = 2 ] && grep -q 'loss scale: 8192 (2 steps skipped)' "$out"; then
    pass "cuda fp16: overflows at steps 3 and 5 skipped, scale 2^15 -> 2^13"
  else
    fail "cuda fp16 overflow injection: skips or scale not as expected"; cat "$out" >&2
  fi
  early=$(sed -n 6,10p "$T/inj" | awk '{ s += $2 } END { printf "%.4f", s / 5 }')
  late=$(tail_mean "$T/inj")
  if [ "$(awk '$2 !~ /^[0-9]+\.[0-9]+$/' "$T/inj")" = "" ] &&
     awk -v e="$early" -v l="$late" 'BEGIN { exit !(l < e) }'; then
    pass "cuda fp16 after the skips: every loss finite, mean $early (steps 6-10) -> $late (steps 36-40)"
  else
    fail "cuda fp16 after the skips: losses not finite or not falling ($early -> $late)"; cat "$T/inj" >&2
  fi
fi

# --- (d) two emulated nodes on one GPU: the cross-node MPI path ---
run_np 2 --devices --device cuda --ranks-per-node 1
if [ "$rc" = 0 ] && [ "$(grep -c '^rank [01]: .*(emulated), local rank 0 of 1: cuda:0 ' "$out")" = 2 ]; then
  pass "np=2 --ranks-per-node 1 --device cuda: both ranks on cuda:0"
else
  fail "np=2 --ranks-per-node 1 --devices --device cuda: rc=$rc"; cat "$out" "$err" >&2
fi
train 2 --device cuda --ranks-per-node 1
ran "cuda fp32 np=2 --ranks-per-node 1" "$T/cuda-np2"
train 2 --ranks-per-node 1
ran "cpu fp32 np=2 --ranks-per-node 1" "$T/cpu-np2"
if msg=$(close "$T/cpu-np2" "$T/cuda-np2" 2e-3); then
  pass "cuda vs cpu, np=2 --ranks-per-node 1: $msg (tolerance 2e-3)"
else
  fail "cuda vs cpu, np=2 --ranks-per-node 1: $msg (tolerance 2e-3)"; paste "$T/cpu-np2" "$T/cuda-np2" | head -n 40 >&2
fi

# --- (e) batchnorm, residual adds and average pooling on the GPU ---
# ResNet-20 (inputs/resnet20.cfg) on the same data, fp32: GPU against CPU
# step by step at np=1, and with --sync-bn across two emulated nodes. Its
# batch statistics pass through dtrain's own kernels (gpu_norm.cu).
res=$TOP_SRCDIR/inputs/resnet20.cfg
# train_res NP ARGS...: as train, for a model file (no --dropout: it has none).
train_res() {
  n=$1; shift
  run_np "$n" "$fm" --epochs 1 --steps-per-epoch 40 --batch-size 32 --no-validation --verbose "$@"
}
train_res 1 --device cuda --model "$res"
ran "cuda resnet20 np=1" "$T/cuda-res"
train_res 1 --model "$res"
ran "cpu resnet20 np=1" "$T/cpu-res"
if msg=$(close "$T/cpu-res" "$T/cuda-res" 5e-3); then
  pass "cuda vs cpu, resnet20 np=1: $msg (tolerance 5e-3)"
else
  fail "cuda vs cpu, resnet20 np=1: $msg (tolerance 5e-3)"; paste "$T/cpu-res" "$T/cuda-res" | head -n 40 >&2
fi
train_res 2 --device cuda --ranks-per-node 1 --model "$res" --sync-bn
ran "cuda resnet20 np=2 --sync-bn" "$T/cuda-res2"
train_res 2 --ranks-per-node 1 --model "$res" --sync-bn
ran "cpu resnet20 np=2 --sync-bn" "$T/cpu-res2"
if msg=$(close "$T/cpu-res2" "$T/cuda-res2" 5e-3); then
  pass "cuda vs cpu, resnet20 np=2 --sync-bn: $msg (tolerance 5e-3)"
else
  fail "cuda vs cpu, resnet20 np=2 --sync-bn: $msg (tolerance 5e-3)"; paste "$T/cpu-res2" "$T/cuda-res2" | head -n 40 >&2
fi

# --- (f) --cuda-graphs: the same steps, replayed from a recording ---
# With dropout on (the seed's 0.5), two epochs of the 4096 samples in
# batches of 48 (85 full, then 16: two shapes, each run plainly once, then
# recorded; a workspace the smaller batch grows makes the first graph stale
# and it is recorded again): every step line equals the plain run's,
# character for character, since the same kernels run on the same random
# draws, and no recording fails.
graphs() {
  run_np 1 "$fm" --epochs 2 --batch-size 48 --no-validation --verbose --device cuda "$@"
}
graphs
plain_rc=$rc; grep '^step ' "$out" >"$T/plain-steps"
graphs --cuda-graphs
if [ "$plain_rc" = 0 ] && [ "$rc" = 0 ] && [ -s "$T/plain-steps" ] && grep '^step ' "$out" | cmp -s - "$T/plain-steps"; then
  pass "cuda --cuda-graphs: $(wc -l <"$T/plain-steps") step lines identical to plain launches (dropout 0.5, ragged last batch)"
else
  fail "cuda --cuda-graphs: rc=$plain_rc/$rc, step lines differ from plain launches"
  grep '^step ' "$out" | diff "$T/plain-steps" - | head -n 20 >&2; cat "$err" >&2
fi
if grep -q '^device: .*; CUDA graphs' "$out" &&
   grep -Eq '^CUDA graphs: [0-9]+ steps replayed from [0-9]+ recordings, 2 run plainly \(first of a shape\)$' "$out"; then
  pass "cuda --cuda-graphs: $(grep '^CUDA graphs: ' "$out" | head -n 1)"
else
  fail "cuda --cuda-graphs: header or summary not as expected"; cat "$out" >&2
fi
# Two emulated nodes: buckets go out after the replay, through MPI.
train 2 --device cuda --ranks-per-node 1 --cuda-graphs
ran "cuda fp32 np=2 --ranks-per-node 1 --cuda-graphs" "$T/cuda-np2-graphs"
if cmp -s "$T/cuda-np2" "$T/cuda-np2-graphs"; then
  pass "cuda np=2 --ranks-per-node 1: --cuda-graphs gives the plain run's 40 losses"
else
  fail "cuda np=2 --ranks-per-node 1: --cuda-graphs losses differ"; paste "$T/cuda-np2" "$T/cuda-np2-graphs" | head >&2
fi
expect_fail 2 "--cuda-graphs: model resnet20.cfg: layer .* (batchnorm) cannot be recorded into a graph" 1 "$fm" \
  --device cuda --cuda-graphs --model "$res"

# --- (g) refusals ---
expect_fail 2 "--strategy sharded: not available with --device cuda" 2 "$fm" --device cuda --strategy sharded \
  --ranks-per-node 1

rm -rf "$T"
finish
