/* Native function hooks (hooks/native.c): HVDSHIM_HOOKS applied to a C or
 * C++ program by patching the GOT entries that call the named functions. */
#ifndef HVD_HOOKS_NATIVE_H
#define HVD_HOOKS_NATIVE_H

#include <stddef.h>

#include "../collectives/hvdshim.h"

/* Constructor of an armed rank: read HVDSHIM_HOOKS (a spec file, or the
 * spec itself when the value contains '('), patch every loaded object and
 * watch dlopen.  A spec error ends the process with one line.  `start`
 * starts hvdshim on the first hooked call (the layer above passes hvd_init,
 * so hooks/ never calls up into shim/). */
void hvd_native_arm(hvd_status_t (*start)(void));

#endif
