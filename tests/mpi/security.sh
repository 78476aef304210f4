#!/bin/sh
# Security properties of the shim:
#  - output files: a symlink or a hard link planted at the timeline path is
#    refused (warning, timeline off, the job runs, the target is untouched);
#    a file it creates has mode 0644 (umask 022);
#  - no network code of its own: the library imports no socket call (MPI's
#    and NCCL's connections are theirs);
#  - setuid/setgid processes: the shim does nothing (checked with a setgid
#    program linked to it; needs root to make one, else skipped with a note).
. "$(dirname "$0")/../lib.sh"
need_mpirun
victim="$TMP/victim"
echo "precious" >"$victim"
ln -s "$victim" "$TMP/tl-symlink.json"
HVDSHIM_TIMELINE="$TMP/tl-symlink.json" mpi 2 -x HVDSHIM_TIMELINE "$ENGINE_TEST" random 1 4 1 1 >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "job with a symlinked timeline path failed"; }
grep -q "timeline: cannot open '$TMP/tl-symlink.json': it is a symbolic link" "$TMP/out" || { cat "$TMP/out"; fail "no symlink refusal"; }
[ "$(cat "$victim")" = precious ] || fail "the symlink's target was written"
ln "$victim" "$TMP/tl-hardlink.json"
HVDSHIM_TIMELINE="$TMP/tl-hardlink.json" mpi 2 -x HVDSHIM_TIMELINE "$ENGINE_TEST" random 1 4 1 1 >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "job with a hard-linked timeline path failed"; }
grep -q "it has other hard links" "$TMP/out" || { cat "$TMP/out"; fail "no hard-link refusal"; }
[ "$(cat "$victim")" = precious ] || fail "the hard link's target was written"
(umask 022 && HVDSHIM_TIMELINE="$TMP/tl.json" mpi 2 -x HVDSHIM_TIMELINE "$ENGINE_TEST" random 1 4 1 1 >"$TMP/out" 2>&1) ||
  { cat "$TMP/out"; fail "timeline job failed"; }
mode=$(stat -c %a "$TMP/tl.json")
[ "$mode" = 644 ] || fail "timeline created with mode $mode"
pass "output files: symlink and hard link refused, targets untouched; created with mode 0644"

if command -v nm >/dev/null 2>&1; then
  net=$(nm -D --undefined-only "$LIB" | awk '{print $NF}' | sed 's/@.*//' |
    grep -x -E 'socket|connect|bind|listen|accept|accept4|getaddrinfo|gethostbyname|sendto|recvfrom|socketpair' || true)
  [ -z "$net" ] || fail "the library imports network calls: $net"
  pass "no socket call imported by libhvdshim.so"
else
  echo "SKIP part: nm not found (binutils)"
fi

if [ "$(id -u)" != 0 ]; then
  echo "setgid check skipped: making a setgid program of another group needs root"
else
  CC=${CC:-cc}
  cat >"$TMP/probe.c" <<'C'
#include <stdio.h>
#include "adapter_api.h" /* hvd_role_now, with hvdshim.h */
int main(void) {
  hvd_status_t st = hvd_init();
  printf("role=%s init=%d %s\n", hvd_role_now(), (int)st, hvd_last_error());
  return 0;
}
C
  "$CC" -o "$TMP/probe" "$TMP/probe.c" -I"$top_builddir/collectives" -I"$top_srcdir/collectives" -I"$top_srcdir/shim" -L"$top_builddir/.libs" -lhvdshim \
    -Wl,-rpath,"$top_builddir/.libs" 2>"$TMP/cc.out" || { cat "$TMP/cc.out"; fail "cannot build the setgid probe"; }
  chgrp nogroup "$TMP/probe" && chmod 2755 "$TMP/probe"
  chmod 755 "$TMP" # the setgid program must be reachable
  out=$(OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 HVDSHIM_LOG_LEVEL=debug "$TMP/probe" 2>&1)
  case $out in
  *"role=disabled"*"inert in this process (disabled)"*) pass "setgid program: the shim stays inert ($out)" ;;
  *) fail "setgid program: $out" ;;
  esac
fi
