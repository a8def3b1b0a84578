/* safefs.c: see safefs.h. Never builds a host path from a name the sandbox
 * chose; never follows its symlinks; never blocks on its FIFOs. */
#include "safefs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "dirs.h"
#include "text.h"

/* Why rel could not be opened, as a client is told: the errno of the call
 * that failed decides the status. */
static int path_error(struct sbx_error *err, const char *rel, int errnum) {
  char safe[300];
  text_printable(rel, strlen(rel), safe, sizeof(safe), false);
  switch (errnum) {
  case ENOENT:
    return sbx_error_set(err, SBX_NOT_FOUND, 0, "path %s: no such file or directory", safe);
  case ELOOP:
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "path %s: is or goes through a symlink (never followed)", safe);
  case ENOTDIR:
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "path %s: goes through something that is not a directory", safe);
  case EISDIR:
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "path %s: is a directory", safe);
  case EINVAL:
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "path %s: is not a regular file (FIFO, socket or device)", safe);
  default:
    return sbx_error_set(err, SBX_INTERNAL, errnum, "path %s", safe);
  }
}

/* Opens rel below root_fd one component at a time, never through a
 * symlink; -1 with errno. */
static int open_dir(int root_fd, const char *rel) {
  int cur = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0)
    return -1;
  const char *p = rel;
  while (*p != '\0') {
    const char *slash = strchr(p, '/');
    size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
    char comp[256];
    if (n == 0 || n >= sizeof(comp)) {
      close(cur);
      errno = EINVAL;
      return -1;
    }
    memcpy(comp, p, n);
    comp[n] = '\0';
    int next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int saved = errno;
    struct stat st; /* O_DIRECTORY on a symlink says ENOTDIR: say what it is */
    if (next < 0 && saved == ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode))
      saved = ELOOP;
    close(cur);
    if (next < 0) {
      errno = saved;
      return -1;
    }
    cur = next;
    p = slash != NULL ? slash + 1 : p + n;
  }
  return cur;
}

int safefs_open_dir(int root_fd, const char *rel, struct sbx_error *err) {
  int fd = open_dir(root_fd, rel);
  return fd >= 0 ? fd : path_error(err, rel, errno);
}

/* The regular file name in dir: -1 with errno ELOOP (symlink), EISDIR,
 * EINVAL (FIFO, socket, device) or what openat gave. */
static int open_file_in(int dir, const char *name, struct stat *st) {
  struct stat pre;
  if (fstatat(dir, name, &pre, AT_SYMLINK_NOFOLLOW) < 0)
    return -1;
  if (S_ISLNK(pre.st_mode)) {
    errno = ELOOP;
    return -1;
  }
  if (!S_ISREG(pre.st_mode)) {
    errno = S_ISDIR(pre.st_mode) ? EISDIR : EINVAL;
    return -1;
  }
  /* O_NONBLOCK: should it have become a FIFO in between, open returns at
   * once; the fstat below then refuses it. */
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_ino != pre.st_ino ||
      st->st_dev != pre.st_dev) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

int safefs_open_file(int root_fd, const char *rel, struct stat *st, struct sbx_error *err) {
  const char *slash = strrchr(rel, '/');
  const char *name = slash != NULL ? slash + 1 : rel;
  if (name[0] == '\0' || strlen(name) > 255)
    return path_error(err, rel, EINVAL);
  cleanup_close int dir = -1;
  if (slash != NULL) {
    char parent[4096];
    size_t n = (size_t)(slash - rel);
    if (n >= sizeof(parent))
      return path_error(err, rel, ENAMETOOLONG);
    memcpy(parent, rel, n);
    parent[n] = '\0';
    dir = open_dir(root_fd, parent);
  } else {
    dir = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  int fd = dir >= 0 ? open_file_in(dir, name, st) : -1;
  return fd >= 0 ? fd : path_error(err, rel, errno);
}

int safefs_pread(int fd, uint64_t offset, size_t len, uint8_t **out, size_t *out_len,
                 struct sbx_error *err) {
  uint8_t *buf = malloc(len > 0 ? len : 1);
  if (buf == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "read");
  size_t n = 0;
  while (n < len) {
    ssize_t r = pread(fd, buf + n, len - n, (off_t)(offset + n));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      return sbx_error_set(err, SBX_INTERNAL, e, "read");
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  *out = buf;
  *out_len = n;
  return 0;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void safefs_free_names(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

int safefs_read_names(int dir_fd, size_t max, char ***names_out, size_t *n_out, bool *truncated,
                      struct sbx_error *err) {
  *names_out = NULL;
  *n_out = 0;
  *truncated = false;
  DIR *d = opendir_at(dir_fd);
  if (d == NULL)
    return sbx_error_set(err, SBX_INTERNAL, errno, "read a directory");
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  int rv = 0;
  errno = 0;
  while ((de = readdir(d)) != NULL) {
    if (dir_entry_is_dot(de->d_name))
      continue;
    if (n >= max) {
      *truncated = true;
      break;
    }
    if (n == cap) {
      size_t ncap = cap != 0 ? cap * 2 : 64;
      char **p = realloc(names, ncap * sizeof(*p));
      if (p == NULL) {
        rv = -1;
        break;
      }
      names = p;
      cap = ncap;
    }
    if ((names[n] = strdup(de->d_name)) == NULL) {
      rv = -1;
      break;
    }
    n++;
  }
  closedir(d);
  if (rv < 0) {
    safefs_free_names(names, n);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "read a directory");
  }
  if (n > 1)
    qsort(names, n, sizeof(*names), name_cmp);
  *names_out = names;
  *n_out = n;
  return 0;
}

int safefs_list(int dir_fd, size_t max, struct safefs_listing *out, struct sbx_error *err) {
  memset(out, 0, sizeof(*out));
  char **names;
  size_t n;
  bool truncated;
  if (safefs_read_names(dir_fd, max, &names, &n, &truncated, err) < 0)
    return -1;
  out->truncated = truncated;
  out->entries = calloc(n > 0 ? n : 1, sizeof(*out->entries));
  if (out->entries == NULL) {
    safefs_free_names(names, n);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "list a directory");
  }
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (!text_utf8_valid(names[i], strlen(names[i]))) {
      out->truncated = true;
      free(names[i]);
      continue;
    }
    if (fstatat(dir_fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
      free(names[i]); /* gone meanwhile */
      continue;
    }
    enum safefs_type t = S_ISREG(st.st_mode)   ? SAFEFS_FILE
                         : S_ISDIR(st.st_mode) ? SAFEFS_DIR
                         : S_ISLNK(st.st_mode) ? SAFEFS_SYMLINK
                                               : SAFEFS_OTHER;
    out->entries[out->n++] =
        (struct safefs_entry){names[i], t, S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0};
  }
  free(names);
  return 0;
}

void safefs_listing_free(struct safefs_listing *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->entries[i].name);
  free(l->entries);
  memset(l, 0, sizeof(*l));
}
