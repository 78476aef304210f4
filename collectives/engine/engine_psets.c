/* Process sets: sub-groups of the job's ranks, each with its own
 * communicator, so that collectives can run among some ranks only.
 *
 * Adding and removing a set are negotiated operations every rank submits
 * (hvd_process_set_add/remove in engine_api.c): the coordinator compares the
 * member lists, and every rank runs them at the same point of the agreed
 * order, so a set has the same id everywhere.  Every rank keeps every set,
 * members or not: the coordinator (rank 0, member or not) waits for a set's
 * members only, and a rank outside a set walks the set's operations in the
 * agreed list as stand-ins it never runs ("skip" requests), keeping its
 * response cache and its grouping in step with the members.  Members meet
 * their sets' collectives in the agreed order, so two overlapping sets
 * cannot deadlock.  Averages divide by the set's members still submitting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/log.h"
#include "engine_internal.h"
#include "handles.h"

static hvd_pset *pset_new(hvd_engine *e, const int *ranks, int n) {
  hvd_pset *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->ranks = malloc(sizeof(int) * (size_t)(n ? n : 1));
  p->member = calloc((size_t)e->size, 1);
  if (!p->ranks || !p->member) {
    free(p->ranks);
    free(p->member);
    free(p);
    return NULL;
  }
  memcpy(p->ranks, ranks, sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) p->member[ranks[i]] = 1;
  p->n = n;
  p->comm = MPI_COMM_NULL;
  return p;
}

static void pset_free(hvd_engine *e, hvd_pset *p, int mpi_up) {
  if (p->comm != MPI_COMM_NULL && p->comm != e->comm && mpi_up) MPI_Comm_free(&p->comm);
  free(p->ranks);
  free(p->member);
  free(p);
}

int hvd_psets_start(hvd_engine *e) {
  int *all = malloc(sizeof(int) * (size_t)e->size);
  if (!all) return -1;
  for (int r = 0; r < e->size; r++) all[r] = r;
  hvd_pset *p = pset_new(e, all, e->size);
  free(all);
  if (!p) return -1;
  p->comm = e->comm;
  __atomic_store_n(&e->psets[0], p, __ATOMIC_RELEASE);
  if (e->npsets == 0) e->npsets = 1; /* after a rebuild, the ids of the sets that ended stay taken */
  return 0;
}

void hvd_psets_retire(hvd_engine *e, int mpi_up) {
  size_t n = 0;
  for (int i = 0; i < e->npsets; i++) n += e->psets[i] != NULL;
  hvd_pset **r = realloc(e->retired, (e->nretired + n + 1) * sizeof *r);
  if (!r) HVD_FATAL("out of memory (rebuilding the process sets)");
  e->retired = r;
  for (int i = 0; i < e->npsets; i++) {
    hvd_pset *p = e->psets[i];
    if (!p) continue;
    __atomic_store_n(&e->psets[i], NULL, __ATOMIC_RELEASE);
    if (p->comm != MPI_COMM_NULL && p->comm != e->comm && mpi_up) MPI_Comm_free(&p->comm);
    p->comm = MPI_COMM_NULL;
    __atomic_store_n(&p->removed, 1, __ATOMIC_RELEASE);
    e->retired[e->nretired++] = p;
  }
}

void hvd_psets_free(hvd_engine *e, int mpi_up) {
  for (int i = 0; i < e->npsets; i++) {
    hvd_pset *p = e->psets[i];
    __atomic_store_n(&e->psets[i], NULL, __ATOMIC_RELEASE);
    if (p) pset_free(e, p, mpi_up);
  }
  e->npsets = 0;
}

const hvd_pset *hvd_pset_get(hvd_engine *e, int id) {
  if (id < 0 || id >= HVD_MAX_PSETS) return NULL;
  return __atomic_load_n(&e->psets[id], __ATOMIC_ACQUIRE);
}

int hvd_pset_member(hvd_engine *e, int id, int rank) {
  const hvd_pset *p = hvd_pset_get(e, id);
  return p && rank >= 0 && rank < e->size && p->member[rank];
}

int hvd_pset_active(hvd_engine *e, int id) {
  if (id == 0) return e->size - e->njoined;
  const hvd_pset *p = hvd_pset_get(e, id);
  int n = 0;
  for (int i = 0; p && i < p->n; i++) n += !e->joined[p->ranks[i]];
  return n;
}

const char *hvd_pset_refuse(hvd_engine *e, const hvd_sig *sig, int device) {
  static _Thread_local char why[512];
  if (sig->set == 0 || sig->kind == HVD_KIND_PSET_ADD || sig->kind == HVD_KIND_PSET_REMOVE) return NULL;
  const hvd_pset *p = hvd_pset_get(e, sig->set);
  if (!p || __atomic_load_n(&p->removed, __ATOMIC_ACQUIRE)) {
    snprintf(why, sizeof why, "process set %d does not exist (never added, or removed)", (int)sig->set);
    return why;
  }
  char list[256];
  hvd_rank_list(p->member, e->size, 1, list, sizeof list);
  if (!p->member[e->rank])
    snprintf(why, sizeof why, "rank %d is not in process set %d (ranks %s): only its members run its operations",
             e->rank, (int)sig->set, list);
  else if (device >= 0)
    snprintf(why, sizeof why, "GPU tensors run on the global process set only in this version (process set %d); "
             "copy the tensor to the host for the set's operation", (int)sig->set);
  else if (sig->kind == HVD_KIND_BROADCAST && sig->root >= 0 && !p->member[sig->root])
    snprintf(why, sizeof why, "root rank %d is not in process set %d (ranks %s)", sig->root, (int)sig->set, list);
  else
    return NULL;
  return why;
}

/* Every rank, at the same point of the agreed list. */
hvd_eng_rc hvd_pset_execute(hvd_engine *e, hvd_req *r) {
  char msg[HVD_NAME_MAX + 256];
  if (r->phantom) /* a rank that finished while adding or removing a set: the others' MPI calls would not match */
    HVD_FATAL("this rank finished (hvd_shutdown or exit) while every rank was %s; end every rank's %s first",
              r->sig.kind == HVD_KIND_PSET_ADD ? "adding a process set" : "removing a process set",
              r->sig.kind == HVD_KIND_PSET_ADD ? "hvd_process_set_add" : "hvd_process_set_remove");
  if (r->sig.kind == HVD_KIND_PSET_REMOVE) {
    hvd_pset *p = (hvd_pset *)hvd_pset_get(e, r->sig.root);
    if (!p || r->sig.root == 0 || __atomic_load_n(&p->removed, __ATOMIC_ACQUIRE)) {
      snprintf(msg, sizeof msg, "process set remove: process set %d does not exist (never added, or removed)",
               r->sig.root);
      hvd_eng_finish(e, r, HVD_ERR_INVALID, msg, NULL, 0);
      return HVD_ENG_OK;
    }
    if (p->comm != MPI_COMM_NULL &&
        hvd_eng_mpi_check(e, MPI_Comm_free(&p->comm), "MPI_Comm_free (process set remove)") != HVD_ENG_OK)
      return HVD_ENG_RECOVER;
    __atomic_store_n(&p->removed, 1, __ATOMIC_RELEASE);
    HVD_DEBUG("process set %d removed", r->sig.root);
    hvd_eng_finish(e, r, HVD_OK, NULL, NULL, 0);
    return HVD_ENG_OK;
  }
  hvd_pset_arg *a = r->buf;
  if (e->npsets >= HVD_MAX_PSETS) {
    snprintf(msg, sizeof msg, "process set add: this job has added %d process sets, the most hvdshim keeps "
             "(removed sets count too)", HVD_MAX_PSETS - 1);
    hvd_eng_finish(e, r, HVD_ERR_INVALID, msg, NULL, 0);
    return HVD_ENG_OK;
  }
  hvd_pset *p = pset_new(e, a->ranks, a->n);
  if (!p) HVD_FATAL("out of memory (process set)");
  if (hvd_eng_mpi_check(e, MPI_Comm_split(e->comm, p->member[e->rank] ? 0 : MPI_UNDEFINED, e->rank, &p->comm),
                        "MPI_Comm_split (process set add)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  if (p->comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
  a->id = e->npsets;
  __atomic_store_n(&e->psets[e->npsets], p, __ATOMIC_RELEASE);
  e->npsets++;
  HVD_DEBUG("process set %d added: %d rank(s)", a->id, a->n);
  hvd_eng_finish(e, r, HVD_OK, NULL, NULL, 0);
  return HVD_ENG_OK;
}
