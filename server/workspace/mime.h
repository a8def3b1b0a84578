/* mime.h: MIME types of artifacts by file extension, from the system's
 * mime.types database (Debian's media-types package), read once at start.
 * By name, never by content: the server runs as root and artifacts are
 * hostile, so no content sniffer parses them. */
#ifndef SBX_MIME_H
#define SBX_MIME_H

#include <stddef.h>

#include "error.h"

struct mime_entry;

struct mime_db {
  struct mime_entry *entries; /* sorted by extension */
  size_t n;
};

/* Reads path ("type ext ext ..." lines, # comments). Returns 0, or -1 with
 * err (db is then empty and every lookup gives the default). */
int mime_db_load(struct mime_db *db, const char *path, struct sbx_error *err);
void mime_db_free(struct mime_db *db);

/* The type for name's extension (case-insensitive), or
 * "application/octet-stream". The result lives as long as db. */
const char *mime_db_lookup(const struct mime_db *db, const char *name);

#endif
