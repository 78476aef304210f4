/* What the GPU path's files share (built only with the CUDA headers; a
 * build without them compiles gpu_stubs.c instead, picked by Makefile.am).
 * The files in their one-way order: each uses only the files listed before
 * it, never one after it (tests/unit/layers.sh checks, from the objects'
 * symbols, that no two of them use each other in a circle).  The sections
 * below follow the same order.
 *
 *   gpu_load.c        the CUDA runtime resolved at run time (the table),
 *                     its error messages, the facts every file reads
 *   gpu_device.c      this rank's GPU: the engine thread's context and
 *                     stream, whether two ranks share a GPU
 *   gpu_events.c      the event pool, "ready" and "done" events
 *   gpu_fusion.c      the device fusion buffer and its copy kernel
 *   backend_staged.c  hvd_backend_staged: MPI through pinned host memory
 *   backend_nccl.c    hvd_backend_nccl (backend_nccl_none.c without nccl.h)
 *   gpu.c             the engine side: ordering, fusion, a device backend,
 *                     picking the backend, hvd_gpu_describe */
#ifndef HVD_GPU_INTERNAL_H
#define HVD_GPU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <pthread.h>

#include "../../base/check.h"
#include "gpu.h"

/* ---- gpu_load.c: the runtime's functions, resolved once, and the shared facts ---- */
#define HVD_CUDART_FUNCS(X)                                                                     \
  X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaFree) X(cudaMalloc)            \
  X(cudaHostAlloc) X(cudaFreeHost) X(cudaStreamCreateWithPriority)                             \
  X(cudaDeviceGetStreamPriorityRange) X(cudaStreamDestroy) X(cudaEventCreateWithFlags)         \
  X(cudaEventDestroy) X(cudaEventRecord) X(cudaStreamWaitEvent) X(cudaMemcpyAsync)             \
  X(cudaMemcpy) X(cudaStreamSynchronize) X(cudaGetErrorString) X(cudaPointerGetAttributes)     \
  X(cudaStreamIsCapturing) X(cudaRuntimeGetVersion) X(cudaDeviceGetPCIBusId) X(cudaGetLastError) \
  X(cudaEventCreate) X(cudaEventElapsedTime) X(cudaEventSynchronize)
#define HVD_CUDART_DECLARE(f) extern __typeof__(f) *p_##f;
HVD_CUDART_FUNCS(HVD_CUDART_DECLARE)

/* The runtime's text for an error code. */
const char *hvd_cuda_msg(cudaError_t rc);
#define HVD_CHECK_CUDA(call, what) HVD_CHECK_CODE_(cudaError_t, call, cudaSuccess, hvd_cuda_msg, what)
#define HVD_CHECK_CUDA_GOTO(call, what, label) \
  HVD_CHECK_CODE_GOTO_(cudaError_t, call, cudaSuccess, hvd_cuda_msg, what, label)

/* The facts every file reads.  `mu` guards `device` (set by the first
 * submission, any thread) and the event pool; the rest is set at the
 * engine's start or on the engine thread. */
typedef struct {
  pthread_mutex_t mu;
  int device;              /* this rank's GPU: the first one a submission used; -1 before */
  int rank, size, compression;
  char cudart_path[512];
  int runtime_version;
  cudaStream_t stream;     /* the engine's stream (engine thread; valid once `engine_ready`) */
  int engine_ready;
} hvd_gpu_shared;
extern hvd_gpu_shared hvd_gpu;

/* ---- gpu_device.c ---- */
/* The engine thread's CUDA context and stream, made once. */
int hvd_gpu_engine_setup(char *err, size_t errlen);

/* Collective over comm: 1 when two ranks use the same GPU (the same PCI bus
 * id on the same host), described in `who` ("ranks 0 and 1 share GPU ...
 * on HOST"); 0 when every rank has its own; -1 with the reason. */
int hvd_gpu_sharing(MPI_Comm comm, char *who, size_t wholen, char *err, size_t errlen);

/* ---- gpu_events.c ---- */
struct hvd_gpu_event {
  cudaEvent_t ev;
  int refs;
  unsigned long gen;   /* bumped each time the event is taken from the pool (one record per taking) */
  hvd_gpu_event *next; /* free list */
  /* a ready event's recording: the submitting thread (the address of a
   * thread-local), the stream, and its number among all recordings: a later
   * recording by the same thread on the same stream covers it */
  const void *by;
  void *stream;
  unsigned long seq;
};
/* An event from the pool (or a new one, on the caller's current device),
 * holding one reference. */
cudaError_t hvd_gpu_event_new(hvd_gpu_event **out);

/* ---- gpu_fusion.c (engine thread) ---- */
/* 1 when nvcc built the copy kernel into this library. */
int hvd_gpu_has_kernels(void);
/* Loads the copy kernel once; 1 when it can be used, else 0 with the reason
 * in hvd_gpu_fusion_why(). */
int hvd_gpu_kernels(void);
const char *hvd_gpu_fusion_why(void);
/* Grows a device (pinned 0) or pinned host (pinned 1) buffer to `need`
 * bytes, waiting for the engine stream first when it replaces one. */
int hvd_gpu_ensure(char **buf, size_t *cap, size_t need, int pinned, char *err, size_t errlen);
/* Queues a copy src -> dst of count elements (cast src_dt -> dst_dt,
 * divided by divisor) on the engine stream: batched into one kernel per
 * HVD_GPU_DESCS moves with the kernel, else one cudaMemcpyAsync (no cast,
 * no division).  hvd_gpu_moves_flush launches what is queued. */
typedef struct hvd_gpu_moves hvd_gpu_moves;
hvd_gpu_moves *hvd_gpu_moves_begin(hvd_dtype_t src_dt, hvd_dtype_t dst_dt);
int hvd_gpu_move(hvd_gpu_moves *m, const void *src, void *dst, size_t count, int divisor, char *err, size_t errlen);
int hvd_gpu_moves_flush(hvd_gpu_moves *m, char *err, size_t errlen);
/* The device fusion buffer (engine thread; freed at the engine's end). */
char *hvd_gpu_fusion_buffer(size_t bytes, char *err, size_t errlen);
void hvd_gpu_fusion_free(void);
/* Each tensor's region in the fusion buffer starts 16-byte aligned. */
#define HVD_GPU_ALIGN(x) (((x) + 15) & ~(size_t)15)

/* ---- backend_nccl.c: the NCCL library, found at run time ---- */
/* Its version (0: not found) and path, for hvd_gpu_describe. */
int hvd_nccl_probe(char *path, size_t pathlen);

#endif
