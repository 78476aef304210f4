/* Native function hooks: HVDSHIM_HOOKS applied by GOT patching and libffi.
 *
 * What it owns: the parsed spec, one libffi closure per (hooked function,
 * real definition), and the GOT/PLT slots it rewrote.
 *
 * Order of things:
 *   constructor (armed rank, one thread, engine not started)
 *     -> read and parse the spec (an error ends the process with one line);
 *        build a libffi call interface per prototype;
 *        visit every loaded object's GOT/PLT slots naming a function
 *        (got.c) and write the closure's address into each slot naming a
 *        hooked one; the `dlopen` slots get a wrapper too;
 *        warn about each named symbol no loaded object calls through a slot.
 *   dlopen (any thread, through a patched slot)
 *     -> the real dlopen, searched as if called from the caller's object
 *        (its RPATH/RUNPATH), then the objects it added are scanned, under
 *        `mu`, before the handle is returned: nothing from the new library
 *        has been called through its own slots yet.
 *   a hooked call (the program's threads)
 *     -> first call: hvd_init (MPI, engine thread); shard remaps, broadcasts
 *        and allreduces marked "before" (submitted together, so they fuse,
 *        then waited), ffi_call of the real function, then the "after" ones.
 * A slot holds a pointer, written with one aligned store: a thread calling
 * through it concurrently sees the old or the new target, both correct.
 * Forked children and finished ranks call straight through. */
#define _GNU_SOURCE /* dladdr1, dlinfo */
#include "../config.h"
#include "native.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../collectives/gpu/gpu.h"
#include "../collectives/hvdshim.h"
#include "../base/config.h"
#include "../base/libc.h"
#include "../base/log.h"
#include "../base/role.h"
#include "cuda_hooks.h"
#include "got.h"
#include "hookspec.h"

#if defined(HVD_HAVE_FFI) && (defined(__x86_64__) || defined(__aarch64__))
#include <ffi.h>

#define MAX_TARGETS 8 /* distinct definitions of one name (RTLD_LOCAL libraries) */

typedef struct native_hook native_hook;

typedef struct {
  void *orig;   /* the real function */
  void *code;   /* the closure's entry, written into slots */
  ffi_closure *cl;
  native_hook *hook;
} target;

struct native_hook {
  const hvd_hs_hook *spec;
  ffi_cif cif;
  ffi_type *atypes[HVD_HS_MAX_ARGS];
  target tg[MAX_TARGETS];
  int ntg;
  unsigned long calls; /* atomic */
  int slots;           /* GOT slots pointing at this hook (under N.mu) */
};

static struct {
  hvd_hookspec spec;
  const char *where;
  hvd_status_t (*start)(void); /* hvd_init, passed by the constructor */
  native_hook *hooks;
  int n;
  pthread_mutex_t mu; /* scanning and patching */
  void *(*real_dlopen)(const char *, int);
  int dlopen_slots;
  int cudart; /* a CUDA runtime is loaded: device pointers are possible */
} N = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *wrap_dlopen(const char *file, int flags);

/* ------------------------------------------------------------------ libffi */

static ffi_type *ffi_of(const hvd_hs_type *t) {
  switch (t->cls) {
  case HVD_HS_VOID: return &ffi_type_void;
  case HVD_HS_FLOAT: return &ffi_type_float;
  case HVD_HS_DOUBLE: return &ffi_type_double;
  case HVD_HS_LDOUBLE: return &ffi_type_longdouble;
  case HVD_HS_PTR: return &ffi_type_pointer;
  case HVD_HS_SINT:
    return t->size == 1 ? &ffi_type_sint8 : t->size == 2 ? &ffi_type_sint16 : t->size == 4 ? &ffi_type_sint32
                                                                                            : &ffi_type_sint64;
  default:
    return t->size == 1 ? &ffi_type_uint8 : t->size == 2 ? &ffi_type_uint16 : t->size == 4 ? &ffi_type_uint32
                                                                                            : &ffi_type_uint64;
  }
}

/* ------------------------------------------------------------------ actions */

static int present(void) {
  hvd_role_t r = hvd_shim_role();
  return r == HVD_ROLE_ARMED || r == HVD_ROLE_ACTIVE;
}

static void *buffer_of(native_hook *nh, const hvd_hs_action *a, void **args, size_t *count, const char *what) {
  const hvd_hs_hook *h = nh->spec;
  char err[256], r[80];
  int64_t c;
  if (hvd_hs_eval(&a->count, h, args, &c, err, sizeof err) != 0) HVD_FATAL("hook %s: %s", h->name, err);
  hvd_hs_argref(h, a->arg, r, sizeof r);
  if (c < 0)
    HVD_FATAL("hook %s: %s of %s: count=%s is %lld (negative)", h->name, what, r, a->count.text, (long long)c);
  void *p = *(void **)args[a->arg];
  if (!p && c > 0)
    HVD_FATAL("hook %s: %s of %s: the pointer is NULL but count=%s is %lld", h->name, what, r, a->count.text,
              (long long)c);
  *count = (size_t)c;
  return p;
}

/* Shard remaps, then every collective of this phase submitted together
 * (so they share a fusion buffer), then all waited for. */
static void run_actions(native_hook *nh, void **args, int after, unsigned long call) {
  const hvd_hs_hook *h = nh->spec;
  hvd_handle_t hs[HVD_HS_MAX_ACTIONS];
  const hvd_hs_action *which[HVD_HS_MAX_ACTIONS];
  int nh_ = 0;
  char err[256], r[80], name[256];
  for (int k = 0; k < h->nactions; k++) {
    const hvd_hs_action *a = &h->act[k];
    if (a->after != after) continue;
    hvd_hs_argref(h, a->arg, r, sizeof r);
    if (a->verb == HVD_HA_SHARD) {
      const hvd_hs_type *t = &h->args[a->arg];
      int64_t i = hvd_hs_arg_int(t, args[a->arg]), n = hvd_size(), rk = hvd_rank(), v;
      if (a->block) {
        int64_t total;
        if (hvd_hs_eval(&a->count, h, args, &total, err, sizeof err) != 0) HVD_FATAL("hook %s: %s", h->name, err);
        if (__builtin_mul_overflow(rk, total / n, &v) || __builtin_add_overflow(v, i, &v)) goto overflow;
      } else if (__builtin_mul_overflow(i, n, &v) || __builtin_add_overflow(v, rk, &v)) {
        goto overflow;
      }
      hvd_hs_type check = *t;
      int64_t back;
      hvd_hs_set_int(&check, &back, v); /* must survive the argument's width */
      if (hvd_hs_arg_int(t, &back) != v) goto overflow;
      hvd_hs_set_int(t, args[a->arg], v);
      continue;
    overflow:
      HVD_FATAL("hook %s: shard of %s: index %lld does not fit '%s' once remapped for rank %d of %d", h->name, r,
                (long long)i, t->text, hvd_rank(), hvd_size());
    }
    if (a->verb == HVD_HA_BROADCAST && !a->every && call > 0) continue;
    size_t count;
    void *p = buffer_of(nh, a, args, &count, a->verb == HVD_HA_ALLREDUCE ? "allreduce" : "broadcast");
    int dev = N.cudart && p ? hvd_gpu_pointer_device(p) : -1;
    void *stream = dev >= 0 ? hvd_cuda_thread_stream() : NULL;
    hvd_status_t st;
    if (a->verb == HVD_HA_ALLREDUCE) {
      /* the count is part of the name: one function called for buffers of
       * several sizes keeps one stable signature per size */
      snprintf(name, sizeof name, "%s:%s[%zu]", h->name, h->argname[a->arg][0] ? h->argname[a->arg] : r, count);
      st = dev >= 0 ? hvd_allreduce_gpu_async(name, p, count, (hvd_dtype_t)a->dtype, (hvd_op_t)a->op, dev, stream,
                                              NULL, NULL, &hs[nh_])
                    : hvd_allreduce_async(name, p, count, (hvd_dtype_t)a->dtype, (hvd_op_t)a->op, NULL, NULL, &hs[nh_]);
    } else {
      if (a->root >= hvd_size())
        HVD_FATAL("hook %s: broadcast of %s: root=%d, but the job has %d rank(s)", h->name, r, a->root, hvd_size());
      snprintf(name, sizeof name, "%s:%s:bcast", h->name, h->argname[a->arg][0] ? h->argname[a->arg] : r);
      st = dev >= 0 ? hvd_broadcast_gpu_async(name, p, count, (hvd_dtype_t)a->dtype, a->root, dev, stream, NULL,
                                              NULL, &hs[nh_])
                    : hvd_broadcast_async(name, p, count, (hvd_dtype_t)a->dtype, a->root, NULL, NULL, &hs[nh_]);
    }
    if (st != HVD_OK) HVD_FATAL("hook %s: %s", h->name, hvd_last_error());
    which[nh_++] = a;
  }
  int reduced = 0;
  for (int k = 0; k < nh_; k++) {
    hvd_status_t st = hvd_wait(hs[k], -1);
    if (st != HVD_OK)
      HVD_FATAL("hook %s: %s failed: %s", h->name, hvd_hs_describe(h, which[k], err, sizeof err), hvd_last_error());
    reduced |= which[k]->verb == HVD_HA_ALLREDUCE;
  }
  if (reduced) hvd_step_mark(-1); /* a call that reduces is a training step (metrics, autotune) */
}

/* Once the engine runs: stdout of ranks other than 0 goes to /dev/null
 * unless HVDSHIM_WORKER_STDOUT=1 (kept as it is; stderr is always kept). */
static void started(void) {
  if (hvd_rank() == 0 || hvd_cfg_int(HVD_CFG_WORKER_STDOUT)) return;
  fflush(stdout);
  int fd = hvd_libc()->open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || dup2(fd, 1) < 0) HVD_WARN("could not silence stdout of rank %d: %s", hvd_rank(), strerror(errno));
  if (fd >= 0) close(fd);
}

static void on_call(ffi_cif *cif, void *ret, void **args, void *ud) {
  target *t = ud;
  native_hook *nh = t->hook;
  if (!present()) { /* forked child, finished rank, inert process */
    ffi_call(cif, FFI_FN(t->orig), ret, args);
    return;
  }
  if (hvd_shim_role() != HVD_ROLE_ACTIVE && N.start() != HVD_OK) {
    if (!present()) { /* shut down meanwhile (a hooked call from an exit handler) */
      ffi_call(cif, FFI_FN(t->orig), ret, args);
      return;
    }
    HVD_FATAL("hook %s: starting hvdshim failed: %s", nh->spec->name, hvd_last_error());
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, started);
  const hvd_hs_hook *h = nh->spec;
  /* shard rewrites arguments: on copies, never the caller's frame */
  union {
    int64_t i;
    long double ld;
    void *p;
  } copy[HVD_HS_MAX_ARGS];
  void *argv[HVD_HS_MAX_ARGS];
  for (int i = 0; i < h->nargs; i++) {
    memcpy(&copy[i], args[i], h->args[i].size <= sizeof copy[i] ? h->args[i].size : sizeof copy[i]);
    argv[i] = &copy[i];
  }
  unsigned long call = __atomic_fetch_add(&nh->calls, 1, __ATOMIC_RELAXED);
  run_actions(nh, argv, 0, call);
  ffi_call(cif, FFI_FN(t->orig), ret, argv);
  run_actions(nh, argv, 1, call);
}

/* ------------------------------------------------------------------ slots */

static void *target_for(native_hook *nh, void *orig) {
  for (int i = 0; i < nh->ntg; i++)
    if (nh->tg[i].orig == orig) return nh->tg[i].code;
  if (nh->ntg == MAX_TARGETS) return NULL;
  target *t = &nh->tg[nh->ntg];
  t->cl = ffi_closure_alloc(sizeof(ffi_closure), &t->code);
  if (!t->cl) return NULL;
  t->orig = orig;
  t->hook = nh;
  if (ffi_prep_closure_loc(t->cl, &nh->cif, on_call, t, t->code) != FFI_OK) {
    ffi_closure_free(t->cl);
    return NULL;
  }
  nh->ntg++;
  return t->code;
}

static int ours(void *p) {
  if (p == (void *)wrap_dlopen) return 1;
  for (int i = 0; i < N.n; i++)
    for (int j = 0; j < N.hooks[i].ntg; j++)
      if (N.hooks[i].tg[j].code == p) return 1;
  return 0;
}

static void object_seen(const char *object, void *ctx) {
  (void)ctx;
  if (strstr(object, "libcudart.so")) N.cudart = 1;
}

/* A slot naming dlopen gets the wrapper; one naming a hooked function (and
 * the version the spec asks for) gets the closure for the definition the
 * slot reaches. */
static void patch_slot(const hvd_got_slot *s, void *ctx) {
  (void)ctx;
  if (!strcmp(s->symbol, "dlopen")) {
    if (*s->slot != (void *)wrap_dlopen && hvd_got_write(s, (void *)wrap_dlopen) >= 0) N.dlopen_slots++;
    return;
  }
  for (int k = 0; k < N.n; k++) {
    native_hook *nh = &N.hooks[k];
    const hvd_hs_hook *h = nh->spec;
    if (strcmp(s->symbol, h->name)) continue;
    void *cur = *s->slot; /* checked after the name: most relocations name other symbols */
    if (ours(cur)) break;
    if (h->version[0] && strcmp(hvd_got_version(s), h->version)) continue;
    /* a bound slot outside its own object already names the definition */
    void *orig = hvd_got_unbound(s, cur) ? NULL : cur;
    if (!hvd_got_defines(orig, h->name)) orig = hvd_got_definition(h->name, h->version);
    if (!orig) {
      HVD_WARN("hook %s: %s calls it, but no loaded object defines it; not hooked there", h->name, s->object);
      break;
    }
    void *code = target_for(nh, orig);
    if (!code) {
      HVD_WARN("hook %s: cannot make a libffi closure (or more than %d definitions); %s not hooked", h->name,
               MAX_TARGETS, s->object);
      break;
    }
    int ro = hvd_got_write(s, code);
    if (ro < 0) {
      HVD_WARN("hook %s: cannot make the GOT of %s writable (%s); not hooked there", h->name, s->object,
               strerror(errno));
      break;
    }
    nh->slots++;
    HVD_DEBUG("hook %s: patched a %s slot in %s%s", h->name, s->plt ? "PLT" : "GOT", s->object,
              ro ? " (read-only RELRO page)" : "");
    break;
  }
}

static void scan(int force) {
  pthread_mutex_lock(&N.mu);
  hvd_got_scan(force, object_seen, patch_slot, NULL);
  pthread_mutex_unlock(&N.mu);
}

/* ------------------------------------------------------------------ dlopen */

/* dlopen searches for a bare name with the *caller's* RPATH/RUNPATH; called
 * from here it would use libhvdshim's.  So a bare name is looked up in the
 * caller's search path (dlinfo RTLD_DI_SERINFO) and opened by its path. */
static void *open_as(const void *caller, const char *file, int flags) {
  if (!file || strchr(file, '/') || (flags & RTLD_NOLOAD)) return N.real_dlopen(file, flags);
  void *h = N.real_dlopen(file, flags | RTLD_NOLOAD); /* already loaded: that one */
  if (h) return h;
  Dl_info di;
  struct link_map *lm = NULL;
  if (!dladdr1(caller, &di, (void **)&lm, RTLD_DL_LINKMAP) || !lm) return N.real_dlopen(file, flags);
  void *ch = N.real_dlopen(lm->l_name && lm->l_name[0] ? lm->l_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
  char *path = NULL;
  Dl_serinfo sz;
  if (ch && dlinfo(ch, RTLD_DI_SERINFOSIZE, &sz) == 0) {
    Dl_serinfo *si = malloc(sz.dls_size);
    if (si) {
      si->dls_size = sz.dls_size;
      si->dls_cnt = sz.dls_cnt;
      if (dlinfo(ch, RTLD_DI_SERINFO, si) == 0) {
        for (unsigned i = 0; i < si->dls_cnt && !path; i++) {
          size_t n = strlen(si->dls_serpath[i].dls_name) + strlen(file) + 2;
          char *p = malloc(n);
          if (!p) break;
          snprintf(p, n, "%s/%s", si->dls_serpath[i].dls_name, file);
          if (hvd_libc()->access(p, F_OK) == 0) path = p;
          else free(p);
        }
      }
      free(si);
    }
  }
  if (ch) dlclose(ch);
  h = N.real_dlopen(path ? path : file, flags);
  free(path);
  return h;
}

static void *wrap_dlopen(const char *file, int flags) {
  void *h = open_as(__builtin_return_address(0), file, flags);
  if (h) scan(0);
  return h;
}

/* ------------------------------------------------------------------ arming */

/* Why a named function has no slot here, as one sentence. */
static void why_unreached(const native_hook *nh, char *buf, size_t n) {
  const char *name = nh->spec->name;
  void *def = hvd_got_definition(name, nh->spec->version);
  Dl_info di;
  if (def && dladdr(def, &di) && di.dli_fname) {
    snprintf(buf, n, "hook %s: defined in %s, but no loaded object calls it through a GOT/PLT entry: calls made "
             "inside one object to its own functions can't be hooked (move %s to a shared library the caller "
             "links); it will be hooked in libraries loaded later that call it",
             name, di.dli_fname[0] ? di.dli_fname : "the executable", name);
  } else {
    snprintf(buf, n, "hook %s: not found in any loaded object: a typo, a C++ name that needs its mangled form, a "
             "function the executable defines and calls itself (such calls don't go through the GOT and can't be "
             "hooked: move it to a shared library), or a library loaded later (hooked when dlopen loads it)", name);
  }
}

/* One warning per host (local rank 0).  A process that calls none of the
 * spec's functions is most likely a wrapper that starts the trainer (sh,
 * valgrind, env): one line, with the first function's reason in case it is
 * the trainer after all. */
static void warn_unreached(void) {
  int local;
  hvd_env_rank(&local);
  if (local > 0) return;
  int matched = 0;
  for (int k = 0; k < N.n; k++) matched += N.hooks[k].slots > 0;
  char why[1024];
  extern char *program_invocation_short_name;
  if (!matched) {
    why_unreached(&N.hooks[0], why, sizeof why);
    HVD_WARN("HVDSHIM_HOOKS: %s calls none of the spec's %d function(s) through a GOT/PLT slot; fine if it is a "
             "wrapper that starts the trainer (sh, valgrind, env); otherwise: %s", program_invocation_short_name,
             N.n, why);
    return;
  }
  for (int k = 0; k < N.n; k++) {
    if (N.hooks[k].slots) continue;
    why_unreached(&N.hooks[k], why, sizeof why);
    HVD_WARN("%s", why);
  }
}

void hvd_native_arm(hvd_status_t (*start)(void)) {
  const char *value = hvd_cfg_str(HVD_CFG_HOOKS);
  if (!value || !value[0]) return;
  N.start = start;
  char err[640];
  char *text;
  size_t len;
  if (hvd_hookspec_read(value, &text, &len, &N.where, err, sizeof err) != 0) HVD_FATAL("%s", err);
  if (hvd_hookspec_parse(text, len, N.where, &N.spec, err, sizeof err) != 0) {
    char msg[700];
    HVD_FATAL("%s", hvd_hookspec_error(N.where, err, msg, sizeof msg));
  }
  free(text);
  N.real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  if (!N.real_dlopen) N.real_dlopen = dlopen;
  N.hooks = calloc((size_t)N.spec.n, sizeof *N.hooks);
  if (!N.hooks) HVD_FATAL("HVDSHIM_HOOKS: out of memory");
  for (int k = 0; k < N.spec.n; k++) {
    native_hook *nh = &N.hooks[k];
    const hvd_hs_hook *h = &N.spec.hooks[k];
    nh->spec = h;
    for (int i = 0; i < h->nargs; i++) nh->atypes[i] = ffi_of(&h->args[i]);
    if (ffi_prep_cif(&nh->cif, FFI_DEFAULT_ABI, (unsigned)h->nargs, ffi_of(&h->ret), nh->atypes) != FFI_OK)
      HVD_FATAL("HVDSHIM_HOOKS: libffi cannot describe the prototype of %s", h->name);
    for (int a = 0; a < h->nactions; a++) {
      char d[256];
      HVD_DEBUG("hook %s: %s", h->name, hvd_hs_describe(h, &h->act[a], d, sizeof d));
    }
  }
  N.n = N.spec.n;
  scan(1);
  warn_unreached();
}

#else /* no libffi, or an architecture whose relocations are not handled */

void hvd_native_arm(hvd_status_t (*start)(void)) {
  (void)start;
  const char *value = hvd_cfg_str(HVD_CFG_HOOKS);
  if (!value || !value[0]) return;
#if !defined(HVD_HAVE_FFI)
  HVD_FATAL("HVDSHIM_HOOKS is set, but this build of hvdshim has no native hooks: configure found no libffi "
            "(apt-get install libffi-dev, then rebuild)");
#else
  HVD_FATAL("HVDSHIM_HOOKS is set, but native hooks support x86-64 and AArch64 only");
#endif
}

#endif
