#!/bin/sh
# layers_generic.sh: the layer tests again with dtrain's fast CPU kernels
# switched off (DTRAIN_NO_FAST_KERNELS=1), so the generic loops they are
# checked against (the folded first conv's, the pools', the portable
# batch norm's) and oneDNN's paths for those shapes stay tested on CPUs
# where the fast paths would otherwise always run.
DTRAIN_NO_FAST_KERNELS=1 exec "$TOP_BUILDDIR/tests/check_layers"
