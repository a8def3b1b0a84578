/* json.h: the JSON the CLIs print, built with jansson. Bytes from the server
 * (program output, file names) become text with invalid UTF-8 replaced by
 * U+FFFD, so the output is always valid JSON. */
#ifndef SBXC_JSON_H
#define SBXC_JSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* A JSON string of data (any bytes); NULL when out of memory. */
json_t *sbxc_json_text(const void *data, size_t len);
/* A JSON string of a NUL-terminated C string (NULL reads as ""). */
json_t *sbxc_json_cstring(const char *s);

/* Any message of the schema as a JSON object: every field under its proto
 * name, strings and bytes as text, enums as their value's name in lower
 * case, repeated fields as arrays, an absent submessage as null. Field
 * lists are never written by hand, so a new field appears by itself. */
json_t *sbxc_json_message(const ProtobufCMessage *m);

/* How many bytes at the end of data (0 to 3) begin a UTF-8 sequence that
 * is not complete yet: a stream decoded chunk by chunk holds them back for
 * the next chunk, so a character split between chunks is not replaced. */
size_t sbxc_utf8_incomplete_tail(const void *data, size_t len);

/* Compact text of value, which it takes and releases; NULL when value is
 * NULL or out of memory. */
char *sbxc_json_dump(json_t *value);

#endif
