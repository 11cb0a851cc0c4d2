#!/usr/bin/env python3
"""probe_layout.py: what the installed Keras's load_weights accepts.

  probe_layout.py [--keep DIR]

Writes variants of the seed CNN's .weights.h5 layout with h5py (as a C
writer would) and loads each into a fresh seed model, checking the values.
Prints one line per variant: OK, FAIL (Keras's message) or WRONG (loaded,
but other values). Exit status 0 when every variant marked "must load"
loads exactly and every "must fail" fails; 1 otherwise. Variants marked
"varies" are reported only: they depend on the Keras version (results of
3.0.5, 3.8.0 and 3.15.1 are in the comments).

"KL" below is the Keras-like layout that README.md specifies for
dtrain --export-keras: /vars (attr name), /layers/<g>/vars for all eight
layers (attr name), datasets 0 (kernel) and 1 (bias) in the weighted ones.
"""
import argparse
import os
import shutil
import sys
import tempfile
import warnings

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_model  # noqa: E402

SH = {"conv2d": [(3, 3, 1, 32), (32,)], "conv2d_1": [(3, 3, 32, 64), (64,)],
      "dense": [(1600, 128), (128,)], "dense_1": [(128, 10), (10,)]}
EMPTY = ["max_pooling2d", "max_pooling2d_1", "flatten", "dropout"]
GLOBAL = {"conv2d_2": "conv2d", "conv2d_3": "conv2d_1", "dense_2": "dense", "dense_3": "dense_1"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", metavar="DIR", help="write the variants here and keep them")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import h5py
    import numpy as np
    import keras

    rng = np.random.default_rng(0)
    ref = {k: [rng.standard_normal(s).astype(np.float32) for s in v] for k, v in SH.items()}

    def write(path, groups=tuple(SH), attrs=True, empty=True, rootvars=True, dtype="<f4",
              chunks=None, compression=None, libver=None, edit=None):
        kw = {"libver": libver} if libver else {}
        with h5py.File(path, "w", **kw) as f:
            for g in groups:
                v = f.create_group(f"layers/{g}/vars")
                if attrs:
                    v.attrs["name"] = g
                for i, w in enumerate(ref[GLOBAL.get(g, g)]):
                    v.create_dataset(str(i), data=w.astype(dtype), chunks=chunks,
                                     compression=compression)
            if empty:
                for g in EMPTY:
                    v = f.create_group(f"layers/{g}/vars")
                    if attrs:
                        v.attrs["name"] = g
            if rootvars:
                v = f.create_group("vars")
                if attrs:
                    v.attrs["name"] = "sequential"
            if edit:
                edit(f)

    def check(path, compile_first=False):
        m = seed_model.build("cnn")
        if compile_first:
            m.compile(optimizer="adam", loss="mse")
        try:
            m.load_weights(path)
        except Exception as e:  # noqa: BLE001
            return "FAIL", f"{type(e).__name__}: " + " ".join(str(e).split())[:160]
        layers = {"conv2d": m.layers[0], "conv2d_1": m.layers[2], "dense": m.layers[5],
                  "dense_1": m.layers[7]}
        for k, layer in layers.items():
            for got, want in zip(layer.get_weights(), ref[k]):
                if got.shape != want.shape or not np.array_equal(got, want):
                    return "WRONG", k
        return "OK", ""

    def meta(f):
        f.attrs["producer"] = "dtrain"
        g = f.create_group("dtrain")
        g.attrs["epochs"] = 3
        g.create_dataset("loss", data=np.zeros(3))

    def optimizer(f):
        f.create_group("optimizer/vars").create_dataset("0", data=np.int64(7))

    def extra_ds(f):
        f["layers/dense/vars"].create_dataset("2", data=np.zeros(3, np.float32))

    def transpose(f):
        del f["layers/dense/vars/0"]
        f["layers/dense/vars"].create_dataset("0", data=ref["dense"][0].T.copy())

    def rename(f):
        f["layers/dense/vars"].move("0", "kernel")
        f["layers/dense/vars"].move("1", "bias")

    def fixed_attrs(f):
        for g in list(SH) + EMPTY:
            f[f"layers/{g}/vars"].attrs.create("name", np.bytes_(g))
        f["vars"].attrs.create("name", np.bytes_("sequential"))

    def other_names(f):
        for g in SH:
            f[f"layers/{g}/vars"].attrs["name"] = "renamed_" + g

    def links(kind):
        def edit(f):
            b = f["layers/dense_1/vars/1"][()]
            del f["layers/dense_1/vars/1"]
            f.create_dataset("store_b", data=b)
            f["layers/dense_1/vars/1"] = h5py.SoftLink("/store_b") if kind == "soft" else f["store_b"]
        return edit

    # (name, expectation, keyword arguments); the comments give 3.0.5 / 3.8.0 / 3.15.1.
    cases = [
        ("KL (Keras 3.15's own layout)", "load", {}),
        ("KL, no name attributes", "load", dict(attrs=False)),
        ("KL, fixed-length ASCII name attributes", "load", dict(attrs=False, edit=fixed_attrs)),
        ("KL, name attributes not the group names", "load", dict(edit=other_names)),
        ("KL, no groups for weightless layers", "load", dict(empty=False)),
        ("KL + root attribute + extra /dtrain group", "load", dict(edit=meta)),
        ("KL + /optimizer/vars group", "load", dict(edit=optimizer)),
        ("KL, float64 datasets", "load", dict(dtype="<f8")),
        ("KL, big-endian float32", "load", dict(dtype=">f4")),
        ("KL, chunked + gzip", "load", dict(chunks=True, compression="gzip")),
        ("KL, libver=latest", "load", dict(libver="latest")),
        ("KL, a dataset behind a hard link", "load", dict(edit=links("hard"))),
        # 3.0.5: FAIL ("object 'vars' doesn't exist"); 3.8.0, 3.15.1: OK
        ("no /vars group", "varies", dict(rootvars=False)),
        ("only the 4 weighted groups, nothing else", "varies", dict(attrs=False, empty=False, rootvars=False)),
        # 3.0.5, 3.8.0: OK; 3.15.1: FAIL ("Not allowed: H5 file with SoftLink")
        ("KL, a dataset behind a soft link", "varies", dict(edit=links("soft"))),
        ("global layer names (conv2d_2, ...)", "fail", dict(groups=tuple(GLOBAL))),
        ("dense_1 group missing", "fail", dict(groups=("conv2d", "conv2d_1", "dense"))),
        ("extra dataset 2 in dense", "fail", dict(edit=extra_ds)),
        ("dense kernel transposed (128, 1600)", "fail", dict(edit=transpose)),
        ("datasets named kernel/bias", "fail", dict(edit=rename)),
    ]
    d = a.keep or tempfile.mkdtemp(prefix="probe_layout.")
    os.makedirs(d, exist_ok=True)
    bad = 0
    print(f"keras {keras.__version__} ({keras.backend.backend()}), h5py {h5py.__version__}")
    try:
        for i, (name, want, kw) in enumerate(cases):
            p = os.path.join(d, f"case{i:02d}.weights.h5")
            write(p, **kw)
            got, msg = check(p)
            ok = want == "varies" or (got == "OK") == (want == "load")
            bad += not ok
            print(f"{'  ' if ok else '!!'} {i:02d} {name:44s} must {want:6s} {got} {msg}".rstrip())
        got, msg = check(os.path.join(d, "case00.weights.h5"), compile_first=True)
        bad += got != "OK"
        print(f"{'  ' if got == 'OK' else '!!'} -- {'KL into a compiled model (adam)':44s} must load   {got} {msg}".rstrip())
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(f"{'all as expected' if not bad else f'{bad} unexpected'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
