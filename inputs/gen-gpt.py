#!/usr/bin/env python3
"""gen-gpt.py: writes the decoder-only transformer model files in inputs/.

GPT-2 (Radford et al., 2019) as nanoGPT and llm.c build it: a token and a
learned position embedding, L pre-norm blocks (x + attention(layernorm(x)),
then x + MLP(layernorm(x)) with a 4x GELU hidden layer), a final layernorm
and an LM head tied to the token embedding. Each block is 7 layers, and a
pipeline stage may start at any block's first layer.

    python3 inputs/gen-gpt.py      # rewrites gpt-mini.cfg, gpt2-small.cfg
"""
import os
import sys


def gpt(name, layers, heads, width, block, about):
    out = [f"# {name}.cfg: {about}\n"
           f"# {layers} blocks, {heads} heads, width {width}, block_size {block}; the vocabulary\n"
           f"# is the data's (dtrain-prep --text). Written by inputs/gen-gpt.py.\n"
           f"#   mpirun -np 2 dtrain text.h5 --model inputs/{name}.cfg --optimizer adamw\n"]
    out.append(f"[embedding]        # wte [vocab][{width}] + wpe [{block}][{width}]\n"
               f"width = {width}\nblock_size = {block}\n")
    for i in range(layers):
        out.append(f"# ---- block {i}\n[layernorm]\n")
        out.append(f"[attention]\nheads = {heads}\n")
        out.append("[add]              # the block's input (3 layers back)\nfrom = -3\n")
        out.append("[layernorm]\n")
        out.append(f"[linear]\nunits = {4 * width}\nactivation = gelu\n")
        out.append(f"[linear]\nunits = {width}\n")
        out.append("[add]              # the attention's residual sum (4 layers back)\nfrom = -4\n")
    out.append("# ----\n[layernorm]\n")
    out.append("[lm_head]          # logits over the vocabulary, sharing the embedding's table\ntied = 1\n")
    return "\n".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    models = {
        "gpt-mini": gpt("gpt-mini", 6, 6, 384, 256, "a small GPT (about 10.8 M parameters with 256 tokens)."),
        "gpt2-small": gpt("gpt2-small", 12, 12, 768, 1024,
                          "GPT-2 124M's shape (124.4 M parameters with its 50257 tokens)."),
    }
    for name, text in models.items():
        with open(os.path.join(here, name + ".cfg"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
