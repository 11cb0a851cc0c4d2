#!/bin/sh
# prep.sh: end-to-end and bad-input tests for dtrain-prep.
#
# Writes --synthetic files and checks that dtrain (2 ranks) trains on them,
# one file or three shards, that the seed alone decides the bytes, that they
# hold the rows of dtrain's own --synthetic, and that a file larger than the
# address space the process may use is written (ulimit -v). Converts a slice
# of Fashion-MNIST and checks the HDF5 layout and attributes with
# h5ls/h5dump, checks sharding, then feeds bad command lines and bad
# input files and checks each exit code, that stderr names the flag or file,
# and that no temporary or half-written output is left behind. All failures
# are reported (one FAIL line each) before the script exits non-zero.
# Skips (exit 77) after the synthetic checks when the dataset-fashion-mnist
# package is not installed.
#
# Environment (set by `make check`): DTRAIN_PREP, DTRAIN, TOP_SRCDIR,
# MPIEXEC, MPIEXEC_FLAGS, TEST_TMP; optional FASHION_MNIST_DIR to use
# another copy of the dataset.
set -u

SRC=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
PREP=${DTRAIN_PREP:?DTRAIN_PREP must name the dtrain-prep binary}
: "${DTRAIN:?DTRAIN must name the dtrain binary}"
# run_np N ARGS: dtrain under the configured launcher, output in $out/$err,
# exit code in $rc. (This script's own fail/expect_fail replace common.sh's.)
# shellcheck source=tests/common.sh
. "${TOP_SRCDIR:?TOP_SRCDIR must name the source tree}/tests/common.sh"

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

# Dataset shape as h5dump -H prints it, as "d0,d1,...".
h5shape() {
    h5dump -H -d "/$2" "$1" 2>/dev/null |
        sed -n 's/.*DATASPACE *SIMPLE { ( \([^)]*\) ).*/\1/p' | tr -d ' '
}

# raw FILE DATASET OUT: the dataset's bytes into OUT.
raw() {
    h5dump -d "/$2" -b LE -o "$3" "$1" >/dev/null 2>&1 || fail "h5dump cannot read /$2 of $1"
}

# Step losses of a dtrain --verbose run, without the timings.
losses() {
    grep -E '^(step|Epoch)' "$1" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//'
}

# ---- Synthetic data: layout, dtrain reads it ---------------------------------------
SY="$T/syn.h5"
if run "$PREP" --synthetic 16x16x3:7:3000:500 "$SY"; then
    expect_eq "synthetic /train/images shape (h5dump -H)" "3000,16,16,3" "$(h5shape "$SY" train/images)"
    expect_eq "synthetic /train/labels shape" "3000" "$(h5shape "$SY" train/labels)"
    expect_eq "synthetic /test/images shape" "500,16,16,3" "$(h5shape "$SY" test/images)"
    expect_eq "synthetic /test/labels shape" "500" "$(h5shape "$SY" test/labels)"
    expect_eq "synthetic num_classes" "7" "$(attr "$SY" num_classes)"
    expect_eq "synthetic format_version" "1" "$(attr "$SY" format_version)"
    expect_eq "synthetic source" '"synthetic=16x16x3:7:3000:500 seed=42"' "$(attr "$SY" source)"
    h5dump -H "$SY" | grep -q 'H5T_STD_U8LE' || fail "synthetic /train/images is not H5T_STD_U8LE"
    h5dump -p -H -d /train/images "$SY" | grep -q CONTIGUOUS ||
        fail "synthetic /train/images is not stored contiguously"
    grep -q "^dtrain-prep: wrote $SY in [0-9.]* s: 2\.[0-9] MB at [0-9]* MB/s\$" "$T/out" ||
        fail "synthetic summary lacks the size and MB/s: $(cat "$T/out")"
else
    fail "--synthetic 16x16x3:7:3000:500 failed: $(cat "$T/err")"
fi

run_np 2 "$SY" --epochs 1 --batch-size 32
if [ "$rc" = 0 ] && grep -q '^dtrain .* 3000 training samples, validating on /test$' "$out" &&
   grep -q '^Epoch 1/1 - ' "$out"; then
    echo "ok: dtrain (2 ranks) trains one epoch on the synthetic file: $(grep '^dtrain ' "$out")"
else
    fail "dtrain on $SY: exit $rc: $(cat "$out" "$err")"
fi

# ---- Synthetic data: the seed decides the bytes --------------------------------------
if run "$PREP" --quiet --seed 42 --synthetic 16x16x3:7:3000:500 "$T/syn-42.h5"; then
    [ -s "$T/out" ] && fail "--synthetic --quiet printed: $(cat "$T/out")"
    if cmp -s "$SY" "$T/syn-42.h5"; then
        echo "ok: same seed, byte-identical files"
    else
        fail "two --synthetic runs with seed 42 wrote different files"
    fi
else
    fail "--synthetic --seed 42 failed: $(cat "$T/err")"
fi
if run "$PREP" --quiet --seed 7 --synthetic 16x16x3:7:3000:500 "$T/syn-7.h5"; then
    raw "$SY" train/images "$T/img-42" && raw "$T/syn-7.h5" train/images "$T/img-7"
    if [ ! -s "$T/img-42" ]; then
        fail "no raw /train/images from $SY"
    elif cmp -s "$T/img-42" "$T/img-7"; then
        fail "seeds 42 and 7 gave the same /train/images"
    else
        echo "ok: another seed, other pixels"
    fi
else
    fail "--synthetic --seed 7 failed: $(cat "$T/err")"
fi

# The file holds the rows dtrain --synthetic generates: the same losses.
if run "$PREP" --quiet --synthetic 16x16x3:7:3000 "$T/syn-train.h5"; then
    expect_eq "train-only synthetic file has no /test" "" "$(h5shape "$T/syn-train.h5" test/images)"
    run_np 2 "$T/syn-train.h5" --epochs 1 --batch-size 32 --verbose
    losses "$out" >"$T/loss-file"
    run_np 2 --synthetic 16x16x3:7:3000 --epochs 1 --batch-size 32 --verbose
    losses "$out" >"$T/loss-gen"
    if [ "$(grep -c '^step' "$T/loss-file")" -gt 40 ] && cmp -s "$T/loss-file" "$T/loss-gen"; then
        echo "ok: training on the file and on dtrain --synthetic gives the same losses"
    else
        fail "losses on $T/syn-train.h5 differ from dtrain --synthetic 16x16x3:7:3000"
        diff "$T/loss-file" "$T/loss-gen" | head >&2
    fi
else
    fail "--synthetic 16x16x3:7:3000 failed: $(cat "$T/err")"
fi

# ---- Synthetic data in shards: one dataset to dtrain ---------------------------------
if run "$PREP" --synthetic 16x16x3:7:3000:500 --shards 3 "$T/ssh.h5"; then
    shards="$T/ssh-00000-of-00003.h5 $T/ssh-00001-of-00003.h5 $T/ssh-00002-of-00003.h5"
    : >"$T/img-shards"
    for f in $shards; do
        [ -f "$f" ] || { fail "--synthetic --shards 3 did not write $f"; continue; }
        raw "$f" train/images "$T/img-one" && cat "$T/img-one" >>"$T/img-shards"
    done
    if cmp -s "$T/img-42" "$T/img-shards"; then
        echo "ok: 3 synthetic shards hold the single file's rows"
    else
        fail "the 3 synthetic shards' /train/images differ from the single file's"
    fi
    # shellcheck disable=SC2086
    run_np 2 $shards --epochs 1 --batch-size 32
    if [ "$rc" = 0 ] && grep -q '^dtrain .* 3000 training samples, validating on /test$' "$out"; then
        echo "ok: dtrain reads 3 synthetic shards as one dataset of 3000 samples"
    else
        fail "dtrain on 3 synthetic shards: exit $rc: $(cat "$out" "$err")"
    fi
else
    fail "--synthetic --shards 3 failed: $(cat "$T/err")"
fi

# ---- Synthetic data: bad specs (exit 2) and unwritable outputs (exit 1) ---------------
expect_fail 2 "--synthetic: expected HxWxC:CLASSES:NTRAIN or HxWxC:CLASSES:NTRAIN:NTEST, e.g. 32x32x3:10:50000:10000, found '32x32:10:100'" \
    "$PREP" --synthetic 32x32:10:100 "$T/bad.h5"
expect_fail 2 "found '32x32x3:10'" "$PREP" --synthetic 32x32x3:10 "$T/bad.h5"
expect_fail 2 "--synthetic 32x32x3:1:100: expected 2 to 256 classes (uint8 labels), found 1" \
    "$PREP" --synthetic 32x32x3:1:100 "$T/bad.h5"
expect_fail 2 "--synthetic 0x32x3:10:100: image sides must be in [1, 4096] and channels in [1, 64]" \
    "$PREP" --synthetic 0x32x3:10:100 "$T/bad.h5"
expect_fail 2 "--synthetic 32x32x3:10:0: expected 1 to 2^40 training samples, found 0" \
    "$PREP" --synthetic 32x32x3:10:0 "$T/bad.h5"
expect_fail 2 "--synthetic 32x32x3:10:100:0: expected 1 to 2^40 test samples" \
    "$PREP" --synthetic 32x32x3:10:100:0 "$T/bad.h5"
expect_fail 2 "--synthetic cannot be combined with --source" \
    "$PREP" --synthetic 8x8x1:4:100 --source "$SRC" "$T/bad.h5"
expect_fail 2 "--classes is not used with --synthetic" \
    "$PREP" --synthetic 8x8x1:4:100 --classes 4 "$T/bad.h5"
expect_fail 2 "--seed is only used with --synthetic" "$PREP" --seed 1 "$T/bad.h5"
expect_fail 2 "--seed: expected a whole number" "$PREP" --synthetic 8x8x1:4:100 --seed x "$T/bad.h5"
expect_fail 2 "--shards 4: more shards than the 3 test samples" \
    "$PREP" --synthetic 8x8x1:4:100:3 --shards 4 "$T/bad.h5"
expect_fail 1 "$T/no-such-dir/s.h5: cannot create the output (as temporary file $T/no-such-dir/s.h5.tmp." \
    "$PREP" --synthetic 8x8x1:4:100 "$T/no-such-dir/s.h5"
grep -qF "No such file or directory" "$T/err" || fail "no strerror in: $(cat "$T/err")"
# A write that fails halfway (49 MB against a 10-20 MB file-size limit).
# shellcheck disable=SC2016 # $0 and $@ are the inner shell's
expect_fail 1 "$T/fsz.h5: cannot write /train/images: File too large" \
    sh -c 'ulimit -f 20000 && exec "$0" "$@"' "$PREP" --synthetic 64x64x3:10:4000 "$T/fsz.h5"
[ -e "$T/fsz.h5" ] && fail "a failed --synthetic write left $T/fsz.h5 behind"

# ---- Synthetic data larger than the memory the process may use -----------------------
# 25600 samples of 64x64x3: 315 MB, under a 200 MB address-space limit
# (dtrain-prep needs about 100 MB of it: the libraries and one 64 MiB piece).
VLIM=200000
if ! sh -c "ulimit -v $VLIM && exec \"\$0\" --version" "$PREP" >/dev/null 2>&1; then
    echo "SKIP: the memory-bound write: dtrain-prep cannot start under ulimit -v $VLIM (a sanitizer build?)"
elif sh -c "ulimit -v $VLIM && exec dd if=/dev/zero of=/dev/null bs=300M count=1" >/dev/null 2>&1; then
    echo "SKIP: the memory-bound write: ulimit -v $VLIM does not stop a 300 MB allocation here"
elif run sh -c "ulimit -v $VLIM && exec \"\$0\" \"\$@\"" "$PREP" --synthetic 64x64x3:10:25600 "$T/large.h5"; then
    size=$(wc -c <"$T/large.h5")
    if [ "$size" -gt 300000000 ]; then
        echo "ok: $size bytes written under ulimit -v $VLIM: $(head -n 1 "$T/out")"
    else
        fail "the large synthetic file has $size bytes, expected over 300000000"
    fi
    expect_eq "large /train/images shape" "25600,64,64,3" "$(h5shape "$T/large.h5" train/images)"
else
    fail "a 315 MB synthetic file under ulimit -v $VLIM: $(cat "$T/err")"
fi
rm -f "$T/large.h5" "$T"/img-*
no_temp_files "the synthetic runs"

if [ ! -d "$SRC" ]; then
    if [ "$nfail" -ne 0 ]; then
        echo "prep.sh: $nfail check(s) failed; files kept in $T" >&2
        exit 1
    fi
    rm -rf "$T" "$TEST_TMP/out.$$" "$TEST_TMP/err.$$"
    echo "SKIP: $SRC not found (install the Debian package dataset-fashion-mnist); the --synthetic checks passed"
    exit 77
fi

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
rm -f "$TEST_TMP/out.$$" "$TEST_TMP/err.$$"
echo "prep.sh: all checks passed"
