#!/bin/sh
# Horovod 0.28.1's own PyTorch suite (test/parallel/test_torch.py with its
# test/utils/common.py, unmodified, from ../shared/reference) against the
# served horovod package: the whole file in one pytest session per job, as
# Horovod runs it, at np=2 and np=3, with Horovod's unit test of its elastic
# API (test/single/test_torch_elastic.py) in the same session.  Every rank
# must end with 0 failed and 0 errors, at least as many passed as real
# Horovod (103 passed, 12 skipped at np=2 on Debian 12, and the elastic
# state test), and the job must not hang (bounded by timeout).  The elastic
# sampler test counts one rank's batches (real Horovod fails it at np=2):
# it runs in its own session at np=1, where both elastic tests pass on real
# Horovod.
# common.py's one launcher import (horovod.runner.util.threads.in_thread)
# is served by the package.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
REF="$top_srcdir/../shared/reference/horovod-0.28.1/tests"
[ -f "$REF/test_torch.py" ] && [ -f "$REF/common.py" ] && [ -f "$REF/test_torch_elastic.py" ] ||
  skip "Horovod's suite is not here ($REF: ../shared/reference beside the source tree)"
"$PYTHON" -c 'import pytest, mock, cloudpickle, packaging, numpy' 2>/dev/null ||
  skip "$PYTHON lacks what Horovod's suite imports (apt-get install python3-pytest python3-mock" \
    "python3-cloudpickle python3-packaging python3-numpy)"

# Each rank writes its own pytest output (the ranks' lines would interleave);
# no cache or hypothesis database is written (the reference is read-only).
# At np=3 three tests are left out (a pytest -k expression): they
# expect a float16 sum of three prescaled values to equal 3 x the value,
# which float16 cannot hold in general.  Real Horovod fails them there too,
# and then the ranks whose slices happened to match go on alone and wait in
# the next test.
LEAVE_OUT="not test_horovod_allreduce_prescale and not test_horovod_reducescatter_prescale"
LEAVE_OUT="$LEAVE_OUT and not test_horovod_grouped_reducescatter_prescale"
# test_elastic_sampler asserts that sampler.processed_num counts this rank's
# samples, where ElasticSampler.record_batch counts every rank's (batch size
# x ranks): real Horovod fails it at np=2 ("assert 4 == (2 * (0 + 1))"), so
# it runs at np=1 (below)
SAMPLER="not test_elastic_sampler"
# torch 2.9 and later ship torch.optim.Muon, whose constructor refuses 1-D
# parameters: test_broadcast_state, test_broadcast_state_options and
# test_force_allreduce build every torch.optim optimizer over a model with
# biases, and fail in torch's own constructor before any of Horovod's code
# runs (real Horovod fails them the same way there).  Left out where Muon
# exists, with the floors lowered by 3.
NEW_OPTIM=""
if "$PYTHON" -c 'import sys, torch.optim; sys.exit(0 if hasattr(torch.optim, "Muon") else 1)' 2>/dev/null; then
  NEW_OPTIM="not (test_broadcast_state and not test_broadcast_state_gpu and not test_broadcast_state_no_grad)"
  NEW_OPTIM="$NEW_OPTIM and not test_force_allreduce"
  echo "this torch has torch.optim.Muon: test_broadcast_state, test_broadcast_state_options and test_force_allreduce left out"
fi
# test_global_barrier_op times a barrier on each rank's own clock from its
# return out of an allreduce: rank 0 sleeps 5 s, and every rank must measure
# at least 5 s.  A rank descheduled for a few milliseconds between the
# allreduce's end and its clock read (np=3 on 2 CPUs, on a busy host)
# measures 4.99x s: real Horovod fails it the same way here under load (10 of
# 300 tries on rank 1 with two busy loops beside the job, hvdshim 25 of 300).
# Where it is a rank's only failure, it runs once more in a session of its
# own, which must pass.
TIMED=test_global_barrier_op
# rank.sh K FILE...: one rank's pytest session over the test files, with the -k
# expression K (or none).  Its status goes to rc.RANK and the process ends
# with 0, so that a rank with a failed test does not end the job (a rank
# exiting non-zero does) before the others have written their summaries.
{
  echo '#!/bin/sh'
  echo 'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-x}}}'
  echo 'k=$1; shift'
  echo '[ -n "$k" ] && set -- -k "$k" "$@"'
  echo "cd \"$TMP\" && exec \"$PYTHON\" -c 'import sys, pytest; rc = int(pytest.main(sys.argv[2:])); open(sys.argv[1], \"w\").write(str(rc))' \\"
  echo "  \"$TMP/rc.\$r\" -q -p no:cacheprovider -p no:hypothesispytest -rfE \"\$@\" >\"$TMP/out.\$r\" 2>&1"
} >"$TMP/rank.sh"
chmod +x "$TMP/rank.sh"

# floor: real Horovod's count at np=2 (103 passed, 12 skipped) and the
# elastic state test; at np=3 the same less the three left out (and 3 fewer
# where Muon exists); at np=1, the two elastic tests alone
# SUITE_NPS: the sizes run (default "2 3 1"; check-stacks sets "2" on sid:
# the served package's Python over torch 2.14 at np=2, the sizes' own
# arithmetic (np=3) and the elastic sampler (np=1) run on Debian 12)
for np in ${SUITE_NPS:-2 3 1}; do
  files="$REF/test_torch.py $REF/test_torch_elastic.py"
  case $np in
    1) floor=2 k="" files="$REF/test_torch_elastic.py" ;;
    2) floor=104 k="$SAMPLER${NEW_OPTIM:+ and $NEW_OPTIM}" ;;
    *) floor=101 k="$SAMPLER and $LEAVE_OUT${NEW_OPTIM:+ and $NEW_OPTIM}" ;;
  esac
  [ -n "$NEW_OPTIM" ] && [ $np != 1 ] && floor=$((floor - 3))
  rm -f "$TMP"/out.* "$TMP"/rc.*
  start=$(date +%s)
  # shellcheck disable=SC2086
  T=900 shim $np "$TMP/rank.sh" "$k" $files >"$TMP/job" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  [ $rc = 124 ] || [ $rc = 137 ] &&
    { tail -n 30 "$TMP"/out.* "$TMP/job"; fail "np=$np: the suite hung (killed after 900 s)"; }
  r=0 retimed=
  while [ $r -lt $np ]; do
    [ -f "$TMP/out.$r" ] || { cat "$TMP/job"; fail "np=$np: rank $r wrote no pytest output"; }
    [ -f "$TMP/rc.$r" ] || { tail -n 30 "$TMP/out.$r" "$TMP/job"; fail "np=$np: rank $r's pytest did not end"; }
    summary=$(grep -E "^=*[ ]*[0-9]+ (passed|failed)" "$TMP/out.$r" | tail -n 1 | tr -d '=')
    passed=$(echo "$summary" | grep -o '[0-9]* passed' | cut -d' ' -f1)
    failed=$(echo "$summary" | grep -o '[0-9]* failed' | cut -d' ' -f1)
    errors=$(echo "$summary" | grep -o '[0-9]* error' | cut -d' ' -f1)
    # the one timing test that failed alone (TIMED, above) is run again (pytest
    # leaves out the " - AssertionError..." where the line is past the width)
    if [ "${failed:-0}" = 1 ] && [ "${errors:-0}" = 0 ] && [ -n "$passed" ] && [ "$passed" -ge $((floor - 1)) ] &&
      grep -q "^FAILED .*::$TIMED\( - AssertionError.*\)\{0,1\}$" "$TMP/out.$r"; then
      retimed="$retimed $r" failed=0 passed=$((passed + 1))
    fi
    [ -n "$passed" ] && [ "${failed:-0}" = 0 ] && [ "${errors:-0}" = 0 ] && [ "$passed" -ge $floor ] &&
      { [ "$(cat "$TMP/rc.$r")" = 0 ] || [ -n "$retimed" ]; } ||
      { tail -n 60 "$TMP/out.$r"; fail "np=$np rank $r: '$summary' (want 0 failed or errors, >= $floor passed)"; }
    r=$((r + 1))
  done
  [ $rc = 0 ] || { cat "$TMP/job"; fail "np=$np: the job ended with status $rc"; }
  counts=$(echo "$summary" | sed 's/ in [0-9.]*s.*//')
  [ -n "$retimed" ] && counts="at least $floor passed, 0 failed"
  again=
  if [ -n "$retimed" ]; then
    rm -f "$TMP"/out.* "$TMP"/rc.*
    T=120 shim $np "$TMP/rank.sh" "$TIMED" "$REF/test_torch.py" >"$TMP/job" 2>&1 ||
      { tail -n 30 "$TMP"/out.* "$TMP/job"; fail "np=$np: the job running $TIMED alone ended with status $?"; }
    r=0
    while [ $r -lt $np ]; do
      [ "$(cat "$TMP/rc.$r" 2>/dev/null)" = 0 ] && grep -q "^=*[ ]*1 passed" "$TMP/out.$r" ||
        { tail -n 30 "$TMP/out.$r"; fail "np=$np: $TIMED failed on rank(s)$retimed, and again alone on rank $r"; }
      r=$((r + 1))
    done
    again="; $TIMED failed on rank(s)$retimed (a rank late out of the allreduce before it), passed run again"
  fi
  pass "np=$np: Horovod's $(echo "$files" | sed "s|$REF/||g; s| | and |"), one session: $counts on every rank ($secs s)$again"
done
