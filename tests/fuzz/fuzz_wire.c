/* libFuzzer harness for the negotiation record parser (collectives/negotiation/wire.c):
 * the bytes rank 0 gathers from every rank and the response list every rank
 * receives.  A corrupt or truncated message must be refused (non-zero),
 * never read out of bounds; what parses must stay inside the buffer.
 * Input: byte 0 selects requests or responses (and a rank count), the rest
 * is the message.  Build and run: make fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

static void inside(const hvd_buf *b, const void *p, size_t n) {
  if (n && ((const char *)p < b->p || (const char *)p + n > b->p + b->len)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  hvd_buf b = {0};
  b.len = b.cap = size - 1;
  b.p = malloc(size); /* exact size: ASan sees any overrun */
  if (!b.p) return 0;
  memcpy(b.p, data + 1, size - 1);
  if (data[0] & 1) {
    hvd_wire_req r;
    while (hvd_buf_more(&b) && hvd_wire_get_req(&b, &r) == 0) inside(&b, r.name, r.name_len);
  } else {
    int nranks = 1 + (data[0] >> 1) % 64;
    hvd_wire_resp r;
    while (hvd_buf_more(&b) && hvd_wire_get_resp(&b, &r, nranks) == 0) {
      inside(&b, r.name, r.name_len);
      inside(&b, r.msg, r.msg_len);
      if (r.rows) inside(&b, r.rows, sizeof(int64_t) * (size_t)nranks);
    }
  }
  free(b.p);
  return 0;
}
