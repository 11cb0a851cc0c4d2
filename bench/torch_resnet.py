#!/usr/bin/env python3
"""Train a CIFAR ResNet on synthetic 32x32x3 data with stock PyTorch, one RESULT line per epoch.

The baseline for bench/resnet.sh: the model of a ResNet file that
inputs/gen-resnet.py writes (--depth 6n+2 and --width K; the defaults, 20 and
1, are inputs/resnet20.cfg, --depth 32 --width 4 is resnet32-wide4.cfg), the
same optimizer, batch size and thread count as dtrain, on 1 process or on
--world-size P processes (DistributedDataParallel over gloo, one thread
each), at --precision fp32 or bf16 (torch.autocast("cpu", dtype=bfloat16)
around forward and loss, PyTorch's CPU mixed precision: convolutions and
matmuls in bf16, weights, optimizer and batch-norm statistics in fp32).
Run it with Debian's interpreter (/usr/bin/python3), which sees
python3-torch. With --device cuda it is bench/gpu-throughput.sh's
larger-model baseline instead: one process on GPU 0, at --precision fp32,
bf16 or fp16 (autocast, and a gradient scaler for fp16: torch_cnn.py's
mixed_precision and train_step, imported, so both GPU baselines step
alike); the data are moved to the GPU once before any timing, and the
clock is read only after torch.cuda.synchronize().

The model (He et al. 2016, CIFAR ResNet-(6n+2), as inputs/gen-resnet.py
writes it): conv3x3(16K) - BN - ReLU; three stages of n basic blocks
(conv3x3 - BN - ReLU - conv3x3 - BN, plus the block input, ReLU) with 16K,
32K and 64K filters, the first block of stages 2 and 3 striding by 2 in its
first convolution and projecting its shortcut with conv1x1(stride 2) - BN;
global average pooling; Dense(10). Every convolution has a bias, as dtrain's
always does, so both count the same trainable parameters (ResNet-20:
273,258; bench/resnet.sh checks the count against dtrain's for any file). Initialisers and constants
are Keras's, as dtrain's: Glorot-uniform kernels, zero biases, BN gamma 1,
beta 0, eps 1e-3, momentum 0.99 (PyTorch's momentum=0.01); Adam lr 1e-3,
betas (0.9, 0.999), eps 1e-7.

One difference: Keras's (and dtrain's) 'same' padding for a stride-2 3x3
convolution on an even input pads 0 rows/columns above and left and 1 below
and right; PyTorch's padding=1 pads 1 on every side. The output shapes and
FLOPs are identical (32 -> 16 -> 8); only the alignment of the windows
differs, which does not matter for throughput.

The one thing a reader must know: the data are N uint8 images and labels
in [0, 10) drawn once from numpy's generator with --seed (nothing to learn
beyond memorising them, as with dtrain --synthetic), converted to float32 /
255 once before any timing, so an epoch's time is shuffle + batch gather +
forward + backward (+ gradient all-reduce) + Adam. With --world-size P each
epoch's permutation is dealt to the P replicas (N // P samples each, batch B
per replica), as dtrain deals its samples to ranks; BatchNorm statistics
stay per replica (broadcast_buffers=False), as in dtrain without --sync-bn.

Output (one line per epoch, stdout, from rank 0):
  RESULT framework=pytorch epoch=K samples=N seconds=S samples_per_s=X loss=L accuracy=A cpu_cores=C world_size=P
samples and samples_per_s are global (all replicas); loss and accuracy the
means over every replica's training batches; cpu_cores the CPU time of all
processes over the epoch's wall time (1.00 = one core busy throughout).
One line on stderr first names the model and its parameter count
("torch_resnet.py: ResNet-20 (n=3, width 1), 273258 trainable parameters; ..."), PyTorch,
the precision and the layout (on --device cuda also the GPU, CUDA, cuDNN and the precision).
"""
import argparse
import math
import os
import socket
import sys
import time

from torch_cnn import mixed_precision, train_step  # the baselines' shared autocast / GradScaler step

RESNET20_PARAMETERS = 273258  # what dtrain prints for inputs/resnet20.cfg


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=12800, help="synthetic samples (default 12800)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="samples per replica per step (default 64)")
    p.add_argument("--world-size", type=int, default=1,
                   help="data-parallel processes (default 1; > 1: DDP over gloo on this host)")
    p.add_argument("--threads", type=int, default=1, help="compute threads per process (default 1)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--memory-format", choices=("channels_last", "contiguous"), default="channels_last",
                   help="activation/weight layout (contiguous = NCHW, PyTorch's default); "
                        "channels_last measured faster here, see bench/README-resnet.md")
    p.add_argument("--bind-to-core", action="store_true",
                   help="pin process r to the r-th CPU it may run on, as mpirun --bind-to core does")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default) or cuda: the data and model on GPU 0 (one process)")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="fp32 (default); bf16: autocast (on the CPU too); fp16: autocast with a "
                        "dynamic gradient scaler (--device cuda only)")
    p.add_argument("--depth", type=int, default=20,
                   help="6n+2 layers, n basic blocks per stage (default 20: ResNet-20)")
    p.add_argument("--width", type=int, default=1,
                   help="filters 16K, 32K, 64K per stage (default 1; resnet32-wide4.cfg: 4)")
    a = p.parse_args()
    if min(a.samples, a.epochs, a.batch_size, a.world_size, a.threads, a.width) < 1:
        p.error("--samples, --epochs, --batch-size, --world-size, --threads and --width must be positive")
    if a.depth < 8 or (a.depth - 2) % 6:
        p.error(f"--depth: expected 6n+2 with n >= 1 (20, 32, 44, ...), found {a.depth}")
    if a.samples < a.world_size:
        p.error(f"--samples {a.samples}: fewer than --world-size {a.world_size} replicas")
    if a.precision == "fp16" and a.device != "cuda":
        p.error("--precision fp16 needs --device cuda (the CPU has autocast for bf16 only)")
    if a.device == "cuda" and a.world_size > 1:
        p.error(f"--world-size {a.world_size} with --device cuda: the GPU baseline is one process "
                "on one GPU (DDP here is gloo over CPU processes); use --world-size 1")
    return a


def build_model(nn, n, width):
    class Block(nn.Module):
        """conv3x3-BN-ReLU-conv3x3-BN, plus the input (projected when the shape changes), ReLU."""

        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, padding=1, bias=True)
            self.bn1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, padding=1, bias=True)
            self.bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
            self.relu = nn.ReLU(inplace=True)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, padding=0, bias=True),
                                              nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            y = y + (x if self.shortcut is None else self.shortcut(x))
            return self.relu(y)

    w16 = 16 * width
    layers = [nn.Conv2d(3, w16, 3, 1, padding=1, bias=True),
              nn.BatchNorm2d(w16, eps=1e-3, momentum=0.01), nn.ReLU(inplace=True)]
    cin = w16
    for stage, cout in enumerate((w16, 2 * w16, 4 * w16)):
        for b in range(n):
            layers.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def train(rank, args, port):
    """One replica: rank 0 of 1 in the parent process, or a spawned DDP process."""
    ws = args.world_size
    if args.bind_to_core:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})  # before any pool thread starts
    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    if ws == 1:  # a spawned process starts fresh; the parent may have set it already
        torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    dist = None
    if ws > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws)

    fmt = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit(f"torch_resnet.py: --device cuda: PyTorch {torch.__version__} sees no GPU "
                 f"(built for CUDA {torch.version.cuda or 'none'})")
    device = torch.device(args.device)
    # Every process draws the same N images from the seed, then uses its share.
    rng = np.random.default_rng(args.seed)
    x8 = rng.integers(0, 256, size=(args.samples, 32, 32, 3), dtype=np.uint8)
    y8 = rng.integers(0, 10, size=args.samples, dtype=np.int64)
    # NHWC uint8 -> NCHW float32 in [0,1]; channels_last keeps NHWC in memory.
    x_all = torch.from_numpy(x8).permute(0, 3, 1, 2).float().div_(255.0).contiguous(memory_format=fmt)
    y_all = torch.from_numpy(y8)
    del x8
    if cuda:  # once, before any timing
        x_all, y_all = x_all.to(device), y_all.to(device)

    model = build_model(nn, (args.depth - 2) // 6, args.width)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model = model.to(device=device, memory_format=fmt)
    if ws > 1:
        # Per-replica BN statistics, as dtrain without --sync-bn: no buffer broadcast each step.
        model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    amp, scaler, tf32 = mixed_precision(torch, args.precision, args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gpu_note = ""
    if cuda:
        gpu_note = (f"; {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, "
                    f"cuDNN {torch.backends.cudnn.version()}), {tf32}")
    resnet20 = args.depth == 20 and args.width == 1
    if rank == 0:
        print(f"torch_resnet.py: ResNet-{args.depth} (n={(args.depth - 2) // 6}, width {args.width}), "
              f"{n_params} trainable parameters"
              f"{f' (dtrain has {RESNET20_PARAMETERS})' if resnet20 and n_params != RESNET20_PARAMETERS else ''}; "
              f"torch {torch.__version__}, precision {args.precision}"
              f"{' (CPU autocast)' if args.precision != 'fp32' and not cuda else ''}, "
              f"{args.memory_format}, {ws} process(es) x {args.threads} thread(s)"
              f"{', gloo DDP' if ws > 1 else ''}{', bound to cores' if args.bind_to_core else ''}{gpu_note}",
              file=sys.stderr, flush=True)

    n = args.samples
    shard = n // ws
    bs = args.batch_size
    for epoch in range(1, args.epochs + 1):
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        if dist:
            dist.barrier()
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        # The same permutation on every replica (seeded by the epoch), dealt round-robin.
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch))
        mine = perm[rank::ws][:shard].to(device)
        # Every sample of the share once per epoch; the last batch may be short.
        for start in range(0, shard, bs):
            idx = mine[start:start + bs]
            xb = x_all.index_select(0, idx).contiguous(memory_format=fmt)
            yb = y_all.index_select(0, idx)
            loss, logits = train_step(model, loss_fn, opt, amp, scaler, xb, yb)
            with torch.no_grad():
                loss_sum += loss.detach().double() * idx.numel()
                correct += (logits.argmax(1) == yb).sum()
        if dist:
            dist.barrier()
        sync()
        seconds = time.perf_counter() - t0
        stats = torch.tensor([time.process_time() - c0, loss_sum.item(), float(correct.item())],
                             dtype=torch.float64)
        if dist:
            dist.all_reduce(stats)  # untimed: CPU seconds, loss and hits of all replicas
        cpu, loss_total, hits = stats.tolist()
        total = shard * ws
        loss_mean = loss_total / total
        if not math.isfinite(loss_mean):
            sys.exit(f"torch_resnet.py: rank {rank}: epoch {epoch}: loss is {loss_mean}")
        if rank == 0:
            print(f"RESULT framework=pytorch epoch={epoch} samples={total} seconds={seconds:.3f} "
                  f"samples_per_s={total / seconds:.1f} loss={loss_mean:.4f} accuracy={hits / total:.4f} "
                  f"cpu_cores={cpu / seconds:.2f} world_size={ws}", flush=True)
    if dist:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    # Before importing torch, here and in the spawned processes (they inherit
    # the environment): its OpenMP / MKL pools read these at load time.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if args.world_size == 1:
        train(0, args, None)
        return
    import torch.multiprocessing as mp
    # spawn, not fork: each replica starts with fresh thread pools.
    mp.spawn(train, args=(args, free_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
