/* Events that order the engine's work between the framework's streams.  At
 * submission the caller's thread records a "ready" event on the producing
 * stream; the engine stream waits on it; the engine records a "done" event
 * after the results are written, and hvd_wait makes the submitting stream
 * wait on that.  No host synchronization on the caller's side.  Events come
 * from a pool (guarded by hvd_gpu.mu) and carry a reference count: one per
 * waiter.
 *
 * Repeated waits are skipped: the handles of one fused group share its done
 * event, and a stream that already waits on that recording needs no second
 * cudaStreamWaitEvent (each is a driver call under the context's lock, which
 * the engine thread contends for); likewise the ready event that the
 * tensors of one batch share. */
#include <stdlib.h>

#include "../../base/log.h"
#include "gpu_internal.h"

static hvd_gpu_event *free_events;

cudaError_t hvd_gpu_event_new(hvd_gpu_event **out) {
  pthread_mutex_lock(&hvd_gpu.mu);
  hvd_gpu_event *e = free_events;
  if (e) free_events = e->next;
  pthread_mutex_unlock(&hvd_gpu.mu);
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
  e->gen++;
  e->next = NULL;
  *out = e;
  return cudaSuccess;
}

void hvd_gpu_event_hold(hvd_gpu_event *ev, int n) {
  if (ev) __atomic_add_fetch(&ev->refs, n, __ATOMIC_RELAXED);
}

void hvd_gpu_event_put(hvd_gpu_event *ev) {
  if (!ev || __atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&hvd_gpu.mu); /* recording it again later is safe: waits already issued keep their point */
  ev->next = free_events;
  free_events = ev;
  pthread_mutex_unlock(&hvd_gpu.mu);
}

/* Per thread: the recording its last consume made a stream wait on.  The
 * caller holds a reference, so a matching pointer and generation is that
 * same recording (an event back in the pool is taken again with a new one). */
static __thread const hvd_gpu_event *waited_ev;
static __thread unsigned long waited_gen;
static __thread void *waited_stream;

void hvd_gpu_consume(hvd_gpu_event *ev, void *stream) {
  if (!ev) return;
  if (ev != waited_ev || ev->gen != waited_gen || stream != waited_stream) {
    cudaError_t rc = p_cudaStreamWaitEvent((cudaStream_t)stream, ev->ev, 0);
    if (rc != cudaSuccess)
      HVD_FATAL("cudaStreamWaitEvent (results to the framework's stream) failed: %s", hvd_cuda_msg(rc));
    waited_ev = ev, waited_gen = ev->gen, waited_stream = stream;
  }
  hvd_gpu_event_put(ev);
}

/* A ready recording's place: `me`'s address names the recording thread;
 * `recordings` counts them all (a thread made later at the same address
 * records after the first ended, so the count still orders them). */
static __thread char me;
static unsigned long recordings;

int hvd_gpu_mark_ready(int device, void *stream, hvd_gpu_event *share, hvd_gpu_event **ev, char *err, size_t errlen) {
  *ev = NULL;
  if (share) { /* the previous tensor of a batch, same device and stream: its recording covers this one */
    hvd_gpu_event_hold(share, 1);
    *ev = share;
    return 0;
  }
  if (hvd_gpu_ready(err, errlen) != 0) return -1;
  pthread_mutex_lock(&hvd_gpu.mu);
  if (hvd_gpu.device < 0) hvd_gpu.device = device;
  int mine = hvd_gpu.device;
  pthread_mutex_unlock(&hvd_gpu.mu);
  HVD_CHECK(device == mine, "the buffer is on GPU %d, but this rank's GPU is %d (the first one used): hvdshim "
            "handles one GPU per rank", device, mine);
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  HVD_CHECK(p_cudaStreamIsCapturing((cudaStream_t)stream, &cap) != cudaSuccess || cap == cudaStreamCaptureStatusNone,
            "the stream is being captured into a CUDA graph; hvdshim cannot take part in graph capture (run the "
            "step outside the graph)");
  int cur = -1;
  p_cudaGetDevice(&cur);
  if (cur != device) p_cudaSetDevice(device);
  cudaError_t rc = hvd_gpu_event_new(ev);
  if (rc == cudaSuccess) rc = p_cudaEventRecord((*ev)->ev, (cudaStream_t)stream);
  if (cur != device && cur >= 0) p_cudaSetDevice(cur);
  if (rc == cudaSuccess)
    (*ev)->by = &me, (*ev)->stream = stream, (*ev)->seq = __atomic_add_fetch(&recordings, 1, __ATOMIC_RELAXED);
  if (rc != cudaSuccess) {
    hvd_gpu_event_put(*ev);
    *ev = NULL;
  }
  HVD_CHECK_CUDA(rc, "cudaEventRecord on the producing stream");
  return 0;
}
