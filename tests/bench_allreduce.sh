#!/bin/sh
# bench_allreduce.sh: dtrain-bench-allreduce, the installed all-reduce
# benchmark: every algorithm checked exact at 2 ranks and at an emulated
# 2x2 (a wrong sum would fail it: it exits 1); --rounds interleaves and says
# so; --csv, --json and --table write what they promise, and dtrain takes the
# table; auto times its candidates across (here emulated) nodes when asked;
# bad options exit 2 with one message.
. "$TOP_SRCDIR/tests/common.sh"
BENCH=$TOP_BUILDDIR/dtrain-bench-allreduce
T=$TEST_TMP/bench.$$
rm -rf "$T"
mkdir -p "$T"
PY=/usr/bin/python3

out=$T/out err=$T/err
launch 2 "$BENCH" -b 4 -e 64K -f 16 -n 3 -w 1 -r 3 --csv "$T/b.csv" --json "$T/b.json" --table "$T/b.table" >"$out" 2>"$err"
rc=$?
rows=$(grep -Ec '^ +[0-9]+ +[0-9]+  (mpi|ring|hier|auto:[a-z]+) +(window|oop) ' "$out")
if [ "$rc" = 0 ] && [ "$rows" = 32 ] && grep -q '^# Wrong elements: 0 OK' "$out" &&
   grep -q '^# rounds: 3 per size, algorithms interleaved' "$out"; then
  pass "2 ranks, 4 sizes x 4 algorithms x 2 buffers, 3 interleaved rounds: 32 rows, every sum exact"
else
  fail "2-rank run: rc=$rc, $rows rows"; cat "$out" "$err" >&2
fi
if [ "$(wc -l <"$T/b.csv")" = 33 ] && head -1 "$T/b.csv" | grep -q '^buffer,size_bytes,count,algorithm,picked' &&
   $PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['rounds']==3 and len(d['results'])==32, d.get('rounds')" "$T/b.json"; then
  pass "--csv (32 rows) and --json (rounds 3, 32 rows)"
else
  fail "--csv/--json"; head -3 "$T/b.csv" >&2
fi
run_np 2 --synthetic 8x8x3:4:512 --model mlp --epochs 1 --allreduce-table "$T/b.table" --quiet
if grep -q '^1 2 0 ' "$T/b.table" && [ "$rc" = 0 ]; then
  pass "--table: $(grep -vc '^#' "$T/b.table") rule(s) for 1 node x 2 ranks, and dtrain trains with it"
else
  fail "--table (rc=$rc)"; cat "$T/b.table" "$err" >&2
fi

# An emulated 2x2, auto timed as across nodes (DTRAIN_ALLREDUCE_TUNE=1).
DTRAIN_ALLREDUCE_TUNE=1 launch 4 -x DTRAIN_ALLREDUCE_TUNE "$BENCH" --ranks-per-node 2 -b 1K -e 1M -f 32 -n 3 -w 1 \
  --window >"$out" 2>"$err"
rc=$?
if [ "$rc" = 0 ] && grep -q '^# Wrong elements: 0 OK' "$out" &&
   grep -Eq '^# auto across nodes, window buffers: timed at start-up: (mpi|ring|hier) at 1 KiB.*(mpi|ring|hier) at 32 KiB.*(mpi|ring|hier) at 1 MiB' "$out"; then
  pass "2x2 (emulated): exact; $(grep '^# auto across' "$out" | cut -c3-140)"
else
  fail "2x2 tuned run: rc=$rc"; cat "$out" "$err" >&2
fi

# Bad command lines: exit 2, one message from rank 0.
for bad in "--rounds 0|--rounds: expected an integer in \[1, 1001\], found 0" "--bogus|unknown option '--bogus'" \
           "-a mpi,tree|--algorithms: expected mpi, ring, hier or auto, found 'tree'"; do
  args=${bad%%|*} msg=${bad#*|}
  # shellcheck disable=SC2086
  launch 2 "$BENCH" $args >"$out" 2>"$err"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(grep -c '^dtrain-bench-allreduce: error: ' "$err")" = 1 ] && grep -q -- "$msg" "$err"; then
    pass "$args -> 2: $(cat "$err" | head -1)"
  else
    fail "$args: rc=$rc"; cat "$err" >&2
  fi
done
rm -rf "$T"
finish
