/* remove_tree.c: deletes a directory tree that a sandbox wrote into.
 *
 * Hostile input: names may be anything, symlinks point anywhere, nesting may
 * be deeper than PATH_MAX and wider than the fd limit. So: fd-relative calls
 * only (unlinkat, openat with O_NOFOLLOW), never a path built from names,
 * and no recursion: walk down into the first subdirectory, empty it, climb
 * back with "..", repeat. Call it only when no sandbox process is left that
 * could still change the tree. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox.h"
#include "dirs.h"

/* Empties the directory fd points at, except for one subdirectory whose name
 * it returns in sub (empty string when none is left). Returns -1 on error. */
static int empty_files(int fd, char *sub, size_t sub_size) {
  sub[0] = '\0';
  DIR *d = opendir_at(fd);
  if (d == NULL)
    return -1;
  struct dirent *de;
  int ret = 0;
  while ((de = readdir(d)) != NULL) {
    if (dir_entry_is_dot(de->d_name))
      continue;
    if (unlinkat(fd, de->d_name, 0) == 0 || errno == ENOENT)
      continue;
    if (errno == EISDIR || errno == EPERM) {
      if (unlinkat(fd, de->d_name, AT_REMOVEDIR) == 0)
        continue;
      if (errno == ENOTEMPTY || errno == EEXIST) {
        size_t n = strlen(de->d_name);
        if (n < sub_size)
          memcpy(sub, de->d_name, n + 1);
        break; /* descend into it first */
      }
    }
    ret = -1;
  }
  closedir(d);
  return ret;
}

int sandbox_remove_tree(int parent_fd, const char *name) {
  int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return 0;
    if (errno == ENOTDIR || errno == ELOOP)
      return unlinkat(parent_fd, name, 0);
    return -1;
  }
  size_t depth = 0;
  char sub[256];
  int ret = 0;
  for (int guard = 0; guard < 100000000; guard++) {
    if (empty_files(fd, sub, sizeof sub) < 0)
      ret = -1;
    if (sub[0] != '\0') {
      int child = openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) {
        ret = -1;
        break;
      }
      close(fd);
      fd = child;
      depth++;
      continue;
    }
    if (depth == 0)
      break;
    /* This level is empty: climb and remove it. */
    int up = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    if (up < 0)
      return -1;
    fd = up;
    depth--;
    if (ret < 0)
      break; /* something below could not be removed: don't loop on it */
  }
  close(fd);
  if (ret < 0)
    return -1;
  return unlinkat(parent_fd, name, AT_REMOVEDIR);
}
