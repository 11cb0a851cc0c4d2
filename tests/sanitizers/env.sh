# shellcheck shell=sh
# env.sh: the sanitizer runtime options for a --enable-sanitizers build.
# `make check` sources it there (Makefile.am, AM_TESTS_ENVIRONMENT); to run a
# test or dtrain by hand in such a build, source it with TOP_SRCDIR exported
# as the source directory (or from there): . tests/sanitizers/env.sh
#
# ASAN_OPTIONS
#   detect_leaks=1            LeakSanitizer at exit (the default on x86-64 Linux,
#                             said so because the suppressions below depend on it)
#   fast_unwind_on_malloc=0   Open MPI, HDF5 and OpenBLAS are built without frame
#                             pointers, so the fast unwinder stops at their first
#                             frame; the slow one reaches libmpi/libhdf5 frames the
#                             suppressions name (and the caller in dtrain when a
#                             leak is ours). Costs ~1 s per MPI test here.
#   allocator_may_return_null=1  malloc of an absurd size returns NULL as in a
#                             plain build, so the code's own "cannot allocate"
#                             errors are what the bad-input tests see, not an
#                             ASan abort.
# Not needed on the CPU build: protect_shadow_gap=0 (only the CUDA driver maps
# memory in the shadow gap) and anything for oneDNN's JIT (its generated code
# is not instrumented and touches only buffers dtrain allocated).
ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1
# LSAN_OPTIONS: the library leaks we do not own, one commented line each there.
LSAN_OPTIONS=suppressions=${TOP_SRCDIR:-$PWD}/tests/sanitizers/lsan.supp:print_suppressions=0
# UBSAN_OPTIONS: a stack and the check's name with every report (the build
# already makes each one fatal: -fno-sanitize-recover=undefined).
UBSAN_OPTIONS=print_stacktrace=1:report_error_type=1
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
