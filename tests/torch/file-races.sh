#!/bin/sh
# A rank > 0 runs the same file idioms as rank 0 a moment behind or ahead of
# it, on the same real folder (its own writes private, hooks/overlay*.c), and
# each idiom must end as it does for a process alone (np=2, one job; each
# race forced by a sleep on one rank):
#  - `if not os.path.exists(d): os.makedirs(d)`, rank 0 making d between
#    rank 1's check and its makedirs (FileExistsError on rank 1 before);
#  - os.unlink of a file there before the run, rank 0 first (FileNotFoundError);
#  - shutil.rmtree of an output folder with a subfolder, rank 0 removing it
#    between rank 1's listing and its look at the subfolder;
#  - a cache (`if exists: torch.load, else build and torch.save`), rank 1
#    arriving while rank 0 is still writing it: it reads it whole;
#  - checkpoints rotated by their times (keep the newest two, as HF's Trainer
#    with save_total_limit on resume): rank 0 removing the oldest between
#    rank 1's listing and its os.path.getmtime of them (FileNotFoundError);
#  - and what must still fail as alone: mkdir of a folder there before the
#    run, unlink of a name never there in a folder no one changed (the same
#    exception on both ranks; in a folder rank 0 changed during the run, a
#    rank > 0 cannot tell such a name from one rank 0 removed: it succeeds).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
cd "$TMP" || fail "no TMP"
mkdir -p out/sub before quiet ckpts/checkpoint-1 ckpts/checkpoint-2 ckpts/checkpoint-3
touch out/f1 out/sub/g1 out/sub/g2 old.pt ckpts/checkpoint-1/m.pt ckpts/checkpoint-2/m.pt ckpts/checkpoint-3/m.pt
touch -d '3 hours ago' ckpts/checkpoint-1
touch -d '2 hours ago' ckpts/checkpoint-2
touch -d '1 hour ago' ckpts/checkpoint-3
cat >races.py <<'PY'
import os, shutil, time, torch
r = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
said = []
# check, then make: rank 0 makes it between rank 1's check and its makedirs
time.sleep(0.5 if r == 0 else 0)
if not os.path.exists("runs/exp1"):
    time.sleep(0 if r == 0 else 1.5)
    os.makedirs("runs/exp1")
torch.save(torch.ones(2), "runs/exp1/x.pt")
said.append("makedirs ok %s" % sorted(os.listdir("runs/exp1")))
# a file there before the run, removed by rank 0 first
time.sleep(0 if r == 0 else 1)
os.unlink("old.pt")
said.append("unlink ok")
# an output folder cleared at start: rank 1 is held between its listing and its look at out/sub
listing = os.scandir
def slow_scandir(*a):
    it = listing(*a)
    time.sleep(1.5)
    return it
os.scandir = slow_scandir if r != 0 else listing
if os.path.exists("out"):
    shutil.rmtree("out")
os.scandir = listing
os.makedirs("out")
said.append("rmtree ok %s" % os.listdir("out"))
# a cache rank 0 writes slowly (in place), rank 1 arriving in the middle
time.sleep(0 if r == 0 else 0.5)
if os.path.exists("cache.bin"):
    data = open("cache.bin", "rb").read()
    how = "read"
else:
    data = bytes(range(256)) * 4096 * 4
    with open("cache.bin", "wb") as f:
        for k in range(0, len(data), len(data) // 8):
            f.write(data[k:k + len(data) // 8])
            f.flush()
            time.sleep(0.25)
    how = "built"
said.append("cache %d bytes, whole %s" % (len(data), data == bytes(range(256)) * 4096 * 4))
# checkpoints rotated by time (a resumed run's three and this run's new one):
# rank 0 removes the oldest two between rank 1's listing and its getmtime
# (rank 1 tells rank 0 it has listed through /dev/shm, which no rank's view
# redirects; rank 0 tells rank 1 it has rotated with a file of its own)
def await_file(path):
    for _ in range(3000):
        if os.path.exists(path):
            return
        time.sleep(0.01)
    raise SystemExit("waited 30 s for %s" % path)
listed = "/dev/shm/%s.listed" % os.environ["RACES_TAG"]
os.makedirs("ckpts/checkpoint-4", exist_ok=True)
torch.save(torch.ones(2), "ckpts/checkpoint-4/m.pt")
if r == 0:
    await_file(listed)
    os.unlink(listed)
import pathlib
found = [str(x) for x in pathlib.Path("ckpts").glob("checkpoint-*") if os.path.isdir(x)]
if r == 1:
    open(listed, "w").close()
    await_file("rotated.flag")
for old in sorted(found, key=os.path.getmtime)[:-2]:
    shutil.rmtree(old)
if r == 0:
    open("rotated.flag", "w").close()
said.append("rotate ok %s" % sorted(os.listdir("ckpts")))
# what fails alone fails here too
try:
    os.mkdir("before")
    said.append("mkdir before: made")
except FileExistsError:
    said.append("mkdir before: FileExistsError")
try:
    os.unlink("quiet/never.pt")
    said.append("unlink never: removed")
except FileNotFoundError:
    said.append("unlink never: FileNotFoundError")
print("rank %d (cache %s): %s" % (r, how, "; ".join(said)), flush=True)
PY
tag=hvdshim-races-$$
RACES_TAG=$tag HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" races.py >out.txt 2>&1
rc=$?
rm -f "/dev/shm/$tag.listed"
[ $rc = 0 ] || { cat out.txt; fail "the job failed"; }
want="makedirs ok ['x.pt']; unlink ok; rmtree ok []; cache 4194304 bytes, whole True; rotate ok ['checkpoint-3', 'checkpoint-4']; mkdir before: FileExistsError; unlink never: FileNotFoundError"
grep -qxF "[rank 0] rank 0 (cache built): $want" out.txt && grep -qxF "[rank 1] rank 1 (cache read): $want" out.txt ||
  { cat out.txt; echo "wanted on both ranks: $want"; fail "the idioms did not end as alone"; }
[ "$(ls runs/exp1)" = x.pt ] && [ ! -e old.pt ] && [ "$(ls ckpts | tr '\n' ' ')" = "checkpoint-3 checkpoint-4 " ] && [ -d out ] && [ -z "$(ls out)" ] && [ -d before ] ||
  { ls -R; fail "rank 0's files are not as the plain run leaves them"; }
pass "a rank > 0 a moment behind or ahead of rank 0: check-then-makedirs, unlink and rmtree of what was there, a cache read while rank 0 writes it, checkpoints rotated by time end as alone; mkdir of an old folder and unlink of nothing fail as alone"
