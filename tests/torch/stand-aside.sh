#!/bin/sh
# A script that already distributes itself (DDP, Horovod) is left alone, with
# one info line saying so; MPI initialized when torch is imported (below).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
export HVDSHIM_LOG_LEVEL=info
shim 2 "$PYTHON" "$TORCH_DIR/ddp_train.py" "$TMP/store" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "DDP script failed under the shim"; }
# its own DistributedSampler: 64 samples per rank = 4 batches; both ranks print
# (stdout untouched). Not anchored: mpirun forwards each rank's output in
# chunks of its own, so two ranks' lines can meet on one line (seen in CI).
grep -q "rank 0 of 2 batches 4" "$TMP/out" && grep -q "rank 1 of 2 batches 4" "$TMP/out" ||
  { cat "$TMP/out"; fail "DDP script did not run as written"; }
[ "$(grep -c 'hvdshim stands aside' "$TMP/out")" = 1 ] || { cat "$TMP/out"; fail "expected one stand-aside line"; }
grep -q "engine started" "$TMP/out" && { cat "$TMP/out"; fail "the engine started in a DDP script"; }
pass "DDP script left alone"
# A (stand-in) Horovod import
mkdir -p "$TMP/fake/horovod"
: >"$TMP/fake/horovod/__init__.py"
cat >"$TMP/hvd.py" <<'PY'
import torch, horovod
m = torch.nn.Linear(2, 1)
m(torch.ones(1, 2)).sum().backward()
import sys
sys.stdout.write("hvd-script-done\n")  # one write: lines of two ranks stay whole
sys.stdout.flush()
PY
PYTHONPATH="$TMP/fake" shim 2 -x PYTHONPATH "$PYTHON" "$TMP/hvd.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "horovod script failed"; }
grep -q "Horovod is in use: the script distributes itself; hvdshim stands aside" "$TMP/out" &&
  [ "$(grep -o 'hvd-script-done' "$TMP/out" | wc -l)" = 2 ] || { cat "$TMP/out"; fail "Horovod script not left alone"; }
pass "Horovod script left alone"
# A script that starts its own processes (pytorch/examples' ImageNet trainer
# with --multiprocessing-distributed: mp.spawn, a process group in each
# child): one warning, by rank 0, naming the call; the script runs on
cat >"$TMP/spawn.py" <<'PY'
import torch
import torch.multiprocessing as mp
def child(i):
    pass
if __name__ == "__main__":
    m = torch.nn.Linear(2, 1)
    m(torch.ones(1, 2)).sum().backward()
    mp.spawn(child, nprocs=1)
    print("spawn-done")
PY
shim 2 "$PYTHON" "$TMP/spawn.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "a script calling mp.spawn failed"; }
[ "$(grep -c 'hvdshim\[0\]: warning (torch): torch.multiprocessing.spawn was called on every rank: the script starts its own processes' "$TMP/out")" = 1 ] &&
  ! grep -q "hvdshim\[1\].*multiprocessing" "$TMP/out" && grep -q "spawn-done" "$TMP/out" || { cat "$TMP/out"; fail "mp.spawn: expected one warning, from rank 0"; }
pass "a script starting its own processes (mp.spawn): one warning naming it"
# hvdshim's served horovod imported only to learn whether it can be (as
# torch-ignite imports horovod.torch): the script is distributed (4 batches
# a rank); with hvd.init() it distributes itself and is left alone
cat >"$TMP/probe.py" <<'PY'
import sys
import torch
try:
    import horovod.torch as hvd
except ImportError:
    hvd = None
if "init" in sys.argv:
    hvd.init()
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
m = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
n = 0
for x, y in dl:
    opt.zero_grad()
    torch.nn.functional.mse_loss(m(x), y).backward()
    opt.step()
    n += 1
sys.stdout.write("probe batches %d\n" % n)
sys.stdout.flush()
PY
HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" "$TMP/probe.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "a script importing horovod.torch failed"; }
[ "$(grep -c '^\[rank [01]\] probe batches 4$' "$TMP/out")" = 2 ] && ! grep -q "stands aside" "$TMP/out" ||
  { cat "$TMP/out"; fail "a script that imports horovod.torch and never calls hvd.init() was not distributed"; }
shim 2 "$PYTHON" "$TMP/probe.py" init >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "a script calling hvd.init() failed"; }
[ "$(grep -c 'probe batches 8' "$TMP/out")" = 2 ] && grep -q "Horovod is in use: the script distributes itself" "$TMP/out" ||
  { cat "$TMP/out"; fail "a script calling hvd.init() was not left alone"; }
pass "hvdshim's horovod imported and not initialized (a library's check): the script is distributed; with hvd.init(): left alone"

# MPI initialized early (HVDSHIM_EARLY_MPI, on by default): when the script
# imports torch, so the ranks meet before it builds its data and model; the
# engine, started at first use, owns that MPI.  Without the engine's start
# (a script that stands aside, trains nothing, or fails before its first
# use) the process's exit finalizes it (status 0) or ends the job
# (MPI_Abort, any other status); a program's own MPI_Init then succeeds.
tag=early-$$
cat >"$TMP/early.py" <<'PY'
import ctypes, os, sys, time
import torch
mode, rank = sys.argv[1], int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
lib = ctypes.CDLL(None)  # the preloaded library's MPI_Init, as a program's own call would find it
if mode == "idle":
    sys.stdout.write("idle-done\n")
    sys.exit(0)
if mode == "fail":
    if rank == 1:
        sys.exit(3)
    time.sleep(60)
if mode == "mpi":
    up = ctypes.c_int(0)
    rc = lib.MPI_Init(None, None)
    lib.MPI_Initialized(ctypes.byref(up))
    sys.stdout.write("MPI_Init %d initialized %d\n" % (rc, up.value))
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    m(torch.ones(8, 4)).sum().backward()
    opt.step()
if mode == "mpi":
    sys.stdout.write("MPI_Finalize %d\n" % lib.MPI_Finalize())
sys.stdout.write("%s-done\n" % mode)
sys.stdout.flush()
PY
HVDSHIM_LOG_LEVEL=debug shim 2 "$PYTHON" "$TMP/early.py" train --tag "$tag" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "training with MPI initialized early"; }
[ "$(grep -c "MPI initialized early" "$TMP/out")" = 2 ] && [ "$(grep -c "engine started: 2 rank(s), MPI initialized by hvdshim" "$TMP/out")" = 2 ] &&
  [ "$(grep -c "^train-done" "$TMP/out")" = 1 ] || { cat "$TMP/out"; fail "MPI not initialized early, or not the engine's"; }
HVDSHIM_EARLY_MPI=0 HVDSHIM_LOG_LEVEL=debug shim 2 "$PYTHON" "$TMP/early.py" train --tag "$tag" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "HVDSHIM_EARLY_MPI=0"; }
! grep -q "MPI initialized early" "$TMP/out" && [ "$(grep -c "engine started: 2 rank(s), MPI initialized by hvdshim" "$TMP/out")" = 2 ] ||
  { cat "$TMP/out"; fail "HVDSHIM_EARLY_MPI=0: MPI initialized early, or the engine did not start it"; }
pass "MPI initialized when torch is imported, the engine's at first use (HVDSHIM_EARLY_MPI=0: with the engine)"
shim 2 "$PYTHON" "$TMP/early.py" idle --tag "$tag" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "a script that trains nothing"; }
[ "$(grep -c "^idle-done" "$TMP/out")" = 1 ] && ! grep -q "engine started" "$TMP/out" || { cat "$TMP/out"; fail "idle script"; }
shim 2 "$PYTHON" "$TMP/early.py" mpi --tag "$tag" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "a script that initializes MPI itself"; }
grep -q "^MPI_Init 0 initialized 1" "$TMP/out" && grep -q "^MPI_Finalize 0" "$TMP/out" && grep -q "^mpi-done" "$TMP/out" ||
  { cat "$TMP/out"; fail "the script's own MPI_Init and MPI_Finalize"; }
t0=$(now_ms)
shim 2 "$PYTHON" "$TMP/early.py" fail --tag "$tag" >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "a rank's exit 3 before its first use ended the job 0"; }
t=$(($(now_ms) - t0))
[ "$(grep -c "error (lifecycle): this rank is exiting with status 3; ending the job" "$TMP/out")" = 1 ] && [ "$t" -lt 40000 ] ||
  { cat "$TMP/out"; fail "exit 3 before the first use: not one line (MPI_Abort's _exit said it again), or the job waited for rank 0's 60 s ($t ms)"; }
no_leftovers "$tag"
pass "MPI initialized early, no engine: a script that trains nothing ends 0; its own MPI_Init and MPI_Finalize succeed; exit 3 on one rank ends the job ($t ms, rank 0 sleeping 60 s)"
