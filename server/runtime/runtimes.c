/* runtimes.c: see runtimes.h. */
#include "runtimes.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "semver.h"
#include "text.h"

static struct runtime *add(struct runtime_table *t, enum runtime_kind kind, const char *name,
                           const char *language) {
  struct runtime *rt = &t->v[t->n++];
  memset(rt, 0, sizeof *rt);
  rt->kind = kind;
  snprintf(rt->name, sizeof rt->name, "%s", name);
  snprintf(rt->language, sizeof rt->language, "%s", language);
  return rt;
}

static void add_alias(struct runtime *rt, const char *alias) {
  if (rt->n_aliases < RUNTIME_ALIASES_MAX)
    snprintf(rt->aliases[rt->n_aliases++], sizeof rt->aliases[0], "%s", alias);
}

/* The runtime whose name or alias is name, or whose language is name
 * while language (the new runtime's) is another; NULL if none. Languages
 * are shared (two runtimes may offer one language at different versions),
 * names and aliases are not. */
static const struct runtime *taken(const struct runtime_table *t, const char *name,
                                   const char *language) {
  for (size_t i = 0; i < t->n; i++) {
    if (strcmp(t->v[i].name, name) == 0 ||
        (strcmp(t->v[i].language, name) == 0 && strcmp(t->v[i].language, language) != 0))
      return &t->v[i];
    for (size_t a = 0; a < t->v[i].n_aliases; a++)
      if (strcmp(t->v[i].aliases[a], name) == 0)
        return &t->v[i];
  }
  return NULL;
}

/* python's aliases are Piston's python package's: py, py3, python3, and
 * python3.MINOR once the version is known. */
static void add_pythons(struct runtime_table *t, bool zygote) {
  struct runtime *py = add(t, RUNTIME_KIND_PYTHON, RUNTIME_PYTHON, "python");
  add_alias(py, "py");
  add_alias(py, "py3");
  add_alias(py, "python3");
  if (zygote)
    add(t, RUNTIME_KIND_PYTHON_ZYGOTE, RUNTIME_PYTHON_ZYGOTE, "python");
  runtimes_set_python(t, "");
}

void runtimes_set_python(struct runtime_table *t, const char *version) {
  for (size_t i = 0; i < t->n; i++) {
    struct runtime *rt = &t->v[i];
    if (rt->kind == RUNTIME_KIND_MANIFEST)
      continue;
    snprintf(rt->version, sizeof rt->version, "%s", version);
    rt->available = version[0] != '\0';
    snprintf(rt->why_unavailable, sizeof rt->why_unavailable, "%s",
             rt->available ? "" : "/usr/bin/python3 could not be asked for its version");
  }
  struct runtime *py = &t->v[0];
  size_t end = strcspn(version, ".");
  if (version[end] != '.' || py->n_aliases != 3)
    return;
  end += 1 + strcspn(version + end + 1, ".");
  char minor[RUNTIME_NAME_MAX + 1];
  snprintf(minor, sizeof minor, "python%.*s", (int)end, version);
  if (runtime_name_ok(minor) && taken(t, minor, py->language) == NULL)
    add_alias(py, minor);
}

/* A manifest refused for a clash with runtime clash: -1 with err saying
 * which of its names (what) clash has, naming both files. */
static int refuse_clash(const char *path, struct runtime_manifest *m, const char *what,
                        const struct runtime *clash, struct sbx_error *err) {
  int rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: runtime %s: %s runtime %s%s%s", path,
                         m->name, what, clash->name, clash->source[0] ? " of " : " (built in)",
                         clash->source);
  runtime_manifest_free(m);
  return rv;
}

static int add_manifest(struct runtime_table *t, const char *path, struct sbx_error *err) {
  if (t->n >= RUNTIMES_MAX)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: more than %d runtimes", path,
                         RUNTIMES_MAX);
  struct runtime_manifest m;
  if (runtime_manifest_load(path, &m, err) < 0)
    return -1;
  const struct runtime *clash = taken(t, m.name, m.language);
  for (size_t a = 0; clash == NULL && a < m.n_aliases; a++)
    clash = taken(t, m.aliases[a], m.language);
  if (clash != NULL)
    return refuse_clash(path, &m, "its name or an alias is taken by", clash, err);
  /* Its language may be another's language (shared), not another's name
   * or alias: a request's language would then match both. */
  clash = taken(t, m.language, m.language);
  char what[RUNTIME_NAME_MAX + 64];
  snprintf(what, sizeof what, "its language %s is the name or an alias of", m.language);
  if (clash != NULL && strcmp(clash->language, m.language) != 0)
    return refuse_clash(path, &m, what, clash, err);
  struct runtime *rt = add(t, RUNTIME_KIND_MANIFEST, m.name, m.language);
  for (size_t a = 0; a < m.n_aliases; a++)
    add_alias(rt, m.aliases[a]);
  rt->manifest = m;
  snprintf(rt->source, sizeof rt->source, "%s", path);
  snprintf(rt->why_unavailable, sizeof rt->why_unavailable, "not checked yet");
  return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int json_file(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  return d->d_name[0] != '.' && n > 5 && strcmp(d->d_name + n - 5, ".json") == 0;
}

int runtimes_load(struct runtime_table *t, const char *dir, bool required, bool zygote,
                  struct sbx_error *err) {
  memset(t, 0, sizeof *t);
  add_pythons(t, zygote);
  if (dir == NULL || dir[0] == '\0')
    return 0;
  struct dirent **names = NULL;
  int n = scandir(dir, &names, json_file, by_name);
  if (n < 0) {
    if (errno == ENOENT && !required)
      return 0;
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, errno, "runtimes directory %s", dir);
  }
  int rv = 0;
  for (int i = 0; i < n; i++) {
    char path[1024];
    if (rv == 0 &&
        (size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) >= sizeof path)
      rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, ENAMETOOLONG, "runtimes directory %s", dir);
    if (rv == 0)
      rv = add_manifest(t, path, err);
    free(names[i]);
  }
  free(names);
  if (rv < 0)
    runtimes_free(t);
  return rv;
}

void runtimes_free(struct runtime_table *t) {
  for (size_t i = 0; i < t->n; i++)
    runtime_manifest_free(&t->v[i].manifest);
  t->n = 0;
}

const struct runtime *runtimes_find(const struct runtime_table *t, const char *name) {
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->v[i].name, name) == 0)
      return &t->v[i];
  return NULL;
}

static bool speaks(const struct runtime *rt, const char *language) {
  if (strcmp(rt->language, language) == 0 || strcmp(rt->name, language) == 0)
    return true;
  for (size_t a = 0; a < rt->n_aliases; a++)
    if (strcmp(rt->aliases[a], language) == 0)
      return true;
  return false;
}

void runtimes_names(const struct runtime_table *t, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < t->n && used < len; i++)
    if (t->v[i].available)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", t->v[i].name);
}

static int unavailable(const struct runtime *rt, struct sbx_error *err) {
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "runtime %s is unavailable on this server: %s (GetInfo's runtime_info)",
                       rt->name, rt->why_unavailable);
}

int runtimes_resolve(const struct runtime_table *t, const char *runtime, const char *language,
                     const char *version, const struct runtime **out, struct sbx_error *err) {
  char known[600];
  runtimes_names(t, known, sizeof known);
  if (runtime[0] != '\0' && language[0] != '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "runtime and language: set one of them (runtime names a runtime; "
                         "language with version picks one)");
  if (language[0] == '\0' && version[0] != '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "version: goes with language");
  if (language[0] == '\0') {
    const struct runtime *rt = runtimes_find(t, runtime[0] != '\0' ? runtime : RUNTIME_PYTHON);
    char shown[72];
    text_printable(runtime, strlen(runtime), shown, sizeof shown, false);
    if (rt == NULL && strcmp(runtime, RUNTIME_PYTHON_ZYGOTE) == 0)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "runtime: \"%s\" is not supported; supported: %s (" RUNTIME_PYTHON_ZYGOTE
                           " needs a server started with --zygote)",
                           shown, known);
    if (rt == NULL)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "runtime: \"%s\" is not supported; supported: %s", shown, known);
    if (!rt->available)
      return unavailable(rt, err);
    *out = rt;
    return 0;
  }
  /* The first runtime of the language whose version is in range; a
   * zygote runtime is picked only by its name. */
  const struct runtime *down = NULL;
  for (size_t i = 0; i < t->n; i++) {
    const struct runtime *rt = &t->v[i];
    if (rt->kind == RUNTIME_KIND_PYTHON_ZYGOTE || !speaks(rt, language))
      continue;
    if (!rt->available) {
      down = down != NULL ? down : rt;
      continue;
    }
    if (version[0] == '\0' || strcmp(version, "*") == 0 || semver_satisfies(rt->version, version)) {
      *out = rt;
      return 0;
    }
  }
  if (down != NULL)
    return unavailable(down, err);
  char lang[72], range[72];
  text_printable(language, strlen(language), lang, sizeof lang, false);
  text_printable(version, strlen(version), range, sizeof range, false);
  return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "language: %s-%s runtime is unknown; available: %s (GetInfo's "
                       "runtime_info lists each with its language, version and aliases)",
                       lang, range[0] ? range : "*", known);
}
