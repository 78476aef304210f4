#!/bin/sh
# make check-sanitize: the C unit tests and the multi-rank engine tests
#  1. built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc) in a
#     separate build directory, any report fatal (leaks included; Open MPI's
#     own allocations suppressed, tests/sanitize/lsan.supp);
#  2. under valgrind memcheck (the regular build): no invalid access and no
#     definite leak attributable to hvdshim (Open MPI's own suppressed,
#     tests/sanitize/valgrind.supp; its suppression file for MPI's internals).
# Usage: run.sh SRCDIR BUILDDIR.  Prints one summary line per part.
set -u
src=$(cd "$1" && pwd)
top=$(cd "$2" && pwd)
sb="$top/build-sanitize"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
status=0

# --- 1. ASan + UBSan
# engine tests that run engine_test directly (no LD_PRELOAD into foreign
# programs, which would need the ASan runtime preloaded too); engine.sh's
# memory case is left out: it bounds RSS growth, which ASan's quarantine
# changes.
# (of engine.sh's rows, one or two rank counts of each case: the code is the
# same at the others, and ASan multiplies the time of each rank (engine.sh
# and shm.sh were 4.5 minutes each here, over half of this part); the
# memory row is engine.sh's timing of the allocator, not a path)
ENGINE_SKIP="memory random-np2 random-np4 collectives-np2 collectives-np4 scatter-np3 scatter-np4 process-sets-np4 process-sets-np5 hvd-join-np3 hvd-join-np4"
MPI_TESTS="tests/mpi/engine.sh tests/mpi/fusion-modes.sh tests/mpi/cache-modes.sh tests/mpi/stall.sh tests/mpi/shm.sh
  tests/mpi/timeline.sh tests/mpi/start-fail.sh"
mkdir -p "$sb"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# A fresh copy of the sources (make distdir), since a source tree configured
# in place cannot host a second (VPATH) build.
rm -rf "$sb/src"
make -s -C "$top" distdir distdir="$sb/src" >/dev/null || { echo "check-sanitize: make distdir failed"; exit 1; }
if [ ! -f "$sb/Makefile" ]; then
  (cd "$sb" && "$sb/src/configure" -q CFLAGS="-g -O1 $san" LDFLAGS="$san" ${PYTHON:+PYTHON="$PYTHON"}) ||
    { echo "check-sanitize: configure of the sanitizer build failed"; exit 1; }
fi
# slow (DWARF) unwinding at malloc: Open MPI is built without frame pointers,
# and a truncated stack would escape the suppressions
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:exitcode=86"
export LSAN_OPTIONS="suppressions=$src/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
if (cd "$sb" && make -s -j2 >/dev/null && ENGINE_SKIP="$ENGINE_SKIP" SHM_SHORT=1 make -s -j2 check TESTS="tests/unit/unit_tests $(echo $MPI_TESTS)" >"$sb/check.out" 2>&1); then
  echo "check-sanitize: ASan+UBSan: $(grep -c '^PASS' "$sb/check.out") passed (unit + $(echo $MPI_TESTS | wc -w) multi-rank)"
else
  grep -E '^(PASS|FAIL|ERROR)' "$sb/check.out"
  for f in "$sb"/tests/*/*.log; do grep -l "Sanitizer\|runtime error" "$f" 2>/dev/null; done | head -5 | xargs -r sed -n '1,60p'
  echo "check-sanitize: ASan+UBSan: FAILED"
  status=1
fi
unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS

# --- 2. valgrind memcheck on the regular build
if ! command -v valgrind >/dev/null 2>&1; then
  echo "check-sanitize: valgrind: SKIPPED (not installed: apt-get install valgrind)"
  exit $status
fi
(cd "$top" && make -s check TESTS= >/dev/null) || exit 1
vg="valgrind -q --error-exitcode=87 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite
  --suppressions=$src/tests/sanitize/valgrind.supp"
[ -f /usr/share/openmpi/openmpi-valgrind.supp ] && vg="$vg --suppressions=/usr/share/openmpi/openmpi-valgrind.supp"
et="$top/tests/mpi/.libs/engine_test"
[ -x "$et" ] || et="$top/tests/mpi/engine_test"
export LD_LIBRARY_PATH="$top/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
vg_status=0 # (valgrind's own result, said whatever ASan's was)
runs=0
vrun() { # vrun NP ARGS...: engine_test under memcheck on every rank
  _np=$1
  shift
  runs=$((runs + 1))
  if ! timeout -k 5 600 mpirun --oversubscribe -np "$_np" $vg "$et" "$@" </dev/null >"$sb/vg.out" 2>&1; then
    head -80 "$sb/vg.out"
    echo "check-sanitize: valgrind: engine_test $* at np=$_np FAILED"
    vg_status=1
  fi
}
ut="$top/tests/unit/.libs/unit_tests"
[ -x "$ut" ] || ut="$top/tests/unit/unit_tests"
runs=$((runs + 1))
$vg "$ut" >"$sb/vg.out" 2>&1 || { head -80 "$sb/vg.out"; echo "check-sanitize: valgrind: unit_tests FAILED"; vg_status=1; }
vrun 2 random 7 40 2 2
vrun 3 collectives
vrun 2 mismatch
vrun 3 join 0
vrun 3 hvd-join
vrun 3 process-sets
vrun 3 scatter
vrun 2 adopt
# the engine start failing at each step: the same test, each rank under memcheck
runs=$((runs + 1))
if ! VALGRIND="$vg" ENGINE_TEST="$et" top_builddir="$top" top_srcdir="$src" sh "$src/tests/mpi/start-fail.sh" \
  >"$sb/vg.out" 2>&1; then
  head -80 "$sb/vg.out"
  echo "check-sanitize: valgrind: tests/mpi/start-fail.sh FAILED"
  vg_status=1
fi
[ $vg_status = 0 ] && echo "check-sanitize: valgrind memcheck: $runs runs clean (unit_tests; engine_test random, collectives, mismatch, join, hvd-join, process-sets, scatter, adopt; start-fail.sh, the engine start failing at each of its 9 steps)"
[ $vg_status = 0 ] || status=1
exit $status
