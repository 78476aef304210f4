/* Finding a shared library at run time, the one the process already loaded
 * first: a framework often brings its own copy (a PyTorch wheel's libcudart,
 * loaded RTLD_LOCAL where dlsym(RTLD_NEXT) cannot see it).  Used by the GPU
 * path's loader (gpu_load.c, backend_nccl.c) and the CUDA runtime hooks
 * (hooks/cuda_hooks.c).  Needs no CUDA header. */
#ifndef HVD_DLLOAD_H
#define HVD_DLLOAD_H

#include <stddef.h>

/* The path of a loaded object whose file name starts with `prefix`
 * ("libcudart.so") in path (empty: none); 1 when found. */
int hvd_dl_find_loaded(const char *prefix, char *path, size_t pathlen);
/* A handle on the loaded copy, else on the first of `names` (NULL-ended)
 * the dynamic linker finds (RTLD_LOCAL), its path in `path`; NULL: none. */
void *hvd_dl_open(const char *prefix, const char *const *names, char *path, size_t pathlen);

#endif
