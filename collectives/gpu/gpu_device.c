/* The GPU path: this rank's GPU as the engine uses it.  The facts set at
 * the engine's start (rank, size, compression), the engine thread's CUDA
 * context and stream (made once, on the GPU the first submission used),
 * and whether two ranks share a GPU (which rules out NCCL).  Above the
 * runtime table (gpu_load.c); used by the files above it (gpu_internal.h
 * lists the order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../transports/backend_mpi.h"
#include "gpu_internal.h"

void hvd_gpu_configure(int rank, int size, int compression) {
  hvd_gpu.rank = rank;
  hvd_gpu.size = size;
  hvd_gpu.compression = compression;
}

void hvd_gpu_members_changed(const hvd_backend *b, int rank, int size) {
  if (b && b->reset) b->reset();
  hvd_gpu.rank = rank;
  hvd_gpu.size = size;
}

int hvd_gpu_engine_setup(char *err, size_t errlen) {
  if (hvd_gpu.engine_ready) return 0;
  if (hvd_gpu_ready(err, errlen) != 0) return -1;
  pthread_mutex_lock(&hvd_gpu.mu);
  if (hvd_gpu.device < 0) hvd_gpu.device = 0; /* a joined rank that never submitted: its pinned GPU */
  int dev = hvd_gpu.device;
  pthread_mutex_unlock(&hvd_gpu.mu);
  char what[64];
  snprintf(what, sizeof what, "setting up GPU %d for the engine", dev);
  HVD_CHECK_CUDA(p_cudaSetDevice(dev), what);
  HVD_CHECK_CUDA(p_cudaFree(NULL), what); /* make the primary context current on this thread */
  int lo = 0, hi = 0;
  HVD_CHECK_CUDA(p_cudaDeviceGetStreamPriorityRange(&lo, &hi), what);
  HVD_CHECK_CUDA(p_cudaStreamCreateWithPriority(&hvd_gpu.stream, cudaStreamNonBlocking, hi), what);
  hvd_gpu.engine_ready = 1;
  return 0;
}

int hvd_gpu_sharing(MPI_Comm comm, char *who, size_t wholen, char *err, size_t errlen) {
  static int known = -1; /* the answer, once asked (every rank asks at the same points) */
  static char said[256];
  if (known >= 0) {
    snprintf(who, wholen, "%s", said);
    return known;
  }
  if (hvd_gpu_engine_setup(err, errlen) != 0) return -1;
  struct {
    char host[64];
    char bus[32];
  } me = {{0}, {0}}, *all = calloc((size_t)hvd_gpu.size, sizeof me);
  HVD_CHECK(all, "out of memory (GPU placement)");
  gethostname(me.host, sizeof me.host - 1);
  p_cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, hvd_gpu.device);
  int rc = MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, comm), shared = 0;
  for (int a = 0; a < hvd_gpu.size && rc == MPI_SUCCESS && !shared; a++)
    for (int b = a + 1; b < hvd_gpu.size && !shared; b++)
      if (!strcmp(all[a].host, all[b].host) && !strcmp(all[a].bus, all[b].bus)) {
        snprintf(who, wholen, "ranks %d and %d share GPU %s on %s", a, b, all[a].bus, all[a].host);
        shared = 1;
      }
  free(all);
  HVD_CHECK_MPI(rc, "MPI_Allgather (where each rank's GPU is)");
  snprintf(said, sizeof said, "%s", shared ? who : "");
  return known = shared;
}
