/* artifacts.c: see artifacts.h. Runs as root on a tree the sandbox wrote,
 * after every process of the run is gone: fd-relative, O_NOFOLLOW, fstat
 * before reading, caps before allocating, recursion bounded by max_depth. */
#include "artifacts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefs.h"
#include "text.h"

/* Entries read per directory: the tmpfs's inode cap bounds the tree anyway;
 * this bounds the memory of one listing. */
#define ARTIFACT_DIR_ENTRIES_MAX 65536

static int add_item(struct artifact_set *set, struct artifact item) {
  if (set->n == set->cap) {
    size_t ncap = set->cap != 0 ? set->cap * 2 : 32;
    struct artifact *p = realloc(set->items, ncap * sizeof(*p));
    if (p == NULL)
      return -1;
    set->items = p;
    set->cap = ncap;
  }
  set->items[set->n++] = item;
  return 0;
}

static int collect_file(int dir_fd, const char *name, const char *rel,
                        const struct artifact_caps *caps, const struct mime_db *mime,
                        struct artifact_set *set) {
  if (set->n >= caps->max_count) {
    set->skipped_count++;
    return 0;
  }
  struct stat st;
  struct sbx_error ignored;
  int fd = safefs_open_file(dir_fd, name, &st, &ignored);
  if (fd < 0) {
    set->skipped_special++; /* changed under us or unreadable: never followed */
    return 0;
  }
  struct artifact a = {0};
  a.relative_path = strdup(rel);
  if (a.relative_path == NULL) {
    close(fd);
    return -1;
  }
  const char *slash = strrchr(a.relative_path, '/');
  a.name = slash != NULL ? slash + 1 : a.relative_path;
  a.size = (uint64_t)st.st_size;
  a.mime = mime_db_lookup(mime, a.name);
  if (a.size > caps->per_file) {
    a.omitted = true;
    set->omitted_per_file++;
  } else if (set->content_bytes + a.size > caps->total) {
    a.omitted = true;
    set->omitted_total++;
  } else if (a.size > 0) {
    if (safefs_pread(fd, 0, (size_t)a.size, &a.content, &a.content_len, &ignored) < 0) {
      a.omitted = true; /* unreadable: report it, without content */
      a.content = NULL;
      a.content_len = 0;
    } else {
      set->content_bytes += a.content_len;
    }
  }
  close(fd);
  if (add_item(set, a) < 0) {
    free(a.relative_path);
    free(a.content);
    return -1;
  }
  return 0;
}

static int walk(int dir_fd, const char *prefix, size_t depth, const struct artifact_caps *caps,
                const struct mime_db *mime, struct artifact_set *set) {
  char **names;
  size_t n;
  bool truncated;
  struct sbx_error e;
  if (safefs_read_names(dir_fd, ARTIFACT_DIR_ENTRIES_MAX, &names, &n, &truncated, &e) < 0)
    return e.errnum == ENOMEM ? -1 : 0; /* an unreadable directory is skipped */
  if (truncated)
    set->skipped_count++;
  int rv = 0;
  for (size_t i = 0; i < n && rv == 0; i++) {
    const char *name = names[i];
    char rel[ARTIFACT_PATH_MAX + 1];
    int len = prefix[0] != '\0' ? snprintf(rel, sizeof(rel), "%s/%s", prefix, name)
                                : snprintf(rel, sizeof(rel), "%s", name);
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      set->skipped_special++;
      continue;
    }
    if (len < 0 || (size_t)len > ARTIFACT_PATH_MAX || !text_utf8_valid(name, strlen(name))) {
      set->skipped_names++;
      continue;
    }
    if (S_ISREG(st.st_mode)) {
      rv = collect_file(dir_fd, name, rel, caps, mime, set);
      continue;
    }
    if (depth + 1 > caps->max_depth) {
      set->skipped_depth++;
      continue;
    }
    int sub = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
      continue;
    rv = walk(sub, rel, depth + 1, caps, mime, set);
    close(sub);
  }
  safefs_free_names(names, n);
  return rv;
}

int artifacts_collect(int output_fd, const struct artifact_caps *caps, const struct mime_db *mime,
                      struct artifact_set *set, struct sbx_error *err) {
  memset(set, 0, sizeof(*set));
  if (walk(output_fd, "", 0, caps, mime, set) < 0) {
    artifacts_free(set);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "collect artifacts");
  }
  return 0;
}

void artifacts_free(struct artifact_set *set) {
  for (size_t i = 0; i < set->n; i++) {
    free(set->items[i].relative_path);
    free(set->items[i].content);
  }
  free(set->items);
  memset(set, 0, sizeof(*set));
}
