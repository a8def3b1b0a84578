/* fuzz_reply: libFuzzer harness over what the client does with a reply's
 * bytes (a hostile or broken server, or anything on the path): the envelope
 * and RunCodeResponse decoding of libsandbox-client, exactly as
 * sbxc_run_code runs it, then sandbox-run's JSON rendering of the result;
 * and the same bytes as a WatchRun reply (sbxc_watch_run's decoding, the
 * outcome of a complete one rendered the same way).
 * Invariants: no crash or sanitizer report, a NUL-terminated message, and
 * JSON that is valid UTF-8 with every control character escaped, whatever
 * bytes the output, names and feedback held. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_reply: invariant broken: %s\n", what);
    abort();
  }
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above
 * U+10FFFF; and no raw control characters (JSON needs them escaped). */
static bool valid_json_text(const unsigned char *s) {
  while (*s != '\0') {
    unsigned c = *s;
    if (c < 0x20)
      return false;
    if (c < 0x80) {
      s++;
      continue;
    }
    int n;
    unsigned min, cp;
    if ((c & 0xe0) == 0xc0)
      n = 1, min = 0x80, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0)
      n = 2, min = 0x800, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0)
      n = 3, min = 0x10000, cp = c & 0x07;
    else
      return false;
    for (int i = 1; i <= n; i++) {
      if ((s[i] & 0xc0) != 0x80)
        return false;
      cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    s += n + 1;
  }
  return true;
}

/* The result's checks and its JSON; rc as the decoding returned it. */
static void check_result(struct sbxc_result *r, int rc, size_t size) {
  require(rc == 0 || rc == -1, "returns 0 or -1");
  require(r->message != NULL && strlen(r->message) <= size + 512,
          "message is a NUL-terminated string from the reply or the client");
  if (rc == 0) {
    require(r->status == SBXC_OK, "an accepted reply has status OK");
    require(r->n_artifacts == 0 || r->artifacts != NULL, "artifacts present when counted");
    require(r->stdout_len == 0 || r->stdout_data != NULL, "stdout present when counted");
  } else {
    require(r->status != SBXC_OK || r->message[0] != '\0', "a failure says why");
  }
  char *json = sbxc_result_json(r);
  require(json != NULL, "JSON rendered");
  size_t len = strlen(json);
  require(len >= 2 && json[0] == '{' && json[len - 1] == '}', "one JSON object");
  require(valid_json_text((const unsigned char *)json), "JSON is valid UTF-8, controls escaped");
  free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct sbxc_result r;
  check_result(&r, sbxc_result_from_reply_bytes(data, size, &r), size);
  sbxc_result_free(&r);

  struct sbxc_watch w;
  int rc = sbxc_watch_from_reply_bytes(data, size, &w);
  require(rc == 0 || rc == -1, "watch: returns 0 or -1");
  require(w.message != NULL && strlen(w.message) <= size + 512, "watch: a NUL-terminated message");
  require(rc == -1 || (w.stdout_len == 0 || w.stdout_data != NULL), "watch: stdout when counted");
  require(rc == -1 || (w.stderr_len == 0 || w.stderr_data != NULL), "watch: stderr when counted");
  if (rc == 0 && w.complete)
    check_result(&w.result, w.result.status == SBXC_OK ? 0 : -1, size);
  sbxc_watch_free(&w);
  return 0;
}
