"""An ordinary training script (tests/mpi/elastic.sh): an MLP regression
with SGD and momentum over a shuffled DataLoader, 3 epochs of 20 steps, a
line per epoch printed and appended to argv[1] + ".log" (opened at the
start), weights saved at the end (argv[1]).  Two hooks for the test, nothing the
shim knows of:
  argv[2] RANK[,RANK...]:STEP  that rank (OMPI_COMM_WORLD_RANK) SIGKILLs itself when
                  it has its batch of STEP (0-based), not in a job hvdrun
                  started again to grow (HVDSHIM_ELASTIC_RESUME=1); with
                  argv[3] FILE, it makes FILE and waits instead (the test
                  then kills its host: tests/launcher/multihost.sh); STEP
                  "end": after training, while the others evaluate (a
                  pause of EVAL_PAUSE seconds, 2 by default, with no
                  collective) before they print "done", append it to the
                  log and save;
  DROP=STEP:LO:HI the single-process emulation: rows LO..HI-1 of that step's
                  batch left out (the dead rank's slice under HVDSHIM_DATA=split).
SPARSE=1: an embedding with sparse gradients (nn.Embedding(sparse=True))
feeds the MLP too.  SCHED=1: a LambdaLR (x0.7 per epoch, from 0.015); its emulation
SCALED=N:STEP:M sets the rate itself, HVDSHIM_SCALE_LR's: times N before
STEP, times M from STEP on (the survivors).  PAUSE=S: a pause of S seconds
per step.  WORKERS=N: loader worker processes (forked).  KILL_ONCE=RANK:FILE: in a job hvdrun started again to grow, that
rank SIGKILLs itself at the end of the first epoch (one the job had done:
no batch in it) unless FILE exists, which it makes first."""
import os
import signal
import sys
import time

import torch

sparse = os.environ.get("SPARSE") == "1"
torch.manual_seed(0)
X = torch.randn(240, 6)
Y = X @ torch.randn(6, 1) + 0.1 * torch.randn(240, 1)
C = torch.randint(0, 20, (240,))
workers = int(os.environ.get("WORKERS", "0"))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, C, Y), batch_size=12, shuffle=True,
                                     generator=torch.Generator().manual_seed(1), num_workers=workers,
                                     multiprocessing_context="fork" if workers else None)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 4, sparse=True) if sparse else None
        self.mlp = torch.nn.Sequential(torch.nn.Linear(10 if sparse else 6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x, c):
        return self.mlp(torch.cat([x, self.emb(c)], 1) if sparse else x)


model = Model()
scaled = [int(v) for v in os.environ["SCALED"].split(":")] if os.environ.get("SCALED") else None
# (a rate scaled by the ranks starts lower: 0.05 x 3 with momentum 0.9 diverges, and a diverging run
# turns rounding into differences larger than the check's tolerance)
base = 0.015 if os.environ.get("SCHED") == "1" or scaled else 0.05
opt = torch.optim.SGD(model.parameters(), lr=base, momentum=0.9)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.7 ** e) \
    if os.environ.get("SCHED") == "1" and not scaled else None
die = sys.argv[2].split(":") if len(sys.argv) > 2 and os.environ.get("HVDSHIM_ELASTIC_RESUME") != "1" else None
if die:
    die = [[int(v) for v in die[0].split(",")], -1 if die[1] == "end" else int(die[1])]
drop = [int(v) for v in os.environ["DROP"].split(":")] if os.environ.get("DROP") else None
me = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
log = open(sys.argv[1] + ".log", "a")
step = 0
for epoch in range(3):
    total = 0.0
    for x, c, y in loader:
        if die and me in die[0] and step == die[1]:
            if len(sys.argv) > 3:  # the test kills this rank's whole host
                open(sys.argv[3], "w").close()
                time.sleep(600)
            os.kill(os.getpid(), signal.SIGKILL)
        if drop and step == drop[0]:
            keep = [i for i in range(len(x)) if not drop[1] <= i < drop[2]]
            x, c, y = x[keep], c[keep], y[keep]
        if scaled:
            opt.param_groups[0]["lr"] = base * 0.7 ** epoch * (scaled[0] if step < scaled[1] else scaled[2])
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x, c), y)
        loss.backward()
        opt.step()
        total += loss.item()
        step += 1
        time.sleep(float(os.environ.get("PAUSE", "0")))
    once = os.environ.get("KILL_ONCE", "").split(":", 1)
    if epoch == 0 and len(once) == 2 and os.environ.get("HVDSHIM_ELASTIC_RESUME") == "1" and me == int(once[0]) \
            and not os.path.exists(once[1]):
        open(once[1], "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    if sched is not None:
        sched.step()
    print("epoch %d: loss %.6f" % (epoch, total / len(loader)))
    log.write("epoch %d: loss %.6f\n" % (epoch, total / len(loader)))
    log.flush()
if die and die[1] == -1:  # an evaluation that needs no collective: a rank dies during it
    if me in die[0]:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(os.environ.get("EVAL_PAUSE", "2")))
    print("done", flush=True)
    log.write("done\n")
    log.flush()
torch.save(model.state_dict(), sys.argv[1])
