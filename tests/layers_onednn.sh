#!/bin/sh
# layers_onednn.sh: the layer tests again with the direct one-channel
# convolution switched off, so oneDNN's path for those shapes stays tested too.
DTRAIN_NO_DIRECT_CONV=1 exec "$TOP_BUILDDIR/tests/check_layers"
