/* fuzz_interp_frame: libFuzzer harness over what the server does with the
 * bytes an interpreter's kernel sends on its control socket (a hostile
 * cell can write anything there): the frame codec's parse of a stream of
 * frames, fed in two pieces as recv would, then every object taken as a
 * ready and as this cell's done, exactly as interp.c and interp_cell.c do.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The first byte picks where recv splits the bytes. */
  size_t split = size > 0 ? (size_t)data[0] * size / 256 : 0;
  struct sbx_buf b = {0};
  size_t max = INTERP_FRAME_HEAD + INTERP_FRAME_MAX;
  if (sbx_buf_append(&b, data, split, max) == 0 && drain(&b) >= 0 &&
      sbx_buf_append(&b, data + split, size - split, max) == 0)
    (void)drain(&b);
  sbx_buf_free(&b);
  return 0;
}
