"""Horovod's DistributedOptimizer: each gradient goes to the engine as soon as
backward has accumulated it; step() waits for them (synchronize) and then
runs the wrapped optimizer's step."""
import contextlib
import warnings

import torch

from horovod.common.process_sets import global_process_set
from horovod.torch.compression import Compression
from horovod.torch.basics import _lib, size
from horovod.torch.handles import _optimizers, synchronize
from horovod.torch.ops import allreduce_async_, sparse_allreduce_async
from horovod.torch.tensors import Average, _engine_op

_HAS_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


class _DistributedOptimizer(torch.optim.Optimizer):
    _hvdshim_distributed = True  # broadcast_optimizer_state steps the wrapped optimizer, not this one

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        op = Average if op is None else op
        _engine_op(op)  # Adasum or an unknown op: the clear error
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self.backward_passes_per_step = int(backward_passes_per_step)
        if self.backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups >= 0)):
            raise ValueError("groups should be a non-negative integer or a list of lists of torch.Tensor")
        # groups only decide which gradients Horovod fuses; hvdshim's engine fuses whatever is ready

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.%d.%d" % (g, i), v) for g, group in enumerate(self.param_groups)
                                for i, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) or len(p) != 2 for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually produced "
                             "by model.named_parameters()")
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                             % ", ".join(dups))
        all_ids = {id(v) for group in self.param_groups for v in group["params"]}
        named_ids = {id(v) for _, v in named_parameters}
        if all_ids - named_ids:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                             "Python object ids: %s" % ", ".join(str(i) for i in sorted(all_ids - named_ids)))
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._allreduce_delay = {}
        # as in Horovod: the ranks of the set reduce, even a set of one rank
        # in a larger job; the others never do
        if self.process_set.included() and size() > 1:
            self._register_hooks()
        _optimizers.add(self)

    def load_state_dict(self, *args, **kwargs):
        """Loading a state forgets the reductions in flight and the
        accumulation count, as Horovod's does."""
        self._hvdshim_forget()
        self._should_synchronize = True
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    def _hvdshim_forget(self):
        """The reductions in flight and the accumulation count forgotten (also
        after a failure, hvd.elastic.run: mpi_ops._take_change)."""
        self._handles = {}
        self._synchronized = False
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    # -------------------------------------------------------------- hooks
    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                self._allreduce_delay[p] = self.backward_passes_per_step
                if _HAS_POST_ACCUMULATE:
                    self._grad_accs.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
                else:
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*_ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times before call to step(). "
                        "Increase backward_passes_per_step to accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _allreduce_grad_async(self, p):
        name = "grad.%s" % self._parameter_names.get(p)
        if p.grad is None:  # not used in this rank's backward: it contributes zeros
            p.grad = torch.zeros_like(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:  # reduced dense; synchronize() makes the result sparse again
                tensor = tensor.to_dense()
            else:
                return sparse_allreduce_async(tensor, name=name, op=self.op, process_set=self.process_set), None
        if self.op == Average:
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            pre = post = 1.0
        compressed, ctx = self._compression.compress(tensor)
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre, postscale_factor=post,
                                  process_set=self.process_set)
        return handle, ctx

    # -------------------------------------------------------------- Horovod's API
    def synchronize(self):
        """Wait for every gradient's reduction (submitting those the hooks did
        not: unused parameters, or delayed accumulation) and put the results
        in .grad.  Alone from the start there is nothing to reduce; alone
        after the others died (hvd.elastic.run) the hooks made for them go on
        submitting, and their reductions (of one rank) are waited for."""
        if not self.process_set.included() or (size() <= 1 and not self._grad_accs):
            self._synchronized = True
            return
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in sorted(self._handles.items(), key=lambda kv: self._parameter_names.get(kv[0], "")):
            output = synchronize(handle)
            with torch.no_grad():
                if p.grad.is_sparse:  # sparse, or sparse_as_dense: the gradient stays sparse, as in Horovod
                    reduced = self._compression.decompress(output, ctx)
                    p.grad.zero_().add_(reduced if reduced.is_sparse else reduced.to_sparse())
                else:
                    p.grad.set_(self._compression.decompress(output, ctx))
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() after an explicit synchronize() (clipping, AMP)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(): the gradients are reduced again. Use `with "
                              "optimizer.skip_synchronize(): optimizer.step()` after an explicit synchronize().")
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        _lib.hvd_step_mark(-1)
        return result

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                                 "a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wrap `optimizer` so that its step() uses gradients averaged (op) over
    every rank.  Returns an instance of a subclass of the optimizer's class,
    built on its param_groups, as Horovod does."""
    if num_groups != 0:
        warnings.warn("num_groups is deprecated in Horovod; use groups", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
