#!/bin/sh
# setup-tensorboard.sh [VENV]: make (once) a Python venv with TensorBoard's
# event-file reader for the interop check of dtrain's event files (tb_read.py).
#
# VENV defaults to $TOP_BUILDDIR/.venv-tensorboard, else ./.venv-tensorboard.
# The venv is made from /usr/bin/python3 (override: PYTHON3=...) and gets
# pinned wheels from PyPI with --no-deps: TensorBoard 2.21.0 and the three
# modules its EventAccumulator imports (numpy, protobuf, absl-py), and nothing
# else. The reader needs no TensorFlow (it falls back on TensorBoard's own stub,
# which checks the records' CRC-32C itself), and none of TensorBoard's server
# dependencies (grpcio, werkzeug, markdown, pillow, tensorboard-data-server):
# `pip check` in this venv lists them as missing, and that is intended. The
# venv has no --system-site-packages: it needs nothing from Debian, so which
# python3-* packages a machine has cannot change what it runs.
#
# Debian packages needed: python3 (>= 3.11: numpy 2.4 requires it),
# python3-venv (venv + ensurepip). Needs network access to PyPI (about 23 MB of
# wheels, 110 MB installed; about 5 s) unless pip's cache already holds them.
#
# Idempotent: a venv that already imports the pinned TensorBoard reader is left
# as is (a second run takes well under 1 s). Concurrent runs serialise (flock on
# VENV's parent directory).
#
# Exit status: 0 ready; 1 usage; 2 prerequisites missing (python3 too old, no
# venv/ensurepip); 3 pip install failed (offline?); 4 installed, but the reader
# does not import. The reason goes to stderr; pip's output is kept in
# VENV/setup-tensorboard.log.
set -u

TB_VERSION=2.21.0
# tensorboard 2.21.0 requires protobuf >= 6.31.1, < 8; numpy and absl-py are
# the versions setup-keras.sh pins, so pip's cache serves both venvs.
PINS="tensorboard==$TB_VERSION protobuf==7.36.2 numpy==2.4.6 absl-py==2.5.1"

me=setup-tensorboard
die() { code=$1; shift; echo "$me: error: $*" >&2; exit "$code"; }

case $# in
  0) venv=${TOP_BUILDDIR:-.}/.venv-tensorboard ;;
  1) venv=$1 ;;
  *) echo "usage: $0 [VENV]" >&2; exit 1 ;;
esac
case $venv in -*) echo "usage: $0 [VENV]" >&2; exit 1 ;; esac
py3=${PYTHON3:-/usr/bin/python3}

# The check that decides "ready": the pinned TensorBoard's EventAccumulator
# imports (it pulls in the event proto, hence protobuf, numpy and absl).
ready() {
  "$venv/bin/python" -c "
from tensorboard import version
assert version.VERSION == '$TB_VERSION', 'tensorboard ' + version.VERSION + ', expected $TB_VERSION'
from tensorboard.backend.event_processing import event_accumulator
" 2>"$venv/.check.err"
}

if [ -x "$venv/bin/python" ] && ready; then
  rm -f "$venv/.check.err"
  echo "$me: $venv: tensorboard $TB_VERSION (event reader) is ready"
  exit 0
fi

[ -x "$py3" ] || die 2 "$py3 not found (Debian: apt-get install python3 python3-venv)"
"$py3" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die 2 "$py3 is $("$py3" -c 'import sys; print(sys.version.split()[0])'); numpy 2.4 needs Python >= 3.11"
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
    echo "$me: $venv: tensorboard $TB_VERSION (event reader) is ready"
    exit 0
  fi
fi

start=$(date +%s)
# A venv that exists but does not pass the check is made again from scratch.
"$py3" -m venv --clear "$venv" ||
  die 2 "'$py3 -m venv $venv' failed (Debian: apt-get install python3-venv)"
log=$venv/setup-tensorboard.log
echo "$me: installing tensorboard $TB_VERSION's event reader into $venv (about 23 MB from PyPI)..."
# shellcheck disable=SC2086
if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --no-input --only-binary=:all: \
     --no-deps $PINS >"$log" 2>&1; then
  tail -n 5 "$log" >&2
  die 3 "pip install failed (no network access to PyPI? see $log)"
fi
if ! ready; then
  cat "$venv/.check.err" >&2
  die 4 "tensorboard $TB_VERSION is installed in $venv but its event reader does not import"
fi
rm -f "$venv/.check.err"
echo "$me: $venv: tensorboard $TB_VERSION (event reader) is ready ($(($(date +%s) - start)) s)"
exit 0
