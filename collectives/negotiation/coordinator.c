/* The coordinator: rank 0's negotiation table.  Each slow-path round it
 * reads every rank's request records (wire.h), keeps name -> per-rank
 * signature, and answers a name once every rank still submitting has sent
 * it: EXEC, or ERROR naming the first field the ranks disagree on and which
 * ranks hold which value.  A request for a name the response cache holds
 * invalidates that entry on every rank (INVALIDATE).  The stall inspector
 * warns about names some ranks have waited on for HVDSHIM_STALL_WARNING_
 * SECONDS, and turns the warning into a FATAL response after HVDSHIM_STALL_
 * SHUTDOWN_SECONDS.  An operation on a process set waits for the set's
 * members only; adding or removing a set waits for every rank.  No MPI
 * here: the engine gathers the records and broadcasts the responses
 * (engine/engine_negotiate.c, hvd_eng_slow_path); tests drive it directly
 * (tests/unit/unit_tests.c, "coordinator"). */
#include "coordinator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/log.h"
#include "../transports/dtype.h"

#define HVD_NAME_MAX 1024

struct hvd_coord_entry {
  char *name;
  hvd_sig *sigs;
  uint8_t *present;
  int npresent;
  double first_seen, last_warn;
  struct hvd_coord_entry *prev, *next;
};

int hvd_coord_init(hvd_coord *k, int size, const uint8_t *joined, const int *njoined, double stall_warn,
                   double stall_shutdown, int (*is_cached)(const char *, void *), void *ctx) {
  memset(k, 0, sizeof *k);
  k->size = size;
  k->joined = joined;
  k->njoined = njoined;
  k->stall_warn = stall_warn;
  k->stall_shutdown = stall_shutdown;
  k->is_cached = is_cached;
  k->ctx = ctx;
  k->table = hvd_strmap_new();
  k->invalidated = hvd_strmap_new();
  if (k->table && k->invalidated) return 0;
  hvd_coord_free(k);
  return -1;
}

static void coord_unlink(hvd_coord *k, hvd_coord_entry *c);

void hvd_coord_free(hvd_coord *k) {
  while (k->head) coord_unlink(k, k->head);
  hvd_strmap_free(k->table);
  hvd_strmap_free(k->invalidated);
  free(k->fatal_msg);
  k->table = k->invalidated = NULL;
  k->fatal_msg = NULL;
}

int hvd_coord_busy(const hvd_coord *k) { return k->head || k->fatal_msg; }

/* "0-2,5": a compact list of the ranks whose flag is (not) set. */
void hvd_rank_list(const uint8_t *flags, int size, int want, char *out, size_t n) {
  size_t len = 0;
  out[0] = 0;
  for (int r = 0; r < size && len + 24 < n; r++) {
    if ((flags[r] != 0) != want) continue;
    int e = r;
    while (e + 1 < size && (flags[e + 1] != 0) == want) e++;
    len += (size_t)snprintf(out + len, n - len, "%s%d", len ? "," : "", r);
    if (e > r) len += (size_t)snprintf(out + len, n - len, "%s%d", e == r + 1 ? "," : "-", e);
    r = e;
  }
}



static int pset_kind(int kind) { return kind == HVD_KIND_PSET_ADD || kind == HVD_KIND_PSET_REMOVE; }

static int member(const hvd_coord *k, int set, int rank) { return !k->in_set || k->in_set(set, rank, k->ctx); }

static void describe_value(char *out, size_t n, int field, const hvd_sig *s) {
  if (s->kind == HVD_KIND_PSET_ADD && field == 4) field = 9;
  if (s->kind == HVD_KIND_PSET_ADD && field == 7) field = 10;
  switch (field) {
  case 0: snprintf(out, n, "%s", hvd_kind_name(s->kind)); break;
  case 1: snprintf(out, n, "%s", hvd_dtype_name((hvd_dtype_t)s->dtype)); break;
  case 2: snprintf(out, n, "%s", hvd_op_name(s->op)); break;
  case 3: snprintf(out, n, "root %d", s->root); break;
  case 4: snprintf(out, n, "%lld elements", (long long)s->count); break;
  case 5: snprintf(out, n, "%lld elements per row", (long long)s->row_elems); break;
  case 7: {
    size_t k = (size_t)snprintf(out, n, "shape ");
    if (k < n) hvd_shape_describe(out + k, n - k, s->shape);
    break;
  }
  case 8: snprintf(out, n, "process set %d", (int)s->set); break;
  case 9: snprintf(out, n, "%lld ranks", (long long)s->count); break;
  case 10: snprintf(out, n, "member list #%08x", (unsigned)s->shape); break;
  default: snprintf(out, n, "%s", s->place ? "GPU memory" : "host memory"); break;
  }
}

static int field_differs(int field, const hvd_sig *a, const hvd_sig *b) {
  switch (field) {
  case 0: return a->kind != b->kind;
  case 1: return a->dtype != b->dtype;
  case 2: return (a->kind == HVD_KIND_ALLREDUCE || a->kind == HVD_KIND_REDUCESCATTER) && a->op != b->op;
  case 3: return (a->kind == HVD_KIND_BROADCAST || a->kind == HVD_KIND_PSET_REMOVE) && a->root != b->root;
  case 4: return a->kind != HVD_KIND_ALLGATHER && a->kind != HVD_KIND_ALLTOALL && a->count != b->count;
  case 5: return (a->kind == HVD_KIND_ALLGATHER || a->kind == HVD_KIND_ALLTOALL || a->kind == HVD_KIND_REDUCESCATTER) &&
                 a->row_elems != b->row_elems;
  case 7: return a->shape != b->shape;
  case 8: return a->set != b->set;
  default: return a->place != b->place;
  }
}

static const hvd_sig *first_present(const hvd_coord *k, const hvd_coord_entry *c) {
  for (int r = 0; r < k->size; r++)
    if (c->present[r]) return &c->sigs[r];
  return &c->sigs[0];
}

/* Returns NULL when every submitting rank agrees, else a malloc'd message
 * naming the tensor, the first field that differs and which ranks hold which
 * value.  Joined ranks that did not submit it are not compared. */
static char *check_agreement(const hvd_coord *k, const hvd_coord_entry *c) {
  static const char *fields[] = {"operation", "dtype", "reduction op", "root", "count", "row size", "memory",
                                 "shape (the same element count)", "process set"};
  static const int order[] = {0, 8, 1, 2, 3, 4, 5, 6, 7}; /* the process set right after the operation */
  const hvd_sig *ref = first_present(k, c);
  for (int fi = 0; fi < 9; fi++) {
    int f = order[fi];
    int differs = 0;
    for (int r = 0; r < k->size && !differs; r++) differs = c->present[r] && field_differs(f, ref, &c->sigs[r]);
    if (!differs) continue;
    size_t cap = 512 + strlen(c->name) + (size_t)k->size * 16, len;
    char *msg = malloc(cap);
    uint8_t *done = calloc((size_t)k->size, 1), *group = calloc((size_t)k->size, 1);
    if (!msg || !done || !group) HVD_FATAL("out of memory (mismatch report)");
    const char *field = ref->kind == HVD_KIND_PSET_ADD && f == 4   ? "number of ranks"
                        : ref->kind == HVD_KIND_PSET_ADD && f == 7 ? "member list (the same number of ranks)"
                        : ref->kind == HVD_KIND_PSET_REMOVE && f == 3 ? "process set to remove"
                                                                      : fields[f];
    len = (size_t)snprintf(msg, cap, "%s '%s': ranks disagree on the %s:", hvd_kind_name(ref->kind), c->name, field);
    for (int r = 0; r < k->size; r++) done[r] = !c->present[r];
    int first = 1;
    for (int r = 0; r < k->size; r++) {
      if (done[r]) continue;
      memset(group, 0, (size_t)k->size);
      for (int q = r; q < k->size; q++)
        if (!done[q] && !field_differs(f, &c->sigs[r], &c->sigs[q])) group[q] = done[q] = 1;
      char val[64], ranks[256];
      describe_value(val, sizeof val, f, &c->sigs[r]);
      hvd_rank_list(group, k->size, 1, ranks, sizeof ranks);
      len += (size_t)snprintf(msg + len, cap - len, "%s %s on rank%s %s", first ? "" : ";", val,
                              strpbrk(ranks, ",-") ? "s" : "", ranks);
      first = 0;
    }
    free(done);
    free(group);
    return msg;
  }
  return NULL;
}

static void coord_unlink(hvd_coord *k, hvd_coord_entry *c) {
  if (c->prev) c->prev->next = c->next;
  else k->head = c->next;
  if (c->next) c->next->prev = c->prev;
  else k->tail = c->prev;
  hvd_strmap_del(k->table, c->name);
  free(c->name);
  free(c->sigs);
  free(c->present);
  free(c);
}

/* Every member of its process set submitted c or has joined: answer it
 * (EXEC or ERROR) and drop it from the table.  Adding or removing a process
 * set needs every rank: one that has joined gets it refused. */
static void coord_try_respond(hvd_coord *k, hvd_coord_entry *c) {
  const hvd_sig *ref = first_present(k, c);
  int everyone = pset_kind(ref->kind);
  if (ref->set == 0 && !everyone && c->npresent < k->size - *k->njoined) return; /* cheap test first */
  int gone = 0;
  for (int r = 0; r < k->size; r++) {
    if (c->present[r] || !member(k, ref->set, r)) continue;
    if (!k->joined[r]) return;
    gone |= everyone;
  }
  char *msg = check_agreement(k, c);
  if (!msg && gone) {
    char list[256];
    hvd_rank_list(k->joined, k->size, 1, list, sizeof list);
    size_t cap = strlen(c->name) + 400;
    if (!(msg = malloc(cap))) HVD_FATAL("out of memory (coordinator)");
    snprintf(msg, cap, "%s '%s': rank(s) %s have finished or are in join(); every rank must take part in adding or "
             "removing a process set", hvd_kind_name(ref->kind), c->name, list);
  }
  if (msg) {
    hvd_wire_put_resp(k->resp, HVD_RESP_ERROR, ref, c->name, msg, NULL, 0);
    free(msg);
  } else if (ref->kind == HVD_KIND_ALLGATHER) {
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)k->size);
    if (!rows) HVD_FATAL("out of memory (allgather rows)");
    for (int r = 0; r < k->size; r++) rows[r] = c->present[r] ? c->sigs[r].count : 0;
    hvd_wire_put_resp(k->resp, HVD_RESP_EXEC, ref, c->name, NULL, rows, k->size);
    free(rows);
  } else {
    hvd_wire_put_resp(k->resp, HVD_RESP_EXEC, ref, c->name, NULL, NULL, 0);
  }
  coord_unlink(k, c);
}

static void coordinate_one(hvd_coord *k, int rank, const hvd_wire_req *w, double now) {
  char name[HVD_NAME_MAX + 1];
  size_t nl = w->name_len > HVD_NAME_MAX ? HVD_NAME_MAX : w->name_len;
  memcpy(name, w->name, nl);
  name[nl] = 0;
  if (k->is_cached(name, k->ctx) && !hvd_strmap_get(k->invalidated, name)) {
    /* Someone renegotiates a cached name (different signature or a stall):
     * every rank drops the entry and renegotiates too. */
    hvd_strmap_put(k->invalidated, name, (void *)1);
    hvd_wire_put_resp(k->resp, HVD_RESP_INVALIDATE, &w->sig, name, NULL, NULL, 0);
  }
  hvd_coord_entry *c = hvd_strmap_get(k->table, name);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (c) {
      c->name = strdup(name);
      c->sigs = calloc((size_t)k->size, sizeof *c->sigs);
      c->present = calloc((size_t)k->size, 1);
    }
    if (!c || !c->name || !c->sigs || !c->present) HVD_FATAL("out of memory (coordinator)");
    c->first_seen = now - w->age;
    c->prev = k->tail;
    if (k->tail) k->tail->next = c;
    else k->head = c;
    k->tail = c;
    hvd_strmap_put(k->table, name, c);
  }
  if (now - w->age < c->first_seen) c->first_seen = now - w->age;
  if (c->present[rank]) return;
  c->present[rank] = 1;
  c->sigs[rank] = w->sig;
  c->npresent++;
  coord_try_respond(k, c);
}

void hvd_coord_round(hvd_coord *k, const char *gathered, const int *lens, const int *displs, double now,
                     hvd_buf *resp) {
  k->resp = resp;
  hvd_buf_reset(k->resp);
  for (int r = 0; r < k->size; r++) {
    hvd_buf seg = {.p = (char *)gathered + displs[r], .len = (size_t)lens[r], .cap = (size_t)lens[r]};
    hvd_wire_req w;
    while (hvd_buf_more(&seg)) {
      if (hvd_wire_get_req(&seg, &w) != 0) HVD_FATAL("corrupt negotiation message from rank %d", r);
      coordinate_one(k, r, &w, now);
    }
  }
  if ((*k->njoined)) /* a rank that joined completes what waited only for it */
    for (hvd_coord_entry *c = k->head, *next; c; c = next) {
      next = c->next;
      coord_try_respond(k, c);
    }
  if (k->fatal_msg) {
    hvd_sig none = {0};
    hvd_wire_put_resp(k->resp, HVD_RESP_FATAL, &none, "", k->fatal_msg, NULL, 0);
  }
  /* round_invalidated only lives for this round */
  hvd_strmap_free(k->invalidated);
  k->invalidated = hvd_strmap_new();
  if (!k->invalidated || resp->bad) HVD_FATAL("out of memory (responses)");
}

/* Names of up to `max` entries (KIND 'name', ...) into out. */
static void name_list(const hvd_coord *k, hvd_coord_entry **items, int n, int max, char *out, size_t len) {
  size_t at = 0;
  out[0] = 0;
  for (int i = 0; i < n && i < max && at + 16 < len; i++)
    at += (size_t)snprintf(out + at, len - at, "%s%s '%s'", i ? ", " : "", hvd_kind_name(first_present(k, items[i])->kind),
                           items[i]->name);
  if (n > max && at + 8 < len) snprintf(out + at, len - at, ", ...");
}

static int same_ranks(const hvd_coord *k, const hvd_coord_entry *a, const hvd_coord_entry *b) {
  for (int r = 0; r < k->size; r++)
    if (!a->present[r] != !b->present[r]) return 0;
  return 1;
}

/* One warning line per stall: the stalled operations are grouped by which
 * ranks submitted them, and the line tells a rank that is late (it submitted
 * nothing else) from one that submitted something else (the ranks disagree on
 * what to run). */
int hvd_coord_stall_check(hvd_coord *k, double now) {
  if (now - k->last_stall_check < 0.1) return 0;
  k->last_stall_check = now;
  int n = 0;
  for (hvd_coord_entry *c = k->head; c; c = c->next) n += now - c->first_seen >= k->stall_warn;
  if (!n) return 0;
  hvd_coord_entry **stalled = malloc((size_t)n * sizeof *stalled), **group = malloc((size_t)n * sizeof *group);
  if (!stalled || !group) HVD_FATAL("out of memory (stall inspector)");
  int lines = 0;
  n = 0;
  for (hvd_coord_entry *c = k->head; c; c = c->next)
    if (now - c->first_seen >= k->stall_warn) stalled[n++] = c;
  for (int i = 0; i < n; i++) {
    if (!stalled[i]) continue;
    int ng = 0, due = 0;
    double age = 0;
    const hvd_coord_entry *lead = stalled[i];
    for (int j = i; j < n; j++) /* this group: the same submitting ranks */
      if (stalled[j] && same_ranks(k, lead, stalled[j]) && first_present(k, lead)->set == first_present(k, stalled[j])->set) {
        hvd_coord_entry *c = group[ng++] = stalled[j];
        stalled[j] = NULL;
        if (now - c->first_seen > age) age = now - c->first_seen;
        due |= now - c->last_warn >= k->stall_warn || (k->stall_shutdown > 0 && age >= k->stall_shutdown);
      }
    if (!due) continue;
    uint8_t covered[k->size], late[k->size];
    const hvd_sig *lead_sig = first_present(k, group[0]);
    for (int r = 0; r < k->size; r++)
      covered[r] = group[0]->present[r] || (k->joined[r] && !pset_kind(lead_sig->kind)) ||
                   !member(k, lead_sig->set, r),
      late[r] = !covered[r];
    /* what the late ranks submitted that the others did not (they disagree) */
    hvd_coord_entry *other[3];
    int nother = 0, more = 0;
    for (hvd_coord_entry *c = k->head; c; c = c->next) {
      int theirs = 0;
      for (int r = 0; r < k->size && !theirs; r++) theirs = late[r] && c->present[r];
      if (!theirs || same_ranks(k, c, group[0])) continue;
      if (nother < 3) other[nother++] = c;
      else more = 1;
    }
    char have[256], missing[256], names[512], others[512], msg[HVD_NAME_MAX + 2048];
    hvd_rank_list(group[0]->present, k->size, 1, have, sizeof have);
    hvd_rank_list(covered, k->size, 0, missing, sizeof missing);
    name_list(k, group, ng, 3, names, sizeof names);
    int at;
    if (ng == 1)
      at = snprintf(msg, sizeof msg, "stall: %s submitted by rank(s) %s has waited %.1f s for rank(s) %s", names, have,
                    age, missing);
    else
      at = snprintf(msg, sizeof msg, "stall: %d operations submitted by rank(s) %s have waited up to %.1f s for rank(s) %s "
                    "(%s)", ng, have, age, missing, names);
    if (nother) {
      name_list(k, other, nother + more, 3, others, sizeof others);
      snprintf(msg + at, sizeof msg - (size_t)at, "; rank(s) %s submitted other operations instead (%s): the ranks "
               "disagree on what to run (a rank skipped an operation or named it differently)", missing, others);
    } else {
      snprintf(msg + at, sizeof msg - (size_t)at, "; rank(s) %s submitted nothing else: late (still computing, blocked "
               "outside hvdshim, or stopped)", missing);
    }
    for (int g = 0; g < ng; g++) group[g]->last_warn = now;
    snprintf(k->last_line, sizeof k->last_line, "%s", msg);
    lines++;
    if (k->stall_shutdown > 0 && age >= k->stall_shutdown && !k->fatal_msg) {
      size_t len = strlen(msg) + 128;
      k->fatal_msg = malloc(len);
      if (k->fatal_msg)
        snprintf(k->fatal_msg, len, "%s; ending the job after HVDSHIM_STALL_SHUTDOWN_SECONDS=%g", msg, k->stall_shutdown);
    } else {
      HVD_WARN("%s", msg);
    }
  }
  free(stalled);
  free(group);
  return lines;
}

int hvd_coord_deadlock(hvd_coord *k, double window) {
  if (!k->head || k->fatal_msg) return 0;
  size_t len = 4096, at = 0;
  char *msg = malloc(len);
  if (!msg) HVD_FATAL("out of memory (deadlock report)");
  int n = 0;
  for (hvd_coord_entry *c = k->head; c; c = c->next) n++;
  at += (size_t)snprintf(msg, len, "deadlock: every rank has waited on hvdshim for HVDSHIM_DEADLOCK_SECONDS=%g without "
                         "submitting, and none of the %d operation(s) in flight can complete:", window, n);
  for (int r = 0; r < k->size && at + 64 < len; r++) {
    at += (size_t)snprintf(msg + at, len - at, "%s rank %d ", r ? ";" : "", r);
    if (k->joined[r]) {
      at += (size_t)snprintf(msg + at, len - at, "has finished (joined)");
      continue;
    }
    hvd_coord_entry *mine[3];
    int m = 0, more = 0;
    for (hvd_coord_entry *c = k->head; c; c = c->next)
      if (c->present[r]) {
        if (m < 3) mine[m++] = c;
        else more = 1;
      }
    if (!m) {
      at += (size_t)snprintf(msg + at, len - at, "submitted none of them");
      continue;
    }
    char names[1024];
    name_list(k, mine, m + more, 3, names, sizeof names);
    at += (size_t)snprintf(msg + at, len - at, "waits for %s", names);
  }
  if (at + 96 < len)
    snprintf(msg + at, len - at, " (each waits for ranks that wait for something else: the ranks took different paths)");
  snprintf(k->last_line, sizeof k->last_line, "%s", msg);
  k->fatal_msg = msg;
  return 1;
}
