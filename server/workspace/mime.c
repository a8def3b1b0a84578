/* mime.c: see mime.h. */
#include "mime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MIME_DEFAULT "application/octet-stream"

struct mime_entry {
  char *ext;
  char *type;
  size_t order; /* line order: the first line naming an extension wins */
};

static int entry_cmp(const void *a, const void *b) {
  return strcasecmp(((const struct mime_entry *)a)->ext, ((const struct mime_entry *)b)->ext);
}

static int entry_cmp_ordered(const void *a, const void *b) {
  const struct mime_entry *x = a, *y = b;
  int c = strcasecmp(x->ext, y->ext);
  return c != 0 ? c : (x->order > y->order) - (x->order < y->order);
}

static int add(struct mime_db *db, size_t *cap, const char *ext, const char *type) {
  if (db->n == *cap) {
    size_t ncap = *cap != 0 ? *cap * 2 : 1024;
    struct mime_entry *p = realloc(db->entries, ncap * sizeof(*p));
    if (p == NULL)
      return -1;
    db->entries = p;
    *cap = ncap;
  }
  char *e = strdup(ext), *t = strdup(type);
  if (e == NULL || t == NULL) {
    free(e);
    free(t);
    return -1;
  }
  db->entries[db->n] = (struct mime_entry){e, t, db->n};
  db->n++;
  return 0;
}

int mime_db_load(struct mime_db *db, const char *path, struct sbx_error *err) {
  db->entries = NULL;
  db->n = 0;
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return sbx_error_set(err, SBX_INTERNAL, errno, "open %s", path);
  size_t cap = 0;
  char line[1024];
  int rv = 0;
  while (rv == 0 && fgets(line, sizeof(line), f) != NULL) {
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = '\0';
    char *save = NULL;
    char *type = strtok_r(line, " \t\r\n", &save);
    if (type == NULL || strchr(type, '/') == NULL)
      continue;
    for (char *ext; (ext = strtok_r(NULL, " \t\r\n", &save)) != NULL;)
      if (add(db, &cap, ext, type) < 0) {
        rv = -1;
        break;
      }
  }
  fclose(f);
  if (rv < 0) {
    mime_db_free(db);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "read %s", path);
  }
  if (db->n > 1)
    qsort(db->entries, db->n, sizeof(*db->entries), entry_cmp_ordered);
  size_t kept = 0;
  for (size_t i = 0; i < db->n; i++) {
    if (kept > 0 && strcasecmp(db->entries[kept - 1].ext, db->entries[i].ext) == 0) {
      free(db->entries[i].ext);
      free(db->entries[i].type);
      continue;
    }
    db->entries[kept++] = db->entries[i];
  }
  db->n = kept;
  return 0;
}

void mime_db_free(struct mime_db *db) {
  for (size_t i = 0; i < db->n; i++) {
    free(db->entries[i].ext);
    free(db->entries[i].type);
  }
  free(db->entries);
  db->entries = NULL;
  db->n = 0;
}

const char *mime_db_lookup(const struct mime_db *db, const char *name) {
  const char *dot = strrchr(name, '.');
  if (db->n == 0 || dot == NULL || dot == name || dot[1] == '\0' || strlen(dot + 1) > 64)
    return MIME_DEFAULT;
  struct mime_entry key = {(char *)(dot + 1), NULL, 0};
  const struct mime_entry *e = bsearch(&key, db->entries, db->n, sizeof(*db->entries), entry_cmp);
  return e != NULL ? e->type : MIME_DEFAULT;
}
