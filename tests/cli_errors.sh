#!/bin/sh
# cli_errors.sh: bad command lines and bad input files, each at 2 ranks.
#
# Every case must give exactly one "dtrain: error:" line (from rank 0) that
# names the flag or file and what was expected, the documented exit code on
# every rank (mpirun passes it on), and no hang (a timeout fails the case).
. "$TOP_SRCDIR/tests/common.sh"

T=$TEST_TMP/cli.$$
mkdir -p "$T"
for kind in good no-train-images length-mismatch bad-label wrong-rank float-images not-hdf5 small-images; do
  "$MKFIXTURE" "$kind" "$T/$kind.h5" 64 >/dev/null || { echo "mkfixture $kind failed"; exit 99; }
done
good=$T/good.h5

# --- the command line: exit 2 ---
expect_fail 2 "unknown option '--bogus'" 2 "$good" --bogus
expect_fail 2 "^dtrain: error: --epochs: expected an integer in \[1, .*found -1" 2 "$good" --epochs -1
expect_fail 2 "--epochs: expected an integer, found 'ten'" 2 "$good" --epochs ten
expect_fail 2 "--batch-size: expected an integer in \[1, .*found 0" 2 "$good" --batch-size 0
expect_fail 2 "--epochs: missing value" 2 "$good" --epochs
expect_fail 2 "missing INPUT.h5" 2
expect_fail 2 "--model: expected cnn, mlp or a model file (.cfg), found 'resnet'" 2 "$good" --model resnet
expect_fail 2 "--optimizer: expected adam, adamw or sgd, found 'lion'" 2 "$good" --optimizer lion
expect_fail 2 "--lr: expected a positive number, found 0" 2 "$good" --lr 0
expect_fail 2 "--dropout: expected a number in \[0, 1), found 1" 2 "$good" --dropout 1
expect_fail 2 "--momentum: only meaningful with --optimizer sgd" 2 "$good" --momentum 0.9
expect_fail 2 "--threads: expected an integer in \[1, 1024\], found 0" 2 "$good" --threads 0
expect_fail 2 "--shard-policy: expected auto, data or file, found 'rows'" 2 "$good" --shard-policy rows
expect_fail 2 "--shard-policy file: 1 shard file for 2 ranks" 2 "$good" --shard-policy file
expect_fail 2 "--allreduce: expected auto, mpi, ring or hier, found 'tree'" 2 "$good" --allreduce tree
expect_fail 2 "--strategy: expected auto, mirrored, multi-worker, central-storage, sharded, fsdp or parameter-server, found 'horovod'" 2 "$good" --strategy horovod
expect_fail 2 "--strategy tpu: TPUStrategy has no counterpart on MPI clusters" 2 "$good" --strategy tpu
expect_fail 2 "--num-ps 2: the parameter server needs at least one worker besides its 2 server ranks, and the job has 2 ranks" \
  2 "$good" --strategy parameter-server --num-ps 2
expect_fail 2 "--num-ps 1: the parameter server needs at least one worker besides its 1 server rank, and the job has 1 rank" \
  1 "$good" --strategy parameter-server
expect_fail 2 "--ps-mode: expected async, ssp or sync, found 'lazy'" 2 "$good" --ps-mode lazy
expect_fail 2 "--staleness: expected an integer in \[0, .*found -1" 2 "$good" --staleness -1
expect_fail 2 "--ps-transport: expected auto, one-sided or two-sided, found 'rdma'" 2 "$good" --ps-transport rdma
expect_fail 1 "preflight: shared memory inside each node: --ranks-per-node: 3 is more than the 2 ranks of the job" 2 "$good" --preflight --ranks-per-node 3
expect_fail 2 "--strategy mirrored: the ranks span 2 nodes x 1 rank (emulated); .*use --strategy multi-worker" \
  2 "$good" --strategy mirrored --ranks-per-node 1
expect_fail 2 "--grad-compression: expected none, fp16, bf16 or powersgd:R, found 'int8'" 2 "$good" --grad-compression int8
expect_fail 2 "--compress-cross-only: needs --grad-compression" 2 "$good" --compress-cross-only
expect_fail 2 "--allreduce mpi: MPI_Allreduce cannot carry 16-bit gradients" 2 "$good" --allreduce mpi --grad-compression bf16
expect_fail 2 "--ranks-per-node: 3 is more than the 2 ranks of the job" 2 "$good" --ranks-per-node 3
expect_fail 2 "--bucket-mb: expected a number in \[0, 65536\], found -1" 2 "$good" --bucket-mb -1
expect_fail 2 "--prefetch: expected an integer in \[0, 64\], found -1" 2 "$good" --prefetch -1
expect_fail 2 "--prefetch: expected an integer, found 'two'" 2 "$good" --prefetch two
expect_fail 2 "--map-threads: expected auto or a thread count in 1..64, found '0'" 2 "$good" --map-threads 0
expect_fail 2 "--map-threads: expected auto or a thread count in 1..64, found 'many'" 2 "$good" --map-threads many
expect_fail 2 "--map-threads: expected auto or a thread count in 1..64, found '65'" 2 "$good" --map-threads 65
expect_fail 2 "--cache-limit: expected an integer in \[1, .*found 0" 2 "$good" --cache --cache-limit 0
expect_fail 2 "--cache-limit: expected an integer, found '1G'" 2 "$good" --cache --cache-limit 1G
expect_fail 2 "--cache-limit: needs --cache" 2 "$good" --cache-limit 64
expect_fail 2 "--allreduce-table: cannot open $T/none.table: No such file" 2 "$good" --allreduce-table "$T/none.table"
printf '0 0 0 mpi\n0 0 oops hier\n' >"$T/bad.table"
expect_fail 2 "$T/bad.table:2: expected 'NODES RANKS_PER_NODE MIN_BYTES ALGORITHM'" 2 "$good" --allreduce-table "$T/bad.table"
export DTRAIN_RANKS_PER_NODE=x
expect_fail 2 "DTRAIN_RANKS_PER_NODE: expected a positive integer, found 'x'" 2 "$good"
unset DTRAIN_RANKS_PER_NODE

# --- the input files: exit 3, the message names the file ---
expect_fail 3 "$T/missing.h5: cannot open: No such file or directory" 2 "$T/missing.h5"
expect_fail 3 "$T/not-hdf5.h5: not an HDF5 file" 2 "$T/not-hdf5.h5"
expect_fail 3 "$T/no-train-images.h5: no dataset /train/images" 2 "$T/no-train-images.h5"
expect_fail 3 "$T/length-mismatch.h5: /train/images has 64 samples but /train/labels has 63 labels" 2 "$T/length-mismatch.h5"
expect_fail 3 "$T/bad-label.h5: /train/labels\[5\] = 10, but num_classes is 10" 2 "$T/bad-label.h5"
expect_fail 3 "$T/wrong-rank.h5: /train/images has rank 2 \[64,784\]; expected rank 4" 2 "$T/wrong-rank.h5"
expect_fail 3 "$T/float-images.h5: /train/images holds float32; expected uint8" 2 "$T/float-images.h5"
expect_fail 3 "$T/small-images.h5: 8x8x1 images do not fit model cnn: max_pooling2d_1: 2x2 pool does not fit a 1x1 input" 2 "$T/small-images.h5"
# A bad shard among good ones is named too.
expect_fail 3 "$T/wrong-rank.h5: /train/images has rank 2" 2 "$good" "$T/wrong-rank.h5"

# --- help and version: exit 0 on every rank, printed once ---
run_np 2 --help
if [ "$rc" = 0 ] && [ "$(grep -c '^Usage: ' "$out")" = 1 ]; then pass "--help"; else fail "--help: rc=$rc"; fi
# Every long option in the parser's table (src/options_table.c, printed as
# built by tests/list_options), so a new one cannot go undocumented.
opts=$("$TOP_BUILDDIR/tests/list_options" | sed 's/^\([a-z0-9-]*\) .*/--\1/')
[ "$(echo "$opts" | wc -l)" -ge 60 ] || fail "found only $(echo "$opts" | wc -l) options in src/options_table.c's table"
for opt in $opts; do
  grep -q -- "$opt" "$out" || fail "--help does not document $opt"
  grep -q -- "$(echo "$opt" | sed 's/-/\\\\-/g')" "$TOP_SRCDIR/doc/dtrain.1" || fail "dtrain.1 does not document $opt"
done
run_np 2 --version
if [ "$rc" = 0 ] && [ "$(cat "$out")" = "dtrain $(sed -n 's/^PACKAGE_VERSION = //p' "$TOP_BUILDDIR/Makefile")" ]; then
  pass "--version"
else
  fail "--version: rc=$rc, printed '$(cat "$out")'"
fi

rm -rf "$T"
finish
