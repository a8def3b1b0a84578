/* client_internal.h: parts of libsandbox-client that sandbox-run and the
 * fuzzer use but that are not the library's public API. */
#ifndef SBXC_CLIENT_INTERNAL_H
#define SBXC_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fail.h"
#include "sandbox_client.h"

/* Decodes a RunCode reply envelope (the bytes of the nng message) into out,
 * as sbxc_run_code does after the call. Returns 0 for an OK reply, -1 with
 * out->status and out->message otherwise. Free out with sbxc_result_free. */
int sbxc_result_from_reply_bytes(const uint8_t *buf, size_t len, struct sbxc_result *out);

/* Decodes a WatchRun reply envelope into out, as sbxc_watch_run does after
 * the call (the outcome's endpoint ""). Returns 0 for an OK reply, -1
 * with out->status and out->message otherwise. Free out with
 * sbxc_watch_free. */
int sbxc_watch_from_reply_bytes(const uint8_t *buf, size_t len, struct sbxc_watch *out);

/* The result as sandbox-run --json prints it: one JSON object, valid UTF-8
 * whatever the output bytes were (invalid sequences become U+FFFD).
 * malloc'd, NULL when out of memory. */
char *sbxc_result_json(const struct sbxc_result *r);

#endif
