#!/bin/sh
# blas_core.sh: dtrain runs OpenBLAS's kernels for what the CPU can do
# (src/cpu/cpu_blas_core.c), whatever OpenBLAS made of the CPU's model number.
#
# - OpenBLAS alone names a core (OPENBLAS_VERBOSE=2: its first "Core:" line,
#   before any restart); dtrain's --verbose setup names the one it runs,
#   which is never a generic pre-AVX2 core on a CPU with AVX2 + FMA, and is
#   the AVX-512 set (SkylakeX) on a CPU with AVX-512 where OpenBLAS fell back;
# - the restart keeps every argument: training runs and its report is whole;
# - a user's OPENBLAS_CORETYPE is kept (Haswell here: dtrain says so);
# - the loss after one update is the same under Haswell's and dtrain's
#   kernels to 1e-5 (both are sgemm; only summation order differs).
. "$TOP_SRCDIR/tests/common.sh"
data=$(fm_small)
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { case " ${flags#*:} " in *" $1 "*) return 0 ;; esac; return 1; }
own=$(OPENBLAS_VERBOSE=2 "$DTRAIN" --version 2>&1 | sed -n 's/^Core: //p' | head -n 1)
if [ -z "$own" ]; then echo "SKIP: this BLAS is not OpenBLAS (OPENBLAS_VERBOSE=2 names no core)"; exit 77; fi
echo "OpenBLAS by itself: $own; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"

run_np 1 "$data" --epochs 1 --steps-per-epoch 2 --batch-size 16 --no-validation --verbose --seed 3
core=$(sed -n 's/^BLAS: OpenBLAS \([A-Za-z0-9]*\) kernels.*/\1/p' "$out")
[ "$rc" = 0 ] && [ -n "$core" ] && grep -q "^Run summary" "$out" &&
  pass "dtrain runs OpenBLAS's $core kernels and trains: $(grep '^BLAS:' "$out")" ||
  { fail "dtrain: rc=$rc, BLAS line '$(grep '^BLAS' "$out")'"; cat "$err" >&2; }
case $core in
  [Pp]rescott|[Cc]ore2|[Pp]enryn|[Dd]unnington|[Nn]ehalem|[Aa]tom|[Ss]andybridge|[Bb]arcelona)
    if has avx2 && has fma; then fail "dtrain runs generic $core kernels on a CPU with AVX2 + FMA"
    else pass "no AVX2 here: $core is what this CPU runs"; fi ;;
  *) pass "dtrain's kernels ($core) are not a generic pre-AVX2 set" ;;
esac
if has avx512f && has avx512bw && has avx512vl && has avx512dq && [ "$own" = Prescott ]; then
  [ "$core" = SkylakeX ] && grep -q "OpenBLAS took this CPU for Prescott; dtrain restarted with OPENBLAS_CORETYPE=SkylakeX" "$out" &&
    pass "OpenBLAS fell back to Prescott on an AVX-512 CPU; dtrain restarted on SkylakeX" ||
    fail "AVX-512 CPU taken for Prescott, but dtrain runs '$core'"
fi
sed -n 's|^step 2/2 - loss: \([0-9.]*\).*|\1|p' "$out" >"$TEST_TMP/blas_core.mine.$$"

if has avx2 && has fma; then
  OPENBLAS_CORETYPE=Haswell run_np 1 "$data" --epochs 1 --steps-per-epoch 2 --batch-size 16 --no-validation --verbose --seed 3
  [ "$rc" = 0 ] && grep -q "^BLAS: OpenBLAS Haswell kernels (OPENBLAS_CORETYPE)$" "$out" &&
    pass "a user's OPENBLAS_CORETYPE=Haswell is kept" || { fail "OPENBLAS_CORETYPE=Haswell: rc=$rc, '$(grep '^BLAS' "$out")'"; cat "$err" >&2; }
  a=$(cat "$TEST_TMP/blas_core.mine.$$")
  b=$(sed -n 's|^step 2/2 - loss: \([0-9.]*\).*|\1|p' "$out")
  if [ -n "$a" ] && [ -n "$b" ] && awk "BEGIN { d = $a - $b; if (d < 0) d = -d; exit !(d <= 1e-5 * $a) }"; then
    pass "step 2 loss under $core $a, under Haswell $b (within 1e-5)"
  else fail "step 2 loss under $core '$a', under Haswell '$b'"; fi
fi
rm -f "$TEST_TMP/blas_core.mine.$$"
finish
