/* GOT/PLT slots of the loaded objects (hooks/got.c), for the native hooks
 * (hooks/native.c): which slots name a function, what the call through a
 * slot reaches, and a store into a slot.  ELF only (x86-64, AArch64: RELA
 * relocations); nothing here knows what a hook does. */
#ifndef HVD_HOOKS_GOT_H
#define HVD_HOOKS_GOT_H

#include <stddef.h>
#include <stdint.h>

/* One relocation slot of a loaded object that names a function: a PLT
 * entry (JUMP_SLOT) or, in an object built with -fno-plt, a GOT entry
 * (GLOB_DAT). */
typedef struct hvd_got_object hvd_got_object;
typedef struct {
  const hvd_got_object *obj;
  const char *object; /* the object's file ("the executable") */
  const char *symbol;
  size_t symidx;
  void **slot;
  int plt; /* a PLT entry (else a GOT entry) */
} hvd_got_slot;

/* The version the slot asks for ("": none). */
const char *hvd_got_version(const hvd_got_slot *s);
/* The slot's value points inside its own object (a PLT stub not bound yet):
 * it names no definition. */
int hvd_got_unbound(const hvd_got_slot *s, const void *value);
/* Stores value into the slot with one aligned store (a thread calling
 * through it sees the old or the new target): 0, 1 when the slot is on a
 * read-only RELRO page (made writable for the store and read-only again),
 * or -1 (mprotect failed: errno). */
int hvd_got_write(const hvd_got_slot *s, void *value);

/* addr is a real definition of name (not a non-PIE executable's canonical
 * PLT entry, whose symbol is undefined with a value). */
int hvd_got_defines(void *addr, const char *name);
/* The definition a call through a slot naming name (and version, "" for
 * any) reaches: the global scope first, then each object's own scope
 * (libraries loaded RTLD_LOCAL); NULL when no loaded object defines it. */
void *hvd_got_definition(const char *name, const char *version);

/* Visits every slot of every loaded object not visited yet (force: of
 * every loaded object), except hvdshim's own; first tells object_seen each
 * object's name.  Objects unloaded since the last scan make the next one
 * visit everything again.  A scan that finds the loaded set unchanged does
 * nothing.  The caller serializes scans. */
void hvd_got_scan(int force, void (*object_seen)(const char *object, void *ctx),
                  void (*visit)(const hvd_got_slot *s, void *ctx), void *ctx);

#endif
