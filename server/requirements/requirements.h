/* requirements.h: pip requirement strings from a request, which are hostile
 * input. Each must be a plain PEP 508 specifier without a URL: a name,
 * optional extras, optional version specifiers, optional environment
 * markers. Anything else (options such as "-e" or "--index-url", "name @
 * URL", paths, archive file names) is refused; only when the server allows
 * URLs (--requirements-allow-urls) is "name[extras] @ http(s)://.../x.whl"
 * accepted: a direct reference to a wheel, which the server downloads
 * itself (install.c) so that pip stays offline. What passes is rewritten in
 * one canonical form (PEP 503 name, sorted extras and specifiers, single
 * spaces in markers, double quotes), so pip only ever sees strings this file
 * produced, and equal sets give equal store keys. Pure: no I/O. */
#ifndef SBX_REQUIREMENTS_H
#define SBX_REQUIREMENTS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Longest canonical form; requests are capped lower by the settings. */
#define REQUIREMENT_MAX 1024
#define REQUIREMENT_KEY_HEX 64

/* Parses one requirement. Returns 0 and writes its canonical form to out
 * (at most REQUIREMENT_MAX + 1 bytes), or -1 with err, INVALID_ARGUMENT
 * ("must not start with '-' (pip options are not accepted)"). */
int requirement_normalize(const char *in, bool allow_urls, char *out, size_t outlen,
                          struct sbx_error *err);

/* For a canonical "name[extras] @ URL": the URL, else NULL. */
const char *requirement_url(const char *canonical);
/* Splits a canonical requirement URL: what to fetch (without the
 * fragment), the wheel's file name (its last path segment, checked by
 * requirement_normalize: [A-Za-z0-9._+-], ending in .whl, at most 200 bytes) and the pinned
 * SHA-256 in lower-case hex ("" when none). Returns 0, or -1 when a buffer
 * is too small. */
int requirement_url_parts(const char *url, char *fetch, size_t fetchlen, char *file, size_t filelen,
                          char sha256[65]);

/* The canonical set: normalized, sorted, duplicates removed. Returns the
 * number of distinct entries written to set (an array of n strings of
 * REQUIREMENT_MAX + 1 bytes each), or -1 with err naming the index. */
struct requirement_set {
  char (*items)[REQUIREMENT_MAX + 1];
  size_t n;
};
int requirement_set_build(const char *const *in, size_t n, bool allow_urls,
                          struct requirement_set *out, struct sbx_error *err);
void requirement_set_free(struct requirement_set *set);

/* The store key: SHA-256 (hex) of a versioned text that holds the context
 * (interpreter, pip, package source: whatever changes what pip would
 * install) and the canonical set, one per line. material gets that text
 * (malloc'd) for the environment's metadata. Returns 0 or -1 (ENOMEM). */
int requirement_key(const struct requirement_set *set, const char *context,
                    char key[REQUIREMENT_KEY_HEX + 1], char **material);

#endif
