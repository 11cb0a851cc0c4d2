#!/bin/sh
# bench_peak.sh: bench/peak, one core's arithmetic peak: a short run prints
# one line per unit, and which units it measures agrees with the CPU flags
# in /proc/cpuinfo (a unit the CPU has must be measured, > 0 GFLOP/s, with
# min <= median <= max; one it lacks must say so); bad options exit 2 with
# one message.
. "$TOP_SRCDIR/tests/common.sh"
PEAK=$TOP_BUILDDIR/bench/peak
T=$TEST_TMP/peak.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }

"$PEAK" --seconds 0.02 --repeats 3 >"$out" 2>"$err"
rc=$?
[ "$rc" = 0 ] && pass "bench/peak --seconds 0.02 --repeats 3 exits 0" || { fail "exit $rc"; cat "$out" "$err" >&2; }
[ "$(grep -c '^peak ' "$out")" = 3 ] && pass "three unit lines" || { fail "not three 'peak' lines"; cat "$out" >&2; }

# measured UNIT: its line has gflops > 0, min <= median <= max and repeats=3.
measured() {
  line=$(grep "^peak $1 " "$out")
  if echo "$line" | awk '{ for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        exit !(f["gflops"] > 0 && f["min"] > 0 && f["min"] <= f["gflops"] && f["gflops"] <= f["max"] &&
               f["max"] < 1e6 && f["repeats"] == 3) }'; then
    pass "$line"
  else
    fail "$1: expected 'gflops=X min=A max=B repeats=3' with 0 < A <= X <= B, found '$line'"
  fi
}
unavailable() { # UNIT PATTERN
  if grep -q "^peak $1 unavailable: .*$2" "$out"; then pass "$(grep "^peak $1 " "$out")"
  else fail "$1: expected 'unavailable: ...$2', found '$(grep "^peak $1 " "$out")'"; fi
}
# fp32_fma: zmm where AVX-512F, else ymm where AVX2 and FMA (the insn says which).
if has avx512f; then measured fp32_fma; grep -q '^peak fp32_fma .* insn=vfmadd231ps flop_per_insn=32$' "$out" &&
  pass "fp32_fma on zmm" || fail "fp32_fma: expected insn=vfmadd231ps flop_per_insn=32 on an AVX-512 CPU"
elif has avx2 && has fma; then measured fp32_fma; grep -q '^peak fp32_fma .* insn=vfmadd231ps_ymm flop_per_insn=16$' "$out" &&
  pass "fp32_fma on ymm (no AVX-512)" || fail "fp32_fma: expected insn=vfmadd231ps_ymm flop_per_insn=16 without AVX-512"
else unavailable fp32_fma 'neither AVX512F nor'; fi
if has avx512_bf16; then measured bf16_dot; else unavailable bf16_dot 'AVX512'; fi
if has amx_tile && has amx_bf16; then
  # The CPU has it; the kernel may still refuse the tile state.
  if grep -q '^peak amx_bf16 unavailable: .*\(XCR0\|arch_prctl\)' "$out"; then unavailable amx_bf16 ''; else measured amx_bf16; fi
else
  unavailable amx_bf16 'CPUID reports no AMX-TILE / AMX-BF16'
fi

# Bad command lines: exit 2, one line naming the flag.
for bad in "--seconds 0|--seconds: expected a number of seconds in (0, 60\], found '0'" \
           "--repeats x|--repeats: expected an integer in \[1, 1001\], found 'x'" \
           "stray|arguments: expected none, found 'stray'"; do
  args=${bad%%|*} msg=${bad#*|}
  # shellcheck disable=SC2086
  "$PEAK" $args >"$out" 2>"$err"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$err")" = 1 ] && grep -q "^peak: $msg" "$err" && [ ! -s "$out" ]; then
    pass "$args -> 2: $(cat "$err")"
  else
    fail "$args: rc=$rc"; cat "$err" >&2
  fi
done
rm -rf "$T"
finish
