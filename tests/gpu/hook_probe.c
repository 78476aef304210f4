/* Loads the stand-in framework with RTLD_LOCAL (its libcudart is then not in
 * the global scope, as with a Python extension) and checks that its CUDA
 * calls pass through the shim's hooks unchanged and that the shim saw the
 * stream.  Prints two lines: "probe calls=N stream=P grid=G rc=R hooked=H
 * seen=S", then the same for nvcc 13's launch entry points ("nvcc13 ...
 * ptsz stream=P rc=R seen=S"). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *fw = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!fw) {
    fprintf(stderr, "probe: %s\n", dlerror());
    return 2;
  }
  int (*step)(void *) = (int (*)(void *))dlsym(fw, "fw_step");
  int *calls = (int *)dlsym(fw, "fake_calls");
  void **last = (void **)dlsym(fw, "fake_last_stream");
  unsigned *grid = (unsigned *)dlsym(fw, "fake_last_grid_x");
  unsigned long (*hooked)(void) = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "hvd_cuda_hook_calls");
  void *(*seen)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "hvd_cuda_thread_stream");
  if (!step || !calls || !last || !grid) return 2;
  int rc = step((void *)0x1234);
  printf("probe calls=%d stream=%p grid=%u rc=%d hooked=%ld seen=%p\n", *calls, *last, *grid, rc,
         hooked ? (long)hooked() : -1L, seen ? seen() : NULL);
  /* nvcc 13's launches (__cudaLaunchKernel, and _ptsz with stream 0) */
  int (*nvcc13)(void *, int) = (int (*)(void *, int))dlsym(fw, "fw_nvcc13");
  if (!nvcc13) return 2;
  rc = nvcc13((void *)0x5678, 0);
  printf("nvcc13 calls=%d stream=%p grid=%u rc=%d seen=%p", *calls, *last, *grid, rc, seen ? seen() : NULL);
  rc = nvcc13(NULL, 1);
  printf(" ptsz stream=%p rc=%d seen=%p\n", *last, rc, seen ? seen() : NULL);
  return 0;
}
