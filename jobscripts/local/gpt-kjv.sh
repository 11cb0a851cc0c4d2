#!/usr/bin/env bash
# gpt-kjv.sh: the transformer example, from a fresh Debian 12 machine to a
# language model of the King James Bible: install what is missing, build,
# take the text from Debian's bible-kjv (bible-kjv-text's 4.3 MB), tokenize it
# with a byte-level BPE of 4096 merges learned by dtrain-prep, and train
# inputs/gpt-mini.cfg (6 blocks, 6 heads, width 384, 256 positions; 12.4 M
# parameters with the 4352-token vocabulary) on 2 ranks with AdamW, warm-up
# and cosine decay, gradient clipping, validation loss and perplexity each
# epoch, and a checkpoint that dtrain-generate samples from.
#
#   jobscripts/local/gpt-kjv.sh [NP] [dtrain options...]
#   e.g. jobscripts/local/gpt-kjv.sh 2 --epochs 8
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
"$top/jobscripts/local/setup.sh"
cd "$top"

np=${1:-2}
[[ $# -gt 0 ]] && shift
mkdir -p data
[[ -f data/kjv.txt ]] || bible gen1:1-rev22:21 >data/kjv.txt # the whole text, Genesis to Revelation
[[ -f data/kjv-bpe4096.h5 ]] || build/dtrain-prep --text data/kjv.txt --tokenizer bpe:4096 data/kjv-bpe4096.h5

launcher=(mpiexec.openmpi --bind-to core)
# Open MPI refuses to run as root unless told, and refuses more ranks than cores.
[[ $(id -u) == 0 ]] && launcher+=(--allow-run-as-root)
(( np > $(nproc) )) && launcher+=(--oversubscribe)
set -x
# 4 epochs of 100 updates of 8 windows a rank (256 tokens each): ~0.8 M tokens at np=2.
"${launcher[@]}" -np "$np" build/dtrain data/kjv-bpe4096.h5 --model inputs/gpt-mini.cfg \
  --epochs 4 --steps-per-epoch 100 --batch-size 8 --optimizer adamw --lr 1e-3 --weight-decay 0.1 \
  --lr-schedule cosine --warmup-epochs 0.5 --lr-min 1e-4 --clip-norm 1.0 \
  --checkpoint-dir data/gpt-kjv-ckpt "$@"
build/dtrain-generate data/gpt-kjv-ckpt --prompt "And God said" --tokens 64 --temperature 0.8 --top-k 40
