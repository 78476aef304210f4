# Sourced by the test scripts.  Exit codes: 0 pass, 1 fail, 77 skip (with
# the reason printed).  make check exports top_builddir, top_srcdir, MPIRUN.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_builddir:=$(cd "$here/../.." && pwd)}"
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
LIB="$top_builddir/.libs/libhvdshim.so"
ENGINE_TEST=${ENGINE_TEST:-"$top_builddir/tests/mpi/engine_test"}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hvdshim-test.XXXXXX")
# (the warm interpreter of tests/warm.py and its waiters go with the test)
trap '[ -n "${WARM_PID-}" ] && { pkill -P "$WARM_PID"; kill "$WARM_PID"; } 2>/dev/null; rm -rf "$TMP"' EXIT

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "PASS: $*"; }

# MPI_KIND: ompi (Open MPI up to 4: mpirun/orterun), ompi5 (Open MPI 5+:
# prterun), hydra (MPICH's mpiexec).  The tests write Open MPI's options
# (-np, -x NAME, -x NAME=VALUE, --oversubscribe); mpi() gives Hydra its own.
# The CPUs this process may run on, as the engine counts them (its
# affinity): GNU nproc alone also honours OMP_NUM_THREADS
cpus() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

need_mpirun() {
  MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
  [ -n "$MPIRUN" ] && [ -x "$MPIRUN" ] || skip "mpirun not found (apt-get install openmpi-bin)"
  case $("$MPIRUN" --version 2>&1 </dev/null) in
    *HYDRA*) MPI_KIND=hydra ;;
    *"(Open MPI) "[1-4].*) MPI_KIND=ompi ;;
    *"Open MPI"* | *PRRTE* | *prterun*) MPI_KIND=ompi5 ;;
    *) MPI_KIND=ompi ;;
  esac
  # Open MPI 6 probes every network transport at each start (1.9 s a job
  # here): ranks on one host need only shared memory (multihost.sh adds tcp)
  [ $MPI_KIND = ompi5 ] && export OMPI_MCA_pml="${OMPI_MCA_pml-ob1}" OMPI_MCA_btl="${OMPI_MCA_btl-self,sm}"
  return 0
}
need_open_mpi() { # a test of an Open MPI-only behaviour (its launcher's wording, orterun/prterun)
  case $MPI_KIND in ompi | ompi5) ;; *) skip "$1: Open MPI only, and $MPIRUN is MPICH's Hydra" ;; esac
}
# OpenMPI refuses root without these; more ranks than cores need oversubscribe
# (Open MPI 5+ ignores the first form; mpi() passes --oversubscribe anyway).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
# Open MPI 5 and 6 (trixie, sid) link UCX, whose memory hooks cost each
# process that loads libmpi 0.4 s of CPU at start on this VM (ucm patching
# libc with sched_yield spins: 9000 of them); the suites use no RDMA, so the
# hooks only slow every launch (sid's torch suites: 15-25% of their time).
# The user's value is kept.
export UCX_MEM_EVENTS=${UCX_MEM_EVENTS-no}

# mpi NP command...: bounded (T seconds, default 180) so no test can hang.
# Hydra: -x NAME is dropped (Hydra passes the environment), -x NAME=VALUE
# becomes -env NAME VALUE, --oversubscribe is dropped (Hydra places any
# number of ranks); options are translated until the command, and again
# after each ':' (another program of an MPMD launch).
mpi() {
  _np=$1
  shift
  if [ "${MPI_KIND:-ompi}" = hydra ]; then
    _n=$# _opts=1
    while [ $_n -gt 0 ]; do
      _a=$1
      shift
      _n=$((_n - 1))
      if [ $_opts = 1 ] && [ "$_a" = -x ]; then
        case $1 in *=*) set -- "$@" -env "${1%%=*}" "${1#*=}" ;; esac
        shift
        _n=$((_n - 1))
        continue
      fi
      case $_opts:$_a in
        1:--oversubscribe) ;;
        1:-np | 1:-n) set -- "$@" "$_a" "$1"; shift; _n=$((_n - 1)) ;;
        1:-*) set -- "$@" "$_a" ;;
        *::) _opts=1; set -- "$@" "$_a" ;;
        *) _opts=0; set -- "$@" "$_a" ;;
      esac
    done
    timeout -k 5 "${T:-180}" "$MPIRUN" -np "$_np" "$@" </dev/null
    return
  fi
  timeout -k 5 "${T:-180}" "$MPIRUN" --oversubscribe -np "$_np" "$@" </dev/null
}

# by_rank 'COMMAND0' 'COMMAND1': prints a script that runs COMMAND0 (a shell
# command line) on rank 0 and COMMAND1 on every other rank, for one launch
# of different programs without the launcher's MPMD syntax (trixie's
# prterun crashes on any 'a : b' launch).
by_rank() {
  _s="$TMP/by-rank.$$.$(date +%s%N).sh"
  printf '#!/bin/sh\ncase "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}" in\n0) exec %s ;;\n*) exec %s ;;\nesac\n' \
    "$1" "$2" >"$_s"
  chmod +x "$_s"
  echo "$_s"
}

# ranks_said FILE TEXT NP: a failed job printed TEXT on 1 to NP ranks.  Every
# rank finds the fault, but when one exits non-zero the launcher may end the
# others before they print (Open MPI 5+, Hydra): the count depends on timing.
ranks_said() {
  _n=$(grep -c -- "$2" "$1" || true)
  [ "$_n" -ge 1 ] && [ "$_n" -le "$3" ]
}

# expect_ok_lines FILE N: N ranks printed their OK line
expect_ok_lines() {
  _n=$(grep -c " OK stats" "$1" || true)
  [ "$_n" = "$2" ] || { cat "$1"; fail "expected $2 OK lines, got $_n"; }
}

# stat FILE NAME: the first rank's value of a stats counter
stat_of() { grep -m1 -o " $2=[0-9]*" "$1" | cut -d= -f2; }

# have_torch: configure's PYTHON (or /usr/bin/python3) has torch installed.
# It finds the package without importing it: an import is 1.5 s on Debian 12
# and 3 s on sid, once per test (a torch that is there but broken fails the
# test instead of skipping it).
have_torch() {
  PYTHON=${PYTHON:-/usr/bin/python3}
  # by its path: Open MPI run by an absolute path (as $MPIRUN is) puts its
  # bin folder first on the ranks' PATH, where a bare name may find another
  # interpreter (seen on a lent GPU machine: /usr/bin/python3 without torch)
  case $PYTHON in */*) ;; *) PYTHON=$(command -v "$PYTHON" || echo "$PYTHON") ;; esac
  "$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null
}

# PyTorch tests: the interpreter with torch (configure's PYTHON).
need_torch() {
  have_torch ||
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
  # HVDSHIM_ELASTIC=1 make check TESTS=...: the suites with elastic on (Open MPI 5+)
  [ "${HVDSHIM_ELASTIC-}" = 1 ] && [ "${MPI_KIND:-ompi}" = ompi ] && set -- --with-ft ulfm "$@"
  # (HVDCHECK_TMP: the processes of this test's jobs, by their environment:
  # no_leftovers; the reapers' command line is not the rank's)
  HVDCHECK_TMP="$TMP" LD_PRELOAD="$LIB" mpi "$_np" -x LD_PRELOAD -x HVDCHECK_TMP "$@"
}

# hvdrun_job NP ARGS...: the job through hvdrun (launcher/hvdrun -np NP
# --oversubscribe ARGS), bounded by T seconds (default 180), its processes
# found as shim()'s (no_leftovers).  MPICH 4.2's Hydra ends 0 after a rank's
# SIGKILL in most runs, with the shim or without (MPICH issue 7057: its
# proxy takes every rank's status for 0 once a second one's PMI socket
# closes); hvdrun ends non-zero all the same (tests/launcher/hvdrun.sh), so
# there a test of a rank's death runs its job through it.
hvdrun_job() {
  _np=$1
  shift
  HVDCHECK_TMP="$TMP" timeout -k 5 "${T:-180}" "$top_builddir/launcher/hvdrun" -np "$_np" --oversubscribe "$@" </dev/null
}

# Plain runs from a warm interpreter (tests/warm.py): `python SCRIPT` or
# `python -c CODE` without the shim, forked from one process per test that
# imported torch (and torch._dynamo) once: 2.5-4 s less per plain run on
# sid, 1.5-2 on Debian 12.  warm_start (at a test's top level, after
# need_torch) starts it; py ARGS... runs "$PYTHON" ARGS through it once it is
# ready, else directly (HVDSHIM_TEST_WARM=0: always directly), bounded by T
# seconds (default 180) either way, the stdout, stderr and exit status its own.
warm_start() {
  [ "${HVDSHIM_TEST_WARM:-1}" = 1 ] || return 0
  WARM="$TMP/warm"
  mkdir -p "$WARM" && mkfifo "$WARM/requests" || { WARM=; return 0; }
  "$PYTHON" "$top_srcdir/tests/warm.py" "$WARM" </dev/null >"$WARM/log" 2>&1 &
  WARM_PID=$!
}
py() {
  if [ -n "${WARM-}" ] && _warm_ready; then
    _r=$(mktemp -d "$WARM/r.XXXXXX") && mkfifo "$_r/out" "$_r/err" "$_r/status" &&
      printf '%s\0' "$PWD" "$#" "$@" >"$_r/req" && env -0 >"$_r/env" || fail "py: could not write a request in $WARM"
    cat "$_r/out" &
    _c1=$!
    cat "$_r/err" >&2 &
    _c2=$!
    echo "$_r" 1<>"$WARM/requests"
    _st=$(timeout "${T:-180}" cat "$_r/status")
    [ -n "$_st" ] || { [ -f "$_r/pid" ] && kill -9 -- "-$(cat "$_r/pid")" 2>/dev/null; _st=124; }
    # the readers are released where the run never opened the pipes (run
    # directly, or killed): a writer opened and closed again until each has
    # ended, since a reader the scheduler has not yet let reach its open
    # would miss one such release (and wait for ever); bounded at 10 s
    _i=0
    while kill -0 $_c1 2>/dev/null || kill -0 $_c2 2>/dev/null; do
      [ $_i -lt 200 ] || { kill $_c1 $_c2 2>/dev/null; break; }
      : 1<>"$_r/out"
      : 1<>"$_r/err"
      _i=$((_i + 1))
      sleep 0.05
    done
    wait $_c1 $_c2
    rm -rf "$_r"
    [ "$_st" = fallback ] || return "$_st"
  fi
  timeout -k 5 "${T:-180}" "$PYTHON" "$@"
}
_warm_ready() { # the warm interpreter is up (waits for its start, up to 60 s)
  _i=0
  while [ ! -f "$WARM/ready" ]; do
    kill -0 "$WARM_PID" 2>/dev/null && [ $_i -lt 600 ] || { WARM=; return 1; }
    _i=$((_i + 1))
    sleep 0.1
  done
  kill -0 "$WARM_PID" 2>/dev/null || { WARM=; return 1; }
}

# same A.pt B.pt TOL: two checkpoints agree within TOL
same() { py "$TORCH_DIR/compare.py" "$@"; }

# Fault tests: a job in the background and its processes.
FAULT_TRAIN="$top_srcdir/tests/faults/fault_train.py"
# rank_pid TAG R: pid of the Python rank R whose command line holds TAG
rank_pid() {
  for _p in $(pgrep -f -- "--tag $1" || true); do
    grep -q python "/proc/$_p/cmdline" 2>/dev/null || continue
    tr '\0' '\n' <"/proc/$_p/environ" 2>/dev/null | grep -qx -E "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2" && { echo "$_p"; return 0; }
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
# tmp_left DIR: what a job left in its own TMPDIR DIR, but torch's compile
# cache (torchinductor_USER, which a plain run keeps too) and an empty
# ompi.HOST.UID (Open MPI 4's folder for every job of the host, removed by
# the last launcher, never by a reaper; removed here)
tmp_left() {
  (cd "$1" && for _f in $(ls -A); do
    case $_f in
      torchinductor_*) ;;
      ompi.*) rmdir "$_f" 2>/dev/null || echo "$_f" ;;
      *) echo "$_f" ;;
    esac
  done) | tr '\n' ' '
}
# wait_until SECONDS CONDITION: until the shell condition holds (evaluated
# every 0.1 s), SECONDS at most; its status is the condition's last
wait_until() {
  _w=$(($1 * 10))
  while ! eval "$2"; do
    [ "$_w" -gt 0 ] || return 1
    _w=$((_w - 1))
    sleep 0.1
  done
}
# tmp_settled DIR [SECONDS]: tmp_left DIR once it is empty, or SECONDS
# (default 5) have passed (the library's watchers remove what a killed
# rank left a moment after the job ends)
tmp_settled() {
  wait_until "${2:-5}" "[ -z \"\$(tmp_left '$1')\" ]" || true
  tmp_left "$1"
}
# no_leftovers TAG: no process of the job is left
no_leftovers() {
  sleep 1
  _left=$(pgrep -f -- "--tag $1" || true)
  _left="$_left $(job_processes)"
  [ -z "$(echo $_left)" ] || { ps -o pid,stat,args -p "$(echo $_left | tr ' ' ',')"; fail "processes left behind: $_left"; }
}
# job_processes: the pids of processes started by this test's jobs (shim)
# still there, reapers included (HVDCHECK_TMP in their environment)
job_processes() {
  grep -lzx "HVDCHECK_TMP=$TMP" /proc/[0-9]*/environ 2>/dev/null | sed 's|/proc/\([0-9]*\)/environ|\1|' | tr '\n' ' '
}
now_ms() { date +%s%3N; }
