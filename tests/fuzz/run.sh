#!/bin/sh
# run.sh: run each libFuzzer harness for SECONDS and summarise.
#
#   tests/fuzz/run.sh SECONDS [NAME...]     (make fuzz-run FUZZ_SECONDS=N)
#
# FUZZ_BIN is the folder with the fuzz_NAME programs (make fuzz builds them
# in BUILD/tests/fuzz); NAMEs default to all five. Each harness starts from
# its committed seeds (tests/fuzz/corpus/NAME; for model_file also the shipped
# inputs/*.cfg, copied into the working corpus) and grows a working corpus in
# $FUZZ_WORK/NAME (default BUILD/tests/tmp/fuzz), so the seeds stay small;
# crashes land in $FUZZ_WORK/NAME-crash-*. FUZZ_JOBS harnesses run at once
# (default 1), niced, each with -rss_limit_mb=2048. Prints one line per
# harness: executions, exec/s, coverage (cov: edges, ft: features), corpus
# size and crashes; exits non-zero if any crashed.
set -u
secs=${1:?usage: run.sh SECONDS [NAME...]}
shift
[ $# -gt 0 ] || set -- idx model_file options dataset checkpoint
here=$(cd "$(dirname "$0")" && pwd)
bin=${FUZZ_BIN:-$PWD/tests/fuzz}
work=${FUZZ_WORK:-${TEST_TMP:-/tmp}/fuzz}
jobs=${FUZZ_JOBS:-1}
mkdir -p "$work"
# Open MPI and HDF5 keep allocations until exit that LSan cannot attribute
# (unloaded components); leaks are still checked after every input.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}leak_check_at_exit=0"

run_one() {
    name=$1
    [ -x "$bin/fuzz_$name" ] || { echo "run.sh: $bin/fuzz_$name not built (make fuzz)" >&2; return 2; }
    mkdir -p "$work/$name"
    [ "$name" != model_file ] || cp "$here/../../inputs/"*.cfg "$work/$name/"
    # HDF5 has its own bugs on damaged files (doc/guide.md, Fuzzing): for the
    # HDF5 harnesses, keep going after a crash (each is saved) in a forked child.
    case $name in
    dataset|checkpoint) keep="-fork=1 -ignore_crashes=1 -ignore_ooms=1" ;;
    *) keep="" ;;
    esac
    # shellcheck disable=SC2086
    TEST_TMP=$work nice -n 10 "$bin/fuzz_$name" -max_total_time="$secs" -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/$name-" $keep ${FUZZ_FLAGS:-} \
        "$work/$name" "$here/corpus/$name" >"$work/$name.log" 2>&1
}

pids=""
n=0
for name; do
    run_one "$name" &
    pids="$pids $!"
    n=$((n + 1))
    if [ "$n" -ge "$jobs" ]; then wait; n=0; fi
done
wait

status=0
printf '# %-11s %10s %7s %6s %7s %8s %s\n' harness execs exec/s cov ft corpus crashes
for name; do
    log=$work/$name.log
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -1)
    if [ -z "$execs" ]; then # -fork mode: "#EXECS: cov: ... exec/s N ... time: Ss"
        execs=$(echo "$last" | sed -n 's/^#\([0-9]*\):.*/\1/p')
        t=$(echo "$last" | sed -n 's/.* time: \([0-9]*\)s.*/\1/p')
        [ -n "$execs" ] && [ "${t:-0}" -gt 0 ] && rate=$((execs / t))
    fi
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.*corp: \([^ ]*\).*/\1/p')
    # -fork mode counts an MPI/HDF5 leak or an HDF5 crash in a child as a crash;
    # triage each saved input by replaying it (doc/guide.md, Fuzzing).
    crashes=$(ls "$work/$name"-crash-* "$work/$name"-leak-* "$work/$name"-oom-* "$work/$name"-timeout-* 2>/dev/null | wc -l)
    [ "$crashes" -eq 0 ] || status=1
    printf '  %-11s %10s %7s %6s %7s %8s %s\n' "$name" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes"
done
[ "$status" -eq 0 ] || echo "crashes: $work/*-crash-* (replay one: $bin/fuzz_NAME FILE)" >&2
exit $status
