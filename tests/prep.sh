#!/bin/sh
# prep.sh: end-to-end and bad-input tests for dtrain-prep.
#
# Converts a slice of Fashion-MNIST and checks the HDF5 layout and attributes
# with h5ls/h5dump, checks sharding, then feeds bad command lines and bad
# input files and checks each exit code, that stderr names the flag or file,
# and that no temporary or half-written output is left behind. All failures
# are reported (one FAIL line each) before the script exits non-zero.
# Skips (exit 77) when the dataset-fashion-mnist package is not installed.
#
# Environment (set by `make check`): DTRAIN_PREP, TEST_TMP; optional
# FASHION_MNIST_DIR to use another copy of the dataset.
set -u

SRC=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
PREP=${DTRAIN_PREP:?DTRAIN_PREP must name the dtrain-prep binary}

if [ ! -d "$SRC" ]; then
    echo "SKIP: $SRC not found (install the Debian package dataset-fashion-mnist)"
    exit 77
fi
for tool in h5ls h5dump; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "FAIL: $tool not found (install the Debian package hdf5-tools)" >&2
        exit 1
    fi
done

T=${TEST_TMP:?TEST_TMP must name a scratch directory}/prep.$$
rm -rf "$T" && mkdir -p "$T" || { echo "FAIL: cannot create $T" >&2; exit 1; }

nfail=0
fail() {
    echo "FAIL: $*" >&2
    nfail=$((nfail + 1))
}

# Run "$@" with output in $T/out and $T/err; true if it exited 0.
run() {
    "$@" >"$T/out" 2>"$T/err"
}

# expect_fail CODE PATTERN cmd...: cmd must exit CODE and print PATTERN
# (a fixed string) on stderr, and leave no temporary file in $T.
expect_fail() {
    code=$1 pattern=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -ne "$code" ]; then
        fail "expected exit $code, got $rc from: $* (stderr: $(cat "$T/err"))"
    elif ! grep -qF -e "$pattern" "$T/err"; then
        fail "stderr of '$*' lacks '$pattern' (stderr: $(cat "$T/err"))"
    else
        echo "ok: exit $code, '$pattern': $*"
    fi
    no_temp_files "$*"
}

no_temp_files() {
    leftover=$(find "$T" -name '*.tmp.*' | head -n 3)
    [ -z "$leftover" ] || fail "temporary files left behind after '$1': $leftover"
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
    if [ "$2" = "$3" ]; then
        echo "ok: $1 = $3"
    else
        fail "$1: expected '$2', found '$3'"
    fi
}

# Dataset shape as "d0,d1,...", e.g. 2000,28,28,1.
shape() {
    h5ls "$1/$2" 2>/dev/null | sed -n 's/.*Dataset {\([^}]*\)}.*/\1/p' | tr -d ' '
}

# First value of a root attribute (numbers, or a quoted string).
attr() {
    h5dump -y -a "/$2" "$1" 2>/dev/null | sed -n '/DATA {/,/}/p' | sed -n '2p' | sed 's/^ *//'
}

# Number of strings in a string-array root attribute.
attr_count() {
    h5dump -y -a "/$2" "$1" 2>/dev/null | sed -n '/DATA {/,/^ *}/p' | grep -o '"[^"]*"' | wc -l | tr -d ' '
}

# ---- A limited conversion: layout and attributes --------------------------------
FM="$T/fm.h5"
if run "$PREP" --limit-train 2000 --limit-test 500 "$FM"; then
    expect_eq "/train/images shape" "2000,28,28,1" "$(shape "$FM" train/images)"
    expect_eq "/train/labels shape" "2000" "$(shape "$FM" train/labels)"
    expect_eq "/test/images shape" "500,28,28,1" "$(shape "$FM" test/images)"
    expect_eq "/test/labels shape" "500" "$(shape "$FM" test/labels)"
    expect_eq "num_classes" "10" "$(attr "$FM" num_classes)"
    expect_eq "format_version" "1" "$(attr "$FM" format_version)"
    expect_eq "class_names count" "10" "$(attr_count "$FM" class_names)"
    attr "$FM" class_names | grep -qF '"T-shirt/top"' ||
        fail "class_names does not start with \"T-shirt/top\": $(attr "$FM" class_names)"
    attr "$FM" source | grep -qF "$SRC/train-images-idx3-ubyte" ||
        fail "source attribute does not name $SRC/train-images-idx3-ubyte: $(attr "$FM" source)"
    h5dump -H "$FM" | grep -q 'H5T_STD_U8LE' || fail "/train/images is not H5T_STD_U8LE"
    h5dump -p -H -d /train/images "$FM" | grep -q CONTIGUOUS ||
        fail "/train/images is not stored contiguously"
    grep -qF "$FM" "$T/out" || fail "summary does not name $FM: $(cat "$T/out")"
else
    fail "converting $SRC with --limit-train 2000 --limit-test 500 failed: $(cat "$T/err")"
fi
no_temp_files "the limited conversion"

# ---- Plain (not gzip) IDX input through explicit paths --------------------------
if gzip -dc "$SRC/t10k-images-idx3-ubyte.gz" >"$T/imgs" 2>/dev/null &&
   gzip -dc "$SRC/t10k-labels-idx1-ubyte.gz" >"$T/lbls" 2>/dev/null; then
    if run "$PREP" --quiet --train-images "$T/imgs" --train-labels "$T/lbls" "$T/plain.h5"; then
        expect_eq "plain IDX /train/images shape" "10000,28,28,1" "$(shape "$T/plain.h5" train/images)"
        expect_eq "train-only file has no /test" "" "$(shape "$T/plain.h5" test/images)"
        [ -s "$T/out" ] && fail "--quiet printed: $(cat "$T/out")"
    else
        fail "converting plain IDX files failed: $(cat "$T/err")"
    fi
else
    fail "cannot decompress $SRC/t10k-*.gz into $T"
fi

# ---- Sharding --------------------------------------------------------------------
if run "$PREP" --limit-train 2000 --limit-test 500 --shards 3 "$T/sh.h5"; then
    train_sum=0 test_sum=0
    for i in 0 1 2; do
        f="$T/sh-0000$i-of-00003.h5"
        if [ ! -f "$f" ]; then
            fail "--shards 3 did not write $f"
            continue
        fi
        grep -qF "$f" "$T/out" || fail "--shards 3 summary does not name $f"
        n=$(shape "$f" train/labels)
        m=$(shape "$f" test/labels)
        train_sum=$((train_sum + ${n:-0}))
        test_sum=$((test_sum + ${m:-0}))
        expect_eq "$f shard_index" "$i" "$(attr "$f" shard_index)"
        expect_eq "$f shard_count" "3" "$(attr "$f" shard_count)"
        expect_eq "$f num_classes" "10" "$(attr "$f" num_classes)"
    done
    expect_eq "train samples over 3 shards" "2000" "$train_sum"
    expect_eq "test samples over 3 shards" "500" "$test_sum"
    expect_eq "first shard train count (2000 = 667+667+666)" "667" "$(shape "$T/sh-00000-of-00003.h5" train/labels)"
else
    fail "--shards 3 failed: $(cat "$T/err")"
fi

# ---- Bad command lines: exit 2 ----------------------------------------------------
expect_fail 2 "--shards" "$PREP" --shards 0 "$T/bad.h5"
expect_fail 2 "--no-such-flag" "$PREP" --no-such-flag "$T/bad.h5"
expect_fail 2 "--limit-train" "$PREP" --limit-train abc "$T/bad.h5"
expect_fail 2 "OUTPUT" "$PREP" --limit-train 10
expect_fail 2 "--shards 2001" "$PREP" --limit-train 2000 --limit-test 500 --shards 2001 "$T/bad.h5"
expect_fail 2 "--limit-train 70000" "$PREP" --limit-train 70000 "$T/bad.h5"
expect_fail 2 "--train-labels" "$PREP" --train-images "$T/imgs" "$T/bad.h5"

# An existing output is kept, byte for byte, unless --force is given.
if [ -f "$FM" ]; then
    cp "$FM" "$T/fm.copy"
    expect_fail 2 "$FM: output already exists" "$PREP" --limit-train 100 --limit-test 10 "$FM"
    cmp -s "$FM" "$T/fm.copy" || fail "a refused run changed the existing $FM"
    expect_fail 2 "$T/sh-00000-of-00003.h5: output already exists" \
        "$PREP" --limit-train 100 --limit-test 10 --shards 3 "$T/sh.h5"
    if run "$PREP" --force --limit-train 100 --limit-test 10 "$FM"; then
        expect_eq "--force rewrote /train/images" "100,28,28,1" "$(shape "$FM" train/images)"
    else
        fail "--force over an existing output failed: $(cat "$T/err")"
    fi
fi

# ---- Bad input data: exit 3 -------------------------------------------------------
expect_fail 3 "--source $T/no-such-dir" "$PREP" --source "$T/no-such-dir" "$T/bad.h5"
mkdir -p "$T/empty-dir"
expect_fail 3 "train-images-idx3-ubyte" "$PREP" --source "$T/empty-dir" "$T/bad.h5"
echo "not an idx file" >"$T/text.idx"
expect_fail 3 "$T/text.idx: not an IDX file" \
    "$PREP" --train-images "$T/text.idx" --train-labels "$T/lbls" "$T/bad.h5"
expect_fail 3 "$T/missing.idx: cannot open" \
    "$PREP" --train-images "$T/missing.idx" --train-labels "$T/lbls" "$T/bad.h5"
expect_fail 3 "has 10000 labels but" \
    "$PREP" --train-images "$SRC/train-images-idx3-ubyte.gz" --train-labels "$T/lbls" "$T/bad.h5"
expect_fail 3 "must be 3-D" \
    "$PREP" --train-images "$T/lbls" --train-labels "$T/lbls" "$T/bad.h5"
head -c 100000 "$T/imgs" >"$T/short.idx"
expect_fail 3 "$T/short.idx: truncated" \
    "$PREP" --train-images "$T/short.idx" --train-labels "$T/lbls" "$T/bad.h5"
expect_fail 3 "out of range for --classes 5" "$PREP" --classes 5 --limit-train 10 "$T/bad.h5"

# ---- Output that cannot be written: exit 1 -----------------------------------------
expect_fail 1 "$T/no-such-dir/x.h5: cannot create" "$PREP" --limit-train 10 "$T/no-such-dir/x.h5"

[ -e "$T/bad.h5" ] && fail "a failed run left $T/bad.h5 behind"
no_temp_files "all runs"

if run "$PREP" --version; then
    grep -q '^dtrain-prep [0-9]' "$T/out" || fail "--version printed: $(cat "$T/out")"
else
    fail "--version exited non-zero"
fi

if [ "$nfail" -ne 0 ]; then
    echo "prep.sh: $nfail check(s) failed; files kept in $T" >&2
    exit 1
fi
rm -rf "$T"
echo "prep.sh: all checks passed"
