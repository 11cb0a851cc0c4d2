#!/bin/sh
# clip_decay.sh: --optimizer adamw (decoupled weight decay over the layers'
# decayed ranges) and --clip-norm (the global gradient norm), end to end on
# the MLP (AdamW) and the CNN (SGD) with --synthetic data.
#
# - The same global batch of 64 at 1 rank and at 2 (or 4) under every
#   strategy that steps an optimizer gives the same per-step losses (within
#   equivalence.sh's 1e-3) and the same gradient norms before clipping:
#   mirrored, sharded and fsdp at 2 ranks (their shards cut layers in two,
#   so the decay ranges must follow the shard offsets), --fsdp-shard node
#   at 4 ranks as 2 emulated nodes, 2 pipeline stages, --grad-accum 2, and
#   a parameter server in sync mode (its epoch figures). The clipping is
#   active throughout (the epoch line says 100% clipped), with AdamW and
#   with SGD (whose step is the clipped gradient itself). A norm missing a
#   shard or a stage, or counting an HSDP copy twice, is off by sqrt(2):
#   the first update's norms, of the same parameters, agree within 1e-5
#   (only the summation order differs); the later ones within 3e-2, as
#   the parameters have moved apart by roundings, which the loss hardly
#   notices and the CNN's gradient does where a ReLU or a max pool's
#   choice flips (measured: up to 1e-2). The MLP's final weights agree
#   too (h5diff, 1e-6 absolute; measured 1.4e-9): a decay range misplaced
#   by a shard's or a stage's offset moves weights by 2% a step, which the
#   loss on these random labels hardly shows.
# - Clipping comes after unscaling: a fixed loss scale 1024 gives the same
#   losses as none. Clipping changes SGD's losses, and the weight decay
#   AdamW's (the negative controls: the checks can fail).
# - Bad values and combinations exit 2 with one message.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/clip.$$
rm -rf "$T"; mkdir -p "$T"
tol=1e-3
fm=--synthetic=28x28x1:10:4096
base="--dropout 0 --epochs 1 --steps-per-epoch 20 --no-validation --verbose --shard-policy data"
adamw="--model mlp --optimizer adamw --weight-decay 20 --clip-norm 0.1"
sgd="--optimizer sgd --lr 0.1 --clip-norm 0.05"
# norms NAME: the per-step gradient norms of $T/NAME.out into $T/NAME.norm.
norms() { grep '^step ' "$T/$1.out" | sed 's/.*grad norm: \([0-9.e+-]*\).*/\1/' >"$T/$1.norm"; }
# same REF NAME WHAT: NAME's 20 losses (within $tol) and norms against
# REF's, and its final weights where both runs wrote them.
same() {
  norms "$2"
  loss_agree "$1" "$2" 20 "$3: losses"
  head -1 "$T/$1.norm" >"$T/$1.norm1"; head -1 "$T/$2.norm" >"$T/$2.norm1"
  tol=1e-5; loss_agree "$1.norm1" "$2.norm1" 1 "$3: the first gradient norm"
  tol=3e-2; loss_agree "$1.norm" "$2.norm" 20 "$3: gradient norms"; tol=1e-3
  [ -f "$T/$1.weights.h5" ] || return 0
  if h5diff -d 1e-6 "$T/$1.weights.h5" "$T/$2.weights.h5" >"$T/h5diff.out" 2>&1; then
    pass "$3: the final weights (h5diff -d 1e-6)"
  else
    fail "$3: the final weights differ:"; head -5 "$T/h5diff.out" >&2
  fi
}
# weights NAME: --export-keras into $T/NAME.weights.h5 when $keep_weights is set.
weights() { [ -z "${keep_weights:-}" ] || echo "--export-keras $T/$1.weights.h5"; }
# strategies REF ARGS...: runs with ARGS under each strategy against REF
# (the np=1 run with ARGS, batch 64), named REF-mir, REF-shd, ...
strategies() {
  ref=$1; shift
  step_losses "$ref-mir" 2 "$@" --batch-size 32 --strategy mirrored $(weights "$ref-mir")
  same "$ref" "$ref-mir" "$ref: np=2 mirrored"
  step_losses "$ref-shd" 2 "$@" --batch-size 32 --strategy sharded $(weights "$ref-shd")
  same "$ref" "$ref-shd" "$ref: np=2 sharded"
  step_losses "$ref-fs" 2 "$@" --batch-size 32 --strategy fsdp --bucket-mb 0.1 $(weights "$ref-fs")
  same "$ref" "$ref-fs" "$ref: np=2 fsdp"
  step_losses "$ref-hsdp" 4 "$@" --batch-size 16 --strategy fsdp --fsdp-shard node --ranks-per-node 2 --bucket-mb 0.1 \
    $(weights "$ref-hsdp")
  same "$ref" "$ref-hsdp" "$ref: np=4 fsdp --fsdp-shard node (2 nodes of 2)"
  step_losses "$ref-pipe" 2 "$@" --batch-size 64 --pipeline-stages 2 $(weights "$ref-pipe")
  same "$ref" "$ref-pipe" "$ref: np=2 --pipeline-stages 2"
  step_losses "$ref-acc" 2 "$@" --batch-size 16 --grad-accum 2 --steps-per-epoch 40 $(weights "$ref-acc")
  same "$ref" "$ref-acc" "$ref: np=2 --grad-accum 2 x batch 16"
}

keep_weights=1
step_losses adamw 1 $adamw --batch-size 64 --metrics "$T/one.csv" $(weights adamw)
norms adamw
grep -q '^Epoch 1/1 .* - grad norm: [0-9.]* (100% clipped)' "$T/adamw.out" &&
  pass "the clipping is active: $(sed -n 's/^Epoch 1\/1 .* - \(grad norm.*\)/\1/p' "$T/adamw.out")" ||
  fail "no '(100% clipped)' epoch line: $(grep '^Epoch' "$T/adamw.out")"
strategies adamw $adamw
keep_weights=
step_losses sgd 1 $sgd --batch-size 64
norms sgd
strategies sgd $sgd
step_losses all1 1 $adamw --batch-size 64 --decay-all
step_losses all2 2 $adamw --batch-size 32 --strategy sharded --decay-all
loss_agree all1 all2 20 "--decay-all: np=2 sharded against np=1"

# The parameter server (one server, one worker, sync): its server clips;
# the epoch's mean loss and norm (metrics file) are the 1-rank run's.
run_np 2 "$fm" $base $adamw --batch-size 64 --strategy parameter-server --ps-mode sync --metrics "$T/ps.csv"
[ "$rc" = 0 ] || { fail "parameter server: rc=$rc"; cat "$err" >&2; }
# loss (column 8), grad_norm (18), clipped (19)
cols() { grep '^epoch,' "$T/$1.csv" | cut -d, -f8,18,19 | tr ',' '\n' >"$T/$1.cols"; }
cols one; cols ps
tol=1e-4; loss_agree one.cols ps.cols 3 "parameter server (sync): the epoch's loss, mean norm and clipped fraction"
tol=1e-3

# After unscaling: a power-of-two loss scale changes nothing.
step_losses ls 2 $adamw --batch-size 32 --loss-scale 1024
cmp -s "$T/adamw-mir" "$T/ls" && pass "--loss-scale 1024: the same 20 losses as without" ||
  fail "--loss-scale 1024 changed the clipped losses"

# Negative controls.
step_losses sgd-free 1 --optimizer sgd --lr 0.1 --batch-size 64
w=$(loss_worst sgd sgd-free)
awk "BEGIN{exit !($w > 5 * $tol)}" && pass "sgd: clipping changes the losses by $w" ||
  fail "sgd: --clip-norm 0.05 within $w of no clipping"
step_losses nodecay 1 --model mlp --optimizer adamw --weight-decay 0 --clip-norm 0.1 --batch-size 64
w=$(loss_worst adamw nodecay)
awk "BEGIN{exit !($w > 5 * $tol)}" && pass "adamw: --weight-decay 20 changes the losses by $w" ||
  fail "adamw: --weight-decay 20 within $w of none"

good="--synthetic=8x8x1:4:64 --model mlp --epochs 1"
expect_fail 2 "--clip-norm: expected a positive number, found 0" 2 $good --clip-norm 0
expect_fail 2 "--clip-norm: expected a number in \[0, 1e+30\], found -1" 2 $good --clip-norm -1
expect_fail 2 "--weight-decay: expected a number in \[0, 1e+06\], found -0.1" 2 $good --optimizer adamw --weight-decay -0.1
expect_fail 2 "--weight-decay: only with --optimizer adamw, whose decay is decoupled from the gradient (optimizer is adam" \
  2 $good --weight-decay 0.1
expect_fail 2 "--weight-decay: only with --optimizer adamw" 2 $good --optimizer sgd --weight-decay 0.1
expect_fail 2 "--decay-all: only with --optimizer adamw (optimizer is sgd)" 2 $good --optimizer sgd --decay-all
expect_fail 2 "--optimizer: expected adam, adamw or sgd, found 'lamb'" 2 $good --optimizer lamb
expect_fail 2 "--clip-norm with --ps-mode sync --num-ps 2: a sync update is the sum of the pushes" \
  3 $good --strategy parameter-server --num-ps 2 --ps-mode sync --clip-norm 1
rm -rf "$T"
finish
