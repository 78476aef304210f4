"""Unit tests of the PyTorch adapter (python/hvdshim_torch) that need
no MPI: the package runs against a stub of libhvdshim.so that plays one rank
of a job whose other ranks contributed fixed values."""
import ctypes
import io
import os
import sys
import unittest
import warnings

import torch

sys.path.insert(0, sys.argv.pop(1))  # python/
import hvdshim_torch  # noqa: E402
from hvdshim_torch import capi, collectives, errors, grow, models, norms, output, patching, resize, rng  # noqa: E402
from hvdshim_torch.data import dealing, epoch_order, iterable, iteration, loaders, redeal, roles, sharded  # noqa: E402
from hvdshim_torch.data.redeal import _LIVE  # noqa: E402
from hvdshim_torch.data.roles import _EV  # noqa: E402
from hvdshim_torch.gradients import hooks, hyperparams, loss_shares, reduction, replicas, round_vector  # noqa: E402
from hvdshim_torch.gradients import backward as backward_wrap  # noqa: E402
from hvdshim_torch.gradients.accumulation import _A  # noqa: E402
from hvdshim_torch.gradients.backward import _B  # noqa: E402
from hvdshim_torch.gradients.loss_shares import _L  # noqa: E402
from hvdshim_torch.gradients.params import _P  # noqa: E402
from hvdshim_torch.gradients.submit import _H  # noqa: E402
from hvdshim_torch.rng import _R  # noqa: E402

# (the unit tests' loaders train by default: as if a model were made, not run yet)
_MODEL_MADE = lambda: "made"  # noqa: E731
_EV.new_model = _MODEL_MADE
from hvdshim_torch.state import _S  # noqa: E402


class StubLib:
    """Collectives complete at once.  allreduce: SUM adds `others` times the
    value for `others` stand-in ranks contributing zeros (rank 0 stays), MAX
    keeps the largest of this rank's values and `peer` (a list, if set)."""

    def __init__(self):
        self.calls = []
        self.peer = None
        self.round_peer = None
        self.loss_peer = None
        self.batches = []
        self.waits = []  # each hvd_wait_all's count of handles
        self.settles = 0  # hvd_overlay_saves_settled calls (a step on a rank > 0 of an elastic job)

    def hvd_overlay_saves_settled(self):
        self.settles += 1

    def hvd_allreduce_async(self, name, ptr, n, dtype, op, cb, arg, handle):
        self.calls.append(("allreduce", name, n, op))
        if self.peer is not None and op == capi.MAX:
            buf = (ctypes.c_double * n).from_address(ptr)
            for i in range(n):
                buf[i] = max(buf[i], self.peer[i])
        handle._obj.value = len(self.calls)
        return 0

    def hvd_broadcast_async(self, name, ptr, n, dtype, root, cb, arg, handle):
        self.calls.append(("broadcast", name, n))
        handle._obj.value = len(self.calls)
        return 0

    def hvd_allreduce_batch_async_ex(self, items, n, handles, flags):
        """round_peer: what the other ranks add to the end-of-backward round.
        batches: each call's names and flags."""
        self.batches.append(([items[i].name for i in range(n)], flags))
        for i in range(n):
            it = items[i]
            self.calls.append(("allreduce", it.name, it.count, it.op))
            if it.name == b"hvdshim.loss" and self.loss_peer is not None:  # AVG with one other rank
                buf = (ctypes.c_float * it.count).from_address(it.buf)
                buf[0] = (buf[0] + self.loss_peer) / 2
            if it.name.startswith(b"hvdshim.round.") and self.round_peer is not None:
                buf = (ctypes.c_float * it.count).from_address(it.buf)
                for j, v in enumerate(self.round_peer):
                    buf[j] += v
            handles[i] = len(self.calls)
        return 0

    def hvd_wait(self, handle, timeout):
        return 0

    def hvd_wait_all(self, handles, n, failed):
        self.waits.append(n)
        return 0

    def hvd_last_error(self):
        return b""

    def hvd_log_message(self, level, where, msg):
        self.calls.append(("log", level, msg.decode()))


def _one_backward(overlap):
    """A two-layer model's parameters hooked as the adapter hooks them, one
    backward through them, the hooks taken off: its named parameters."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    named = list(model.named_parameters())
    _P.params = [hooks._Param(i, "m0.%s" % n, p, False) for i, (n, p) in enumerate(named)]
    _P.used, _P.nhooked = bytearray(len(named)), 0
    _H.submitted, _H.round, _H.sparse, _S.optimizers = set(), None, [], []
    _A.in_backward, _A.skip_bw, _A.k, _A.bw_window, _A.deferred = False, False, 1, 0, False
    _H.batch, _H.pending, _S.bucket, _S.overlap, _S.elastic = collectives.Batch(), collectives.Pending(), 0, overlap, False
    _S.data_mode = "shard"  # (the stub adds no other rank's part of the round)
    for prm in _P.params:
        prm.hook()
    model(torch.ones(2, 3)).sum().backward()
    for prm in _P.params:
        prm.handle.remove()
    return named


class Constants(unittest.TestCase):
    """The adapter's copies of hvdshim.h's enum values are the header's."""

    def test_batch_items_packed_as_the_struct(self):
        """Batch.flush packs each item with one struct.pack_into: every field
        reads back through capi.AllreduceItem (a GPU item's device and
        stream, a host item's -1 and NULL), the name from its kept copy."""
        arr = (capi.AllreduceItem * 2)()
        name = b"m0.weight"
        collectives._ITEM.pack_into(arr, collectives._ITEM.size, collectives._name_address(name), 0x1000, 7,
                                    capi.FLOAT16, capi.AVG, 3, 0xabc0)
        collectives._ITEM.pack_into(arr, 0, collectives._name_address(b"x" * 40), 0x2000, 5, capi.FLOAT32, capi.SUM,
                                    -1, 0)
        got = [(it.name, it.buf, it.count, it.dtype, it.op, it.device, it.stream) for it in arr]
        self.assertEqual(got, [(b"x" * 40, 0x2000, 5, capi.FLOAT32, capi.SUM, -1, None),
                               (name, 0x1000, 7, capi.FLOAT16, capi.AVG, 3, 0xabc0)])

    def test_enums_match_the_header(self):
        import re
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "collectives", "hvdshim.h")
        text = open(path).read()
        header = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(HVD_[A-Z0-9_]+) = (-?\d+)", text)}
        header["HVD_ROOT_FIRST_ACTIVE"] = int(re.search(r"#define HVD_ROOT_FIRST_ACTIVE \((-?\d+)\)", text).group(1))
        names = {torch.float32: "HVD_FLOAT32", torch.float64: "HVD_FLOAT64", torch.float16: "HVD_FLOAT16",
                 torch.bfloat16: "HVD_BFLOAT16", torch.int32: "HVD_INT32", torch.int64: "HVD_INT64",
                 torch.uint8: "HVD_UINT8", torch.int8: "HVD_INT8", torch.int16: "HVD_INT16"}
        self.assertEqual(set(names), set(collectives.HVD_DTYPES))
        for dt, name in names.items():
            self.assertEqual(collectives.HVD_DTYPES[dt], header[name], name)
        for attr, name in (("UINT8", "HVD_UINT8"), ("INT64", "HVD_INT64"), ("SUM", "HVD_SUM"), ("AVG", "HVD_AVG"),
                           ("MAX", "HVD_MAX"), ("ROOT_FIRST_ACTIVE", "HVD_ROOT_FIRST_ACTIVE"),
                           ("ERR_TIMEOUT", "HVD_ERR_TIMEOUT")):
            self.assertEqual(getattr(capi, attr), header[name], name)


class Arithmetic(unittest.TestCase):
    def test_shard_covers_every_sample_with_equal_counts(self):
        for n in range(1, 40):
            for size in (1, 2, 3, 4):
                for batch in (1, 3, 8):
                    per = [dealing.shard_indices(range(n), size, r, batch, False) for r in range(size)]
                    flat = [i for p in per for b in p for i in b]
                    self.assertEqual(set(flat), set(range(n)))
                    self.assertEqual(len(flat), -(-n // size) * size)  # padded as DistributedSampler
                    self.assertEqual(len({len(p) for p in per}), 1)    # same number of batches everywhere
                    self.assertEqual(len(per[0]), dealing.shard_count(n, size, batch, False))
                    dl = [dealing.shard_indices(range(n), size, r, batch, True) for r in range(size)]
                    self.assertEqual(len(dl[0]), dealing.shard_count(n, size, batch, True))
                    self.assertTrue(all(len(b) == batch for p in dl for b in p))

    def test_split_slices_partition_a_batch(self):
        for n in range(1, 30):
            for size in (1, 2, 3, 5):
                parts = [dealing.split_slice(list(range(n)), size, r) for r in range(size)]
                if n >= size:
                    self.assertEqual([i for p in parts for i in p], list(range(n)))
                self.assertTrue(all(p for p in parts))
                self.assertLessEqual(max(map(len, parts)) - min(map(len, parts)), 1)
                # the slices that are only padding: together with the others, every row once
                real = [p for r, p in enumerate(parts) if not dealing.padding_only(n, size, r)]
                self.assertEqual(sorted(i for p in real for i in p), list(range(n)))

    def test_dealt_batches_same_count_every_rank(self):
        batches = [[i, i + 100] for i in range(7)]
        per = [dealing.every_nth(batches, 3, r) for r in range(3)]
        self.assertEqual([len(p) for p in per], [3, 3, 3])
        self.assertEqual(per[0][0], [0, 100])
        self.assertEqual((per[1][2], per[2][2]), ([0, 100], [1, 101]))  # padded from the start
        self.assertEqual(dealing.every_nth([], 2, 0), [])


    def test_streams_equal_the_whole_epoch_forms(self):
        import random
        rnd = random.Random(5)
        for _ in range(300):
            n, size, batch, w = rnd.randint(0, 60), rnd.randint(1, 4), rnd.randint(1, 7), rnd.randint(1, 9)
            order = [rnd.randint(0, 99) for _ in range(n)]
            windows = [order[i:i + w] for i in range(0, n, w)]
            for rank in range(size):
                for drop in (False, True):
                    self.assertEqual(list(dealing.shard_stream(iter(windows), size, rank, batch, drop)),
                                     dealing.shard_indices(order, size, rank, batch, drop), (n, size, batch, w, rank))
                self.assertEqual(list(dealing.every_nth_stream(iter(order), size, rank)),
                                 dealing.every_nth(order, size, rank))


    def test_streams_deal_the_rest_over_the_ranks_left(self):
        """HVDSHIM_ELASTIC: rank 1 of 3 dies after k batches; from the next
        batch on the two left (renumbered 0 and 1) deal the rest of the epoch:
        every sample not yet taken is taken once (plus the end's padding)."""
        import random
        rnd = random.Random(7)
        saved = dealing._place
        try:
            for _ in range(200):
                n, batch, k = rnd.randint(1, 80), rnd.randint(1, 5), rnd.randint(0, 6)
                order = list(range(n))
                windows = [order[i:i + 7] for i in range(0, n, 7)]
                place = {}
                dealing._place = lambda: place["now"]
                taken = {}
                streams = {}
                for old in range(3):
                    place["now"] = (3, old)
                    streams[old] = dealing.shard_stream(iter(windows), None, None, batch, False)
                    taken[old] = []
                    for _b in range(k):
                        nxt = next(streams[old], None)
                        if nxt is not None:
                            taken[old] += nxt
                after = []
                for old, new in ((0, 0), (2, 1)):
                    place["now"] = (2, new)
                    got = [i for b in streams[old] for i in b]
                    after.append(len(got))
                    taken[old] += got
                self.assertLessEqual(abs(after[0] - after[1]), batch)  # the same number of batches
                seen = taken[0] + taken[1] + taken[2]
                self.assertEqual(set(seen), set(order), (n, batch, k))
                self.assertLessEqual(len(seen) - len(set(seen)), 2, (n, batch, k))  # the padding only
                place["now"] = (2, 0)
                self.assertEqual(list(dealing.every_nth_stream(iter(order))), dealing.every_nth(order, 2, 0))
        finally:
            dealing._place = saved

    def test_slice_batch_cuts_every_rowed_part(self):
        import collections
        P = collections.namedtuple("P", "x ids")
        b = {"x": torch.arange(10).view(5, 2), "names": list("abcde"), "n": 7,
             "p": P(torch.arange(5), [10, 11, 12, 13, 14]), "scalar": torch.tensor(3.0)}
        got = iterable.slice_batch(b, 5, dealing.split_slice(range(5), 2, 1))
        self.assertEqual(got["x"].tolist(), [[6, 7], [8, 9]])
        self.assertEqual(got["names"], ["d", "e"])
        self.assertEqual((got["n"], got["scalar"].item()), (7, 3.0))
        self.assertIsInstance(got["p"], P)
        self.assertEqual((got["p"].x.tolist(), got["p"].ids), ([3, 4], [13, 14]))
        one = iterable.slice_batch((torch.arange(1),), 1, dealing.split_slice(range(1), 2, 1))  # padded
        self.assertEqual(one[0].tolist(), [0])


class SummedLoss(unittest.TestCase):
    def test_loss_summed_over_the_batch_recognised(self):
        import torch.nn.functional as F
        x = torch.randn(4, 3, requires_grad=True)
        y = torch.tensor([0, 1, 2, 0])
        z = torch.zeros(4, 3)
        summed = {
            "cross_entropy sum": F.cross_entropy(x, y, reduction="sum"),
            "mse sum": F.mse_loss(x, z, reduction="sum"),
            "l1 sum (a .sum())": F.l1_loss(x, z, reduction="sum"),
            "VAE: BCE sum + KLD": F.binary_cross_entropy(torch.sigmoid(x), torch.ones(4, 3), reduction="sum")
            - 0.5 * torch.sum(1 + x - x.pow(2) - x.exp()),
            "scaled (GradScaler)": F.cross_entropy(x, y, reduction="sum") * torch.tensor(65536.0),
        }
        averaged = {
            "cross_entropy": F.cross_entropy(x, y),
            "mean": x.pow(2).mean(),
            "mean + L2 sum": F.cross_entropy(x, y) + 1e-4 * x.pow(2).sum(),
            "sum / batch": x.pow(2).sum() / x.shape[0],
        }
        for what, loss in summed.items():
            self.assertTrue(loss_shares._looks_summed(loss.grad_fn), what)
        self.assertIsNone(loss_shares._share_of(summed["cross_entropy sum"].grad_fn))
        for what, loss in averaged.items():
            self.assertFalse(loss_shares._looks_summed(loss.grad_fn), what)


    def test_share_of_a_mean(self):
        """What a loss is a mean over, for split mode's weighing (None: not one mean)."""
        import torch.nn.functional as F
        x = torch.randn(6, 5, requires_grad=True)
        y = torch.tensor([0, 1, -100, 2, 3, -100])
        mask = torch.tensor([1.0, 1, 0, 1, 0, 1])
        shares = {
            "ignore_index": (F.cross_entropy(x, y), 4.0),
            "label smoothing": (F.cross_entropy(x, y, label_smoothing=0.1), 4.0),
            "class weights": (F.cross_entropy(x, y.clamp(min=0), weight=torch.arange(1.0, 6.0)),
                              float(torch.arange(1.0, 6.0)[y.clamp(min=0)].sum())),
            "scaled, over k": (F.cross_entropy(x, y) * torch.tensor(1024.0) / 4, 4.0),
            ".mean()": (x.pow(2).mean(), 30.0),
            "mse": (F.mse_loss(x, torch.zeros(6, 5)), 30.0),
            "masked sum over its count": ((x.pow(2).sum(1) * mask).sum() / mask.sum(), 4.0),
            "none: a sum": (x.sum(), None),
            "a mean plus a penalty (a sum): the mean's count": (F.cross_entropy(x, y) + x.pow(2).sum(), 4.0),
            "a mean plus a mean over another count: the first's": (x.pow(2).mean() + F.cross_entropy(x, y), 30.0),
            "none: a sum less another": (x.sum() - x.pow(2).sum(), None),
        }
        for what, (loss, want) in shares.items():
            self.assertEqual(loss_shares._share_of(loss.grad_fn), want, what)


class SyncBatchNorm(unittest.TestCase):
    """HVDSHIM_SYNC_BN's F.batch_norm: against the stub (the other ranks add
    zeros), the whole batch is this rank's, so outputs, gradients and
    running statistics must be torch's own (the ranks' sums: split.sh)."""

    def setUp(self):
        self.stub = StubLib()
        capi.LIB = self.stub
        _S.enabled, _S.started, _S.sync_bn, _S.bn_calls, _L.share_s = True, True, True, 0, 1.0
        norms.install(True)

    def tearDown(self):
        _S.sync_bn = False

    def test_same_as_torch(self):
        torch.manual_seed(3)
        for make, shape in ((lambda: torch.nn.BatchNorm1d(5), (8, 5)), (lambda: torch.nn.BatchNorm1d(5), (4, 5, 3)),
                            (lambda: torch.nn.BatchNorm2d(4, momentum=None), (3, 4, 5, 2)),
                            (lambda: torch.nn.BatchNorm3d(2, affine=False), (2, 2, 3, 2, 2)),
                            (lambda: torch.nn.BatchNorm1d(5, track_running_stats=False), (6, 5))):
            mine, theirs = make(), make()
            if mine.affine:
                with torch.no_grad():
                    mine.weight.uniform_(0.5, 2)
                    mine.bias.uniform_(-1, 1)
            theirs.load_state_dict(mine.state_dict())
            for step in range(3):
                x = (torch.randn(*shape) * 3 + 1).requires_grad_()
                x2 = x.detach().clone().requires_grad_()
                n = len(self.stub.calls)
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always")
                    y = mine(x)
                self.assertEqual([str(w.message) for w in said], [])  # nothing of the shim's in the script's output
                _S.sync_bn = False
                y2 = theirs(x2)
                _S.sync_bn = True
                w = torch.randn(*shape)
                (y * w).sum().backward()
                (y2 * w).sum().backward()
                what = "%s %s step %d" % (type(mine).__name__, shape, step)
                self.assertEqual([c[1][:13] for c in self.stub.calls[n:]], [b"hvdshim.bn.f.", b"hvdshim.bn.b."], what)
                torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5, msg=what)
                torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5, msg=what)
                for (name, a), (_n, b) in zip(mine.named_parameters(), theirs.named_parameters()):
                    torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=what + " " + name)
                for (name, a), (_n, b) in zip(mine.named_buffers(), theirs.named_buffers()):
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=what + " " + name)
                mine.zero_grad()
                theirs.zero_grad()

    def test_eval_float16_and_errors(self):
        bn = torch.nn.BatchNorm1d(3)
        n = len(self.stub.calls)
        bn.eval()
        bn(torch.randn(4, 3))
        self.assertEqual(len(self.stub.calls), n)  # the running statistics: nothing to agree on
        bn.train()
        y = norms.batch_norm(torch.randn(4, 3).half(), None, None, training=True)
        self.assertEqual(y.dtype, torch.float16)
        with self.assertRaisesRegex(ValueError, "more than 1 value per channel"):
            bn(torch.randn(1, 3))

    def test_scripted_model_runs_torch_own(self):
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        s = torch.jit.script(m)
        buf = io.BytesIO()
        torch.jit.save(s, buf)
        buf.seek(0)
        loaded = torch.jit.load(buf)
        x = torch.randn(5, 4)
        n = len(self.stub.calls)
        torch.testing.assert_close(loaded(x), s(x))
        self.assertEqual(len(self.stub.calls), n)


class EmbeddingMaxNorm(unittest.TestCase):
    """F.embedding with max_norm: the rows any rank looks up are renormalized
    on every rank (a stand-in rank looks up rows 5 and 7); the output is
    torch's own for this rank's rows; a scripted module runs torch's own."""

    def setUp(self):
        _S.enabled, _S.started, _S.size, _S.elastic, _S.bn_calls = True, True, 2, False, 0
        norms.install(False)
        self.gathered = []

        def start(name, t, what):
            self.gathered.append(name)
            return t

        def finish(h, like, what):
            return torch.cat([h, torch.tensor([5, 7, 1])])
        self.saved = norms.allgather_start, norms.allgather_finish
        norms.allgather_start, norms.allgather_finish = start, finish

    def tearDown(self):
        norms.allgather_start, norms.allgather_finish = self.saved
        _S.size = 1

    def test_rows_of_every_rank(self):
        torch.manual_seed(4)
        mine = torch.nn.Embedding(10, 4, max_norm=1.0)
        theirs = torch.nn.Embedding(10, 4)
        theirs.load_state_dict(mine.state_dict())
        before = mine.weight.detach().clone()
        ids = torch.tensor([[1, 2], [2, 3]])
        y = mine(ids)
        self.assertEqual(len(self.gathered), 1)
        with torch.no_grad():
            torch.embedding_renorm_(theirs.weight, torch.tensor([1, 2, 3, 5, 7]), 1.0, 2.0)
        self.assertTrue(torch.equal(mine.weight, theirs.weight))
        for r in (0, 4, 6, 8, 9):  # looked up by no rank: untouched
            self.assertTrue(torch.equal(mine.weight[r], before[r]))
        self.assertTrue(torch.equal(y, theirs(ids)))
        y.sum().backward()
        self.assertIsNotNone(mine.weight.grad)

    def test_without_max_norm_or_scripted(self):
        torch.nn.Embedding(10, 4)(torch.tensor([1, 2]))
        scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Embedding(10, 4, max_norm=1.0)))
        scripted(torch.tensor([1, 2]))
        self.assertEqual(self.gathered, [])


class Signatures(unittest.TestCase):
    def test_first_difference_names_entry_and_ranks(self):
        a = models._signature(models._tensor_entries(torch.nn.Linear(10, 32)))
        b = models._signature(models._tensor_entries(torch.nn.Linear(10, 24)))
        self.assertIsNone(models._first_difference(a, a, 1))
        self.assertEqual(models._first_difference(a, b, 1),
                         "entry 0: rank 0 has 'p weight 32x10 float32', rank 1 has 'p weight 24x10 float32'")
        c = models._signature(models._tensor_entries(torch.nn.Sequential(torch.nn.Linear(10, 32))))
        self.assertIn("rank 0 has 'p weight", models._first_difference(a, c, 2))
        short = models._signature(models._tensor_entries(torch.nn.Linear(10, 32, bias=False)))
        self.assertIn("rank 0 has 2 parameters and buffers, rank 3 has 1", models._first_difference(a, short, 3))


class Streams(unittest.TestCase):
    def test_prefixed_lines_whole(self):
        sink = io.StringIO()
        s = output._PrefixedStream(sink, "[rank 1] ")
        s.write("a")
        s.write("b\nc\n")
        s.write("d")
        self.assertEqual(sink.getvalue(), "[rank 1] ab\n[rank 1] c\n")
        s.flush()
        self.assertEqual(sink.getvalue(), "[rank 1] ab\n[rank 1] c\n[rank 1] d")

    def test_renumbered_after_a_shrink(self):
        sink = io.StringIO()
        saved = sys.stderr
        sys.stderr = output._PrefixedStream(sink, "[rank 2] ")
        try:
            sys.stderr.write("before\n")
            output.renumber(1)  # (rank 1 died: rank 2 is rank 1 among the survivors)
            sys.stderr.write("after\n")
        finally:
            sys.stderr = saved
        self.assertEqual(sink.getvalue(), "[rank 2] before\n[rank 1] after\n")


class ErrorHints(unittest.TestCase):
    """The lines after an uncaught exception's traceback (output.py)."""

    @staticmethod
    def _hints(message, filename, split=None):
        """What _worker_hint and _split_hint write for a RuntimeError(message)
        raised in code compiled as `filename`."""
        own = os.path.dirname(os.path.abspath(output.__file__))
        try:
            exec(compile("raise RuntimeError(message)", filename, "exec"), {"message": message})  # pylint: disable=exec-used
        except RuntimeError as e:
            value, tb = e, e.__traceback__
        saved = (sys.stderr, _S.data_mode, _S.nominal_rows, _S.size)
        sys.stderr = io.StringIO()
        try:
            if split:
                _S.data_mode, _S.nominal_rows, _S.size = "split", split[0], split[1]
            output._worker_hint(value, tb, own)
            output._split_hint(value)
            return sys.stderr.getvalue()
        finally:
            sys.stderr, _S.data_mode, _S.nominal_rows, _S.size = saved

    def test_worker_death_in_a_hook(self):
        own = os.path.dirname(os.path.abspath(output.__file__))
        dead = "DataLoader worker (pid(s) 1234) exited unexpectedly"
        said = self._hints(dead, os.path.join(own, "gradients", "hooks.py"))
        self.assertEqual(said.count("\n"), 1, said)
        self.assertIn("a DataLoader worker of this rank ended", said)
        self.assertEqual(self._hints(dead, "/elsewhere/train.py"), "")  # raised in the script: torch's own words
        self.assertEqual(self._hints("other", os.path.join(own, "x.py")), "")

    def test_split_size_error(self):
        bad = "The size of tensor a (16) must match the size of tensor b (32) at non-singleton dimension 0"
        said = self._hints(bad, "/elsewhere/train.py", split=(32, 2))
        self.assertIn("gets 16 of the 32 rows", said)
        self.assertIn("HVDSHIM_DATA=shard", said)
        self.assertEqual(self._hints(bad, "/elsewhere/train.py"), "")  # shard mode: nothing to add
        self.assertEqual(self._hints("out of memory", "/elsewhere/train.py", split=(32, 2)), "")


class WarningPlaces(unittest.TestCase):
    """A warning raised inside a wrapped function names the wrapper's caller
    where it names its own caller (patching.py), as in the plain run."""

    def test_caller_named(self):
        class Torchlike:
            def method(self, stacklevel):
                warnings.warn("from the wrapped method", UserWarning, stacklevel=stacklevel)

        # (a wrapper whose code is the package's, as install.py's are)
        made = compile("lambda orig: lambda self, *a: orig(self, *a)",
                       os.path.join(os.path.dirname(patching.__file__), "wrapper.py"), "eval")
        patching.wrap(Torchlike, "method", eval(made))  # pylint: disable=eval-used
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            here = sys._getframe().f_lineno + 1
            Torchlike().method(2)
            Torchlike().method(1)
        self.assertEqual([(w.filename, w.lineno) for w in got][0], (__file__, here))
        self.assertEqual(got[1].filename, __file__)  # (its own line: inside the method, here)
        self.assertLess(got[1].lineno, here)

    def test_own_warning_kept(self):
        own = os.path.join(os.path.dirname(patching.__file__), "own.py")
        code = compile("import warnings\nwarnings.warn('hvdshim says', UserWarning)\n", own, "exec")
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            exec(code, {})  # pylint: disable=exec-used
        self.assertEqual((got[0].filename, got[0].lineno), (own, 2))


class StepNames(unittest.TestCase):
    """"optimizer step N" in the elastic and resizing lines (state.py)."""

    def test_counted_together(self):
        from hvdshim_torch.state import optimizer_step
        saved = list(_S.optimizers)
        try:
            import weakref
            m = torch.nn.Linear(2, 1)
            a, b = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.Adam(m.parameters())
            _S.optimizers[:] = [weakref.ref(a)]
            self.assertEqual(optimizer_step(18), "optimizer step 18")
            _S.optimizers[:] = [weakref.ref(a), weakref.ref(b)]  # a GAN's two: step 18 is its 9th iteration
            self.assertEqual(optimizer_step(18), "optimizer step 18 (the steps of its 2 optimizers counted together)")
            del b
            self.assertEqual(optimizer_step(18), "optimizer step 18")  # (gone: not counted)
        finally:
            _S.optimizers[:] = saved


class Rules(unittest.TestCase):
    def setUp(self):
        self.stub = StubLib()
        capi.LIB = self.stub
        _S.rank, _S.size, _S.enabled, _S.started = 1, 2, True, True
        _S.optimizers, _S.warned = [], set()

    def test_hyperparameter_slots_and_apply(self):
        p = torch.nn.Parameter(torch.zeros(3))
        adam = torch.optim.Adam([p], lr=0.01, betas=(0.9, 0.99), weight_decay=0.0)
        sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5, momentum=0.9, nesterov=True)
        hyperparams._note_optimizer(adam)
        hyperparams._note_optimizer(sgd)
        hyperparams._note_optimizer(adam)  # once
        slots = hyperparams._hyper_slots()
        keys = [(k, i) for _g, k, i, _v in slots]
        self.assertIn(("betas", 0), keys)
        self.assertIn(("betas", 1), keys)
        self.assertNotIn("nesterov", [k for k, _ in keys])  # flags are not averaged or taken
        self.assertNotIn("amsgrad", [k for k, _ in keys])
        values = [v for *_x, v in slots]
        at = keys.index(("lr", None))
        values[at] = 0.02                    # rank 0's lr of the Adam group
        values[keys.index(("betas", 1))] = 0.95
        hyperparams._apply_hyper(slots, values)
        self.assertEqual(adam.param_groups[0]["lr"], 0.02)
        self.assertEqual(adam.param_groups[0]["betas"], (0.9, 0.95))
        self.assertEqual(sgd.param_groups[0]["lr"], 0.5)
        self.assertTrue(sgd.param_groups[0]["nesterov"])
        self.assertIsInstance(sgd.param_groups[0]["momentum"], float)

    def test_round_carries_rank0_hyperparameters_bit_exact(self):
        """The end-of-backward round is float32 (it fuses with float32
        gradients): rank 0's float64 hyperparameters travel as 16-bit pieces
        and arrive bit for bit; a rank that did not use a parameter learns
        that another did; k comes from rank 0; without rank 0 (finished),
        nothing is taken."""
        awkward = [0.1, 1.0 / 3.0, 1e-300, -2.5e-8, 3e38 * 10, float("nan")]
        self.assertEqual(repr(round_vector.values(round_vector.pieces(awkward))), repr(tuple(awkward)))
        for p in round_vector.pieces(awkward):
            self.assertEqual(float(torch.tensor([p], dtype=torch.float32) + 0.0), p)  # exact in float32
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        _S.optimizers = []
        hyperparams._note_optimizer(opt)
        _P.params = [hooks._Param(i, "m0.%s" % n, p, False) for i, (n, p) in enumerate(model.named_parameters())]
        _P.used = bytearray([1, 0])
        _H.submitted, _H.round, _S.accumulate, _A.windows, _A.k = set(), None, True, [4, 4], 1
        _S.rank, _S.data_mode = 0, "shard"
        reduction._submit_round()
        rank0 = _H.round[0].tolist()
        _H.round = None
        _S.rank = 1
        opt.param_groups[0]["lr"] = 0.7  # this rank's own decision
        _P.used = bytearray([0, 0])
        self.stub.round_peer = rank0
        reduction._reduce_round()
        self.assertEqual(opt.param_groups[0]["lr"], 0.1)
        self.assertEqual(_A.k, 4)
        self.assertIsNotNone(model.weight.grad)  # used on rank 0: this rank submitted zeros for it
        self.assertIsNone(model.bias.grad)
        self.stub.round_peer = [0.0] * len(rank0)  # rank 0 has finished: keep our own
        opt.param_groups[0]["lr"] = 0.7
        reduction._reduce_round()
        self.assertEqual(opt.param_groups[0]["lr"], 0.7)
        self.assertEqual(_A.k, 1)
        _S.data_mode = "split"  # no DataLoader trained: split mode cut nothing, shard mode's rule (a warning)
        trained, _EV.loader_trained = _EV.loader_trained, False
        try:
            reduction._reduce_round()
            _EV.loader_trained = True  # where every rank holds a part of every batch: the job ends, saying why
            with self.assertRaisesRegex(errors.HvdShimError, "1 of 2 ranks finished the script while this rank still "
                                        r"trains \(its backward after optimizer step"):
                reduction._reduce_round()
        finally:
            _EV.loader_trained = trained

    def test_gradients_go_during_backward_or_all_at_its_end(self):
        """HVDSHIM_OVERLAP on: each gradient is handed over as it is ready
        (HVDSHIM_BUCKET 0), the last one with the round; off: one batch at the
        end of backward holds every gradient and the round.  The batch the end
        of backward waits for is flagged so (the engine thread is not woken),
        no other is; the gradients arrive averaged either way."""
        for overlap in (True, False):
            self.stub.batches = []
            named = _one_backward(overlap)
            names = [b"m0.%s" % n.encode() for n, _p in named]
            batches = self.stub.batches
            self.assertEqual(sorted(n for b, _f in batches for n in b if not n.startswith(b"hvdshim.round")),
                             sorted(names))
            self.assertTrue(batches[-1][0][-1].startswith(b"hvdshim.round."))  # the round goes last
            self.assertEqual([f for _b, f in batches], [0] * (len(batches) - 1) + [capi.BATCH_CALLER_WAITS])
            self.assertEqual(len(batches), len(names) if overlap else 1)
            self.assertEqual(_H.submitted, set())  # the step's reduction ended

    def test_round_and_gradients_waited_for_in_one_call(self):
        """Every gradient handed over with the round (HVDSHIM_OVERLAP off):
        the end of backward waits for them and the round in one
        hvd_wait_all; a refusal held by either set still raises."""
        self.stub.waits = []
        named = _one_backward(overlap=False)
        self.assertEqual(self.stub.waits, [len(named) + 1])
        for refused_in in (0, 1):
            a, b = collectives.Pending(), collectives.Pending()
            (a, b)[refused_in].refused = "averaging something"
            errors.following = True
            try:
                with self.assertRaises(errors.MembershipChanged):
                    a.wait_with(b)
            finally:
                errors.following = False
            self.assertEqual((b.items, b.refused, a.items, a.refused), ([], None, [], None))

    @unittest.skipIf(not hasattr(torch, "compiler") or "torch._dynamo" in sys.modules,
                     "torch < 2 (no torch.compile), or torch._dynamo already imported")
    def test_hooks_marked_untraced_once_dynamo_is_imported(self):
        """_untraced does not import torch._dynamo (1.5 s of a rank's start on
        torch 2.14): its hook calls the function as it is until the script
        imports torch._dynamo, then the function torch.compiler.disable made,
        and a compiled function calling the hook runs it."""
        calls = []
        hook = patching.untraced(lambda x: calls.append(1) or x + 1)
        self.assertNotIn("torch._dynamo", sys.modules)
        self.assertEqual(hook(1), 2)
        cell = patching._UNTRACED[-1][1]
        plain = cell[0]
        import torch._dynamo  # noqa: F401  what torch.compile does first
        self.assertIsNot(cell[0], plain)
        self.assertTrue(getattr(cell[0], "_torchdynamo_disable", False))
        compiled = torch.compile(lambda t: hook(t) * 2, backend="eager")
        self.assertEqual(compiled(torch.ones(2)).tolist(), [4.0, 4.0])
        self.assertEqual(len(calls), 2)
        self.assertFalse(any(isinstance(f, patching.AfterImport) and f.name == "torch._dynamo"
                             for f in sys.meta_path))  # one shot

    def test_cores_per_rank_decides_overlap(self):
        """HVDSHIM_OVERLAP auto: a rank bound to one core, or one of two
        ranks unbound on two cores, has one core; on eight unbound cores each
        of two ranks has four (and a binding to two of them, two)."""
        saved = (output.os.sched_getaffinity, output.os.cpu_count, _S.local_size)
        try:
            for cpus, mask, local, want in ((2, {0}, 2, 1), (2, {0, 1}, 2, 1), (8, set(range(8)), 2, 4),
                                            (8, {2, 3}, 2, 2), (4, set(range(4)), 1, 4)):
                output.os.sched_getaffinity, output.os.cpu_count = (lambda _pid, m=mask: m), (lambda c=cpus: c)
                _S.local_size = local
                self.assertEqual(output.cores_per_rank(), want, (cpus, mask, local))
        finally:
            output.os.sched_getaffinity, output.os.cpu_count, _S.local_size = saved

    def test_loss_reads_as_mean_after_backward(self):
        """A scalar loss given to backward reads as the mean over ranks
        afterwards (the other rank's is 3.0 here); a scaled loss stands for
        its source; retain_graph, views, leaves and non-scalar roots are
        left alone; a failed backward takes its item back; a loss averaged so is
        not averaged again by the closure/plateau path."""
        _S.average_loss, _A.in_backward, _B.scaled, _B.averaged = True, False, None, None
        _H.batch = collectives.Batch()
        self.stub.loss_peer = 3.0
        w = torch.nn.Parameter(torch.tensor([2.0]))

        def losses():
            return [c for c in self.stub.calls if c[0] == "allreduce" and c[1] == b"hvdshim.loss"]

        def backward(t, **kw):
            return backward_wrap._backward_averaging(torch.autograd.backward, t, None, kw.get("retain_graph"),
                                             kw.get("create_graph", False), (), {})
        loss = (w * 0.5).sum()  # 1.0 here
        backward(loss)
        self.assertEqual(loss.item(), 2.0)
        self.assertEqual(w.grad.item(), 0.5)  # the gradient is backward's own (averaged by the hooks, not here)
        self.assertEqual(len(losses()), 1)
        self.assertIs(backward_wrap._average_loss(loss), loss)
        self.assertEqual(len(losses()), 1)  # not averaged twice
        kept = (w * 0.5).sum()
        backward(kept, retain_graph=True)  # its node may keep its value for the next pass
        self.assertEqual(kept.item(), 1.0)
        view = ((w * 0.5).expand(2) * 1.0)[0]  # writing a view would change what it views
        backward(view)
        self.assertEqual(view.item(), 1.0)
        leaf = torch.nn.Parameter(torch.tensor(4.0))  # a parameter is never written
        backward(leaf)
        self.assertEqual(leaf.item(), 4.0)
        vec = w.expand(2) * 1.0
        backward_wrap._backward_averaging(torch.autograd.backward, vec, torch.ones(2), None, False, (), {})
        self.assertEqual(len(losses()), 1)
        source = (w * 0.25).sum()  # 0.5
        scaled = source * 1024.0
        backward_wrap._note_scaled(source, scaled)
        backward(scaled)
        self.assertEqual(source.item(), 1.75)
        self.assertEqual(scaled.item(), 512.0)
        bad = (w * 0.5).sum()
        bad.backward()  # its graph is gone: the next backward fails before any gradient
        with self.assertRaises(RuntimeError):
            backward(bad)
        self.assertEqual(_H.batch.items, [])
        _S.average_loss = False
        off = (w * 0.5).sum()
        backward(off)
        self.assertEqual(off.item(), 1.0)
        self.assertEqual(len(losses()), 2)
        _S.average_loss = True

    def test_replica_guard_names_first_differing_parameter(self):
        model = torch.nn.Linear(3, 2)
        _P.params = [hooks._Param(i, "m0.%s" % n, p, False) for i, (n, p) in enumerate(model.named_parameters())]
        _S.check_steps, _S.steps = 5, 5
        sums = [float(p.double().sum()) for p in model.parameters()]
        self.stub.peer = sums + [-s for s in sums]  # the other rank agrees
        replicas._check_replicas()
        self.stub.peer = [sums[0], sums[1] + 1.0] + [-sums[0], -sums[1]]  # it differs in the bias
        with self.assertRaisesRegex(hvdshim_torch.HvdShimError, "step 5: parameter 'm0.bias' differs"):
            replicas._check_replicas()
        _S.steps = 6  # not a checking step: no traffic
        n = len(self.stub.calls)
        replicas._check_replicas()
        self.assertEqual(len(self.stub.calls), n)

    def test_rng_streams_per_rank_and_deterministic(self):
        self.assertNotEqual(rng.mixed_seed(b"state", 1), rng.mixed_seed(b"state", 2))
        self.assertEqual(rng.mixed_seed(b"state", 1), rng.mixed_seed(b"state", 1))
        _S.rng_mode, _R.diverged, _S.rank = "per-rank", False, 0
        torch.manual_seed(3)
        before = torch.get_rng_state().clone()
        rng.diverge()  # rank 0: unchanged
        self.assertTrue(torch.equal(before, torch.get_rng_state()))
        _R.diverged, _S.rank = False, 1
        rng.diverge()
        a = torch.rand(3)
        torch.set_rng_state(before)
        _R.diverged = False
        rng.diverge()
        self.assertTrue(torch.equal(a, torch.rand(3)))  # the same mixing every time
        torch.set_rng_state(before)
        self.assertFalse(torch.equal(a, torch.rand(3)))  # and not rank 0's stream
        _S.rng_mode, _R.diverged = "same", False
        torch.set_rng_state(before)
        rng.diverge()
        self.assertTrue(torch.equal(before, torch.get_rng_state()))

    def test_rng_step_window_shared_by_ranks(self):
        """Between a reducing backward's end and the step's, torch draws from
        a stream every rank shares; outside, each rank's own stream goes on
        as if the window's draws had not happened."""
        _S.rng_mode, _R.seed, _R.shared, _R.window = "per-rank", 12345, {}, None
        self.addCleanup(setattr, _R, "seed", None)
        drawn = []
        for own in (1, 2):  # two ranks: their own streams differ
            _R.shared = {}
            torch.manual_seed(own)
            rng.window_open()
            rng.window_open()  # (open already: nothing changes)
            inside = torch.rand(4)
            rng.window_close()
            rng.window_close()  # (closed already: nothing changes)
            after = torch.rand(4)
            torch.manual_seed(own)
            self.assertTrue(torch.equal(after, torch.rand(4)))  # its own stream, untouched by the window
            drawn.append(inside)
        self.assertTrue(torch.equal(drawn[0], drawn[1]))  # both drew the same in the window
        rng.window_open()  # the next window goes on with the shared stream
        self.assertFalse(torch.equal(torch.rand(4), drawn[0]))
        rng.window_close()
        _S.whole_batches = True
        batches = list(iteration.dealt_batches(iter([1, 2])))  # a dealt loader's batches close it
        self.assertFalse(_S.whole_batches)  # (and are parts of a batch: BatchNorm syncs)
        rng.window_open()
        it = iteration.dealt_batches(iter([1]))
        self.assertEqual(next(it), 1)
        self.assertIsNone(_R.window)
        _S.rng_mode = "same"
        rng.window_open()
        self.assertIsNone(_R.window)  # only per-rank streams have a window
        self.assertEqual(batches, [1, 2])

    def _windowed(self, window):
        old = epoch_order._WINDOW
        epoch_order._WINDOW = window
        self.addCleanup(setattr, epoch_order, "_WINDOW", old)

    def test_windows_give_the_same_batches(self):
        """Windows of 5 indices (many broadcasts) deal what one window deals."""
        from torch.utils.data import DataLoader, BatchSampler, SequentialSampler
        for mode in ("shard", "split"):
            for drop in (False, True):
                got = {}
                for window in (5, 1 << 16):
                    self._windowed(window)
                    _S.data_mode, _S.loaders, _S.roots = mode, 0, __import__("weakref").WeakSet()
                    loader = DataLoader(list(range(23)), batch_size=4, shuffle=False, drop_last=drop)
                    loaders._prepare_loader(loader)
                    loader2 = DataLoader(list(range(23)),
                                         batch_sampler=BatchSampler(SequentialSampler(range(23)), 4, drop))
                    loader2.batch_sampler.__class__ = type("Custom", (BatchSampler,), {})  # dealt, not by index
                    loaders._prepare_loader(loader2)
                    got[window] = ([b.tolist() for b in loader], [b.tolist() for b in loader2])
                self.assertEqual(got[5], got[1 << 16], (mode, drop))
        # rank 1 of 2, split, 23 samples in batches of 4: slices [2:4] of each batch
        self.assertEqual(got[5][0][0], [2, 3])

    def test_sampler_runs_to_its_end_as_plain(self):
        """RandomSampler draws a last randperm when it is asked past its end,
        as BatchSampler asks: the epoch's random state is the plain run's."""
        from torch.utils.data import DataLoader
        for mode in ("shard", "split"):
            _S.data_mode, _S.loaders, _S.roots = mode, 0, __import__("weakref").WeakSet()
            g_plain, g = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
            plain = DataLoader(list(range(32)), batch_size=4, shuffle=True, generator=g_plain)
            loader = DataLoader(list(range(32)), batch_size=4, shuffle=True, generator=g)
            loaders._prepare_loader(loader)
            for _ in range(2):
                list(plain)
                list(loader)
                self.assertTrue(torch.equal(g_plain.get_state(), g.get_state()), mode)

    def test_endless_sampler_starts_at_once(self):
        """RandomSampler(replacement=True, num_samples=1e10): the first batches
        come at once, and the broadcasts are windows, never the epoch."""
        import time
        from torch.utils.data import DataLoader, RandomSampler
        for mode in ("shard", "split"):
            _S.data_mode, _S.loaders, _S.roots = mode, 0, __import__("weakref").WeakSet()
            ds = list(range(100))
            loader = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds, replacement=True, num_samples=int(1e10)))
            loaders._prepare_loader(loader)
            self.assertEqual(len(loader), int(1e10) // 2 // 8 if mode == "shard" else int(1e10) // 8)
            self.stub.calls.clear()
            t0 = time.perf_counter()
            first = [b.tolist() for b, _ in zip(loader, range(50))]
            self.assertLess(time.perf_counter() - t0, 30)  # a safety net: the real bound is the window
            self.assertEqual(len(first), 50)
            self.assertTrue(all(len(b) == (8 if mode == "shard" else 4) for b in first))
            sizes = [c[2] for c in self.stub.calls if c[0] == "broadcast"]
            self.assertTrue(sizes and max(sizes) <= 8 * (epoch_order._WINDOW + 2), sizes)  # count, more, a window

    def test_sampler_without_len(self):
        from torch.utils.data import DataLoader, Sampler

        class NoLen(Sampler):
            def __init__(self):
                pass

            def __iter__(self):
                return iter(range(11))

        self._windowed(3)
        _S.data_mode, _S.loaders, _S.roots = "shard", 0, __import__("weakref").WeakSet()
        loader = DataLoader(list(range(11)), batch_size=2, sampler=NoLen())
        loaders._prepare_loader(loader)
        with self.assertRaises(TypeError):
            len(loader)  # as plain: no len
        self.assertEqual([b.tolist() for b in loader], [[1, 3], [5, 7], [9, 0]])  # rank 1, padded from the start

    def test_loader_sharded_in_training_whole_under_no_grad(self):
        from torch.utils.data import DataLoader, Sampler

        class Odd(Sampler):
            def __init__(self):
                pass

            def __iter__(self):
                return iter(range(1, 20, 2))

            def __len__(self):
                return 10

        _S.data_mode, _S.loaders, _S.roots = "shard", 0, __import__("weakref").WeakSet()
        loader = DataLoader(list(range(20)), batch_size=2, sampler=Odd())
        loaders._prepare_loader(loader)
        self.assertIsInstance(loader.batch_sampler, sharded._ShardedBatches)
        self.assertEqual(loader.batch_size, 2)
        self.assertEqual(len(loader), 3)  # 10 samples over 2 ranks in batches of 2
        got = [b.tolist() for b in loader]
        self.assertEqual(got, [[3, 7], [11, 15], [19]])  # rank 1: every 2nd sample from the 2nd
        with torch.no_grad():
            self.assertEqual(len(loader), 5)
            self.assertEqual([b.tolist() for b in loader], [[1, 3], [5, 7], [9, 11], [13, 15], [17, 19]])
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        model.eval()  # every known model in eval, just switched: whole
        roles.note_switch()
        self.assertEqual(len(loader), 5)


class _Optimizer:
    """What the adapter reads of an optimizer here (torch.optim's import
    torch._dynamo on torch 2.x, which a test of Rules must not find yet)."""

    def __init__(self, model):
        self.param_groups = [{"params": list(model.parameters())}]


def _iterate(loader):
    """DataLoader.__iter__ as install.py patches it: the loader's role decides
    as the iterator is made, and follows it until it runs out."""
    from torch.utils.data import DataLoader
    role = roles.iteration_begins(loader)
    return roles.iteration_made(role, DataLoader.__iter__(loader))


def _batches(loader):
    return sum(1 for _ in _iterate(loader))


class Lengths(unittest.TestCase):
    """len(loader) and the batches of the iteration that follows agree
    (roles.py), at rank 1 of 2 in shard mode: 20 samples in batches of 2 are
    10 batches whole, 5 sharded."""

    def setUp(self):
        import weakref
        capi.LIB = StubLib()
        _S.rank, _S.size, _S.enabled, _S.started, _S.data_mode = 1, 2, True, True, "shard"
        _S.loaders, _S.loader_refs, _S.roots = 0, {}, weakref.WeakSet()
        _EV.loader_trained, _S.warned, _EV.mode_event, _EV.data_events = False, set(), -1, 0
        _EV.backwards, _EV.new_in_order = 0, True
        self.said = []
        self.addCleanup(setattr, roles, "_warn_once", roles._warn_once)
        roles._warn_once = lambda key, msg: self.said.append(msg)

    def loader(self, shuffle=False):
        from torch.utils.data import DataLoader
        loader = DataLoader(list(range(20)), batch_size=2, shuffle=shuffle)
        loaders._prepare_loader(loader)
        return loader

    def switch(self, module, mode):
        module.train(mode)
        roles.note_switch()

    def test_wrapper_in_train_mode_inner_model_in_eval(self):
        inner = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        task = torch.nn.Module()
        task.model, task.loss = inner, torch.nn.MSELoss()
        _S.roots.add(task)
        self.assertTrue(roles.training_now())
        inner.eval()  # the wrapper holds no parameter of its own: its mode does not count
        self.assertFalse(roles.training_now())
        inner[0].weight.requires_grad_(False)
        inner[0].bias.requires_grad_(False)  # nothing trainable: any model in training mode
        self.assertTrue(roles.training_now())

    def test_len_before_inference_mode_kept_for_the_loop(self):
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        val = self.loader()
        self.switch(model, False)
        told = len(val)  # timm: eval(), len, then inference_mode
        with torch.inference_mode():
            self.assertEqual((told, _batches(val)), (10, 10))
        told = len(val)  # PyTorch's ImageNet example: len before eval(); the loader evaluated before
        self.switch(model, True)  # (the training before it)
        _EV.data_events += 1
        told = len(val)
        self.switch(model, False)
        with torch.no_grad():
            self.assertEqual((told, _batches(val)), (10, 10))
        self.assertEqual(self.said, [])

    def test_len_inside_and_right_after_the_loop(self):
        train = self.loader(shuffle=True)
        inside = set()
        it = _iterate(train)
        for _ in it:
            with torch.no_grad():  # a progress print under no_grad
                inside.add(len(train))
                inside.add(len(it))
        self.assertEqual(inside, {5})
        with torch.no_grad():
            self.assertEqual(len(train), 10)  # under no_grad: what an evaluation would be
        self.assertEqual(len(train), 5)  # right after it ran out (a running loss / len(loader))

    def test_len_right_after_a_loop_the_ranks_changed_during(self):
        """Elastic: rank 0 of 3 dies during the loop (this rank 1 becomes 0
        of 2), the rest of the epoch dealt over 2: right after the loop len
        is the batches it gave (a running loss / len(loader)), then the new
        split's."""
        train = self.loader()
        _S.size = 3  # 20 samples, batches of 2: runs of 6, this rank's [1, 4] and [7, 10]
        gave = []
        for x in _iterate(train):
            gave.append(x.tolist())
            if len(gave) == 2:
                _S.size, _S.rank = 2, 0  # from index 12 on, runs of 4 over 2
        self.assertEqual(gave, [[1, 4], [7, 10], [12, 14], [16, 18]])
        self.assertEqual(len(train), 4)
        _EV.data_events += 1  # (a backward: the next epoch)
        self.assertEqual((len(train), _batches(train)), (5, 5))

    def test_training_loader_evaluated_then_trained_again(self):
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        train = self.loader(shuffle=True)
        for epoch in range(2):
            told = len(train)  # before train(): its past use says
            self.switch(model, True)
            self.assertEqual((told, _batches(train)), (5, 5), epoch)
            _EV.data_events += 1  # (a backward)
            self.switch(model, False)
            told = len(train)  # just after eval()
            with torch.no_grad():
                self.assertEqual((told, _batches(train)), (10, 10), epoch)
            _EV.data_events += 1  # (another loader's evaluation)
        self.assertEqual(self.said, [])

    def test_a_new_loader_beside_a_trained_or_shuffled_one(self):
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        train, val, more = self.loader(shuffle=True), self.loader(), self.loader(shuffle=True)
        self.assertEqual((len(train), len(val)), (5, 10))  # in order beside a shuffled one: evaluated
        self.assertEqual(_batches(train), 5)
        _EV.data_events += 1
        self.assertEqual(len(more), 10)  # a loader trains already: a new one is taken to evaluate
        self.switch(model, True)
        self.assertEqual(len(more), 5)  # ... unless asked just after train()

    def test_iterator_made_before_train_is_called(self):
        """The HuggingFace Trainer makes the epoch's iterator, then calls
        model.train() in training_step: the model is in eval mode then, from
        from_pretrained or from the last evaluation."""
        model = torch.nn.Linear(1, 1)
        train, val = self.loader(shuffle=True), self.loader()
        self.switch(model, False)  # from_pretrained: no model known yet
        self.assertEqual((len(train), _batches(train)), (5, 5))
        _S.roots.add(model)
        for epoch in range(2):
            self.switch(model, False)  # evaluation_loop
            self.assertEqual(_batches(val), 10)
            self.assertEqual((len(train), _batches(train)), (5, 5), epoch)  # not just switched: its past says
        self.assertEqual(self.said, [])

    def backward(self):
        _EV.data_events += 1
        _EV.backwards += 1

    def train_epoch(self, model, train, switch_each_step=True):
        n = 0
        for _ in _iterate(train):
            if switch_each_step:
                self.switch(model, True)
            self.backward()
            n += 1
        return n

    def eval_in_step(self, model, val):
        """ignite's supervised evaluator, skorch's validation: the iteration
        begins in training mode with gradients on, and each step switches the
        model to eval (and disables gradients) itself."""
        n = 0
        for _ in _iterate(val):
            self.switch(model, False)
            with torch.no_grad():
                n += 1
        return n

    def test_evaluation_switched_inside_each_step(self):
        for shuffle in (False, True):  # (skorch's training loader reads in order by default)
            _EV.loader_trained, _EV.backwards = False, 0
            model = torch.nn.Linear(1, 1)
            _S.roots.add(model)
            train, val = self.loader(shuffle=shuffle), self.loader()
            for epoch in range(3):
                self.assertEqual(self.train_epoch(model, train), 5, epoch)
                told = len(val)  # (ignite's Engine.run asks first)
                self.assertEqual((told, self.eval_in_step(model, val)), (10, 10), (shuffle, epoch))
                self.assertEqual(self.eval_in_step(model, val), 10, epoch)  # (skorch does not ask)
            _S.roots.discard(model)
        self.assertEqual(self.said, [])

    def test_in_order_evaluation_without_eval_or_no_grad(self):
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        train, val = self.loader(shuffle=True), self.loader()
        for epoch in range(3):
            self.assertEqual(self.train_epoch(model, train), 5)
            self.assertEqual(_batches(val), 10, epoch)
        self.assertEqual(self.said, [])

    def test_a_pass_before_any_model_or_optimizer_is_whole(self):
        """Dataset statistics before the model is made: every rank counts the
        whole loader (nothing to train yet); the training loop after the
        model and optimizer are made is sharded, also before the model ran."""
        import weakref
        self.addCleanup(setattr, _EV, "new_model", _MODEL_MADE)
        self.addCleanup(setattr, _S, "optimizers", [])
        _EV.new_model, _S.optimizers = models.new_model_to_train, []
        self.addCleanup(models._M.fresh.clear)
        train = self.loader(shuffle=True)
        self.assertEqual((len(train), _batches(train)), (10, 10))
        model = torch.nn.Linear(1, 1)
        models._M.fresh.add(model)  # (Module.__init__ does it: install.py)
        self.assertEqual(_batches(train), 5)  # a model made in training mode: training
        model.eval()
        self.assertEqual(_batches(train), 10)
        opt = _Optimizer(model)
        _S.optimizers = [weakref.ref(opt)]  # (an optimizer made: something to train)
        self.assertEqual(_batches(train), 5)
        self.assertEqual(self.said, [])

    def test_a_new_student_beside_a_teacher_in_eval(self):
        """Knowledge distillation: the teacher (run, known) in eval mode, the
        student made and not run yet, its optimizer made: the student's
        first loop trains, whether the loader is new or the teacher's."""
        import weakref
        self.addCleanup(setattr, _EV, "new_model", _MODEL_MADE)
        self.addCleanup(setattr, _S, "optimizers", [])
        self.addCleanup(models._M.fresh.clear)
        _EV.new_model = models.new_model_to_train
        teacher = torch.nn.Linear(1, 1)
        _S.roots.add(teacher)
        train = self.loader(shuffle=True)
        self.assertEqual(self.train_epoch(teacher, train), 5)
        self.switch(teacher, False)
        student = torch.nn.Linear(1, 1)
        models._M.fresh.add(student)
        opt = _Optimizer(student)
        _S.optimizers = [weakref.ref(opt)]
        student.train()
        roles.note_switch()
        self.assertEqual(self.train_epoch(student, train, switch_each_step=False), 5)
        self.assertEqual(self.train_epoch(student, self.loader(shuffle=True), switch_each_step=False), 5)
        _S.optimizers = []  # an EMA copy or a model made for evaluation, no optimizer holding it: evaluation
        self.switch(teacher, False)
        self.assertEqual(_batches(self.loader()), 10)
        self.assertEqual(self.said, [])

    def test_a_peeked_training_loader_still_trains(self):
        """PyTorch's CIFAR-10 tutorial: next(iter(trainloader)) to show a few
        images, then training with model.train() never called."""
        train = self.loader(shuffle=True)
        next(iter(_iterate(train)))
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        for epoch in range(2):
            self.assertEqual(self.train_epoch(model, train, switch_each_step=False), 5, epoch)
        self.assertEqual(self.said, [])

    def test_taken_for_evaluation_then_trained(self):
        """A loader evaluated with the model switched inside each step, then
        trained on in training mode never switched before the loop: its
        first training iteration is whole (right, no faster), said once, and
        sharded after; a loader read whole with no backward in training mode
        (dataset statistics, a prefetching thread) is not taken for one."""
        _S.rank = 0
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        first, stats, val = self.loader(shuffle=True), self.loader(shuffle=True), self.loader(shuffle=True)
        self.train_epoch(model, first, switch_each_step=False)
        self.assertEqual((_batches(stats), _batches(stats)), (5, 5))  # read whole in training mode: trains
        self.assertEqual(self.train_epoch(model, stats, switch_each_step=False), 5)
        self.assertEqual(self.eval_in_step(model, val), 5)  # (nothing known of it yet: trains)
        self.switch(model, True)
        self.backward()
        got = [self.train_epoch(model, val) for _ in range(3)]
        self.assertEqual(got, [10, 5, 5])
        self.assertEqual(len(self.said), 1)
        self.assertIn("an earlier one ran in eval mode with no backward pass", self.said[0])
        # a new in-order loader each epoch, model.train() never called: the
        # first new one is taken for an evaluation, and the rule ends there
        got = [self.train_epoch(model, self.loader(), switch_each_step=False) for _ in range(3)]
        self.assertEqual(got, [10, 5, 5])
        self.assertEqual(len(self.said), 2)
        self.assertIn("a new loader reading in order", self.said[1])
        self.switch(model, True)
        self.assertEqual(_batches(self.loader()), 5)  # train() just called: the script's word

    def test_evaluator_that_does_not_run_out(self):
        """ignite's Engine.run takes len(data) batches an epoch without asking
        for one more, and asks at the next epoch's start (running out, a new
        iterator then): the trainer's backward passes after the evaluator's
        last batch are not the evaluator's."""
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        train, val = self.loader(shuffle=True), self.loader()

        class Engine:
            def __init__(self, data, step):
                self.data, self.step, self.it = data, step, None
                self.length = len(data)

            def run(self):
                n = 0
                while n < self.length:
                    try:
                        batch = next(self.it)
                    except (StopIteration, TypeError):
                        self.it = _iterate(self.data)
                        continue
                    self.step(batch)
                    n += 1
                return n, self.length

        trainer = Engine(train, lambda b: (self.switch(model, True), self.backward()))
        evaluator = None
        for epoch in range(3):
            self.assertEqual(trainer.run(), (5, 5), epoch)
            evaluator = Engine(val, lambda b: self.switch(model, False))  # (a new run each time: len asked)
            self.assertEqual(evaluator.run(), (10, 10), epoch)
        self.assertEqual(self.said, [])

    def test_kept_answer_wins_and_is_said_once(self):
        probe = self.loader(shuffle=True)
        told = len(probe)  # taken for training
        _S.rank = 0  # (rank 0 says it)
        with torch.no_grad():
            self.assertEqual((told, _batches(probe)), (5, 5))
        _S.rank = 1
        self.assertEqual(len(self.said), 1)
        self.assertIn("len() was asked before this evaluation began", self.said[0])
        _EV.data_events += 1
        with torch.no_grad():
            self.assertEqual(_batches(probe), 10)  # not kept across another event
        told = len(probe)
        _EV.data_events += 1  # a backward between len and the loop: the loop decides
        with torch.no_grad():
            self.assertEqual((told, _batches(probe)), (10, 10))

    def test_split_holds_nothing(self):
        _S.data_mode = "split"
        probe = self.loader(shuffle=True)
        told = len(probe)
        with torch.no_grad():
            got = [b.tolist() for b in _iterate(probe)]
        self.assertEqual((told, len(got)), (10, 10))
        self.assertTrue(all(len(b) == 2 for b in got))  # whole batches: the evaluation is whole
        self.assertEqual(self.said, [])

    def test_iterable_dataset_dealt(self):
        from torch.utils.data import DataLoader, IterableDataset

        class Stream(IterableDataset):
            def __iter__(self):
                return iter(range(20))

            def __len__(self):
                return 20
        loader = DataLoader(Stream(), batch_size=2)
        loaders._prepare_loader(loader)
        self.assertEqual(iterable._dealt_len(loader, len(loader)), 5)
        model = torch.nn.Linear(1, 1)
        _S.roots.add(model)
        self.switch(model, False)
        self.assertEqual(iterable._dealt_len(loader, len(loader)), 10)


class ScriptFolders(unittest.TestCase):
    """The script's TemporaryDirectory folders are handed to the library's
    watcher (tempdir.py): the rank's own, not one made with delete=False, at
    most _SCRIPT_FOLDERS of them."""

    class Lib:
        def __init__(self):
            self.paths = []

        def hvd_remove_at_end(self, path):
            self.paths.append(os.fsdecode(path))
            return 0

        def hvd_log_message(self, *args):
            self.said = args

    def setUp(self):
        from hvdshim_torch import tempdir
        self.tempdir, self.lib = tempdir, self.Lib()
        self.saved = (capi.LIB, tempdir._rank_pid[0], tempdir._script_folders[0])
        capi.LIB, tempdir._rank_pid[0], tempdir._script_folders[0] = self.lib, os.getpid(), 0

    def tearDown(self):
        capi.LIB, self.tempdir._rank_pid[0], self.tempdir._script_folders[0] = self.saved

    def test_watched(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            self.tempdir._watch_script_folder(type("T", (), {"name": d})())
        self.assertEqual(self.lib.paths, [d])

    def test_kept_or_not_the_ranks(self):
        self.tempdir._watch_script_folder(type("T", (), {"name": "/tmp/kept", "_delete": False})())
        self.tempdir._rank_pid[0] = os.getpid() + 1  # (a loader worker's)
        self.tempdir._watch_script_folder(type("T", (), {"name": "/tmp/worker"})())
        self.assertEqual(self.lib.paths, [])

    def test_at_most(self):
        for i in range(self.tempdir._SCRIPT_FOLDERS + 5):
            self.tempdir._watch_script_folder(type("T", (), {"name": "/tmp/f%d" % i})())
        self.assertEqual(len(self.lib.paths), self.tempdir._SCRIPT_FOLDERS)
        self.assertIn(b"temporary folders watched", self.lib.said[-1])


class Checkpoints(unittest.TestCase):
    """torch.save to a path on rank 0 (checkpoints.py): the old file moved
    aside first and the library's restorer told, the save in place, the
    backup removed; a save that raises leaves the path as it was (a script
    that distributes itself too); on a rank > 0, or where the path is not a
    plain file of its own, the save is the original's alone."""

    class Lib:
        def __init__(self):
            self.pairs = []

        def hvd_restore_at_end(self, backup, path):
            # (told before the hidden folder is made: a rank killed in between leaves nothing)
            self.folder_then = os.path.exists(os.path.dirname(os.fsdecode(backup)))
            self.pairs.append((os.fsdecode(backup), os.fsdecode(path)))
            return 0

        def hvd_overlay_write_path(self, path, out, n):
            return 0

        hold = (-1, 0)  # hvd_overlay_hold's answers to on=1 and on=0 or 2 (-1: no overlay here)
        ends = []       # the on=0 or 2 of each hold ended
        settles = 0     # hvd_overlay_saves_settled calls

        def hvd_overlay_hold(self, path, on):
            if on != 1:
                self.ends.append(on)
            return self.hold[0] if on == 1 else self.hold[1]

        def hvd_overlay_saves_settled(self):
            self.settles += 1

        def hvd_log_message(self, *args):
            pass

    def setUp(self):
        import tempfile
        from hvdshim_torch import checkpoints
        self.ck, self.lib = checkpoints, self.Lib()
        self.saved = (capi.LIB, _S.rank, _S.aside_reason, set(checkpoints._watched))
        capi.LIB, _S.rank, _S.aside_reason = self.lib, 0, None
        checkpoints._watched.clear()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "ck.pt")

    def tearDown(self):
        import shutil
        capi.LIB, _S.rank, _S.aside_reason, watched = self.saved
        self.ck._watched.clear()
        self.ck._watched.update(watched)
        shutil.rmtree(self.dir)

    def write(self, text):
        def orig(obj, f):
            with open(f, "w") as out:
                out.write(text)
                if text == "part":
                    hidden = os.path.join(self.dir, ".hvdshim-saving")
                    self.during = sorted(os.listdir(hidden)) if os.path.isdir(hidden) else None
                    raise KeyboardInterrupt
            return "saved"
        return orig

    def read(self):
        with open(self.path) as f:
            return f.read()

    def test_rewrite(self):
        with open(self.path, "w") as f:
            f.write("old")
        os.chmod(self.path, 0o600)
        self.assertEqual(self.ck.save(self.write("new"), None, self.path), "saved")
        self.assertEqual(self.read(), "new")
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)
        self.assertEqual(os.listdir(self.dir), ["ck.pt"])
        self.assertEqual(self.lib.pairs, [(os.path.join(self.dir, ".hvdshim-saving", "ck.pt"), self.path)])
        self.assertFalse(self.lib.folder_then)
        self.ck.save(self.write("newer"), None, self.path)
        self.assertEqual(len(self.lib.pairs), 1)  # (each path told once)

    def test_cut_short(self):
        with open(self.path, "w") as f:
            f.write("old")
        with self.assertRaises(KeyboardInterrupt):
            self.ck.save(self.write("part"), None, self.path)
        self.assertEqual(self.during, ["ck.pt"])  # (the old one aside while the save ran)
        self.assertEqual(self.read(), "old")
        self.assertEqual(os.listdir(self.dir), ["ck.pt"])

    def test_new_file_cut_short(self):
        with self.assertRaises(KeyboardInterrupt):
            self.ck.save(self.write("part"), None, self.path)
        self.assertEqual(self.during, ["ck.pt.new"])
        self.assertEqual(os.listdir(self.dir), [])

    def test_backup_left_aside(self):
        # a save cut short between moving the old file aside and saving (the
        # script caught the interrupt and goes on): the next save puts it
        # back first and keeps it aside again, never removes it
        os.mkdir(os.path.join(self.dir, ".hvdshim-saving"))
        with open(os.path.join(self.dir, ".hvdshim-saving", "ck.pt"), "w") as f:
            f.write("old")
        with self.assertRaises(KeyboardInterrupt):
            self.ck.save(self.write("part"), None, self.path)
        self.assertEqual(self.during, ["ck.pt"])
        self.assertEqual(self.read(), "old")
        self.assertEqual(os.listdir(self.dir), ["ck.pt"])

    def test_copyfile(self):
        # shutil.copyfile over the best checkpoint: cut short, the old one
        # stays; whole, the new one is there (shutil.copy goes through it)
        import shutil
        with open(self.path, "w") as f:
            f.write("old")
        src = os.path.join(self.dir, "last.pt")
        with open(src, "w") as f:
            f.write("new")

        def cut(s, d, *args, **kwargs):
            with open(d, "w") as f:
                f.write("pa")
            raise KeyboardInterrupt
        with self.assertRaises(KeyboardInterrupt):
            self.ck.guarded(self.path, lambda: cut(src, self.path))
        self.assertEqual(self.read(), "old")
        saved = (torch.save, torch.serialization.save, shutil.copyfile)
        self.ck._watched.clear()
        self.lib.pairs = []
        try:
            self.ck.install()
            self.assertEqual(shutil.copy(src, self.path), self.path)
        finally:
            torch.save, torch.serialization.save, shutil.copyfile = saved
        self.assertEqual(self.read(), "new")
        self.assertEqual(self.lib.pairs, [(os.path.join(self.dir, ".hvdshim-saving", "ck.pt"), self.path)])
        self.assertEqual(sorted(os.listdir(self.dir)), ["ck.pt", "last.pt"])
        saved = (torch.save, torch.serialization.save, shutil.copyfile)
        try:
            self.ck.install()
            with self.assertRaises(shutil.SameFileError):  # (plain's error, the file untouched)
                shutil.copyfile(self.path, self.path)
        finally:
            torch.save, torch.serialization.save, shutil.copyfile = saved
        self.assertEqual(self.read(), "new")

    def test_watched_at_most(self):
        # past _WATCHED_MAX paths the watcher is told no more, and a save
        # it was not told of is made in place, not kept aside unwatched
        self.ck._watched.update("/elsewhere/%d.pt" % i for i in range(self.ck._WATCHED_MAX))
        with open(self.path, "w") as f:
            f.write("old")
        with self.assertRaises(KeyboardInterrupt):
            self.ck.save(self.write("part"), None, self.path)
        self.assertEqual((self.lib.pairs, self.during), ([], None))
        self.assertEqual(self.read(), "part")  # (as plain)
        self.assertEqual(os.listdir(self.dir), ["ck.pt"])

    def test_stood_aside(self):
        _S.aside_reason = "it distributes itself"  # (rank 0's saves of a Horovod script alike)
        with open(self.path, "w") as f:
            f.write("old")
        with self.assertRaises(KeyboardInterrupt):
            self.ck.save(self.write("part"), None, self.path)
        self.assertEqual(self.read(), "old")

    def test_in_place(self):
        with open(self.path, "w") as f:
            f.write("old")
        _S.rank = 1
        self.assertEqual(self.ck.save(self.write("new"), None, self.path), "saved")
        self.assertEqual(self.lib.pairs, [])
        os.unlink(self.path)
        _S.rank = 0
        os.symlink(os.path.join(self.dir, "target"), self.path)
        self.assertEqual(self.ck.save(self.write("new"), None, self.path), "saved")
        self.assertTrue(os.path.islink(self.path))
        self.assertEqual(self.lib.pairs, [])
        import io
        self.assertEqual(self.ck.save(lambda obj, f: "buffer", None, io.BytesIO()), "buffer")

    def test_rank0_died_during_a_private_save(self):
        """A rank > 0 saving privately when the job's rank 0 dies (elastic):
        the save is made again, kept aside as rank 0's; one begun after the
        takeover is kept aside at once; with no takeover, once, in place."""
        saves = []

        def orig(obj, f):
            saves.append(os.path.exists(os.path.join(self.dir, ".hvdshim-saving", "ck.pt")))
            with open(f, "w") as out:
                out.write(obj)
            return "saved"
        with open(self.path, "w") as f:
            f.write("old")
        _S.rank = 1
        self.lib.hold, self.lib.ends = (0, 0), []  # held, no takeover
        self.assertEqual(self.ck.save(orig, "a", self.path), "saved")
        self.assertEqual((saves, self.lib.pairs, self.lib.ends), ([False], [], [2]))  # (finished: 2)
        self.ck.settled()  # the job's next step: the library forgets it (once)
        self.ck.settled()
        self.assertEqual(self.lib.settles, 1)

        def failing(obj, f):
            raise OSError("disk full")
        self.assertRaises(OSError, self.ck.save, failing, "x", self.path)
        self.assertEqual(self.lib.ends, [2, 0])  # (not finished: 0, nothing to put in place)
        self.ck.settled()
        self.assertEqual(self.lib.settles, 1)
        self.lib.hold = (0, 1)  # held, and the rank took over the files meanwhile
        self.assertEqual(self.ck.save(orig, "b", self.path), "saved")
        self.assertEqual(saves[1:], [False, True])  # the second, real save with the old file kept aside
        self.assertEqual(len(self.lib.pairs), 1)
        self.lib.hold = (1, 0)  # the files are this rank's already
        self.assertEqual(self.ck.save(orig, "c", self.path), "saved")
        self.assertEqual(saves[3:], [True])
        self.assertEqual(self.read(), "c")
        self.assertEqual(os.listdir(self.dir), ["ck.pt"])


class Resizing(unittest.TestCase):
    """Ranks that change under a loader (elastic) and jobs that grow (resize.py)."""

    def setUp(self):
        capi.LIB = StubLib()
        _S.enabled, _S.started, _S.roots = True, True, __import__("weakref").WeakSet()

    def tearDown(self):
        _S.size, _S.rank, _S.data_mode = 2, 1, "shard"

    def _asked_ahead(self, mode, n, batch, asked, had):
        """A sharded iteration over range(n) in `mode` at 3 ranks (this one rank
        1), `asked` batches handed to the loader, `had` of them given to the
        script; then rank 0 dies (this one is rank 0 of 2): what the rest of the
        iteration gives, and the results to drop."""
        import itertools
        import weakref
        _S.size, _S.rank, _S.data_mode = 3, 1, mode
        live = redeal._Handout()
        live.items = items = redeal._Pushback(iter(range(n)))

        def handout():  # _by_index_batches' two paths
            if mode == "shard":
                for run, m, r, full in dealing._runs(items, batch, None, None):
                    live.note(run)
                    yield run[r::m]
                return
            while True:
                glob = list(itertools.islice(items, batch))
                if len(glob) < batch:
                    return
                live.note(glob)
                yield dealing.split_slice(glob, *dealing._place())

        class LoaderIter:
            _num_yielded = had
        it = LoaderIter()
        live.loader_iter = weakref.ref(it)
        gen = handout()
        first = [next(gen) for _ in range(asked)]
        _S.size, _S.rank = 2, 0
        live.redeal()
        return first, list(gen), live.drop

    def test_discovery_decides(self):
        """Rank 0 on what the discovery script lists (grow._decide): more
        slots grow the job, a host or slots it runs on no longer listed
        shrink it, but not below --min-np nor off rank 0's host (said once
        each)."""
        G = grow._G
        keep = (G.hosts, G.max_np, G.min_np, G.wanted, G.shrink)
        said = []

        def once(key, text):
            said.append(key)
        try:
            _S.size = 3
            cases = [  # (job's hosts, min-np, max-np, listed, restarts, ranks then, said)
                ({"a": 2, "b": 1}, 0, 0, "a:2\nb:1", False, 0, []),
                ({"a": 2, "b": 1}, 0, 0, "a:2\nb:2", True, 4, []),
                ({"a": 2, "b": 1}, 0, 4, "a:2\nb:1\nc:8", True, 4, []),
                ({"a": 2, "b": 1}, 0, 0, "a:2", True, 2, []),
                ({"a": 2, "b": 1}, 0, 0, "a:1\nb:1", True, 2, []),
                ({"a": 2, "b": 1}, 0, 0, "a:2\nc:1", True, 3, []),
                ({"a": 2, "b": 1}, 3, 0, "a:2", False, 0, ["min"]),
                ({"a": 2, "b": 1}, 0, 0, "b:4", False, 0, ["rank0"]),
                ({}, 0, 0, "a:2", False, 0, []),
            ]
            for hosts, min_np, max_np, listed, restarts, ranks, words in cases:
                G.hosts, G.min_np, G.max_np, G.wanted, G.shrink = dict(hosts), min_np, max_np, 0, False
                del said[:]
                got = grow._decide(grow._listed(listed), once)
                self.assertEqual((got, G.wanted if got else 0, said), (restarts, ranks, words), (hosts, listed))
            for bad in ("a:0", "a:x", ":2"):
                self.assertRaises(ValueError, grow._listed, bad)
            self.assertEqual(grow._listed("a:2\nb\n# a comment\n\n  c:3  \n"), {"a": 2, "b": 1, "c": 3})
            self.assertEqual(grow._listed(""), {})
        finally:
            G.hosts, G.max_np, G.min_np, G.wanted, G.shrink = keep

    def test_split_batches_asked_ahead_dealt_again(self):
        first, rest, drop = self._asked_ahead("split", 36, 6, asked=4, had=1)
        self.assertEqual(drop, 3)
        self.assertEqual(first[0], [2, 3])  # global batch 0, rank 1 of 3
        # global batches 1..5 again, over 2 ranks: none lost, none twice
        self.assertEqual(rest, [list(range(6 * g, 6 * g + 3)) for g in range(1, 6)])

    def test_shard_runs_asked_ahead_dealt_again(self):
        first, rest, drop = self._asked_ahead("shard", 36, 2, asked=3, had=2)
        self.assertEqual(drop, 1)
        self.assertEqual(first[:2], [[1, 4], [7, 10]])  # runs 0 and 1 (6 indices each), rank 1 of 3
        # from index 12 on, runs of 4 dealt over 2: rank 0 has every other
        self.assertEqual(rest, [[i, i + 2] for i in range(12, 36, 4)])

    def test_nothing_dealt_again_without_workers_ahead(self):
        first, rest, drop = self._asked_ahead("split", 18, 6, asked=1, had=1)
        self.assertEqual(drop, 0)
        self.assertEqual(rest, [[6, 7, 8], [12, 13, 14]])

    @staticmethod
    def _iteration(sampler, mode, given):
        """An elastic job's sharded iteration of `sampler` at 3 ranks (this
        one rank 1), its loader having given the script `given` batches:
        the batches, the iteration's _Handout, and the stand-in loader
        iterator (kept alive: the _Handout holds it weakly).  (Split mode's
        batch-size check is behind it: not its loader's first iteration.)"""
        import weakref
        _S.size, _S.rank, _S.data_mode, _S.elastic = 3, 1, mode, True
        batches = sharded._ShardedBatches(sampler, 0, mode, "here")
        batches._split_checked = True
        gen = iter(batches)
        live = _LIVE.live_last

        class LoaderIter:
            _num_yielded = given
        it = LoaderIter()
        live.loader_iter = weakref.ref(it)
        _LIVE.live.add(live)  # (as the loader's _Redealt iterator adds it)
        return gen, live, it

    def test_custom_batch_sampler_batches_dealt_again(self):
        from torch.utils.data import Sampler

        class Pairs(Sampler):  # a custom batch sampler: batches of 2, 0..23
            def __init__(self):
                pass

            def __iter__(self):
                return iter([[i, i + 1] for i in range(0, 24, 2)])

            def __len__(self):
                return 12

        for mode, want_first, want_rest in (
                # shard: batches 1 and 4 (runs of 3); run 1 (batches 3 to 5) was asked ahead: from batch 3 on,
                # runs of 2 (batches 3, 5, 7, 9, 11)
                ("shard", [[2, 3], [8, 9]], [[6, 7], [10, 11], [14, 15], [18, 19], [22, 23]]),
                # split: slices of batches 0 and 1; batch 1 was asked ahead: from batch 1 on, halves
                ("split", [[1], [3]], [[2 * k] for k in range(1, 12)])):
            try:
                gen, live, _it = self._iteration(Pairs(), mode, 1)
                first = [next(gen) for _ in range(2)]
                _S.size, _S.rank = 2, 0
                for fn in _S.on_change:  # what elastic.recover runs after a change (data/redeal registers itself)
                    fn()
                self.assertEqual(live.drop, 1, mode)
                self.assertEqual(first, want_first, mode)
                self.assertEqual(list(gen), want_rest, mode)
            finally:
                _S.elastic, _LIVE.live_last = False, None

    def test_batches_put_back_after_the_epoch_was_handed_out(self):
        from torch.utils.data import BatchSampler, SequentialSampler
        try:
            gen, live, _it = self._iteration(BatchSampler(SequentialSampler(range(12)), 2, False), "split", 4)
            got = [next(gen) for _ in range(6)]  # the workers were asked for the whole epoch
            self.assertEqual(got[0], [1])
            with self.assertRaises(StopIteration):
                next(gen)
            _S.size, _S.rank = 2, 0  # a rank died; the script had 4 batches
            live.redeal()
            self.assertEqual(live.drop, 2)
            self.assertEqual(list(gen), [[8], [10]])  # global batches 4 and 5, dealt over 2
        finally:
            _S.elastic, _LIVE.live_last = False, None

    def test_redealt_iterator_drops_the_old_split(self):
        live = redeal._Handout()
        _LIVE.live_last = None

        class LoaderIter:
            def __init__(self):
                self.left = iter(["old a", "old b", "new a", "new b"])

            def __next__(self):
                return next(self.left)
        it = LoaderIter()
        r = redeal._Redealt(it, live)
        live.drop = 2
        self.assertEqual(list(iter(lambda: next(r, None), None)), ["new a", "new b"])

    def test_loader_generators_found(self):
        from torch.utils.data import DataLoader, RandomSampler
        g1, g2 = torch.Generator(), torch.Generator()
        loader = DataLoader(list(range(8)), batch_size=2, sampler=RandomSampler(range(8), generator=g2), generator=g1)
        self.assertEqual([id(g) for g in resize._generators(loader)], [id(g1), id(g2)])
        self.assertEqual(resize._generators(DataLoader(list(range(4)), batch_size=2)), [])

    def test_plain_environment_drops_only_the_shim(self):
        old = os.environ.get("LD_PRELOAD")
        try:
            os.environ["LD_PRELOAD"] = "/x/libfoo.so:/y/.libs/libhvdshim.so"
            self.assertEqual(grow._plain_env()["LD_PRELOAD"], "/x/libfoo.so")
            os.environ["LD_PRELOAD"] = "/y/libhvdshim.so"
            self.assertNotIn("LD_PRELOAD", grow._plain_env())
        finally:
            if old is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = old


if __name__ == "__main__":
    unittest.main(verbosity=2)
