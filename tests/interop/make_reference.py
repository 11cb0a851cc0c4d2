#!/usr/bin/env python3
"""make_reference.py: a reference Keras .weights.h5 and the same weights as
dtrain's flat block.

  make_reference.py --weights OUT.weights.h5 --flat OUT.f32 [--model cnn|mlp]
                    [--quiet]

Builds the seed model with Keras, sets every weight to a deterministic
pattern, saves OUT.weights.h5 with model.save_weights and writes the same
weights as raw little-endian float32 in dtrain's flat-block order: for each
weighted layer in order, the kernel (conv HWIO (kh,kw,cin,cout), dense
(in,units), row-major) then the bias (units). A C test can compare dtrain's
exporter against OUT.weights.h5 dataset by dataset, load OUT.f32 as dtrain's
parameters, or feed an export to keras_weights.py --compare-flat OUT.f32.

Pattern, over the flat index g of the whole block (float64, then rounded
to float32):  w[g] = amp * sin(0.7 * g + 0.3),  amp = 2/sqrt(fan_in) for a
kernel (fan_in = kh*kw*cin or in), 0.05 for a bias. Neighbouring values
differ, so a transposed or shifted tensor does not match.

Prints one line per tensor (its dataset path in the .weights.h5 file, shape,
flat offset and count) and a TOTAL line; then checks its own output: the
file holds exactly those datasets, equal to the flat slices, and loads back
into a fresh model.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_model  # noqa: E402

PROG = "make_reference"


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def pattern(model):
    import numpy as np

    values, g = [], 0
    for path, v in seed_model.flat_tensors(model):
        shape = tuple(v.shape)
        n = int(np.prod(shape))
        if len(shape) > 1:
            amp = 2.0 / np.sqrt(float(np.prod(shape[:-1])))
        else:
            amp = 0.05
        w = amp * np.sin(0.7 * np.arange(g, g + n, dtype=np.float64) + 0.3)
        values.append((path, v, w.astype(np.float32).reshape(shape), g))
        g += n
    return values, g


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="output, must end in .weights.h5")
    ap.add_argument("--flat", required=True, help="output: raw <f4 in dtrain's flat order")
    ap.add_argument("--model", default="cnn", choices=seed_model.MODELS)
    ap.add_argument("--quiet", action="store_true", help="print only the TOTAL line")
    a = ap.parse_args()
    if not a.weights.endswith(".weights.h5"):
        die(f"--weights: Keras only writes '*.weights.h5' names, found '{a.weights}'")

    import h5py
    import numpy as np
    import keras

    model = seed_model.build(a.model)
    values, total = pattern(model)
    for path, v, w, g in values:
        v.assign(w)
    model.save_weights(a.weights)
    flat = np.concatenate([w.ravel() for _, _, w, _ in values]).astype("<f4")
    flat.tofile(a.flat)

    for path, v, w, g in values:
        if not a.quiet:
            print(f"TENSOR {path} shape={'x'.join(map(str, w.shape))} offset={g} count={w.size}")
    print(f"TOTAL {total} floats, {total * 4} bytes; keras {keras.__version__} "
          f"({keras.backend.backend()}), model {a.model}")

    # Self-check 1: the datasets Keras wrote are exactly the flat block's.
    want = {path: w for path, _, w, _ in values}
    found = {}
    with h5py.File(a.weights, "r") as f:
        f.visititems(lambda name, obj: found.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset) else None)
    if set(found) != set(want):
        die(f"{a.weights}: datasets {sorted(found)} differ from the expected {sorted(want)}")
    for path, w in want.items():
        d = found[path]
        if d.dtype != np.dtype("<f4") or d.shape != w.shape or not np.array_equal(d, w):
            die(f"{a.weights}: {path} is {d.dtype} {d.shape}, not the flat slice {w.shape}")

    # Self-check 2: a second model (other layer names) loads it back exactly.
    again = seed_model.build(a.model)
    again.load_weights(a.weights)
    got = np.concatenate([np.asarray(v.numpy(), "<f4").ravel()
                          for _, v in seed_model.flat_tensors(again)])
    if not np.array_equal(got.view("<u4"), flat.view("<u4")):
        die("load_weights of the reference file does not give back the flat block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
