#!/bin/sh
# precision.sh: --precision, --loss-scale and the device flags, end to end.
#
# - bf16 on the CPU really computes in bf16 (its losses differ from fp32's)
#   and still learns; fp16 on the CPU is refused. The CPU stores bf16
#   activations (the header says so), float32 with --fp32-activations,
#   which rounds less and so changes the losses, within bf16's tolerance.
# - A power-of-two loss scale is exact in fp32, so --loss-scale dynamic must
#   give the same per-step losses as none, bit for bit in the printed digits.
# - An injected overflow (DTRAIN_TEST_OVERFLOW_STEPS: rank 0's loss gradient
#   set to infinity at those steps) is skipped on every rank, halves the
#   scale, and training goes on.
# - --devices lists every rank; --device cuda says why it cannot run here.
# - --winograd changes the arithmetic (1e-5 of the first loss), stays
#   reproducible, and is refused outside float32 and for a DTRAIN_WINO_TILE
#   other than 2 or 4.
. "$TOP_SRCDIR/tests/common.sh"

fm=$(fm_small) || exit $?
[ -f "$fm" ] || { echo "$fm"; exit 77; }
common="$fm --epochs 1 --steps-per-epoch 40 --batch-size 32 --no-validation --verbose"

# --- refusals (exit 2, one line from rank 0) ---
expect_fail 2 "--precision: expected fp32, bf16 or fp16, found 'fp8'" 2 "$fm" --precision fp8
expect_fail 2 "--precision fp16 on cpu: the CPU backend has no fp16 arithmetic" 2 "$fm" --precision fp16
expect_fail 2 "--loss-scale: expected dynamic, none or a positive number, found '-4'" 2 "$fm" --loss-scale -4
expect_fail 2 "--loss-scale: only the mirrored and multi-worker strategies apply a loss scale (strategy sharded)" \
  2 "$fm" --loss-scale dynamic --strategy sharded
expect_fail 2 "--device: expected cpu or cuda, found 'tpu'" 2 "$fm" --device tpu
expect_fail 2 "--gpus-per-node: only meaningful with --device cuda" 2 "$fm" --gpus-per-node 2
expect_fail 2 "--cuda-graphs: records the step on a GPU; it needs --device cuda (device is cpu)" 2 "$fm" --cuda-graphs
if grep -q 'define DT_HAVE_CUDA 1' "$TOP_BUILDDIR/config.h"; then
  # A CUDA build: here (CI, the build machine) there is no GPU.
  run_np 1 --devices --device cuda
  if [ "$rc" = 0 ]; then
    echo "ok: a GPU is present ($(head -1 "$out")); the no-GPU refusal is not checked"
  else
    expect_fail 2 "--device cuda: no GPU on this node (" 2 "$fm" --device cuda
  fi
else
  expect_fail 2 "--device cuda: this dtrain was built without CUDA (rebuild with ./configure --with-cuda)" 2 "$fm" --device cuda
fi

# --- --devices: one line per rank, emulated nodes numbered ---
run_np 2 --devices --ranks-per-node 1
if [ "$rc" = 0 ] && grep -q '^rank 0: host .*, node 0 (emulated), local rank 0 of 1: cpu: ' "$out" &&
   grep -q '^rank 1: host .*, node 1 (emulated), local rank 0 of 1: cpu: ' "$out" && [ "$(wc -l <"$out")" = 2 ]; then
  pass "--devices lists both ranks"
else
  fail "--devices: rc=$rc"; cat "$out" "$err" >&2
fi

steps() { grep '^step ' "$out" | sed 's/ - gradient overflow.*//'; }

# --- loss scaling is exact at fp32 ---
run_np 2 $common
[ "$rc" = 0 ] || { fail "fp32 run: rc=$rc"; cat "$err" >&2; }
steps >"$TEST_TMP/plain.$$"
actmem() { sed -n 's/.*activation memory \([0-9.]*\) MiB per rank at batch \([0-9]*\).*/\1 \2/p' "$out" | head -1; }
mem_fp32=$(actmem)
run_np 2 $common --loss-scale dynamic
[ "$rc" = 0 ] || { fail "dynamic run: rc=$rc"; cat "$err" >&2; }
steps >"$TEST_TMP/scaled.$$"
if [ "$(wc -l <"$TEST_TMP/plain.$$")" = 40 ] && cmp -s "$TEST_TMP/plain.$$" "$TEST_TMP/scaled.$$"; then
  pass "--loss-scale dynamic at fp32: 40 step losses identical to no scaling"
else
  fail "--loss-scale dynamic changed fp32 losses"; diff "$TEST_TMP/plain.$$" "$TEST_TMP/scaled.$$" | head >&2
fi
grep -q 'loss scale: 32768 (0 steps skipped)' "$out" && pass "no overflow: scale stays 2^15" ||
  { fail "epoch line lacks 'loss scale: 32768 (0 steps skipped)'"; cat "$out" >&2; }

# --- an injected overflow is skipped everywhere and training recovers ---
DTRAIN_TEST_OVERFLOW_STEPS=3,5; export DTRAIN_TEST_OVERFLOW_STEPS
run_np 2 $common --loss-scale dynamic
unset DTRAIN_TEST_OVERFLOW_STEPS
steps >"$TEST_TMP/inj.$$"
if [ "$rc" = 0 ] && grep -q '^step 3/40 .*gradient overflow: step skipped, loss scale now 16384' "$out" &&
   grep -q '^step 5/40 .*gradient overflow: step skipped, loss scale now 8192' "$out" &&
   [ "$(grep -c 'gradient overflow' "$out")" = 2 ] && grep -q 'loss scale: 8192 (2 steps skipped)' "$out"; then
  pass "injected overflows at steps 3 and 5: skipped, scale 2^15 -> 2^13"
else
  fail "overflow injection: rc=$rc"; cat "$out" "$err" >&2
fi
# Steps 1-3 see the same parameters as the clean run (step 3's update is the
# one skipped); step 4 must differ, and the run must still learn.
if [ "$(head -3 "$TEST_TMP/inj.$$")" = "$(head -3 "$TEST_TMP/plain.$$")" ] &&
   [ "$(sed -n 4p "$TEST_TMP/inj.$$")" != "$(sed -n 4p "$TEST_TMP/plain.$$")" ]; then
  pass "skipped steps change what follows, and nothing before"
else
  fail "overflow injection: losses before/after the skip"; paste "$TEST_TMP/plain.$$" "$TEST_TMP/inj.$$" | head -6 >&2
fi
last=$(tail -1 "$TEST_TMP/inj.$$" | sed 's/.*loss: \([0-9.]*\).*/\1/')
awk -v l="$last" 'BEGIN { exit !(l < 1.2) }' && pass "after the skips the loss falls to $last" ||
  fail "after the skips the loss is $last (expected < 1.2)"

# --- bf16 on the CPU ---
run_np 1 --devices --precision bf16
if [ "$rc" != 0 ] && grep -q 'neither AVX512-BF16 nor AMX-BF16' "$err"; then
  echo "SKIP (part): this CPU has no bf16 instructions; bf16 training not checked"
  expect_fail 2 "--precision bf16 on cpu: this CPU has neither AVX512-BF16 nor AMX-BF16" 1 "$fm" --precision bf16
else
  run_np 2 $common --precision bf16
  if [ "$rc" = 0 ] && grep -q 'precision bf16 (activations bf16)' "$out" && grep -q 'all-reduce .*(bf16)' "$out"; then
    pass "bf16 sends bf16 gradients by default, and the CPU stores bf16 activations"
    # The seed CNN at batch 32: 32 * (784 + 2 * (4608 + 6400 + 1600 + 128 + 128 + 10)) floats
    # (input once, every layer's output and its gradient; the first conv's 21632 are never
    # stored, as it runs folded with its pool; the pool's 12x12x32 and the second conv's
    # 10x10x64, the parts the layers after them read: nn/crop.c) = 3.24 MiB in float32,
    # half in bf16. On an AVX-512 CPU the second conv's output gradient (6400) is never
    # made either (its backward reads the pool's: cpu_conv_poolgrad.c; in bf16 where the
    # CPU has AVX512-BF16): 32 * (784 + 2 * 12874 - 6400) values = 2.46 MiB in float32,
    # 1.23 MiB in bf16.
    mem_bf16=$(actmem)
    want32="3.2 32" want16="1.6 32"
    grep -q avx512f /proc/cpuinfo && want32="2.5 32"
    grep -q avx512_bf16 /proc/cpuinfo && want16="1.2 32"
    [ "$mem_fp32" = "$want32" ] && [ "$mem_bf16" = "$want16" ] &&
      pass "activation memory per rank at batch 32: ${mem_fp32% *} MiB (fp32), ${mem_bf16% *} MiB (bf16)" ||
      fail "activation memory: '$mem_fp32' (fp32) and '$mem_bf16' (bf16), expected '$want32' and '$want16'"
  else
    fail "bf16 run: rc=$rc, or its gradients are not bf16"; cat "$out" "$err" >&2
  fi
  # fp32 transport, so only the arithmetic can make the losses differ
  run_np 2 $common --precision bf16 --grad-compression none
  steps >"$TEST_TMP/bf16.$$"
  if [ "$rc" = 0 ] && ! cmp -s "$TEST_TMP/plain.$$" "$TEST_TMP/bf16.$$"; then
    pass "bf16 arithmetic: losses differ from fp32's"
  else
    fail "bf16 run: rc=$rc (or losses identical to fp32: bf16 arithmetic not in effect)"; cat "$out" "$err" >&2
  fi
  # float32 storage rounds only inside the convolutions and GEMMs: other losses
  run_np 2 $common --precision bf16 --grad-compression none --fp32-activations
  steps >"$TEST_TMP/bf16f.$$"
  if [ "$rc" = 0 ] && grep -q 'precision bf16 (activations fp32)' "$out" && ! cmp -s "$TEST_TMP/bf16.$$" "$TEST_TMP/bf16f.$$"; then
    pass "--fp32-activations on the CPU: float32 storage (other losses), the header says so"
  else
    fail "--fp32-activations: rc=$rc, or the header is wrong, or the losses equal bf16 storage's"; cat "$out" "$err" >&2
  fi
  lff=$(tail -1 "$TEST_TMP/bf16f.$$" | sed 's/.*loss: \([0-9.]*\).*/\1/')
  lb=$(tail -1 "$TEST_TMP/bf16.$$" | sed 's/.*loss: \([0-9.]*\).*/\1/')
  lf=$(tail -1 "$TEST_TMP/plain.$$" | sed 's/.*loss: \([0-9.]*\).*/\1/')
  awk -v b="$lb" -v f="$lf" 'BEGIN { d = b - f; if (d < 0) d = -d; exit !(d < 0.15) }' &&
    pass "bf16 step-40 loss $lb is within 0.15 of fp32's $lf" || fail "bf16 loss $lb vs fp32 $lf"
  awk -v b="$lff" -v f="$lf" 'BEGIN { d = b - f; if (d < 0) d = -d; exit !(d < 0.15) }' &&
    pass "bf16 with float32 activations: step-40 loss $lff within 0.15 of fp32's" || fail "bf16 --fp32-activations loss $lff vs fp32 $lf"
fi

# --- --winograd: ResNet-20's 3x3 stride-1 convolutions through Winograd
# kernels (oneDNN's F(4x4) at 32 and 64 channels on an Intel AVX-512 CPU,
# dtrain's own F(4x4) at 16, 32 and 64 on an AVX2 one or Zen 4): other arithmetic (losses
# differ from direct's: within 1e-5 relative after one forward pass, then
# drifting apart as any change of rounding does in the first steps of a
# batch-normalized net: within 1e-2 over 6 steps; measured 3.1e-3 with
# F(4x4), whose convolutions are about 5e-6 off direct's, and 9e-5 with
# DTRAIN_WINO_TILE=2's F(2x2), 6e-7 off; Adam and SGD alike),
# reproducible (two runs bitwise equal), and refused outside float32. ---
expect_fail 2 "--winograd: the Winograd kernels are float32 only, found --precision bf16 (drop --winograd, or use --precision fp32)" \
  2 "$fm" --winograd --precision bf16
# DTRAIN_WINOGRAD_KERNELS picks whose kernels (dtrain or onednn); anything
# else is refused. DTRAIN_WINO_TILE picks dtrain's own kernels' tile (they
# run on CPUs with AVX2 and FMA); anything but 2 or 4 is refused there.
export DTRAIN_WINOGRAD_KERNELS=mkl
expect_fail 2 "--winograd: DTRAIN_WINOGRAD_KERNELS: expected dtrain or onednn, found 'mkl'" 2 "$fm" --winograd
unset DTRAIN_WINOGRAD_KERNELS
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export DTRAIN_WINO_TILE=3 DTRAIN_WINOGRAD_KERNELS=dtrain
  expect_fail 2 "--winograd: DTRAIN_WINO_TILE: expected 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3)), found '3'" \
    2 "$fm" --winograd
  unset DTRAIN_WINO_TILE DTRAIN_WINOGRAD_KERNELS
fi
wino="--synthetic 32x32x3:10:192 --model $TOP_SRCDIR/inputs/resnet20.cfg --epochs 1 --steps-per-epoch 6 --batch-size 16 --no-validation --verbose --seed 3"
run_np 2 $wino
steps >"$TEST_TMP/direct.$$"
[ "$rc" = 0 ] && [ "$(wc -l <"$TEST_TMP/direct.$$")" = 6 ] || { fail "ResNet-20 direct run: rc=$rc"; cat "$err" >&2; }
run_np 2 $wino --winograd
if [ "$rc" = 2 ] && grep -q "^dtrain: error: --winograd: oneDNN .* has no Winograd convolution on this CPU" "$err"; then
  echo "skip: $(cat "$err") (the Winograd runs are not checked here)"
else
  steps >"$TEST_TMP/wino1.$$"
  run_np 2 $wino --winograd
  steps >"$TEST_TMP/wino2.$$"
  # relative loss differences: step 1's (one forward pass) and the worst of the 6
  diffs=$(paste -d' ' "$TEST_TMP/direct.$$" "$TEST_TMP/wino1.$$" | awk '
    { a = $5; b = $(NF / 2 + 5); d = (a - b) / a; if (d < 0) d = -d; if (NR == 1) f = d; if (d > m) m = d }
    END { printf "%.2e %.2e", f, m }')
  first=${diffs% *} worst=${diffs#* }
  if [ "$rc" = 0 ] && [ "$(wc -l <"$TEST_TMP/wino1.$$")" = 6 ] && cmp -s "$TEST_TMP/wino1.$$" "$TEST_TMP/wino2.$$" &&
     ! cmp -s "$TEST_TMP/direct.$$" "$TEST_TMP/wino1.$$" &&
     awk -v f="$first" -v w="$worst" 'BEGIN { exit !(f <= 1e-5 && w <= 1e-2) }'; then
    pass "--winograd: 6 steps of ResNet-20, losses off direct's by $first at step 1, $worst at most (not equal); two runs bitwise equal"
  else
    fail "--winograd: rc=$rc, relative loss differences $first at step 1 (want <= 1e-5), $worst at most (want > 0, <= 1e-2), or two runs differ"
    paste "$TEST_TMP/direct.$$" "$TEST_TMP/wino1.$$" "$TEST_TMP/wino2.$$" >&2; cat "$err" >&2
  fi
fi
rm -f "$TEST_TMP/plain.$$" "$TEST_TMP/scaled.$$" "$TEST_TMP/inj.$$" "$TEST_TMP/bf16.$$" "$TEST_TMP/bf16f.$$" \
  "$TEST_TMP/direct.$$" "$TEST_TMP/wino1.$$" "$TEST_TMP/wino2.$$"
finish
