/* Timeline writer.  See timeline.h.  Owner: rank 0's engine cycle (one
 * thread at a time: the engine's `drive`); no locking.  Lanes: tid 0 is
 * the engine, each tensor gets its own tid, named by a thread_name
 * metadata event the first time it appears. */
#include "timeline.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/outfile.h"
#include "../../base/strmap.h"
#include "../negotiation/wire.h"

/* The file, while the job runs: "[", the events, each as ",\n{...}" ("\n{...}"
 * the first), spaces, and "]" as its last byte.  A flush writes the events
 * into the spaces with one pwrite; if the process dies in it, the kernel
 * has written a prefix that ends at a page boundary (it stops between
 * pages for a fatal signal), and no event crosses one (spaces before an
 * event that would), so what is there is whole events, then the spaces and
 * the "]" from before: valid JSON.  The spaces are written ahead, in
 * regions that grow with the file (64 KiB up to 16 MiB); moving the "]" to
 * a new region's end is the one moment two pages change (two pwrites, the
 * new "]" first, the old one blanked next: a few microseconds per region).
 * A normal close puts "\n]\n" after the last event and cuts the spaces off. */
#define TL_PAGE 4096
#define TL_REGION_MIN ((off_t)64 << 10)
#define TL_REGION_MAX ((off_t)16 << 20)

static int fd = -1;
static off_t ev_end;    /* just past the last event written (just past "[" when none) */
static off_t close_pos; /* the "]": the file's last byte */
static int nevents;
static hvd_buf pending; /* events for ev_end on, with their page padding */
static hvd_buf one;     /* the event being made */
static hvd_strmap *lanes;
static long next_lane = 1;
static char spaces[65536]; /* (filled at open) */
static double ts_base; /* microseconds added to every time: the end of the file's events when going on in it */

int hvd_timeline_enabled(void) { return fd >= 0; }

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* The offset of the last byte before `from` that is not white space, or -1
 * (reading back a chunk at a time: the spaces ahead can be megabytes). */
static off_t last_solid(off_t from, char *found) {
  char t[65536];
  while (from > 0) {
    size_t n = from > (off_t)sizeof t ? sizeof t : (size_t)from;
    off_t at = from - (off_t)n;
    if (pread(fd, t, n, at) != (ssize_t)n) return -1;
    for (size_t i = n; i-- > 0;)
      if (!is_space(t[i])) {
        *found = t[i];
        return at + (off_t)i;
      }
    from = at;
  }
  return -1;
}

/* The file a job before wrote (closed, or left by a killed one): the new
 * events go after its last, its "]" stays; ts_base, its events' latest
 * end.  0, or -1 where it holds no timeline (then it starts anew). */
static int go_on(void) {
  off_t size = lseek(fd, 0, SEEK_END);
  char c = 0;
  off_t br = size < 2 ? -1 : last_solid(size, &c);
  if (br < 0 || c != ']') return -1;
  off_t last = last_solid(br, &c);
  if (last < 0 || (c != '}' && c != '[')) return -1;
  close_pos = br;
  ev_end = last + 1;
  nevents = c == '}'; /* events before: the next one follows a comma */
  size_t n = ev_end > 65536 ? 65536 : (size_t)ev_end;
  char *t = malloc(n + 1);
  if (!t) return -1;
  if (pread(fd, t, n, ev_end - (off_t)n) != (ssize_t)n) return free(t), -1;
  t[n] = 0;
  ts_base = 0;
  for (char *p = t; (p = strstr(p, "\"ts\":")) != NULL;) {
    p += 5;
    double ts = strtod(p, &p), dur = 0;
    char *d = strstr(p, "\"dur\":");
    char *e = strchr(p, '}');
    if (d && e && d < e) dur = strtod(d + 6, NULL);
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
  memset(spaces, ' ', sizeof spaces);
  lanes = hvd_strmap_new();
  nevents = 0;
  next_lane = 1;
  ts_base = 0;
  hvd_buf_reset(&pending);
  if (cont && go_on() == 0) return 0;
  ev_end = 1, close_pos = 2;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, "[\n]", 3, 0) != 3) {
    snprintf(err, errlen, "cannot write timeline '%s': %m", path);
    close(fd);
    fd = -1;
    return -1;
  }
  return 0;
}

/* Spaces over [at, to).  0, or -1 where a write failed. */
static int put_spaces(off_t at, off_t to) {
  while (at < to) {
    ssize_t w = pwrite(fd, spaces, to - at > (off_t)sizeof spaces ? sizeof spaces : (size_t)(to - at), at);
    if (w <= 0) return -1;
    at += w;
  }
  return 0;
}

/* Spaces from the "]" on to a new "]" at least `need` bytes from the start
 * (see the file's layout above).  0, or -1 where a write failed. */
static int grow(off_t need) {
  off_t region = close_pos < TL_REGION_MIN ? TL_REGION_MIN : close_pos > TL_REGION_MAX ? TL_REGION_MAX : close_pos;
  off_t to = need + region; /* the new "]" */
  if (put_spaces(close_pos + 1, to) != 0) return -1; /* trailing spaces after the "]": still valid */
  if (pwrite(fd, "]", 1, to) != 1) return -1;
  if (pwrite(fd, " ", 1, close_pos) != 1) return -1;
  close_pos = to;
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

/* The event in `one` goes to `pending`, after spaces to the next page
 * when it would cross a page boundary (see the file's layout). */
static void end_event(void) {
  off_t at = ev_end + (off_t)pending.len;
  size_t room = TL_PAGE - (size_t)(at % TL_PAGE);
  if (one.len <= TL_PAGE && one.len > room) hvd_buf_put(&pending, spaces, room);
  hvd_buf_put(&pending, one.p, one.len);
  hvd_buf_reset(&one);
}

static void begin_event(void) {
  hvd_buf_reset(&one);
  if (nevents++ > 0) hvd_buf_put(&one, ",\n", 2);
  else hvd_buf_put(&one, "\n", 1);
}

static long lane_of(const char *tensor) {
  long lane = (long)(intptr_t)hvd_strmap_get(lanes, tensor);
  if (lane) return lane;
  lane = next_lane++;
  hvd_strmap_put(lanes, tensor, (void *)(intptr_t)lane);
  char head[96];
  begin_event();
  int n = snprintf(head, sizeof head, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%ld,\"args\":{\"name\":", lane);
  hvd_buf_put(&one, head, (size_t)n);
  put_json_string(&one, tensor);
  hvd_buf_put(&one, "}}", 2);
  end_event();
  return lane;
}

void hvd_timeline_span(const char *tensor, const char *phase, double start_us, double dur_us) {
  if (fd < 0) return;
  long lane = lane_of(tensor);
  char tail[128];
  begin_event();
  hvd_buf_put(&one, "{\"name\":", 8);
  put_json_string(&one, phase);
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"X\",\"pid\":0,\"tid\":%ld,\"ts\":%.1f,\"dur\":%.1f}", lane, ts_base + start_us,
                   dur_us < 0 ? 0 : dur_us);
  hvd_buf_put(&one, tail, (size_t)n);
  end_event();
}

void hvd_timeline_instant(const char *name, double t_us) {
  if (fd < 0) return;
  char tail[96];
  begin_event();
  hvd_buf_put(&one, "{\"name\":", 8);
  put_json_string(&one, name);
  int n = snprintf(tail, sizeof tail, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":0,\"ts\":%.1f}", ts_base + t_us);
  hvd_buf_put(&one, tail, (size_t)n);
  end_event();
}

void hvd_timeline_flush(void) {
  if (fd < 0 || pending.len == 0) return;
  off_t need = ev_end + (off_t)pending.len; /* the events end here; the "]" must be after */
  if (need >= close_pos && grow(need) != 0) {
    hvd_buf_reset(&pending); /* (disk full: these events are lost, the file stays as it was) */
    return;
  }
  ssize_t w = pwrite(fd, pending.p, pending.len, ev_end);
  if (w == (ssize_t)pending.len) {
    ev_end = need;
  } else if (w > 0) { /* (a disk full) these events are lost: spaces over what got written, a cut event too */
    (void)put_spaces(ev_end, ev_end + w);
  }
  hvd_buf_reset(&pending);
}

void hvd_timeline_close(void) {
  if (fd < 0) return;
  hvd_timeline_flush();
  /* the events, "\n]\n", and nothing after */
  if (pwrite(fd, "\n]\n", 3, ev_end) == 3 && ftruncate(fd, ev_end + 3) != 0 && pwrite(fd, "\n ", 2, ev_end) != 2) {
    /* neither the end nor the blanking took: the file stays as it was */
  }
  close(fd);
  fd = -1;
  hvd_buf_free(&pending);
  hvd_buf_free(&one);
  hvd_strmap_free(lanes);
  lanes = NULL;
}
