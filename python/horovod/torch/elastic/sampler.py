"""hvd.elastic.ElasticSampler: a DistributedSampler that deals, over the
ranks there are now, the samples of the epoch not yet processed."""
import math
import random

import torch.utils.data

from horovod.torch.mpi_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Deals a dataset's indices over the ranks, as Horovod 0.28.1's does:
    the epoch's order is range(len(dataset)), shuffled by
    random.Random(seed + epoch) when `shuffle`; the first `processed_num`
    of it are done; the rest is padded (from its own start) to a multiple of
    the ranks and rank r takes every size-th index from the r-th.

    record_batch(batch_idx, batch_size) after each batch counts
    batch_size x ranks samples done (every rank processed one batch); put
    the sampler in a TorchState, and a reset (ranks died or joined) deals
    what is left of the epoch over the ranks there are then.  set_epoch(e)
    at the end of an epoch starts the next one (nothing done).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.processed_indices = set()  # (Horovod's attribute; unused there too)
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Start epoch `epoch`: its order, nothing of it processed.  Call it
        at the end of an epoch (a restart in the middle of one must not
        forget what was processed)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """One batch of batch_size done on every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Deal the rest of the epoch over the ranks there are now."""
        self.num_replicas, self.rank = size(), rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        dealt = list(self.remaining_indices)
        while dealt and len(dealt) < self.total_size:  # padded from its start, so every rank has num_samples
            dealt += dealt[:self.total_size - len(dealt)]
        self.indices = dealt[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
