#!/bin/sh
# bench_conv_layouts.sh: bench/conv_layouts at a tiny batch: one line per
# case (3 shapes x 3 directions x 6 kinds in fp32: oneDNN's NHWC, blocked
# and Winograd, dtrain's AVX2 direct, F(2x2) and F(4x4) kernels), every NHWC case
# timed (> 0 ms, > 0 GFLOP/s, oneDNN's kernel named), Winograd timed or
# said unavailable; on a CPU with AVX2 + FMA (DTRAIN_NO_FAST_KERNELS=avx512
# where it has AVX-512 too) dtrain's 9 direct cases and 9 of each Winograd
# tile timed;
# bad options exit 2 with one message.
. "$TOP_SRCDIR/tests/common.sh"
CL=$TOP_BUILDDIR/bench/conv_layouts
T=$TEST_TMP/conv_layouts.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err

DTRAIN_NO_FAST_KERNELS=avx512 "$CL" --batch 2 --repeats 1 --types fp32 >"$out" 2>"$err"
rc=$?
[ "$rc" = 0 ] && pass "conv_layouts --batch 2 --repeats 1 --types fp32 exits 0" || { fail "exit $rc"; cat "$out" "$err" >&2; }
[ "$(grep -c '^conv ' "$out")" = 54 ] && pass "54 case lines (3 shapes x 3 directions x 6 kinds)" ||
  { fail "expected 54 'conv' lines"; cat "$out" >&2; }
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  d=$(grep -c '^conv [a-z_]* fp32 dtrain-avx2 .* ms=[0-9.]* gflops=[0-9]* impl=dtrain:avx2$' "$out")
  w=$(grep -c '^conv [a-z_]* fp32 dtrain-wino2 .* ms=[0-9.]* gflops=[0-9]* impl=dtrain_wino_2x3:avx2$' "$out")
  w4=$(grep -c '^conv [a-z_]* fp32 dtrain-wino4 .* ms=[0-9.]* gflops=[0-9]* impl=dtrain_wino_4x3:avx2$' "$out")
  [ "$d" = 9 ] && [ "$w" = 9 ] && [ "$w4" = 9 ] &&
    pass "dtrain's AVX2 kernels: 9 direct cases, 9 F(2x2) and 9 F(4x4) Winograd ones timed" ||
    { fail "dtrain's AVX2 kernels: $d of 9 direct, $w of 9 F(2x2), $w4 of 9 F(4x4) timed"; cat "$out" >&2; }
else
  echo "skip: this CPU lacks AVX2 or FMA: dtrain's AVX2 kernel lines not checked"
fi
timed=$(grep '^conv [a-z_]* fp32 nhwc ' "$out" | awk '{ ok = 0; for (i = 7; i <= NF; i++) { split($i, kv, "=");
  f[kv[1]] = kv[2] } if (f["ms"] > 0 && f["gflops"] > 0 && f["impl"] != "") ok = 1; n += ok } END { print n + 0 }')
[ "$timed" = 9 ] && pass "all 9 NHWC cases timed with the kernel named" || { fail "$timed of 9 NHWC cases timed"; cat "$out" >&2; }
bad=$(grep '^conv [a-z_]* fp32 winograd ' "$out" | grep -v -e ' ms=' -e ' unavailable$' | wc -l)
[ "$bad" = 0 ] && pass "Winograd cases timed or said unavailable" || { fail "malformed Winograd lines"; cat "$out" >&2; }
if grep -q avx512_bf16 /proc/cpuinfo; then
  "$CL" --batch 2 --repeats 1 --types bf16 >"$out" 2>"$err" && [ "$(grep -c '^conv [a-z_]* bf16 nhwc .* ms=' "$out")" = 9 ] &&
    pass "bf16: all 9 NHWC cases timed" || { fail "bf16 run"; cat "$out" "$err" >&2; }
fi

"$CL" --types fp8 >"$out" 2>"$err"
rc=$?
[ "$rc" = 2 ] && grep -q "conv_layouts: --types: expected fp32, bf16 or fp32,bf16, found 'fp8'" "$err" &&
  pass "--types fp8 refused (exit 2)" || fail "--types fp8: exit $rc, $(cat "$err")"
"$CL" --batch 0 >"$out" 2>"$err"
rc=$?
[ "$rc" = 2 ] && grep -q "conv_layouts: --batch: expected a positive number, found '0'" "$err" &&
  pass "--batch 0 refused (exit 2)" || fail "--batch 0: exit $rc, $(cat "$err")"
rm -rf "$T"
finish
