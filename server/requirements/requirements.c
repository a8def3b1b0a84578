/* requirements.c: see requirements.h. A small recursive-descent parser of
 * the PEP 508 subset we accept, writing the canonical form as it goes. The
 * input is hostile: every loop is bounded by the input's length, recursion
 * (parenthesised markers) by MARKER_DEPTH, and nothing outside the grammar's
 * character classes ever reaches the output. */
#include "requirements.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXTRAS 16
#define MAX_CLAUSES 16
#define PART_MAX 128
#define MARKER_DEPTH 8

struct out {
  char *buf;
  size_t len, cap;
  bool overflow;
};

static void put(struct out *o, const char *s, size_t n) {
  if (o->len + n + 1 > o->cap) {
    o->overflow = true;
    return;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
}

static void puts_(struct out *o, const char *s) {
  put(o, s, strlen(s));
}

struct parser {
  const char *start, *p;
  struct sbx_error *err; /* INVALID_ARGUMENT, the first reason found */
  bool failed;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...) {
  if (ps->failed)
    return -1;
  ps->failed = true;
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  return sbx_error_set(ps->err, SBX_INVALID_ARGUMENT, 0, "%s", why);
}

static int fail_at(struct parser *ps, const char *what) {
  unsigned char c = (unsigned char)*ps->p;
  size_t at = (size_t)(ps->p - ps->start);
  if (c == '\0')
    return fail(ps, "%s expected at the end", what);
  if (c >= 0x20 && c < 0x7f)
    return fail(ps, "%s expected at offset %zu, found '%c'", what, at, c);
  return fail(ps, "%s expected at offset %zu, found byte 0x%02x", what, at, c);
}

static void skip_ws(struct parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t')
    ps->p++;
}

static bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* PEP 508 identifier, written PEP 503-normalized: lower case, every run of
 * '-', '_', '.' one '-'. */
static int parse_name(struct parser *ps, char *out, size_t outlen, const char *what) {
  const char *s = ps->p;
  if (!alnum(*s))
    return fail_at(ps, what);
  const char *e = s;
  while (alnum(*e) || *e == '-' || *e == '_' || *e == '.')
    e++;
  while (e > s && !alnum(e[-1]))
    e--; /* a name ends with a letter or digit */
  if ((size_t)(e - s) >= PART_MAX || (size_t)(e - s) >= outlen)
    return fail(ps, "%s longer than %d characters", what, PART_MAX - 1);
  size_t n = 0;
  for (const char *c = s; c < e; c++) {
    if (*c == '-' || *c == '_' || *c == '.') {
      if (n > 0 && out[n - 1] == '-')
        continue;
      out[n++] = '-';
    } else {
      out[n++] = (char)tolower((unsigned char)*c);
    }
  }
  out[n] = '\0';
  ps->p = e;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* Sorts n strings of width w in place and drops duplicates; returns the new n.
 */
static size_t sort_unique(char *items, size_t n, size_t w) {
  if (n == 0)
    return 0;
  qsort(items, n, w, cmp_str);
  size_t k = 1;
  for (size_t i = 1; i < n; i++)
    if (strcmp(items + i * w, items + (k - 1) * w) != 0)
      memmove(items + (k++) * w, items + i * w, w);
  return k;
}

static int parse_extras(struct parser *ps, struct out *o) {
  char extras[MAX_EXTRAS][PART_MAX];
  size_t n = 0;
  ps->p++; /* '[' */
  skip_ws(ps);
  if (*ps->p != ']') {
    for (;;) {
      if (n == MAX_EXTRAS)
        return fail(ps, "more than %d extras", MAX_EXTRAS);
      if (parse_name(ps, extras[n++], PART_MAX, "an extra's name") < 0)
        return -1;
      skip_ws(ps);
      if (*ps->p == ']')
        break;
      if (*ps->p != ',')
        return fail_at(ps, "',' or ']'");
      ps->p++;
      skip_ws(ps);
    }
  }
  ps->p++; /* ']' */
  n = sort_unique(&extras[0][0], n, PART_MAX);
  if (n == 0)
    return 0;
  puts_(o, "[");
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      puts_(o, ",");
    puts_(o, extras[i]);
  }
  puts_(o, "]");
  return 0;
}

static const char *const version_ops[] = {"===", "==", "!=", "<=", ">=", "~=", "<", ">"};

static const char *match_op(const char *p) {
  for (size_t i = 0; i < sizeof(version_ops) / sizeof(version_ops[0]); i++)
    if (strncmp(p, version_ops[i], strlen(version_ops[i])) == 0)
      return version_ops[i];
  return NULL;
}

static bool version_char(char c) {
  return alnum(c) || c == '.' || c == '*' || c == '+' || c == '!' || c == '_' || c == '-';
}

/* One or more "op version" clauses separated by commas, written sorted and
 * without spaces ("<2,>=1.0"). */
static int parse_versions(struct parser *ps, struct out *o) {
  char clauses[MAX_CLAUSES][PART_MAX];
  size_t n = 0;
  for (;;) {
    const char *op = match_op(ps->p);
    if (op == NULL)
      return fail_at(ps, "a version operator (==, !=, <=, >=, <, >, ~=, ===)");
    ps->p += strlen(op);
    skip_ws(ps);
    const char *s = ps->p;
    while (version_char(*ps->p))
      ps->p++;
    size_t len = (size_t)(ps->p - s);
    if (len == 0)
      return fail_at(ps, "a version");
    if (*s == '-' || *s == '.')
      return fail(ps, "a version must start with a letter or digit");
    if (n == MAX_CLAUSES)
      return fail(ps, "more than %d version clauses", MAX_CLAUSES);
    if (strlen(op) + len >= PART_MAX)
      return fail(ps, "a version longer than %d characters", PART_MAX - 4);
    snprintf(clauses[n++], PART_MAX, "%s%.*s", op, (int)len, s);
    skip_ws(ps);
    if (*ps->p != ',')
      break;
    ps->p++;
    skip_ws(ps);
  }
  n = sort_unique(&clauses[0][0], n, PART_MAX);
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      puts_(o, ",");
    puts_(o, clauses[i]);
  }
  return 0;
}

/* ---- markers ---- */

static const char *const marker_vars[] = {
    "python_version",      "python_full_version",    "os_name",
    "sys_platform",        "platform_release",       "platform_system",
    "platform_version",    "platform_machine",       "platform_python_implementation",
    "implementation_name", "implementation_version", "extra",
};

static bool keyword_at(const char *p, const char *kw) {
  size_t n = strlen(kw);
  return strncmp(p, kw, n) == 0 && !alnum(p[n]) && p[n] != '_';
}

static int parse_marker_value(struct parser *ps, struct out *o) {
  char q = *ps->p;
  if (q == '"' || q == '\'') {
    const char *s = ++ps->p;
    while (*ps->p != q) {
      unsigned char c = (unsigned char)*ps->p;
      if (c == '\0')
        return fail(ps, "unterminated string in the marker");
      if (c < 0x20 || c >= 0x7f || c == '"' || c == '\'' || c == '\\')
        return fail(ps, "a marker string may hold printable ASCII without "
                        "quotes or backslashes");
      ps->p++;
    }
    if ((size_t)(ps->p - s) >= PART_MAX)
      return fail(ps, "a marker string longer than %d characters", PART_MAX - 1);
    puts_(o, "\"");
    put(o, s, (size_t)(ps->p - s));
    puts_(o, "\"");
    ps->p++;
    return 0;
  }
  for (size_t i = 0; i < sizeof(marker_vars) / sizeof(marker_vars[0]); i++)
    if (keyword_at(ps->p, marker_vars[i])) {
      puts_(o, marker_vars[i]);
      ps->p += strlen(marker_vars[i]);
      return 0;
    }
  return fail_at(ps, "a marker variable (python_version, sys_platform, ...) or "
                     "a quoted string");
}

static int parse_marker_or(struct parser *ps, struct out *o, int depth);

static int parse_marker_expr(struct parser *ps, struct out *o, int depth) {
  skip_ws(ps);
  if (*ps->p == '(') {
    if (depth >= MARKER_DEPTH)
      return fail(ps, "markers nested deeper than %d parentheses", MARKER_DEPTH);
    ps->p++;
    puts_(o, "(");
    if (parse_marker_or(ps, o, depth + 1) < 0)
      return -1;
    skip_ws(ps);
    if (*ps->p != ')')
      return fail_at(ps, "')'");
    ps->p++;
    puts_(o, ")");
    return 0;
  }
  if (parse_marker_value(ps, o) < 0)
    return -1;
  skip_ws(ps);
  const char *op = match_op(ps->p);
  if (op != NULL) {
    ps->p += strlen(op);
    puts_(o, " ");
    puts_(o, op);
    puts_(o, " ");
  } else if (keyword_at(ps->p, "in")) {
    ps->p += 2;
    puts_(o, " in ");
  } else if (keyword_at(ps->p, "not")) {
    ps->p += 3;
    skip_ws(ps);
    if (!keyword_at(ps->p, "in"))
      return fail_at(ps, "'in' after 'not'");
    ps->p += 2;
    puts_(o, " not in ");
  } else {
    return fail_at(ps, "a marker operator (==, !=, <, in, not in, ...)");
  }
  skip_ws(ps);
  return parse_marker_value(ps, o);
}

/* operand (kw operand)*, written with single spaces: "a and b". */
static int parse_marker_chain(struct parser *ps, struct out *o, int depth, const char *kw,
                              int (*operand)(struct parser *, struct out *, int)) {
  if (operand(ps, o, depth) < 0)
    return -1;
  for (;;) {
    const char *save = ps->p;
    skip_ws(ps);
    if (!keyword_at(ps->p, kw)) {
      ps->p = save;
      return 0;
    }
    ps->p += strlen(kw);
    puts_(o, " ");
    puts_(o, kw);
    puts_(o, " ");
    if (operand(ps, o, depth) < 0)
      return -1;
  }
}

static int parse_marker_and(struct parser *ps, struct out *o, int depth) {
  return parse_marker_chain(ps, o, depth, "and", parse_marker_expr);
}

static int parse_marker_or(struct parser *ps, struct out *o, int depth) {
  return parse_marker_chain(ps, o, depth, "or", parse_marker_and);
}

/* pip treats a requirement that ends like an archive as a file to install. */
static bool looks_like_archive(const char *s, size_t n) {
  static const char *const ends[] = {".whl", ".zip", ".tar", ".tgz", ".tbz",  ".txz", ".tlz",
                                     ".gz",  ".bz2", ".xz",  ".lz",  ".lzma", ".egg"};
  for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
    size_t k = strlen(ends[i]);
    if (n >= k && strncasecmp(s + n - k, ends[i], k) == 0)
      return true;
  }
  return false;
}

#define URL_MAX 900

/* After '@': the URL up to the end of the input, or NULL (refused):
 * anything after it but blanks is refused. *full gets its length. */
static const char *url_extent(struct parser *ps, size_t *full) {
  skip_ws(ps);
  if (*ps->p != '@') {
    fail_at(ps, "'@' and a URL");
    return NULL;
  }
  ps->p++;
  skip_ws(ps);
  const char *url = ps->p;
  *full = strcspn(url, " \t");
  const char *rest = url + *full;
  while (*rest == ' ' || *rest == '\t')
    rest++;
  if (*rest != '\0') {
    fail(ps, "nothing may follow the URL (markers are not accepted with a URL)");
    return NULL;
  }
  return url;
}

/* An optional "#sha256=<64 hex>" that pins the wheel's content: frag is
 * what follows '#' (flen bytes); sha gets the digest in lower case. */
static int url_pin(struct parser *ps, const char *frag, size_t flen, char sha[65]) {
  if (flen != 7 + 64 || strncmp(frag, "sha256=", 7) != 0)
    return fail(ps, "the only fragment accepted is #sha256= and 64 hex digits");
  for (size_t i = 0; i < 64; i++) {
    if (!isxdigit((unsigned char)frag[7 + i]))
      return fail(ps, "the only fragment accepted is #sha256= and 64 hex digits");
    sha[i] = (char)tolower((unsigned char)frag[7 + i]);
  }
  sha[64] = '\0';
  return 0;
}

/* The URL without its fragment (len bytes): http(s), a host, printable
 * ASCII without quotes, spaces, backslashes or a query, and a path ending
 * in a wheel's file name. *scheme gets the scheme's length. */
static int url_check(struct parser *ps, const char *url, size_t len, size_t *scheme) {
  *scheme = strncasecmp(url, "https://", 8) == 0 ? 8 : strncasecmp(url, "http://", 7) == 0 ? 7 : 0;
  if (*scheme == 0)
    return fail(ps, "the URL must be http:// or https://");
  if (len > URL_MAX)
    return fail(ps, "the URL is longer than %d bytes", URL_MAX);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)url[i];
    if (c <= 0x20 || c >= 0x7f || strchr("\"'\\<>`{}|^?#;@", c) != NULL)
      return fail(ps,
                  "the URL has a character that is not accepted at byte %zu "
                  "(no spaces, quotes, '@' or query)",
                  i);
  }
  const char *path = memchr(url + *scheme, '/', len - *scheme);
  if (path == NULL || path == url + *scheme)
    return fail(ps, "the URL needs a host and a path to a .whl file");
  const char *file = url + len;
  while (file > path + 1 && file[-1] != '/')
    file--;
  size_t flen = (size_t)(url + len - file);
  if (flen < 5 || flen > 200 || file[0] == '.' || strncasecmp(url + len - 4, ".whl", 4) != 0)
    return fail(ps, "the URL must name a wheel file (.../name-version-tags.whl)");
  for (size_t i = 0; i < flen; i++)
    if (!alnum(file[i]) && strchr("._+-", file[i]) == NULL)
      return fail(ps, "the wheel's file name may hold only letters, digits and . _ + -");
  return 0;
}

/* "name[extras] @ URL" with allow_urls: written as " @ " and the URL with
 * its scheme in lower case, the rest as it is, and the pin if any. */
static int parse_url_requirement(struct parser *ps, struct out *o) {
  size_t full = 0, scheme = 0;
  const char *url = url_extent(ps, &full);
  if (url == NULL)
    return -1;
  size_t len = strcspn(url, "#");
  if (len > full)
    len = full;
  char sha[65] = "";
  if (len < full && url_pin(ps, url + len + 1, full - len - 1, sha) < 0)
    return -1;
  if (url_check(ps, url, len, &scheme) < 0)
    return -1;
  puts_(o, " @ ");
  puts_(o, scheme == 8 ? "https://" : "http://");
  char rest_buf[URL_MAX + 1];
  snprintf(rest_buf, sizeof(rest_buf), "%.*s", (int)(len - scheme), url + scheme);
  puts_(o, rest_buf);
  if (sha[0] != '\0') {
    puts_(o, "#sha256=");
    puts_(o, sha);
  }
  ps->p = url + full;
  return 0;
}

const char *requirement_url(const char *canonical) {
  const char *at = strstr(canonical, " @ ");
  return at != NULL ? at + 3 : NULL;
}

int requirement_url_parts(const char *url, char *fetch, size_t fetchlen, char *file, size_t filelen,
                          char sha256[65]) {
  size_t len = strcspn(url, "#");
  sha256[0] = '\0';
  if (url[len] == '#' && strncmp(url + len + 1, "sha256=", 7) == 0 && strlen(url + len + 8) == 64)
    memcpy(sha256, url + len + 8, 65);
  const char *slash = memrchr(url, '/', len);
  const char *name = slash != NULL ? slash + 1 : url;
  if ((size_t)snprintf(fetch, fetchlen, "%.*s", (int)len, url) >= fetchlen ||
      (size_t)snprintf(file, filelen, "%.*s", (int)(url + len - name), name) >= filelen)
    return -1;
  return 0;
}

/* Clear answers for what is refused on purpose, before the grammar's. */
static int refuse_on_purpose(struct parser *ps, const char *in, bool url_form, bool allow_urls) {
  if (*ps->p == '-')
    return fail(ps, "must not start with '-': pip options are not accepted, "
                    "only specifiers "
                    "such as \"name[extra]>=1.0; python_version >= '3.8'\"");
  if (url_form && !allow_urls)
    return fail(ps, "URLs and \"name @ url\" requirements are not accepted, "
                    "only specifiers (unless the server allows them: "
                    "--requirements-allow-urls)");
  if (!url_form && (*ps->p == '.' || *ps->p == '/' || *ps->p == '~' || strchr(in, '/') != NULL ||
                    strchr(in, '\\') != NULL))
    return fail(ps, "local paths are not accepted, only specifiers");
  return 0;
}

/* After the name and extras of a specifier: versions, with or without
 * parentheses, then an optional "; marker". */
static int parse_specifier_rest(struct parser *ps, struct out *o, const char *in) {
  skip_ws(ps);
  if (*ps->p == '(') {
    ps->p++;
    skip_ws(ps);
    if (parse_versions(ps, o) < 0)
      return -1;
    if (*ps->p != ')')
      return fail_at(ps, "')'");
    ps->p++;
  } else if (match_op(ps->p) != NULL) {
    if (parse_versions(ps, o) < 0)
      return -1;
  }
  size_t raw_len = strcspn(in, ";");
  while (raw_len > 0 && (in[raw_len - 1] == ' ' || in[raw_len - 1] == '\t'))
    raw_len--;
  if (looks_like_archive(o->buf, o->len) || looks_like_archive(in, raw_len))
    return fail(ps, "looks like an archive file name; only specifiers are accepted");
  skip_ws(ps);
  if (*ps->p == ';') {
    ps->p++;
    puts_(o, "; ");
    if (parse_marker_or(ps, o, 0) < 0)
      return -1;
    skip_ws(ps);
  }
  if (*ps->p != '\0')
    return fail_at(ps, "the end of the requirement (or '[', a version operator, ';')");
  return 0;
}

int requirement_normalize(const char *in, bool allow_urls, char *out, size_t outlen,
                          struct sbx_error *err) {
  struct parser ps = {.start = in, .p = in, .err = err};
  struct out o = {.buf = out, .cap = outlen < REQUIREMENT_MAX + 1 ? outlen : REQUIREMENT_MAX + 1};
  if (o.cap == 0)
    return fail(&ps, "no room");
  out[0] = '\0';
  skip_ws(&ps);
  bool url_form = strstr(in, "://") != NULL || strchr(in, '@') != NULL;
  if (refuse_on_purpose(&ps, in, url_form, allow_urls) < 0)
    return -1;
  char name[PART_MAX];
  if (parse_name(&ps, name, sizeof(name), "a project name") < 0)
    return -1;
  puts_(&o, name);
  skip_ws(&ps);
  if (*ps.p == '[' && parse_extras(&ps, &o) < 0)
    return -1;
  /* "name[extras] @ URL": nothing else may follow. */
  if ((url_form ? parse_url_requirement(&ps, &o) : parse_specifier_rest(&ps, &o, in)) < 0)
    return -1;
  if (o.overflow)
    return fail(&ps, "longer than %d characters once normalized", REQUIREMENT_MAX);
  return 0;
}

int requirement_set_build(const char *const *in, size_t n, bool allow_urls,
                          struct requirement_set *out, struct sbx_error *err) {
  out->items = NULL;
  out->n = 0;
  if (n == 0)
    return 0;
  out->items = calloc(n, sizeof(*out->items));
  if (out->items == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements");
  for (size_t i = 0; i < n; i++) {
    if (requirement_normalize(in[i], allow_urls, out->items[i], sizeof(out->items[i]), err) < 0) {
      requirement_set_free(out);
      return sbx_error_wrap(err, "requirements[%zu]", i);
    }
  }
  out->n = sort_unique(&out->items[0][0], n, sizeof(out->items[0]));
  return (int)out->n;
}

void requirement_set_free(struct requirement_set *set) {
  free(set->items);
  set->items = NULL;
  set->n = 0;
}

int requirement_key(const struct requirement_set *set, const char *context,
                    char key[REQUIREMENT_KEY_HEX + 1], char **material) {
  size_t len = strlen("sandboxd-env 1\n") + strlen(context) + 1;
  for (size_t i = 0; i < set->n; i++)
    len += strlen("requirement=") + strlen(set->items[i]) + 1;
  char *m = malloc(len + 1);
  if (m == NULL)
    return -1;
  size_t k = (size_t)snprintf(m, len + 1, "sandboxd-env 1\n%s\n", context);
  for (size_t i = 0; i < set->n; i++)
    k += (size_t)snprintf(m + k, len + 1 - k, "requirement=%s\n", set->items[i]);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int dlen = 0;
  if (EVP_Digest(m, k, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen * 2 != REQUIREMENT_KEY_HEX) {
    free(m);
    errno = EIO;
    return -1;
  }
  for (unsigned i = 0; i < dlen; i++)
    snprintf(key + 2 * i, 3, "%02x", digest[i]);
  *material = m;
  return 0;
}
