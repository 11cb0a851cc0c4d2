#!/bin/sh
# bench_pipeline.sh: bench/pipeline.sh end to end at a toy size (its figures
# come from benchmark runs: ResNet-20 on 8x8x3 images, 2-step epochs).
#
# - bad --stages, --micro, --batch, --model and --repeats: exit 2, one line
#   naming the flag;
# - P = 2 and 4, M = 2 and 8, one round: every run in the CSV, a report row
#   for each (P, M) whose bubble is a percentage, whose ideal is
#   (P-1)/(M+P-1) worked out here, whose difference is the two's, with
#   samples/s and a step-time ratio; the oversubscription note for every P
#   above this machine's cores.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/bench_pipeline.$$
rm -rf "$T"
mkdir -p "$T"
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS

refused() { bench_refused pipeline.sh "$@"; } # MESSAGE ARGS...
refused "--stages: a pipeline needs at least 2 stages, found '1'" --stages 1
refused "--micro: expected a comma list of micro-batch counts, found '2,'" --micro 2,
refused "--batch: 10 does not split evenly over 4 data-parallel ranks" --batch 10 --stages 4
refused "--model: no model file inputs/resnet99.cfg" --model resnet99
refused "--repeats: expected a positive whole number, found '0'" --repeats 0

bash "$TOP_SRCDIR/bench/pipeline.sh" --build "$TOP_BUILDDIR" --synthetic 8x8x3:4:64 --stages 2,4 --micro 2,8 \
  --steps 2 --batch 16 --repeats 1 --out "$T/runs.csv" >"$T/out" 2>"$T/err"
rc=$?
dp=$(grep -c '^[24],,1,dp,2,' "$T/runs.csv")
pipe=$(grep -c '^[24],[28],1,pipe,2,' "$T/runs.csv")
if [ "$rc" = 0 ] && [ "$dp" = 2 ] && [ "$pipe" = 4 ]; then
  pass "pipeline.sh toy run: 2 data-parallel and 4 pipelined runs in the CSV"
else
  fail "pipeline.sh toy run: rc=$rc, $dp data-parallel and $pipe pipelined runs in the CSV (expected 2 and 4)"
  cat "$T/out" "$T/err" "$T/runs.csv" >&2
fi

# One row per (P, M): P M ranks bubble ideal diff imbal pipe-sps dp-sps ratio rounds.
for pm in "2 2" "2 8" "4 2" "4 8"; do
  # shellcheck disable=SC2086  # "P M", split on purpose
  set -- $pm
  row=$(awk -v p="$1" -v m="$2" '$1 == p && $2 == m && NF == 11' "$T/out")
  why=$(echo "$row" | awk -v p="$1" -v m="$2" '
    NF != 11 { print "no row"; exit }
    function num(x) { return x ~ /^[+-]?[0-9]+(\.[0-9]+)?$/ }
    {
      ideal = sprintf("%.1f", 100 * (p - 1) / (m + p - 1))
      if ($3 != p) print "ranks " $3 ", expected " p
      else if (!num($4) || $4 <= 0 || $4 >= 100) print "bubble " $4 " is not a percentage in (0, 100)"
      else if ($5 != ideal) print "ideal " $5 ", expected (P-1)/(M+P-1) = " ideal
      else if (!num($6) || ($6 - ($4 - $5)) ^ 2 > 0.01) print "diff " $6 " is not bubble - ideal = " $4 - $5
      else if (!num($7) || $7 < 1) print "imbalance " $7 " is not a ratio >= 1"
      else if (!num($8) || $8 <= 0 || !num($9) || $9 <= 0) print "samples/s " $8 " and " $9
      else if (!num($10) || $10 <= 0) print "step-time ratio " $10
      else if ($11 != "1/1") print "rounds " $11
    }')
  if [ -z "$why" ]; then
    pass "P=$1 M=$2: $row"
  else
    fail "P=$1 M=$2: $why"; cat "$T/out" >&2
  fi
done

ncpu=$(env -u OMP_NUM_THREADS nproc)
for p in 2 4; do
  if [ "$p" -gt "$ncpu" ]; then want=1; else want=0; fi
  n=$(grep -c "^# P=$p: $p ranks share this machine's $ncpu cores (oversubscribed" "$T/out")
  if [ "$n" = "$want" ]; then
    pass "P=$p on $ncpu cores: $n oversubscription note(s)"
  else
    fail "P=$p on $ncpu cores: $n oversubscription note(s), expected $want"; cat "$T/out" >&2
  fi
done
rm -rf "$T"
finish
