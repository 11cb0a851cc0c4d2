#!/bin/sh
# bench_gpt.sh: bench/gpt.sh and bench/torch_gpt.py end to end at toy size
# (the speed figures themselves are not checked: speed claims come from
# bench/gpt.sh runs on the full model, bench/README.md "GPT").
#
# - bad --rounds, --batch-size, --skip, --model, --learn-evals: exit 2, one
#   line naming the flag; torch_gpt.py refuses a model file not of
#   gen-gpt.py's form the same way;
# - a 2-block GPT (width 32) on a little real text, one round of every part:
#   np=2 against np=1 within 1e-4 with the same sample log, a tokens/s row
#   for every run, the np=2 scaling ratio, the attention kernel's GFLOP/s,
#   both learning-curve validations and the SVG (with gnuplot);
# - with /usr/bin/python3 + torch + h5py: dtrain against PyTorch within 1e-4
#   from dtrain's initial weights (a second no-op update leaves them equal),
#   the dtrain / pytorch ratio rows and what 1.5x asks of the core
#   against its peak, PyTorch's validation losses beside
#   dtrain's; and the check can fail: PyTorch from its own random
#   initialisation differs by more than 1e-4 and torch_gpt.py exits 1.
# Without torch the PyTorch parts are skipped (said so).
. "$TOP_SRCDIR/tests/common.sh"
B=$TOP_SRCDIR/bench
T=$TEST_TMP/bench_gpt.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS
PY=/usr/bin/python3
if "$PY" -c 'import numpy, torch, h5py' 2>/dev/null; then
  torch=1 notorch=""
else
  torch=0 notorch=--no-torch
  echo "skip: $PY cannot import numpy, torch and h5py: PyTorch parts not run"
fi

# A little real text: the King James Bible where bible-kjv is installed, else the GPL.
if command -v bible >/dev/null 2>&1; then bible gen1:1-rev22:21 | head -c 200000 >"$T/text.txt"
else cp /usr/share/common-licenses/GPL-3 "$T/text.txt"; fi
"$DTRAIN_PREP" --quiet --text "$T/text.txt" --tokenizer bpe:200 "$T/text.h5" || { fail "dtrain-prep --text"; finish; }
{
  printf '[embedding]\nwidth = 32\nblock_size = 32\n'
  for _ in 1 2; do
    printf '[layernorm]\n[attention]\nheads = 4\n[add]\nfrom = -3\n[layernorm]\n'
    printf '[linear]\nunits = 128\nactivation = gelu\n[linear]\nunits = 32\n[add]\nfrom = -4\n'
  done
  printf '[layernorm]\n[lm_head]\ntied = 1\n'
} >"$T/g.cfg"

bench_refused gpt.sh "--rounds: expected a positive whole number, found '0'" --rounds 0
bench_refused gpt.sh "--batch-size 3: the np=2 runs split it over 2 ranks, so it must be even" --batch-size 3
bench_refused gpt.sh "--skip: expected a comma list of check, speed and learn, found 'plot' in 'speed,plot'" --skip speed,plot
bench_refused gpt.sh "--model $T/none.cfg: no such readable file" --model "$T/none.cfg"
cnn=$(cd "$TOP_SRCDIR/inputs" && pwd)/cnn.cfg # gpt.sh names the model by its absolute path
bench_refused gpt.sh "--model $cnn: not a GPT of inputs/gen-gpt.py's form ([embedding] width and block_size, [attention] blocks)" --model "$cnn"
bench_refused gpt.sh "--learn-evals 9: more validations than the 8 steps" --learn-steps 8 --learn-evals 9
if [ "$torch" = 1 ]; then
  "$PY" "$B/torch_gpt.py" --model "$TOP_SRCDIR/inputs/resnet20.cfg" --data "$T/text.h5" --bench >"$out" 2>"$err"
  rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <"$err")" = 1 ] && grep -q "^torch_gpt.py: --model .*: not a GPT of inputs/gen-gpt.py's form" "$err" &&
    pass "torch_gpt.py --model resnet20.cfg -> 2: $(cut -c1-100 "$err")..." || { fail "torch_gpt.py resnet20.cfg: rc=$rc"; cat "$err" >&2; }
fi

# One round of everything at toy size.
# shellcheck disable=SC2086
bash "$B/gpt.sh" --build "$TOP_BUILDDIR" --model "$T/g.cfg" --data "$T/text.h5" --rounds 1 --check-steps 6 \
  --speed-steps 1 --learn-steps 8 --learn-evals 2 --plot "$T/learn.svg" --out "$T/r.csv" $notorch >"$out" 2>"$err"
rc=$?
[ "$rc" = 0 ] && pass "gpt.sh at toy size exits 0" || { fail "gpt.sh: rc=$rc"; tail -20 "$err" >&2; }
has() { # PATTERN WHAT
  if grep -q -- "$1" "$out"; then pass "report: $(grep -- "$1" "$out" | head -n 1 | tr -s ' ' | cut -c1-150)"
  else fail "report lacks $2"; fi
}
has "^# isa: .*avx512f\|^# isa: " "the ISA line"
has "^# peak (bench/peak, one core): fp32_fma [0-9.]* GFLOP/s" "bench/peak's figures"
has "^np=2 (batch 4 each) against np=1 (batch 8): 6 steps, worst relative loss difference [0-9.e-]* (step [0-9]*); sample logs the same: ok$" "np=2 against np=1"
for run in "dtrain fp32, 1 core" "dtrain fp32 -np 2, 2 cores" "2 x dtrain fp32 -np 1 at once"; do
  has "^$run  *[0-9][0-9]*  *[0-9][0-9]*  *[0-9][0-9]*  *1/1  *[0-9.]*$" "a figure for '$run'"
done
has "^dtrain np=2 / (2 x np=1), fp32  *[0-9.]*   (.*, 1/1 rounds)  target >= 0.9: " "the scaling ratio"
has "^attention fp32  forward  *[0-9.]*  backward  *[0-9.]*  forward+backward  *[0-9.]* GFLOP/s = [0-9]*% of fp32_fma peak" "the attention kernel's figure"
[ "$(awk '/^## \(c\)/ { on = 1; next } on && $1 ~ /^[48]$/' "$out" | wc -l)" = 2 ] &&
  pass "learning: validations after updates 4 and 8" || fail "learning: not 2 validation rows"
if command -v gnuplot >/dev/null 2>&1; then
  grep -q '<svg' "$T/learn.svg" 2>/dev/null && pass "learning curves plotted into an SVG" || fail "no SVG at $T/learn.svg"
fi
head -20 "$T/r.csv" | grep -q '^part,round,run,precision,np,metric,value$' && pass "CSV header" || fail "CSV header"

if [ "$torch" = 1 ]; then
  has "^initial weights: .*leaves every weight equal (h5diff -d 0): ok$\|^initial weights: .*no h5diff" "the initial weights' check"
  has "^dtrain np=1 against PyTorch: 6 steps, worst relative loss difference [0-9.e-]* (step [0-9]*; target 1e-4): ok$" "dtrain against PyTorch"
  has "^dtrain / pytorch, fp32, 1 core  *[0-9.]*   (.*, 1/1 rounds)" "the fp32 ratio"
  has "^# fp32: 1.5x pytorch = [0-9.]* GFLOP/s = [0-9]*% of the fp32_fma peak [0-9.]* (dtrain at [0-9]*%, pytorch at [0-9]*%)$" "what the target asks of the core"
  [ "$(awk '/^## \(c\)/ { on = 1; next } on && $1 ~ /^[48]$/ && $3 ~ /^[0-9]/ && $4 ~ /^[-+]/' "$out" | wc -l)" = 2 ] &&
    pass "learning: PyTorch's validation losses beside dtrain's" || fail "learning: no PyTorch validations"

  # The check can fail: PyTorch's own initialisation instead of dtrain's.
  run_np 1 "$T/text.h5" --model "$T/g.cfg" --optimizer adamw --batch-size 4 --epochs 1 --steps-per-epoch 3 \
    --no-validation --verbose --sample-log "$T/s.log"
  cp "$out" "$T/d.out"
  "$PY" "$B/torch_gpt.py" --model "$T/g.cfg" --data "$T/text.h5" --sample-log "$T/s.log" --check "$T/d.out" >"$out" 2>"$err"
  rc=$?
  w=$(sed -n 's/^CHECK .*worst_rel=\([^ ]*\).*/\1/p' "$out")
  [ "$rc" = 1 ] && [ -n "$w" ] && awk "BEGIN { exit !($w > 1e-4) }" &&
    pass "negative control: PyTorch from its own initialisation differs by $w, exit 1" ||
    { fail "negative control: rc=$rc, worst '$w'"; cat "$err" >&2; }
fi
rm -rf "$T"
finish
