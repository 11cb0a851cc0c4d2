#!/usr/bin/python3
"""make_bad_inputs.py: write malformed dtrain inputs into a scratch directory.

    make_bad_inputs.py DIR

Each file is a small good dataset (64 samples of 28x28x1 uint8, labels 0..9,
num_classes 10, /train and /test) with one defect, so the test that feeds it
to dtrain knows which error to expect (tests/bad_inputs.sh holds the table of
expected messages). good.h5 has no defect. Run by /usr/bin/python3 with
Debian's python3-h5py; written at test time, never stored.
"""
import os
import sys

import h5py
import numpy as np

N, H, W, C, K = 64, 28, 28, 1, 10
rng = np.random.default_rng(1)


def images(n=N, h=H, w=W, c=C):
    return rng.integers(0, 256, size=(n, h, w, c), dtype=np.uint8)


def labels(n=N):
    return (np.arange(n) % K).astype(np.uint8)


def write(path, train=None, test=None, num_classes=K, attrs=None):
    """train/test: dicts name -> array or callable(group) (None: good data)."""
    with h5py.File(path, "w") as f:
        for split, parts in (("train", train), ("test", test)):
            if parts is False:
                continue
            g = f.create_group(split)
            parts = parts or {}
            for name, good in (("images", images), ("labels", labels)):
                v = parts.get(name, good)
                if v is None:
                    continue
                if callable(v) and v not in (images, labels):
                    v(g)
                else:
                    g.create_dataset(name, data=v() if callable(v) else v)
        if num_classes is not None:
            f.attrs["num_classes"] = np.int32(num_classes)
        for k, v in (attrs or {}).items():
            f.attrs[k] = v


def without(*missing):
    """N labels cycling over 0..K-1 except the missing values."""
    keep = np.array([k for k in range(K) if k not in missing], np.uint8)
    return keep[np.arange(N) % len(keep)]


def idx(path, a):
    """An IDX file of uint8 (type 0x08) of a's shape, as dtrain-prep reads."""
    with open(path, "wb") as fp:
        fp.write(bytes([0, 0, 0x08, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape))
        fp.write(np.ascontiguousarray(a, np.uint8).tobytes())


def sparse(name, shape):
    """A chunked dataset whose dims claim shape but no chunk is written."""
    def make(g):
        chunks = tuple(min(s, 1 << 16) if i == 0 else s for i, s in enumerate(shape))
        if len(shape) == 4:
            chunks = (1,) + tuple(min(s, 1024) for s in shape[1:])
        g.create_dataset(name, shape=shape, dtype=np.uint8, chunks=chunks)
    return make


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    p = lambda name: os.path.join(d, name)
    nan = images().astype(np.float32)
    nan[0, 0, 0, 0] = np.nan

    write(p("good.h5"))
    write(p("float-images.h5"), train={"images": nan})
    write(p("float64-images.h5"), train={"images": images().astype(np.float64)})
    write(p("int8-images.h5"), train={"images": images().astype(np.int8)})
    write(p("int16-labels.h5"), train={"labels": labels().astype(np.int16)})
    write(p("float-labels.h5"), train={"labels": labels().astype(np.float32)})
    write(p("string-labels.h5"), train={"labels": np.array([b"cat"] * N)})
    write(p("rank3-images.h5"), train={"images": images()[..., 0]})
    write(p("rank5-images.h5"), train={"images": images()[..., None]})
    write(p("rank9-images.h5"), train={"images": np.zeros((N, 1, 1, 1, 1, 1, 1, 1, 2), np.uint8)})
    write(p("rank2-labels.h5"), train={"labels": labels()[:, None]})
    write(p("rank12-labels.h5"), train={"labels": labels().reshape((N,) + (1,) * 11)})
    write(p("scalar-images.h5"), train={"images": np.uint8(3)})
    write(p("zero-height.h5"), train={"images": np.zeros((N, 0, W, C), np.uint8)})
    write(p("zero-samples.h5"), train={"images": images(0), "labels": labels(0)},
          test={"images": images(0), "labels": labels(0)})
    write(p("zero-test.h5"), test={"images": images(0), "labels": labels(0)})
    write(p("huge-sparse.h5"), train={"images": sparse("images", (1 << 40, H, W, C)),
                                      "labels": sparse("labels", (1 << 40,))})
    write(p("huge-sparse-labels.h5"), train={"labels": sparse("labels", (N,))})
    write(p("huge-image.h5"), train={"images": sparse("images", (N, 65536, 65536, 1))})
    write(p("mismatched-counts.h5"), train={"labels": labels(N - 4)})
    write(p("test-mismatched.h5"), test={"labels": labels(N + 1)})
    write(p("label-255.h5"), train={"labels": np.where(np.arange(N) == 7, 255, labels()).astype(np.uint8)})
    write(p("test-label-out.h5"), test={"labels": np.where(np.arange(N) == 3, 10, labels()).astype(np.uint8)})
    write(p("num-classes-missing.h5"), num_classes=None)        # accepted: inferred from the labels
    # issue 23's file: labels 0..9 and one stray 200, no num_classes (refused
    # unless --num-classes says 201); 8 of 10 classes (accepted: 2 may be
    # missing), 7 of 10 (refused), and 7 in /train with 3 more only in /test.
    write(p("stray-200.h5"), num_classes=None,
          train={"labels": np.where(np.arange(N) == 17, 200, labels()).astype(np.uint8)})
    write(p("stray-200-declared.h5"),
          train={"labels": np.where(np.arange(N) == 17, 200, labels()).astype(np.uint8)})
    write(p("two-missing.h5"), num_classes=None, train={"labels": without(3, 7)}, test={"labels": without(3, 7)})
    write(p("three-missing.h5"), num_classes=None, train={"labels": without(2, 5, 8)},
          test={"labels": without(2, 5, 8)})
    write(p("only-in-test.h5"), num_classes=None, train={"labels": without(7, 8, 9)})
    # The same stray 200 as IDX files for dtrain-prep.
    stray = np.where(np.arange(N) == 17, 200, labels()).astype(np.uint8)
    idx(p("stray-200-images.idx"), images()[..., 0])
    idx(p("stray-200-labels.idx"), stray)
    idx(p("two-missing-labels.idx"), without(3, 7))
    write(p("num-classes-zero.h5"), num_classes=0)
    write(p("num-classes-300.h5"), num_classes=300)
    write(p("num-classes-string.h5"), num_classes=None, attrs={"num_classes": "ten"})
    write(p("num-classes-array.h5"), num_classes=None, attrs={"num_classes": np.array([10] * 64, np.int32)})
    write(p("num-classes-float.h5"), num_classes=None, attrs={"num_classes": 10.5})
    write(p("no-train.h5"), train=False)
    write(p("no-test-labels.h5"), test={"labels": None})
    write(p("images-group.h5"), train={"images": lambda g: g.create_group("images")})
    write(p("shard-32x32x3.h5"), train={"images": images(N, 32, 32, 3)}, test={"images": images(N, 32, 32, 3)})
    write(p("shard-classes-5.h5"), num_classes=5, train={"labels": (np.arange(N) % 5).astype(np.uint8)},
          test={"labels": (np.arange(N) % 5).astype(np.uint8)})
    write(p("shard-no-test.h5"), test=False)
    write(p("test-28x28x3.h5"), test={"images": images(N, 28, 28, 3)})

    # A chunked, compressed labels dataset with its one chunk's bytes damaged:
    # the file opens, reading the labels fails.
    with h5py.File(p("corrupt-labels.h5"), "w") as f:
        f.attrs["num_classes"] = np.int32(K)
        g = f.create_group("train")
        g.create_dataset("images", data=images())
        ds = g.create_dataset("labels", data=labels(), chunks=(N,), compression="gzip")
        off = ds.id.get_chunk_info(0).byte_offset
    with open(p("corrupt-labels.h5"), "r+b") as fp:
        fp.seek(off)
        fp.write(b"\xff" * 16)

    # The same images, compressed, with damaged image chunks: validation
    # passes (only labels are read), training reads the damaged rows.
    with h5py.File(p("corrupt-images.h5"), "w") as f:
        f.attrs["num_classes"] = np.int32(K)
        g = f.create_group("train")
        ds = g.create_dataset("images", data=images(), chunks=(1, H, W, C), compression="gzip")
        g.create_dataset("labels", data=labels())
        offs = [ds.id.get_chunk_info(i).byte_offset for i in range(N)]
    with open(p("corrupt-images.h5"), "r+b") as fp:
        for off in offs:
            fp.seek(off)
            fp.write(b"\xff" * 16)

    good = open(p("good.h5"), "rb").read()
    open(p("truncated.h5"), "wb").write(good[: len(good) // 2])
    open(p("truncated-head.h5"), "wb").write(good[:600])
    open(p("not-hdf5.h5"), "wb").write(b"label,pixel0,pixel1\n7,0,0\n" * 10)
    open(p("empty.h5"), "wb").close()
    open(p("garbage.cfg"), "wb").write(bytes(rng.integers(0, 256, 512, dtype=np.uint8)))
    open(p("garbage-text.cfg"), "w").write("[convolutional]\nfilters=banana\n\n[net\nsize=-3\n")


if __name__ == "__main__":
    main()
