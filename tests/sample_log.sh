#!/bin/sh
# sample_log.sh: --sample-log lists, per step, the global sample indices of
# every replica in replica order ("GLOBAL_STEP EPOCH STEP IDX ...").
#
# - np=1 batch 32 and np=2 batch 16 write the same file (same seed, same
#   global batch), 2 epochs of 5 steps: global steps 1..10, epochs 1 and 2,
#   steps 1..5, 32 indices a line, each in range and none twice in an epoch;
# - a whole epoch (no --steps-per-epoch) lists every sample exactly once,
#   the last step short;
# - --grad-accum 2: two lines per update, the same global step, STEP
#   counting batches;
# - --shard-policy file with 2 shard files at np=2: replica 0's indices come
#   from file 0, replica 1's from file 1 (each replica's own order, which
#   rank 0 draws for both);
# - a resumed run goes on from the checkpoint's global step with the lines a
#   straight run has there;
# - refused with one message: an empty name, a file that cannot be written,
#   the parameter server.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/sample_log.$$
rm -rf "$T"; mkdir -p "$T"
base="--model mlp --epochs 2 --steps-per-epoch 5 --no-validation --quiet"

log_run() { # NAME NP ARGS...: dtrain with --sample-log $T/NAME
  name=$1; np=$2; shift 2
  run_np "$np" "$@" --sample-log "$T/$name"
  [ "$rc" = 0 ] && [ -s "$T/$name" ] || { fail "$name: rc=$rc, no sample log"; cat "$err" >&2; }
}
log_run one 1 "$fm" $base --batch-size 32
log_run two 2 "$fm" $base --batch-size 16
cmp -s "$T/one" "$T/two" && pass "np=1 batch 32 and np=2 batch 16: the same sample log" ||
  { fail "np=1 and np=2 logs differ"; diff "$T/one" "$T/two" | head -4 >&2; }
# shape: 10 lines, global step = line, epoch 1 then 2, step 1..5, 32 distinct in-range indices per epoch
if awk -v N=4096 '{ if ($1 != NR || $2 != (NR <= 5 ? 1 : 2) || $3 != (NR - 1) % 5 + 1 || NF != 35) bad = 1
                    for (i = 4; i <= NF; i++) { if ($i < 0 || $i >= N || seen[$2 " " $i]++) bad = 1 } }
                  END { exit bad || NR != 10 }' "$T/one"; then
  pass "10 lines: global step, epoch, step, then 32 distinct in-range sample indices"
else
  fail "the log's lines are not as documented"; head -2 "$T/one" | cut -c1-120 >&2
fi

log_run full 1 "$fm" --model mlp --epochs 1 --no-validation --quiet --batch-size 1000
if awk '{ for (i = 4; i <= NF; i++) c[$i]++; last = NF - 3 }
        END { for (i = 0; i < 4096; i++) if (c[i] != 1) exit 1; exit !(NR == 5 && last == 96) }' "$T/full"; then
  pass "a whole epoch of 4096 at batch 1000: every sample once in 5 steps, the last of 96"
else
  fail "a whole epoch does not list every sample once"
fi

log_run acc 1 "$fm" --model mlp --epochs 2 --steps-per-epoch 6 --no-validation --quiet --batch-size 16 --grad-accum 2
if awk '{ if (NF != 19 || $3 != (NR - 1) % 6 + 1) bad = 1 } END { exit bad || NR != 12 }' "$T/acc" &&
   [ "$(cut -d' ' -f1 "$T/acc" | tr '\n' ' ')" = "1 1 2 2 3 3 4 4 5 5 6 6 " ]; then
  pass "--grad-accum 2: two lines of 16 per update, steps counting batches"
else
  fail "--grad-accum 2: $(cut -d' ' -f1-3 "$T/acc" | tr '\n' ',')"
fi

# Two shard files of 2048 samples each: replica r reads file r only.
"$DTRAIN_PREP" --quiet --limit-train 4096 --limit-test 512 --shards 2 "$T/sh.h5" >/dev/null ||
  fail "dtrain-prep --shards 2"
log_run file 2 "$T"/sh-0000[01]-of-00002.h5 $base --batch-size 16 --shard-policy file
if awk '{ for (i = 4; i <= NF; i++) if ((i < 20) != ($i < 2048)) bad = 1; if (NF != 35) bad = 1 } END { exit bad || NR != 10 }' "$T/file"; then
  pass "--shard-policy file at np=2: replica 0's 16 from file 0, replica 1's 16 from file 1"
else
  fail "--shard-policy file: replicas' samples not from their own files"; head -1 "$T/file" | cut -c1-160 >&2
fi

# A checkpoint at epoch 1's end, resumed: global steps 6..10, as the straight run's lines.
log_run first 1 "$fm" --model mlp --epochs 1 --steps-per-epoch 5 --no-validation --quiet --batch-size 32 \
  --checkpoint-dir "$T/ck"
log_run resumed 1 "$fm" $base --batch-size 32 --checkpoint-dir "$T/ck" --resume latest
tail -n 5 "$T/one" >"$T/one-tail"
cmp -s "$T/resumed" "$T/one-tail" && pass "resumed at epoch 2: global steps 6-10, the straight run's lines" ||
  { fail "the resumed log differs from the straight run's"; cut -c1-60 "$T/resumed" >&2; }

expect_fail 2 "expected a file name" 1 "$fm" $base --sample-log ""
expect_fail 2 "sample-log $T/no/such/dir/s.txt: cannot write it" 1 "$fm" $base --sample-log "$T/no/such/dir/s.txt"
expect_fail 2 "the parameter server's workers do not step together" 2 "$fm" $base --strategy parameter-server \
  --sample-log "$T/ps"
rm -rf "$T"
finish
