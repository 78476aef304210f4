/* CUDA runtime hooks (hooks/cuda_hooks.c): GPU pinning before CUDA starts, and the
 * stream each thread last launched work on. */
#ifndef HVD_HOOKS_CUDA_H
#define HVD_HOOKS_CUDA_H

#include <stddef.h>

/* The CUDA_VISIBLE_DEVICES value for a rank: entry local_rank % n of the
 * user's list (`user`, comma separated, NULL or "" = none), else
 * local_rank % ngpus.  Returns 0 and writes `out`, or -1 when nothing is to
 * be set (no list and no GPU, or a negative local rank).  *shared is set
 * when local_size exceeds the devices to choose from. */
int hvd_pin_pick(const char *user, int ngpus, int local_rank, int local_size, char *out, size_t n, int *shared);
/* GPUs the driver exposes, counted without starting CUDA (the entries of
 * /proc/driver/nvidia/gpus); 0 without an NVIDIA driver. */
int hvd_pin_count_gpus(void);
/* Constructor of an armed rank: apply HVDSHIM_PIN_GPU. */
void hvd_cuda_arm(int local_rank);
/* The stream (cudaStream_t) this thread last launched a kernel, copy or
 * memset on through the CUDA runtime, or NULL (the legacy default stream)
 * if none was seen: the producer of a device buffer handed to a native hook. */
__attribute__((visibility("default"))) void *hvd_cuda_thread_stream(void);
/* Calls made through the runtime hooks on this thread: for tests.  Both are
 * exported (not in hvdshim.h) so tests/gpu/hook_probe can find them. */
__attribute__((visibility("default"))) unsigned long hvd_cuda_hook_calls(void);

#endif
