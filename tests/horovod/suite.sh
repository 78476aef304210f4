#!/bin/sh
# Horovod 0.28.1's own PyTorch suite (test/parallel/test_torch.py with its
# test/utils/common.py, unmodified, from ../shared/reference) against the
# served horovod package: the whole file in one pytest session per job, as
# Horovod runs it, at np=2 and np=3.  Every rank must end with 0 failed and
# 0 errors, at least as many passed as real Horovod (103 passed, 12 skipped
# at np=2 on Debian 12), and the job must not hang (bounded by timeout).
# common.py's one launcher import (horovod.runner.util.threads.in_thread)
# is served by the package.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
REF="$top_srcdir/../shared/reference/horovod-0.28.1/tests"
[ -f "$REF/test_torch.py" ] && [ -f "$REF/common.py" ] ||
  skip "Horovod's suite is not here ($REF: ../shared/reference beside the source tree)"
"$PYTHON" -c 'import pytest, mock, cloudpickle, packaging, numpy' 2>/dev/null ||
  skip "$PYTHON lacks what Horovod's suite imports (apt-get install python3-pytest python3-mock" \
    "python3-cloudpickle python3-packaging python3-numpy)"

# Each rank writes its own pytest output (the ranks' lines would interleave);
# no cache or hypothesis database is written (the reference is read-only).
# At np=3 (rank.sh's argument 'leave-out') three tests are left out: they
# expect a float16 sum of three prescaled values to equal 3 x the value,
# which float16 cannot hold in general.  Real Horovod fails them there too,
# and then the ranks whose slices happened to match go on alone and wait in
# the next test.
LEAVE_OUT="not test_horovod_allreduce_prescale and not test_horovod_reducescatter_prescale"
LEAVE_OUT="$LEAVE_OUT and not test_horovod_grouped_reducescatter_prescale"
{
  echo '#!/bin/sh'
  echo 'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-x}}}'
  echo "[ \"\${1:-}\" = leave-out ] && set -- -k \"$LEAVE_OUT\""
  echo "cd \"$TMP\" && exec \"$PYTHON\" -m pytest -q -p no:cacheprovider -p no:hypothesispytest -rfE \"\$@\" \\"
  echo "  \"$REF/test_torch.py\" >\"$TMP/out.\$r\" 2>&1"
} >"$TMP/rank.sh"
chmod +x "$TMP/rank.sh"

# floor: real Horovod's count at np=2 (103 passed, 12 skipped); at np=3 the
# same 103 less the three left out
for np in 2 3; do
  case $np in 2) floor=103 out="" ;; *) floor=100 out=leave-out ;; esac
  rm -f "$TMP"/out.*
  start=$(date +%s)
  # shellcheck disable=SC2086
  T=900 shim $np "$TMP/rank.sh" $out >"$TMP/job" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  [ $rc = 124 ] || [ $rc = 137 ] &&
    { tail -n 30 "$TMP"/out.* "$TMP/job"; fail "np=$np: the suite hung (killed after 900 s)"; }
  r=0
  while [ $r -lt $np ]; do
    [ -f "$TMP/out.$r" ] || { cat "$TMP/job"; fail "np=$np: rank $r wrote no pytest output"; }
    summary=$(grep -E "^=*[ ]*[0-9]+ (passed|failed)" "$TMP/out.$r" | tail -n 1 | tr -d '=')
    passed=$(echo "$summary" | grep -o '[0-9]* passed' | cut -d' ' -f1)
    failed=$(echo "$summary" | grep -o '[0-9]* failed' | cut -d' ' -f1)
    errors=$(echo "$summary" | grep -o '[0-9]* error' | cut -d' ' -f1)
    [ -n "$passed" ] && [ "${failed:-0}" = 0 ] && [ "${errors:-0}" = 0 ] && [ "$passed" -ge $floor ] ||
      { tail -n 60 "$TMP/out.$r"; fail "np=$np rank $r: '$summary' (want 0 failed or errors, >= $floor passed)"; }
    r=$((r + 1))
  done
  [ $rc = 0 ] || { cat "$TMP/job"; fail "np=$np: the job ended with status $rc"; }
  counts=$(echo "$summary" | sed 's/ in [0-9.]*s.*//')
  pass "np=$np: Horovod's test_torch.py, one session: $counts on every rank ($secs s)"
done
