#!/usr/bin/env python3
"""Train the seed CNN with Keras 3 (TensorFlow CPU) and print one RESULT line per epoch.

The Keras baseline for bench/cnn-throughput.sh, which runs it inside the
virtual environment it makes (.venv-bench/: tensorflow-cpu + h5py from PyPI).
This is the "seed" model dtrain reproduces, written the way a Keras user
writes it: Sequential, compile, fit.

The one thing a reader must know: the train split is read into memory and
scaled to float32 / 255 once, before fit(); an epoch's time, taken by a
callback from on_epoch_begin to on_epoch_end, is fit's own per-epoch work
(shuffle, batching, the compiled train step, metric updates). The first
epoch also pays for tracing and compiling the train step, which is why the
driver quotes the last of two epochs.

Output (one line per epoch, stdout):
  RESULT framework=keras epoch=K samples=N seconds=S samples_per_s=X loss=L accuracy=A cpu_cores=C
loss and accuracy are Keras's running means over the epoch (dropout on);
cpu_cores is the process's CPU time over the epoch's wall time, all threads
together (1.00 = one core busy throughout; TensorFlow keeps helper threads
besides its one compute thread, and this shows whether they add up to more).
"""
import argparse
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="HDF5 file from dtrain-prep")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                   help="XLA for the train step (auto = Keras's default)")
    p.add_argument("--eval", action="store_true",
                   help="also print test-split accuracy after each epoch (untimed)")
    a = p.parse_args()
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1:
        p.error("--epochs, --batch-size and --threads must be positive")
    return a


def main():
    args = parse_args()
    # Before importing TensorFlow: its thread pools and oneDNN's OpenMP team
    # are sized from these when the runtime starts.
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(args.threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep stdout/stderr to our lines
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import h5py
    import numpy as np
    import tensorflow as tf
    import keras

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(args.seed)

    def load(h5, split):
        x = np.asarray(h5[split + "/images"][...])
        y = np.asarray(h5[split + "/labels"][...])
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (28, 28, 1):
            sys.exit(f"keras_cnn.py: {args.data}: /{split}/images: expected uint8 [N,28,28,1], "
                     f"found {x.dtype} {list(x.shape)}")
        if y.shape != (x.shape[0],):
            sys.exit(f"keras_cnn.py: {args.data}: /{split}/labels: expected [{x.shape[0]}], "
                     f"found {list(y.shape)}")
        return x.astype("float32") / 255.0, y.astype("int32")

    with h5py.File(args.data, "r") as h5:
        x_train, y_train = load(h5, "train")
        x_test, y_test = load(h5, "test") if args.eval else (None, None)

    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10),
    ])
    jit = {"auto": "auto", "on": True, "off": False}[args.jit_compile]
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),  # β1 .9, β2 .999, ε 1e-7
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=jit,
    )

    n = x_train.shape[0]

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.t0
            cores = (time.process_time() - self.c0) / seconds
            loss = float(logs["loss"])
            if not math.isfinite(loss):
                sys.exit(f"keras_cnn.py: epoch {epoch + 1}: loss is {loss}")
            line = (f"RESULT framework=keras epoch={epoch + 1} samples={n} seconds={seconds:.3f} "
                    f"samples_per_s={n / seconds:.1f} loss={loss:.4f} "
                    f"accuracy={float(logs['accuracy']):.4f} cpu_cores={cores:.2f}")
            if args.eval:
                _, acc = self.model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
                line += f" test_accuracy={acc:.4f}"
            print(line, flush=True)

    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              shuffle=True, verbose=0, callbacks=[EpochTimer()])
    print(f"# keras {keras.__version__} tensorflow {tf.__version__} "
          f"jit_compile={model.jit_compile}", file=sys.stderr)


if __name__ == "__main__":
    main()
