# Sourced by the test scripts.  Exit codes: 0 pass, 1 fail, 77 skip (with
# the reason printed).  make check exports top_builddir, top_srcdir, MPIRUN.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_builddir:=$(cd "$here/../.." && pwd)}"
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
LIB="$top_builddir/.libs/libhvdshim.so"
ENGINE_TEST="$top_builddir/tests/mpi/engine_test"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hvdshim-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "PASS: $*"; }

need_mpirun() {
  MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
  [ -n "$MPIRUN" ] && [ -x "$MPIRUN" ] || skip "mpirun not found (apt-get install openmpi-bin)"
}
# OpenMPI refuses root without these; more ranks than cores need oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# mpi NP command...: bounded (T seconds, default 180) so no test can hang.
mpi() {
  _np=$1
  shift
  timeout -k 5 "${T:-180}" "$MPIRUN" --oversubscribe -np "$_np" "$@" </dev/null
}

# expect_ok_lines FILE N: N ranks printed their OK line
expect_ok_lines() {
  _n=$(grep -c " OK stats" "$1" || true)
  [ "$_n" = "$2" ] || { cat "$1"; fail "expected $2 OK lines, got $_n"; }
}

# stat FILE NAME: the first rank's value of a stats counter
stat_of() { grep -m1 -o " $2=[0-9]*" "$1" | cut -d= -f2; }

# PyTorch tests: the interpreter with torch (configure's PYTHON).
need_torch() {
  PYTHON=${PYTHON:-/usr/bin/python3}
  "$PYTHON" -c 'import torch' 2>/dev/null ||
    skip "PyTorch is not importable by $PYTHON (apt-get install python3-torch, or configure PYTHON=...)"
  TORCH_DIR="$top_srcdir/tests/torch"
  TRAIN="$TORCH_DIR/train.py"
  export OMP_NUM_THREADS=${OMP_NUM_THREADS-1} # the same intra-op threads on both sides of a comparison
}

# shim NP ARGS...: ARGS under mpirun with the shim preloaded and OMP_NUM_THREADS
# and every HVDSHIM_* variable of this environment forwarded.
shim() {
  _np=$1
  shift
  set -- $(env | sed -n 's/^\(HVDSHIM_[A-Z0-9_]*\)=.*/-x \1/p') "$@"
  [ -n "${OMP_NUM_THREADS-}" ] && set -- -x OMP_NUM_THREADS "$@"
  LD_PRELOAD="$LIB" mpi "$_np" -x LD_PRELOAD "$@"
}

# same A.pt B.pt TOL: two checkpoints agree within TOL
same() { "$PYTHON" "$TORCH_DIR/compare.py" "$@"; }

# Fault tests: a job in the background and its processes.
FAULT_TRAIN="$top_srcdir/tests/faults/fault_train.py"
# rank_pid TAG R: pid of the Python rank R whose command line holds TAG
rank_pid() {
  for _p in $(pgrep -f -- "--tag $1" || true); do
    grep -q python "/proc/$_p/cmdline" 2>/dev/null || continue
    tr '\0' '\n' <"/proc/$_p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$_p"; return 0; }
  done
  return 1
}
# wait_for FILE PATTERN SECONDS: until FILE holds PATTERN
wait_for() {
  _i=0
  while ! grep -q -- "$2" "$1" 2>/dev/null; do
    _i=$((_i + 1))
    [ "$_i" -le $(($3 * 10)) ] || { cat "$1"; fail "'$2' did not appear within $3 s"; }
    sleep 0.1
  done
}
# no_leftovers TAG: no process of the job is left
no_leftovers() {
  sleep 1
  _left=$(pgrep -f -- "--tag $1" || true)
  [ -z "$_left" ] || { ps -o pid,stat,args -p $_left; fail "processes left behind: $_left"; }
}
now_ms() { date +%s%3N; }
