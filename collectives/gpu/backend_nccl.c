/* hvd_backend_nccl (backend.h): device buffers reduced by NCCL on the
 * engine's stream.  NCCL is found at run time like the CUDA runtime (the
 * loaded libnccl first, else libnccl.so.2); the communicator is made at the
 * first NCCL operation (every rank executes the same list, so all arrive
 * together): ranks sharing a GPU are refused first, then the unique id goes
 * from rank 0 over MPI.  Built only with nccl.h (else backend_nccl_none.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/log.h"
#include "../transports/backend_mpi.h"
#include "../../base/dlload.h"
#include "gpu_internal.h"

#define NCCL_FUNCS(X)                                                                           \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclAllReduce) X(ncclBroadcast)   \
  X(ncclGetErrorString) X(ncclCommGetAsyncError) X(ncclCommDestroy) X(ncclCommAbort)
#define DECLARE(f) static __typeof__(f) *p_##f;
NCCL_FUNCS(DECLARE)

static struct {
  int tried, version;
  char path[512];
  ncclComm_t comm;
} N;

static const char *nccl_msg(ncclResult_t r) {
  const char *s = p_ncclGetErrorString ? p_ncclGetErrorString(r) : NULL;
  return s ? s : "unknown NCCL error";
}
#define HVD_CHECK_NCCL(call, what) HVD_CHECK_CODE_(ncclResult_t, call, ncclSuccess, nccl_msg, what)

int hvd_nccl_probe(char *path, size_t pathlen) {
  if (__atomic_load_n(&N.tried, __ATOMIC_ACQUIRE)) {
    if (path) snprintf(path, pathlen, "%s", N.path);
    return N.version;
  }
  pthread_mutex_lock(&hvd_gpu.mu);
  if (!N.tried) {
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
    void *h = hvd_dl_open("libnccl.so", names, N.path, sizeof N.path);
    if (h) {
#define RESOLVE(f) p_##f = (__typeof__(f) *)dlsym(h, #f);
      NCCL_FUNCS(RESOLVE)
      if (p_ncclGetVersion) p_ncclGetVersion(&N.version);
      if (!p_ncclCommInitRank || !p_ncclAllReduce || !p_ncclGetUniqueId || !p_ncclBroadcast) N.version = 0;
    }
    __atomic_store_n(&N.tried, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&hvd_gpu.mu);
  if (path) snprintf(path, pathlen, "%s", N.path);
  return N.version;
}

static ncclDataType_t nccl_type(hvd_dtype_t dt) {
  switch (dt) {
  case HVD_FLOAT32: return ncclFloat32;
  case HVD_FLOAT64: return ncclFloat64;
  case HVD_FLOAT16: return ncclFloat16;
  case HVD_BFLOAT16: return ncclBfloat16;
  case HVD_INT32: return ncclInt32;
  case HVD_INT64: return ncclInt64;
  case HVD_INT8: return ncclInt8;
  default: return ncclUint8; /* HVD_UINT8; HVD_INT16 is refused at submission (NCCL has none) */
  }
}

static int setup(MPI_Comm comm, char *err, size_t errlen) {
  if (N.comm) return 0;
  HVD_CHECK(hvd_nccl_probe(NULL, 0), "HVDSHIM_GPU_OPERATIONS=NCCL, but no NCCL library (libnccl.so.2) was found; "
            "install NCCL or set HVDSHIM_GPU_OPERATIONS=MPI");
  char who[256] = "";
  int shared = hvd_gpu_sharing(comm, who, sizeof who, err, errlen);
  if (shared < 0) return -1;
  HVD_CHECK(!shared, "%s; NCCL needs one GPU per rank: set HVDSHIM_GPU_OPERATIONS=MPI or auto (or start one rank "
            "per GPU)", who);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (hvd_gpu.rank == 0) HVD_CHECK_NCCL(p_ncclGetUniqueId(&id), "ncclGetUniqueId");
  HVD_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm), "MPI_Bcast (NCCL unique id)");
  ncclResult_t r = p_ncclCommInitRank(&N.comm, hvd_gpu.size, id, hvd_gpu.rank);
  if (r != ncclSuccess) N.comm = NULL;
  HVD_CHECK_NCCL(r, "ncclCommInitRank");
  HVD_DEBUG("NCCL %d communicator ready on GPU %d", N.version, hvd_gpu.device);
  return 0;
}

/* ncclAvg (NCCL 2.10+, floating types) when every entry averages over the
 * whole job. */
static int divides(hvd_dtype_t dt, int all_over_size) {
  return all_over_size && hvd_nccl_probe(NULL, 0) >= 21000 && dt <= HVD_BFLOAT16;
}

static int allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                     hvd_phase_times *t, char *err, size_t errlen) {
  (void)t; /* asynchronous: the reduction is timed as the launch */
  if (n == 0) return 0;
  HVD_CHECK(dt != HVD_INT16, "NCCL has no int16 reduction; set HVDSHIM_GPU_OPERATIONS=MPI or use int32");
  if (setup(c->comm, err, errlen) != 0) return -1;
  char *buf = e[0].ptr;
  size_t bytes = (size_t)(e[n - 1].ptr + e[n - 1].bytes - buf), es = hvd_dtype_size(dt);
  int avg = e[0].divisor != 1;
  ncclRedOp_t nop = op == HVD_MIN ? ncclMin : op == HVD_MAX ? ncclMax : op == HVD_PROD ? ncclProd : avg ? ncclAvg : ncclSum;
  HVD_CHECK_NCCL(p_ncclAllReduce(buf, buf, bytes / es, nccl_type(dt), nop, N.comm, (cudaStream_t)c->stream),
                 "ncclAllReduce");
  return 0;
}

static int broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                     size_t errlen) {
  if (setup(c->comm, err, errlen) != 0) return -1;
  HVD_CHECK_NCCL(p_ncclBroadcast(buf, buf, count * hvd_dtype_size(dt), ncclUint8, root, N.comm,
                                 (cudaStream_t)c->stream), "ncclBroadcast");
  return 0;
}

static int check_async(char *err, size_t errlen) {
  if (!N.comm || !p_ncclCommGetAsyncError) return 0;
  ncclResult_t a = ncclSuccess;
  if (p_ncclCommGetAsyncError(N.comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
    return hvd_fail(err, errlen, "NCCL reported an asynchronous error: %s", nccl_msg(a));
  return 0;
}

static void stop(void) {
  if (N.comm && p_ncclCommDestroy) p_ncclCommDestroy(N.comm);
  N.comm = NULL;
}

/* After a death (HVDSHIM_ELASTIC): ncclCommAbort, not ncclCommDestroy,
 * which would wait for the dead; it also ends this communicator's kernels
 * still on the stream, waiting for a peer that is gone.  The next NCCL
 * operation makes a communicator over the survivors (setup: a new unique id
 * from the new rank 0 over the shrunk MPI communicator). */
static void reset(void) {
  if (!N.comm) return;
  ncclResult_t r = p_ncclCommAbort ? p_ncclCommAbort(N.comm) : p_ncclCommDestroy ? p_ncclCommDestroy(N.comm) : ncclSuccess;
  if (r != ncclSuccess) HVD_WARN("dropping the NCCL communicator of the ranks before the change: %s", nccl_msg(r));
  N.comm = NULL;
}

const hvd_backend hvd_backend_nccl = {
    HVD_BACKEND_NCCL_NAMES,
    .allreduce = allreduce,
    .broadcast = broadcast,
    .divides = divides,
    .check_async = check_async,
    .stop = stop,
    .reset = reset,
};
