#!/bin/sh
# histograms.sh: --histogram-freq / --histograms, read back with TensorBoard.
#
# The seed CNN trains 4 epochs with --histogram-freq 2 and a checkpoint after
# every epoch; TensorBoard's two readers (tests/interop/tb_histograms.py)
# must find, for every parameter tensor, a histogram at exactly the steps of
# epochs 2 and 4 (the scalars' numbering: step = epoch - 1), whose bucket
# counts sum to the tensor's size and whose min and max are the tensor's in
# the checkpoint of the same epoch (h5py). With grads, a gradient histogram
# per tensor that is not the weights'. The same at 2 ranks under the sharded
# strategy, under fsdp and with 2 pipeline stages (no rank holds the whole
# block there: it is gathered). A tampered count is caught (the comparison can fail). The flags'
# refusals: message and exit code.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/hist.$$
rm -rf "$T"; mkdir -p "$T"
base="$fm --batch-size 32 --steps-per-epoch 10 --epochs 4 --histogram-freq 2 --keep 0"

# --- refusals ---
expect_fail 2 "--histogram-freq: writes TensorBoard histograms; it needs --logdir DIR" 2 "$fm" --histogram-freq 2
expect_fail 2 "--histograms: expected weights, grads or weights,grads, found 'biases'" 2 "$fm" --logdir "$T/x" \
  --histogram-freq 1 --histograms biases
expect_fail 2 "--histograms: chooses what --histogram-freq N shows; give --histogram-freq N" 1 "$fm" --logdir "$T/x" \
  --histograms grads
expect_fail 2 "--histogram-freq: expected an integer" 1 "$fm" --logdir "$T/x" --histogram-freq two

venv=${TB_VENV:-$TOP_BUILDDIR/.venv-tensorboard}
if ! sh "$TOP_SRCDIR/tests/interop/setup-tensorboard.sh" "$venv" >"$T/tbsetup.log" 2>&1; then
  echo "SKIP (part): TensorBoard's reader could not be installed (no PyPI?): $(tail -1 "$T/tbsetup.log")"
  rm -rf "$T"; finish
fi
if ! /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  echo "SKIP (part): no h5py for /usr/bin/python3 (Debian: python3-h5py)"; rm -rf "$T"; finish
fi

# compare RUN HISTO_TXT CKPT_DIR WANT: every parameter tensor of the
# checkpoints of epochs 2 and 4 against the histograms; WANT: weights or
# weights,grads. Prints what differs; exit 0 when all agree.
compare() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys, h5py, numpy as np
txt, ckdir, want = sys.argv[1], sys.argv[2], sys.argv[3]
h = {}
for line in open(txt):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    h[(f["tag"], int(f["step"]))] = f
bad, seen = [], set()
for epoch in (2, 4):
    step = epoch - 1
    with h5py.File("%s/ckpt-%06d-00000000.h5" % (ckdir, epoch), "r") as ck:
        for layer in ck["model"]:
            for var in ck["model"][layer]:
                x = np.asarray(ck["model"][layer][var], dtype=np.float32)
                tag = "%s/%s/histogram" % (layer, var)
                g = h.get((tag, step))
                seen.add((tag, step))
                if g is None:
                    bad.append("no histogram %s at step %d" % (tag, step)); continue
                if not (int(g["num"]) == x.size == int(g["counts"]) == int(g["rowcounts"])):
                    bad.append("%s step %d: num %s counts %s rowcounts %s, the tensor has %d values"
                               % (tag, step, g["num"], g["counts"], g["rowcounts"], x.size))
                if float(g["min"]) != float(x.min()) or float(g["max"]) != float(x.max()):
                    bad.append("%s step %d: min/max %s %s, the checkpoint's %r %r"
                               % (tag, step, g["min"], g["max"], float(x.min()), float(x.max())))
                if "grads" in want:
                    d = h.get(("%s/%s_grad/histogram" % (layer, var), step))
                    seen.add(("%s/%s_grad/histogram" % (layer, var), step))
                    if d is None or int(d["num"]) != x.size or int(d["counts"]) != x.size:
                        bad.append("%s step %d: no gradient histogram of %d values" % (tag, step, x.size))
                    elif (d["min"], d["max"], d["sum"]) == (g["min"], g["max"], g["sum"]):
                        bad.append("%s step %d: the gradient's histogram is the weights'" % (tag, step))
extra = sorted(set(h) - seen)
if extra: bad.append("histograms no checkpoint tensor explains (other steps?): %s" % extra[:4])
if len(seen) < 8: bad.append("only %d (tag, step) pairs" % len(seen))
print("\n".join(bad) if bad else "%d histograms agree" % len(seen))
sys.exit(1 if bad else 0)
PY
}

# check NP NAME EXTRA...: one run and its comparison.
check() {
  np=$1; name=$2; want=$3; shift 3
  run_np "$np" $base --logdir "$T/$name" --checkpoint-dir "$T/$name.ck" --histograms "$want" "$@"
  if [ "$rc" != 0 ]; then fail "$name: dtrain exit $rc"; cat "$err" >&2; return; fi
  if ! "$venv/bin/python" "$TOP_SRCDIR/tests/interop/tb_histograms.py" "$T/$name/train" >"$T/$name.txt" 2>&1; then
    fail "$name: tb_histograms.py"; cat "$T/$name.txt" >&2; return
  fi
  # the scalars keep their numbering (steps 0-3) beside the histograms (1, 3)
  "$venv/bin/python" "$TOP_SRCDIR/tests/interop/tb_read.py" "$T/$name" >"$T/$name.sc" 2>&1
  steps=$(grep '^SCALAR run=train tag=epoch_loss ' "$T/$name.sc" | sed 's/.* step=\([0-9]*\) .*/\1/' | tr '\n' ' ')
  [ "$steps" = "0 1 2 3 " ] || fail "$name: epoch_loss scalars at steps '$steps', expected 0 1 2 3"
  if compare "$T/$name.txt" "$T/$name.ck" "$want" >"$T/$name.cmp" 2>&1; then
    pass "$name (np=$np${*:+ }$*): $(cat "$T/$name.cmp") with the checkpoints of epochs 2 and 4, TensorBoard's two readers"
  else
    fail "$name: histograms vs checkpoints"; cat "$T/$name.cmp" >&2
  fi
}

check 1 cnn weights,grads
if [ -f "$T/cnn.txt" ]; then
  # negative control: one count off by one, and one min, are noticed
  sed '1s/ counts=\([0-9]*\)/ counts=1\1/' "$T/cnn.txt" >"$T/bad1.txt"
  sed '2s/ min=-*0\.\([0-9]\)/ min=-0.9\1/' "$T/cnn.txt" >"$T/bad2.txt"
  if ! compare "$T/bad1.txt" "$T/cnn.ck" weights,grads >/dev/null && ! compare "$T/bad2.txt" "$T/cnn.ck" weights,grads >/dev/null &&
     ! cmp -s "$T/bad2.txt" "$T/cnn.txt"; then
    pass "a tampered bucket count and a tampered min are caught"
  else
    fail "the comparison did not notice a tampered histogram"
  fi
fi
check 1 weightsonly weights
grep -q '_grad/' "$T/weightsonly.txt" 2>/dev/null && fail "--histograms weights wrote gradient histograms"
check 2 sharded weights,grads --strategy sharded
# The layouts with no whole block on any rank: gathered for the histograms.
check 2 fsdp weights,grads --strategy fsdp --bucket-mb 0.1
check 2 pipeline weights,grads --pipeline-stages 2 --micro-batches 4

rm -rf "$T"
finish
