#!/bin/sh
# gpt.sh: a decoder-only transformer (the GPT-2 blocks of inputs/gen-gpt.py,
# small) trains on real text (Debian's King James Bible, bible-kjv) tokenized
# by dtrain-prep --text, with every strategy giving the same losses.
#
# - 20 updates of a tied 2-block GPT: np=2 at batch 8 equals np=1 at batch 16
#   (the same global batch, the same windows) to 1e-5 relative; so do
#   --strategy sharded and --strategy fsdp (tied and untied), and pipeline
#   stages P=2 with M=4 micro-batches (untied: stages refuse a tied head)
#   against one rank at the replica's batch; --grad-accum 2 against the doubled batch (1e-4: another
#   order of sums); --precision bf16 within 2% of fp32. Another seed differs.
# - Token windows read with pread() by the prefetch thread equal those read
#   through HDF5 (--prefetch 0): bitwise the same losses.
# - Checkpoints: 2 epochs then a resume to 3 equal 3 straight epochs (the
#   epoch line, bitwise); an fsdp checkpoint resumed by mirrored at 1 rank.
# - Learning: the validation loss falls a nat below the uniform guess's ln V
#   (V = 456 tokens of bpe:200) in 60 updates, and the epoch line carries
#   val_perplexity = exp(val_loss).
# - Refused with one message: heads not dividing the width, block_size longer
#   than the data, a token dataset with an image model and images with a GPT,
#   a tied head under pipeline stages, a uint16 stream with a vocabulary past
#   65536, a token id not below the vocabulary.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/gpt.$$
rm -rf "$T"; mkdir -p "$T"
kjv_text 400000 "$T/kjv.txt"
"$DTRAIN_PREP" --quiet --text "$T/kjv.txt" --tokenizer bpe:200 "$T/kjv.h5" || { fail "dtrain-prep --text"; finish; }

small_gpt "$T/tied.cfg" 1
small_gpt "$T/untied.cfg" 0
fm=$T/kjv.h5
base="--epochs 1 --steps-per-epoch 20 --no-validation --verbose --shard-policy data --optimizer adam"
tol=1e-5
losses() { step_losses "$@"; }

losses np1 1 --model "$T/tied.cfg" --batch-size 16
losses np2 2 --model "$T/tied.cfg" --batch-size 8
loss_agree np1 np2 20 "tied GPT: np=2 (batch 8) against np=1 (batch 16)"
losses np1-hdf5 1 --model "$T/tied.cfg" --batch-size 16 --prefetch 0
tol=0; loss_agree np1 np1-hdf5 20 "windows by pread() (prefetch) against HDF5 (--prefetch 0): bitwise"; tol=1e-5
losses sh 2 --model "$T/tied.cfg" --batch-size 8 --strategy sharded
loss_agree np1 sh 20 "tied GPT: sharded against mirrored"
losses fs 2 --model "$T/tied.cfg" --batch-size 8 --strategy fsdp --bucket-mb 0.05
loss_agree np1 fs 20 "tied GPT: fsdp (the head's table gathered again at the end) against mirrored"
losses mir-u 2 --model "$T/untied.cfg" --batch-size 8
losses fs-u 2 --model "$T/untied.cfg" --batch-size 8 --strategy fsdp --bucket-mb 0.05
loss_agree mir-u fs-u 20 "untied GPT: fsdp against mirrored"
losses one-u 1 --model "$T/untied.cfg" --batch-size 8
losses pipe-u 2 --model "$T/untied.cfg" --batch-size 8 --pipeline-stages 2 --micro-batches 4
loss_agree one-u pipe-u 20 "untied GPT: pipeline P=2 M=4 against one rank at the replica's batch"
losses acc 1 --model "$T/tied.cfg" --batch-size 8 --grad-accum 2 # 20 micro-batches: 10 updates
head -10 "$T/np1" >"$T/np1-10"
tol=1e-4; loss_agree np1-10 acc 10 "--grad-accum 2 at batch 8 against batch 16"; tol=1e-5
if cpu_bf16; then
  losses bf 1 --model "$T/tied.cfg" --batch-size 16 --precision bf16
  tol=2e-2; loss_agree np1 bf 20 "--precision bf16 against fp32 (within 2%)"; tol=1e-5
else no_bf16 "--precision bf16 against fp32"; fi
losses seed 1 --model "$T/tied.cfg" --batch-size 16 --seed 7
w=$(loss_worst np1 seed)
awk "BEGIN{exit !($w > 1e-3)}" && pass "negative control: another seed differs by $w" ||
  fail "negative control: another seed within $w"

# Checkpoints: exact resume, and an fsdp checkpoint read by mirrored.
ck="--model $T/tied.cfg --batch-size 8 --steps-per-epoch 10 --no-validation --shard-policy data"
run_np 2 "$fm" $ck --epochs 3
straight=$(grep '^Epoch 3/3' "$out" | sed 's/ - [0-9.]* s - [0-9]* samples\/s ([0-9]* tokens\/s)//; s/ - comm:.*//')
run_np 2 "$fm" $ck --epochs 2 --checkpoint-dir "$T/ck"
run_np 2 "$fm" $ck --epochs 3 --checkpoint-dir "$T/ck" --resume latest
resumed=$(grep '^Epoch 3/3' "$out" | sed 's/ - [0-9.]* s - [0-9]* samples\/s ([0-9]* tokens\/s)//; s/ - comm:.*//')
[ -n "$straight" ] && [ "$straight" = "$resumed" ] && pass "resumed from epoch 2: '$resumed'" ||
  fail "resume: '$resumed' against straight '$straight'"
cku="--model $T/untied.cfg --steps-per-epoch 10 --no-validation --shard-policy data"
run_np 2 "$fm" $cku --batch-size 8 --epochs 2
straight=$(grep '^Epoch 2/2' "$out" | sed 's/ - [0-9.]* s - [0-9]* samples\/s ([0-9]* tokens\/s)//; s/ - comm:.*//')
run_np 2 "$fm" $cku --batch-size 8 --epochs 1 --strategy fsdp --checkpoint-dir "$T/ckf"
run_np 1 "$fm" $cku --batch-size 16 --epochs 2 --checkpoint-dir "$T/ckf" --resume latest
resumed=$(grep '^Epoch 2/2' "$out" | sed 's/ - [0-9.]* s - [0-9]* samples\/s ([0-9]* tokens\/s)//; s/ - comm:.*//')
l1=$(echo "$straight" | sed 's/.*loss: \([0-9.]*\).*/\1/'); l2=$(echo "$resumed" | sed 's/.*loss: \([0-9.]*\).*/\1/')
[ -n "$l1" ] && awk "BEGIN{d = $l1 - $l2; if (d < 0) d = -d; exit !(d <= 1e-4 * $l1)}" &&
  pass "fsdp checkpoint (np=2) resumed by mirrored (np=1): epoch 2 loss $l2 against $l1" ||
  fail "fsdp -> mirrored resume: '$resumed' against '$straight'"

# Learning, and perplexity on the epoch line.
run_np 2 "$fm" --model "$T/tied.cfg" --batch-size 16 --epochs 3 --steps-per-epoch 20 --lr 3e-3
line=$(grep '^Epoch 3/3' "$out")
vl=$(echo "$line" | sed -n 's/.*val_loss: \([0-9.]*\).*/\1/p'); ppl=$(echo "$line" | sed -n 's/.*val_perplexity: \([0-9.]*\).*/\1/p')
if [ -n "$vl" ] && [ -n "$ppl" ] && awk "BEGIN{p = exp($vl); d = p - $ppl; if (d < 0) d = -d; exit !($vl < log(456) - 1 && d <= 0.01 * p)}"; then
  pass "learns: val_loss $vl after 60 updates (ln 456 = 6.12 at the start), val_perplexity $ppl = exp(val_loss)"
else fail "learning: '$line'"; cat "$err" >&2; fi

# Refusals.
sed 's/heads = 4/heads = 3/' "$T/tied.cfg" >"$T/heads.cfg"
expect_fail 3 "attention: heads = 3 does not divide the width 32" 2 "$fm" --model "$T/heads.cfg"
sed 's/block_size = 32/block_size = 300000/' "$T/tied.cfg" >"$T/long.cfg"
expect_fail 3 "block_size = 300000 is longer than the data: /train/tokens holds [0-9]* tokens, and a window needs 300001" \
  2 "$fm" --model "$T/long.cfg"
expect_fail 3 "a token dataset (dtrain-prep --text) needs a model that starts with \[embedding\]" 2 "$fm" --model cnn
img=$(fm_small) || exit $?
expect_fail 3 "embedding: expects windows of tokens (a dataset from dtrain-prep --text); found an input of 28x28x1" \
  2 "$img" --model "$T/tied.cfg"
expect_fail 2 "--pipeline-stages 2: model .*tied.cfg's lm_head shares the embedding's table (tied = 1)" 2 "$fm" \
  --model "$T/tied.cfg" --pipeline-stages 2
# Token files dtrain-prep would not write (h5py): a vocabulary past uint16's
# 65536 in a uint16 stream, a token id not below the vocabulary.
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 - "$T" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
for name, vocab, toks in (("wide", 70000, np.arange(200) % 300), ("oob", 100, np.r_[np.arange(150) % 100, [100], np.arange(49)])):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        f.attrs["num_classes"] = np.int32(vocab)
        f.create_dataset("train/tokens", data=np.asarray(toks, dtype=np.uint16))
PY
  expect_fail 3 "wide.h5: num_classes = 70000 tokens do not fit /train/tokens's uint16 (at most 65536)" 1 "$T/wide.h5" \
    --model "$T/tied.cfg"
  expect_fail 3 "oob.h5: /train/tokens\[150\] = 100, but num_classes (the vocabulary) is 100" 1 "$T/oob.h5" \
    --model "$T/tied.cfg"
else
  echo "note: /usr/bin/python3 has no h5py (python3-h5py): the malformed token files are not tested"
fi
rm -rf "$T"
finish
