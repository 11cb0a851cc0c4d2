# shellcheck shell=sh
# common.sh: helpers for the shell tests (sourced, POSIX sh).
#
# run_np N ARGS...  runs dtrain on N ranks with the configured launcher and a
#                   timeout (a hang is a failure), capturing stdout/stderr in
#                   $out/$err and the exit code in $rc.
# expect_fail CODE PATTERN N ARGS...   asserts exit code and an error line.
set -u
: "${TEST_TMP:=/tmp/dtrain-tests}"
mkdir -p "$TEST_TMP"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# cpu_bf16: whether dtrain runs --precision bf16 on this CPU's CPU backend
# (AVX512-BF16 or AMX-BF16, what src/cpu/cpu_setup.c asks for); where not,
# a test says "SKIP (part): ..." and checks the rest.
cpu_bf16() { grep -qw 'avx512_bf16\|amx_bf16' /proc/cpuinfo; }
no_bf16() { echo "SKIP (part): this CPU has neither AVX512-BF16 nor AMX-BF16: $* not checked"; }
pass() { echo "ok: $*"; }

launch() {
  np=$1; shift
  # shellcheck disable=SC2086
  timeout -k 5 "${DT_TEST_TIMEOUT:-300}" $MPIEXEC $MPIEXEC_FLAGS -n "$np" "$@"
}

run_np() {
  np=$1; shift
  out=$TEST_TMP/out.$$; err=$TEST_TMP/err.$$
  launch "$np" "$DTRAIN" "$@" >"$out" 2>"$err"
  rc=$?
}

expect_fail() {
  code=$1; pattern=$2; np=$3; shift 3
  run_np "$np" "$@"
  what="np=$np dtrain $*"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then fail "$what: timed out (hang)"; return; fi
  # mpirun reports the ranks' common non-zero code (Open MPI and MPICH both do).
  if [ "$rc" != "$code" ]; then fail "$what: exit $rc, expected $code"; cat "$err" >&2; return; fi
  n=$(grep -c '^dtrain: error: ' "$err")
  if [ "$n" != 1 ]; then fail "$what: $n error lines, expected exactly 1 (from rank 0)"; cat "$err" >&2; return; fi
  if ! grep '^dtrain: error: ' "$err" | grep -q -- "$pattern"; then
    fail "$what: message does not match '$pattern':"; cat "$err" >&2; return
  fi
  pass "$what -> $code: $(grep '^dtrain: error: ' "$err")"
}

# bench_refused SCRIPT MESSAGE ARGS...: bench/SCRIPT --build (this build) ARGS
# exits 2 with exactly one stderr line, "SCRIPT: MESSAGE" (the drivers' usage
# errors). $T is the calling test's scratch directory.
bench_refused() {
  script=$1; msg=$2; shift 2
  bash "$TOP_SRCDIR/bench/$script" --build "$TOP_BUILDDIR" "$@" >"$T/refused.out" 2>"$T/refused.err"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$T/refused.err")" = 1 ] && grep -qF -- "$script: $msg" "$T/refused.err"; then
    pass "$script $* -> 2: $(cat "$T/refused.err")"
  else
    fail "$script $*: rc=$rc, expected 2 and '$msg'"; cat "$T/refused.err" >&2
  fi
}

# loss_worst A B: the largest relative difference between the numbers of
# files $T/A and $T/B (one a line, e.g. a run's step losses).
loss_worst() { paste "$T/$1" "$T/$2" | awk '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r} END {printf "%.3g", m + 0}'; }
# loss_agree A B N WHAT: $T/A and $T/B hold N numbers each, within $tol relative.
loss_agree() {
  w=$(loss_worst "$1" "$2")
  if [ "$(wc -l <"$T/$1")" = "$3" ] && [ "$(wc -l <"$T/$2")" = "$3" ] && awk "BEGIN{exit !($w <= $tol)}"; then
    pass "$4: $3 updates, worst relative loss difference $w (tol $tol)"
  else
    fail "$4: worst relative difference $w (tol $tol), $(wc -l <"$T/$1")/$(wc -l <"$T/$2") of $3 updates"
    paste "$T/$1" "$T/$2" | awk 'NR % 10 == 1' >&2
  fi
}

# step_losses NAME NP ARGS...: dtrain on NP ranks with "$fm" $base ARGS (the
# caller's input and options); the per-step losses into $T/NAME, its stdout
# into $T/NAME.out.
step_losses() {
  name=$1; np=$2; shift 2
  run_np "$np" "$fm" $base "$@"
  [ "$rc" = 0 ] || { fail "$name: rc=$rc"; cat "$err" >&2; }
  cp "$out" "$T/$name.out"
  grep '^step ' "$out" | sed 's/.*loss: \([0-9.]*\).*/\1/' >"$T/$name"
}
# epoch_ckpt NAME NP ARGS...: the first epoch of such a run, its checkpoint in $T/NAME.
epoch_ckpt() {
  name=$1; np=$2; shift 2
  run_np "$np" "$fm" $base --epochs 1 --checkpoint-dir "$T/$name" "$@"
  [ "$rc" = 0 ] || { fail "checkpoint $name: rc=$rc"; cat "$err" >&2; }
}

finish() {
  rm -f "$TEST_TMP/out.$$" "$TEST_TMP/err.$$"
  if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
  exit 0
}

# bad_inputs_corpus DIR: tests/bad-inputs/make_bad_inputs.py's files in DIR;
# skips the test (exit 77) where /usr/bin/python3 has no h5py.
bad_inputs_corpus() {
  if ! /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    echo "SKIP: /usr/bin/python3 cannot import h5py (Debian package python3-h5py)"; exit 77
  fi
  /usr/bin/python3 "$TOP_SRCDIR/tests/bad-inputs/make_bad_inputs.py" "$1" || { echo "make_bad_inputs.py failed"; exit 99; }
}

# Real text for the transformer tests: kjv_text BYTES FILE [RANGE] writes the
# first BYTES of the King James Bible (Debian's bible-kjv), or skips the test.
kjv_text() {
  if ! command -v bible >/dev/null 2>&1; then
    echo "SKIP: bible (Debian package bible-kjv) is not installed: no real text"; exit 77
  fi
  bible "${3:-gen1:1-rev22:21}" | head -c "$1" >"$2"
}

# small_gpt FILE TIED: the transformer tests' model file, a 2-block GPT
# (width 32, 4 heads, block 32, MLP 128 with GELU), its LM head tied to the
# embedding (TIED 1) or not (0).
small_gpt() {
  {
    printf '[embedding]\nwidth = 32\nblock_size = 32\n'
    for _ in 1 2; do
      printf '[layernorm]\n[attention]\nheads = 4\n[add]\nfrom = -3\n[layernorm]\n'
      printf '[linear]\nunits = 128\nactivation = gelu\n[linear]\nunits = 32\n[add]\nfrom = -4\n'
    done
    printf '[layernorm]\n[lm_head]\ntied = %s\n' "$2"
  } >"$1"
}

# A small Fashion-MNIST file shared by the tests (made once per build).
fm_small() {
  f=$TEST_TMP/fm-small.h5
  if [ ! -f "$f" ]; then
    if [ ! -d /usr/share/datasets/fashion-mnist ]; then
      echo "SKIP: /usr/share/datasets/fashion-mnist missing (Debian package dataset-fashion-mnist)"; exit 77
    fi
    "$DTRAIN_PREP" --quiet --limit-train 4096 --limit-test 1024 "$f.part.$$" >/dev/null &&
      mv "$f.part.$$" "$f" || { echo "dtrain-prep failed"; exit 99; }
  fi
  echo "$f"
}
