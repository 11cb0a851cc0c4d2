#!/bin/sh
# bench_map_threads.sh: bench/map-threads.sh end to end at a toy size (its
# speed figures are not checked: they come from benchmark runs).
#
# - bad --threads, --only, --cold and --pairs: exit 2, one line naming the
#   flag;
# - resnet20, one pair of one-epoch runs of 3 steps: both runs in the CSV
#   (map threads 1 and 2) and a report row with numbers in every column;
# - cold at a toy size, where a memory cgroup can be made here (root, a
#   writable /sys/fs/cgroup): the same, with the cgroup named in the header
#   and removed afterwards; and io, on the same file. Elsewhere a visible note says it was not run.
. "$TOP_SRCDIR/tests/common.sh"
B=$TOP_SRCDIR/bench
T=$TEST_TMP/bench_map.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS

refused() { bench_refused map-threads.sh "$@"; } # MESSAGE ARGS...
refused "--threads: expected 2 to 64 map threads to compare with 1, found '1'" --threads 1
refused "--only: expected a comma list of resnet20, cold and io, found 'all'" --only all
refused "--cold: expected HxWxC:CLASSES:N, found '64x64'" --cold 64x64
refused "--pairs: expected a positive whole number, found '0'" --pairs 0

num='[0-9][0-9.]*'
# toy WORKLOAD ARGS...: one pair runs, two CSV rows, one report row of numbers
toy() {
  w=$1; shift
  bash "$B/map-threads.sh" --build "$TOP_BUILDDIR" --only "$w" --pairs 1 --epochs 1 --steps 3 --dir "$T/files" \
    --out "$T/$w.csv" "$@" >"$out" 2>"$err"
  rc=$?
  rows=$(grep -c "^$w,1,[12],1,3," "$T/$w.csv")
  if [ "$rc" = 0 ] && [ "$rows" = 2 ] &&
     grep -q "^$w  *$num%  *$num%  *$num  *$num  *$num  *1/1$" "$out"; then
    pass "map-threads.sh --only $w: 2 runs in the CSV, $(grep "^$w " "$out")"
  else
    fail "map-threads.sh --only $w: rc=$rc, rows=$rows"; cat "$out" "$err" "$T/$w.csv" >&2
  fi
}
toy resnet20
probe=""
for d in /sys/fs/cgroup/memory /sys/fs/cgroup; do
  if mkdir "$d/dtrain-test-probe.$$" 2>/dev/null; then probe=$d; rmdir "$d/dtrain-test-probe.$$"; break; fi
done
if [ -n "$probe" ]; then
  toy cold --cold 16x16x3:10:4000 --page-cache 256
  if grep -q '^# cold: .*page cache capped at 256 MiB (cgroup memory\.' "$out" &&
     ! ls -d "$probe"/dtrain-map-threads.* >/dev/null 2>&1; then
    pass "cold: the cgroup is named in the header and gone afterwards"
  else
    fail "cold: header or cgroup left behind"; ls -d "$probe"/dtrain-map-threads.* >&2; cat "$out" >&2
  fi
  toy io --cold 16x16x3:10:4000 --page-cache 256
else
  echo "note: no memory cgroup can be made here (not root, or /sys/fs/cgroup read-only): the cold workload is not run"
fi
rm -rf "$T"
finish
