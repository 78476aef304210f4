"""The benchmarks' floor of a data-parallel job (bench/torch_train.py and
bench/ordinary_train.py, --flat engine|mpi): the model distributed by hand
with nothing per gradient, every gradient a view of one flat buffer that
also holds the loss, reduced in one call a step, through hvdshim's served
horovod (engine) or a raw MPI_Allreduce through ctypes (mpi)."""
import os

import torch


def flat_gradients(params):
    """Every parameter's gradient a view of one zeroed buffer, with one float
    more at its end for the loss: (the buffer, the loss's index)."""
    n = sum(p.numel() for p in params)
    flat, at = torch.zeros(n + 1), 0
    for p in params:
        p.grad, at = flat[at:at + p.numel()].view_as(p), at + p.numel()
    return flat, n


def reduce_flat(flat, n, loss, hvd=None, mpi=None):
    """The gradients and the loss averaged over the ranks in one call: through
    horovod's allreduce_ (hvd), else MPI_Allreduce (mpi, a MpiAllreduce)."""
    flat[n] = loss.detach()
    if hvd is not None:
        hvd.allreduce_(flat, op=hvd.Average, name="bench.flat")
    else:
        mpi.sum_(flat)
        flat.mul_(1.0 / mpi.size)


class MpiAllreduce:
    """MPI_Allreduce (float32 sum, in place, MPI_COMM_WORLD) through ctypes:
    Open MPI's handles are addresses of its predefined objects, MPICH's
    fixed integers."""

    def __init__(self):
        import ctypes
        import ctypes.util
        # the launcher's MPI (Debian installs both): Open MPI's mpirun sets OMPI_*, MPICH's Hydra PMI_*
        names = ["libmpi.so.40"] if "OMPI_COMM_WORLD_SIZE" in os.environ else ["libmpich.so.12", "libmpi.so.12"]
        for name in names + [ctypes.util.find_library("mpi")]:
            try:
                self.lib = lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        else:
            raise SystemExit("--flat mpi: no MPI library found (tried %s)" % ", ".join(names))
        lib.MPI_Init(None, None)
        if hasattr(lib, "ompi_mpi_comm_world"):
            at = lambda sym: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, sym)))
            self.comm, self.float, self.sum = at("ompi_mpi_comm_world"), at("ompi_mpi_float"), at("ompi_mpi_op_sum")
            self.in_place, handle = ctypes.c_void_p(1), ctypes.c_void_p
        else:  # MPICH: MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM; MPI_IN_PLACE is (void *) -1
            self.comm, self.float, self.sum = 0x44000000, 0x4c00040a, 0x58000003
            self.in_place, handle = ctypes.c_void_p(-1), ctypes.c_int
        lib.MPI_Allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, handle, handle, handle]
        lib.MPI_Comm_rank.argtypes = lib.MPI_Comm_size.argtypes = [handle, ctypes.POINTER(ctypes.c_int)]
        r, n = ctypes.c_int(), ctypes.c_int()
        lib.MPI_Comm_rank(self.comm, ctypes.byref(r))
        lib.MPI_Comm_size(self.comm, ctypes.byref(n))
        self.rank, self.size = r.value, n.value

    def sum_(self, t):
        if self.lib.MPI_Allreduce(self.in_place, t.data_ptr(), t.numel(), self.float, self.sum, self.comm):
            raise SystemExit("MPI_Allreduce failed")
