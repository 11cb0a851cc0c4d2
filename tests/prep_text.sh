#!/bin/sh
# prep_text.sh: dtrain-prep --text, the token datasets (byte and BPE).
#
# Writes token datasets from small texts written here and checks them:
# the layout and types with h5dump (uint16 tokens, or uint32 past 65536
# tokens; contiguous; int32 merges), and with /usr/bin/python3 + h5py an
# independent reference in Python (GPT-2's pattern with re on bytes, the
# merges learned by a full recount per merge, GPT-2's bpe() as written):
# the same merges, the same tokens, and the tokens decode back to the
# concatenated files exactly. Then several files, determinism, the split,
# and every bad input: a missing, empty, non-UTF-8 file, a bad --tokenizer
# or --val-fraction, more merges than the text allows, a split of fewer
# than 2 tokens, conflicting options, an unwritable output: each must give
# one message with the file or flag, the documented exit code, and leave
# no output and no temporary behind. Exits 77 (after all else passed) where
# /usr/bin/python3 has no h5py (Debian package python3-h5py).
#
# Environment (set by `make check`): DTRAIN_PREP, TEST_TMP.
set -u

PREP=${DTRAIN_PREP:?DTRAIN_PREP must name the dtrain-prep binary}
PY=/usr/bin/python3
for tool in h5ls h5dump; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "FAIL: $tool not found (install the Debian package hdf5-tools)" >&2
        exit 1
    fi
done
have_h5py=1
"$PY" -c 'import h5py, numpy' 2>/dev/null || have_h5py=0

T=${TEST_TMP:?TEST_TMP must name a scratch directory}/prep_text.$$
rm -rf "$T" && mkdir -p "$T" || { echo "FAIL: cannot create $T" >&2; exit 1; }

nfail=0
fail() {
    echo "FAIL: $*" >&2
    nfail=$((nfail + 1))
}

run() {
    "$@" >"$T/out" 2>"$T/err"
}

no_temp_files() {
    leftover=$(find "$T" -name '*.tmp.*' | head -n 3)
    [ -z "$leftover" ] || fail "temporary files left behind after '$1': $leftover"
}

# expect_fail CODE PATTERN cmd...: cmd must exit CODE with PATTERN (a fixed
# string) on its one line of stderr (plus the --help hint for usage
# errors), and leave neither $T/bad.h5 nor a temporary file.
expect_fail() {
    code=$1 pattern=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    lines=$(grep -vc "^Try 'dtrain-prep --help'" "$T/err")
    if [ "$rc" -ne "$code" ]; then
        fail "expected exit $code, got $rc from: $* (stderr: $(cat "$T/err"))"
    elif ! grep -qF -e "$pattern" "$T/err"; then
        fail "stderr of '$*' lacks '$pattern' (stderr: $(cat "$T/err"))"
    elif [ "$lines" -ne 1 ] || ! grep -q '^dtrain-prep: ' "$T/err"; then
        fail "expected one 'dtrain-prep: ' line from '$*', found: $(cat "$T/err")"
    else
        echo "ok: exit $code: $(head -n 1 "$T/err")"
    fi
    [ -e "$T/bad.h5" ] && { fail "'$*' left $T/bad.h5 behind"; rm -f "$T/bad.h5"; }
    no_temp_files "$*"
}

expect_eq() {
    if [ "$2" = "$3" ]; then
        echo "ok: $1 = $3"
    else
        fail "$1: expected '$2', found '$3'"
    fi
}

# First value of a root attribute (a number, or a quoted string), as in prep.sh.
attr() {
    h5dump -y -a "/$2" "$1" 2>/dev/null | sed -n '/DATA {/,/}/p' | sed -n '2p' | sed 's/^ *//'
}

# Datatype and shape of a dataset as "TYPE d0,d1".
dtype_shape() {
    h5dump -H -d "/$2" "$1" 2>/dev/null | awk '
        /DATATYPE/ { t = $2 }
        /DATASPACE/ { s = $0; sub(/.*\( */, "", s); sub(/ *\).*/, "", s); gsub(/ /, "", s); if (s ~ /SCALAR/) s = "" }
        END { print t, s }' | sed 's/ *$//'
}

# The independent reference (h5py): check.py FILE VOCAB TOKENIZER VAL MODE TEXT...
# MODE: "full" (reference merges and tokens too) or "decode" (round trip only).
cat >"$T/check.py" <<'EOF'
import re, sys
from collections import Counter
import h5py, numpy as np

path, vocab, tokenizer, val, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5]
text_files = sys.argv[6:]
texts = [open(p, "rb").read() for p in text_files]
bad = []
def check(what, ok, detail=""):
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else ": " + detail))
    if not ok:
        bad.append(what)

L = rb"A-Za-z\x80-\xff"  # GPT-2's \p{L}, as dtrain-prep approximates it on bytes
PAT = re.compile(rb"'s|'t|'re|'ve|'m|'ll|'d| ?[" + L + rb"]+| ?[0-9]+| ?[^\s" + L + rb"0-9]+|\s+(?!\S)|\s+")
def chunks(b):
    return [m.group() for m in PAT.finditer(b)]

def merge(word, pair, z):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(z); i += 2
        else:
            out.append(word[i]); i += 1
    return out

def ref_train(n):  # every pair recounted for every merge
    words = Counter()
    for t in texts:
        words.update(chunks(t))
    ws = [[list(w), c] for w, c in words.items()]
    merges = []
    for m in range(n):
        cnt = Counter()
        for w, c in ws:
            for p in zip(w, w[1:]):
                cnt[p] += c
        if not cnt:
            break
        best = min(cnt, key=lambda p: (-cnt[p], p))
        merges.append(best)
        for wc in ws:
            wc[0] = merge(wc[0], best, 256 + m)
    return merges

def ref_encode(merges):  # GPT-2's bpe(), per chunk
    ranks = {tuple(p): i for i, p in enumerate(merges)}
    out = []
    for t in texts:
        for ch in chunks(t):
            word = list(ch)
            while len(word) > 1:
                best = min(set(zip(word, word[1:])), key=lambda p: ranks.get(p, 1 << 62))
                if best not in ranks:
                    break
                word = merge(word, best, 256 + ranks[best])
            out.extend(word)
    return out

f = h5py.File(path, "r")
s = lambda v: v.decode() if isinstance(v, bytes) else str(v)
check("kind = tokens", s(f.attrs["kind"]) == "tokens", s(f.attrs["kind"]))
check("tokenizer = " + tokenizer, s(f.attrs["tokenizer"]) == tokenizer, s(f.attrs["tokenizer"]))
check("num_classes = %d" % vocab, int(f.attrs["num_classes"]) == vocab, str(f.attrs["num_classes"]))
check("format_version = 1", int(f.attrs["format_version"]) == 1)
want = np.uint16 if vocab <= 65536 else np.uint32
train, test, merges = f["train/tokens"], f["test/tokens"], f["tokenizer/merges"]
check("token type %s" % np.dtype(want).name, train.dtype == want and test.dtype == want, str(train.dtype))
check("merges int32 [%d, 2]" % (vocab - 256), merges.dtype == np.int32 and merges.shape == (vocab - 256, 2),
      "%s %s" % (merges.dtype, merges.shape))
check("contiguous, unfiltered", train.chunks is None and test.chunks is None and not train.compression)
tokens = np.concatenate([train[...], test[...]]).astype(np.int64)
m = [tuple(int(x) for x in r) for r in merges[...]]
check("every token below num_classes", len(tokens) == 0 or int(tokens.max()) < vocab)
n_test = int(val * len(tokens) + 0.5)
check("test split = round(%g * %d) = %d tokens" % (val, len(tokens), n_test), len(test) == n_test, str(len(test)))

table = [bytes([i]) for i in range(256)]
for a, b in m:
    table.append(table[a] + table[b])
decoded = b"".join(table[t] for t in tokens)
check("train + test decode to the %d bytes of %s" % (sum(map(len, texts)), " + ".join(text_files)),
      decoded == b"".join(texts))
if mode == "full":
    if tokenizer == "bpe":
        ref = ref_train(vocab - 256)
        first = next((i for i, (x, y) in enumerate(zip(ref, m)) if x != y), None)
        check("merges = the reference trainer's (%d)" % len(ref), ref == m,
              "first difference at merge %s: %s vs %s" % (first, ref[first] if first is not None else "-",
                                                        m[first] if first is not None else "-"))
    check("tokens = GPT-2 bpe() with those merges", ref_encode(m) == tokens.tolist())
sys.exit(1 if bad else 0)
EOF

# py_check ARGS: the reference's lines, its failures counted.
py_check() {
    if [ "$have_h5py" = 0 ]; then
        return
    fi
    if "$PY" "$T/check.py" "$@" >"$T/py.out" 2>&1; then
        cat "$T/py.out"
    else
        grep '^ok:' "$T/py.out"
        fail "the h5py reference check of $1: $(grep -v '^ok:' "$T/py.out")"
    fi
}

# ---- A small text: English-like lines, contractions, digits, UTF-8 ----------------
TXT="$T/small.txt"
i=0
while [ $i -lt 40 ]; do
    printf 'In the beginning, line %d: it'"'"'s the heaven and the earth; we'"'"'ll see.\n' $i
    printf '  caf\303\251 na\303\257ve \342\200\224 the 2nd  time!!\n\n'
    i=$((i + 1))
done >"$TXT"
NBYTES=$(wc -c <"$TXT" | tr -d ' ')

if run "$PREP" --text "$TXT" --tokenizer byte "$T/byte.h5"; then
    expect_eq "byte: num_classes" "256" "$(attr "$T/byte.h5" num_classes)"
    expect_eq "byte: kind" '"tokens"' "$(attr "$T/byte.h5" kind)"
    expect_eq "byte: tokenizer" '"byte"' "$(attr "$T/byte.h5" tokenizer)"
    expect_eq "byte: format_version" "1" "$(attr "$T/byte.h5" format_version)"
    ntest=$(( (NBYTES + 5) / 10 ))
    expect_eq "byte: /train/tokens" "H5T_STD_U16LE $((NBYTES - ntest))" "$(dtype_shape "$T/byte.h5" train/tokens)"
    expect_eq "byte: /test/tokens" "H5T_STD_U16LE $ntest" "$(dtype_shape "$T/byte.h5" test/tokens)"
    expect_eq "byte: /tokenizer/merges" "H5T_STD_I32LE 0,2" "$(dtype_shape "$T/byte.h5" tokenizer/merges)"
    h5dump -p -H -d /train/tokens "$T/byte.h5" | grep -q CONTIGUOUS || fail "byte: /train/tokens is not contiguous"
    grep -q "^dtrain-prep: wrote $T/byte.h5 in " "$T/out" || fail "byte: no summary line: $(cat "$T/out")"
    grep -q "^  tokens $NBYTES (1.00 bytes each)" "$T/out" || fail "byte: summary lacks the token count: $(cat "$T/out")"
    py_check "$T/byte.h5" 256 byte 0.1 full "$TXT"
else
    fail "--tokenizer byte failed: $(cat "$T/err")"
fi

if run "$PREP" --text "$TXT" --tokenizer bpe:50 "$T/bpe.h5"; then
    expect_eq "bpe:50: num_classes" "306" "$(attr "$T/bpe.h5" num_classes)"
    expect_eq "bpe:50: tokenizer" '"bpe"' "$(attr "$T/bpe.h5" tokenizer)"
    expect_eq "bpe:50: /tokenizer/merges" "H5T_STD_I32LE 50,2" "$(dtype_shape "$T/bpe.h5" tokenizer/merges)"
    h5dump -p -H -d /test/tokens "$T/bpe.h5" | grep -q CONTIGUOUS || fail "bpe:50: /test/tokens is not contiguous"
    attr "$T/bpe.h5" source | grep -qF "text=$TXT tokenizer=bpe:50 val-fraction=0.1" ||
        fail "bpe:50: source attribute: $(attr "$T/bpe.h5" source)"
    py_check "$T/bpe.h5" 306 bpe 0.1 full "$TXT"
else
    fail "--tokenizer bpe:50 failed: $(cat "$T/err")"
fi

# Determinism: the same input and options, the same bytes.
if run "$PREP" --quiet --text "$TXT" --tokenizer bpe:50 "$T/bpe2.h5"; then
    [ -s "$T/out" ] && fail "--quiet printed: $(cat "$T/out")"
    if cmp -s "$T/bpe.h5" "$T/bpe2.h5"; then echo "ok: bpe:50 twice, byte-identical files"
    else fail "two bpe:50 runs wrote different files"; fi
else
    fail "the second bpe:50 run failed: $(cat "$T/err")"
fi

# ---- Several files, in order; both spellings; another split ------------------------
printf 'A second file, with its own words: rhythm, zephyr, quixotic.\n' >"$T/b.txt"
printf 'no newline at the end' >"$T/c.txt"
if run "$PREP" --text "$TXT" "$T/b.txt" "$T/c.txt" --tokenizer bpe:80 --val-fraction 0.25 "$T/multi.h5"; then
    grep -q "^  text  3 files, " "$T/out" || fail "3 files: summary says: $(cat "$T/out")"
    py_check "$T/multi.h5" 336 bpe 0.25 full "$TXT" "$T/b.txt" "$T/c.txt"
    if run "$PREP" --quiet --text "$TXT" --text "$T/b.txt" --text "$T/c.txt" --tokenizer bpe:80 \
           --val-fraction 0.25 "$T/multi2.h5"; then
        # The source attribute names the files the same way, so the bytes are the same.
        if cmp -s "$T/multi.h5" "$T/multi2.h5"; then echo "ok: --text A B C and --text A --text B --text C agree"
        else fail "--text A B C and --text A --text B --text C wrote different files"; fi
    else
        fail "--text repeated failed: $(cat "$T/err")"
    fi
else
    fail "three --text files failed: $(cat "$T/err")"
fi

# ---- uint32 tokens: a vocabulary past 65536 (65300 merges of random words) ---------
awk 'BEGIN { srand(5); for (i = 0; i < 60000; i++) { n = 3 + int(rand() * 7); w = "";
             for (k = 0; k < n; k++) w = w substr("abcdefghijklmnopqrstuvwxyz", 1 + int(rand() * 26), 1);
             printf "%s%s", (i ? " " : ""), w } print "" }' >"$T/words.txt"
if run "$PREP" --text "$T/words.txt" --tokenizer bpe:65300 "$T/u32.h5"; then
    expect_eq "bpe:65300: num_classes" "65556" "$(attr "$T/u32.h5" num_classes)"
    dtype_shape "$T/u32.h5" train/tokens | grep -q '^H5T_STD_U32LE ' ||
        fail "bpe:65300: /train/tokens is $(dtype_shape "$T/u32.h5" train/tokens), expected H5T_STD_U32LE"
    py_check "$T/u32.h5" 65556 bpe 0.1 decode "$T/words.txt"
else
    fail "--tokenizer bpe:65300 failed: $(cat "$T/err")"
fi
rm -f "$T/words.txt" "$T/u32.h5"

# ---- Lines of aaabdaaabac allow exactly 7 merges (tests/check_tokenizer.c has them) ---
printf 'aaabdaaabac\naaabdaaabac\naaabdaaabac\naaabdaaabac\n' >"$T/seven.txt"
if run "$PREP" --text "$T/seven.txt" --tokenizer bpe:7 --val-fraction 0.5 "$T/seven.h5"; then
    expect_eq "bpe:7 of aaabdaaabac lines: merges" "H5T_STD_I32LE 7,2" "$(dtype_shape "$T/seven.h5" tokenizer/merges)"
    expect_eq "bpe:7 of aaabdaaabac lines: /train/tokens" "H5T_STD_U16LE 4" "$(dtype_shape "$T/seven.h5" train/tokens)"
    py_check "$T/seven.h5" 263 bpe 0.5 full "$T/seven.txt"
else
    fail "bpe:7 on aaabdaaabac failed: $(cat "$T/err")"
fi

# ---- Bad input files: exit 3 -------------------------------------------------------
expect_fail 3 "$T/missing.txt: cannot open: No such file or directory" \
    "$PREP" --text "$T/missing.txt" --tokenizer byte "$T/bad.h5"
expect_fail 3 "$T/missing.txt: cannot open" \
    "$PREP" --text "$TXT" "$T/missing.txt" --tokenizer byte "$T/bad.h5"
: >"$T/empty.txt"
expect_fail 3 "$T/empty.txt: the file is empty, expected UTF-8 text" \
    "$PREP" --text "$TXT" --text "$T/empty.txt" --tokenizer bpe:10 "$T/bad.h5"
printf 'line one\nab\377cd\n' >"$T/latin.txt"
expect_fail 3 "$T/latin.txt: not UTF-8 text: byte 0xff at offset 11 (line 2, column 3): byte that never occurs in UTF-8" \
    "$PREP" --text "$T/latin.txt" --tokenizer byte "$T/bad.h5"
printf 'caf\351 au lait\n' >"$T/latin1.txt"
expect_fail 3 "$T/latin1.txt: not UTF-8 text: byte 0xe9 at offset 3 (line 1, column 4): incomplete sequence" \
    "$PREP" --text "$T/latin1.txt" --tokenizer bpe:5 "$T/bad.h5"
printf 'ok \355\240\200\n' >"$T/surrogate.txt"
expect_fail 3 "$T/surrogate.txt: not UTF-8 text: byte 0xed at offset 3 (line 1, column 4): UTF-16 surrogate" \
    "$PREP" --text "$T/surrogate.txt" --tokenizer byte "$T/bad.h5"
printf 'ends in \342\202' >"$T/cut.txt"
expect_fail 3 "$T/cut.txt: not UTF-8 text: byte 0xe2 at offset 8 (line 1, column 9): incomplete sequence" \
    "$PREP" --text "$T/cut.txt" --tokenizer byte "$T/bad.h5"
mkdir -p "$T/dir.txt"
expect_fail 3 "$T/dir.txt: cannot open: is a directory" "$PREP" --text "$T/dir.txt" --tokenizer byte "$T/bad.h5"
printf 'ab\n' >"$T/three.txt"
expect_fail 3 "$T/three.txt: the text gives only 3 tokens; a token dataset needs at least 4" \
    "$PREP" --text "$T/three.txt" --tokenizer byte "$T/bad.h5"

# ---- Bad values: exit 2 --------------------------------------------------------------
expect_fail 2 "--tokenizer: expected byte or bpe:N (N merges, e.g. bpe:4096), found 'bpe'" \
    "$PREP" --text "$TXT" --tokenizer bpe "$T/bad.h5"
expect_fail 2 "found 'bpe:x12'" "$PREP" --text "$TXT" --tokenizer bpe:x12 "$T/bad.h5"
expect_fail 2 "found 'bpe:-3'" "$PREP" --text "$TXT" --tokenizer bpe:-3 "$T/bad.h5"
expect_fail 2 "found 'gpt2'" "$PREP" --text "$TXT" --tokenizer gpt2 "$T/bad.h5"
expect_fail 2 "--tokenizer bpe:0: expected 1 to 2147483391 merges" \
    "$PREP" --text "$TXT" --tokenizer bpe:0 "$T/bad.h5"
expect_fail 2 "--tokenizer bpe:2147483392: expected 1 to 2147483391 merges (the vocabulary, 256 + N tokens, must fit the int32 token ids)" \
    "$PREP" --text "$TXT" --tokenizer bpe:2147483392 "$T/bad.h5"
expect_fail 2 "--tokenizer bpe:99999999999999999999: expected 1 to 2147483391 merges" \
    "$PREP" --text "$TXT" --tokenizer bpe:99999999999999999999 "$T/bad.h5"
expect_fail 2 "--tokenizer bpe:8: the text allows only 7 merges (after them every chunk of it is a single token); ask for at most bpe:7" \
    "$PREP" --text "$T/seven.txt" --tokenizer bpe:8 --val-fraction 0.5 "$T/bad.h5"
expect_fail 2 "--tokenizer bpe:2147483391: the text allows only 7 merges" \
    "$PREP" --text "$T/seven.txt" --tokenizer bpe:2147483391 --val-fraction 0.5 "$T/bad.h5"
printf 'a.b,c;d!' >"$T/singles.txt"
expect_fail 2 "--tokenizer bpe:1: the text allows only 0 merges (after them every chunk of it is a single token); use --tokenizer byte" \
    "$PREP" --text "$T/singles.txt" --tokenizer bpe:1 "$T/bad.h5"
for v in 0 1 1.5 -0.1 abc nan 0.5x ""; do
    expect_fail 2 "--val-fraction: expected a number between 0 and 1 (both excluded), found '$v'" \
        "$PREP" --text "$TXT" --tokenizer byte --val-fraction "$v" "$T/bad.h5"
done
printf 'ten bytes\n' >"$T/ten.txt"
expect_fail 2 "--val-fraction 0.1: the 10 tokens split into 9 for training and 1 for validation; each split needs at least 2" \
    "$PREP" --text "$T/ten.txt" --tokenizer byte "$T/bad.h5"
expect_fail 2 "--val-fraction 0.9: the 10 tokens split into 1 for training and 9 for validation" \
    "$PREP" --text "$T/ten.txt" --tokenizer byte --val-fraction 0.9 "$T/bad.h5"

# ---- Conflicting or missing options: exit 2 -------------------------------------------
expect_fail 2 "--text needs --tokenizer byte or --tokenizer bpe:N" "$PREP" --text "$TXT" "$T/bad.h5"
expect_fail 2 "--tokenizer is only used with --text" "$PREP" --tokenizer byte "$T/bad.h5"
expect_fail 2 "--val-fraction is only used with --text" \
    "$PREP" --synthetic 8x8x1:4:100 --val-fraction 0.2 "$T/bad.h5"
expect_fail 2 "--text cannot be combined with --synthetic" \
    "$PREP" --text "$TXT" --tokenizer byte --synthetic 8x8x1:4:100 "$T/bad.h5"
expect_fail 2 "--text cannot be combined with --shards" \
    "$PREP" --text "$TXT" --tokenizer byte --shards 2 "$T/bad.h5"
expect_fail 2 "--text cannot be combined with --classes" \
    "$PREP" --text "$TXT" --tokenizer byte --classes 10 "$T/bad.h5"
expect_fail 2 "text file '$T/b.txt' is an operand, but --text is given 2 times" \
    "$PREP" --text "$TXT" --text "$T/c.txt" "$T/b.txt" --tokenizer byte "$T/bad.h5"
expect_fail 2 "option '--text' needs a value" "$PREP" --tokenizer byte --text
expect_fail 2 "missing the OUTPUT.h5 operand" "$PREP" --text "$TXT" --tokenizer byte
cp "$TXT" "$T/input-copy.txt"
expect_fail 2 "$T/input-copy.txt: the output is also a --text input file" \
    "$PREP" --force --text "$TXT" "$T/input-copy.txt" --tokenizer byte "$T/input-copy.txt"
cmp -s "$TXT" "$T/input-copy.txt" || fail "--force with the output among the inputs changed that input"
cp "$T/byte.h5" "$T/keep.h5"
expect_fail 2 "$T/byte.h5: output already exists (use --force to overwrite it)" \
    "$PREP" --text "$TXT" --tokenizer bpe:5 "$T/byte.h5"
cmp -s "$T/byte.h5" "$T/keep.h5" || fail "a refused run changed the existing $T/byte.h5"
if run "$PREP" --force --quiet --text "$TXT" --tokenizer bpe:5 "$T/byte.h5"; then
    expect_eq "--force rewrote it: num_classes" "261" "$(attr "$T/byte.h5" num_classes)"
else
    fail "--force over an existing output failed: $(cat "$T/err")"
fi

# ---- Output that cannot be written: exit 1, nothing left -------------------------------
expect_fail 1 "$T/no-such-dir/t.h5: cannot create the output (as temporary file $T/no-such-dir/t.h5.tmp." \
    "$PREP" --text "$TXT" --tokenizer byte "$T/no-such-dir/t.h5"
# A write that fails halfway: 6 MB of uint16 tokens against a 1-2 MB file-size limit.
i=0
while [ $i -lt 25 ]; do cat "$TXT"; i=$((i + 1)); done >"$T/big1.txt"
i=0
while [ $i -lt 25 ]; do cat "$T/big1.txt"; i=$((i + 1)); done >"$T/big.txt"
# shellcheck disable=SC2016 # $0 and $@ are the inner shell's
expect_fail 1 "$T/bad.h5: cannot write /train/tokens: File too large" \
    sh -c 'ulimit -f 2000 && exec "$0" "$@"' "$PREP" --text "$T/big.txt" --tokenizer byte "$T/bad.h5"
rm -f "$T/big.txt" "$T/big1.txt"

# ---- --help names the options ------------------------------------------------------------
if run "$PREP" --help; then
    for opt in "--text FILE" "--tokenizer byte" "--tokenizer bpe:N" "--val-fraction F"; do
        grep -qF -e "$opt" "$T/out" || fail "--help does not mention '$opt'"
    done
else
    fail "--help exited non-zero"
fi
no_temp_files "all runs"

if [ "$nfail" -ne 0 ]; then
    echo "prep_text.sh: $nfail check(s) failed; files kept in $T" >&2
    exit 1
fi
rm -rf "$T"
if [ "$have_h5py" = 0 ]; then
    echo "SKIP: /usr/bin/python3 cannot import h5py (Debian package python3-h5py): the reference checks did not run; all others passed"
    exit 77
fi
echo "prep_text.sh: all checks passed"
