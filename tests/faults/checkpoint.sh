#!/bin/sh
# A rank's death while rank 0 rewrites its checkpoint (np=2): the one
# checkpoint a script keeps (`torch.save(state, "ckpt.pt")` every epoch)
# must still load afterwards.  The script's second save pickles an object
# that, on rank 1, waits until rank 0 is inside its own second save (past
# the point where an in-place save has truncated the file) and then
# SIGKILLs its process; on rank 0 it sleeps.  The launcher (or the shim's
# watchdog) then ends rank 0 in the middle of its save.
#  1. negative control: the same job under plain mpirun, no shim: the
#     checkpoint no longer loads (torch.save writes a path in place);
#  2. under the shim: the job ends non-zero within 30 s, the checkpoint
#     loads with epoch 0's state, nothing of the save is left beside it
#     (python/hvdshim_torch/checkpoints.py), no process is left behind;
#  3. a Horovod script (the served package; rank 0 alone saves a new file
#     each epoch, checkpoint-N.pth, as Horovod's examples do, and resumes
#     from the last one there): checkpoint-0.pth loads, no part of
#     checkpoint-1.pth is left to resume from.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
cat >"$TMP/ck_train.py" <<'PY'
import os, signal, sys, time
import torch

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))


class Cut:
    """Pickled in the second save: rank 0 says it is there and sleeps; rank 1 dies once it has said so."""
    def __reduce__(self):
        if rank == 0:
            open("rank0-saving", "w").close()
            time.sleep(60)
        else:
            for _ in range(300):
                if os.path.exists("rank0-saving"):
                    break
                time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)
        return (int, ())


torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
hvd = None
if "--horovod" in sys.argv:  # a Horovod script: rank 0 alone saves, a new file each epoch
    import horovod.torch as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for epoch in range(2):
    for x, y in torch.utils.data.DataLoader(data, batch_size=8):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    state = {"epoch": epoch, "model": model.state_dict(), "pad": torch.ones(1 << 18)}
    if epoch == 1:
        state["cut"] = Cut()
    if hvd is None:
        torch.save(state, "ckpt.pt")
    elif rank == 0:
        torch.save(state, "checkpoint-%d.pth" % epoch)
    elif epoch == 1:
        Cut().__reduce__()
    print("saved epoch", epoch, flush=True)
PY
LOAD='import torch; d = torch.load("ckpt.pt"); assert bool((d["pad"] == 1).all()); print("epoch", d["epoch"])'
# (MPICH 4.2's Hydra may end 0 after a rank's SIGKILL: hvdrun_job there)
launch=shim
[ "$MPI_KIND" = hydra ] && launch=hvdrun_job
run() { # run NAME LAUNCH [--horovod]: LAUNCH is mpi, shim or hvdrun_job
  mkdir -p "$TMP/$1/tmp"
  t0=$(now_ms)
  (cd "$TMP/$1" && TMPDIR="$TMP/$1/tmp" T=60 "$2" 2 "$PYTHON" "$TMP/ck_train.py" --tag "ck-$1-$$" ${3-} >"$TMP/$1.out" 2>&1)
  rc=$?
  took=$(($(now_ms) - t0))
  no_leftovers "ck-$1-$$"
  loads=$(cd "$TMP/$1" && "$PYTHON" -c "$LOAD" 2>&1 | tail -1)
}
# beside NAME FILE: what is in the job's folder but FILE, the test's marker
# and TMPDIR, once the watcher of a killed rank 0 has had 5 s
beside() {
  wait_until 5 "[ \"\$(ls -A '$TMP/$1' | grep -c hvdshim)\" = 0 ]" || true
  ls -A "$TMP/$1" | grep -v -x -e "$2" -e rank0-saving -e tmp | tr '\n' ' '
}
run plain mpi
[ "$rc" != 0 ] || { cat "$TMP/plain.out"; fail "negative control: the job ended 0"; }
grep -q "saved epoch 0" "$TMP/plain.out" && [ -f "$TMP/plain/ckpt.pt" ] ||
  { cat "$TMP/plain.out"; fail "negative control: the job did not save its first checkpoint"; }
case $loads in epoch*) cat "$TMP/plain.out"; fail "negative control: without the shim the checkpoint still loads ($loads): the test cannot tell" ;; esac
plain_loads=$(echo "$loads" | cut -c1-60)
run shim $launch
[ "$rc" != 0 ] || { cat "$TMP/shim.out"; fail "the job ended 0 though rank 1 died"; }
[ "$took" -lt 30000 ] || { cat "$TMP/shim.out"; fail "the job took $took ms to end"; }
[ "$loads" = "epoch 0" ] || { cat "$TMP/shim.out"; ls -la "$TMP/shim"; fail "the checkpoint rank 0 was rewriting does not load as epoch 0's: $loads"; }
left=$(beside shim ckpt.pt)
[ -z "$left" ] || fail "left beside the checkpoint: $left"
left=$(tmp_settled "$TMP/shim/tmp")
[ -z "$left" ] || fail "left in the job's TMPDIR: $left"
LOAD='import torch; d = torch.load("checkpoint-0.pth"); assert bool((d["pad"] == 1).all()); print("epoch", d["epoch"])'
run served $launch --horovod
[ "$rc" != 0 ] && [ "$took" -lt 30000 ] || { cat "$TMP/served.out"; fail "horovod: the job ended with $rc after $took ms"; }
[ "$loads" = "epoch 0" ] || { cat "$TMP/served.out"; fail "horovod: checkpoint-0.pth does not load: $loads"; }
left=$(beside served checkpoint-0.pth)
[ -z "$left" ] || fail "horovod: left beside checkpoint-0.pth: $left (a part of checkpoint-1.pth is one to resume from)"
pass "rank 1 killed while rank 0 rewrites ckpt.pt: without the shim the checkpoint is lost ($plain_loads); under the shim the job ends (status $rc, $took ms) and ckpt.pt loads as epoch 0's, nothing left beside it; a Horovod script's rank 0 killed inside its save of checkpoint-1.pth leaves checkpoint-0.pth and no part of checkpoint-1.pth"
