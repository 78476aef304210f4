"""The end-of-backward round's vector, slot by slot.

The reduction that ends a backward pass agrees on more than the gradients:
one float32 sum over the ranks (fused with the last float32 gradients: one
round per step) carries, in this order,
  used     [n]      which parameters got a gradient on any rank since the
                    last reduction (this rank's used-bitmap: those not
                    submitted here then contribute their gradient, or zeros)
  hyper    [4 m]    rank 0's scalar hyperparameters, each as four 16-bit
                    pieces of its float64 bits (the other ranks add zeros:
                    exact), which every rank takes before its step
  rank0    [1]      1 from rank 0 (0 when rank 0 has finished: the others
                    keep their own hyperparameters and k)
  k        [1]      rank 0's proposal of backward passes per step
  grow     [1]      1 from rank 0 when the job is to restart (hosts joined or left)
  ranks    [1]      1 from every rank: how many take part
  shares   [4 N+1]  split mode with its weighing only: each rank's loss
                    denominator as four pieces in the rank's own slots, and
                    1 from every rank that weighed its loss
Every entry is an integer below 2**24, so float32 sums are exact in any
order.  pack() lays this rank's part out; Round reads the sum back."""
import struct


def pieces(values):
    """Each float64 as four integers (16 bits of its bit pattern each, low first)."""
    return struct.unpack("<%dH" % (4 * len(values)), struct.pack("<%dd" % len(values), *map(float, values)))


def values(pieces_):
    """The float64s that pieces() cut."""
    return struct.unpack("<%dd" % (len(pieces_) // 4), struct.pack("<%dH" % len(pieces_), *[int(x) for x in pieces_]))


def pack(used, m, rank0=None, shares=None):
    """This rank's part of the round, as one list (a tensor made from one
    list: a few small torch operations cost more than the list).  used: the
    bitmap; m: the hyperparameters' count; rank0: on rank 0, (its m values,
    its k, its wish to grow), else None; shares: this rank's share slots
    (loss_shares), or None when the round carries none."""
    vals = list(used)
    if rank0 is not None:
        hyper, k, grow = rank0
        vals += pieces(hyper) if m else ()
        vals += (1, k, grow, 1)
    else:
        vals += [0] * (4 * m + 3) + [1]
    if shares is not None:
        vals += shares
    return vals


class Round:
    """The reduced round read back (`got`: the vector as a list; one read: a
    slice of a tensor costs more than the list's), its slots by name."""

    def __init__(self, got, n, m):
        t = n + 4 * m
        self.used = got[:n]
        self._hyper = got[n:t]
        self.rank0 = got[t] > 0     # rank 0 took part
        self.k = int(got[t + 1])
        self.grow = got[t + 2]
        self.ranks = int(got[t + 3])
        self.shares = got[t + 4:]   # (empty when the round carries none)

    def hyperparameters(self):
        """Rank 0's values (where it took part)."""
        return values(self._hyper)
