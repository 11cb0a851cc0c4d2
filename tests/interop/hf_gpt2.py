#!/usr/bin/env python3
"""hf_gpt2.py: checks a `dtrain --export-hf DIR` directory with the real
Hugging Face transformers (run it with the venv of setup-hf.sh).

    hf_gpt2.py --dir DIR --ids 1,2,3 [--logits F] [--data D.h5 --sentence S]

- GPT2LMHeadModel.from_pretrained(DIR) loads with no missing, unexpected or
  mismatched keys and no error messages, and its config says what the
  directory's files say (vocab, tying).
- Its logits on the token ids --ids are compared with --logits F (what
  `dtrain-generate CKPT --prompt-tokens IDS --logits` printed: a line per
  position, V numbers), or without F with this script's own numpy forward
  pass of GPT-2 over the safetensors file, parsed here (no library): the
  relative difference max|a - b| / max|b|.
- With --data and --sentence: GPT2Tokenizer and GPT2TokenizerFast from DIR
  encode the sentence S (the text of the first --text file dtrain-prep read
  into D.h5) to the ids dtrain's tokenizer gave it: the start of D's
  /train/tokens stream whose bytes (from /tokenizer/merges) are S's. Both
  decode those ids back to S, and neither has a token beyond the model's.

Prints `RESULT rel=R n=N V=V` (and `TOKENIZER ...`); exit 2 when loading
fails, 3 when logits differ more than --tol (default 1e-4), 4 when the
tokenizers disagree with dtrain's ids.
"""
import argparse
import json
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402


def read_safetensors(path):
    """Our own reader of the format: 8-byte LE length, JSON header, data."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = buf[8 + n:]
    out, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).astype(np.float64)
        end = max(end, e)
    assert end == len(data), f"data holds {len(data)} bytes, tensors {end}"
    return header.get("__metadata__", {}), out


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_forward(w, cfg, ids):
    """GPT-2 as the paper and nanoGPT write it, in float64."""
    T, C, H = len(ids), cfg["n_embd"], cfg["n_head"]
    D, eps = C // H, cfg["layer_norm_epsilon"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * C:(j + 1) * C].reshape(T, H, D).transpose(1, 0, 2) for j in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        att = (s / s.sum(-1, keepdims=True)) @ v
        att = att.transpose(1, 0, 2).reshape(T, C)
        x = x + att @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layernorm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w.get("lm_head.weight", w["transformer.wte.weight"])
    return x @ head.T


def dtrain_ids(data, sentence):
    """The start of /train/tokens that decodes to the sentence's bytes."""
    import h5py
    with h5py.File(data, "r") as f:
        merges = f["tokenizer/merges"][...] if "tokenizer/merges" in f else np.zeros((0, 2), np.int32)
        stream = f["train/tokens"][:4096].astype(np.int64)
    tok = [bytes([b]) for b in range(256)]
    for a, b in merges:
        tok.append(tok[a] + tok[b])
    want, got, ids = sentence.encode("utf-8"), b"", []
    for t in stream:
        if len(got) >= len(want):
            break
        got += tok[t]
        ids.append(int(t))
    if got != want:
        raise SystemExit(f"hf_gpt2.py: {data}'s stream does not start with the sentence's tokens "
                         f"(decodes to {got[:60]!r}...)")
    return ids


def check_tokenizers(d, data, sentence, V):
    from transformers import GPT2Tokenizer, GPT2TokenizerFast
    want = dtrain_ids(data, sentence)
    bad = 0
    for cls in (GPT2Tokenizer, GPT2TokenizerFast):
        tk = cls.from_pretrained(d)
        ids = tk.encode(sentence)
        back = tk.decode(want)
        ok = ids == want and back == sentence and len(tk) <= V
        print(f"TOKENIZER {cls.__name__} {'same' if ok else 'DIFFERENT'}: {len(ids)} ids, len {len(tk)}; "
              f"dtrain {want[:12]}..., {cls.__name__} {ids[:12]}...")
        if not ok:
            bad = 1
            print(f"  {cls.__name__}: {ids}\n  dtrain: {want}\n  decoded: {back!r}", file=sys.stderr)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--logits", help="dtrain-generate --logits output")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--data")
    ap.add_argument("--sentence", help="a file holding the sentence")
    a = ap.parse_args()
    import torch
    from transformers import GPT2LMHeadModel
    try:
        model, info = GPT2LMHeadModel.from_pretrained(a.dir, output_loading_info=True)
    except Exception as e:  # the library's own message is the point
        print(f"hf_gpt2.py: GPT2LMHeadModel.from_pretrained({a.dir}): {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    loose = {k: v for k, v in info.items() if v}
    with open(os.path.join(a.dir, "config.json")) as f:
        cfg = json.load(f)
    meta, w = read_safetensors(os.path.join(a.dir, "model.safetensors"))
    tied = cfg["tie_word_embeddings"]
    if loose or meta.get("format") != "pt" or ("lm_head.weight" in w) == tied or \
            model.config.vocab_size != w["transformer.wte.weight"].shape[0]:
        print(f"hf_gpt2.py: loading info {loose}, metadata {meta}, tied {tied}, lm_head.weight in the file: "
              f"{'lm_head.weight' in w}", file=sys.stderr)
        return 2
    model.eval()
    ids = [int(t) for t in a.ids.split(",")]
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0].double().numpy()
    if a.logits:
        ref, what = np.loadtxt(a.logits, dtype=np.float64, ndmin=2), "dtrain-generate"
    else:
        ref, what = numpy_forward(w, cfg, ids), "numpy"
    if ref.shape != hf.shape:
        print(f"hf_gpt2.py: {what} gives logits {ref.shape}, transformers {hf.shape}", file=sys.stderr)
        return 3
    rel = float(np.abs(hf - ref).max() / np.abs(ref).max())
    print(f"RESULT rel={rel:.3g} n={len(ids)} V={hf.shape[1]} against={what} tied={int(tied)}")
    rc = 0 if rel <= a.tol else 3
    if a.data and a.sentence:
        with open(a.sentence, encoding="utf-8") as f:
            sentence = f.read()
        if check_tokenizers(a.dir, a.data, sentence, hf.shape[1]):
            rc = rc or 4
    return rc


if __name__ == "__main__":
    sys.exit(main())
