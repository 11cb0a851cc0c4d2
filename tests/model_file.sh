#!/bin/sh
# model_file.sh: --model FILE (inputs/*.cfg) end to end.
#
# The shipped cnn.cfg and mlp.cfg are the built-in models (the same losses,
# digit for digit); a model with stride, 'same' padding and a separate ReLU
# trains; every kind of mistake in a file is reported with file and line.
. "$TOP_SRCDIR/tests/common.sh"
fm=$(fm_small) || exit $?
T=$TEST_TMP/mf.$$
mkdir -p "$T"
args="$fm --epochs 1 --steps-per-epoch 10 --batch-size 32 --verbose"
losses() { grep -E '^(step|Epoch)' "$1" | sed -e 's/ - [0-9.]* s - [0-9]* samples\/s//' -e 's/ - comm: .*//'; }

for m in cnn mlp; do
  run_np 2 $args --model "$m"; losses "$out" >"$T/builtin"
  run_np 2 $args --model "$TOP_SRCDIR/inputs/$m.cfg"; losses "$out" >"$T/file"
  if [ "$rc" = 0 ] && [ -s "$T/file" ] && cmp -s "$T/builtin" "$T/file" && grep -q "^Model: $m.cfg " "$out"; then
    pass "inputs/$m.cfg is the built-in $m: the same losses"
  else
    fail "inputs/$m.cfg differs from --model $m (rc=$rc)"; diff "$T/builtin" "$T/file" | head >&2; cat "$err" >&2
  fi
done

cat >"$T/strided.cfg" <<'CFG'
# stride 2 with 'same' padding, then a separate ReLU layer
[conv2d]
filters = 16
kernel = 3
stride = 2
padding = same
[relu]
[maxpool]
size = 2
[dense]
units = 32
activation = relu
[dense]
units = classes
CFG
run_np 2 $args --model "$T/strided.cfg"
if [ "$rc" = 0 ] && grep -q '^  conv2d  *conv2d  *->  *14 x  *14 x  *16 ' "$out" && grep -q '^Epoch 1/1' "$out"; then
  pass "a strided 'same' conv + relu layer model trains (14x14x16 after the conv)"
else
  fail "strided model: rc=$rc"; cat "$out" "$err" >&2
fi

bad() { # bad CODE PATTERN CONTENT
  printf '%s\n' "$3" >"$T/bad.cfg"
  expect_fail "$1" "$2" 2 $args --model "$T/bad.cfg"
}
bad 2 "bad.cfg:2: unknown section \[conv3d\] (expected conv2d, maxpool, avgpool, global_avgpool, dense, relu, dropout, batchnorm, add, route, flatten, reshape, embedding, layernorm, attention, linear, gelu or lm_head)" "# x
[conv3d]"
bad 2 "bad.cfg:3: \[dense\] has no key 'filters' (expected: units activation)" "[dense]
units = 10
filters = 3"
bad 2 "bad.cfg:2: filters: expected a positive integer, found 'many'" "[conv2d]
filters = many
kernel = 3"
bad 2 "bad.cfg:1: \[conv2d\] needs kernel (required: filters kernel)" "[conv2d]
filters = 8
[dense]
units = classes"
bad 2 "bad.cfg:1: 'units = 3' before any \[section\]" "units = 3"
bad 2 "bad.cfg:3: activation: expected relu or none, found 'tanh'" "[dense]
units = classes
activation = tanh"
bad 2 "bad.cfg:2: rate: expected a number in \[0, 1), found '1.5'" "[dropout]
rate = 1.5"
bad 3 "28x28x1 images do not fit model .*bad.cfg: conv2d: 40x40 kernel does not fit a 28x28 input" "[conv2d]
filters = 8
kernel = 40
[dense]
units = classes"
bad 3 "images do not fit model .*bad.cfg: model bad.cfg: last layer gives 5 outputs, the data has 10 classes" "[dense]
units = 5"
# the residual-network layers: offsets, shapes, batchnorm's numbers
bad 2 "bad.cfg:1: \[add\] needs from (required: from)" "[add]
[dense]
units = classes"
bad 2 "bad.cfg:2: from: expected a negative layer offset (-1 = the previous layer), found '0'" "[route]
from = 0"
bad 2 "bad.cfg:2: from: expected a negative layer offset (-1 = the previous layer), found '-x'" "[add]
from = -x"
bad 2 "bad.cfg:2: shape: expected HxWxC (e.g. 7x7x64), found '7x7'" "[reshape]
shape = 7x7"
bad 2 "bad.cfg:2: momentum: expected a number in \[0, 1), found '1.5'" "[batchnorm]
momentum = 1.5"
bad 2 "bad.cfg:2: epsilon: expected a number in (0, 1), found '0'" "[batchnorm]
epsilon = 0"
bad 2 "bad.cfg:5: from = -3: this is layer 2, so -2 (the model's input) is the farthest back" "[conv2d]
filters = 4
kernel = 3
[add]
from = -3
[dense]
units = classes"
bad 3 "images do not fit model .*bad.cfg: model bad.cfg: add: adds the model input's 28x28x1 output to a 26x26x4 input" "[conv2d]
filters = 4
kernel = 3
[add]
from = -2
[dense]
units = classes"
bad 3 "images do not fit model .*bad.cfg: reshape: cannot reshape 28x28x1 (784 values) into 10x10x10" "[reshape]
shape = 10x10x10
[dense]
units = classes"
expect_fail 2 "--model $T/none.cfg: cannot open it: No such file or directory" 2 $args --model "$T/none.cfg"
expect_fail 2 "--dropout: sets the built-in cnn's rate; the model file" 2 $args --model "$TOP_SRCDIR/inputs/cnn.cfg" --dropout 0.2
rm -rf "$T"
finish
