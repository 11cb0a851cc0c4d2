#!/bin/sh
# grad_accum.sh: --grad-accum K equals a K-times larger batch.
#
# K micro-batches of B samples per replica, summed and reduced once, must
# give the losses of batch K x B (the same samples: the data plan deals them
# in order), up to float summation order: at 1 and 2 ranks, for mirrored and
# sharded; a resumed run continues exactly; the parameter server refuses.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/ga.$$
rm -rf "$T"; mkdir -p "$T"
vals() { grep -E '^step ' "$1" | sed 's/.* - loss: \([0-9.]*\) .*/\1/'; }
close() { # close A B: same number of lines, each within 3e-5
  [ -s "$1" ] && [ "$(wc -l <"$1")" = "$(wc -l <"$2")" ] &&
    paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 3e-5) bad = 1 } END { exit bad }'
}
check() { # check NP STRATEGY K B
  np=$1 strat=$2 k=$3 b=$4
  run_np "$np" "$fm" --epochs 1 --steps-per-epoch 12 --batch-size $((k * b)) --dropout 0 --verbose --strategy "$strat"
  vals "$out" >"$T/big"
  run_np "$np" "$fm" --epochs 1 --steps-per-epoch $((12 * k)) --batch-size "$b" --grad-accum "$k" --dropout 0 --verbose --strategy "$strat"
  vals "$out" >"$T/acc"
  if [ "$rc" = 0 ] && [ "$(wc -l <"$T/acc")" = 12 ] && close "$T/big" "$T/acc"; then
    pass "np=$np $strat: --grad-accum $k x batch $b gives batch $((k * b))'s 12 losses (within 3e-5)"
  else
    fail "np=$np $strat --grad-accum $k: rc=$rc"; paste "$T/big" "$T/acc" | head >&2; cat "$err" >&2
  fi
}
check 1 mirrored 2 32
check 2 mirrored 2 16
check 2 sharded 3 16

# resume in the middle of an epoch, at an update boundary
args="$fm --epochs 2 --steps-per-epoch 12 --batch-size 16 --grad-accum 3 --verbose"
run_np 2 $args --checkpoint-dir "$T/ck" --checkpoint-every 2step --keep 0
vals "$out" >"$T/full"
mid=$T/ck/ckpt-000000-00000006.h5
run_np 2 $args --checkpoint-dir "$T/ck2" --resume "$mid"
vals "$out" >"$T/res"
if [ -f "$mid" ] && [ "$rc" = 0 ] && tail -6 "$T/full" | cmp -s - "$T/res"; then
  pass "resumed after 2 of 4 updates (6 micro-batches): the same losses"
else
  fail "grad-accum resume: rc=$rc"; ls "$T/ck" >&2; paste "$T/full" "$T/res" >&2
fi
expect_fail 2 "--grad-accum 2: the parameter server applies each worker's push as it comes" \
  3 "$fm" --strategy parameter-server --grad-accum 2
expect_fail 2 "--grad-accum: expected an integer in \[1, " 2 "$fm" --grad-accum 0
rm -rf "$T"
finish
