/* wire: a network link between two namespaces through this program, with
 * netem's delay and loss, for tests/launcher/netem.sh on kernels without
 * sch_netem (`tc qdisc add ... netem` fails there: this VM's, the lent GPU
 * machines', the stacks' chroots, which share the host's kernel).
 *
 *   wire NETNS_A DEV_A NETNS_B DEV_B DELAY_MS LOSS_PERCENT
 *
 * Makes the TUN device DEV_A in the network namespace whose file is
 * NETNS_A (/run/netns/NAME) and DEV_B in NETNS_B, prints "ready" once both
 * exist, then carries every IP packet one reads to the other, DELAY_MS
 * later (each way, as `netem delay` on both ends), dropping LOSS_PERCENT of
 * them at random (each way, as `netem loss`); a queue of more than 10000
 * packets drops the newest (netem's limit is 1000).  The caller gives the
 * devices their addresses (`ip addr add A peer B dev DEV_A`) and brings
 * them up.  Runs until SIGTERM or SIGINT, then prints what it carried and
 * dropped.  Needs root (setns, /dev/net/tun). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define LIMIT 10000
#define MAXPKT 65536

typedef struct {
  long long due;
  int len;
  unsigned char *data;
} pkt;

typedef struct {
  pkt q[LIMIT];
  int head, n;
  long long carried, dropped, bytes;
} lane;

static volatile sig_atomic_t stop;
static void on_stop(int sig) { (void)sig, stop = 1; }

static long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

static int tun_in(const char *nsfile, const char *dev) {
  int ns = open(nsfile, O_RDONLY | O_CLOEXEC);
  if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
    fprintf(stderr, "wire: cannot enter %s: %s\n", nsfile, strerror(errno));
    exit(1);
  }
  close(ns);
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", dev);
  if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
    fprintf(stderr, "wire: cannot make the TUN device %s: %s\n", dev, strerror(errno));
    exit(1);
  }
  return fd;
}

/* Packets read from `from` join lane l (or are dropped). */
static void take(int from, lane *l, long long delay, double loss, unsigned char *buf) {
  for (;;) {
    ssize_t n = read(from, buf, MAXPKT);
    if (n <= 0) return;
    if (drand48() * 100 < loss || l->n == LIMIT) {
      l->dropped++;
      continue;
    }
    pkt *p = &l->q[(l->head + l->n) % LIMIT];
    p->data = realloc(p->data, (size_t)n);
    if (!p->data) exit(1);
    memcpy(p->data, buf, (size_t)n);
    p->len = (int)n;
    p->due = now_us() + delay;
    l->n++;
  }
}

/* The packets of lane l that are due go out to `to`; returns the time until
 * the next one (ms, for poll), -1 when none waits. */
static int give(int to, lane *l) {
  long long t = now_us();
  while (l->n && l->q[l->head].due <= t) {
    pkt *p = &l->q[l->head];
    if (write(to, p->data, (size_t)p->len) == p->len) l->carried++, l->bytes += p->len;
    else l->dropped++;
    l->head = (l->head + 1) % LIMIT;
    l->n--;
  }
  if (!l->n) return -1;
  long long wait = l->q[l->head].due - t;
  return (int)((wait + 999) / 1000);
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: wire NETNS_A DEV_A NETNS_B DEV_B DELAY_MS LOSS_PERCENT\n");
    return 2;
  }
  long long delay = (long long)(atof(argv[5]) * 1000);
  double loss = atof(argv[6]);
  int a = tun_in(argv[1], argv[2]), b = tun_in(argv[3], argv[4]);
  signal(SIGTERM, on_stop);
  signal(SIGINT, on_stop);
  srand48((long)getpid() ^ (long)now_us());
  static lane ab, ba;
  static unsigned char buf[MAXPKT];
  printf("ready\n");
  fflush(stdout);
  while (!stop) {
    int w1 = give(b, &ab), w2 = give(a, &ba);
    int wait = w1 < 0 ? w2 : w2 < 0 ? w1 : w1 < w2 ? w1 : w2;
    struct pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (poll(fds, 2, wait < 0 ? 200 : wait) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) take(a, &ab, delay, loss, buf);
    if (fds[1].revents & POLLIN) take(b, &ba, delay, loss, buf);
  }
  fprintf(stderr, "wire: %s->%s %lld packets (%lld bytes) carried, %lld dropped; %s->%s %lld (%lld bytes), %lld dropped\n",
          argv[2], argv[4], ab.carried, ab.bytes, ab.dropped, argv[4], argv[2], ba.carried, ba.bytes, ba.dropped);
  return 0;
}
