#!/bin/sh
# A Horovod script whose last rank runs out of work first
# (tests/horovod/early_end_hvd.py, np=3: rank 2 does 3 steps, the others 6),
# on the served package.  Without hvd.join(), as on Horovod: once rank 2
# has ended, the others' next operations raise HorovodInternalError, and a
# script that catches it ends 0.  With hvd.join(): the others' steps go on
# without rank 2's data, averaged over the job's size, and join returns the
# last rank to join (one that ran every step).  Each rank's lines against
# their formulas, and, where Horovod 0.28.1 itself is importable
# (../shared/reference, Debian 12), the very lines it writes.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
S="$top_srcdir/tests/horovod/early_end_hvd.py"
# want CASE: the lines each rank should write (np=3, 6 and 3 steps)
want() {
  for r in 0 1 2; do
    awk -v r=$r -v join=$([ "$1" = join ] && echo 1 || echo 0) 'BEGIN {
      n = 3; steps = (r == n - 1) ? 3 : 6
      for (i = 0; i < steps; i++) {
        if (i < 3) v = (n + 1) / 2 + i          # every rank: (r + 1 + i) averaged
        else if (join) v = ((n - 1) * n / 2 + (n - 1) * i) / n  # rank 2 joined: its 0 in the average
        else { print "step " i " HorovodInternalError"; continue }
        s = sprintf("%.4f", v); print "step " i " ok " s " " s " " s " " s
      }
      if (join) print "joined; the last to join ran every step: True"
      print "end" }' >"$TMP/want-$1.$r"
  done
}
REAL="$top_srcdir/../shared/reference/horovod-0.28.1"
real=
if [ -d "$REAL/horovod" ] && PYTHONPATH="$REAL" "$PYTHON" -c 'import horovod.torch' >/dev/null 2>&1; then real=1; fi
for c in uneven join; do
  flag=; [ $c = join ] && flag=--join
  want $c
  T=60 shim 3 "$PYTHON" "$S" $flag "$TMP/served-$c" >"$TMP/out-$c" 2>&1 || { cat "$TMP/out-$c"; fail "$c: the job failed"; }
  for r in 0 1 2; do
    diff "$TMP/want-$c.$r" "$TMP/served-$c.$r" >"$TMP/d" || { cat "$TMP/out-$c" "$TMP/d"; fail "$c: rank $r's lines differ from their formulas (< wanted, > served)"; }
  done
  if [ $c = uneven ]; then
    [ "$(cat "$TMP/served-$c".err.[01] | grep -c "^step [345]: .*a rank finished (shutdown, or its exit) while this one still submits")" = 6 ] ||
      { cat "$TMP/out-$c" "$TMP/served-$c".err.*; fail "uneven: the errors do not say that a rank finished"; }
  fi
  what="matched their formulas"
  if [ -n "$real" ]; then
    PYTHONPATH="$REAL" T=60 mpi 3 -x PYTHONPATH "$PYTHON" "$S" $flag "$TMP/real-$c" >"$TMP/real.out" 2>&1 ||
      { cat "$TMP/real.out"; fail "$c: real Horovod's run failed"; }
    for r in 0 1 2; do
      diff "$TMP/real-$c.$r" "$TMP/served-$c.$r" >"$TMP/d" || { cat "$TMP/d"; fail "$c: rank $r's lines differ from real Horovod's (< real, > served)"; }
    done
    what="$what and real Horovod 0.28.1's"
  fi
  case $c in
    uneven) pass "no join: rank 2 ended after 3 steps, the others' next 3 operations raised HorovodInternalError, the job ended 0: every rank's lines $what" ;;
    join) pass "hvd.join(): the others' 3 steps averaged without rank 2's data, over the job's size: every rank's lines $what" ;;
  esac
done
