/* semver.c: see semver.h. node-semver's range grammar, evaluated as it is
 * read: each comparator set is a conjunction of bounds on the version,
 * each alternative ("||") is tried in turn. A partial version ("3",
 * "3.11", "3.x") stands for every version it leaves open, and the
 * operators widen or narrow it exactly as node-semver desugars them. */
#include "semver.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* A version, or a partial one: parts[i] < 0 is a wildcard (and so is every
 * part after it); pre: a pre-release tag (it sorts below its release). */
struct ver {
  long parts[3];
  int given; /* parts given before the first wildcard: 0 to 3 */
  bool pre;
};

/* a - b as -1, 0, 1, comparing all three parts (a wildcard counts 0). */
static int cmp(const struct ver *a, const struct ver *b) {
  for (int i = 0; i < 3; i++) {
    long x = a->parts[i] < 0 ? 0 : a->parts[i], y = b->parts[i] < 0 ? 0 : b->parts[i];
    if (x != y)
      return x < y ? -1 : 1;
  }
  return a->pre == b->pre ? 0 : (a->pre ? -1 : 1);
}

static void skip_space(const char **p) {
  while (**p == ' ' || **p == '\t')
    (*p)++;
}

/* One part: a number without leading zeros, or x, X, *. */
static bool parse_part(const char **p, long *out) {
  const char *s = *p;
  if (*s == 'x' || *s == 'X' || *s == '*') {
    *out = -1;
    *p = s + 1;
    return true;
  }
  if (!isdigit((unsigned char)*s) || (s[0] == '0' && isdigit((unsigned char)s[1])))
    return false;
  char *end;
  long v = strtol(s, &end, 10);
  if (end - s > 9)
    return false;
  *out = v;
  *p = end;
  return true;
}

/* [v|=]*PART[.PART[.PART[-pre][+build]]] */
static bool parse_ver(const char **p, struct ver *out) {
  *out = (struct ver){{-1, -1, -1}, 0, false};
  while (**p == 'v' || **p == '=')
    (*p)++;
  for (int i = 0; i < 3; i++) {
    if (i > 0 && **p != '.')
      break;
    if (i > 0)
      (*p)++;
    if (!parse_part(p, &out->parts[i]))
      return false;
  }
  for (int i = 0; i < 3 && out->parts[i] >= 0; i++)
    out->given = i + 1;
  for (int i = out->given; i < 3; i++)
    out->parts[i] = -1;
  if (**p == '-') { /* a pre-release tag: [0-9A-Za-z-.]+ */
    out->pre = true;
    size_t n = strspn(*p + 1, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.");
    if (n == 0 || out->given < 3)
      return false;
    *p += 1 + n;
  }
  if (**p == '+') /* build metadata: ignored */
    *p += 1 + strspn(*p + 1, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.");
  return true;
}

/* The first version past every one that partial v leaves open: "1.2" ->
 * 1.3.0, "1" -> 2.0.0. Only for given >= 1. */
static struct ver bump(const struct ver *v) {
  struct ver up = {{0, 0, 0}, 3, false};
  int last = v->given - 1;
  for (int i = 0; i < last; i++)
    up.parts[i] = v->parts[i];
  up.parts[last] = v->parts[last] + 1;
  return up;
}

/* The version is within [lo, hi) (or lo..hi inclusive when hi_incl); NULL
 * bounds are open. */
static bool within(const struct ver *x, const struct ver *lo, bool lo_excl, const struct ver *hi,
                   bool hi_incl) {
  if (lo != NULL && (lo_excl ? cmp(x, lo) <= 0 : cmp(x, lo) < 0))
    return false;
  return hi == NULL || (hi_incl ? cmp(x, hi) <= 0 : cmp(x, hi) < 0);
}

/* A bare partial, =, or ~: the versions it leaves open (~ keeps the minor
 * when one was given, else the major). */
static bool match_partial(const struct ver *x, const struct ver *v, bool tilde) {
  if (v->given == 0)
    return true;
  if (v->given == 3 && !tilde)
    return cmp(x, v) == 0;
  struct ver prefix = *v;
  prefix.given = tilde ? (v->given >= 2 ? 2 : 1) : v->given;
  struct ver hi = bump(&prefix);
  return within(x, v, false, &hi, false);
}

/* ^: the leftmost non-zero part given stays. */
static bool match_caret(const struct ver *x, const struct ver *v) {
  if (v->given == 0)
    return true;
  struct ver prefix = *v;
  int keep = 1;
  while (keep < v->given && v->parts[keep - 1] == 0)
    keep++;
  prefix.given = keep;
  struct ver hi = bump(&prefix);
  return within(x, v, false, &hi, false);
}

static bool match_op(const struct ver *x, const char *op, const struct ver *v) {
  if (v->given == 0) /* >* and <* match nothing; >=*, <=* everything */
    return op[1] == '=';
  if (op[0] == '>') {
    if (v->given == 3)
      return within(x, v, op[1] != '=', NULL, false);
    struct ver lo = op[1] == '=' ? *v : bump(v);
    return within(x, &lo, false, NULL, false);
  }
  if (v->given == 3)
    return within(x, NULL, false, v, op[1] == '=');
  struct ver hi = op[1] == '=' ? bump(v) : *v;
  return within(x, NULL, false, &hi, false);
}

/* One comparator at *p (advanced past it): whether x satisfies it, in
 * *ok; false when it does not parse. */
static bool comparator(const char **p, const struct ver *x, bool *ok) {
  char op[3] = "";
  if (**p == '<' || **p == '>') {
    op[0] = *(*p)++;
    if (**p == '=')
      op[1] = *(*p)++;
  } else if (**p == '~' || **p == '^') {
    op[0] = *(*p)++;
    if (op[0] == '~' && **p == '>') /* ~> is ~ */
      (*p)++;
  }
  skip_space(p);
  struct ver v;
  if (!parse_ver(p, &v))
    return false;
  if (op[0] == '<' || op[0] == '>')
    *ok = match_op(x, op, &v);
  else if (op[0] == '^')
    *ok = match_caret(x, &v);
  else
    *ok = match_partial(x, &v, op[0] == '~');
  return true;
}

/* A - B: from A (zeros for what it leaves open) to B (every version B
 * leaves open included). */
static bool hyphen(const struct ver *x, const struct ver *a, const struct ver *b) {
  struct ver hi = b->given > 0 && b->given < 3 ? bump(b) : *b;
  return within(x, a, false, b->given == 0 ? NULL : &hi, b->given == 3);
}

/* One comparator set (up to "||" or the end): x satisfies every part. */
static bool set_satisfied(const char *s, size_t n, const struct ver *x, bool *parsed) {
  char buf[256];
  *parsed = false;
  if (n >= sizeof(buf))
    return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  const char *p = buf;
  skip_space(&p);
  if (strstr(p, " - ") != NULL) {
    struct ver a, b;
    if (!parse_ver(&p, &a))
      return false;
    skip_space(&p);
    if (*p++ != '-')
      return false;
    skip_space(&p);
    if (!parse_ver(&p, &b))
      return false;
    skip_space(&p);
    *parsed = *p == '\0';
    return *parsed && hyphen(x, &a, &b);
  }
  bool all = true;
  while (*p != '\0') {
    bool ok;
    if (!comparator(&p, x, &ok) || (*p != '\0' && *p != ' ' && *p != '\t'))
      return false;
    all = all && ok;
    skip_space(&p);
  }
  *parsed = true;
  return all;
}

bool semver_satisfies(const char *version, const char *range) {
  const char *vp = version;
  struct ver x;
  if (!parse_ver(&vp, &x) || *vp != '\0' || x.given != 3)
    return false;
  bool any = false;
  for (const char *s = range;;) {
    const char *bar = strstr(s, "||");
    size_t n = bar != NULL ? (size_t)(bar - s) : strlen(s);
    bool parsed;
    bool ok = set_satisfied(s, n, &x, &parsed);
    if (!parsed)
      return false; /* node-semver: an invalid range matches nothing */
    any = any || ok;
    if (bar == NULL)
      return any;
    s = bar + 2;
  }
}
