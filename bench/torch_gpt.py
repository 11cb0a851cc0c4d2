#!/usr/bin/env python3
"""A GPT-2 in stock PyTorch: dtrain's transformer reference (bench/gpt.sh).

Its own code (nanoGPT's shape, written here, nothing taken from dtrain): the
model of a file that inputs/gen-gpt.py writes (--model, e.g.
inputs/gpt-mini.cfg; n_layer = its [attention] sections, heads, width,
block_size, the MLP's hidden units and whether the head is tied come from
the file, the vocabulary from the data's num_classes):

  x = wte[tokens] + wpe[positions]
  per block:  x = x + c_proj(attention(c_attn(ln_1(x))))     causal, H heads
              x = x + mlp_proj(gelu_tanh(mlp_fc(ln_2(x))))
  logits = ln_f(x) . wte^T (tied; else an [V][C] head), loss = mean token
  cross-entropy over every position of the (global) batch.

LayerNorm eps 1e-5, GELU's tanh approximation, attention by
F.scaled_dot_product_attention (PyTorch >= 2.0; the explicit softmax on
older versions). Three modes:

  train (default) --sample-log FILE: steps along dtrain's --sample-log (one
      line per batch: "GLOBAL_STEP EPOCH STEP IDX ...", every replica's
      windows in order; lines of one global step are one update), window i
      = /train/tokens[i*T .. i*T+T] of --data. One "STEP g loss" line per
      update; with --validate a "VAL epoch g loss" line after each epoch
      (the mean over all /test windows, as dtrain's val_loss).
  --check DTRAIN_OUT: the same training, and each update's loss against the
      "step k/K - loss: X" lines of dtrain --verbose's output; prints
      "CHECK steps=N worst_rel=W at_step=K" and exits 1 above --tol.
  --bench: tokens/s of forward + backward + clip + AdamW step on --batch-size
      windows, --warmup untimed steps then --steps timed ones, printed as
      "RESULT framework=pytorch precision=P tokens_per_s=X ...".

--init CKPT loads dtrain's parameters from a dtrain checkpoint (HDF5:
/model/<layer>/kernel|bias as src/train/state.c names them; GPT-2's Conv1D
[in][out] kernels, transposed here into nn.Linear's [out][in]). To get
dtrain's initial weights, run it for one step with an update that changes
nothing: --optimizer sgd --lr 1e-30 (1e-30 x a gradient is far below half
an ulp of every weight, so the checkpoint holds the initial weights bit for
bit; bench/gpt.sh checks that a second such step leaves them equal).

The optimizer is torch.optim.AdamW (betas, eps, weight decay as dtrain's
--optimizer adamw: 0.9, 0.999, 1e-8, 0.01) over two groups as dtrain
decays (src/nn/*.c decayed ops): the attention and MLP matrices (and an
untied head) decayed; biases, layernorm gains and both embeddings not
(--decay-all: everything). torch.nn.utils.clip_grad_norm_ with --clip-norm,
and dtrain's learning-rate schedule (src/optim/schedule.c) reimplemented in
lr_at(): linear warm-up from peak / W over the first W = round(warmup-epochs
x updates per epoch) updates, then constant or half a cosine down to
--lr-min over the rest of epochs x updates per epoch.

--precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16) (weights, gradients and AdamW in fp32). --threads N:
torch.set_num_threads(N) and one inter-op thread.
"""
import argparse
import math
import os
import re
import sys
import time

PROG = "torch_gpt.py"


def die(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_cfg(path):
    """The GPT of a gen-gpt.py file, or die: a dict of n_layer, n_head, width, block, hidden, tied."""
    try:
        text = open(path).read()
    except OSError as e:
        die(f"--model {path}: {e.strerror}")
    sections = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            sections.append([m.group(1), {}])
        elif "=" in line and sections:
            k, v = (s.strip() for s in line.split("=", 1))
            sections[-1][1][k] = v
        else:
            die(f"--model {path}: cannot read the line '{line}'")
    kinds = [s[0] for s in sections]
    block = ["layernorm", "attention", "add", "layernorm", "linear", "linear", "add"]
    nb = (len(kinds) - 3) // 7
    ok = (nb >= 1 and len(kinds) == 3 + 7 * nb and kinds[0] == "embedding"
          and kinds[-2:] == ["layernorm", "lm_head"] and kinds[1:-2] == block * nb)
    if ok:
        emb = sections[0][1]
        width, T = int(emb.get("width", 0)), int(emb.get("block_size", 0))
        heads = {sections[1 + 7 * b + 1][1].get("heads") for b in range(nb)}
        hidden = {sections[1 + 7 * b + 4][1].get("units") for b in range(nb)}
        acts = {sections[1 + 7 * b + 4][1].get("activation") for b in range(nb)}
        outs = {sections[1 + 7 * b + 5][1].get("units") for b in range(nb)}
        adds = {(sections[1 + 7 * b + 2][1].get("from"), sections[1 + 7 * b + 6][1].get("from")) for b in range(nb)}
        ok = (len(heads) == 1 and len(hidden) == 1 and acts == {"gelu"} and outs == {str(width)}
              and adds == {("-3", "-4")} and width > 0 and T > 0 and None not in heads | hidden
              and all(not s[1].get("epsilon") for s in sections if s[0] == "layernorm"))
    if not ok:
        die(f"--model {path}: not a GPT of inputs/gen-gpt.py's form ([embedding], n blocks of 7 layers "
            f"[layernorm] [attention] [add] [layernorm] [linear gelu] [linear] [add], [layernorm], [lm_head])")
    n_head = int(heads.pop())
    if width % n_head:
        die(f"--model {path}: heads = {n_head} does not divide the width {width}")
    tied = sections[-1][1].get("tied", "1") not in ("0", "false", "no")
    return dict(n_layer=nb, n_head=n_head, width=width, block=T, hidden=int(hidden.pop()), tied=tied)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a GPT model file of inputs/gen-gpt.py's form")
    p.add_argument("--data", required=True, help="a token dataset from dtrain-prep --text")
    p.add_argument("--init", help="a dtrain checkpoint: its /model parameters are loaded")
    p.add_argument("--sample-log", help="dtrain --sample-log's file: the windows of each step")
    p.add_argument("--follow", action="store_true",
                   help="read --sample-log as dtrain writes it (--epochs x --steps-per-epoch updates)")
    p.add_argument("--follow-timeout", type=float, default=600.0, help="--follow: seconds to wait for a line (600)")
    p.add_argument("--check", metavar="DTRAIN_OUT", help="compare the losses with dtrain --verbose's step lines")
    p.add_argument("--tol", type=float, default=1e-4, help="--check: the largest relative difference (1e-4)")
    p.add_argument("--validate", action="store_true", help="the mean /test loss after each epoch")
    p.add_argument("--eval-batch", type=int, default=16, help="windows per evaluation batch (16)")
    p.add_argument("--bench", action="store_true", help="time training steps, print tokens/s")
    p.add_argument("--batch-size", type=int, default=8, help="--bench: windows per step (8)")
    p.add_argument("--steps", type=int, default=10, help="--bench: timed steps (10)")
    p.add_argument("--warmup", type=int, default=2, help="--bench: untimed steps first (2)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1)")
    p.add_argument("--seed", type=int, default=1234, help="initialisation without --init, --bench's order")
    # dtrain's optimizer flags, with its defaults for --optimizer adamw
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--decay-all", action="store_true")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-norm", type=float, default=0.0, help="0: off")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant")
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--lr-min", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=1, help="dtrain's --epochs (the schedule's length)")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="dtrain's --steps-per-epoch (0: a full pass)")
    a = p.parse_args()
    if not a.bench and not a.sample_log:
        die("--sample-log FILE is needed to train (or --bench)")
    if a.check and a.bench:
        die("--check and --bench: one mode at a time")
    for flag in ("batch_size", "steps", "threads", "eval_batch", "epochs"):
        if getattr(a, flag) < 1:
            die(f"--{flag.replace('_', '-')}: expected a positive whole number, found {getattr(a, flag)}")
    return a


def f32(x):
    """x rounded to float32, as dtrain's float arithmetic rounds."""
    import numpy as np
    return float(np.float32(x))


class Schedule:
    """dtrain's lr(step) (src/optim/schedule.c, src/train/setup.c's setup_schedule), step 0-based."""

    def __init__(self, a, samples, global_batch, per_update):
        steps = -(-samples // global_batch)  # the shard plan's steps per epoch (micro-batches)
        if a.steps_per_epoch and a.steps_per_epoch < steps:
            steps = a.steps_per_epoch
        self.spe = -(-steps // per_update)  # updates
        self.kind, self.peak, self.min_lr = a.lr_schedule, f32(a.lr), f32(a.lr_min)
        self.total = self.spe * a.epochs
        self.warmup = int(math.floor(f32(f32(a.warmup_epochs) * f32(self.spe)) + 0.5))  # lroundf
        if a.warmup_epochs > 0 and self.warmup < 1:
            self.warmup = 1
        self.start = f32(self.peak / f32(self.warmup or 1))

    def __call__(self, step):
        import numpy as np
        if step < self.warmup:
            s, p = np.float32(self.start), np.float32(self.peak)
            return float(s + (p - s) * np.float32(step + 1) / np.float32(self.warmup))
        if self.kind == "cosine":
            span = self.total - self.warmup
            x = min((step - self.warmup) / span, 1.0) if span > 0 else 1.0
            return f32(self.min_lr + (self.peak - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * x)))
        return self.peak


def build(torch, cfg, vocab, attention):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["width"]
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp_fc = nn.Linear(C, cfg["hidden"])
            self.mlp_proj = nn.Linear(cfg["hidden"], C)

        def forward(self, x):
            B, T, C = x.shape
            H = cfg["n_head"]
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            if attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # the explicit softmax
                s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
                mask = torch.ones(T, T, dtype=torch.bool).tril()
                y = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.mlp_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["width"]
            self.wte = nn.Embedding(vocab, C)
            self.wpe = nn.Embedding(cfg["block"], C)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.head = None if cfg["tied"] else nn.Linear(C, vocab, bias=False)

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            x = self.ln_f(x)
            logits = F.linear(x, self.wte.weight if self.head is None else self.head.weight)
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    model = GPT()
    for name, p in model.named_parameters():  # GPT-2's N(0, 0.02), unit gains, zero biases (without --init)
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif ".ln_" in name or name.startswith("ln_"):
            torch.nn.init.ones_(p)
        else:
            torch.nn.init.normal_(p, 0.0, 0.02)
    return model


def layer_names(n_layer):
    """dtrain's layer names for a gen-gpt.py model (Keras's: type, type_1, type_2, ...)."""
    def nm(kind, k):
        return kind if k == 0 else f"{kind}_{k}"
    blocks = []
    for b in range(n_layer):
        blocks.append(dict(ln_1=nm("layer_normalization", 2 * b), attn=nm("attention", b),
                           ln_2=nm("layer_normalization", 2 * b + 1), fc=nm("linear", 2 * b),
                           proj=nm("linear", 2 * b + 1)))
    return blocks, nm("layer_normalization", 2 * n_layer)


def load_init(torch, model, cfg, path, vocab):
    import h5py
    import numpy as np
    blocks, ln_f = layer_names(cfg["n_layer"])
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        die(f"--init {path}: not a readable HDF5 file ({e})")
    loaded = 0

    def get(name, part, shape):
        nonlocal loaded
        key = f"/model/{name}/{part}"
        if key not in f:
            die(f"--init {path}: no {key} (not a checkpoint of this model?)")
        a = np.asarray(f[key], dtype=np.float32)
        if tuple(a.shape) != tuple(shape):
            die(f"--init {path}: {key} is {list(a.shape)}, this model needs {list(shape)}")
        loaded += a.size
        return torch.from_numpy(a)

    C, Hd, T = cfg["width"], cfg["hidden"], cfg["block"]
    with torch.no_grad():
        model.wte.weight.copy_(get("embedding", "kernel", (vocab, C)))
        model.wpe.weight.copy_(get("embedding.position", "kernel", (T, C)))
        for blk, nm in zip(model.blocks, blocks):
            for ln, key in ((blk.ln_1, "ln_1"), (blk.ln_2, "ln_2")):
                ln.weight.copy_(get(nm[key], "kernel", (C,)))
                ln.bias.copy_(get(nm[key], "bias", (C,)))
            for lin, name, shape in ((blk.c_attn, nm["attn"], (C, 3 * C)), (blk.c_proj, nm["attn"] + ".proj", (C, C)),
                                     (blk.mlp_fc, nm["fc"], (C, Hd)), (blk.mlp_proj, nm["proj"], (Hd, C))):
                lin.weight.copy_(get(name, "kernel", shape).t())  # Conv1D [in][out] -> Linear [out][in]
                lin.bias.copy_(get(name, "bias", (shape[1],)))
        model.ln_f.weight.copy_(get(ln_f, "kernel", (C,)))
        model.ln_f.bias.copy_(get(ln_f, "bias", (C,)))
        if model.head is not None:
            model.head.weight.copy_(get("lm_head", "kernel", (vocab, C)))
    total = sum(p.numel() for p in model.parameters())
    if loaded != total:
        die(f"--init {path}: loaded {loaded} of the model's {total} parameters")


def optimizer(torch, model, a):
    decay, rest = [], []
    for name, p in model.named_parameters():
        matrix = p.dim() == 2 and not name.startswith(("wte", "wpe"))  # dtrain's decayed ranges
        (decay if matrix or a.decay_all else rest).append(p)
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)


class SampleLog:
    """dtrain's --sample-log, line by line: (global_step, epoch, [idx, ...]). With follow, a line not
    written yet is waited for (dtrain writes and flushes each update's lines as it takes it), giving up
    after timeout seconds without a new line."""

    def __init__(self, path, follow=False, timeout=600.0):
        self.path, self.follow, self.timeout = path, follow, timeout
        self.lines, self.buf, self.f = [], "", None
        try:
            self.f = open(path)
        except OSError as e:
            if not follow:
                die(f"--sample-log {path}: {e.strerror}")
        self._read()
        if not follow and not self.lines:
            die(f"--sample-log {path}: empty")

    def _read(self):
        if self.f is None:
            try:
                self.f = open(self.path)
            except OSError:
                return
        self.buf += self.f.read()
        *done, self.buf = self.buf.split("\n")
        for line in done:
            w = line.split()
            if len(w) < 3:
                die(f"--sample-log {self.path}:{len(self.lines) + 1}: expected 'GLOBAL_STEP EPOCH STEP IDX ...', "
                    f"found '{line.strip()}'")
            self.lines.append((int(w[0]), int(w[1]), [int(x) for x in w[3:]]))

    def get(self, i):
        """Line i (0-based), or None past the end (without follow: of the file)."""
        waited = 0.0
        while i >= len(self.lines) and self.follow:
            time.sleep(0.2)
            waited += 0.2
            n = len(self.lines)
            self._read()
            if len(self.lines) > n:
                waited = 0.0
            elif waited >= self.timeout:
                die(f"--sample-log {self.path}: no line {i + 1} after {self.timeout:.0f} s of waiting (--follow)")
        return self.lines[i] if i < len(self.lines) else None


def dtrain_losses(path):
    try:
        text = open(path).read()
    except OSError as e:
        die(f"--check {path}: {e.strerror}")
    return [float(m) for m in re.findall(r"^step \d+/\d+ - loss: ([0-9.eE+-]+|nan|inf)", text, re.M)]


def main():
    a = parse_args()
    cfg = parse_cfg(a.model)
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import h5py
    import numpy as np
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)
    try:
        h = h5py.File(a.data, "r")
        vocab = int(h.attrs["num_classes"])
        train = np.asarray(h["/train/tokens"], dtype=np.int64)
        test = np.asarray(h["/test/tokens"], dtype=np.int64) if "/test/tokens" in h else None
    except (OSError, KeyError) as e:
        die(f"--data {a.data}: not a token dataset of dtrain-prep --text ({e})")
    T = cfg["block"]
    ntrain = (len(train) - 1) // T
    if ntrain < 1:
        die(f"--data {a.data}: {len(train)} training tokens, fewer than block_size + 1 = {T + 1}")
    attention = "sdpa" if hasattr(torch.nn.functional, "scaled_dot_product_attention") else "math"
    model = build(torch, cfg, vocab, attention)
    if a.init:
        load_init(torch, model, cfg, a.init, vocab)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"{PROG}: GPT n_layer={cfg['n_layer']} n_head={cfg['n_head']} width={cfg['width']} "
          f"block_size={T} vocab={vocab} tied={int(cfg['tied'])}, {nparams} parameters; PyTorch "
          f"{torch.__version__}, {a.threads} thread(s), precision {a.precision}, attention {attention}"
          f"{', weights from ' + a.init if a.init else ''}", file=sys.stderr, flush=True)
    opt = optimizer(torch, model, a)
    params = [p for p in model.parameters()]

    def windows(data, idx):
        rows = np.stack([data[i * T:i * T + T + 1] for i in idx])
        t = torch.from_numpy(rows)
        return t[:, :-1], t[:, 1:]

    def autocast():
        if a.precision == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def update(batches, count, lr):
        """One update over micro-batches [(x, y)], count windows in all; returns the mean loss."""
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in batches:
            with autocast():
                loss = model(x, y)
            (loss * (x.shape[0] / count)).backward()  # the update's mean over all its windows
            total += loss.item() * x.shape[0]
        if a.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip_norm)
        opt.step()
        return total / count

    def evaluate():
        n = (len(test) - 1) // T
        model.eval()
        s = 0.0
        with torch.no_grad():
            for at in range(0, n, a.eval_batch):
                x, y = windows(test, range(at, min(n, at + a.eval_batch)))
                with autocast():
                    s += model(x, y).item() * x.shape[0]
        model.train()
        return s / n

    if a.bench:
        rng = np.random.default_rng(a.seed)
        order = rng.permutation(ntrain)
        B = a.batch_size
        times = []
        c0 = None
        for i in range(a.warmup + a.steps):
            if i == a.warmup:
                c0, t0 = time.process_time(), time.perf_counter()
            idx = order[(i * B) % (ntrain - B + 1):][:B]
            x, y = windows(train, idx)
            s0 = time.perf_counter()
            loss = update([(x, y)], B, a.lr)
            times.append(time.perf_counter() - s0)
        seconds = time.perf_counter() - t0
        cores = (time.process_time() - c0) / seconds
        tokens = a.steps * B * T
        step_ms = sorted(times[a.warmup:])[len(times[a.warmup:]) // 2] * 1e3
        print(f"RESULT framework=pytorch precision={a.precision} batch={B} steps={a.steps} tokens={tokens} "
              f"seconds={seconds:.3f} tokens_per_s={tokens / seconds:.1f} median_step_ms={step_ms:.1f} "
              f"loss={loss:.4f} cpu_cores={cores:.2f} threads={a.threads}", flush=True)
        return 0

    log = SampleLog(a.sample_log, a.follow, a.follow_timeout)
    first = log.get(0)
    if first is None:
        die(f"--sample-log {a.sample_log}: empty")
    if a.validate and (test is None or len(test) <= T):
        die(f"--validate: {a.data} has no /test windows")
    ref = dtrain_losses(a.check) if a.check else None
    worst, worst_at, k, i = 0.0, 0, 0, 0
    sched = None
    t0 = time.perf_counter()
    while not (a.follow and sched is not None and k == sched.total):
        line = log.get(i)
        if line is None:
            break
        u = [line]  # the update's lines: those of its global step (followed: one line, checked below)
        while not a.follow:
            nxt = log.get(i + len(u))
            if nxt is None or nxt[0] != line[0]:
                break
            u.append(nxt)
        if a.follow and i > 0 and log.get(i - 1)[0] == line[0]:
            die("--follow: one line per update only (a run without --grad-accum)")
        if sched is None:
            sched = Schedule(a, ntrain, len(line[2]), len(u))
        i += len(u)
        bad = [j for _, _, idx in u for j in idx if not 0 <= j < ntrain]
        if bad:
            die(f"--sample-log {a.sample_log}: sample {bad[0]} is outside the {ntrain} windows of {a.data}")
        batches = [windows(train, idx) for _, _, idx in u if idx]
        count = sum(len(idx) for _, _, idx in u)
        loss = update(batches, count, sched(k))
        g, epoch = line[0], line[1]
        if ref is not None:
            if k >= len(ref):
                die(f"--check {a.check}: {len(ref)} step lines, the sample log has more updates")
            rel = abs(loss - ref[k]) / abs(ref[k])
            if not rel <= worst:
                worst, worst_at = rel, k + 1
            print(f"STEP {g} {loss:.6f} dtrain {ref[k]:.6f} rel {rel:.3g}", flush=True)
        else:
            print(f"STEP {g} {loss:.6f}", flush=True)
        k += 1
        if a.validate:
            if a.follow:
                end = k % sched.spe == 0 or k == sched.total
            else:
                nxt = log.get(i)
                end = nxt is None or nxt[1] != epoch
            if end:
                print(f"VAL {epoch} {g} {evaluate():.6f}", flush=True)
    updates = range(k)
    print(f"{PROG}: {len(updates)} updates in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if ref is not None:
        print(f"CHECK steps={len(updates)} worst_rel={worst:.3g} at_step={worst_at} tol={a.tol:g}", flush=True)
        return 0 if worst <= a.tol else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
