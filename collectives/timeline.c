/* Timeline writer.  See timeline.h.  Owner: the engine thread (rank 0); no
 * locking.  Lanes: tid 0 is the engine, each tensor gets its own tid, named
 * by a thread_name metadata event the first time it appears. */
#include "timeline.h"

#include <fcntl.h>
#include <stdio.h>
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

static const char trailer[] = "\n]\n";

int hvd_timeline_enabled(void) { return fd >= 0; }

int hvd_timeline_open(const char *path, char *err, size_t errlen) {
  char why[512];
  fd = hvd_open_output(path, why, sizeof why);
  if (fd < 0) {
    snprintf(err, errlen, "timeline: %s", why);
    return -1;
  }
  static const char head[] = "[";
  trailer_pos = (off_t)(sizeof head - 1);
  if (pwrite(fd, "[\n]\n", 4, 0) != 4) {
    snprintf(err, errlen, "cannot write timeline '%s': %m", path);
    close(fd);
    fd = -1;
    return -1;
  }
  lanes = hvd_strmap_new();
  nevents = 0;
  next_lane = 1;
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
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"X\",\"pid\":0,\"tid\":%ld,\"ts\":%.1f,\"dur\":%.1f}", lane, start_us,
                   dur_us < 0 ? 0 : dur_us);
  hvd_buf_put(&pending, tail, (size_t)n);
}

void hvd_timeline_instant(const char *name, double t_us) {
  if (fd < 0) return;
  char tail[96];
  begin_event();
  hvd_buf_put(&pending, "{\"name\":", 8);
  put_json_string(&pending, name);
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":0,\"ts\":%.1f}", t_us);
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
