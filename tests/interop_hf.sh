#!/bin/sh
# interop_hf.sh: dtrain --export-hf DIR writes a Hugging Face GPT-2 that the
# real transformers (4.47.1 on Debian's CPU torch, tests/interop/setup-hf.sh:
# a venv made once) loads and runs as dtrain does.
#
# - A 2-block GPT (width 32, 4 heads, block 32), tied and untied, trained 4
#   steps on text tokenized by dtrain-prep --text (bpe:50 and byte), at 1
#   and 2 ranks with the parameters gathered from fsdp shards and pipeline
#   stages: GPT2LMHeadModel.from_pretrained(DIR) has no missing, unexpected
#   or mismatched keys (lm_head.weight in the file only when untied), and
#   its logits on 32 fixed token ids equal dtrain's own (dtrain-generate
#   CKPT --prompt-tokens IDS --logits, from the run's checkpoint) to 1e-4
#   relative: max |difference| / max |logit|. Negative control: another
#   run's logits differ by more.
# - GPT2Tokenizer and GPT2TokenizerFast from DIR encode a sentence to the
#   ids dtrain-prep gave it (the sentence is the first --text file, so its
#   tokens start the stream), decode them back to it, and add no token.
# - A merge table in which two tokens have the same bytes: a warning, and
#   vocab.json names the first of them.
# - Refused before training with one message, exit 2, nothing written: an
#   image model, and a DIR that exists and is not empty.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/interop_hf.$$
rm -rf "$T"; mkdir -p "$T"
if ! command -v bible >/dev/null 2>&1; then
  echo "SKIP: bible (Debian package bible-kjv) is not installed: no real text"; exit 77
fi
venv=${HF_VENV:-$TOP_BUILDDIR/.venv-hf}
if ! sh "$TOP_SRCDIR/tests/interop/setup-hf.sh" "$venv" >"$T/setup.log" 2>&1; then
  echo "SKIP: transformers could not be installed into $venv (no python3-torch, or no PyPI?):"; tail -3 "$T/setup.log"
  rm -rf "$T"; exit 77
fi
py=$venv/bin/python
gen=${DTRAIN_GENERATE:-$TOP_BUILDDIR/dtrain-generate}
[ -x "$gen" ] || { fail "$gen is not built"; finish; }

printf "In the beginning God created the heaven and the earth. Don't panic: 42 apples, 7 days!\n" >"$T/sentence.txt"
bible gen1:1-gen50:26 | head -c 60000 >"$T/kjv.txt"
for tk in bpe:50 byte; do
  "$DTRAIN_PREP" --quiet --text "$T/sentence.txt" "$T/kjv.txt" --tokenizer "$tk" "$T/${tk%%:*}.h5" ||
    { fail "dtrain-prep --text --tokenizer $tk"; finish; }
done
small_gpt "$T/tied.cfg" 1
small_gpt "$T/untied.cfg" 0

# check NAME DATA TIED NP [OPTIONS]: train, export, and compare in transformers.
check() {
  name=$1 data=$T/$2.h5 cfg=$T/$3.cfg np=$4; shift 4
  d=$T/$name.hf ck=$T/$name.ck
  run_np "$np" "$data" --model "$cfg" --epochs 1 --steps-per-epoch 4 --batch-size 8 --optimizer adam --lr 3e-3 \
    --no-validation --checkpoint-dir "$ck" --export-hf "$d" "$@"
  if [ "$rc" != 0 ] || [ ! -f "$d/model.safetensors" ]; then fail "$name: dtrain --export-hf: rc=$rc"; cat "$err" >&2; return; fi
  left=$(ls -d "$d".tmp-* 2>/dev/null)
  [ -z "$left" ] || fail "$name: a temporary directory is left: $left"
  V=$(sed -n 's/.*"vocab_size": \([0-9]*\).*/\1/p' "$d/config.json")
  ids=$(awk -v V="$V" 'BEGIN { for (i = 0; i < 32; i++) printf "%s%d", i ? "," : "", (i * 37 + 11) % V }')
  echo "$ids" >"$T/$name.ids"
  if ! "$gen" "$ck" --prompt-tokens "$ids" --logits >"$T/$name.logits" 2>"$T/gen.err"; then
    fail "$name: dtrain-generate $ck --logits failed"; cat "$T/gen.err" >&2; return
  fi
  r=$("$py" "$TOP_SRCDIR/tests/interop/hf_gpt2.py" --dir "$d" --ids "$ids" --logits "$T/$name.logits" \
      --data "$data" --sentence "$T/sentence.txt" 2>"$T/py.err")
  prc=$?
  rel=$(echo "$r" | sed -n 's/^RESULT rel=\([^ ]*\) .*against=\([a-z-]*\).*/\1 (against \2)/p')
  if [ "$prc" = 0 ] && [ -n "$rel" ]; then
    pass "$name: transformers loads the export, no missing/unexpected keys; logits within $rel relative;" \
      "GPT2Tokenizer and GPT2TokenizerFast give dtrain-prep's ids"
  else
    fail "$name: hf_gpt2.py exit $prc: $r"; cat "$T/py.err" >&2
  fi
}
check tied-bpe bpe tied 1
check untied-bpe-fsdp bpe untied 2 --strategy fsdp --bucket-mb 0.05
check tied-byte-sharded byte tied 2 --strategy sharded
check untied-byte-pipeline byte untied 2 --pipeline-stages 2 --micro-batches 2
if [ -f "$T/untied-bpe-fsdp.logits" ] && [ -d "$T/tied-bpe.hf" ]; then # the same ids and vocabulary
  r=$("$py" "$TOP_SRCDIR/tests/interop/hf_gpt2.py" --dir "$T/tied-bpe.hf" --ids "$(cat "$T/tied-bpe.ids")" \
      --logits "$T/untied-bpe-fsdp.logits" 2>"$T/py.err")
  prc=$?
  [ "$prc" = 3 ] && pass "negative control: another model's logits are told apart ($(echo "$r" | cut -d' ' -f2))" ||
    fail "negative control: another model's logits: exit $prc, $r"
fi

# Tokens 258 and 259 both decode to "abc": warned, and vocab.json names 258.
if /usr/bin/python3 - "$T/dup.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["num_classes"] = np.int32(260)
    f.attrs["kind"] = np.bytes_("tokens")
    f.attrs["tokenizer"] = np.bytes_("bpe")
    f["tokenizer/merges"] = np.array([[97, 98], [98, 99], [256, 99], [97, 257]], np.int32)
    f["train/tokens"] = (np.arange(600) % 260).astype(np.uint16)
EOF
then
  run_np 1 "$T/dup.h5" --model "$T/tied.cfg" --epochs 1 --steps-per-epoch 1 --batch-size 2 --no-validation \
    --export-hf "$T/dup.hf"
  if [ "$rc" = 0 ] && grep -q "warning: --export-hf .*1 token decodes to the bytes of an earlier one (the first: 259, as 258)" "$err" &&
     grep -q '^"abc": 258$' "$T/dup.hf/vocab.json" && [ "$(grep -c '": ' "$T/dup.hf/vocab.json")" = 259 ] &&
     grep -q '^a bc$' "$T/dup.hf/merges.txt"; then
    pass "tokens of the same bytes: warned, vocab.json names the first (258)"
  else
    fail "tokens of the same bytes: rc=$rc"; cat "$err" >&2
  fi
else
  echo "note: /usr/bin/python3 could not write the merge table with h5py: the same-bytes case not run"
fi

# Refusals: before training, one message, exit 2, nothing written.
expect_fail 2 "--export-hf .*/img.hf: model cnn is not a GPT-2 language model: its first layer is conv2d, not an embedding" \
  1 --synthetic 28x28x1:10:256 --model cnn --epochs 1 --export-hf "$T/img.hf"
[ ! -e "$T/img.hf" ] && [ -z "$(ls -d "$T"/img.hf.tmp-* 2>/dev/null)" ] || fail "image model: something was written"
mkdir -p "$T/full.hf" && echo keep >"$T/full.hf/mine"
expect_fail 2 "--export-hf .*/full.hf: the directory exists and is not empty; the export writes a new one" \
  2 "$T/bpe.h5" --model "$T/tied.cfg" --epochs 1 --export-hf "$T/full.hf"
[ "$(ls "$T/full.hf")" = mine ] && [ -z "$(ls -d "$T"/full.hf.tmp-* 2>/dev/null)" ] ||
  fail "non-empty DIR: its files changed, or a temporary is left"
grep -q "^Epoch" "$out" && fail "non-empty DIR: refused only after training"
rm -rf "$T"
finish
