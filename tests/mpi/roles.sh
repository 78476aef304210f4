#!/bin/sh
# Roles (DESIGN §3) with the library preloaded: a plain process, mpirun
# itself, the rank processes, a `sh -c` child of an active rank and a forked
# child.  Only the ranks may initialize MPI or start a thread.
. "$(dirname "$0")/../lib.sh"
need_mpirun
PROBE="$top_builddir/tests/mpi/role_probe"
LD_PRELOAD="$LIB" HVDSHIM_LOG_LEVEL=debug "$PROBE" plain >"$TMP/plain" 2>&1 || { cat "$TMP/plain"; fail "plain process was not inert"; }
grep -q "role dormant in role_probe.*no rank in the environment" "$TMP/plain" || { cat "$TMP/plain"; fail "plain: no dormant line"; }
LD_PRELOAD="$LIB" HVDSHIM_LOG_LEVEL=debug mpi 2 -x LD_PRELOAD -x HVDSHIM_LOG_LEVEL "$PROBE" activate >"$TMP/job" 2>&1 ||
  { cat "$TMP/job"; fail "job"; }
grep -Eq "role dormant in (mpirun|orterun|prterun)" "$TMP/job" || { cat "$TMP/job"; fail "mpirun was not dormant"; }
[ "$(grep -c 'role armed in role_probe' "$TMP/job")" = 2 ] || { cat "$TMP/job"; fail "ranks not armed"; }
grep -q "role dormant in sh .*HVDSHIM_ACTIVE_PID" "$TMP/job" || { cat "$TMP/job"; fail "sh -c child not dormant"; }
[ "$(grep -c 'role_probe child: mpi_initialized=0 threads=[0-9]* hvdshim_threads=0' "$TMP/job")" = 2 ] || { cat "$TMP/job"; fail "executed child initialized something"; }
[ "$(grep -c 'role_probe forked: hvd_init=5 (hvd_init: hvdshim is inert in a forked child' "$TMP/job")" = 2 ] || { cat "$TMP/job"; fail "forked child"; }
[ "$(grep -c 'role_probe activate: OK' "$TMP/job")" = 2 ] || { cat "$TMP/job"; fail "activate"; }
HVDSHIM_DISABLE=1 LD_PRELOAD="$LIB" HVDSHIM_LOG_LEVEL=debug mpi 1 -x LD_PRELOAD -x HVDSHIM_DISABLE -x HVDSHIM_LOG_LEVEL "$PROBE" activate >"$TMP/dis" 2>&1 &&
  { cat "$TMP/dis"; fail "HVDSHIM_DISABLE=1 still activated"; }
grep -q "hvdshim is inert in this process (disabled)" "$TMP/dis" || { cat "$TMP/dis"; fail "disabled: no reason given"; }
pass "plain, mpirun, ranks, exec'd and forked children, HVDSHIM_DISABLE"
