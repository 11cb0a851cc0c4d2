#!/bin/sh
# bench_conv_layouts.sh: bench/conv_layouts at a tiny batch: one line per
# case (3 shapes x 3 directions x 3 layouts per type), every NHWC case
# timed (> 0 ms, > 0 GFLOP/s, oneDNN's kernel named), Winograd timed or
# said unavailable; bad options exit 2 with one message.
. "$TOP_SRCDIR/tests/common.sh"
CL=$TOP_BUILDDIR/bench/conv_layouts
T=$TEST_TMP/conv_layouts.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err

"$CL" --batch 2 --repeats 1 --types fp32 >"$out" 2>"$err"
rc=$?
[ "$rc" = 0 ] && pass "conv_layouts --batch 2 --repeats 1 --types fp32 exits 0" || { fail "exit $rc"; cat "$out" "$err" >&2; }
[ "$(grep -c '^conv ' "$out")" = 27 ] && pass "27 case lines (3 shapes x 3 directions x 3 layouts)" ||
  { fail "expected 27 'conv' lines"; cat "$out" >&2; }
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
