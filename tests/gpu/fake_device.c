/* A stand-in libcudart.so.13 whose "device" is host memory, for running the
 * engine's GPU path (the fusion buffer, events, the NCCL backend over
 * tests/gpu/fake_nccl.c) on a machine without a GPU: tests/gpu/fake-nccl.sh.
 * One device; every operation is done at once, in the caller's thread (a
 * stream is a name, an event is always complete).  Built against the real
 * CUDA headers, so the types are the engine's.  Memory from cudaMalloc is
 * remembered, and cudaPointerGetAttributes calls it device memory; the PCI
 * bus id differs per MPI rank (FAKE_GPU_BUS, else the world rank, else the
 * pid), so that ranks do not look as if they shared a GPU. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char *p;
  size_t n;
} blocks[4096];
static int nblocks, current;

static int find(const void *ptr) {
  for (int i = 0; i < nblocks; i++)
    if (blocks[i].p && (const char *)ptr >= blocks[i].p && (const char *)ptr < blocks[i].p + blocks[i].n) return i;
  return -1;
}

cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? (current = d, cudaSuccess) : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int *d) { return *d = current, cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { return *v = 13000, cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t rc) { return rc == cudaSuccess ? "no error" : "fake device error"; }

cudaError_t cudaMalloc(void **p, size_t n) {
  pthread_mutex_lock(&mu);
  int slot = -1;
  for (int i = 0; i < nblocks && slot < 0; i++)
    if (!blocks[i].p) slot = i;
  if (slot < 0 && nblocks < (int)(sizeof blocks / sizeof *blocks)) slot = nblocks++;
  char *m = slot >= 0 ? calloc(1, n ? n : 1) : NULL;
  if (m) blocks[slot].p = m, blocks[slot].n = n ? n : 1;
  pthread_mutex_unlock(&mu);
  *p = m;
  return m ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  pthread_mutex_lock(&mu);
  int i = find(p);
  if (i >= 0) free(blocks[i].p), blocks[i].p = NULL;
  pthread_mutex_unlock(&mu);
  return i >= 0 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) { return free(p), cudaSuccess; }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&mu);
  int dev = find(p) >= 0;
  pthread_mutex_unlock(&mu);
  a->type = dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  a->device = dev ? 0 : -1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d) {
  (void)d;
  const char *v = getenv("FAKE_GPU_BUS");
  if (!v) v = getenv("OMPI_COMM_WORLD_RANK");
  if (!v) v = getenv("PMI_RANK");
  snprintf(bus, (size_t)len, "0000:%02x:00.0", (v ? atoi(v) : (int)getpid()) & 0xff);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
  (void)k;
  memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) {
  (void)s;
  return cudaMemcpy(dst, src, n, k);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *lo, int *hi) { return *lo = 0, *hi = -1, cudaSuccess; }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int prio) {
  (void)flags, (void)prio;
  *s = (cudaStream_t)malloc(1);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { return free(s), cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return (void)s, cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  (void)s;
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
int fake_stream_waits; /* cudaStreamWaitEvent calls, for tests/mpi/engine_test gpu-gather */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  __atomic_add_fetch(&fake_stream_waits, 1, __ATOMIC_RELAXED);
  return (void)s, (void)e, (void)flags, cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return *e = (cudaEvent_t)malloc(1), cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { return (void)flags, cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return free(e), cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return (void)e, (void)s, cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return (void)e, cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return (void)e, cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { return (void)a, (void)b, *ms = 0, cudaSuccess; }
