#!/bin/sh
# bench_resnet.sh: the ResNet and CNN benchmark drivers' --precision and
# --model, end to end at toy sizes (the speed figures themselves are not
# checked: speed claims come from bench/resnet.sh runs, not tests).
#
# - bad --precision / --model: exit 2, one line naming the flag;
# - bench/resnet.sh --precision fp32,bf16 at 1 and 2 ranks: every run valid,
#   a precision column in the CSV, the cross-precision ratio rows, and (with
#   PyTorch) equal parameter counts; torch_resnet.py --depth 32 --width 4
#   has resnet32-wide4.cfg's parameter count as dtrain prints it;
# - bench/cnn-throughput.sh --precision fp32,bf16 gives dtrain-bf16 /
#   PyTorch-fp32 per round in one invocation;
# - --dtrain-flags --winograd reaches every dtrain run (the kernel lines
#   show a Winograd kernel, oneDNN's or dtrain's, on the 32-channel stage);
# - both reports open, before any figure, with the CPU, its ISA, bench/peak's
#   peaks and the oneDNN kernel (and share of peak) of every convolution,
#   with the convolutions' time at those peaks; with PyTorch, each goal's
#   line: the step it allows against that time (ResNet-20 1.5x; the seed
#   CNN fp32 2.5x, bf16 4x PyTorch fp32), its share their ratio.
# Without /usr/bin/python3 + torch the PyTorch parts are skipped (said so).
. "$TOP_SRCDIR/tests/common.sh"
B=$TOP_SRCDIR/bench
T=$TEST_TMP/bench_resnet.$$
rm -rf "$T"
mkdir -p "$T"
out=$T/out err=$T/err
MPIRUN=$MPIEXEC MPIRUN_FLAGS=$MPIEXEC_FLAGS
export MPIRUN MPIRUN_FLAGS
PY=/usr/bin/python3
if "$PY" -c 'import numpy, torch, h5py, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  torch=1 notorch=""
else
  torch=0 notorch=--no-torch
  echo "skip: $PY cannot import torch with gloo: PyTorch parts not run"
fi

# refused SCRIPT MESSAGE ARGS...: exit 2 and exactly one stderr line, MESSAGE.
refused() {
  script=$1 msg=$2; shift 2
  bash "$B/$script" --build "$TOP_BUILDDIR" "$@" >"$out" 2>"$err"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$err")" = 1 ] && grep -q "^$script: " "$err" && grep -qF -- "$msg" "$err"; then
    pass "$script $* -> 2: $(cat "$err")"
  else
    fail "$script $*: rc=$rc, expected 2 and '$msg'"; cat "$err" >&2
  fi
}
refused resnet.sh "--precision: expected a comma list of fp32 and bf16, found 'fp16' in 'fp32,fp16'" --precision fp32,fp16
refused resnet.sh "--precision: 'bf16' is listed twice in 'bf16,bf16'" --precision bf16,bf16
refused resnet.sh "--precision: expected a comma list of fp32 and bf16, found 'fp32,'" --precision fp32,
refused resnet.sh "--model $T/none.cfg: no such readable file" --model "$T/none.cfg"
refused resnet.sh "not a ResNet of inputs/gen-resnet.py's form" --model "$TOP_SRCDIR/inputs/cnn.cfg"
refused resnet.sh "--dtrain-flags: expected dtrain options (--winograd ...), found 'winograd'" --dtrain-flags winograd
refused cnn-throughput.sh "--precision: expected a comma list of fp32 and bf16, found 'fp8' in 'fp8'" --precision fp8
refused cnn-throughput.sh "--dtrain-flags: expected dtrain options (--winograd ...), found 'x --winograd'" --dtrain-flags "x --winograd"
bash "$B/ab.sh" --a "$TOP_BUILDDIR" --b "$TOP_BUILDDIR" --precision fp16 >"$out" 2>"$err"
rc=$?
[ "$rc" = 2 ] && grep -qF "ab.sh: --precision: expected fp32 or bf16, found 'fp16'" "$err" &&
  pass "ab.sh --precision fp16 -> 2: $(cat "$err")" || { fail "ab.sh --precision fp16: rc=$rc"; cat "$err" >&2; }
"$PY" "$B/torch_resnet.py" --depth 21 >"$out" 2>"$err"
rc=$?
[ "$rc" = 2 ] && grep -q -- '--depth: expected 6n+2 with n >= 1 (20, 32, 44, ...), found 21' "$err" &&
  pass "torch_resnet.py --depth 21 -> 2" || { fail "torch_resnet.py --depth 21: rc=$rc"; cat "$err" >&2; }

# machine_report SCRIPT OUT CSV: the report opens, before any figure, with
# the CPU and its ISA, one core's measured peaks, and per precision the
# oneDNN kernel of each convolution with its GFLOP/s and share of peak and
# the convolutions' total; the CSV's header says the same.
machine_report() {
  m=$T/machine.txt
  sed -n "/^# cpu: /,/^# onednn $lp: all convolutions/{p;/^# onednn $lp: all/q;}" "$2" >"$m"
  nconv=$(grep -Ec '^# onednn fp32:   (fwd|bwd-data|bwd-weights) +[a-z_0-9]+:[a-z_0-9]+ +mb[0-9]+_' "$m")
  if head -n 1 "$2" | grep -q '^# cpu: .*; ISA: ' &&
     grep -Eq '^# peak \(bench/peak, one core, median of 5\): fp32_fma [0-9.]+ GFLOP/s, bf16_dot ' "$m" &&
     grep -Eq '^# onednn fp32: (oneDNN v[0-9].*|no convolution ran in oneDNN); convolution kernels: [a-z_0-9]+:' "$m" &&
     grep -Eq '^# onednn (fp32|bf16):   fwd .* [0-9]+/step +[0-9.]+ ms +[0-9.]+ GFLOP/s = +[0-9]+% of fp32_fma$' "$m" &&
     grep -Eq "^# onednn fp32: all convolutions: [0-9.]+ ms per step, [0-9.]+ GFLOP/s, [0-9]+% of their kernels' peaks \([0-9.]+ ms at them\)$" "$m" &&
     grep -Eq "^# onednn $lp: all convolutions: [0-9.]+ ms per step, [0-9.]+ GFLOP/s, [0-9]+% of their kernels' peaks \([0-9.]+ ms at them\)$" "$m" &&
     [ "$nconv" -ge 3 ] && grep -q "^# onednn $lp: all convolutions" "$3"; then
    pass "$1: the machine first: $(head -n 1 "$m" | cut -c3-); $nconv fp32 convolution kernels; $(grep '^# onednn fp32: all' "$m" | cut -c3-)"
  else
    fail "$1: the report does not open with the CPU, its peaks and the oneDNN kernels ($nconv fp32 kernel lines)"; head -n 40 "$2" >&2
  fi
}

# Where the CPU has no bf16 instructions dtrain refuses bf16, and the
# drivers drop it from a list with a line saying so (a list of bf16 alone
# is refused): the checks below then expect fp32's runs and rows alone.
if cpu_bf16; then lp=bf16 nprec=2
else
  lp=fp32 nprec=1
  refused resnet.sh "--precision bf16: this CPU has neither AVX512-BF16 nor AMX-BF16, and dtrain refuses bf16 without them; use --precision fp32" --precision bf16
fi

# ResNet-20 at both precisions, 1 and 2 ranks, one round of toy size.
# shellcheck disable=SC2086
bash "$B/resnet.sh" --build "$TOP_BUILDDIR" --repeats 1 --epochs 1 --samples 64 --batch-size 32 \
  --precision fp32,bf16 $notorch --out "$T/r.csv" >"$out" 2>"$err"
rc=$?
runs=$(awk -F, '$7 == 1 && ($2 ~ /^(dtrain|pytorch)-np[12]$/) { print $2 "-" $3 }' "$T/r.csv" | sort -u | wc -l)
want=$(((torch ? 4 : 2) * nprec))
if [ "$rc" = 0 ] && grep -q '^round,run,precision,np,epoch,' "$T/r.csv" && [ "$runs" = "$want" ] &&
   { [ "$lp" = bf16 ] || grep -q '^resnet.sh: bf16 not measured: this CPU has neither AVX512-BF16 nor AMX-BF16' "$err"; }; then
  pass "resnet.sh --precision fp32,bf16: $runs runs, each with its quoted epoch and precision in the CSV"
else
  fail "resnet.sh --precision fp32,bf16: rc=$rc, $runs of $want runs in the CSV"; cat "$err" >&2
fi
machine_report resnet.sh "$out" "$T/r.csv"
[ "$lp" = bf16 ] || no_bf16 "resnet.sh's bf16 rows"
[ "$lp" = bf16 ] && for row in "dtrain-bf16 / dtrain-fp32 at 1 rank" "dtrain-bf16 / dtrain-fp32 at 2 ranks"; do
  grep -q "^$row  *[0-9.]*[0-9]   (.*, 1/1 rounds)" "$out" && pass "report: $(grep "^$row" "$out")" ||
    { fail "report lacks a figure for '$row'"; cat "$out" >&2; }
done
if [ "$torch" = 1 ]; then
  rows="dtrain-fp32 / pytorch-fp32 at 1 rank"
  [ "$lp" = bf16 ] && rows="$rows|dtrain-bf16 / pytorch-bf16 at 2 ranks|dtrain-bf16 / pytorch-fp32 at 1 rank|dtrain-bf16 / pytorch-fp32 at 2 ranks"
  ifs=$IFS; IFS='|'
  for row in $rows; do
    grep -q "^$row  *[0-9.]*[0-9]   (.*, 1/1 rounds)" "$out" && pass "report: $(grep "^$row" "$out")" ||
      { fail "report lacks a figure for '$row'"; cat "$out" >&2; }
  done
  IFS=$ifs
  # What the goal asks: 1.5 x PyTorch's samples/s as a step time, against
  # the convolutions at their peaks; the percentage is their ratio.
  goal=$(grep "^# goal dtrain-fp32 >= 1.5 x pytorch-fp32 at 1 rank: " "$out")
  if echo "$goal" | awk '{ for (i = 1; i <= NF; i++) { if ($i == "in") s = $(i + 1); if ($i == "take") a = $(i + 1); if ($i ~ /^\(/) p = $i } }
       END { gsub(/[(%)]/, "", p); d = 100 * a / s - p; if (d < 0) d = -d; exit !(s > 0 && a > 0 && d <= 1 + 0.01 * p) }'; then
    pass "report: $(echo "$goal" | cut -c3-)"
  else
    fail "report lacks the fp32 goal's line, or its share is not its times' ratio: '$goal'"
  fi
  grep -q '^trainable parameters: dtrain 273258, pytorch 273258$' "$out" && pass "ResNet-20: 273258 parameters on both sides" ||
    { fail "ResNet-20 parameter counts"; grep parameters "$out" >&2; }

  # resnet32-wide4: dtrain's count against the PyTorch twin's, bf16 autocast on the CPU.
  run_np 1 --synthetic 32x32x3:10:16 --model "$TOP_SRCDIR/inputs/resnet32-wide4.cfg" --batch-size 16 --epochs 1 \
    --threads 1 --no-validation --precision "$lp"
  d=$(sed -n 's/.*(\([0-9]*\) parameters).*/\1/p' "$out" | head -n 1)
  "$PY" "$B/torch_resnet.py" --depth 32 --width 4 --samples 16 --batch-size 16 --epochs 1 --precision bf16 >"$T/t.out" 2>"$T/t.err"
  trc=$?
  p=$(sed -n 's/^torch_resnet.py: ResNet-32 (n=5, width 4), \([0-9]*\) trainable parameters; .*precision bf16 (CPU autocast).*/\1/p' "$T/t.err")
  if [ "$rc" = 0 ] && [ "$trc" = 0 ] && [ -n "$d" ] && [ "$d" = "$p" ] && grep -q '^RESULT framework=pytorch epoch=1 .*loss=[0-9]' "$T/t.out"; then
    pass "resnet32-wide4: dtrain and torch_resnet.py --depth 32 --width 4 both $d parameters; bf16 autocast trains"
  else
    fail "resnet32-wide4: dtrain rc=$rc '$d', torch rc=$trc '$p'"; cat "$err" "$T/t.err" >&2
  fi
fi

# --dtrain-flags reaches every dtrain run: --winograd, named in the report,
# shows as a Winograd kernel in the kernel lines on the 32-channel stage:
# oneDNN's (jit_wino_4x3) on an AVX-512 CPU, with the 16-channel stage
# direct (brgconv); dtrain's own F(4x4) (dtrain_wino_4x3, all three passes)
# on an AVX2-only one, where the 16-channel stage takes it too.
bash "$B/resnet.sh" --build "$TOP_BUILDDIR" --repeats 1 --epochs 1 --samples 64 --batch-size 32 --no-torch \
  --dtrain-flags --winograd --out "$T/w.csv" >"$out" 2>"$err"
rc=$?
if [ "$rc" = 0 ] && grep -q '^# dtrain: .*; options added to every run: --winograd$' "$out" &&
   { { grep -Eq '^# onednn fp32:   fwd +jit_wino_4x3:[a-z_0-9]+ +mb32_ic32oc32_ih16oh16' "$out" &&
       grep -Eq '^# onednn fp32:   fwd +brgconv:[a-z_0-9]+ +mb32_ic16oc16_ih32oh32' "$out"; } ||
     { grep -Eq '^# onednn fp32:   fwd +dtrain_wino_4x3:avx2 +mb32_ic32oc32_ih16oh16' "$out" &&
       grep -Eq '^# onednn fp32:   bwd-data +dtrain_wino_4x3:avx2 +mb32_ic32oc32_ih16oh16' "$out" &&
       grep -Eq '^# onednn fp32:   bwd-weights +dtrain_wino_4x3:avx2 +mb32_ic32oc32_ih16oh16' "$out" &&
       grep -Eq '^# onednn fp32:   fwd +dtrain_wino_4x3:avx2 +mb32_ic16oc16_ih32oh32' "$out" &&
       grep -Eq '^# onednn fp32:   bwd-weights +dtrain_wino_4x3:avx2 +mb32_ic16oc16_ih32oh32' "$out"; }; } &&
   [ "$(grep -c '^1,dtrain-np[12],fp32,[12],1,1,1,' "$T/w.csv")" = 2 ]; then
  pass "resnet.sh --dtrain-flags --winograd: both runs; the 32-channel forward $(grep -Eo 'fwd +(jit|dtrain)_wino_[0-9x]+:[a-z_0-9]+ +mb32_ic32oc32' "$out" | head -1 | tr -s ' '), the 16-channel one $(grep -Eo 'fwd +[a-z_0-9]+:[a-z_0-9]+ +mb32_ic16oc16' "$out" | head -1 | tr -s ' ')"
elif [ "$rc" != 0 ] && grep -q 'has no Winograd convolution on this CPU' "$err" "$out" "$T/w.log" 2>/dev/null; then
  echo "skip: oneDNN has no Winograd kernel on this CPU: resnet.sh --dtrain-flags --winograd not checked"
else
  fail "resnet.sh --dtrain-flags --winograd: rc=$rc, or the report does not show the Winograd kernel"; cat "$out" "$err" >&2
fi

# The seed CNN at both precisions: dtrain-bf16 / PyTorch-fp32 in one invocation.
if fm=$(fm_small); then
  # shellcheck disable=SC2086
  bash "$B/cnn-throughput.sh" --build "$TOP_BUILDDIR" --data "$fm" --repeats 1 --epochs 1 --no-keras --no-scaling \
    --precision fp32,bf16 $notorch --out "$T/c.csv" >"$out" 2>"$err"
  rc=$?
  if [ "$lp" = bf16 ]; then
    rows="dtrain-bf16 / dtrain-fp32"
    [ "$torch" = 1 ] && rows="$rows|dtrain-bf16 / pytorch-fp32|dtrain-fp32 / pytorch-fp32"
  fi
  n=0 want=0
  if [ "$lp" = bf16 ]; then
    n=$(grep -Ec "^($rows)  *[0-9.]*[0-9]   \(.*, 1/1 rounds\)" "$out"); want=$(echo "$rows" | tr '|' '\n' | wc -l)
  elif [ "$torch" = 1 ]; then # one precision: one row of the medians' ratio
    rows="dtrain / pytorch"; n=$(grep -Ec '^dtrain / pytorch \(medians\)  *[0-9.]*[0-9]$' "$out"); want=1
  fi
  if [ "$rc" = 0 ] && [ "$n" = "$want" ] &&
     grep -q "^1,dtrain-np1,$lp,1,1,1,1," "$T/c.csv"; then
    pass "cnn-throughput.sh --precision fp32,bf16: $(grep -E "^($rows)" "$out" | tr -s ' ' | paste -sd';')"
  else
    fail "cnn-throughput.sh --precision fp32,bf16: rc=$rc, $n ratio rows"; cat "$out" "$err" >&2
  fi
  machine_report cnn-throughput.sh "$out" "$T/c.csv"
  if [ "$torch" = 1 ]; then # the seed CNN's goals: fp32 2.5x PyTorch fp32, bf16 4x
    goals="fp32 >= 2.5"; [ "$lp" = bf16 ] && goals="$goals|bf16 >= 4"
    ifs=$IFS; IFS='|'
    for g in $goals; do
      grep -q "^# goal dtrain-$g x pytorch-fp32: [0-9]* samples/s, a step of 64 in [0-9.]* ms; the convolutions' direct FLOP at their kernels' peaks take [0-9.]* ms ([0-9]*%)$" "$out" &&
        pass "report: $(grep "^# goal dtrain-$g " "$out" | cut -c3-)" || fail "cnn-throughput.sh: no goal line for '$g'"
    done
    IFS=$ifs
  fi
else
  echo "skip: $fm"
fi
rm -rf "$T"
finish
