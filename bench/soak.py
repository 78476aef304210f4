"""Long runs (issue 54): does anything of a job grow with time, or with each
death and rejoin?  Not a test (an hour and a half): a benchmark whose figures
go to docs/RELIABILITY.md.

    top_builddir=$PWD python3 bench/soak.py steady [--minutes 60]
    top_builddir=$PWD python3 bench/soak.py cycles [--cycles 10] [--minutes 30]   (ULFM: Open MPI 6, sid)

(from a build tree; the figures of a run: docs/RELIABILITY.md)

steady: bench/soak_train.py (a CNN, a DataLoader with 2 worker processes,
a checkpoint and a log line every epoch) under hvdrun -np 2, HVDSHIM_DATA=split,
for about --minutes (the steps sized from a pause of 1 s per step).
cycles: the same under hvdrun --min-np 1 with a discovery script that always
lists 2 slots: every --minutes/--cycles minutes rank 1 is SIGKILLed, the job
goes on over 1, rank 0 finds the slot free and the job starts again over 2
(the join by restart); --cycles times, then it runs to its end.

Every minute (and in cycles right before each kill) it samples every rank:
its RSS, open descriptors and threads, the RSS and number of the processes
of its family (its loader workers, the forkserver...), the job's bytes in
/dev/shm, the bytes and folders of the ranks' private overlays (TMPDIR),
the processes of the job, hvdrun's own RSS and descriptors; prints one line
per sample, and at the end each figure's first, last and maximum, and its
slope (least squares, per hour; in cycles, per cycle).  Then the weights
against the single-process emulation (split: the same global batches, less
rank 1's slice of each step the survivor averaged again after a death).
In cycles the script counts its own steps (`while step < N`): the job
started again runs it from its start with empty loaders, and its count is
put back when it is back where it stopped (hvdshim_torch/frames.py).
Environment: PYTHON (default /usr/bin/python3), top_builddir."""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("top_builddir", os.path.dirname(HERE))
PY = os.environ.get("PYTHON", "/usr/bin/python3")
TRAIN = os.path.join(HERE, "soak_train.py")
HVDRUN = os.path.join(TOP, "launcher", "hvdrun")
# /dev/shm files of a job: hvdshim's segments, torch's tensors, Open MPI's
# shared-memory transport (4: vader, 5+: sm), multiprocessing's semaphores.
# Counted by name only where /dev/shm is shared with other jobs (no mount
# namespace); in a private /dev/shm (the default as root) every file counts.
SHM_NAMES = ("hvdshim", "torch", "vader", "sm_segment", "sem.mp-", "pymp")
PRIVATE_SHM = os.environ.get("HVDSOAK_PRIVATE_SHM") == "1"


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def status(pid):
    out = {}
    for line in read("/proc/%d/status" % pid).decode(errors="replace").splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def procs():
    """pid -> (ppid, cmdline) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = read("/proc/%s/stat" % d).decode(errors="replace")
            cmd = read("/proc/%s/cmdline" % d).replace(b"\0", b" ").decode(errors="replace")
            if st:
                out[int(d)] = (int(st[st.rfind(")") + 2:].split()[1]), cmd)
    return out


def rank_of(pid):
    m = re.search(rb"(?:^|\0)OMPI_COMM_WORLD_RANK=(\d+)\0", read("/proc/%d/environ" % pid))
    return int(m.group(1)) if m else None


def kb(s):
    return int(s.split()[0]) if s else 0


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def sample(tag, tmpdir, hvdrun_pid):
    """One sample: {rank: {...}} and the job's totals."""
    ps = procs()
    job = {p for p, (_, c) in ps.items() if tag in c}
    kids = {}
    for p, (pp, _) in ps.items():
        kids.setdefault(pp, []).append(p)
    ranks = {}
    # (a process running the script, not mpirun, whose command line names it too)
    script = lambda q: q in ps and "soak_train.py" in ps[q][1] and "python" in os.path.basename(ps[q][1].split(" ")[0])
    for p in job:
        if not script(p) or script(ps[p][0]):
            continue  # hvdrun, mpirun, a forked loader worker (its parent is the rank)
        r = rank_of(p)
        if r is None:
            continue
        fam, todo = [], [p]
        while todo:
            q = todo.pop()
            fam.append(q)
            todo.extend(kids.get(q, []))
        st = status(p)
        try:
            fds = len(os.listdir("/proc/%d/fd" % p))
        except OSError:
            fds = 0
        ranks[r] = {"pid": p, "rss_mb": kb(st.get("VmRSS")) / 1024, "fds": fds, "threads": int(st.get("Threads", 0)),
                    "family": len(fam), "family_rss_mb": sum(kb(status(q).get("VmRSS")) for q in fam) / 1024}
    shm = 0  # what a job makes there (the machine is shared: not the others' files)
    for f in os.listdir("/dev/shm"):
        if PRIVATE_SHM or any(k in f for k in SHM_NAMES):
            shm += dir_bytes(os.path.join("/dev/shm", f)) if os.path.isdir(os.path.join("/dev/shm", f)) else \
                os.lstat(os.path.join("/dev/shm", f)).st_blocks * 512
    ovl = [d for d in os.listdir(tmpdir) if d.startswith("hvdshim-rank")]
    st = status(hvdrun_pid)
    try:
        hfds = len(os.listdir("/proc/%d/fd" % hvdrun_pid))
    except OSError:
        hfds = 0
    return {"t": time.time(), "ranks": ranks, "procs": len(job), "shm_kb": shm / 1024,
            "overlay_kb": sum(dir_bytes(os.path.join(tmpdir, d)) for d in ovl) / 1024, "overlay_dirs": len(ovl),
            "hvdrun_rss_mb": kb(st.get("VmRSS")) / 1024, "hvdrun_fds": hfds}


def flat(s):
    out = {"procs": s["procs"], "shm_kb": s["shm_kb"], "overlay_kb": s["overlay_kb"], "overlay_dirs": s["overlay_dirs"],
           "hvdrun_rss_mb": s["hvdrun_rss_mb"], "hvdrun_fds": s["hvdrun_fds"]}
    for r, v in sorted(s["ranks"].items()):
        for k in ("rss_mb", "fds", "threads", "family", "family_rss_mb"):
            out["r%d_%s" % (r, k)] = v[k]
    return out


def line(i, s):
    f = flat(s)
    return "%3d  " % i + "  ".join("%s=%s" % (k, ("%.1f" % v) if isinstance(v, float) else v) for k, v in f.items())


def slope(pts, per):
    """least-squares slope of (x, y) points, per `per` of x"""
    n = len(pts)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx * per if sxx else 0.0


def summary(rows, unit, per):
    """first, last, max and the least-squares slope per `per` of each
    figure, over every sample and over the second half (past the warm-up)."""
    keys = sorted({k for r in rows for k in r[1]})
    print("\n%-20s %10s %10s %10s %14s %18s" % ("figure", "first", "last", "max", "slope/" + unit,
                                              "2nd half slope/" + unit))
    for k in keys:
        pts = [(x, r[k]) for x, r in rows if k in r]
        if len(pts) < 2:
            continue
        print("%-20s %10.1f %10.1f %10.1f %14.2f %18.2f" % (k, pts[0][1], pts[-1][1], max(y for _, y in pts),
                                                          slope(pts, per), slope(pts[len(pts) // 2:], per)))


def start(args, env, extra):
    cmd = [HVDRUN, "-np", "2", "--oversubscribe"] + extra + ["--", PY, TRAIN, args.out, "--steps", str(args.steps),
                                                            "--pause", str(args.pause), "--workers", "2"]
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.Popen(cmd, env=env, stdout=open(args.out + ".console", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def emulate(args, drops):
    # steady: the 2 ranks' split arithmetic exactly (SLICES=2: equal to the bit over 3428 steps);
    # cycles: the batch at once (the job ran on 2 ranks and on 1 in turn)
    env = dict(os.environ, OMP_NUM_THREADS="1", DROP=",".join("%d:8:16" % s for s in drops),
               SLICES="1" if drops or args.mode == "cycles" else "2")
    ref = args.out + ".emulated"
    subprocess.run([PY, TRAIN, ref, "--steps", str(args.steps), "--workers", "2"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    cmp = subprocess.run([PY, os.path.join(os.path.dirname(HERE), "tests", "torch", "compare.py"), args.out, ref, "1e-4"],
                         capture_output=True, text=True)
    print("weights vs the single-process emulation%s: %s" % (
        " (without rank 1's slice of steps %s)" % ",".join(map(str, drops)) if drops else "",
        (cmp.stdout + cmp.stderr).strip()))
    return cmp.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["steady", "cycles"])
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--pause", type=float, default=1.0)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--shared-shm", action="store_true", help="no private /dev/shm (count the job's files by name)")
    args = ap.parse_args()
    if not args.shared_shm and not PRIVATE_SHM and os.geteuid() == 0 and shutil.which("unshare"):
        # again in a mount namespace of its own with a fresh tmpfs on /dev/shm:
        # what is there is the job's (hvdrun, the ranks and their workers
        # inherit the namespace)
        # (the root's propagation left alone, as a chroot cannot change it;
        # /dev/shm made private in the new namespace first, so the tmpfs
        # does not propagate back)
        private = "mount --make-private /dev/shm && mount -t tmpfs -o mode=1777,size=4g hvdsoak /dev/shm"
        unshare = ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c"]
        cmd = unshare + [private + ' && exec "$@"', "sh", sys.executable] + sys.argv
        probe = subprocess.run(unshare + [private], capture_output=True, text=True)
        if probe.returncode == 0:
            os.execvpe("unshare", cmd, dict(os.environ, HVDSOAK_PRIVATE_SHM="1"))
        print("(no private /dev/shm here: %s; the job's files there counted by name)" % probe.stderr.strip(), flush=True)
    if args.minutes is None:
        args.minutes = 60 if args.mode == "steady" else 30
    work = tempfile.mkdtemp(prefix="hvdshim-soak-")
    tag = os.path.join(work, "run")
    args.out = tag
    tmpdir = os.path.join(work, "tmp")
    os.mkdir(tmpdir)
    # the steps for about --minutes (1 s pause, ~0.05 s of work each); cycles: and the restarts' time
    args.steps = int(args.minutes * 60 / (args.pause + 0.05)) - (args.cycles * 20 if args.mode == "cycles" else 0)
    env = dict(os.environ, OMP_NUM_THREADS="1", HVDSHIM_DATA="split", TMPDIR=tmpdir, HVDRUN_LIB=os.path.join(TOP, ".libs", "libhvdshim.so"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", UCX_MEM_EVENTS="no")
    extra = []
    if args.mode == "cycles":
        disc = os.path.join(work, "disc.sh")
        with open(disc, "w") as f:
            f.write("#!/bin/sh\necho localhost:2\n")
        os.chmod(disc, 0o755)
        env.update(HVDSHIM_ELASTIC_STATE=os.path.join(work, "state"), HVDSHIM_ELASTIC_INTERVAL="1")
        os.mkdir(env["HVDSHIM_ELASTIC_STATE"])
        extra = ["--min-np", "1", "--host-discovery-script", disc]
    print("soak %s: %d steps, samples every %g s, work folder %s, %s /dev/shm (machine load: %s)" % (
        args.mode, args.steps, args.every, work, "a private" if PRIVATE_SHM else "the shared",
        read("/proc/loadavg").decode().strip()), flush=True)
    job = start(args, env, extra)
    t0 = time.time()
    rows, cyc_rows, kills, i = [], [], 0, 0
    gap = args.minutes * 60 / (args.cycles + 1)
    next_sample, next_kill = t0 + args.every, t0 + gap
    console = args.out + ".console"
    while job.poll() is None:
        time.sleep(1)
        now = time.time()
        if now >= next_sample:
            s = sample(tag, tmpdir, job.pid)
            # (not once a rank has finished: the job is ending)
            if "done:" not in read(console).decode(errors="replace") and (len(s["ranks"]) == 2 or args.mode == "steady"):
                i += 1
                rows.append(((now - t0) / 3600, flat(s)))
                print(line(i, s), flush=True)
            next_sample += args.every
        if args.mode == "cycles" and kills < args.cycles and now >= next_kill:
            text = read(console).decode(errors="replace")
            started = text.count("the job started again over 2 rank(s) (was 1)")
            s = sample(tag, tmpdir, job.pid)
            if started == kills and 1 in s["ranks"] and re.search(r"step \d+ loss", text.rsplit("started again", 1)[-1]):
                cyc_rows.append((kills, flat(s)))
                print("cycle %d: %s" % (kills, line(kills, s)), flush=True)
                os.kill(s["ranks"][1]["pid"], signal.SIGKILL)
                kills += 1
                next_kill = now + gap
    took = (time.time() - t0) / 60
    print("job ended: status %s after %.1f minutes; %d kills" % (job.returncode, took, kills), flush=True)
    text = read(console).decode(errors="replace")
    left = [p for p, (_, c) in procs().items() if tag in c]
    print("processes of the job left: %s; overlay folders left: %s" % (
        left or "none", [d for d in os.listdir(tmpdir) if d.startswith("hvdshim-rank")] or "none"))
    summary(rows, "hour", 1.0)
    if cyc_rows:
        print("\nper cycle (samples right before each kill):")
        summary(cyc_rows, "cycle", 1.0)
    drops = [int(m) - 1 for m in re.findall(r"optimizer step (\d+): its gradients averaged again over the 1 surviving", text)]
    rc = job.returncode or emulate(args, drops)
    with open(os.path.join(work, "samples.json"), "w") as f:
        json.dump({"rows": rows, "cycles": cyc_rows}, f)
    if not args.keep and rc == 0:
        shutil.rmtree(work)
    else:
        print("the work folder is kept: %s" % work)
    sys.exit(rc)


if __name__ == "__main__":
    main()
