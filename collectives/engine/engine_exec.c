/* Execution, on the engine thread: the list every rank agreed on this
 * cycle (e->exec, cached-ready tensors in bit order, then the slow path's
 * responses in the coordinator's order) is walked in order; consecutive
 * allreduces of one dtype, place and compatible op are grouped up to the
 * fusion threshold and reduced by a backend (backend.h: on the host
 * hvd_backend_shm when the job's ranks share memory and the group is the
 * global set's, else hvd_backend_mpi; on the device gpu.c around the device
 * backend chosen at start); broadcasts, allgathers and barriers run one at
 * a time; handles complete.  Every rank groups the same list the same way: a rank outside
 * an operation's process set walks it as a stand-in ("skip") that groups
 * like the members' request and runs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/config.h"
#include "../../base/log.h"
#include "../transports/backend_mpi.h"
#include "../transports/dtype.h"
#include "engine_internal.h"
#include "handles.h"
#include "../transports/liveness.h"
#include "../observers/metrics.h"
#include "../transports/shm.h"
#include "../observers/timeline.h"

static int fusable(const hvd_req *a, const hvd_req *b) {
  if (b->sig.kind != HVD_KIND_ALLREDUCE || a->sig.dtype != b->sig.dtype || a->sig.place != b->sig.place ||
      a->sig.set != b->sig.set)
    return 0;
  int sa = a->sig.op == HVD_SUM || a->sig.op == HVD_AVG, sb = b->sig.op == HVD_SUM || b->sig.op == HVD_AVG;
  return sa ? sb : a->sig.op == b->sig.op;
}

/* Frees the stand-ins of exec items [i, j) (another set's operations). */
static void drop_skipped(hvd_engine *e, size_t i, size_t j) {
  for (size_t k = i; k < j; k++) hvd_eng_req_free(e->exec[k].req);
}

/* The communicator of r's process set; MPI_COMM_NULL (r finished with an
 * error) when the set was removed before r ran. */
static MPI_Comm set_comm(hvd_engine *e, hvd_req *r) {
  const hvd_pset *p = hvd_pset_get(e, r->sig.set);
  if (p && p->comm != MPI_COMM_NULL) return p->comm;
  char msg[HVD_NAME_MAX + 128];
  snprintf(msg, sizeof msg, "%s '%s': process set %d was removed before it ran", hvd_kind_name(r->sig.kind), r->name,
           (int)r->sig.set);
  hvd_eng_finish(e, r, HVD_ERR_INVALID, msg, NULL, 0);
  return MPI_COMM_NULL;
}

/* The device backend; with HVDSHIM_GPU_OPERATIONS=auto decided at the first
 * GPU operation, which every rank executes in the same cycle. */
static const hvd_backend *device_backend(hvd_engine *e) {
  if (!e->dev_bk) {
    char err[512];
    const hvd_backend *b = hvd_gpu_pick(e->comm, err, sizeof err);
    if (!b) HVD_FATAL("choosing how GPU buffers are reduced (HVDSHIM_GPU_OPERATIONS=auto): %s", err);
    __atomic_store_n(&e->dev_bk, b, __ATOMIC_RELEASE); /* read by submissions (the int16 refusal) */
  }
  return e->dev_bk;
}

static hvd_eng_rc run_allreduce_group(hvd_engine *e, size_t i, size_t j) {
  size_t n = j - i, total = 0;
  if (e->exec[i].req->skip) {
    drop_skipped(e, i, j);
    return HVD_ENG_OK;
  }
  MPI_Comm comm = set_comm(e, e->exec[i].req); /* a group is one set's */
  if (comm == MPI_COMM_NULL) {
    for (size_t k = i + 1; k < j; k++) set_comm(e, e->exec[k].req);
    return HVD_ENG_OK;
  }
  int active = hvd_pset_active(e, e->exec[i].req->sig.set); /* averages: over the set's ranks still submitting */
  hvd_eng_grow(&e->fuse, &e->capfuse, n, sizeof *e->fuse, "fusion");
  hvd_dtype_t dt = (hvd_dtype_t)e->exec[i].req->sig.dtype;
  size_t es = hvd_dtype_size(dt);
  hvd_op_t op = (hvd_op_t)e->exec[i].req->sig.op;
  if (op == HVD_AVG) op = HVD_SUM;
  for (size_t k = 0; k < n; k++) {
    hvd_req *r = e->exec[i + k].req;
    e->fuse[k].ptr = r->buf;
    e->fuse[k].bytes = (size_t)r->sig.count * es;
    e->fuse[k].divisor = r->sig.op == HVD_AVG ? active : 1;
    total += e->fuse[k].bytes;
  }
  hvd_phase_times t = {0, 0, 0};
  int place = e->exec[i].req->sig.place;
  const hvd_backend *b = place                                             ? device_backend(e)
                         : e->exec[i].req->sig.set == 0 && hvd_shm_active() ? &hvd_backend_shm
                                                                             : &hvd_backend_mpi;
  hvd_bk_ctx ctx = {comm, e->chunk, NULL};
  hvd_gpu_event *done = NULL;
  char err[512];
  int rc;
  double start = hvd_mono_s();
  if (place) {
    hvd_eng_grow(&e->gpu_items, &e->capgpu, n, sizeof *e->gpu_items, "GPU group");
    for (size_t k = 0; k < n; k++) {
      hvd_req *r = e->exec[i + k].req;
      e->gpu_items[k] = (hvd_gpu_item){r->buf, (size_t)r->sig.count, e->fuse[k].divisor, r->ready};
    }
    int all_avg = e->njoined == 0;
    for (size_t k = 0; k < n && all_avg; k++) all_avg = e->exec[i + k].req->sig.op == HVD_AVG;
    rc = hvd_gpu_allreduce(e->gpu_items, n, dt, op, all_avg, b, &ctx, &done, &t, err, sizeof err);
  } else {
    rc = b->allreduce(e->fuse, n, dt, op, &ctx, &t, err, sizeof err);
  }
  if (rc != 0)
    return HVD_ENG_COLLECTIVE_FAILED(e, "%s allreduce of '%s'%s: %s", b->name, e->exec[i].req->name,
                                     n > 1 ? " and the tensors fused with it" : "", err);
  int shm = b == &hvd_backend_shm;
  double end = hvd_mono_s();
  e->stats.groups++;
  e->stats.bytes_reduced += total;
  e->stats.comm_seconds += end - start;
  if (n > 1) e->stats.fused_tensors += n;
  if (hvd_timeline_enabled()) {
    double s = hvd_eng_us(e, start);
    for (size_t k = 0; k < n; k++) {
      hvd_req *r = e->exec[i + k].req;
      hvd_timeline_span(r->name, "QUEUE", hvd_eng_us(e, r->t_ready), s - hvd_eng_us(e, r->t_ready));
      double at = s;
      if (n > 1 || shm)
        hvd_timeline_span(r->name, shm ? "MEMCPY_IN_SHARED_BUFFER" : "MEMCPY_IN_FUSION_BUFFER", at, t.copy_in_us),
            at += t.copy_in_us;
      hvd_timeline_span(r->name, b->allreduce_span, at, t.reduce_us), at += t.reduce_us;
      if (t.copy_out_us > 0)
        hvd_timeline_span(r->name, shm ? "MEMCPY_OUT_SHARED_BUFFER" : n > 1 ? "MEMCPY_OUT_FUSION_BUFFER" : "SCALE", at,
                          t.copy_out_us);
    }
  }
  hvd_eng_grow(&e->handles, &e->caphandles, n, sizeof *e->handles, "completions");
  for (size_t k = 0; k < n; k++) {
    hvd_req *r = e->exec[i + k].req;
    e->handles[k] = r->handle;
    hvd_strmap_del(e->pending, r->name);
    e->npending--;
    hvd_eng_req_free(r);
  }
  hvd_handles_complete_ok(e->handles, n, done);
  hvd_gpu_event_put(done); /* the handles hold their own references */
  return HVD_ENG_OK;
}

static void note_start(hvd_engine *e, hvd_req *r) {
  if (hvd_timeline_enabled() && !r->skip)
    hvd_timeline_span(r->name, "NEGOTIATE", hvd_eng_us(e, r->t_submit), (r->t_ready - r->t_submit) * 1e6);
  e->stats.tensors += !r->skip;
  e->tick++;
  int bit = hvd_cache_lookup(&e->cache, r->name);
  if (bit >= 0) e->cache.e[bit].last_used = e->tick;
}

/* This rank's index in set p. */
static int set_index(hvd_engine *e, const hvd_pset *p) {
  for (int m = 0; m < p->n; m++)
    if (p->ranks[m] == e->rank) return m;
  return -1;
}

/* Horovod's split: member m gets rows / n rows, plus one for the first
 * rows % n members; counts in elements. */
static hvd_eng_rc run_reducescatter(hvd_engine *e, hvd_req *r, const hvd_pset *p, MPI_Comm comm, double start) {
  int n = p->n, me = set_index(e, p), counts[n];
  int64_t re = r->sig.row_elems, rows = re ? r->sig.count / re : 0;
  for (int m = 0; m < n; m++) counts[m] = (int)((rows / n + (m < rows % n)) * re);
  if (!r->phantom && counts[me] > 0 && !r->buf) {
    char msg[HVD_NAME_MAX + 128];
    snprintf(msg, sizeof msg, "reducescatter '%s': no output buffer for this rank's %d element(s)", r->name,
             counts[me]);
    hvd_eng_finish(e, r, HVD_ERR_INVALID, msg, NULL, 0);
    return HVD_ENG_OK;
  }
  hvd_dtype_t dt = (hvd_dtype_t)r->sig.dtype;
  hvd_op_t op = r->sig.op == HVD_AVG ? HVD_SUM : (hvd_op_t)r->sig.op;
  /* a joined rank reduces its identity buffer in place */
  if (hvd_eng_mpi_check(e, hvd_mpi_reducescatter(r->phantom ? NULL : r->in, r->buf, counts, dt, op, comm),
                        "MPI_Reduce_scatter") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  if (r->sig.op == HVD_AVG && counts[me] > 0)
    hvd_scale_copy(r->buf, r->buf, (size_t)counts[me], dt, hvd_pset_active(e, r->sig.set));
  if (hvd_timeline_enabled())
    hvd_timeline_span(r->name, "MPI_REDUCESCATTER", hvd_eng_us(e, start), (hvd_mono_s() - start) * 1e6);
  e->stats.bytes_reduced += (size_t)r->sig.count * hvd_dtype_size(dt);
  hvd_eng_finish(e, r, HVD_OK, NULL, NULL, 0);
  return HVD_ENG_OK;
}

/* A joined rank sends nothing and drops what it receives. */
static hvd_eng_rc run_alltoall(hvd_engine *e, hvd_req *r, const hvd_pset *p, MPI_Comm comm, double start) {
  int n = p->n;
  int64_t send[n], recv[n], total = 0;
  for (int m = 0; m < n; m++) send[m] = r->splits && !r->phantom ? r->splits[m] : 0;
  void *out = NULL;
  char err[256];
  int rc = hvd_mpi_alltoall(r->in, send, (size_t)r->sig.row_elems, (hvd_dtype_t)r->sig.dtype, &out, recv, &total,
                            comm, err, sizeof err);
  if (rc == MPI_ERR_NO_MEM) HVD_FATAL("alltoall '%s': %s", r->name, err);
  if (rc == MPI_ERR_COUNT) {
    free(out);
    char msg[HVD_NAME_MAX + 300];
    snprintf(msg, sizeof msg, "alltoall '%s': %s", r->name, err);
    hvd_eng_finish(e, r, HVD_ERR_INVALID, msg, NULL, 0);
    return HVD_ENG_OK;
  }
  if (hvd_eng_mpi_check(e, rc, "MPI_Alltoallv") != HVD_ENG_OK) return HVD_ENG_RECOVER;
  if (r->recv_splits) memcpy(r->recv_splits, recv, sizeof recv);
  if (hvd_timeline_enabled())
    hvd_timeline_span(r->name, "MPI_ALLTOALL", hvd_eng_us(e, start), (hvd_mono_s() - start) * 1e6);
  hvd_eng_finish(e, r, HVD_OK, NULL, out, (size_t)total);
  return HVD_ENG_OK;
}

/* Walk the agreed list in order.  An allreduce starts a group and pulls in
 * every later allreduce of the same dtype and a compatible op while the group
 * stays under the fusion threshold (as Horovod does), so a list interleaving
 * dtypes still fuses.  Every rank walks the same list the same way.  A
 * collective that fails in an elastic job stops the walk: HVD_ENG_RECOVER,
 * and what is left of the list stays pending for the recovery to fail. */
hvd_eng_rc hvd_eng_execute(hvd_engine *e) {
  size_t i = 0;
  while (i < e->nexec) {
    hvd_req *r = e->exec[i].req;
    if (!r) { /* pulled into an earlier group */
      i++;
      continue;
    }
    note_start(e, r);
    if (r->sig.kind == HVD_KIND_ALLREDUCE) {
      size_t es = hvd_dtype_size((hvd_dtype_t)r->sig.dtype), bytes = (size_t)r->sig.count * es, end = i + 1;
      for (size_t j = i + 1; e->fusion > 0 && j < e->nexec && bytes < e->fusion; j++) {
        hvd_req *q = e->exec[j].req;
        if (!q || !fusable(r, q)) continue;
        size_t b = (size_t)q->sig.count * es;
        if (bytes + b > e->fusion) continue;
        bytes += b;
        note_start(e, q);
        /* move q next to the group: shift the items between down by one */
        memmove(&e->exec[end + 1], &e->exec[end], (j - end) * sizeof *e->exec);
        e->exec[end].req = q;
        e->exec[end].rows = NULL;
        end++;
      }
      if (run_allreduce_group(e, i, end) != HVD_ENG_OK) return HVD_ENG_RECOVER;
      hvd_liveness_tick();
      i = end;
      continue;
    }
    double start = hvd_mono_s();
    MPI_Comm comm;
    const hvd_pset *ps = hvd_pset_get(e, r->sig.set);
    if (r->skip) {
      hvd_eng_req_free(r);
    } else if (r->sig.kind == HVD_KIND_PSET_ADD || r->sig.kind == HVD_KIND_PSET_REMOVE) {
      if (hvd_pset_execute(e, r) != HVD_ENG_OK) return HVD_ENG_RECOVER;
    } else if ((comm = set_comm(e, r)) == MPI_COMM_NULL) {
      /* finished with the reason */
    } else if (r->sig.kind == HVD_KIND_BROADCAST) {
      /* the root's index in the set (its rank in the set's communicator);
       * HVD_ROOT_FIRST_ACTIVE: the lowest member still running (one always is) */
      int set_root = 0;
      if (r->sig.root == HVD_ROOT_FIRST_ACTIVE)
        while (set_root + 1 < ps->n && e->joined[ps->ranks[set_root]]) set_root++;
      else
        while (ps->ranks[set_root] != r->sig.root) set_root++;
      int root = ps->ranks[set_root];
      if (e->joined[root]) {
        char msg[HVD_NAME_MAX + 200];
        snprintf(msg, sizeof msg, "broadcast '%s': root rank %d has finished (joined) and has no data to send; "
                 "broadcast from a rank still running, or from HVD_ROOT_FIRST_ACTIVE", r->name, root);
        if (!r->phantom) HVD_ERROR("%s", msg);
        hvd_eng_finish(e, r, HVD_ERR_SHUTDOWN, msg, NULL, 0);
      } else if (r->sig.place) {
        /* device operations run on the global set: root is its own rank there */
        hvd_gpu_item item = {r->buf, (size_t)r->sig.count, 1, r->ready};
        hvd_gpu_event *done = NULL;
        hvd_bk_ctx ctx = {e->comm, e->chunk, NULL};
        char err[512];
        if (hvd_gpu_broadcast(&item, (hvd_dtype_t)r->sig.dtype, root, device_backend(e), &ctx, &done, err, sizeof err) != 0)
          return HVD_ENG_COLLECTIVE_FAILED(e, "%s broadcast of '%s': %s", e->dev_bk->name, r->name, err);
        if (hvd_timeline_enabled())
          hvd_timeline_span(r->name, e->dev_bk->broadcast_span, hvd_eng_us(e, start), (hvd_mono_s() - start) * 1e6);
        hvd_eng_finish_gpu(e, r, done);
      } else {
        hvd_bk_ctx ctx = {comm, e->chunk, NULL};
        char err[512];
        if (hvd_backend_mpi.broadcast(r->buf, (size_t)r->sig.count, (hvd_dtype_t)r->sig.dtype, set_root, &ctx, err,
                                      sizeof err) != 0)
          return HVD_ENG_COLLECTIVE_FAILED(e, "broadcast of '%s': %s", r->name, err);
        if (hvd_timeline_enabled())
          hvd_timeline_span(r->name, hvd_backend_mpi.broadcast_span, hvd_eng_us(e, start), (hvd_mono_s() - start) * 1e6);
        hvd_eng_finish(e, r, HVD_OK, NULL, NULL, 0);
      }
    } else if (r->sig.kind == HVD_KIND_ALLGATHER) {
      int64_t all[e->size], rows[ps->n], total_rows = 0; /* the members' rows, in the set's rank order */
      memcpy(all, e->exec[i].rows, sizeof all);
      for (int m = 0; m < ps->n; m++) total_rows += rows[m] = all[ps->ranks[m]];
      size_t bytes = (size_t)total_rows * (size_t)r->sig.row_elems * hvd_dtype_size((hvd_dtype_t)r->sig.dtype);
      void *out = malloc(bytes ? bytes : 1);
      char err[256];
      if (!out) HVD_FATAL("out of memory: allgather '%s' needs %zu bytes", r->name, bytes);
      hvd_bk_ctx ctx = {comm, e->chunk, NULL};
      int rc = hvd_backend_mpi.allgather(r->in, out, rows, (size_t)r->sig.row_elems, (hvd_dtype_t)r->sig.dtype, &ctx,
                                         err, sizeof err);
      if (rc == -2) { /* counts past INT_MAX: this request fails, the job goes on */
        free(out);
        hvd_eng_finish(e, r, HVD_ERR_INVALID, err, NULL, 0);
      } else {
        if (rc != 0) return HVD_ENG_COLLECTIVE_FAILED(e, "allgather of '%s': %s", r->name, err);
        if (hvd_timeline_enabled())
          hvd_timeline_span(r->name, "MPI_ALLGATHER", hvd_eng_us(e, start), (hvd_mono_s() - start) * 1e6);
        hvd_eng_finish(e, r, HVD_OK, NULL, out, (size_t)total_rows);
      }
    } else if (r->sig.kind == HVD_KIND_REDUCESCATTER) {
      if (run_reducescatter(e, r, ps, comm, start) != HVD_ENG_OK) return HVD_ENG_RECOVER;
    } else if (r->sig.kind == HVD_KIND_ALLTOALL) {
      if (run_alltoall(e, r, ps, comm, start) != HVD_ENG_OK) return HVD_ENG_RECOVER;
    } else {
      hvd_eng_finish(e, r, HVD_OK, NULL, NULL, 0); /* barrier: negotiation was the barrier */
    }
    e->stats.comm_seconds += hvd_mono_s() - start;
    hvd_liveness_tick();
    i++;
  }
  e->nexec = 0;
  return HVD_ENG_OK;
}

