/* The engine's control plane at many ranks, simulated in one process with
 * the project's own code (issue 56): how its cost grows with ranks P and
 * tensors a step T.
 *
 *   bench/control_sim [--ranks 64,256,...] [--tensors 10,100,1000]   (make bench-control)
 *
 * Two paths, as in engine_cycle.c:
 *
 * - The steady state (every tensor in the response cache): each cycle is
 *   one bitwise allreduce of a control vector whose size is fixed by the
 *   cache's capacity (1 + 2 x capacity/64 words), not by P; which ranks have
 *   joined goes in a second round only while some rank is joined.  Measured
 *   here: the vector's bytes and the CPU of one rank's part of the round
 *   (its AND of a peer's vector, done log2(P) times in a tree or recursive
 *   doubling) and of its cache walk (T lookups at admission, T bits), and,
 *   for comparison, the vector and the per-cycle loop over P joined-rank
 *   bits of the design before (its vector held a bit a rank).  The network's part is modelled, not measured:
 *   log2(P) x (latency + bytes / bandwidth), with the latency and bandwidth
 *   given (--alpha-us, --gbps; defaults 2 us and 10 GB/s, a typical
 *   InfiniBand fabric).
 * - The slow path (the first step, or after a cache miss): every rank's T
 *   request records are gathered to rank 0, whose coordinator
 *   (coordinator.c, hvd_coord_round) matches P x T records and answers T;
 *   the answer is broadcast.  Measured: the bytes rank 0 receives and the
 *   coordinator's CPU time for the round, run on P simulated ranks' records
 *   built with wire.c.
 *
 * Horovod 0.28's design for the same (common/response_cache.cc): its cache
 * coordinator's bit vector holds the cache's active bits plus four status
 * bits (shut down, uncached, invalid, just joined), ANDed across ranks every
 * cycle, and a second (OR) round only when a rank has invalid bits; its slow
 * path gathers requests to rank 0 as here.  Both are O(log P) a cycle in the
 * steady state and O(P x T) at rank 0 on the slow path. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/strmap.h"
#include "../collectives/hvdshim.h"
#include "../collectives/negotiation/cache.h"
#include "../collectives/negotiation/coordinator.h"
#include "../collectives/negotiation/wire.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static int never_cached(const char *name, void *ctx) { return (void)name, (void)ctx, 0; }

static volatile uint64_t sink;

/* The steady state: one rank's CPU for a cycle's control round with T
 * tensors, against a peer's vector (ns), and its vector's words. */
static double steady_cpu_ns(int cap, int T, int reps, int *words) {
  int wc = (cap + 63) / 64, nw = 1 + 2 * wc;
  *words = nw;
  uint64_t *v = calloc((size_t)nw, 8), *peer = calloc((size_t)nw, 8);
  hvd_cache c;
  if (!v || !peer || hvd_cache_init(&c, cap) != 0) {
    fprintf(stderr, "control_sim: out of memory\n");
    exit(1);
  }
  hvd_sig sig = {.kind = HVD_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .op = HVD_AVG, .count = 1000};
  int *bits = malloc(sizeof(int) * (size_t)T);
  char(*names)[64] = malloc(64 * (size_t)T);
  if (!bits || !names) {
    fprintf(stderr, "control_sim: out of memory\n");
    exit(1);
  }
  for (int t = 0; t < T; t++) { /* the cache as a step's tensors fill it */
    snprintf(names[t], sizeof names[t], "model.layer%d.weight", t);
    void *evicted = NULL;
    bits[t] = hvd_cache_insert(&c, names[t], &sig, (uint64_t)t, &evicted);
  }
  memset(peer, 0xff, (size_t)nw * 8);
  double t0 = now_s();
  for (int r = 0; r < reps; r++) {
    memset(v, 0, (size_t)nw * 8);
    for (int t = 0; t < T; t++) { /* admission: each submitted tensor's name to its bit */
      int b = hvd_cache_lookup(&c, names[t]);
      v[1 + b / 64] |= (uint64_t)1 << (b % 64);
    }
    for (int w = 0; w < nw; w++) v[w] &= peer[w]; /* one peer's part of the BAND */
    uint64_t n = 0;
    for (int w = 1; w <= wc; w++) n += (uint64_t)__builtin_popcountll(v[w]); /* take */
    sink += n;
  }
  double per = (now_s() - t0) / reps * 1e9;
  hvd_cache_free(&c);
  free(v), free(peer), free(bits), free(names);
  return per;
}

/* The joined-ranks loop the control round ran every cycle before (P bits),
 * now only in cycles where a rank is joined (ns). */
static double joined_loop_ns(int P, int reps) {
  int wr = (P + 63) / 64;
  uint64_t *jv = malloc(sizeof(uint64_t) * (size_t)wr);
  uint8_t *joined = malloc((size_t)P);
  memset(jv, 0xff, sizeof(uint64_t) * (size_t)wr);
  double t0 = now_s();
  for (int r = 0; r < reps; r++) {
    int n = 0;
    for (int k = 0; k < P; k++) {
      int j = !(jv[k / 64] & ((uint64_t)1 << (k % 64)));
      joined[k] = (uint8_t)j;
      n += j;
    }
    sink += (uint64_t)n + joined[r % P];
  }
  double per = (now_s() - t0) / reps * 1e9;
  free(jv), free(joined);
  return per;
}

/* The slow path: P ranks' T requests through the coordinator once; the
 * seconds of hvd_coord_round, the bytes gathered at rank 0 and the bytes
 * of the answer. */
static double slow_round(int P, int T, size_t *gathered_bytes, size_t *resp_bytes) {
  hvd_buf all = {0}, resp = {0}, one = {0};
  int *lens = malloc(sizeof(int) * (size_t)P * 2), *displs = lens + P;
  uint8_t *joined = calloc((size_t)P, 1);
  int njoined = 0;
  hvd_coord k;
  if (!lens || !joined || hvd_coord_init(&k, P, joined, &njoined, 60.0, 0.0, never_cached, NULL) != 0) {
    fprintf(stderr, "control_sim: out of memory\n");
    exit(1);
  }
  hvd_sig sig = {.kind = HVD_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .op = HVD_AVG, .count = 1000};
  char name[64];
  for (int t = 0; t < T; t++) { /* every rank sends the same records */
    snprintf(name, sizeof name, "model.layer%d.weight", t);
    hvd_wire_put_req(&one, &sig, 0.0, name);
  }
  hvd_buf_reserve(&all, one.len * (size_t)P + 1);
  for (int r = 0; r < P; r++) {
    displs[r] = (int)all.len;
    lens[r] = (int)one.len;
    hvd_buf_put(&all, one.p, one.len);
  }
  *gathered_bytes = all.len;
  double t0 = now_s();
  hvd_coord_round(&k, all.p, lens, displs, 1.0, &resp);
  double dt = now_s() - t0;
  *resp_bytes = resp.len;
  hvd_coord_free(&k);
  hvd_buf_free(&all), hvd_buf_free(&resp), hvd_buf_free(&one);
  free(lens), free(joined);
  return dt;
}

int main(int argc, char **argv) {
  int ranks[32] = {64, 256, 1024, 4096, 16384}, nr = 5;
  int tensors[16] = {10, 100, 1000}, nt = 3;
  double alpha_us = 2.0, gbps = 10.0;
  int cap = 1024; /* HVDSHIM_CACHE_CAPACITY's default */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) nr = parse_list(argv[++i], ranks, 32);
    else if (!strcmp(argv[i], "--tensors") && i + 1 < argc) nt = parse_list(argv[++i], tensors, 16);
    else if (!strcmp(argv[i], "--alpha-us") && i + 1 < argc) alpha_us = atof(argv[++i]);
    else if (!strcmp(argv[i], "--gbps") && i + 1 < argc) gbps = atof(argv[++i]);
    else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) cap = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: control_sim [--ranks P,...] [--tensors T,...] [--alpha-us US] [--gbps GB/s] "
                      "[--capacity N]\n");
      return 2;
    }
    if (nr < 1 || nt < 1 || cap < 1 || alpha_us < 0 || gbps <= 0) {
      fprintf(stderr, "control_sim: bad value for %s\n", argv[i - 1]);
      return 2;
    }
  }
  printf("hvdshim control plane, simulated (cache capacity %d; network modelled: %.1f us a message, %.0f GB/s)\n",
         cap, alpha_us, gbps);
  printf("\nsteady state, a cycle (every tensor cached): one allreduce of the control vector\n");
  printf("%7s %6s %9s %13s %12s %19s %19s %16s\n", "ranks", "T", "vector B", "old vector B", "CPU/rank us",
         "network us (model)", "rank 0 bytes/cycle", "old P-bit loop us");
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nt; j++) {
      int P = ranks[i], T = tensors[j] < cap ? tensors[j] : cap, words;
      double lg = ceil(log2((double)P));
      double cpu_ns = steady_cpu_ns(cap, T, 2000, &words);
      double bytes = words * 8.0;
      double cpu_us = (cpu_ns + (lg - 1) * words * 0.3) / 1e3; /* the other log2(P)-1 ANDs: ~0.3 ns a word */
      double net_us = lg * (alpha_us + bytes / (gbps * 1e3));
      printf("%7d %6d %9.0f %13.0f %12.2f %19.1f %19.0f %16.2f\n", P, T, bytes, bytes + 8.0 * ((P + 63) / 64),
             cpu_us, net_us, 2 * lg * bytes, joined_loop_ns(P, 2000) / 1e3);
    }
  printf("\nslow path (first step, or a cache miss): every rank's requests gathered at rank 0\n");
  printf("%7s %6s %18s %18s %22s %20s\n", "ranks", "T", "gathered at rank 0", "answer bytes", "coordinator ms (CPU)",
         "network ms (model)");
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nt; j++) {
      int P = ranks[i], T = tensors[j];
      size_t g, rb;
      double dt = slow_round(P, T, &g, &rb);
      double lg = ceil(log2((double)P));
      double net_ms = (lg * alpha_us + (double)g / (gbps * 1e3) + lg * (alpha_us + (double)rb / (gbps * 1e3))) / 1e3;
      printf("%7d %6d %18zu %18zu %22.2f %20.2f\n", P, T, g, rb, dt * 1e3, net_ms);
    }
  return (int)(sink & 0);
}
