/* A stand-in libnccl.so.2 for the ranks of one host, beside
 * tests/gpu/fake_device.c (whose device memory is host memory): a
 * communicator is a shared-memory segment named by the unique id, with one
 * slot per rank; an allreduce copies this rank's data into its slot, meets
 * the others, reduces every slot into the result, and meets them again.
 * Everything is done at once in the caller's thread.  A wait that finds a
 * member's process gone returns ncclRemoteError, as NCCL's network
 * transport reports a peer that closed; ncclCommAbort leaves at once.
 * Reports version 2.28.0 (so ncclAvg is used); float16/bfloat16 refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOT (4u << 20) /* bytes per rank per round (larger operations go in pieces) */
#define WAIT_S 60       /* a member that never comes: an error, not a hang */

typedef struct {
  volatile int arrived, generation;
  volatile int pids[];
} header;

struct ncclComm {
  int rank, size;
  header *h;
  char *slots;
  size_t bytes;
};

ncclResult_t ncclGetVersion(int *v) { return *v = 22800, ncclSuccess; }

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclRemoteError: return "remote process exited or there was a network error (fake NCCL: a member is gone)";
  case ncclInvalidArgument: return "invalid argument (fake NCCL)";
  default: return "fake NCCL error";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int n;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/hvdfakenccl-%d-%d-%ld", (int)getpid(), n++, (long)ts.tv_nsec);
  return ncclSuccess;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int someone_gone(const struct ncclComm *c) {
  for (int r = 0; r < c->size; r++) {
    int pid = c->h->pids[r];
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return 1;
  }
  return 0;
}

/* every member here: a barrier over the segment (ncclRemoteError when a member is gone) */
static ncclResult_t meet(struct ncclComm *c) {
  int gen = __atomic_load_n(&c->h->generation, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&c->h->arrived, 1, __ATOMIC_ACQ_REL) == c->size) {
    __atomic_store_n(&c->h->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->h->generation, 1, __ATOMIC_RELEASE);
    return ncclSuccess;
  }
  double t0 = now_s();
  for (unsigned k = 0; __atomic_load_n(&c->h->generation, __ATOMIC_ACQUIRE) == gen; k++) {
    if (k % 64 == 0) {
      if (someone_gone(c) || now_s() - t0 > WAIT_S) return ncclRemoteError;
      usleep(50);
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  size_t head = (sizeof(header) + sizeof(int) * (size_t)nranks + 63) / 64 * 64;
  c->bytes = head + (size_t)SLOT * (size_t)nranks;
  int fd = shm_open(id.internal, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->bytes) != 0) return free(c), ncclSystemError;
  c->h = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->h == MAP_FAILED) return free(c), ncclSystemError;
  c->slots = (char *)c->h + head;
  c->rank = rank, c->size = nranks;
  __atomic_store_n(&c->h->pids[rank], (int)getpid(), __ATOMIC_RELEASE);
  ncclResult_t r = meet(c);
  shm_unlink(id.internal); /* every member has it mapped (or one is gone) */
  if (r != ncclSuccess) return munmap(c->h, c->bytes), free(c), r;
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c) munmap(c->h, c->bytes), free(c);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) { return (void)c, *e = ncclSuccess, ncclSuccess; }

static size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

#define REDUCE(T, OUT)                                                                          \
  do {                                                                                       \
    T *dst = (T *)(OUT);                                                                     \
    for (size_t i = 0; i < n; i++) {                                                         \
      T v = ((const T *)(c->slots))[i];                                                      \
      for (int r = 1; r < c->size; r++) {                                                    \
        T x = ((const T *)(c->slots + (size_t)r * SLOT))[i];                                 \
        v = op == ncclProd ? v * x : op == ncclMin ? (x < v ? x : v) : op == ncclMax ? (x > v ? x : v) : v + x; \
      }                                                                                      \
      dst[i] = op == ncclAvg ? (T)(v / (T)c->size) : v;                                        \
    }                                                                                        \
  } while (0)

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  (void)s;
  size_t es = type_size(dt);
  if (!es || !c) return ncclInvalidArgument;
  for (size_t done = 0; done < count;) {
    size_t n = count - done < SLOT / es ? count - done : SLOT / es;
    memcpy(c->slots + (size_t)c->rank * SLOT, (const char *)in + done * es, n * es);
    ncclResult_t r = meet(c);
    if (r != ncclSuccess) return r;
    char *o = (char *)out + done * es;
    switch (dt) {
    case ncclInt8: REDUCE(int8_t, o); break;
    case ncclUint8: REDUCE(uint8_t, o); break;
    case ncclInt32: REDUCE(int32_t, o); break;
    case ncclUint32: REDUCE(uint32_t, o); break;
    case ncclInt64: REDUCE(int64_t, o); break;
    case ncclUint64: REDUCE(uint64_t, o); break;
    case ncclFloat32: REDUCE(float, o); break;
    default: REDUCE(double, o); break;
    }
    if ((r = meet(c)) != ncclSuccess) return r; /* every slot read before the next piece */
    done += n;
  }
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *in, void *out, size_t count, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t s) {
  (void)s;
  size_t es = type_size(dt);
  if (!es || !c || root < 0 || root >= c->size) return ncclInvalidArgument;
  for (size_t done = 0; done < count * es;) {
    size_t n = count * es - done < SLOT ? count * es - done : SLOT;
    if (c->rank == root) memcpy(c->slots, (const char *)in + done, n);
    ncclResult_t r = meet(c);
    if (r != ncclSuccess) return r;
    memmove((char *)out + done, c->slots, n);
    if ((r = meet(c)) != ncclSuccess) return r;
    done += n;
  }
  return ncclSuccess;
}
