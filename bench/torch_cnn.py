#!/usr/bin/env python3
"""Train the seed CNN with stock PyTorch and print one RESULT line per epoch.

The baseline for bench/cnn-throughput.sh: the same model, data, optimizer and
batch size as dtrain, on the same number of CPU threads. Run it with Debian's
interpreter (/usr/bin/python3), which sees python3-torch and python3-h5py.
With --device cuda it is bench/gpu-throughput.sh's baseline instead: the
same model on one GPU, at --precision fp32, bf16 or fp16 (autocast, and a
gradient scaler for fp16, as PyTorch recommends for mixed precision). On the
CPU --precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's CPU mixed precision (cnn-throughput.sh
--precision bf16's baseline).

The one thing a reader must know: the whole train split is read into memory
and converted to float32 / 255 once, before any timing (and on --device cuda
moved to the GPU once), so an epoch's time is shuffle + batch gather +
forward + backward + Adam, nothing else. The layout (NCHW or channels-last)
is the one that measured faster on this stack; see --memory-format and
bench/README.md. On the GPU the steps are queued without waiting, and the
clock is read only after torch.cuda.synchronize().

Output (one line per epoch, stdout):
  RESULT framework=pytorch epoch=K samples=N seconds=S samples_per_s=X loss=L accuracy=A cpu_cores=C
loss and accuracy are the means over the epoch's training batches (dropout
on), as Keras reports them; cpu_cores is the process's CPU time over the
epoch's wall time, all threads together (1.00 = one core busy throughout).
On --device cuda one line on stderr says which GPU, PyTorch and cuDNN ran.
"""
import argparse
import contextlib
import functools
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
    p.add_argument("--memory-format", choices=("channels_last", "contiguous"),
                   default="channels_last",
                   help="activation/weight layout (contiguous = NCHW, PyTorch's default)")
    p.add_argument("--eval", action="store_true",
                   help="also print test-split accuracy after each epoch (untimed)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default) or cuda: the data and model on GPU 0")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="fp32 (default); bf16: autocast (on the CPU too); fp16: autocast with a "
                        "dynamic gradient scaler (--device cuda only)")
    a = p.parse_args()
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1:
        p.error("--epochs, --batch-size and --threads must be positive")
    if a.precision == "fp16" and a.device != "cuda":
        p.error("--precision fp16 needs --device cuda (the CPU has autocast for bf16 only)")
    return a


def mixed_precision(torch, precision, device="cuda"):
    """(autocast factory, GradScaler or None, what TF32 is set to; "" on the CPU).

    Mixed precision the way PyTorch documents it: autocast runs convolutions
    and matmuls in 16 bits with fp32 weights; fp16 (GPU only) also scales the
    loss. On the CPU only bf16 autocast exists. torch_resnet.py uses it and
    train_step too, so all the baselines step alike."""
    amp, scaler = contextlib.nullcontext, None
    if precision != "fp32":
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        amp = functools.partial(torch.autocast, device_type=device, dtype=dtype)
    if device == "cpu":
        return amp, scaler, ""
    if precision == "fp16":
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            scaler = torch.amp.GradScaler("cuda")
        else:
            scaler = torch.cuda.amp.GradScaler()
    try:  # PyTorch 2.9 moved these flags to a new API; reading the old one may warn
        tf32 = (f"TF32 convolutions {'on' if torch.backends.cudnn.allow_tf32 else 'off'}, "
                f"matmuls {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}")
    except (AttributeError, RuntimeError) as e:
        tf32 = f"TF32 flags unreadable ({e})"
    return amp, scaler, tf32



def train_step(model, loss_fn, opt, amp, scaler, xb, yb):
    """One optimizer step under autocast (the loss scaled when there is a
    GradScaler); returns the loss and the logits."""
    with amp():
        logits = model(xb)
        loss = loss_fn(logits, yb)
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss, logits

def main():
    args = parse_args()
    # Before importing torch: its OpenMP / MKL pools read these at load time.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import h5py
    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    fmt = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit(f"torch_cnn.py: --device cuda: PyTorch {torch.__version__} sees no GPU "
                 f"(built for CUDA {torch.version.cuda or 'none'})")
    device = torch.device(args.device)

    def load(h5, split):
        x = np.asarray(h5[split + "/images"][...])
        y = np.asarray(h5[split + "/labels"][...])
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (28, 28, 1):
            sys.exit(f"torch_cnn.py: {args.data}: /{split}/images: expected uint8 [N,28,28,1], "
                     f"found {x.dtype} {list(x.shape)}")
        if y.shape != (x.shape[0],):
            sys.exit(f"torch_cnn.py: {args.data}: /{split}/labels: expected [{x.shape[0]}], "
                     f"found {list(y.shape)}")
        # NHWC uint8 -> NCHW float32 in [0,1]; channels_last keeps NHWC in memory.
        xt = torch.from_numpy(x).permute(0, 3, 1, 2).float().div_(255.0)
        xt = xt.contiguous(memory_format=fmt)
        return xt, torch.from_numpy(y.astype(np.int64))

    with h5py.File(args.data, "r") as h5:
        x_train, y_train = load(h5, "train")
        x_test, y_test = load(h5, "test") if args.eval else (None, None)
    if cuda:
        x_train, y_train = x_train.to(device), y_train.to(device)
        if args.eval:
            x_test, y_test = x_test.to(device), y_test.to(device)

    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(5 * 5 * 64, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10),
    )
    # Keras's initialisers (glorot_uniform kernels, zero biases), so the loss
    # curve is comparable with the Keras run and dtrain's.
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    model = model.to(device=device, memory_format=fmt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    amp, scaler, tf32 = mixed_precision(torch, args.precision, args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if not cuda and args.precision != "fp32":
        print(f"torch_cnn.py: torch {torch.__version__}, precision {args.precision} "
              "(torch.autocast on the CPU around forward and loss)", file=sys.stderr, flush=True)
    if cuda:
        print(f"torch_cnn.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
              f"(CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
              f"precision {args.precision}, {args.memory_format}, {tf32}",
              file=sys.stderr, flush=True)

    n = x_train.shape[0]
    bs = args.batch_size
    for epoch in range(1, args.epochs + 1):
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(n, device=device)
        # Every sample once per epoch; the last batch may be short (as in Keras).
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            xb = x_train.index_select(0, idx).contiguous(memory_format=fmt)
            yb = y_train.index_select(0, idx)
            loss, logits = train_step(model, loss_fn, opt, amp, scaler, xb, yb)
            with torch.no_grad():
                loss_sum += loss.detach().double() * idx.numel()
                correct += (logits.argmax(1) == yb).sum()
        sync()
        seconds = time.perf_counter() - t0
        cores = (time.process_time() - c0) / seconds
        loss_mean = loss_sum.item() / n
        acc = correct.item() / n
        if not math.isfinite(loss_mean):
            sys.exit(f"torch_cnn.py: epoch {epoch}: loss is {loss_mean}")
        line = (f"RESULT framework=pytorch epoch={epoch} samples={n} seconds={seconds:.3f} "
                f"samples_per_s={n / seconds:.1f} loss={loss_mean:.4f} accuracy={acc:.4f} "
                f"cpu_cores={cores:.2f}")
        if args.eval:
            model.eval()
            with torch.no_grad():
                hits = 0
                for start in range(0, x_test.shape[0], 1000):
                    xb = x_test[start:start + 1000].contiguous(memory_format=fmt)
                    with amp():
                        hits += (model(xb).argmax(1) == y_test[start:start + 1000]).sum().item()
            line += f" test_accuracy={hits / x_test.shape[0]:.4f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
