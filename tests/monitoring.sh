#!/bin/sh
# monitoring.sh: what training reports, end to end (2 ranks).
#
# - --metrics: one CSV row per epoch (and per N steps) with sane values that
#   match the epoch lines; .jsonl parses as JSON.
# - the progress bar appears on a terminal (a pty from script(1)) or with
#   --progress bar, and never in a plain log; the epoch lines are the same.
# - the run summary; --logdir read back by TensorBoard's own reader
#   (tests/interop/tb_read.py) with the metrics file's values;
# - --timeline parses as JSON and holds, for both ranks, the layer, bucket,
#   read, loss and optimizer spans.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/mon.$$
rm -rf "$T"; mkdir -p "$T"
base="$fm --batch-size 32 --steps-per-epoch 10"

# --- metrics file and summary ---
run_np 2 $base --epochs 3 --metrics "$T/m.csv" --metrics-every 4
if [ "$rc" = 0 ] && [ "$(grep -c '^epoch,' "$T/m.csv")" = 3 ] && [ "$(grep -c '^step,' "$T/m.csv")" = 7 ] &&
   head -1 "$T/m.csv" | grep -q '^kind,epoch,step,global_step,samples,seconds,samples_per_s,loss,accuracy,val_loss,val_accuracy,lr,loss_scale,skipped,comm_ms,wait_ms,data_ms,grad_norm,clipped$'; then
  pass "--metrics: header, 3 epoch rows, 7 step rows (every 4 of 30 steps)"
else
  fail "--metrics rows: rc=$rc"; cat "$T/m.csv" "$err" >&2
fi
# every epoch row agrees with its epoch line, and the figures are sane
ok=1
for e in 1 2 3; do
  row=$(grep "^epoch,$e," "$T/m.csv")
  line=$(grep "^Epoch $e/3 " "$out")
  loss=$(echo "$line" | sed 's/.* - loss: \([0-9.]*\) .*/\1/'); vacc=$(echo "$line" | sed 's/.*val_accuracy: \([0-9.]*\).*/\1/')
  echo "$row" | awk -F, -v l="$loss" -v va="$vacc" '{
      d = $8 - l; if (d < 0) d = -d; e2 = $11 - va; if (e2 < 0) e2 = -e2
      exit !($3 == 10 && $5 == 640 && $6 > 0 && $7 > 0 && d < 6e-5 && e2 < 6e-5 && $12 == 0.001 && $15 >= 0 && $16 >= 0 && $17 >= 0) }' || ok=0
done
[ $ok = 1 ] && pass "--metrics: epoch rows match the epoch lines (loss, val_accuracy), 640 samples, lr 0.001" ||
  { fail "--metrics values"; cat "$T/m.csv" "$out" >&2; }
if grep -q '^Run summary$' "$out" && grep -q '^  mean throughput  *[0-9]* samples/s$' "$out" &&
   grep -q '^  best val_accuracy  *[0-9.]* (epoch [1-3], reached after [0-9.]* s)$' "$out" &&
   grep -q '^  communication  *[0-9.]*% of training time; data wait [0-9.]*%$' "$out" &&
   grep -q '^  peak memory per rank [0-9.]* MiB (largest of 2 ranks)$' "$out"; then
  pass "run summary"
else
  fail "run summary"; cat "$out" >&2
fi
run_np 1 $base --epochs 2 --metrics "$T/m.jsonl"
if [ "$rc" = 0 ] && /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and all(r["kind"] == "epoch" for r in rows), rows
assert rows[1]["epoch"] == 2 and rows[1]["loss_scale"] is None and rows[1]["samples"] == 320, rows[1]
' "$T/m.jsonl"; then
  pass "--metrics .jsonl parses, nulls where a figure does not apply"
else
  fail "--metrics jsonl"; cat "$T/m.jsonl" >&2
fi

# --- progress bar: only for a terminal (or when asked) ---
run_np 2 $base --epochs 2
plain=$out
if ! grep -q "$(printf '\r')" "$plain" && ! grep -q 'ETA:' "$plain"; then pass "a log file gets no bar"
else fail "bar in a non-terminal log"; fi
run_np 2 $base --epochs 2 --progress bar
if grep -q 'ETA: ' "$out" && grep -q "$(printf '\r')" "$out" && grep -q '^Epoch 1/2$' "$out" &&
   grep -q '10/10 \[==============================\]' "$out"; then
  pass "--progress bar: Epoch header, redrawn bar, full bar at 10/10"
else
  fail "--progress bar"; cat -v "$out" | head >&2
fi
# the same epoch lines either way, once the bar is cleared
clean() { tr '\r' '\n' <"$1" | sed 's/\x1b\[K//g' | grep '^Epoch [0-9]/2 -' | sed 's/ - [0-9.]* s - [0-9]* samples\/s//; s/ - comm: .*//'; }
if [ "$(clean "$plain")" = "$(clean "$out")" ] && [ -n "$(clean "$out")" ]; then pass "the bar ends in the same epoch lines"
else fail "epoch lines differ with the bar"; fi
if command -v script >/dev/null; then
  # A singleton run (no launcher) on a real pty: isatty() is truthful there.
  # (Open MPI's mpirun gives every rank a pty whatever its own output is, so
  # under it auto means plain lines: the run_np cases above.)
  script -qec "$DTRAIN $base --epochs 1" "$T/pty.log" >/dev/null 2>&1
  grep -q 'ETA: ' "$T/pty.log" && pass "on a terminal (script's pty) the bar is on by default" ||
    { fail "no bar on a pty"; cat -v "$T/pty.log" | head >&2; }
else
  echo "note: script(1) not installed: the pty case is not checked"
fi

# --- TensorBoard ---
run_np 2 $base --epochs 3 --logdir "$T/tb" --metrics "$T/tb.csv"
n1=$(ls "$T/tb/train" | grep -c '^events\.out\.tfevents\.'); n2=$(ls "$T/tb/validation" | grep -c '^events\.out\.tfevents\.')
[ "$rc" = 0 ] && [ "$n1" = 1 ] && [ "$n2" = 1 ] && pass "--logdir: one event file in train/ and validation/" ||
  fail "--logdir files: rc=$rc train=$n1 validation=$n2"
venv=${TB_VENV:-$TOP_BUILDDIR/.venv-tensorboard}
if sh "$TOP_SRCDIR/tests/interop/setup-tensorboard.sh" "$venv" >"$T/tbsetup.log" 2>&1; then
  "$venv/bin/python" "$TOP_SRCDIR/tests/interop/tb_read.py" "$T/tb" >"$T/tb.txt" 2>&1
  # epoch_loss of train and val_accuracy of validation, against the metrics file
  if awk -F, 'FNR == NR { if ($1 == "epoch") { loss[$2 - 1] = $8; vacc[$2 - 1] = $11 } next }
       /^SCALAR run=train tag=epoch_loss / { split($4, s, "="); split($5, v, "="); d = v[2] - loss[s[2]]; if (d < 0) d = -d; if (d > 1e-5 * (1 + loss[s[2]])) bad++; n++ }
       /^SCALAR run=validation tag=epoch_accuracy / { split($4, s, "="); split($5, v, "="); d = v[2] - vacc[s[2]]; if (d < 0) d = -d; if (d > 1e-5) bad++; n++ }
       END { exit !(n == 6 && bad == 0) }' "$T/tb.csv" "$T/tb.txt" &&
     [ "$(grep -c '^SCALAR run=train ' "$T/tb.txt")" = 21 ]; then
    pass "TensorBoard's EventAccumulator reads 21 train and 6 validation scalars; loss and val_accuracy match --metrics"
  else
    fail "tb_read.py"; cat "$T/tb.txt" "$T/tb.csv" >&2
  fi
else
  echo "SKIP (part): TensorBoard's reader could not be installed (no PyPI?): $(tail -1 "$T/tbsetup.log")"
fi

# --- timeline ---
run_np 2 $base --epochs 1 --timeline "$T/tl.json" --checkpoint-dir "$T/ck"
if [ "$rc" = 0 ] && /usr/bin/python3 - "$T/tl.json" >"$T/tl.txt" 2>&1 <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e.get("ph") == "X"]
names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
assert {"compute", "communication", "data"} <= names, names
per = collections.Counter(e["pid"] for e in x)
for rank in (0, 1):
    mine = [e for e in x if e["pid"] == rank]
    got = collections.Counter(e["name"] for e in mine)
    for want in ("forward conv2d", "backward conv2d", "backward dense_1", "loss", "optimizer", "read batch",
                 "evaluate", "checkpoint"):
        assert got[want] >= 1, (rank, want, got)
    assert got["forward conv2d"] >= 10 and got["read batch"] >= 10, got
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in mine)
print("spans per rank:", dict(per), "kinds:", len({e["name"] for e in x}))
PY
then
  pass "--timeline: $(cat "$T/tl.txt")"
else
  fail "--timeline: rc=$rc"; cat "$T/tl.txt" "$err" >&2
fi

expect_fail 2 "--metrics: expected a file name ending in .csv or .jsonl, found 'm.txt'" 1 "$fm" --metrics m.txt
expect_fail 2 "--progress: expected auto, bar or plain, found 'fancy'" 1 "$fm" --progress fancy
expect_fail 2 "--metrics-every: needs --metrics FILE" 1 "$fm" --metrics-every 5
expect_fail 2 "--metrics $T/no/such/dir/m.csv: cannot create it" 2 "$fm" --metrics "$T/no/such/dir/m.csv"
rm -rf "$T"
finish
