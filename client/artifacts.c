/* artifacts.c: saving a reply's artifacts below a directory
 * (sbxc_artifact_save, sbxc_artifacts_save in sandbox_client.h), by the
 * rules the Python client (_safe_save.py) and the TypeScript client
 * (Artifact.saveTo) promise too. An artifact's relative_path comes from
 * the sandbox through the server: it is hostile. Only plain relative paths
 * (no empty, "." or ".." component, not absolute); every directory below
 * the caller's opened with O_NOFOLLOW relative to the one above it; the
 * file created with O_NOFOLLOW | O_NONBLOCK and checked to be a regular
 * file with no other hard link before it is truncated. What this file must
 * never do: resolve the artifact's path as a whole string, follow a
 * symlink below the directory, block on a FIFO, or write to a file that
 * may live outside the directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fail.h"
#include "io.h"
#include "sandbox_client.h"
#include "text.h"

/* How much of a hostile path a message shows. */
#define SHOWN_PATH_MAX 80
_Static_assert(NAME_MAX == 255, "unsafe_path's message names the limit");

/* err = 'artifact "PATH": why' with PATH made printable and cut short;
 * errno = errnum; returns -1. */
static int refuse(int errnum, const char *rel, const char *why, char *err, size_t errlen) {
  char shown[SHOWN_PATH_MAX + 1];
  size_t len = strlen(rel);
  text_printable(rel, len < SHOWN_PATH_MAX ? len : SHOWN_PATH_MAX, shown, sizeof(shown), false);
  sbxc_fail(err, errlen, "artifact \"%s%s\": %s", shown, len > SHOWN_PATH_MAX ? "..." : "", why);
  errno = errnum;
  return -1;
}

/* A plain relative path: not empty, shorter than PATH_MAX, not absolute,
 * each component a name of at most NAME_MAX bytes other than "." and "..". */
static const char *unsafe_path(const char *rel) {
  size_t len = strlen(rel);
  if (len == 0 || len >= PATH_MAX)
    return "empty or too long";
  if (rel[0] == '/')
    return "absolute";
  for (const char *comp = rel;;) {
    size_t n = strcspn(comp, "/");
    if (n == 0 || (n == 1 && comp[0] == '.') || (n == 2 && comp[0] == '.' && comp[1] == '.'))
      return "an empty, '.' or '..' component";
    if (n > NAME_MAX)
      return "a component over 255 bytes";
    if (comp[n] == '\0')
      return NULL;
    comp += n + 1;
  }
}

/* Makes dir and the directories above it that are missing (mkdir -p). The
 * directory is the caller's: a symlink there is followed. */
static int make_dirs(const char *dir) {
  char path[PATH_MAX];
  size_t len = strlen(dir);
  if (len == 0 || len >= sizeof(path)) {
    errno = len == 0 ? ENOENT : ENAMETOOLONG;
    return -1;
  }
  memcpy(path, dir, len + 1);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
      return -1;
    *p = c;
    if (c == '\0')
      return 0;
  }
}

/* Opens (making it if needed) the directory comp below cur, never through
 * a symlink; -1 with errno otherwise. */
static int open_subdir(int cur, const char *comp) {
  if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
    return -1;
  return openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Writes content to the regular file name below cur (created, or an
 * existing one truncated when it has no other hard link). */
static int write_file(int cur, const char *name, const struct sbxc_artifact *a, char *err,
                      size_t errlen) {
  const char *rel = a->relative_path;
  cleanup_close int fd =
      openat(cur, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && (errno == ELOOP || errno == ENXIO || errno == EISDIR))
    return refuse(EINVAL, rel, "exists as a symlink, FIFO or directory: not written", err, errlen);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return refuse(errno, rel, strerror(errno), err, errlen);
  if (!S_ISREG(st.st_mode))
    return refuse(EINVAL, rel, "exists and is not a regular file: not written", err, errlen);
  if (st.st_nlink > 1)
    return refuse(EINVAL, rel, "exists with other hard links: not written", err, errlen);
  if (ftruncate(fd, 0) < 0 || sbx_write_all(fd, a->content, a->content_len) < 0)
    return refuse(errno, rel, strerror(errno), err, errlen);
  return 0;
}

int sbxc_artifact_save(const struct sbxc_artifact *a, const char *dir, char *err, size_t errlen) {
  const char *rel = a->relative_path != NULL ? a->relative_path : "";
  const char *why = unsafe_path(rel);
  if (a->content_omitted)
    return refuse(ENODATA, rel,
                  "the server left its content out (over --artifact-bytes or the reply's cap)", err,
                  errlen);
  if (why != NULL)
    return refuse(EINVAL, rel, why, err, errlen);
  if (make_dirs(dir) < 0)
    return refuse(errno, rel, strerror(errno), err, errlen);
  cleanup_close int cur = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0)
    return refuse(errno, rel, strerror(errno), err, errlen);
  char buf[PATH_MAX];
  memcpy(buf, rel, strlen(rel) + 1); /* unsafe_path: shorter than PATH_MAX */
  char *comp = buf;
  for (char *slash; (slash = strchr(comp, '/')) != NULL; comp = slash + 1) {
    *slash = '\0';
    int next = open_subdir(cur, comp);
    if (next < 0 && (errno == ELOOP || errno == ENOTDIR))
      return refuse(EINVAL, rel,
                    "a directory on its way is a symlink or not a directory: not followed", err,
                    errlen);
    if (next < 0)
      return refuse(errno, rel, strerror(errno), err, errlen);
    close(cur);
    cur = next;
  }
  return write_file(cur, comp, a, err, errlen);
}

int sbxc_artifacts_save(const struct sbxc_result *r, const char *dir, char *err, size_t errlen) {
  for (size_t i = 0; i < r->n_artifacts; i++)
    if (!r->artifacts[i].content_omitted &&
        sbxc_artifact_save(&r->artifacts[i], dir, err, errlen) < 0)
      return -1;
  return 0;
}
