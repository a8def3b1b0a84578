/* runtimes.h: the runtimes a server offers (docs/RUNTIMES.md): python and
 * python-zygote, built in, and one per manifest in the runtimes directory,
 * loaded at start. Each has a name, a language, a version and aliases; a
 * manifest runtime is available only once its version was probed and its
 * self-test passed (runtime_check.c), else it is listed with the reason.
 * One resolver for every front: a request names a runtime, or a language
 * (a name or alias) and a version range (node-semver's, as Piston takes
 * it). The table is filled before any thread and read-only after. */
#ifndef SBX_RUNTIME_RUNTIMES_H
#define SBX_RUNTIME_RUNTIMES_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "manifest.h"

#define RUNTIMES_MAX 64
#define RUNTIME_PYTHON "python"
#define RUNTIME_PYTHON_ZYGOTE "python-zygote"

enum runtime_kind {
  RUNTIME_KIND_PYTHON = 0,    /* a fresh interpreter per run (sandboxd_cell) */
  RUNTIME_KIND_PYTHON_ZYGOTE, /* forked from the slot's zygote (--zygote) */
  RUNTIME_KIND_MANIFEST,      /* a manifest's commands */
};

struct runtime {
  enum runtime_kind kind;
  char name[RUNTIME_NAME_MAX + 1];
  char language[RUNTIME_NAME_MAX + 1];
  char version[32]; /* MAJOR.MINOR.PATCH; "" until probed */
  char aliases[RUNTIME_ALIASES_MAX][RUNTIME_NAME_MAX + 1];
  size_t n_aliases;
  struct runtime_manifest manifest; /* RUNTIME_KIND_MANIFEST only */
  char source[512];                 /* the manifest's path, "" for built-ins */
  bool available;
  char why_unavailable[512];
};

struct runtime_table {
  struct runtime v[RUNTIMES_MAX];
  size_t n;
};

/* The built-ins (python; python-zygote with zygote), then every "*.json"
 * in dir, in name order. A manifest that does not parse, or whose name or
 * an alias is taken, fails the start (-1 with err naming the file): the
 * operator's mistake, said at once. dir NULL or absent with !required: no
 * manifests. Every runtime starts unavailable: the Pythons until
 * runtimes_set_python, the others until checked (runtime_check.c). */
int runtimes_load(struct runtime_table *t, const char *dir, bool required, bool zygote,
                  struct sbx_error *err);
/* The Pythons' version, as the interpreter gave it ("" when it could not
 * be asked: they stay unavailable), and python's aliases with it. */
void runtimes_set_python(struct runtime_table *t, const char *version);
void runtimes_free(struct runtime_table *t);

/* By exact name, available or not; NULL if none. */
const struct runtime *runtimes_find(const struct runtime_table *t, const char *name);

/* The request's choice: runtime (a name; "" = none) or language (a
 * language or alias) with version (a range; "" = any). Both, or neither
 * (then python), as the proto says. 0 with *out an available runtime, or
 * -1 with err: INVALID_ARGUMENT naming what is known, or
 * FAILED_PRECONDITION for a runtime that exists but is unavailable (its
 * reason). */
int runtimes_resolve(const struct runtime_table *t, const char *runtime, const char *language,
                     const char *version, const struct runtime **out, struct sbx_error *err);

/* Whether a runtime is one of the built-in Pythons. */
static inline bool runtime_is_python(const struct runtime *rt) {
  return rt->kind != RUNTIME_KIND_MANIFEST;
}

/* ", "-separated names of the available runtimes, into buf. */
void runtimes_names(const struct runtime_table *t, char *buf, size_t len);

#endif
