/* fuzz_interp_frame: libFuzzer harness over what the server does with the
 * bytes an interpreter's kernel sends on its control socket (a hostile
 * cell can write anything there): the frame codec's parse of a stream of
 * frames, fed in two pieces as recv would, then every object taken as a
 * ready and as this cell's done, exactly as interp.c and interp_cell.c do;
 * or (first byte's low nibble 0xf) a done whose result is the rest of the
 * bytes repeated past the result's cap.
 * Invariants: no crash or sanitizer report; the buffer never holds more
 * than it was given; a result is at most INTERP_RESULT_MAX bytes, valid
 * UTF-8 (jansson takes it back as a string) and NUL-terminated. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp_frame.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_interp_frame: invariant broken: %s\n", what);
    abort();
  }
}

static void take(json_t *obj) {
  (void)interp_frame_is_ready(obj);
  if (!interp_frame_is_done(obj, 1) && !interp_frame_is_done(obj, 0))
    return;
  struct sandbox_result res = {0};
  struct interp_outcome out = {0};
  interp_frame_take_done(obj, &res, &out);
  if (out.has_result) {
    require(out.result != NULL, "a result without text");
    require(out.result_len <= INTERP_RESULT_MAX, "a result past its cap");
    require(strlen(out.result) == out.result_len, "a result's length");
    json_t *again = json_stringn(out.result, out.result_len);
    require(again != NULL, "a result that is not UTF-8");
    json_decref(again);
  }
  interp_outcome_free(&out);
}

/* Parses every frame in buf; stops at the first "not yet" or refusal. */
static int drain(struct sbx_buf *b) {
  for (;;) {
    json_t *obj = NULL;
    size_t before = b->len;
    int fr = interp_frame_parse(b, &obj);
    require(b->len <= before, "the buffer grew in a parse");
    if (fr <= 0) {
      require(obj == NULL, "an object with no frame");
      return fr;
    }
    take(obj);
    json_decref(obj);
  }
}

/* A done whose result is the bytes repeated past the cap (a frame is at
 * most -max_len long, a result past the cap longer): the cut must land on
 * a character's boundary whatever the characters. */
static void take_long_result(const uint8_t *bytes, size_t n) {
  json_t *piece = n > 0 && n <= 4096 ? json_stringn((const char *)bytes, n) : NULL;
  if (piece == NULL)
    return; /* empty, long or not UTF-8 */
  json_decref(piece);
  size_t times = INTERP_RESULT_MAX / n + 2;
  char *text = malloc(times * n);
  require(text != NULL, "memory");
  for (size_t i = 0; i < times; i++)
    memcpy(text + i * n, bytes, n);
  json_t *obj = json_pack("{s:s, s:i, s:s%}", "op", "done", "seq", 1, "result", text, times * n);
  free(text);
  require(obj != NULL, "a done of UTF-8 text");
  take(obj);
  json_decref(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if ((data[0] & 0x0f) == 0x0f) {
    take_long_result(data + 1, size - 1);
    return 0;
  }
  /* The first byte picks where recv splits the rest, the kernel's bytes. */
  size_t split = (size_t)data[0] * (size - 1) / 256;
  const uint8_t *bytes = data + 1;
  size_t n = size - 1;
  struct sbx_buf b = {0};
  size_t max = INTERP_FRAME_HEAD + INTERP_FRAME_MAX;
  if (sbx_buf_append(&b, bytes, split, max) == 0 && drain(&b) >= 0 &&
      sbx_buf_append(&b, bytes + split, n - split, max) == 0)
    (void)drain(&b);
  sbx_buf_free(&b);
  return 0;
}
