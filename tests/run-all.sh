#!/usr/bin/env bash
# run-all.sh: the whole test suite from a fresh Debian 12 machine: install
# what is missing, build with Open MPI and run `make check` (unit, MPI,
# end-to-end and bad-input tests), then build with MPICH and run the MPI and
# end-to-end tests there too, then build with the CUDA backend (when a CUDA
# toolkit is installed; no GPU needed) and run the whole suite again, GPU
# tests skipping with "SKIP: no GPU" where there is none. After the first
# build, libdtrain is installed into build/_inst and `make installcheck`
# builds and runs the API example against it, and `make distcheck-quick`
# builds the release tarball out of tree from a read-only copy, runs the
# quick tests there, installs and uninstalls it. A build with
# AddressSanitizer + UBSan (build-asan/) runs the unit and MPI tests in between,
# and Valgrind the single-rank ones in build/, then the cross-host tests on a
# 3-host cluster with a real Slurm (tests/cluster/, as root).
# Ends with "N passed, N failed, N skipped".
#
#   tests/run-all.sh
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
"$top/jobscripts/local/setup.sh" --mpich --cuda --cluster || { echo "setup failed"; exit 1; }

status=0
run_check() { # run_check DIR [TESTS=...]
  local dir=$1; shift
  echo "== make check in $dir $*"
  if ! make -C "$dir" -j"$(nproc)" check "$@"; then
    status=1
    # Show what failed: the per-test logs Automake kept.
    for log in "$dir"/tests/*.log; do
      [[ $log == */test-suite.log ]] && continue
      grep -q '^FAIL\|^ERROR' "${log%.log}.trs" 2>/dev/null && { echo "---- $log"; tail -50 "$log"; }
    done
  fi
}
run_check build
# libdtrain as a user gets it: installed into a prefix, the example built
# against the installed header and library with pkg-config, trained on 2 ranks.
echo "== make install and installcheck (build/, prefix build/_inst)"
install_ok=0
rm -rf build/_inst
if make -C build install prefix="$top/build/_inst" >build/install.out 2>&1 &&
   make -C build installcheck prefix="$top/build/_inst"; then
  install_ok=1
else
  status=1; tail -20 build/install.out
fi
# The release tarball: made (every source file in it, no build product:
# tests/distfiles.sh), unpacked read-only, configured with --enable-werror,
# built out of tree, the quick tests run (Makefile.am's DISTCHECK_TESTS; the
# whole suite ran above on the same sources), installed, installcheck'ed,
# uninstalled with nothing left behind, distclean'ed. About 3 minutes.
echo "== make distcheck-quick (build/): the release tarball, built and tested out of tree"
dist_ok=0
if make -C build -j"$(nproc)" distcheck-quick >build/distcheck.out 2>&1; then
  dist_ok=1
  grep -E '^# (TOTAL|PASS|SKIP|FAIL)' build/distcheck.out | tr '\n' ' ' | sed 's/^/== distcheck tests: /; s/ *$/\n/'
else
  status=1; tail -40 build/distcheck.out
fi
# MPICH: the tests that involve MPI (the serial unit tests do not change).
echo "== MPICH limitation here: Debian's MPICH (ch4:ucx) waits by polling without yielding the core,"
echo "   so the collective tests at 4-6 ranks on this 2-core machine take minutes each (measured:"
echo "   check_coll_np4 unfinished after 3 minutes, against 3 s with Open MPI). With MPICH they run"
echo "   at 1-3 ranks; at 4-6 ranks they run with Open MPI above. dtrain's own 4-rank tests run on both."
run_check build-mpich TESTS="tests/check_mpi_np2 tests/check_mpi_np3 tests/check_coll_np1 tests/check_coll_np2 \
  tests/check_coll_np3 tests/cli_errors.sh tests/train_e2e.sh tests/equivalence.sh tests/allreduce_train.sh"
# ASan + UBSan (./configure --enable-sanitizers, Open MPI, CPU only): the unit
# and MPI Check programs, and tests/pipeline.sh (dtrain-prep and dtrain at 1-4
# ranks: pipeline stages' copies, layer ranges and messages on a 2 x 2 mesh,
# with fsdp and checkpoints), any sanitizer report failing its test. The
# other end-to-end scripts are left out to keep CI short: this stage adds ~5
# minutes on 2 cores.
echo "== AddressSanitizer + UBSan build (build-asan/): the unit and MPI tests, pipeline.sh"
rm -f build-asan/tests/*.trs # a failed configure must not leave an old run's results counted
if [[ ! -f build-asan/config.status ]]; then
  mkdir -p build-asan
  # --disable-shared: the tests link the static core; libtool then compiles each file once, not twice.
  (cd build-asan && CC=mpicc.openmpi ../configure --enable-werror --enable-sanitizers --disable-shared >configure.out) ||
    { echo "== build-asan: configure failed (build-asan/configure.out, config.log)"; status=1; }
fi
# shellcheck disable=SC2016  # make expands $(UNIT_TESTS), the lists in Makefile.am
[[ -f build-asan/config.status ]] &&
  run_check build-asan TESTS='$(UNIT_TESTS) $(MPI_TESTS) tests/pipeline.sh' check_PROGRAMS='$(UNIT_TESTS) $(MPI_TESTS)'
# Valgrind's Memcheck on the single-rank tests and two short dtrain runs, in
# the plain Open MPI build (tests/valgrind.sh; 1-2 minutes). Its results are
# build/tests/valgrind/*.trs, counted below.
echo "== Valgrind (build/): the single-rank tests and two dtrain runs"
rm -f build/tests/valgrind/*.trs
make -C build check-valgrind || status=1
# Across hosts: 3 hosts in network namespaces joined by TCP, a real Slurm on
# them, dtrain launched by mpirun, srun and the job scripts (tests/cluster/run.sh;
# about 5 minutes). Its results are build/tests/cluster/*.trs, counted below.
echo "== Across hosts (build/): tests/cluster/, a 3-host cluster with a real Slurm"
rm -f build/tests/cluster/*.trs
make -C build check-cluster || status=1
if [[ -f build-cuda/config.status ]]; then
  run_check build-cuda
  for t in check_gpu gpu_train; do
    [[ -f build-cuda/tests/$t.log ]] && grep -h '^SKIP' "build-cuda/tests/$t.log" | sed "s|^|== $t: |"
  done
else
  echo "== no CUDA toolkit here: the CUDA build was not built or tested"
fi

# One line for CI and humans: count the results Automake recorded per test.
p=0; f=0; s=0
for trs in build/tests/*.trs build-mpich/tests/*.trs build-asan/tests/*.trs build/tests/valgrind/*.trs \
  build/tests/cluster/*.trs build-cuda/tests/*.trs; do
  [[ -f $trs ]] || continue
  case $(sed -n 's/^:test-result: //p' "$trs") in
    PASS|XFAIL) p=$((p + 1)) ;;
    SKIP) s=$((s + 1)) ;;
    *) f=$((f + 1)) ;;
  esac
done
if ((install_ok)); then p=$((p + 1)); else f=$((f + 1)); fi # make installcheck
if ((dist_ok)); then p=$((p + 1)); else f=$((f + 1)); fi    # make distcheck-quick
echo "$p passed, $f failed, $s skipped"
(( f == 0 && status == 0 ))
