/* GOT/PLT slots of the loaded objects: see got.h.  Each object's dynamic
 * section gives its relocations (JUMP_SLOT: PLT; GLOB_DAT: -fno-plt), its
 * symbols and the versions its undefined symbols ask for; a slot on a
 * full-RELRO page is written by making the page writable for the store.
 * Objects are visited once each (their load address and dynamic section
 * remembered), and again all when one was unloaded.  State: written by
 * hvd_got_scan, which the caller serializes. */
#define _GNU_SOURCE /* dladdr1, dlvsym, dl_iterate_phdr */
#include "got.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__aarch64__) /* RELA relocations; else no native hooks (native.c) */

#if defined(__x86_64__)
#define HVD_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define HVD_R_GLOB_DAT R_X86_64_GLOB_DAT
#else
#define HVD_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define HVD_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct {
  uintptr_t base, dyn;
} seen_obj;

static struct {
  pthread_once_t once;
  long page;
  uintptr_t self_base; /* hvdshim's own object: never visited */
  void *(*real_dlopen)(const char *, int);
  seen_obj *seen;
  size_t nseen, capseen;
  unsigned long long adds, subs;
} G = {.once = PTHREAD_ONCE_INIT};

static void resolve_once(void) {
  G.page = sysconf(_SC_PAGESIZE);
  Dl_info self;
  /* dli_fbase is the lowest mapped address; dlpi_addr the load bias: for a
   * shared library both are the same (first segment at vaddr 0). */
  if (dladdr((void *)hvd_got_scan, &self)) G.self_base = (uintptr_t)self.dli_fbase;
  G.real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  if (!G.real_dlopen) G.real_dlopen = dlopen;
}
static void resolve(void) { pthread_once(&G.once, resolve_once); }

struct hvd_got_object {
  uintptr_t base;
  const char *name;
  const ElfW(Sym) *symtab;
  const char *strtab;
  const ElfW(Rela) *rel[2];
  size_t nrel[2];
  const ElfW(Half) *versym;
  const ElfW(Verneed) *verneed;
  size_t nverneed;
  uintptr_t relro_lo, relro_hi; /* pages made read-only after relocation */
  uintptr_t lo, hi;             /* the object's mapped range */
};
typedef struct hvd_got_object object;

/* Dynamic entries hold addresses: relocated in place by ld.so for most
 * objects, link-time values for a few (the vDSO). */
static uintptr_t dyn_ptr(const object *o, ElfW(Addr) v) { return v < o->base ? o->base + v : v; }

static int read_object(struct dl_phdr_info *info, object *o) {
  memset(o, 0, sizeof *o);
  o->base = info->dlpi_addr;
  o->name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "the executable";
  const ElfW(Dyn) *dyn = NULL;
  o->lo = UINTPTR_MAX;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t a = o->base + ph->p_vaddr;
    if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)a;
    if (ph->p_type == PT_GNU_RELRO) {
      uintptr_t pg = (uintptr_t)G.page;
      o->relro_lo = a & ~(pg - 1);
      o->relro_hi = (a + ph->p_memsz) & ~(pg - 1);
    }
    if (ph->p_type == PT_LOAD) {
      if (a < o->lo) o->lo = a;
      if (a + ph->p_memsz > o->hi) o->hi = a + ph->p_memsz;
    }
  }
  if (!dyn) return -1;
  size_t pltrelsz = 0, relasz = 0;
  uintptr_t jmprel = 0, rela = 0;
  long pltrel = DT_RELA;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
    case DT_SYMTAB: o->symtab = (const ElfW(Sym) *)dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_STRTAB: o->strtab = (const char *)dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_JMPREL: jmprel = dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
    case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
    case DT_RELA: rela = dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_RELASZ: relasz = d->d_un.d_val; break;
    case DT_VERSYM: o->versym = (const ElfW(Half) *)dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_VERNEED: o->verneed = (const ElfW(Verneed) *)dyn_ptr(o, d->d_un.d_ptr); break;
    case DT_VERNEEDNUM: o->nverneed = d->d_un.d_val; break;
    default: break;
    }
  }
  if (!o->symtab || !o->strtab) return -1;
  if (jmprel && pltrel == DT_RELA) o->rel[0] = (const ElfW(Rela) *)jmprel, o->nrel[0] = pltrelsz / sizeof(ElfW(Rela));
  if (rela) o->rel[1] = (const ElfW(Rela) *)rela, o->nrel[1] = relasz / sizeof(ElfW(Rela));
  return 0;
}

/* The version an undefined symbol asks for ("" for none). */
static const char *needed_version(const object *o, size_t symidx) {
  if (!o->versym || !o->verneed) return "";
  ElfW(Half) idx = o->versym[symidx] & 0x7fff;
  if (idx < 2) return "";
  const ElfW(Verneed) *vn = o->verneed;
  for (size_t i = 0; i < o->nverneed; i++) {
    const ElfW(Vernaux) *va = (const ElfW(Vernaux) *)((const char *)vn + vn->vn_aux);
    for (unsigned j = 0; j < vn->vn_cnt; j++) {
      if (va->vna_other == idx) return o->strtab + va->vna_name;
      va = (const ElfW(Vernaux) *)((const char *)va + va->vna_next);
    }
    if (!vn->vn_next) break;
    vn = (const ElfW(Verneed) *)((const char *)vn + vn->vn_next);
  }
  return "";
}

int hvd_got_defines(void *addr, const char *name) {
  Dl_info di;
  const ElfW(Sym) *sym = NULL;
  if (!addr || !dladdr1(addr, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym || !di.dli_sname) return 0;
  return sym->st_shndx != SHN_UNDEF && !strcmp(di.dli_sname, name) && (void *)di.dli_saddr == addr;
}

typedef struct {
  const char *name, *version;
  void *found;
} def_search;

static int search_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  def_search *s = data;
  if (s->found || info->dlpi_addr == G.self_base || !info->dlpi_name || !info->dlpi_name[0]) return 0;
  void *h = G.real_dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return 0;
  void *p = s->version[0] ? dlvsym(h, s->name, s->version) : dlsym(h, s->name);
  dlclose(h);
  if (hvd_got_defines(p, s->name)) s->found = p;
  return 0;
}

void *hvd_got_definition(const char *name, const char *version) {
  resolve();
  void *p = version[0] ? dlvsym(RTLD_DEFAULT, name, version) : dlsym(RTLD_DEFAULT, name);
  if (hvd_got_defines(p, name)) return p;
  def_search s = {name, version, NULL};
  dl_iterate_phdr(search_object, &s);
  return s.found;
}


const char *hvd_got_version(const hvd_got_slot *s) { return needed_version(s->obj, s->symidx); }

int hvd_got_unbound(const hvd_got_slot *s, const void *value) {
  return (uintptr_t)value >= s->obj->lo && (uintptr_t)value < s->obj->hi;
}

int hvd_got_write(const hvd_got_slot *s, void *value) {
  const object *o = s->obj;
  void **slot = s->slot;
  uintptr_t a = (uintptr_t)slot;
  if (a >= o->relro_lo && a < o->relro_hi) {
    void *pg = (void *)(a & ~((uintptr_t)G.page - 1));
    if (mprotect(pg, (size_t)G.page, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    mprotect(pg, (size_t)G.page, PROT_READ);
    return 1;
  }
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  return 0;
}

typedef struct {
  void (*object_seen)(const char *object, void *ctx);
  void (*visit)(const hvd_got_slot *s, void *ctx);
  void *ctx;
} scanner;

static void visit_object(struct dl_phdr_info *info, scanner *sc) {
  object o;
  if (read_object(info, &o) != 0) return;
  sc->object_seen(o.name, sc->ctx);
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < o.nrel[t]; i++) {
      const ElfW(Rela) *r = &o.rel[t][i];
      unsigned type = (unsigned)ELF64_R_TYPE(r->r_info);
      size_t symidx = ELF64_R_SYM(r->r_info);
      if ((type != HVD_R_JUMP_SLOT && type != HVD_R_GLOB_DAT) || symidx == 0) continue;
      hvd_got_slot s = {&o, o.name, o.strtab + o.symtab[symidx].st_name, symidx, (void **)(o.base + r->r_offset),
                        type == HVD_R_JUMP_SLOT};
      sc->visit(&s, sc->ctx);
    }
  }
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *data) {
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    if (info->dlpi_subs != G.subs) G.nseen = 0; /* something was unloaded: check everything again */
    G.adds = info->dlpi_adds, G.subs = info->dlpi_subs;
  }
  if (info->dlpi_addr == G.self_base && G.self_base) return 0;
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  for (size_t i = 0; i < G.nseen; i++)
    if (G.seen[i].base == info->dlpi_addr && G.seen[i].dyn == (uintptr_t)dyn) return 0;
  if (G.nseen == G.capseen) {
    size_t nc = G.capseen ? G.capseen * 2 : 64;
    seen_obj *ns = realloc(G.seen, nc * sizeof *ns);
    if (!ns) return 0;
    G.seen = ns, G.capseen = nc;
  }
  G.seen[G.nseen].base = info->dlpi_addr;
  G.seen[G.nseen].dyn = (uintptr_t)dyn;
  G.nseen++;
  visit_object(info, data);
  return 0;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *data) {
  unsigned long long *c = data;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
    c[0] = info->dlpi_adds, c[1] = info->dlpi_subs;
  return 1; /* the counters are the same in every entry */
}

void hvd_got_scan(int force, void (*object_seen)(const char *object, void *ctx),
                  void (*visit)(const hvd_got_slot *s, void *ctx), void *ctx) {
  resolve();
  unsigned long long c[2] = {~0ULL, ~0ULL};
  dl_iterate_phdr(counters_cb, c);
  scanner sc = {object_seen, visit, ctx};
  if (force || c[0] != G.adds || c[1] != G.subs) dl_iterate_phdr(scan_cb, &sc);
}

#endif
