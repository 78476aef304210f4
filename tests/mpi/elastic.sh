#!/bin/sh
# HVDSHIM_ELASTIC=1: a rank that dies no longer ends the job.  Under an MPI
# with ULFM fault tolerance (Open MPI 5+, mpirun --with-ft ulfm), a rank
# SIGKILLs itself in the middle of a run of allreduces; the survivors'
# operations in flight fail naming the death, the engine revokes and shrinks
# its communicator and rebuilds over the survivors, and the job goes on
# (every sum the sum over the ranks alive, the survivors renumbered in
# order) and ends 0.  Rank 0 dying, a middle rank, the last, and five at a
# random rank and step; then
# HVDSHIM_ELASTIC_MIN_NP not met ends the job with one line.  Where the MPI
# has no ULFM, HVDSHIM_ELASTIC=1 is refused at start with one line.
. "$(dirname "$0")/../lib.sh"
need_mpirun
if ! nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink"; then
  T=60 mpi 2 -x HVDSHIM_ELASTIC=1 "$ENGINE_TEST" collectives >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "HVDSHIM_ELASTIC=1 was accepted by an MPI without ULFM"; }
  ranks_said "$TMP/out" "HVDSHIM_ELASTIC=1 needs an MPI that survives a peer's death (ULFM" 2 || { cat "$TMP/out"; fail "no line saying why elastic is refused"; }
  skip "this MPI has no ULFM fault tolerance: HVDSHIM_ELASTIC=1 is refused at start with one line (checked); the survival cases need Open MPI 5+"
fi
[ "${MPI_KIND:-ompi}" = hydra ] && skip "MPICH: HVDSHIM_ELASTIC is built for Open MPI's ULFM"
# three fixed cases, then five at a random rank and step (the seed is printed)
seed=${ELASTIC_SEED:-$(date +%s)}
echo "random cases: ELASTIC_SEED=$seed"
cases="3:2:10 3:0:10 4:1:10"
for k in 1 2 3 4 5; do
  cases="$cases 3:$(((seed / k + k) % 3)):$(((seed / (k * 7) + k) % 29 + 2))"
done
for case in $cases; do
  np=${case%%:*} dying=${case#*:} at=${case##*:}
  dying=${dying%%:*}
  T=120 mpi $np --with-ft ulfm -x HVDSHIM_ELASTIC=1 "$ENGINE_TEST" survive $dying $at 20 >"$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "np=$np, rank $dying killed: the survivors' job failed"; }
  [ "$(grep -c "went on as [0-9]* of $((np - 1)) after rank $dying died" "$TMP/out")" = $((np - 1)) ] ||
    { cat "$TMP/out"; fail "np=$np: not every survivor went on"; }
  grep -q "rank(s) $dying died (.*); the job goes on over $((np - 1)) rank(s)" "$TMP/out" ||
    { cat "$TMP/out"; fail "np=$np: no line naming the dead rank"; }
  pass "np=$np, rank $dying SIGKILLed at its allreduce $at: the $((np - 1)) survivors shrink the job and go on (sums, ranks, allgather right; ended 0)"
done
# (3 times: Open MPI 5's launcher answered MPI_Abort after a death under ULFM
# with status 0 about 1 run in 10, or hung; the survivors now finalize and
# leave with status 1 together)
for k in 1 2 3; do
  rc=0
  T=60 mpi 3 --with-ft ulfm -x HVDSHIM_ELASTIC=1 -x HVDSHIM_ELASTIC_MIN_NP=3 "$ENGINE_TEST" survive 1 10 20 >"$TMP/out" 2>&1 || rc=$?
  [ $rc = 0 ] && { cat "$TMP/out"; fail "the job below HVDSHIM_ELASTIC_MIN_NP exited 0"; }
  [ $rc = 124 ] || [ $rc = 137 ] && { cat "$TMP/out"; fail "the job below HVDSHIM_ELASTIC_MIN_NP did not end (killed after 60 s)"; }
  [ "$(grep -c "rank(s) 1 died; 2 rank(s) left, fewer than HVDSHIM_ELASTIC_MIN_NP=3: ending the job" "$TMP/out")" = 2 ] ||
    { cat "$TMP/out"; fail "not one line per survivor saying the job is below HVDSHIM_ELASTIC_MIN_NP"; }
  ! grep -q "called _exit\|MPI_ABORT was invoked" "$TMP/out" || { cat "$TMP/out"; fail "below HVDSHIM_ELASTIC_MIN_NP: a second cause named"; }
done
pass "below HVDSHIM_ELASTIC_MIN_NP: the job ends with status $rc and one line per survivor, 3 runs"

# A PyTorch script does not survive a death yet (the adapter's step in
# flight, loaders and files): the job ends non-zero, bounded, and each
# survivor says why in one line.
PYTHON=${PYTHON:-/usr/bin/python3}
if "$PYTHON" -c 'import torch' 2>/dev/null; then
  cat >"$TMP/die.py" <<'PY'
import os, signal, torch
torch.manual_seed(0)
m = torch.nn.Linear(10, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(40):
    if os.environ.get("OMPI_COMM_WORLD_RANK") == "1" and step == 10:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    m(torch.randn(8, 10)).pow(2).mean().backward()
    opt.step()
PY
  rc=0
  T=60 LD_PRELOAD="$LIB" mpi 3 --with-ft ulfm -x LD_PRELOAD -x OMP_NUM_THREADS=1 -x HVDSHIM_ELASTIC=1 "$PYTHON" "$TMP/die.py" \
    >"$TMP/out" 2>&1 || rc=$?
  [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 ] && { cat "$TMP/out"; fail "PyTorch script, rank 1 killed: status $rc, expected a failure within 60 s"; }
  grep -q "rank(s) 1 died (.*) while .*; a PyTorch script cannot go on without them yet" "$TMP/out" ||
    { cat "$TMP/out"; fail "PyTorch script, rank 1 killed: no line saying the script cannot go on"; }
  pass "a PyTorch script whose rank 1 is killed: the job ends with status $rc and a line naming the death (not survived yet)"
fi
