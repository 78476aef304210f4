"""Unit tests of the served horovod package (python/horovod) that need
no MPI: it runs against a stub of libhvdshim.so that plays rank 0 of a
two-rank job whose other rank submits the same tensors (a sum doubles, an
allgather repeats this rank's rows), or, with `joined`, has joined (it adds
nothing).  What is checked is Horovod 0.28.1's arithmetic and bookkeeping,
which the multi-rank tests (api.sh, suite.sh) only see through results."""
import ctypes
import sys
import threading
import unittest
import warnings

import torch

sys.path.insert(0, sys.argv.pop(1))  # python/
from hvdshim_torch import capi, collectives  # noqa: E402

_BYTES = {0: 4, 1: 8, 2: 2, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2}
_TORCH = {v: k for k, v in collectives.HVD_DTYPES.items()}


def _view(ptr, count, dtype):
    """A tensor over `count` elements of hvd dtype `dtype` at address ptr."""
    raw = (ctypes.c_char * (count * _BYTES[dtype])).from_address(ptr)
    return torch.frombuffer(raw, dtype=_TORCH[dtype], count=count)


class Stub:
    """Operations complete when waited for.  Its functions take attributes, as
    ctypes functions do (capi.LIB holds it: nothing declares them)."""

    def __init__(self):
        self.joined = False
        self.ops = {}
        self.next = 1
        self.gathered = []
        for name in dir(type(self)):  # plain functions: they take attributes, bound methods do not
            if name.startswith("hvd_"):
                setattr(self, name, (lambda f: lambda *a: f(*a))(getattr(self, name)))

    def _handle(self, h, op):
        self.ops[self.next] = op
        h._obj.value = self.next
        self.next += 1
        return 0

    def hvd_allreduce_async(self, name, ptr, count, dtype, op, cb, arg, h):
        def run():
            t = _view(ptr, count, dtype)
            if op == 0 and not self.joined:  # SUM: the other rank's equal tensor
                t.add_(t.clone())
        return self._handle(h, run)

    def hvd_reducescatter_async(self, name, src, dst, rows, row_elems, dtype, op, cb, arg, h):
        def run():  # rank 0 of 2 keeps the first half (rounded up) of the rows
            mine = (rows + 1) // 2 * row_elems
            if mine:
                out = _view(dst, mine, dtype)
                out.copy_(_view(src, mine, dtype))
                if op == 0 and not self.joined:
                    out.add_(out.clone())
        return self._handle(h, run)

    def hvd_broadcast_async(self, name, ptr, count, dtype, root, cb, arg, h):
        return self._handle(h, lambda: None)

    def hvd_allgather_async(self, name, ptr, rows, row_elems, dtype, cb, arg, h):
        n = rows * row_elems * _BYTES[dtype]
        data = ctypes.string_at(ptr, n) if n else b""

        def result():
            ranks = 1 if self.joined else 2
            buf = ctypes.create_string_buffer(data * ranks, max(len(data) * ranks, 1))
            self.gathered.append(buf)
            return buf, rows * ranks
        return self._handle(h, result)

    def hvd_allgather_wait(self, handle, timeout, out, rows):
        buf, n = self.ops.pop(handle)()
        out._obj.value = ctypes.addressof(buf)
        rows._obj.value = n
        return 0

    def hvd_wait(self, handle, timeout):
        self.ops.pop(handle)()
        return 0

    def hvd_test(self, handle, done):
        done._obj.value = 1
        return 0

    def hvd_free(self, ptr):
        pass

    def hvd_init(self):
        return 0

    def hvd_rank(self):
        return 0

    def hvd_size(self):
        return 2

    def hvd_local_rank(self):
        return 0

    def hvd_local_size(self):
        return 2

    def hvd_initialized(self):
        return 1

    def hvd_process_set_size(self, psid):
        return 2

    def hvd_last_error(self):
        return b""

    def hvd_next_shape(self, dims, n):
        pass

    def hvd_next_process_set(self, psid):
        pass

    def hvd_step_mark(self, samples):
        pass

    def hvd_config_value(self, name):
        return None

    changes = 0  # hvd_elastic_ack: the changes of ranks a test makes (the place stays rank 0 of 2)

    def hvd_elastic_ack(self, rank, size, lost0, what, n):
        got, self.changes = self.changes, 0
        rank._obj.value, size._obj.value, lost0._obj.value = 0, 2, 0
        return got

    def __getattr__(self, name):  # the calls these tests do not make
        if name.startswith("hvd_"):
            return lambda *a: 0
        raise AttributeError(name)


stub = Stub()
capi.LIB = stub
import horovod.torch as hvd  # noqa: E402
from horovod.common import process_sets  # noqa: E402
from horovod.runner.util.threads import in_thread  # noqa: E402
from horovod.torch import mpi_ops  # noqa: E402

hvd.init()


class Arithmetic(unittest.TestCase):
    """Average, scaling and join as Horovod 0.28.1 computes them."""

    def test_average_is_the_sum_divided_by_the_size(self):
        t = torch.tensor([3.0, -5.0, 7.0])
        self.assertTrue(torch.equal(hvd.allreduce(t), t))
        self.assertTrue(torch.equal(hvd.allreduce(torch.tensor([3, -5, 7])), torch.tensor([3, -5, 7])))

    def test_a_joined_rank_counts_in_the_average(self):
        stub.joined = True
        try:  # the other rank joined: it adds nothing, and the sum is still divided by 2
            self.assertTrue(torch.equal(hvd.allreduce(torch.tensor([75.0])), torch.tensor([37.5])))
            self.assertTrue(torch.equal(hvd.allreduce(torch.tensor([-75])), torch.tensor([-37])))  # truncated
        finally:
            stub.joined = False

    def test_float16_scales_in_float32_on_a_cpu(self):
        x = torch.tensor([43.0938, 40.8125, -54.0, 9.1953], dtype=torch.float16)
        f = 0.6123456789
        want = (torch.tensor(f, dtype=torch.float32) * x.float()).half()  # Horovod: one rounding to float16
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=f)
        self.assertTrue(torch.equal(got, want.float().add(want.float()).half()))
        got = hvd.allreduce(x, op=hvd.Sum, postscale_factor=f)
        self.assertTrue(torch.equal(got, (torch.tensor(f, dtype=torch.float32) * (x.float() * 2)).half()))

    def test_integers_scale_in_float64_truncated(self):
        got = hvd.allreduce(torch.tensor([7, -7]), op=hvd.Sum, postscale_factor=0.3)
        self.assertTrue(torch.equal(got, torch.tensor([4, -4])))  # 14 * 0.3 = 4.2, -4.2

    def test_allgather_and_broadcast_raise_while_a_rank_has_joined(self):
        stub.joined = True
        try:
            before = mpi_ops._auto_names.get("allgather", 0)
            with self.assertRaises(hvd.HorovodInternalError):
                hvd.allgather(torch.ones(2))
            # the refused unnamed allgather never happened on the joined rank: its number is given back
            self.assertEqual(mpi_ops._auto_names.get("allgather", 0), before)
            with self.assertRaises(RuntimeError):
                hvd.broadcast(torch.ones(2), 0, name="b")
        finally:
            stub.joined = False
        self.assertTrue(torch.equal(hvd.allgather(torch.ones(1, 2)), torch.ones(2, 2)))

    def test_reducescatter_refuses_other_ops_as_horovod(self):
        with self.assertRaises(hvd.HorovodInternalError):
            hvd.reducescatter(torch.ones(4), op=hvd.Adasum)


class Names(unittest.TestCase):
    def test_a_name_in_flight_is_refused_until_synchronized(self):
        h = hvd.allreduce_async(torch.ones(2), name="dup")
        with self.assertRaises(ValueError):
            hvd.allreduce_async(torch.ones(2), name="dup")
        hvd.synchronize(h)
        hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="dup"))

    def test_a_name_polled_done_may_be_used_again(self):
        h = hvd.broadcast_async(torch.ones(2), 0, name="p")
        self.assertTrue(hvd.poll(h))
        h2 = hvd.broadcast_async(torch.ones(2), 0, name="p")
        hvd.synchronize(h)  # the old handle does not free the new one's name
        with self.assertRaises(ValueError):
            hvd.broadcast_async(torch.ones(2), 0, name="p")
        hvd.synchronize(h2)


class Gradients(unittest.TestCase):
    """Horovod 0.28.1's backward formulas (the other rank's gradient equal)."""

    def test_allgather_and_broadcast_average(self):
        x = torch.ones(3, 2, requires_grad=True)
        (hvd.allgather(x) * 4).sum().backward()
        self.assertTrue(torch.equal(x.grad, torch.full((3, 2), 4.0)))
        x = torch.ones(2, requires_grad=True)
        (hvd.broadcast(x, 0) * 3).sum().backward()
        self.assertTrue(torch.equal(x.grad, torch.full((2,), 3.0)))

    def test_grouped_allreduce_is_scaled_by_the_size(self):
        xs = [torch.ones(2, requires_grad=True) for _ in range(3)]
        for y in hvd.grouped_allreduce(xs, op=hvd.Sum):
            y.sum().backward()
        self.assertTrue(all(torch.equal(x.grad, torch.full((2,), 2.0)) for x in xs))

    def test_reducescatter_gathers_back(self):
        x = torch.ones(4, 3, requires_grad=True)
        hvd.reducescatter(x, op=hvd.Sum).sum().backward()  # rank 0's 2 rows; Sum: times the size
        self.assertTrue(torch.equal(x.grad, torch.full((4, 3), 2.0)))


class Optimizer(unittest.TestCase):
    def test_broadcast_optimizer_state_steps_on_zero_gradients_first(self):
        w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.5)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.assertTrue(torch.equal(w.grad, torch.zeros(2)))
        self.assertIn("momentum_buffer", opt.state[w])  # the state exists, as on Horovod
        self.assertTrue(torch.equal(w.detach(), torch.tensor([1.0, -2.0]) * (1 - 0.1 * 0.5)))

    def test_step_after_synchronize_warns_in_horovods_words(self):
        m = torch.nn.Linear(2, 1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                       named_parameters=m.named_parameters())
        m(torch.ones(1, 2)).sum().backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            opt.step()
        self.assertTrue(any("optimizer.step() called without optimizer.skip_synchronize()" in str(w.message)
                            for w in ws))

    def test_sparse_as_dense_keeps_the_gradient_sparse(self):
        emb = torch.nn.Embedding(5, 2, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                       named_parameters=emb.named_parameters(), sparse_as_dense=True)
        emb(torch.tensor([1, 3])).sum().backward()
        opt.synchronize()
        self.assertTrue(emb.weight.grad.is_sparse)
        want = torch.zeros(5, 2)
        want[[1, 3]] = 1.0
        self.assertTrue(torch.equal(emb.weight.grad.to_dense(), want))  # averaged over 2 equal ranks


class Elastic(unittest.TestCase):
    """hvd.elastic.run's semantics (Horovod 0.28.1's docs/elastic.rst), the
    engine's side played by the stub."""

    def setUp(self):
        self.model = torch.nn.Linear(2, 1)
        self.opt = hvd.DistributedOptimizer(torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.5),
                                            named_parameters=self.model.named_parameters())
        self.state = hvd.elastic.TorchState(self.model, self.opt, epoch=0, batch=0)
        self.resets = []
        self.state.register_reset_callbacks([lambda: self.resets.append(hvd.size())])

    def test_the_function_runs_once_after_a_sync(self):
        calls = []

        @hvd.elastic.run
        def train(state, k):
            calls.append(k)
            return k + 1
        self.assertEqual(train(self.state, 4), 5)
        self.assertEqual((calls, self.resets), ([4], []))

    def test_a_failure_restores_the_commit_resets_and_calls_again(self):
        calls = []
        committed = None

        @hvd.elastic.run
        def train(state):
            nonlocal committed
            calls.append(state.epoch)
            if len(calls) == 1:
                state.epoch = 1
                with torch.no_grad():
                    self.model.weight.fill_(3.0)
                state.commit()
                committed = self.model.weight.detach().clone()
                state.epoch = 2
                with torch.no_grad():
                    self.model.weight.fill_(7.0)
                hvd.allreduce_async(torch.ones(2), name="in.flight")  # never synchronized
                self.model(torch.ones(1, 2)).sum().backward()  # the optimizer's reductions in flight
                stub.changes = 1
                raise hvd.HorovodInternalError("a rank died")
            hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="in.flight"))  # the name is free again
            self.opt.zero_grad()  # (no reduction of the failed step is left behind)
            return state.epoch
        mpi_ops._state["elastic"] = True  # (as under HVDSHIM_ELASTIC=1: the stub reports the change)
        try:
            self.assertEqual(train(self.state), 1)
        finally:
            mpi_ops._state["elastic"] = False
        self.assertEqual(calls, [0, 1])
        self.assertEqual(self.resets, [2])
        self.assertTrue(torch.equal(self.model.weight.detach(), committed))

    def test_the_same_failure_again_from_the_same_commit_is_raised(self):
        calls = []

        @hvd.elastic.run
        def train(state):
            calls.append(1)
            raise hvd.HorovodInternalError("ranks disagree on a tensor")
        with self.assertRaises(hvd.HorovodInternalError):
            train(self.state)
        self.assertEqual((len(calls), self.resets), (2, [2]))  # retried once, as Horovod, then raised

    def test_hosts_updated_resets_without_a_restore(self):
        calls = []

        @hvd.elastic.run
        def train(state):
            calls.append(state.epoch)
            if len(calls) == 1:
                state.epoch = 5
                state.on_hosts_updated(1, 2)  # (Horovod's HostUpdateResult.added)
                state.commit()
            return state.epoch
        self.assertEqual(train(self.state), 5)
        self.assertEqual((calls, self.resets), ([0, 5], [2]))

    def test_the_state_carried_over_a_restart(self):
        with torch.no_grad():
            self.model.weight.fill_(2.0)
        self.state.epoch = 3
        self.state.commit()
        with torch.no_grad():
            self.model.weight.fill_(4.0)
        snap = self.state._hvdshim_snapshot()
        model = torch.nn.Linear(2, 1)
        fresh = hvd.elastic.TorchState(model, torch.optim.SGD(model.parameters(), lr=0.1), epoch=0, batch=0)
        fresh._hvdshim_load(snap)
        self.assertEqual(fresh.epoch, 3)
        self.assertTrue(torch.equal(model.weight.detach(), torch.full((1, 2), 4.0)))  # as it was
        fresh.restore()
        self.assertTrue(torch.equal(model.weight.detach(), torch.full((1, 2), 2.0)))  # as committed

    def test_the_sampler_deals_what_is_left_over_the_ranks(self):
        sampler = hvd.elastic.ElasticSampler(list(range(10)), shuffle=False)
        self.assertEqual(list(sampler), [0, 2, 4, 6, 8])  # rank 0 of 2
        sampler.record_batch(0, 2)  # 2 samples on each of the 2 ranks
        self.assertEqual(sampler.processed_num, 4)
        sampler.load_state_dict(sampler.state_dict())
        self.assertEqual(list(sampler), [4, 6, 8])  # 4..9, padded with 4 to 3 per rank
        order = list(range(10))
        import random
        random.Random(7 + 1).shuffle(order)
        shuffled = hvd.elastic.ElasticSampler(list(range(10)), seed=7)
        shuffled.set_epoch(1)
        self.assertEqual(list(shuffled), order[0::2])


class Package(unittest.TestCase):
    def test_in_thread_runs_the_target(self):
        got = []
        t = in_thread(got.append, args=(1,))
        t.join()
        self.assertEqual(got, [1])
        self.assertTrue(t.daemon)
        with self.assertRaises(ValueError):
            in_thread(got.append, args=1)
        in_thread(lambda: 1 / 0, silent=True).join()

    def test_common_imports_no_framework(self):
        import ast
        import inspect
        from horovod.common import elastic
        for module in (process_sets, elastic):
            tree = ast.parse(inspect.getsource(module))
            names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
            names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            self.assertFalse([n for n in names if n.startswith("horovod.torch") or n == "torch"], module.__name__)

    def test_removing_the_global_set_returns_false(self):
        self.assertFalse(hvd.remove_process_set(hvd.global_process_set))


if __name__ == "__main__":
    threading.current_thread().name = "unit"
    unittest.main(argv=[sys.argv[0], "-v"])
