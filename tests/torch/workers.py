"""An ordinary script whose DataLoader workers are started by a forkserver
(Python 3.14's default start method) and pass batches by file descriptor:
each worker binds a socket in the multiprocessing folder its parent made.
Its loader collates with a method of its own, as PyG's NeighborLoader
does, so each worker is sent the loader itself, pickled.

    python workers.py OUT.pt
"""
import sys

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class CollatingLoader(DataLoader):
    """A DataLoader whose collate_fn is its own method (a worker started by
    forkserver or spawn gets the loader pickled)."""

    def __init__(self, dataset, **kwargs):
        super().__init__(dataset, collate_fn=self.collate, **kwargs)

    def collate(self, items):
        return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def main():
    mp.set_sharing_strategy("file_descriptor")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(128, 10, generator=g)
    Y = (X[:, :3].sum(1, keepdim=True) > 0).float()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = CollatingLoader(TensorDataset(X, Y), batch_size=16, shuffle=True, num_workers=2,
                        multiprocessing_context="forkserver")
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(model(x), y).backward()
            opt.step()
    torch.save(model.state_dict(), sys.argv[1])
    print("done", flush=True)


if __name__ == "__main__":
    main()
