#!/bin/sh
# setup-hf.sh [VENV]: make (once) a Python venv with Hugging Face
# transformers for the GPT-2 export check (hf_gpt2.py, tests/interop_hf.sh).
#
# VENV defaults to $TOP_BUILDDIR/.venv-hf, else ./.venv-hf. PyTorch is
# Debian's (python3-torch, 1.13 on the CPU, with python3-numpy): PyPI's torch
# wheel brings about 3 GB of CUDA wheels with it. So the venv is made from
# /usr/bin/python3 (override: PYTHON3=...) with --system-site-packages,
# which sees Debian's torch and numpy, and gets from PyPI only transformers
# and safetensors with what they need, pinned: transformers 4.47.1 is the
# newest whose torch requirement admits 1.13 (4.48.0 asks for torch >= 2.0).
#
# Debian packages needed: python3 (>= 3.9), python3-venv, python3-torch
# (jobscripts/local/setup.sh installs them), python3-h5py for hf_gpt2.py's
# reading of the token file. Needs PyPI (about 20 MB of wheels) unless pip's
# cache holds them; about 15 s.
#
# Idempotent: a venv that already imports the pinned transformers is left
# as is (about 2 s). Concurrent runs serialise (flock on VENV's parent).
#
# Exit status: 0 ready; 1 usage; 2 prerequisites missing (no torch, no
# venv/ensurepip); 3 pip install failed (offline?); 4 installed, but it
# does not import. The reason goes to stderr; pip's output is kept in
# VENV/setup-hf.log.
set -u

TRANSFORMERS_VERSION=4.47.1
# What pip resolved for transformers==4.47.1 safetensors on CPython 3.11
# (x86_64) beside Debian 12's packages, pinned so every run installs the same.
PINS="transformers==$TRANSFORMERS_VERSION safetensors==0.8.0 tokenizers==0.21.4 huggingface-hub==0.36.2
hf-xet==1.8.0 filelock==4.3.1 fsspec==2026.9.0 packaging==26.4 regex==2026.11.19 tqdm==4.70.1"

me=setup-hf
die() { code=$1; shift; echo "$me: error: $*" >&2; exit "$code"; }

case $# in
  0) venv=${TOP_BUILDDIR:-.}/.venv-hf ;;
  1) venv=$1 ;;
  *) echo "usage: $0 [VENV]" >&2; exit 1 ;;
esac
case $venv in -*) echo "usage: $0 [VENV]" >&2; exit 1 ;; esac
py3=${PYTHON3:-/usr/bin/python3}

# "Ready": the pinned transformers builds a GPT-2 on Debian's torch, and
# safetensors and h5py import.
ready() {
  "$venv/bin/python" -c "
import transformers, torch, safetensors.torch, h5py, numpy
assert transformers.__version__ == '$TRANSFORMERS_VERSION', 'transformers ' + transformers.__version__
from transformers import GPT2Config, GPT2LMHeadModel
m = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=4, n_layer=1, n_head=1))
assert m(torch.tensor([[1, 2]])).logits.shape == (1, 2, 8)
" 2>"$venv/.check.err"
}

if [ -x "$venv/bin/python" ] && ready; then
  rm -f "$venv/.check.err"
  echo "$me: $venv: transformers $TRANSFORMERS_VERSION is ready"
  exit 0
fi

[ -x "$py3" ] || die 2 "$py3 not found (Debian: apt-get install python3 python3-venv)"
"$py3" -c 'import venv, ensurepip' 2>/dev/null ||
  die 2 "$py3 has no venv/ensurepip module (Debian: apt-get install python3-venv)"
"$py3" -c 'import torch' 2>/dev/null || die 2 "$py3 cannot import torch (Debian: apt-get install python3-torch)"
"$py3" -c 'import h5py' 2>/dev/null || die 2 "$py3 cannot import h5py (Debian: apt-get install python3-h5py)"

mkdir -p "$(dirname "$venv")" || die 2 "cannot create $(dirname "$venv")"
if command -v flock >/dev/null 2>&1; then
  exec 9<"$(dirname "$venv")" || die 2 "cannot open $(dirname "$venv")"
  flock 9
  if [ -x "$venv/bin/python" ] && ready; then
    rm -f "$venv/.check.err"
    echo "$me: $venv: transformers $TRANSFORMERS_VERSION is ready"
    exit 0
  fi
fi

start=$(date +%s)
"$py3" -m venv --clear --system-site-packages "$venv" ||
  die 2 "'$py3 -m venv $venv' failed (Debian: apt-get install python3-venv)"
log=$venv/setup-hf.log
echo "$me: installing transformers $TRANSFORMERS_VERSION + safetensors into $venv (about 20 MB from PyPI)..."
# shellcheck disable=SC2086
if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --no-input --only-binary=:all: \
     $PINS >"$log" 2>&1; then
  tail -n 5 "$log" >&2
  die 3 "pip install failed (no network access to PyPI? see $log)"
fi
if ! ready; then
  cat "$venv/.check.err" >&2
  die 4 "transformers $TRANSFORMERS_VERSION is installed in $venv but does not build a GPT-2 on $py3's torch"
fi
rm -f "$venv/.check.err"
echo "$me: $venv: transformers $TRANSFORMERS_VERSION is ready ($(($(date +%s) - start)) s)"
exit 0
