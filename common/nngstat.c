/* nngstat.c: see nngstat.h. */
#include "nngstat.h"

#include <string.h>

static nng_stat *child_named(nng_stat *scope, const char *name) {
  for (nng_stat *c = nng_stat_child(scope); c != NULL; c = nng_stat_next(c))
    if (strcmp(nng_stat_name(c), name) == 0)
      return c;
  return NULL;
}

nng_stat *sbx_nngstat_scope(nng_stat *root, const char *scope, uint32_t id) {
  if (root == NULL)
    return NULL;
  if (nng_stat_type(root) == NNG_STAT_SCOPE && strcmp(nng_stat_name(root), scope) == 0) {
    nng_stat *sid = child_named(root, "id");
    if (sid != NULL && nng_stat_value(sid) == id)
      return root;
  }
  for (nng_stat *c = nng_stat_child(root); c != NULL; c = nng_stat_next(c)) {
    nng_stat *found = sbx_nngstat_scope(c, scope, id);
    if (found != NULL)
      return found;
  }
  return NULL;
}

uint64_t sbx_nngstat_value(nng_stat *scope, const char *name) {
  nng_stat *s = child_named(scope, name);
  return s != NULL ? nng_stat_value(s) : 0;
}
