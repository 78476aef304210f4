/* Timeline writer.  See timeline.h.  Owner: the engine thread (rank 0); no
 * locking.  Lanes: tid 0 is the engine, each tensor gets its own tid, named
 * by a thread_name metadata event the first time it appears. */
#include "timeline.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/outfile.h"
#include "strmap.h"
#include "wire.h"

static int fd = -1;
static off_t trailer_pos; /* where "\n]\n" starts */
static int nevents;
static hvd_buf pending;
static hvd_strmap *lanes;
static long next_lane = 1;
static double ts_base; /* microseconds added to every time: the end of the file's events when going on in it */

static const char trailer[] = "\n]\n";

int hvd_timeline_enabled(void) { return fd >= 0; }

/* The file a job before wrote: its closing bracket (found in its last
 * 64 KiB) is where the new events go, after a comma; ts_base, its events'
 * latest end.  0, or -1 where it holds no timeline (then it starts anew). */
static int go_on(void) {
  off_t size = lseek(fd, 0, SEEK_END);
  if (size < 4) return -1;
  size_t n = size > 65536 ? 65536 : (size_t)size;
  char *t = malloc(n + 1);
  if (!t) return -1;
  off_t from = size - (off_t)n;
  if (pread(fd, t, n, from) != (ssize_t)n) return free(t), -1;
  t[n] = 0;
  char *close_br = NULL;
  for (size_t i = n; i-- > 0;)
    if (t[i] == ']') {
      close_br = t + i;
      break;
    }
  if (!close_br) return free(t), -1;
  char *end = close_br;
  while (end > t && (end[-1] == '\n' || end[-1] == ' ')) end--;
  trailer_pos = from + (end - t);
  nevents = end > t && end[-1] == '}'; /* events before: the next one follows a comma */
  ts_base = 0;
  for (char *p = t; (p = strstr(p, "\"ts\":")) != NULL;) {
    p += 5;
    double ts = strtod(p, &p), dur = 0;
    char *d = strstr(p, "\"dur\":");
    if (d && d < strchr(p, '}')) dur = strtod(d + 6, NULL);
    if (ts + dur > ts_base) ts_base = ts + dur;
  }
  ts_base += 1; /* (after the last, whatever the rounding of the times printed) */
  free(t);
  return 0;
}

int hvd_timeline_open(const char *path, int cont, char *err, size_t errlen) {
  char why[512];
  fd = hvd_open_output(path, cont, why, sizeof why);
  if (fd < 0) {
    snprintf(err, errlen, "timeline: %s", why);
    return -1;
  }
  lanes = hvd_strmap_new();
  nevents = 0;
  next_lane = 1;
  ts_base = 0;
  if (cont && go_on() == 0) return 0;
  static const char head[] = "[";
  trailer_pos = (off_t)(sizeof head - 1);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, "[\n]\n", 4, 0) != 4) {
    snprintf(err, errlen, "cannot write timeline '%s': %m", path);
    close(fd);
    fd = -1;
    return -1;
  }
  return 0;
}

static void put_json_string(hvd_buf *b, const char *s) {
  hvd_buf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      hvd_buf_put(b, esc, 2);
    } else if (c < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      hvd_buf_put(b, esc, 6);
    } else {
      hvd_buf_put(b, s, 1);
    }
  }
  hvd_buf_put(b, "\"", 1);
}

static void begin_event(void) {
  if (nevents++ > 0) hvd_buf_put(&pending, ",\n", 2);
}

static long lane_of(const char *tensor) {
  long lane = (long)(intptr_t)hvd_strmap_get(lanes, tensor);
  if (lane) return lane;
  lane = next_lane++;
  hvd_strmap_put(lanes, tensor, (void *)(intptr_t)lane);
  char head[96];
  begin_event();
  int n = snprintf(head, sizeof head, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%ld,\"args\":{\"name\":", lane);
  hvd_buf_put(&pending, head, (size_t)n);
  put_json_string(&pending, tensor);
  hvd_buf_put(&pending, "}}", 2);
  return lane;
}

void hvd_timeline_span(const char *tensor, const char *phase, double start_us, double dur_us) {
  if (fd < 0) return;
  long lane = lane_of(tensor);
  char tail[128];
  begin_event();
  hvd_buf_put(&pending, "{\"name\":", 8);
  put_json_string(&pending, phase);
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"X\",\"pid\":0,\"tid\":%ld,\"ts\":%.1f,\"dur\":%.1f}", lane, ts_base + start_us,
                   dur_us < 0 ? 0 : dur_us);
  hvd_buf_put(&pending, tail, (size_t)n);
}

void hvd_timeline_instant(const char *name, double t_us) {
  if (fd < 0) return;
  char tail[96];
  begin_event();
  hvd_buf_put(&pending, "{\"name\":", 8);
  put_json_string(&pending, name);
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":0,\"ts\":%.1f}", ts_base + t_us);
  hvd_buf_put(&pending, tail, (size_t)n);
}

void hvd_timeline_flush(void) {
  if (fd < 0 || pending.len == 0) return;
  hvd_buf_put(&pending, trailer, sizeof trailer - 1);
  ssize_t w = pwrite(fd, pending.p, pending.len, trailer_pos);
  if (w == (ssize_t)pending.len) trailer_pos += (off_t)(pending.len - (sizeof trailer - 1));
  hvd_buf_reset(&pending);
}

void hvd_timeline_close(void) {
  if (fd < 0) return;
  hvd_timeline_flush();
  close(fd);
  fd = -1;
  hvd_buf_free(&pending);
  hvd_strmap_free(lanes);
  lanes = NULL;
}
