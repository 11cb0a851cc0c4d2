#!/bin/sh
# gen-seeds.sh: remake the HDF5 seeds of tests/fuzz/corpus (dataset, checkpoint).
#
#   tests/fuzz/gen-seeds.sh BUILD_DIR     (a normal build: dtrain, dtrain-prep,
#                                          tests/mkfixture; MPIEXEC if needed)
#
# Tiny shapes keep each file under 16 KB: mutations then hit the metadata
# that the parsers read rather than pixel bytes. The checkpoints are of the
# model in checkpoint.cfg, whose layer table fuzz_checkpoint.c expects.
# The IDX, model-file and command-line seeds are small text or bytes,
# written by hand.
set -eu
b=${1:?usage: gen-seeds.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
d=$here/corpus/dataset c=$here/corpus/checkpoint
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mk=$b/tests/mkfixture
$mk good "$d/good-4.h5" 4
$mk small-images "$d/small-8x8.h5" 4
$mk no-train-images "$d/no-train-images.h5" 4
$mk length-mismatch "$d/length-mismatch.h5" 4
$mk bad-label "$d/bad-label.h5" 6
$mk wrong-rank "$d/wrong-rank.h5" 4
$mk float-images "$d/float-images.h5" 2
$mk no-num-classes "$d/no-num-classes.h5" 4
$mk not-hdf5 "$d/not-hdf5.h5"
"$b/dtrain-prep" --synthetic 2x2x3:3:5:2 "$d/synth-2x2x3.h5" >/dev/null

train() { # DIR ARGS...: one rank, synthetic 2x2x1 data, 2 classes
    out=$1; shift
    ${MPIEXEC:-} "$b/dtrain" --synthetic 2x2x1:2:8 --model "$here/checkpoint.cfg" \
        --checkpoint-dir "$out" -q "$@"
}
train "$tmp/adam" --epochs 1 -b 4
cp "$tmp/adam/ckpt-000001-00000000.h5" "$c/adam-epoch1.h5"
train "$tmp/mid" --epochs 2 -b 2 --checkpoint-every 3step --keep 0
cp "$tmp/mid/ckpt-000000-00000003.h5" "$c/adam-midepoch.h5"
train "$tmp/sgd" --epochs 1 -b 4 --optimizer sgd --momentum 0.9
cp "$tmp/sgd/ckpt-000001-00000000.h5" "$c/sgd-momentum.h5"
# near-misses: cut short, and one byte of the data flipped (checksum)
head -c 8000 "$c/adam-epoch1.h5" >"$c/truncated.h5"
python3 - "$c/adam-epoch1.h5" "$c/flipped-byte.h5" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[len(b) - 100] ^= 0xff
open(sys.argv[2], 'wb').write(b)
PY
