#!/bin/sh
# setup-keras.sh [VENV]: make (once) a Python venv with Keras 3 for the
# interop checks (keras_weights.py, make_reference.py).
#
# VENV defaults to $TOP_BUILDDIR/.venv-keras, else ./.venv-keras. The venv is
# made from /usr/bin/python3 (override: PYTHON3=...) with
# --system-site-packages, and gets pinned wheels from PyPI: Keras 3.15.1 with
# the jax backend on the CPU (KERAS_BACKEND=jax; Keras's "numpy" backend
# imports jax too, so it would save nothing), and the exact versions pip
# resolved for them. jax 0.10 and ml-dtypes 0.6 need numpy >= 2, and pip does
# not see Debian's h5py (its dist name is "h5py.-debian-h5py-serial"), so the
# venv holds its own numpy and h5py wheels, which shadow Debian's: the venv
# does not depend on Debian's numpy or h5py.
#
# Debian packages needed: python3 (>= 3.11: Keras 3.15 requires it),
# python3-venv (venv + ensurepip). python3-numpy and python3-h5py are not
# needed by the venv (see above); the other Python tools of this tree use them.
# Needs network access to PyPI (about 160 MB of wheels, 690 MB installed) unless pip's cache
# already holds them.
#
# Idempotent: a venv that already imports the pinned Keras is left as is
# (a second run takes about 2 s). Concurrent runs serialise (flock on VENV's
# parent directory).
#
# Exit status: 0 ready; 1 usage; 2 prerequisites missing (python3 too old, no
# venv/ensurepip); 3 pip install failed (offline?); 4 installed, but Keras
# does not import. The reason goes to stderr; pip's output is kept in
# VENV/setup-keras.log.
set -u

KERAS_VERSION=3.15.1
# What pip resolved for keras==3.15.1 jax[cpu]==0.10.2 on CPython 3.11
# (x86_64), pinned so that every run installs the same thing.
PINS="keras==$KERAS_VERSION jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 h5py==3.16.0 scipy==1.17.1
ml-dtypes==0.6.0 opt-einsum==3.4.0 absl-py==2.5.1 namex==0.1.0 optree==0.20.0 packaging==26.4
rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 typing-extensions==4.16.0"

me=setup-keras
die() { code=$1; shift; echo "$me: error: $*" >&2; exit "$code"; }

case $# in
  0) venv=${TOP_BUILDDIR:-.}/.venv-keras ;;
  1) venv=$1 ;;
  *) echo "usage: $0 [VENV]" >&2; exit 1 ;;
esac
case $venv in -*) echo "usage: $0 [VENV]" >&2; exit 1 ;; esac
py3=${PYTHON3:-/usr/bin/python3}

# The check that decides "ready": the pinned Keras imports on the jax backend
# and jax computes on the CPU.
ready() {
  KERAS_BACKEND=jax JAX_PLATFORMS=cpu TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/python" -c "
import sys, keras
assert keras.__version__ == '$KERAS_VERSION', 'keras ' + keras.__version__ + ', expected $KERAS_VERSION'
assert keras.backend.backend() == 'jax', 'backend ' + keras.backend.backend()
import jax.numpy as jnp, numpy, h5py
assert float(jnp.arange(4.0).sum()) == 6.0
" 2>"$venv/.check.err"
}

if [ -x "$venv/bin/python" ] && ready; then
  rm -f "$venv/.check.err"
  echo "$me: $venv: keras $KERAS_VERSION (jax backend) is ready"
  exit 0
fi

[ -x "$py3" ] || die 2 "$py3 not found (Debian: apt-get install python3 python3-venv)"
"$py3" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die 2 "$py3 is $("$py3" -c 'import sys; print(sys.version.split()[0])'); Keras $KERAS_VERSION needs Python >= 3.11"
"$py3" -c 'import venv, ensurepip' 2>/dev/null ||
  die 2 "$py3 has no venv/ensurepip module (Debian: apt-get install python3-venv)"

mkdir -p "$(dirname "$venv")" || die 2 "cannot create $(dirname "$venv")"
# One setup at a time (make -j check may start several tests that need it):
# lock the parent directory, which leaves no lock file behind.
if command -v flock >/dev/null 2>&1; then
  exec 9<"$(dirname "$venv")" || die 2 "cannot open $(dirname "$venv")"
  flock 9
  # Another run may have finished it while we waited.
  if [ -x "$venv/bin/python" ] && ready; then
    rm -f "$venv/.check.err"
    echo "$me: $venv: keras $KERAS_VERSION (jax backend) is ready"
    exit 0
  fi
fi

start=$(date +%s)
# A venv that exists but does not pass the check is made again from scratch.
"$py3" -m venv --clear --system-site-packages "$venv" ||
  die 2 "'$py3 -m venv $venv' failed (Debian: apt-get install python3-venv)"
log=$venv/setup-keras.log
echo "$me: installing keras $KERAS_VERSION + jax into $venv (about 160 MB from PyPI)..."
# shellcheck disable=SC2086
if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --no-input --only-binary=:all: \
     $PINS >"$log" 2>&1; then
  tail -n 5 "$log" >&2
  die 3 "pip install failed (no network access to PyPI? see $log)"
fi
if ! ready; then
  cat "$venv/.check.err" >&2
  die 4 "keras $KERAS_VERSION is installed in $venv but does not import with the jax backend"
fi
rm -f "$venv/.check.err"
echo "$me: $venv: keras $KERAS_VERSION (jax backend) is ready ($(($(date +%s) - start)) s)"
exit 0
