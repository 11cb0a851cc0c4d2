#!/usr/bin/env python3
"""keras_weights.py: load a .weights.h5 file into the seed Keras model and
evaluate it on dtrain's test split.

  keras_weights.py --weights W.weights.h5 --data DATA.h5 [--model cnn|mlp]
                   [--limit N] [--batch B] [--compare-flat F.f32]
                   [--dump-flat F.f32]

Builds the seed model (seed_model.py), calls model.load_weights(W), reads
DATA.h5's /test/images (uint8 [N,28,28,1]) and /test/labels, predicts the
first N images (all by default) scaled by 1/255 and prints

  RESULT loss=<mean sparse softmax cross-entropy of the logits> accuracy=<> n=<N>

The loss is computed here in float64 from the float32 logits, not by
model.evaluate. --compare-flat checks that the loaded weights, in dtrain's
flat order, are bit-for-bit those of a raw little-endian float32 file (as
make_reference.py writes); --dump-flat writes them so.

Run it with the venv setup-keras.sh makes. Exit status: 0 ok; 1 usage, data
or environment error; 2 load_weights raised (Keras's message is printed);
3 --compare-flat found a difference.
"""
import argparse
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_model  # noqa: E402  (sets KERAS_BACKEND before keras loads)

PROG = "keras_weights"


def die(code, msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 1: 2 means load_weights failed
        self.print_usage(sys.stderr)
        die(1, message)


def read_test(path, limit):
    import h5py
    import numpy as np

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        die(1, f"{path}: cannot open as HDF5: {e}")
    with f:
        for name in ("test/images", "test/labels"):
            if name not in f:
                die(1, f"{path}: no /{name} dataset")
        img, lab = f["test/images"], f["test/labels"]
        total = img.shape[0]
        if lab.shape[0] != total:
            die(1, f"{path}: {total} test images but {lab.shape[0]} labels")
        n = total if limit is None else min(limit, total)
        x = np.asarray(img[:n])
        y = np.asarray(lab[:n]).astype(np.int64).reshape(n)
    if x.ndim == 3:
        x = x[..., None]
    if x.shape[1:] != (28, 28, 1):
        die(1, f"{path}: /test/images is {x.shape}, expected [N,28,28,1]")
    return (x.astype(np.float32) / np.float32(255.0)), y


def flat_weights(model):
    import numpy as np

    return np.concatenate(
        [np.asarray(v.numpy(), dtype="<f4").ravel() for _, v in seed_model.flat_tensors(model)]
    )


def main():
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="a Keras 3 .weights.h5 file")
    ap.add_argument("--data", required=True, help="dtrain HDF5 data (/test/images, /test/labels)")
    ap.add_argument("--model", default="cnn", choices=seed_model.MODELS)
    ap.add_argument("--limit", type=int, default=None, help="evaluate the first N test images")
    ap.add_argument("--batch", type=int, default=1000, help="prediction batch size")
    ap.add_argument("--compare-flat", metavar="F32", help="raw <f4 weights in dtrain's flat order to match")
    ap.add_argument("--dump-flat", metavar="F32", help="write the loaded weights so")
    a = ap.parse_args()
    if a.limit is not None and a.limit < 1:
        die(1, f"--limit: expected N >= 1, found {a.limit}")
    if a.batch < 1:
        die(1, f"--batch: expected B >= 1, found {a.batch}")
    for p in (a.weights, a.data):
        if not os.path.isfile(p):
            die(1, f"{p}: no such file")

    try:
        import numpy as np
        import keras
    except Exception as e:  # noqa: BLE001
        die(1, f"cannot import keras ({type(e).__name__}: {e}); make the venv with setup-keras.sh")

    model = seed_model.build(a.model)

    # Keras picks the format by the name: only "*.weights.h5" is read as a
    # Keras 3 weights file (a plain ".h5" would go to the legacy Keras 2 reader).
    tmpdir = None
    wpath = a.weights
    if not wpath.endswith(".weights.h5"):
        tmpdir = tempfile.mkdtemp(prefix="keras_weights.")
        wpath = os.path.join(tmpdir, "model.weights.h5")
        os.symlink(os.path.abspath(a.weights), wpath)
        print(f"{PROG}: note: {a.weights} does not end in .weights.h5; loading it through {wpath}",
              file=sys.stderr)
    try:
        model.load_weights(wpath)
    except Exception as e:  # noqa: BLE001  (Keras raises ValueError, KeyError, OSError, ...)
        msg = str(e).strip() or repr(e)
        # Keras's shape-mismatch message prints the whole target variable.
        msg = re.sub(r", value=\[.*?\]>", ", value=...>", msg, flags=re.S)
        print(f"{PROG}: error: keras {keras.__version__} ({keras.backend.backend()}) "
              f"model.load_weights({a.weights}) failed: {type(e).__name__}: {msg}", file=sys.stderr)
        sys.exit(2)
    finally:
        if tmpdir:
            os.unlink(wpath)
            os.rmdir(tmpdir)

    flat = None
    if a.compare_flat or a.dump_flat:
        flat = flat_weights(model)
    if a.dump_flat:
        flat.astype("<f4").tofile(a.dump_flat)
    if a.compare_flat:
        ref = np.fromfile(a.compare_flat, dtype="<f4")
        if ref.size != flat.size:
            print(f"{PROG}: error: {a.compare_flat} has {ref.size} floats, the {a.model} model "
                  f"{flat.size}", file=sys.stderr)
            sys.exit(3)
        diff = np.flatnonzero(ref.view("<u4") != flat.view("<u4"))
        if diff.size:
            off = 0
            for path, v in seed_model.flat_tensors(model):
                n = int(np.prod(v.shape))
                if diff[0] < off + n:
                    break
                off += n
            i = int(diff[0])
            print(f"{PROG}: error: {diff.size} of {flat.size} weights differ from {a.compare_flat}; "
                  f"first at flat index {i} ({path} element {i - off}): loaded "
                  f"{float(flat[i]):.9g}, expected {float(ref[i]):.9g}", file=sys.stderr)
            sys.exit(3)
        print(f"FLAT match n={flat.size}")

    x, y = read_test(a.data, a.limit)
    logits = np.asarray(model.predict(x, batch_size=a.batch, verbose=0), dtype=np.float64)
    if logits.shape != (len(y), 10):
        die(1, f"model gave logits of shape {logits.shape}")
    if y.min() < 0 or y.max() >= logits.shape[1]:
        die(1, f"{a.data}: labels outside [0, {logits.shape[1]})")
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    loss = float(np.mean(lse - logits[np.arange(len(y)), y]))
    acc = float(np.mean(logits.argmax(axis=1) == y))
    print(f"RESULT loss={loss:.6f} accuracy={acc:.6f} n={len(y)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
