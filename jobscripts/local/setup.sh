#!/usr/bin/env bash
# setup.sh: install what dtrain needs on Debian 12 (only what is missing),
# then build it in build/ (Open MPI); with --mpich, in build-mpich/ too; with
# --cuda, also in build-cuda/ with the CUDA backend (./configure --with-cuda),
# when a CUDA toolkit is found (nvcc on PATH or /usr/local/cuda; a GPU is not
# needed to build); with --cluster, also what the cross-host tests' cluster
# runs on (tests/cluster/: Slurm's daemons and client, munge, iproute2).
# build-mpich/ and build-cuda/ are configured --disable-shared: their
# programs link libdtrain statically, and libtool compiles each file once,
# not twice (40% less time); install libdtrain.so from build/, or configure a
# tree of your own for another MPI or CUDA.
# Idempotent: a second run installs nothing and rebuilds only what changed.
#
#   jobscripts/local/setup.sh [--mpich] [--cuda] [--cluster]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

with_mpich=no with_cuda=no with_cluster=no
for arg in "$@"; do
  case $arg in
    --mpich) with_mpich=yes ;;
    --cuda) with_cuda=yes ;;
    --cluster) with_cluster=yes ;;
    *) echo "setup.sh: unknown option '$arg' (expected --mpich, --cuda, --cluster)" >&2; exit 2 ;;
  esac
done

pkgs=(build-essential autoconf automake libtool pkg-config zlib1g-dev
      openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
      libdnnl-dev libopenblas-dev check dataset-fashion-mnist
      python3-venv   # python3-venv: tests/interop's Keras venv
      python3-h5py   # python3-h5py: tests/bad-inputs writes its malformed HDF5 files with it
      python3-torch  # python3-torch: tests/interop_hf.sh's transformers runs on it (PyPI's torch brings ~3 GB of CUDA)
      valgrind       # valgrind: tests/valgrind.sh (make check-valgrind), a stage of tests/run-all.sh
      gnuplot-nox    # gnuplot-nox: jobscripts/scaling-study's plots (PNG, SVG)
      bible-kjv)     # bible-kjv (with bible-kjv-text): real text, the transformer's example and tests
[[ $with_mpich == yes ]] && pkgs+=(mpich libmpich-dev libhdf5-mpich-dev)
# tests/cluster/: hosts in network namespaces (ip, nsenter), a real Slurm on them.
# gdb: a job that hangs there has its ranks' stacks printed (tests/cluster/run.sh).
[[ $with_cluster == yes ]] && pkgs+=(iproute2 util-linux munge slurmctld slurmd slurm-client gdb)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
jobs=$(nproc)

[[ -x configure ]] || ./autogen.sh

build() { # build DIR CC [CONFIGURE-ARGS...]
  local dir=$1 cc=$2
  shift 2
  mkdir -p "$dir"
  if [[ ! -f $dir/config.status ]]; then
    (cd "$dir" && CC=$cc ../configure --enable-werror "$@")
  fi
  make -C "$dir" -j"$jobs"
}
# Installing MPICH can make it the system's default mpicc; name each wrapper.
build build mpicc.openmpi
[[ $with_mpich == yes ]] && build build-mpich mpicc.mpich --disable-shared
if [[ $with_cuda == yes ]]; then
  cuda=
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then cuda=/usr/local/cuda
  elif command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  fi
  if [[ -n $cuda ]]; then
    build build-cuda mpicc.openmpi --with-cuda="$cuda" --disable-shared
  else
    echo "== no CUDA toolkit (nvcc) found: the CUDA build (build-cuda/) is skipped"
  fi
fi
echo "== dtrain built in $top/build"
