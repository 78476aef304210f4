/* A program that loads its trainer at run time: dlopen("libplugin.so") by
 * bare name, found through this program's RUNPATH ($ORIGIN), then calls
 * its plugin_main.  The plugin (examples/native/train.c built as a shared
 * library) calls libmlp through its own PLT, which exists only after the
 * dlopen: the shim must patch it then. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  void *h = dlopen("libplugin.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dl_main: %s\n", dlerror());
    return 1;
  }
  int (*plugin_main)(int, char **) = (int (*)(int, char **))dlsym(h, "plugin_main");
  if (!plugin_main) {
    fprintf(stderr, "dl_main: %s\n", dlerror());
    return 1;
  }
  return plugin_main(argc, argv);
}
