/* Loads the stand-in framework with RTLD_LOCAL (its libcudart is then not in
 * the global scope, as with a Python extension) and checks that its CUDA
 * calls pass through the shim's hooks unchanged and that the shim saw the
 * stream.  Prints one line: "probe calls=N stream=P grid=G rc=R hooked=H
 * seen=S". */
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
  return 0;
}
