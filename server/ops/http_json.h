/* http_json.h: JSON in and out of the HTTP listener's routes, with jansson,
 * for every front: the request body parsed (what is wrong with it said so a
 * client can act on it: where the syntax broke, which field is unknown or of
 * the wrong type), and JSON answers. No front parses JSON by hand.
 *
 * The errors are values (a status and a message), not responses: each front
 * answers them in its own protocol's shape (Piston: 400 {"message": ...};
 * MCP: a JSON-RPC error object). */
#ifndef SBX_OPS_HTTP_JSON_H
#define SBX_OPS_HTTP_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http.h"

/* The body as one JSON object (duplicate keys refused, "\u0000" allowed in
 * strings), or NULL with why: "invalid JSON at line 1, column 9: ..." or
 * "the body is a JSON array, not an object". */
json_t *http_json_body_object(const struct http_request *req, char *why, size_t len);

/* "a string", "a number", "an object", "an array", "a boolean", "null". */
const char *http_json_type_name(const json_t *v);

/* The first key of obj that is not one of names (a NULL-terminated list),
 * or NULL when every key is known. */
const char *http_json_unknown_key(const json_t *obj, const char *const *names);

/* names as "a, b, c" into buf, for messages that list what is allowed. */
void http_json_names(const char *const *names, char *buf, size_t len);

/* An integer that a JSON number holds exactly (an integer, or a real with
 * no fraction within +-2^53); false for anything else. */
bool http_json_integer(const json_t *v, long long *out);

/* resp = status with value as its body (application/json); takes the
 * reference. 500 when it cannot be written. */
void http_response_json(struct http_response *resp, unsigned status, json_t *value);
/* resp = status with {"message": <the format's expansion>}. */
void http_response_json_message(struct http_response *resp, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
