"""GPU benchmarks, each against an anchor in the same run (one GPU, one rank):

  copy-in   the engine's copy of a group of gradients into the device fusion
            buffer vs one device-to-device cudaMemcpyAsync per tensor over the
            same buffers (target: >= 80% of the memcpy bandwidth)
  nccl      allreduce of the same buffers through the engine (hvd_allreduce_gpu_async,
            fused) vs ncclAllReduce called directly on each buffer (one NCCL group)
  script    training step time of an unmodified CUDA script: plain vs under the
            shim (target >= 0.98x); run by bench/run-gpu-bench.sh, which starts
            both processes
  script-amp  the same with autocast float16 and GradScaler

Usage (from bench/run-gpu-bench.sh): python3 bench_gpu.py copy-in|nccl|script|script-amp"""
import ctypes
import sys
import time

import torch


def lib():
    L = ctypes.CDLL(None)
    L.hvd_init.restype = ctypes.c_int
    L.hvd_last_error.restype = ctypes.c_char_p
    return L


def loaded(part, fallback):
    """The library of this process whose path holds `part` (the one the
    engine found), else `fallback` by name; None if neither loads."""
    for cand in [p for p in open("/proc/self/maps").read().split() if part in p] + [fallback]:
        try:
            return ctypes.CDLL(cand)
        except OSError:
            pass
    return None


def tensors():
    torch.manual_seed(0)
    sizes = [4096, 65536, 262144, 1 << 20, 4 << 20] * 32  # 160 tensors, ~170 MB of float32
    return [torch.randn(s // 4, device="cuda") for s in sizes]


def copy_in():
    L = lib()
    ts = tensors()
    n = len(ts)
    ptrs = (ctypes.c_void_p * n)(*[t.data_ptr() for t in ts])
    sizes = (ctypes.c_size_t * n)(*[t.numel() * 4 for t in ts])
    k, m = ctypes.c_double(), ctypes.c_double()
    L.hvd_gpu_bench_copy_in.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
    if L.hvd_gpu_bench_copy_in(ptrs, sizes, n, 20, ctypes.byref(k), ctypes.byref(m)) != 0:
        sys.exit("copy-in benchmark failed")
    print("copy-in: %d tensors, %.0f MB: engine kernel %.0f GB/s, cudaMemcpyAsync D2D %.0f GB/s, ratio %.2f"
          % (n, sum(sizes) / 1e6, k.value, m.value, k.value / m.value if m.value else 0))


def nccl():
    L = lib()
    if L.hvd_init() != 0:
        sys.exit("hvd_init: " + L.hvd_last_error().decode())
    ts = [torch.randn(1 << 18, device="cuda") for _ in range(200)]  # 200 x 1 MiB
    stream = torch.cuda.current_stream().cuda_stream
    fn = L.hvd_allreduce_gpu_async
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    L.hvd_wait.argtypes = [ctypes.c_int64, ctypes.c_double]
    names = [b"g%d" % i for i in range(len(ts))]

    split = {"submit": 0.0, "wait": 0.0, "steps": 0}

    def engine_step():
        hs = []
        t0 = time.perf_counter()
        for nm, t in zip(names, ts):
            h = ctypes.c_int64()
            if fn(nm, t.data_ptr(), t.numel(), 0, 0, 0, stream, None, None, ctypes.byref(h)) != 0:
                sys.exit(L.hvd_last_error().decode())
            hs.append(h.value)
        t1 = time.perf_counter()
        for h in hs:
            L.hvd_wait(h, -1.0)
        split["submit"] += t1 - t0
        split["wait"] += time.perf_counter() - t1
        split["steps"] += 1

    class Item(ctypes.Structure):  # hvd_allreduce_item
        _fields_ = [("name", ctypes.c_char_p), ("buf", ctypes.c_void_p), ("count", ctypes.c_size_t),
                    ("dtype", ctypes.c_int), ("op", ctypes.c_int), ("device", ctypes.c_int), ("stream", ctypes.c_void_p)]

    items = (Item * len(ts))(*[Item(nm, t.data_ptr(), t.numel(), 0, 0, 0, stream) for nm, t in zip(names, ts)])
    handles = (ctypes.c_int64 * len(ts))()
    first = ctypes.c_size_t()
    L.hvd_wait_all.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]

    def batch_step():  # the PyTorch adapter's way: one call for the group, one wait
        if L.hvd_allreduce_batch_async(items, len(ts), handles) != 0:
            sys.exit(L.hvd_last_error().decode())
        L.hvd_wait_all(handles, len(ts), ctypes.byref(first))

    # ncclAllReduce directly, through the same libnccl the engine found
    nl = loaded("libnccl.so", "libnccl.so.2")

    class UniqueId(ctypes.Structure):  # ncclUniqueId, passed by value
        _fields_ = [("internal", ctypes.c_char * 128)]

    uid = UniqueId()
    comm = ctypes.c_void_p()
    assert nl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    nl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    assert nl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    nl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_void_p]

    def direct_step():
        nl.ncclGroupStart()
        for t in ts:
            nl.ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), 7, 0, comm, stream)  # float32, sum
        nl.ncclGroupEnd()

    res = {}
    for name, step in (("engine", engine_step), ("batch", batch_step), ("direct", direct_step)) * 2:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        res[name] = (time.perf_counter() - t0) / 20
    print("nccl: 200 x 1 MiB, one rank: engine %.3f ms, ncclAllReduce direct (grouped) %.3f ms, ratio direct/engine %.2f"
          % (res["engine"] * 1e3, res["direct"] * 1e3, res["direct"] / res["engine"]))
    print("nccl: the same as one batch (hvd_allreduce_batch_async, hvd_wait_all) %.3f ms, ratio direct/batch %.2f"
          % (res["batch"] * 1e3, res["direct"] / res["batch"]))
    # where the engine's time goes: the 200 submissions from Python, then the
    # waits (the cycle, the fusion copies, NCCL, completion), per step; and a
    # bare ctypes call for scale
    noop = L.hvd_size
    t0 = time.perf_counter()
    for _ in range(2000):
        noop()
    per_call = (time.perf_counter() - t0) / 2000
    print("nccl: engine step split: submit %.3f ms (%.2f us a tensor; a bare ctypes call %.2f us), wait %.3f ms"
          % (1e3 * split["submit"] / split["steps"], 1e6 * split["submit"] / split["steps"] / len(ts), 1e6 * per_call,
             1e3 * split["wait"] / split["steps"]))
    # the CUDA runtime calls a submission makes on the caller's thread, each
    # through ctypes (subtract the bare call): what the per-tensor cost is made of
    rt = loaded("libcudart.so", "libcudart.so")
    if rt is not None:
        ev = ctypes.c_void_p()
        rt.cudaEventCreateWithFlags(ctypes.byref(ev), 2)  # cudaEventDisableTiming
        cap, dev = ctypes.c_int(), ctypes.c_int()
        st = ctypes.c_void_p(stream)
        calls = (("cudaStreamIsCapturing", lambda: rt.cudaStreamIsCapturing(st, ctypes.byref(cap))),
                 ("cudaGetDevice", lambda: rt.cudaGetDevice(ctypes.byref(dev))),
                 ("cudaEventRecord", lambda: rt.cudaEventRecord(ev, st)),
                 ("cudaStreamWaitEvent", lambda: rt.cudaStreamWaitEvent(st, ev, 0)))
        out = []
        for nm, call in calls:
            call()
            t0 = time.perf_counter()
            for _ in range(2000):
                call()
            out.append("%s %.2f us" % (nm, 1e6 * (time.perf_counter() - t0) / 2000))
        torch.cuda.synchronize()
        print("nccl: caller-side CUDA calls through ctypes, per call: " + ", ".join(out))


def script_main(amp=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(128 * 64, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = (torch.amp.GradScaler("cuda", enabled=amp) if hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=amp))
    x = torch.randn(128, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")
    times = []
    for i in range(60):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    print("script%s: step %.3f ms" % ("-amp" if amp else "", 1e3 * sum(times) / len(times)), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "copy-in"
    {"copy-in": copy_in, "nccl": nccl, "script": script_main, "script-amp": lambda: script_main(True)}[mode]()
