#!/usr/bin/env bash
# fashion-mnist.sh: the main job, from a fresh Debian 12 machine to a trained
# model: install what is missing, build, convert Fashion-MNIST (Debian's
# dataset-fashion-mnist) to HDF5, and train the reference CNN on 2 ranks.
#
#   jobscripts/local/fashion-mnist.sh [NP] [dtrain options...]
#   e.g. jobscripts/local/fashion-mnist.sh 2 --epochs 10
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
"$top/jobscripts/local/setup.sh"
cd "$top"

np=${1:-2}
[[ $# -gt 0 ]] && shift
mkdir -p data
[[ -f data/fashion-mnist.h5 ]] || build/dtrain-prep data/fashion-mnist.h5

launcher=(mpiexec.openmpi --bind-to core)
# Open MPI refuses to run as root unless told, and refuses more ranks than cores.
[[ $(id -u) == 0 ]] && launcher+=(--allow-run-as-root)
(( np > $(nproc) )) && launcher+=(--oversubscribe)
set -x
"${launcher[@]}" -np "$np" build/dtrain data/fashion-mnist.h5 "$@"
