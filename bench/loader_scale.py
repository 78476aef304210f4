"""A map-style dataset of N samples (made from the index on demand: no
memory per sample), shuffled, batch 32, a small model: the time from the
loop's start to the first batch, and the mean time of the next 200 steps.
Run plain and under the shim by bench/run-loader-scale.sh at N = 10^3 and
10^7, so start-up and per-step cost can be compared across sizes.

    python loader_scale.py N"""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Virtual(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(16, generator=g)
        return x, x[:3].sum().gt(0).float().view(1)


def main():
    n = int(float(sys.argv[1]))
    torch.manual_seed(0)
    loader = DataLoader(Virtual(n), batch_size=32, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    t0 = time.perf_counter()
    t_first = None
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 0:
            t_first = time.perf_counter()
        if step == 200:
            break
    t_end = time.perf_counter()
    print("N=%d: first batch %.3f s, then %.3f ms a step" % (n, t_first - t0, (t_end - t_first) / 200 * 1e3), flush=True)


if __name__ == "__main__":
    main()
