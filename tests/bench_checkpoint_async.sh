#!/bin/sh
# bench_checkpoint_async.sh: bench/checkpoint-async.sh end to end at a toy
# size (its speed figures are not checked: they come from benchmark runs).
#
# - bad --every, --precision and --model: exit 2, one line naming the flag;
# - the MLP at 2 ranks, 2 rounds: six runs in the CSV (each setting once a
#   round), a blocked time for every run that checkpoints and none for the
#   control, the writer's time for the asynchronous runs only, and the four
#   median rows with numbers in them.
. "$TOP_SRCDIR/tests/common.sh"
B=$TOP_SRCDIR/bench
T=$TEST_TMP/bench_ckasync.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS

refused() { bench_refused checkpoint-async.sh "$@"; } # MESSAGE ARGS...
refused "--every 6: expected fewer than --steps (6)" --steps 6 --every 6
refused "--precision: expected fp32 or bf16, found 'fp16'" --precision fp16
refused "--model $T/none.cfg: no such readable file" --model "$T/none.cfg"
refused "--rounds: expected a positive whole number, found '0'" --rounds 0

bash "$B/checkpoint-async.sh" --build "$TOP_BUILDDIR" --model "$TOP_SRCDIR/inputs/mlp.cfg" --np 2 --batch 8 \
  --steps 6 --every 2 --rounds 2 --dir "$T/ck" --out "$T/runs.csv" >"$out" 2>"$err"
rc=$?
cat "$out"
rows=$(grep -c '^[12],' "$T/runs.csv")
each=$(cut -d, -f1,2 "$T/runs.csv" | sort | uniq | grep -c '^[12],\(none\|sync\|async\)$')
blocked=$(awk -F, 'NR > 1 && ($2 == "none") == ($7 == "") && ($2 == "async") == ($8 != "")' "$T/runs.csv" | wc -l)
num='[0-9][0-9.e+-]*'
if [ "$rc" = 0 ] && [ "$rows" = 6 ] && [ "$each" = 6 ] && [ "$blocked" = 6 ] &&
   grep -q "^median step ms  *none $num  sync $num  async $num$" "$out" &&
   grep -q "^excess ms / ckpt  *none -*$num  sync -*$num  async -*$num$" "$out" &&
   grep -q "^blocked ms / ckpt  *sync $num  async $num  async/sync $num$" "$out" &&
   grep -q "^overhead, every 50  *none -*$num%  sync -*$num%  async -*$num%$" "$out"; then
  pass "checkpoint-async.sh: 6 runs (each setting once a round), blocked and writer times where due, 4 median rows"
else
  fail "checkpoint-async.sh toy run: rc=$rc, rows=$rows each=$each blocked=$blocked"; cat "$err" "$T/runs.csv" >&2
fi
rm -rf "$T"
finish
