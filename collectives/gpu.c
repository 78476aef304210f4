/* The GPU path.  See gpu.h.
 *
 * LOADING.  Nothing CUDA is linked.  The runtime is the libcudart the
 * process already loaded (a PyTorch wheel brings its own), found among the
 * loaded objects, else the system's (libcudart.so.13, .12, .11.0, .so);
 * NCCL likewise (libnccl.so.2).  The kernels (gpu_kernels.cu, built by nvcc
 * into a fatbin embedded in the library) are loaded through the driver API
 * into the runtime's primary context.  Without the kernels (a build without
 * nvcc), copies fall back to one cudaMemcpyAsync per tensor and what needs a
 * kernel (compression, an average NCCL cannot do) is refused with the reason.
 *
 * ORDERING.  At submission the caller's thread records a "ready" event on
 * the producing stream.  The engine thread makes its own stream
 * (non-blocking, highest priority) wait on each ready event, gathers the
 * group into the device fusion buffer (one kernel per up to HVD_GPU_DESCS
 * tensors, descriptors passed as kernel parameters), reduces it (NCCL on the
 * engine stream; or MPI: one copy to pinned host memory, the engine thread
 * waits for it, MPI_Allreduce, one copy back), scatters back with the cast
 * and the average folded in, and records a "done" event.  The handle carries
 * that event; hvd_wait makes the submitting stream wait on it.  No host
 * synchronization on the caller's side.
 *
 * THREADS.  `mu` guards the event pool and the one-time loading; everything
 * under "engine thread only" in G is touched by the engine thread alone. */
#define _GNU_SOURCE
#include "gpu.h"

#include "../config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(HVD_HAVE_CUDA_HEADERS) && !defined(HVD_GPU_STUBS) /* HVD_GPU_STUBS: tests/unit/gpu-stubs.sh */

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#ifdef HVD_HAVE_NCCL_HEADERS
#include <nccl.h>
#endif

#include "../base/log.h"
#include "dtype.h"
#include "gpu_desc.h"

#ifdef HVD_HAVE_GPU_KERNELS
extern const unsigned char hvd_gpu_fatbin[];
#endif

/* ------------------------------------------------------------------ symbol tables */

#define CUDART_FUNCS(X)                                                                         \
  X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaFree) X(cudaMalloc)            \
  X(cudaHostAlloc) X(cudaFreeHost) X(cudaStreamCreateWithPriority)                             \
  X(cudaDeviceGetStreamPriorityRange) X(cudaStreamDestroy) X(cudaEventCreateWithFlags)         \
  X(cudaEventDestroy) X(cudaEventRecord) X(cudaStreamWaitEvent) X(cudaMemcpyAsync)             \
  X(cudaMemcpy) X(cudaStreamSynchronize) X(cudaGetErrorString) X(cudaPointerGetAttributes)     \
  X(cudaStreamIsCapturing) X(cudaRuntimeGetVersion) X(cudaDeviceGetPCIBusId) X(cudaGetLastError)             \
  X(cudaEventCreate) X(cudaEventElapsedTime) X(cudaEventSynchronize)

#define DECLARE(f) static __typeof__(f) *p_##f;
CUDART_FUNCS(DECLARE)

#ifdef HVD_HAVE_NCCL_HEADERS
#define NCCL_FUNCS(X)                                                                           \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclAllReduce) X(ncclBroadcast)   \
  X(ncclGetErrorString) X(ncclCommGetAsyncError) X(ncclCommDestroy)
NCCL_FUNCS(DECLARE)
#endif

/* Driver API, for the kernels only (plain C types: no cuda.h macros). */
typedef int (*cu_load_fn)(void **module, const void *image);
typedef int (*cu_getfn_fn)(void **fn, void *module, const char *name);
typedef int (*cu_launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void **params, void **extra);
typedef int (*cu_errstr_fn)(int rc, const char **s);

struct hvd_gpu_event {
  cudaEvent_t ev;
  int refs;
  hvd_gpu_event *next; /* free list */
};

static struct {
  pthread_mutex_t mu;
  int tried, ok;
  char why[512];
  char cudart_path[512], nccl_path[512];
  int runtime_version, nccl_version;
  int device; /* this rank's GPU: the first one a submission used; -1 before */
  hvd_gpu_event *free_events;
  int rank, size, use_nccl, compression;

  /* ---- engine thread only ---- */
  int engine_ready;
  cudaStream_t stream;
  char *fusion;
  size_t fusion_cap;
  char *host;
  size_t host_cap;
  int kernels_tried;
  void *k_move;
  cu_launch_fn cu_launch;
  cu_errstr_fn cu_errstr;
  char kernel_why[256];
#ifdef HVD_HAVE_NCCL_HEADERS
  ncclComm_t nccl;
#endif
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .device = -1};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *cuda_msg(cudaError_t rc) {
  const char *s = p_cudaGetErrorString ? p_cudaGetErrorString(rc) : NULL;
  return s ? s : "unknown CUDA error";
}

/* ------------------------------------------------------------------ loading */

typedef struct {
  const char *prefix;
  char *out;
  size_t n;
} find_ctx;

static int find_loaded(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  find_ctx *c = data;
  const char *base = strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  if (strncmp(base, c->prefix, strlen(c->prefix)) != 0) return 0;
  snprintf(c->out, c->n, "%s", info->dlpi_name);
  return 1;
}

/* The loaded copy of a library (prefix "libcudart.so"), else the first of
 * `names` the dynamic linker finds.  Records the path in `path`. */
static void *open_lib(const char *prefix, const char *const *names, char *path, size_t pathlen) {
  find_ctx c = {prefix, path, pathlen};
  path[0] = 0;
  dl_iterate_phdr(find_loaded, &c);
  if (path[0]) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) return h;
  }
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
      snprintf(path, pathlen, "%s", lm->l_name);
    else
      snprintf(path, pathlen, "%s", names[i]);
    return h;
  }
  return NULL;
}

static int load_runtime(char *err, size_t errlen) {
  static const char *const cudart_names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                             "libcudart.so", NULL};
  void *h = open_lib("libcudart.so", cudart_names, G.cudart_path, sizeof G.cudart_path);
  if (!h)
    return fail(err, errlen, "no CUDA runtime: the program loaded no libcudart and none of libcudart.so.13, .12, "
                "or .11.0 is on the library path (install the CUDA runtime or add its lib directory to "
                "LD_LIBRARY_PATH)");
#define RESOLVE_RT(f)                                                                              \
  if (!(p_##f = (__typeof__(f) *)dlsym(h, #f)))                                                    \
    return fail(err, errlen, "the CUDA runtime %s lacks %s (too old: CUDA 11 or later is needed)", \
                G.cudart_path, #f);
  CUDART_FUNCS(RESOLVE_RT)
  p_cudaRuntimeGetVersion(&G.runtime_version);
  int n = 0;
  cudaError_t rc = p_cudaGetDeviceCount(&n);
  if (rc != cudaSuccess)
    return fail(err, errlen, "CUDA runtime %s found, but no usable GPU: %s", G.cudart_path, cuda_msg(rc));
  if (n == 0) return fail(err, errlen, "CUDA runtime %s found, but it shows no GPU", G.cudart_path);
#ifdef HVD_HAVE_NCCL_HEADERS
  static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};
  void *hn = open_lib("libnccl.so", nccl_names, G.nccl_path, sizeof G.nccl_path);
  if (hn) {
#define RESOLVE_NCCL(f) p_##f = (__typeof__(f) *)dlsym(hn, #f);
    NCCL_FUNCS(RESOLVE_NCCL)
    if (p_ncclGetVersion) p_ncclGetVersion(&G.nccl_version);
    if (!p_ncclCommInitRank || !p_ncclAllReduce || !p_ncclGetUniqueId) G.nccl_version = 0;
  }
#endif
  return 0;
}

int hvd_gpu_ready(char *err, size_t errlen) {
  pthread_mutex_lock(&G.mu);
  if (!G.tried) {
    G.tried = 1;
    G.ok = load_runtime(G.why, sizeof G.why) == 0;
  }
  int ok = G.ok;
  if (!ok) snprintf(err, errlen, "%s", G.why);
  pthread_mutex_unlock(&G.mu);
  return ok ? 0 : -1;
}

void hvd_gpu_configure(int rank, int size, int use_nccl, int compression) {
  G.rank = rank;
  G.size = size;
  G.use_nccl = use_nccl;
  G.compression = compression;
}

int hvd_gpu_pointer_device(const void *ptr) {
  char err[8];
  if (!ptr || hvd_gpu_ready(err, sizeof err) != 0) return -1;
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (p_cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    p_cudaGetLastError(); /* clear the sticky-free error state of this call */
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

void hvd_gpu_describe(char *out, size_t n) {
  char err[512];
  if (hvd_gpu_ready(err, sizeof err) != 0) {
    snprintf(out, n, "%s", err);
    return;
  }
  int kernels = 0;
#ifdef HVD_HAVE_GPU_KERNELS
  kernels = 1;
#endif
  char nccl[600] = "NCCL not found";
  if (G.nccl_version) snprintf(nccl, sizeof nccl, "NCCL %d (%s)", G.nccl_version, G.nccl_path);
  snprintf(out, n, "CUDA runtime %d.%d (%s); %s; device kernel %s", G.runtime_version / 1000,
           (G.runtime_version % 1000) / 10, G.cudart_path, nccl, kernels ? "built in" : "not built (no nvcc)");
}

/* ------------------------------------------------------------------ events */

/* An event from the pool (or a new one, created on the caller's current
 * device), holding one reference. */
static cudaError_t event_new(hvd_gpu_event **out) {
  pthread_mutex_lock(&G.mu);
  hvd_gpu_event *e = G.free_events;
  if (e) G.free_events = e->next;
  pthread_mutex_unlock(&G.mu);
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    cudaError_t rc = p_cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
      free(e);
      return rc;
    }
  }
  e->refs = 1;
  e->next = NULL;
  *out = e;
  return cudaSuccess;
}

void hvd_gpu_event_hold(hvd_gpu_event *ev, int n) {
  if (ev) __atomic_add_fetch(&ev->refs, n, __ATOMIC_RELAXED);
}

void hvd_gpu_event_put(hvd_gpu_event *ev) {
  if (!ev || __atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&G.mu); /* recording it again later is safe: waits already issued keep their point */
  ev->next = G.free_events;
  G.free_events = ev;
  pthread_mutex_unlock(&G.mu);
}

void hvd_gpu_consume(hvd_gpu_event *ev, void *stream) {
  if (!ev) return;
  cudaError_t rc = p_cudaStreamWaitEvent((cudaStream_t)stream, ev->ev, 0);
  if (rc != cudaSuccess) HVD_FATAL("cudaStreamWaitEvent (results to the framework's stream) failed: %s", cuda_msg(rc));
  hvd_gpu_event_put(ev);
}

int hvd_gpu_mark_ready(int device, void *stream, hvd_gpu_event **ev, char *err, size_t errlen) {
  *ev = NULL;
  if (hvd_gpu_ready(err, errlen) != 0) return -1;
  pthread_mutex_lock(&G.mu);
  if (G.device < 0) G.device = device;
  int mine = G.device;
  pthread_mutex_unlock(&G.mu);
  if (device != mine)
    return fail(err, errlen, "the buffer is on GPU %d, but this rank's GPU is %d (the first one used): hvdshim "
                "handles one GPU per rank", device, mine);
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (p_cudaStreamIsCapturing((cudaStream_t)stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
    return fail(err, errlen, "the stream is being captured into a CUDA graph; hvdshim cannot take part in graph "
                "capture (run the step outside the graph)");
  int cur = -1;
  p_cudaGetDevice(&cur);
  if (cur != device) p_cudaSetDevice(device);
  cudaError_t rc = event_new(ev);
  if (rc == cudaSuccess) rc = p_cudaEventRecord((*ev)->ev, (cudaStream_t)stream);
  if (cur != device && cur >= 0) p_cudaSetDevice(cur);
  if (rc != cudaSuccess) {
    hvd_gpu_event_put(*ev);
    *ev = NULL;
    return fail(err, errlen, "cudaEventRecord on the producing stream failed: %s", cuda_msg(rc));
  }
  return 0;
}

/* ------------------------------------------------------------------ engine side */

static int engine_setup(char *err, size_t errlen) {
  if (G.engine_ready) return 0;
  if (hvd_gpu_ready(err, errlen) != 0) return -1;
  pthread_mutex_lock(&G.mu);
  if (G.device < 0) G.device = 0; /* a joined rank that never submitted: its pinned GPU */
  int dev = G.device;
  pthread_mutex_unlock(&G.mu);
  cudaError_t rc = p_cudaSetDevice(dev);
  if (rc == cudaSuccess) rc = p_cudaFree(NULL); /* make the primary context current on this thread */
  int lo = 0, hi = 0;
  if (rc == cudaSuccess) rc = p_cudaDeviceGetStreamPriorityRange(&lo, &hi);
  if (rc == cudaSuccess) rc = p_cudaStreamCreateWithPriority(&G.stream, cudaStreamNonBlocking, hi);
  if (rc != cudaSuccess) return fail(err, errlen, "setting up GPU %d for the engine: %s", dev, cuda_msg(rc));
  G.engine_ready = 1;
  return 0;
}

static void load_kernels(void) {
  if (G.kernels_tried) return;
  G.kernels_tried = 1;
#ifdef HVD_HAVE_GPU_KERNELS
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(G.kernel_why, sizeof G.kernel_why, "the CUDA driver (libcuda.so.1) cannot be opened");
    return;
  }
  cu_load_fn load = (cu_load_fn)dlsym(h, "cuModuleLoadData");
  cu_getfn_fn getfn = (cu_getfn_fn)dlsym(h, "cuModuleGetFunction");
  G.cu_launch = (cu_launch_fn)dlsym(h, "cuLaunchKernel");
  G.cu_errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
  void *mod = NULL;
  int rc = load && getfn && G.cu_launch ? load(&mod, hvd_gpu_fatbin) : -1;
  if (rc == 0) rc = getfn(&G.k_move, mod, "hvd_move");
  if (rc != 0) {
    const char *s = NULL;
    if (G.cu_errstr) G.cu_errstr(rc, &s);
    snprintf(G.kernel_why, sizeof G.kernel_why, "loading the device kernels failed: %s", s ? s : "driver API missing");
    G.k_move = NULL;
    HVD_WARN("%s; falling back to one copy per tensor", G.kernel_why);
  }
#else
  snprintf(G.kernel_why, sizeof G.kernel_why, "this build has no device kernels (configure found no nvcc)");
#endif
}

/* One launch per up to HVD_GPU_DESCS moves (src -> dst, cast, divide). */
static int launch_moves(hvd_gpu_move_args *a, char *err, size_t errlen) {
  if (a->n == 0) return 0;
  unsigned long long most = 0;
  for (int i = 0; i < a->n; i++)
    if (a->d[i].count > most) most = a->d[i].count;
  unsigned blocks = (unsigned)(most / (HVD_GPU_THREADS * 8) + 1);
  if (blocks > 256) blocks = 256;
  void *params[] = {a};
  int rc = G.cu_launch(G.k_move, blocks, (unsigned)a->n, 1, HVD_GPU_THREADS, 1, 1, 0, G.stream, params, NULL);
  a->n = 0;
  if (rc != 0) {
    const char *s = NULL;
    if (G.cu_errstr) G.cu_errstr(rc, &s);
    return fail(err, errlen, "launching the fusion copy kernel failed: %s", s ? s : "unknown driver error");
  }
  return 0;
}

static int add_move(hvd_gpu_move_args *a, const void *src, void *dst, size_t count, int divisor, char *err,
                    size_t errlen) {
  if (a->n == HVD_GPU_DESCS && launch_moves(a, err, errlen) != 0) return -1;
  hvd_gpu_desc *d = &a->d[a->n++];
  d->src = src;
  d->dst = dst;
  d->count = count;
  d->divisor = divisor;
  d->inv = 1.0f / (float)divisor;
  return 0;
}

static int ensure(char **buf, size_t *cap, size_t need, int pinned, char *err, size_t errlen) {
  if (need <= *cap) return 0;
  if (*buf) {
    p_cudaStreamSynchronize(G.stream); /* the old buffer may still be in use */
    pinned ? p_cudaFreeHost(*buf) : p_cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
  }
  cudaError_t rc = pinned ? p_cudaHostAlloc((void **)buf, need, cudaHostAllocPortable) : p_cudaMalloc((void **)buf, need);
  if (rc != cudaSuccess)
    return fail(err, errlen, "allocating a %s buffer of %zu bytes failed: %s", pinned ? "pinned host" : "device fusion",
                need, cuda_msg(rc));
  *cap = need;
  return 0;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

#ifdef HVD_HAVE_NCCL_HEADERS
static int nccl_type(hvd_dtype_t dt) {
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

/* First NCCL operation (every rank executes the same response list, so all
 * arrive here together): unique id from rank 0 over MPI, then the
 * communicator.  Ranks sharing a GPU are refused before NCCL sees them. */
static int nccl_setup(MPI_Comm comm, char *err, size_t errlen) {
  if (G.nccl) return 0;
  if (!G.nccl_version)
    return fail(err, errlen, "HVDSHIM_GPU_OPERATIONS=NCCL, but no NCCL library (libnccl.so.2) was found; install "
                "NCCL or set HVDSHIM_GPU_OPERATIONS=MPI");
  struct {
    char host[64];
    char bus[32];
  } me, *all = calloc((size_t)G.size, sizeof me);
  if (!all) return fail(err, errlen, "out of memory (NCCL setup)");
  memset(&me, 0, sizeof me);
  gethostname(me.host, sizeof me.host - 1);
  p_cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, G.device);
  MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, comm);
  for (int a = 0; a < G.size; a++)
    for (int b = a + 1; b < G.size; b++)
      if (!strcmp(all[a].host, all[b].host) && !strcmp(all[a].bus, all[b].bus)) {
        int rc = fail(err, errlen, "ranks %d and %d share GPU %s on %s; NCCL needs one GPU per rank: set "
                      "HVDSHIM_GPU_OPERATIONS=MPI (or start one rank per GPU)", a, b, all[a].bus, all[a].host);
        free(all);
        return rc;
      }
  free(all);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (G.rank == 0) {
    ncclResult_t r = p_ncclGetUniqueId(&id);
    if (r != ncclSuccess) return fail(err, errlen, "ncclGetUniqueId failed: %s", p_ncclGetErrorString(r));
  }
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  ncclResult_t r = p_ncclCommInitRank(&G.nccl, G.size, id, G.rank);
  if (r != ncclSuccess) {
    G.nccl = NULL;
    return fail(err, errlen, "ncclCommInitRank failed: %s", p_ncclGetErrorString(r));
  }
  HVD_DEBUG("NCCL %d communicator ready on GPU %s", G.nccl_version, me.bus);
  return 0;
}
#endif

int hvd_gpu_check_async(char *err, size_t errlen) {
#ifdef HVD_HAVE_NCCL_HEADERS
  if (G.nccl && p_ncclCommGetAsyncError) {
    ncclResult_t a = ncclSuccess;
    if (p_ncclCommGetAsyncError(G.nccl, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
      return fail(err, errlen, "NCCL reported an asynchronous error: %s", p_ncclGetErrorString(a));
  }
#endif
  (void)err, (void)errlen;
  return 0;
}

static int wait_ready(const hvd_gpu_item *it, size_t n, char *err, size_t errlen) {
  for (size_t k = 0; k < n; k++) {
    if (!it[k].ready) continue;
    cudaError_t rc = p_cudaStreamWaitEvent(G.stream, it[k].ready->ev, 0);
    if (rc != cudaSuccess) return fail(err, errlen, "cudaStreamWaitEvent (engine after producer) failed: %s", cuda_msg(rc));
  }
  return 0;
}

static int record_done(hvd_gpu_event **done, char *err, size_t errlen) {
  cudaError_t rc = event_new(done);
  if (rc == cudaSuccess) rc = p_cudaEventRecord((*done)->ev, G.stream);
  if (rc != cudaSuccess) return fail(err, errlen, "cudaEventRecord on the engine stream failed: %s", cuda_msg(rc));
  return 0;
}

/* MPI through pinned host memory, first half: the device bytes to the
 * pinned buffer, and wait for them. */
static int stage_out(const char *dev, size_t bytes, char *err, size_t errlen) {
  if (ensure(&G.host, &G.host_cap, bytes ? bytes : 1, 1, err, errlen) != 0) return -1;
  cudaError_t rc = p_cudaMemcpyAsync(G.host, dev, bytes, cudaMemcpyDeviceToHost, G.stream);
  if (rc == cudaSuccess) rc = p_cudaStreamSynchronize(G.stream);
  if (rc != cudaSuccess) return fail(err, errlen, "copying to pinned host memory failed: %s", cuda_msg(rc));
  return 0;
}

/* Second half: back to the device (asynchronous: the engine stream orders
 * the next use of the pinned buffer after it). */
static int stage_in(char *dev, size_t bytes, char *err, size_t errlen) {
  cudaError_t rc = p_cudaMemcpyAsync(dev, G.host, bytes, cudaMemcpyHostToDevice, G.stream);
  if (rc != cudaSuccess) return fail(err, errlen, "copying back from pinned host memory failed: %s", cuda_msg(rc));
  return 0;
}

#define ALIGN16(x) (((x) + 15) & ~(size_t)15)

int hvd_gpu_allreduce(const hvd_gpu_item *it, size_t n, hvd_dtype_t dt, hvd_op_t op, int all_avg_over_size,
                      MPI_Comm comm, size_t chunk, hvd_gpu_event **done, hvd_phase_times *t, char *err,
                      size_t errlen) {
  *done = NULL;
  memset(t, 0, sizeof *t);
  if (engine_setup(err, errlen) != 0) return -1;
  load_kernels();
  hvd_dtype_t wdt = dt; /* the type on the wire */
  if (dt == HVD_FLOAT32 && G.compression == 1) wdt = HVD_FLOAT16;
  if (dt == HVD_FLOAT32 && G.compression == 2) wdt = HVD_BFLOAT16;
  size_t es = hvd_dtype_size(dt), ws = hvd_dtype_size(wdt);
  int scaled = 0;
  for (size_t k = 0; k < n; k++) scaled |= it[k].divisor != 1;
  /* Who divides an average: NCCL itself (ncclAvg, when every tensor
   * averages over all ranks), the host (MPI path without kernels), or the
   * copy-out kernel. */
  int nccl_avg = 0;
#ifdef HVD_HAVE_NCCL_HEADERS
  nccl_avg = G.use_nccl && scaled && all_avg_over_size && G.nccl_version >= 21000 && dt <= HVD_BFLOAT16;
#else
  (void)all_avg_over_size;
#endif
  int host_divides = scaled && !G.use_nccl && !G.k_move;
  int dev_divides = scaled && !nccl_avg && !host_divides;
  int in_place = n == 1 && wdt == dt;
  if (!G.k_move && (wdt != dt || dev_divides))
    return fail(err, errlen, "%s needs the device kernels: %s",
                wdt != dt ? "HVDSHIM_COMPRESSION" : "averaging over the ranks still running", G.kernel_why);
  if (wait_ready(it, n, err, errlen) != 0) return -1;
  double t0 = now_us();
  char *buf;
  size_t count;
  hvd_gpu_move_args args;
  args.n = 0;
  if (in_place) {
    buf = it[0].ptr;
    count = it[0].count;
  } else {
    size_t total = 0;
    for (size_t k = 0; k < n; k++) total += ALIGN16(it[k].count * ws);
    if (ensure(&G.fusion, &G.fusion_cap, total, 0, err, errlen) != 0) return -1;
    args.src_dt = (int)dt, args.dst_dt = (int)wdt;
    size_t off = 0;
    for (size_t k = 0; k < n; k++) {
      if (G.k_move) {
        if (add_move(&args, it[k].ptr, G.fusion + off, it[k].count, 1, err, errlen) != 0) return -1;
      } else {
        cudaError_t rc = p_cudaMemcpyAsync(G.fusion + off, it[k].ptr, it[k].count * es, cudaMemcpyDeviceToDevice, G.stream);
        if (rc != cudaSuccess) return fail(err, errlen, "copy into the fusion buffer failed: %s", cuda_msg(rc));
      }
      off += ALIGN16(it[k].count * ws);
    }
    if (launch_moves(&args, err, errlen) != 0) return -1;
    buf = G.fusion;
    count = total / ws; /* the padding is reduced too, and never read back */
  }
  double t1 = now_us();
  hvd_op_t rop = op == HVD_AVG ? HVD_SUM : op;
  if (G.use_nccl) {
#ifdef HVD_HAVE_NCCL_HEADERS
    if (nccl_setup(comm, err, errlen) != 0) return -1;
    ncclRedOp_t nop = rop == HVD_MIN    ? ncclMin
                      : rop == HVD_MAX  ? ncclMax
                      : rop == HVD_PROD ? ncclProd
                      : nccl_avg        ? ncclAvg
                                        : ncclSum;
    ncclResult_t r = p_ncclAllReduce(buf, buf, count, (ncclDataType_t)nccl_type(wdt), nop, G.nccl, G.stream);
    if (r != ncclSuccess) return fail(err, errlen, "ncclAllReduce failed: %s", p_ncclGetErrorString(r));
#else
    return fail(err, errlen, "this build has no NCCL headers; set HVDSHIM_GPU_OPERATIONS=MPI");
#endif
  } else {
    if (stage_out(buf, count * ws, err, errlen) != 0) return -1;
    hvd_fuse_entry whole = {G.host, count * ws, in_place && host_divides ? it[0].divisor : 1};
    hvd_phase_times mt;
    int mrc = hvd_mpi_allreduce_group(&whole, 1, wdt, rop, chunk, NULL, comm, &mt);
    if (mrc != MPI_SUCCESS) return fail(err, errlen, "MPI_Allreduce over pinned host memory failed (MPI error %d)", mrc);
    if (host_divides && !in_place)
      for (size_t k = 0, off = 0; k < n; off += ALIGN16(it[k].count * ws), k++)
        hvd_scale_copy(G.host + off, G.host + off, it[k].count, wdt, it[k].divisor);
    if (stage_in(buf, count * ws, err, errlen) != 0) return -1;
  }
  double t2 = now_us();
  if (in_place) {
    args.src_dt = args.dst_dt = (int)dt;
    if (dev_divides && add_move(&args, buf, buf, count, it[0].divisor, err, errlen) != 0) return -1;
  } else {
    size_t off = 0;
    args.src_dt = (int)wdt, args.dst_dt = (int)dt;
    for (size_t k = 0; k < n; k++) {
      if (G.k_move) {
        if (add_move(&args, G.fusion + off, it[k].ptr, it[k].count, dev_divides ? it[k].divisor : 1, err, errlen) != 0)
          return -1;
      } else {
        cudaError_t rc = p_cudaMemcpyAsync(it[k].ptr, G.fusion + off, it[k].count * es, cudaMemcpyDeviceToDevice, G.stream);
        if (rc != cudaSuccess) return fail(err, errlen, "copy out of the fusion buffer failed: %s", cuda_msg(rc));
      }
      off += ALIGN16(it[k].count * ws);
    }
  }
  if (launch_moves(&args, err, errlen) != 0) return -1;
  if (record_done(done, err, errlen) != 0) return -1;
  double t3 = now_us();
  t->copy_in_us = t1 - t0, t->reduce_us = t2 - t1, t->copy_out_us = t3 - t2;
  return 0;
}

int hvd_gpu_broadcast(const hvd_gpu_item *it, hvd_dtype_t dt, int root, MPI_Comm comm, hvd_gpu_event **done,
                      char *err, size_t errlen) {
  *done = NULL;
  if (engine_setup(err, errlen) != 0) return -1;
  if (wait_ready(it, 1, err, errlen) != 0) return -1;
  size_t bytes = it->count * hvd_dtype_size(dt);
  if (G.use_nccl) {
#ifdef HVD_HAVE_NCCL_HEADERS
    if (nccl_setup(comm, err, errlen) != 0) return -1;
    ncclResult_t r = p_ncclBroadcast(it->ptr, it->ptr, bytes, ncclUint8, root, G.nccl, G.stream);
    if (r != ncclSuccess) return fail(err, errlen, "ncclBroadcast failed: %s", p_ncclGetErrorString(r));
#else
    return fail(err, errlen, "this build has no NCCL headers; set HVDSHIM_GPU_OPERATIONS=MPI");
#endif
  } else {
    if (stage_out(it->ptr, bytes, err, errlen) != 0) return -1;
    int mrc = hvd_mpi_broadcast(G.host, bytes, HVD_UINT8, root, comm);
    if (mrc != MPI_SUCCESS) return fail(err, errlen, "MPI_Bcast over pinned host memory failed (MPI error %d)", mrc);
    if (stage_in(it->ptr, bytes, err, errlen) != 0) return -1;
  }
  return record_done(done, err, errlen);
}

void *hvd_gpu_identity(size_t count, hvd_dtype_t dt, hvd_op_t op, char *err, size_t errlen) {
  if (engine_setup(err, errlen) != 0) return NULL;
  size_t bytes = count * hvd_dtype_size(dt);
  void *host = malloc(bytes ? bytes : 1), *dev = NULL;
  if (!host) {
    fail(err, errlen, "out of memory (a joined rank's stand-in)");
    return NULL;
  }
  hvd_fill_identity(host, count, dt, op);
  cudaError_t rc = p_cudaMalloc(&dev, bytes ? bytes : 1);
  if (rc == cudaSuccess) rc = p_cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
  free(host);
  if (rc != cudaSuccess) {
    if (dev) p_cudaFree(dev);
    fail(err, errlen, "a joined rank's GPU stand-in of %zu bytes: %s", bytes, cuda_msg(rc));
    return NULL;
  }
  return dev;
}

int hvd_gpu_bench_copy_in(void *const *ptrs, const size_t *bytes, int n, int iters, double *kernel_gbs,
                          double *memcpy_gbs) {
  char err[512];
  if (engine_setup(err, sizeof err) != 0) {
    fprintf(stderr, "hvd_gpu_bench_copy_in: %s\n", err);
    return -1;
  }
  load_kernels();
  size_t total = 0;
  for (int k = 0; k < n; k++) total += ALIGN16(bytes[k]);
  if (ensure(&G.fusion, &G.fusion_cap, total, 0, err, sizeof err) != 0) return -1;
  cudaEvent_t a, b;
  p_cudaEventCreate(&a);
  p_cudaEventCreate(&b);
  for (int pass = 0; pass < 2; pass++) { /* 0: the engine's copy-in, 1: one D2D cudaMemcpyAsync per tensor */
    if (pass == 0 && !G.k_move) {
      *kernel_gbs = 0;
      continue;
    }
    for (int rep = -1; rep < iters; rep++) { /* rep -1: warm-up */
      if (rep == 0) p_cudaEventRecord(a, G.stream);
      hvd_gpu_move_args args;
      args.n = 0;
      args.src_dt = args.dst_dt = HVD_UINT8;
      size_t off = 0;
      for (int k = 0; k < n; k++) {
        if (pass == 0) add_move(&args, ptrs[k], G.fusion + off, bytes[k], 1, err, sizeof err);
        else p_cudaMemcpyAsync(G.fusion + off, ptrs[k], bytes[k], cudaMemcpyDeviceToDevice, G.stream);
        off += ALIGN16(bytes[k]);
      }
      if (pass == 0 && launch_moves(&args, err, sizeof err) != 0) return -1;
    }
    p_cudaEventRecord(b, G.stream);
    p_cudaEventSynchronize(b);
    float ms = 0;
    p_cudaEventElapsedTime(&ms, a, b);
    double gbs = ms > 0 ? (double)total * iters / (ms * 1e-3) / 1e9 : 0;
    *(pass == 0 ? kernel_gbs : memcpy_gbs) = gbs;
  }
  p_cudaEventDestroy(a);
  p_cudaEventDestroy(b);
  return 0;
}

void hvd_gpu_free(void *p) {
  if (p && p_cudaFree) p_cudaFree(p); /* synchronizes the device: the engine stream is done with it */
}

void hvd_gpu_engine_stop(void) {
  if (!G.engine_ready) return;
  p_cudaStreamSynchronize(G.stream);
#ifdef HVD_HAVE_NCCL_HEADERS
  if (G.nccl && p_ncclCommDestroy) p_ncclCommDestroy(G.nccl);
  G.nccl = NULL;
#endif
  if (G.fusion) p_cudaFree(G.fusion);
  if (G.host) p_cudaFreeHost(G.host);
  G.fusion = G.host = NULL;
  G.fusion_cap = G.host_cap = 0;
  p_cudaStreamDestroy(G.stream);
  G.engine_ready = 0;
}

#else /* no CUDA headers: the same interface, refusing device buffers */

static const char no_cuda[] = "this build of hvdshim has no GPU path (configure found no CUDA headers; rebuild "
                              "with --with-cuda=DIR)";

int hvd_gpu_ready(char *err, size_t errlen) {
  snprintf(err, errlen, "%s", no_cuda);
  return -1;
}
int hvd_gpu_pointer_device(const void *ptr) {
  (void)ptr;
  return -1;
}
int hvd_gpu_mark_ready(int device, void *stream, hvd_gpu_event **ev, char *err, size_t errlen) {
  (void)device, (void)stream;
  *ev = NULL;
  return hvd_gpu_ready(err, errlen);
}
void hvd_gpu_event_hold(hvd_gpu_event *ev, int n) { (void)ev, (void)n; }
void hvd_gpu_event_put(hvd_gpu_event *ev) { (void)ev; }
void hvd_gpu_consume(hvd_gpu_event *ev, void *stream) { (void)ev, (void)stream; }
int hvd_gpu_allreduce(const hvd_gpu_item *it, size_t n, hvd_dtype_t dtype, hvd_op_t op, int all_avg_over_size,
                      MPI_Comm comm, size_t chunk, hvd_gpu_event **done, hvd_phase_times *t, char *err,
                      size_t errlen) {
  (void)it, (void)n, (void)dtype, (void)op, (void)all_avg_over_size, (void)comm, (void)chunk, (void)t;
  *done = NULL;
  return hvd_gpu_ready(err, errlen);
}
int hvd_gpu_broadcast(const hvd_gpu_item *it, hvd_dtype_t dtype, int root, MPI_Comm comm, hvd_gpu_event **done,
                      char *err, size_t errlen) {
  (void)it, (void)dtype, (void)root, (void)comm;
  *done = NULL;
  return hvd_gpu_ready(err, errlen);
}
void *hvd_gpu_identity(size_t count, hvd_dtype_t dtype, hvd_op_t op, char *err, size_t errlen) {
  (void)count, (void)dtype, (void)op;
  hvd_gpu_ready(err, errlen);
  return NULL;
}
void hvd_gpu_free(void *p) { (void)p; }
int hvd_gpu_bench_copy_in(void *const *ptrs, const size_t *bytes, int n, int iters, double *kernel_gbs,
                          double *memcpy_gbs) {
  (void)ptrs, (void)bytes, (void)n, (void)iters, (void)kernel_gbs, (void)memcpy_gbs;
  return -1;
}
int hvd_gpu_check_async(char *err, size_t errlen) {
  (void)err, (void)errlen;
  return 0;
}
void hvd_gpu_engine_stop(void) {}
void hvd_gpu_configure(int rank, int size, int use_nccl, int compression) {
  (void)rank, (void)size, (void)use_nccl, (void)compression;
}
void hvd_gpu_describe(char *out, size_t n) { snprintf(out, n, "%s", no_cuda); }

#endif
