#!/bin/sh
# interop.sh: dtrain's --export-keras file loads into the seed model in real
# Keras 3 (tests/interop/: Keras 3.15.1 on jax, in a venv made once from
# PyPI), and Keras computes the same test loss and accuracy from it as dtrain
# did in its last validation: for the CNN at 2 ranks and the MLP at 1.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/interop.$$
mkdir -p "$T"
venv=${KERAS_VENV:-$TOP_BUILDDIR/.venv-keras}
if ! sh "$TOP_SRCDIR/tests/interop/setup-keras.sh" "$venv" >"$T/setup.log" 2>&1; then
  echo "SKIP: Keras could not be installed into $venv (no PyPI?):"; tail -3 "$T/setup.log"
  rm -rf "$T"; exit 77
fi
py=$venv/bin/python

check() { # check MODEL NP
  model=$1 np=$2
  w=$T/$model.weights.h5
  run_np "$np" "$fm" --model "$model" --epochs 1 --batch-size 32 --export-keras "$w"
  [ "$rc" = 0 ] && [ -f "$w" ] || { fail "$model: dtrain --export-keras: rc=$rc"; cat "$err" >&2; return; }
  dl=$(sed -n 's/.*val_loss: \([0-9.]*\) - val_accuracy: \([0-9.]*\).*/\1/p' "$out" | tail -1)
  da=$(sed -n 's/.*val_loss: \([0-9.]*\) - val_accuracy: \([0-9.]*\).*/\2/p' "$out" | tail -1)
  r=$("$py" "$TOP_SRCDIR/tests/interop/keras_weights.py" --weights "$w" --data "$fm" --model "$model" 2>"$T/py.err")
  kl=$(echo "$r" | sed -n 's/^RESULT loss=\([0-9.]*\) accuracy=\([0-9.]*\).*/\1/p')
  ka=$(echo "$r" | sed -n 's/^RESULT loss=\([0-9.]*\) accuracy=\([0-9.]*\).*/\2/p')
  if [ -n "$kl" ] && awk -v a="$dl" -v b="$kl" -v c="$da" -v d="$ka" \
       'BEGIN { x = a - b; y = c - d; if (x < 0) x = -x; if (y < 0) y = -y; exit !(x <= 1.5e-4 && y <= 1.5e-3) }'; then
    pass "$model: Keras loads the export; test loss $kl / accuracy $ka (dtrain: $dl / $da)"
  else
    fail "$model: Keras gives loss '$kl' accuracy '$ka', dtrain $dl $da"; cat "$T/py.err" >&2
  fi
}
check cnn 2
check mlp 1
expect_fail 2 "--export-keras: Keras 3 loads weights only from a file named \*.weights.h5, found 'w.h5'" 1 "$fm" --export-keras w.h5
rm -rf "$T"
finish
