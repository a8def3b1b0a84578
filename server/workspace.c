/* workspace.c: see workspace.h. Runs as root against a tree the sandbox
 * wrote: never build a path from its contents, never follow its symlinks. */
#include "workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/cleanup.h"

/* Deeper trees than this are left behind and reported, so that removal can
 * not run out of file descriptors. */
#define WORKSPACE_MAX_DEPTH 256

static int ws_fail(char *msg, size_t msglen, int errnum, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
  if (errnum != 0 && n >= 0 && (size_t)n < msglen)
    snprintf(msg + n, msglen - (size_t)n, ": %s", strerror(errnum));
  errno = errnum;
  return -1;
}

int workspace_root_open(const char *path) {
  if (mkdir(path, 0711) < 0 && errno != EEXIST)
    return -1;
  return open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int write_all(int fd, const uint8_t *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    data += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Creates dir_fd/path (parents made as needed) with data. */
static int write_file(int dir_fd, const char *path, const uint8_t *data, size_t len, uid_t uid,
                      gid_t gid, char *msg, size_t msglen) {
  char buf[256];
  if (strlen(path) >= sizeof(buf))
    return ws_fail(msg, msglen, ENAMETOOLONG, "file %s", path);
  snprintf(buf, sizeof(buf), "%s", path);
  cleanup_close int cur = dup(dir_fd);
  if (cur < 0)
    return ws_fail(msg, msglen, errno, "dup");
  char *comp = buf;
  for (char *slash; (slash = strchr(comp, '/')) != NULL; comp = slash + 1) {
    *slash = '\0';
    if (mkdirat(cur, comp, 0700) == 0) {
      if (fchownat(cur, comp, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
        return ws_fail(msg, msglen, errno, "chown directory %s", comp);
    } else if (errno != EEXIST) {
      return ws_fail(msg, msglen, errno, "mkdir %s", comp);
    }
    int next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return ws_fail(msg, msglen, errno, "open directory %s", comp);
    close(cur);
    cur = next;
  }
  cleanup_close int fd = openat(cur, comp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return ws_fail(msg, msglen, errno, "create %s", path);
  if (write_all(fd, data, len) < 0)
    return ws_fail(msg, msglen, errno, "write %s", path);
  if (fchown(fd, uid, gid) < 0)
    return ws_fail(msg, msglen, errno, "chown %s", path);
  return 0;
}

int workspace_create(int root_fd, const char *name, uid_t uid, gid_t gid, const char *code,
                     const struct workspace_file *files, size_t n_files, char *msg, size_t msglen) {
  if (mkdirat(root_fd, name, 0700) < 0)
    return ws_fail(msg, msglen, errno, "mkdir workspace %s", name);
  cleanup_close int dir_fd = openat(root_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0)
    goto fail;
  if (fchown(dir_fd, uid, gid) < 0) {
    ws_fail(msg, msglen, errno, "chown workspace %s", name);
    goto fail;
  }
  for (size_t i = 0; i < n_files; i++)
    if (write_file(dir_fd, files[i].path, files[i].data, files[i].len, uid, gid, msg, msglen) < 0)
      goto fail;
  if (write_file(dir_fd, "main.py", (const uint8_t *)code, strlen(code), uid, gid, msg, msglen) < 0)
    goto fail;
  return 0;
fail : {
  int saved = errno;
  char ignored[128];
  workspace_remove(root_fd, name, ignored, sizeof(ignored));
  errno = saved;
  return -1;
}
}

static int remove_entry(int dir_fd, const char *name, int depth, char *msg, size_t msglen);

/* Empties the directory open as fd (consumed). */
static int remove_children(int fd, int depth, char *msg, size_t msglen) {
  DIR *dir = fdopendir(fd);
  if (dir == NULL) {
    close(fd);
    return ws_fail(msg, msglen, errno, "fdopendir");
  }
  int rv = 0;
  /* Removing while reading may make readdir skip entries: read again until a
   * pass finds nothing left to remove. */
  for (;;) {
    bool removed_any = false;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(dir)) != NULL) {
      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
        continue;
      if (remove_entry(dirfd(dir), de->d_name, depth + 1, msg, msglen) < 0) {
        rv = -1;
        continue;
      }
      removed_any = true;
    }
    if (!removed_any || rv < 0)
      break;
    rewinddir(dir);
  }
  closedir(dir);
  return rv;
}

static int remove_entry(int dir_fd, const char *name, int depth, char *msg, size_t msglen) {
  /* unlinkat never follows a symlink: a link is removed, not its target. */
  if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return ws_fail(msg, msglen, errno, "unlink %s", name);
  if (depth > WORKSPACE_MAX_DEPTH)
    return ws_fail(msg, msglen, ELOOP, "directory %s nested deeper than %d", name,
                   WORKSPACE_MAX_DEPTH);
  int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return ws_fail(msg, msglen, errno, "open directory %s", name);
  if (remove_children(fd, depth, msg, msglen) < 0)
    return -1;
  if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return ws_fail(msg, msglen, errno, "rmdir %s", name);
  return 0;
}

int workspace_remove(int root_fd, const char *name, char *msg, size_t msglen) {
  msg[0] = '\0';
  return remove_entry(root_fd, name, 0, msg, msglen);
}
