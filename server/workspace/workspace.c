/* workspace.c: see workspace.h. Runs as root against trees the sandbox
 * wrote: never build a path from their contents, never follow their
 * symlinks, never open anything of theirs but directories (O_NOFOLLOW). */
#include "workspace.h"
#include "dirs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "sandbox/sandbox.h"

int workspace_root_open(const char *path, struct sbx_error *err) {
  if (mkdir(path, 0711) < 0 && errno != EEXIST)
    return sbx_error_set(err, SBX_INTERNAL, errno, "workspaces %s", path);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "workspaces %s", path);
  return fd;
}

/* ---- tmpfs ---- */

static int mount_path(char *buf, size_t len, const char *root_path, const char *name) {
  if ((size_t)snprintf(buf, len, "%s/%s", root_path, name) >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

int workspace_mount(int root_fd, const char *root_path, const char *name, uint64_t size,
                    uint64_t inodes, uid_t uid, gid_t gid, struct sbx_error *err) {
  char path[PATH_MAX], data[160];
  if (mount_path(path, sizeof(path), root_path, name) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "workspace %s", name);
  if (mkdirat(root_fd, name, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(err, SBX_INTERNAL, errno, "mkdir workspace %s", name);
  snprintf(data, sizeof(data), "size=%" PRIu64 ",nr_inodes=%" PRIu64 ",mode=0700,uid=%u,gid=%u",
           size, inodes, (unsigned)uid, (unsigned)gid);
  if (mount("sandboxd-workspace", path, "tmpfs", MS_NOSUID | MS_NODEV, data) < 0) {
    int e = errno;
    unlinkat(root_fd, name, AT_REMOVEDIR);
    return sbx_error_set(err, SBX_INTERNAL, e, "mount tmpfs on workspace %s", name);
  }
  int fd = openat(root_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
    unlinkat(root_fd, name, AT_REMOVEDIR);
    return sbx_error_set(err, SBX_INTERNAL, e, "open workspace %s", name);
  }
  return fd;
}

int workspace_resize(const char *root_path, const char *name, uint64_t size, uint64_t inodes,
                     struct sbx_error *err) {
  char path[PATH_MAX], data[96];
  if (mount_path(path, sizeof(path), root_path, name) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "workspace %s", name);
  snprintf(data, sizeof(data), "size=%" PRIu64 ",nr_inodes=%" PRIu64, size, inodes);
  if (mount(NULL, path, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, data) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "resize workspace %s", name);
  return 0;
}

int workspace_unmount(int root_fd, const char *root_path, const char *name, struct sbx_error *err) {
  char path[PATH_MAX];
  if (mount_path(path, sizeof(path), root_path, name) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "workspace %s", name);
  if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
    return sbx_error_set(err, SBX_INTERNAL, errno, "unmount workspace %s", name);
  if (unlinkat(root_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return sbx_error_set(err, SBX_INTERNAL, errno, "rmdir workspace %s", name);
  return 0;
}

/* ---- writing into a (possibly hostile) workspace ---- */

/* Removes whatever dir_fd/name is (file, link, FIFO, tree). */
static int remove_any(int dir_fd, const char *name) {
  if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return -1;
  return sandbox_remove_tree(dir_fd, name);
}

/* Opens dir_fd/name as a directory owned by uid:gid, replacing anything
 * that is not a directory. Returns an fd or -1. */
static int ensure_dir(int dir_fd, const char *name, uid_t uid, gid_t gid) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
    if (remove_any(dir_fd, name) < 0)
      return -1;
  }
  if (mkdirat(dir_fd, name, 0700) == 0) {
    if (fchownat(dir_fd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
      return -1;
  } else if (errno != EEXIST) {
    return -1;
  }
  return openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int workspace_write_file(int dir_fd, const char *path, const uint8_t *data, size_t len, uid_t uid,
                         gid_t gid, struct sbx_error *err) {
  char buf[256];
  if (strlen(path) >= sizeof(buf))
    return sbx_error_set(err, SBX_INTERNAL, ENAMETOOLONG, "file %s", path);
  snprintf(buf, sizeof(buf), "%s", path);
  cleanup_close int cur = dup(dir_fd);
  if (cur < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "dup");
  char *comp = buf;
  for (char *slash; (slash = strchr(comp, '/')) != NULL; comp = slash + 1) {
    *slash = '\0';
    int next = ensure_dir(cur, comp, uid, gid);
    if (next < 0)
      return sbx_error_set(err, SBX_INTERNAL, errno, "directory %s of %s", comp, path);
    close(cur);
    cur = next;
  }
  if (remove_any(cur, comp) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "replace %s", path);
  cleanup_close int fd =
      openat(cur, comp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "create %s", path);
  if (sbx_write_all(fd, data, len) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "write %s", path);
  if (fchown(fd, uid, gid) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "chown %s", path);
  return 0;
}

int workspace_prepare(int ws_fd, uid_t uid, gid_t gid, const char *script, const char *code,
                      size_t code_len, const struct workspace_file *files, size_t n_files,
                      struct sbx_error *err) {
  cleanup_close int out_fd = ensure_dir(ws_fd, WORKSPACE_OUTPUT, uid, gid);
  if (out_fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "directory %s", WORKSPACE_OUTPUT);
  if (n_files > 0) {
    cleanup_close int mounts_fd = ensure_dir(ws_fd, WORKSPACE_MOUNTS, uid, gid);
    if (mounts_fd < 0)
      return sbx_error_set(err, SBX_INTERNAL, errno, "directory %s", WORKSPACE_MOUNTS);
    for (size_t i = 0; i < n_files; i++)
      if (workspace_write_file(mounts_fd, files[i].path, files[i].data, files[i].len, uid, gid,
                               err) < 0)
        return -1;
  }
  return workspace_write_file(ws_fd, script, (const uint8_t *)code, code_len, uid, gid, err);
}

int workspace_empty(int ws_fd, struct sbx_error *err) {
  DIR *dir = opendir_at(ws_fd);
  if (dir == NULL)
    return sbx_error_set(err, SBX_INTERNAL, errno, "open workspace");
  int rv = 0;
  /* Removing while reading may make readdir skip entries: read again until
   * a pass finds nothing left. */
  for (int pass = 0; pass < 8; pass++) {
    bool any = false;
    struct dirent *de;
    rewinddir(dir);
    while ((de = readdir(dir)) != NULL) {
      if (dir_entry_is_dot(de->d_name))
        continue;
      any = true;
      if (remove_any(ws_fd, de->d_name) < 0 && rv == 0)
        rv = sbx_error_set(err, SBX_INTERNAL, errno, "remove %s", de->d_name);
    }
    if (!any || rv < 0)
      break;
  }
  closedir(dir);
  return rv;
}

/* ---- chown ---- */

static int chown_children(int fd, uid_t uid, gid_t gid, int depth);

static int chown_children(int fd, uid_t uid, gid_t gid, int depth) {
  if (depth > WORKSPACE_MAX_DEPTH) {
    errno = ELOOP;
    return -1;
  }
  DIR *dir = opendir_at(fd);
  if (dir == NULL)
    return -1;
  int rv = 0;
  struct dirent *de;
  while (rv == 0 && (de = readdir(dir)) != NULL) {
    if (dir_entry_is_dot(de->d_name))
      continue;
    struct stat st;
    if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if ((st.st_uid != uid || st.st_gid != gid) &&
        fchownat(fd, de->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
      rv = -1;
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        rv = -1;
        break;
      }
      rv = chown_children(sub, uid, gid, depth + 1);
      int saved = errno;
      close(sub);
      errno = saved;
    }
  }
  int saved = errno;
  closedir(dir);
  errno = saved;
  return rv;
}

int workspace_chown_tree(int ws_fd, uid_t uid, gid_t gid, struct sbx_error *err) {
  if (fchown(ws_fd, uid, gid) < 0 || chown_children(ws_fd, uid, gid, 0) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno,
                         errno == ELOOP ? "workspace nested deeper than %d directories"
                                        : "chown workspace (depth limit %d)",
                         WORKSPACE_MAX_DEPTH);
  return 0;
}

/* ---- removal ---- */

int workspace_remove(int root_fd, const char *name, struct sbx_error *err) {
  if (sandbox_remove_tree(root_fd, name) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "remove %s", name);
  return 0;
}

/* Decodes mountinfo's octal escapes (\040 for a space...) in place. */
static void mountinfo_unescape(char *s) {
  char *w = s;
  for (char *r = s; *r != '\0'; r++) {
    if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
        r[3] <= '7') {
      *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
      r += 3;
    } else {
      *w++ = *r;
    }
  }
  *w = '\0';
}

int workspace_remove_stale(int root_fd, const char *root_path) {
  char real[PATH_MAX];
  if (realpath(root_path, real) == NULL)
    return -1;
  size_t rl = strlen(real);
  int detached = 0;
  /* Detach the deepest first; repeat, since detaching may reveal more. */
  for (int pass = 0; pass < 16; pass++) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
      return -1;
    char line[8192], found[PATH_MAX] = "";
    size_t found_len = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
      /* id parent major:minor root mountpoint ... */
      char *save = NULL, *field = strtok_r(line, " ", &save);
      for (int i = 0; i < 4 && field != NULL; i++)
        field = strtok_r(NULL, " ", &save);
      if (field == NULL)
        continue;
      mountinfo_unescape(field);
      size_t fl = strlen(field);
      if (fl > rl + 1 && strncmp(field, real, rl) == 0 && field[rl] == '/' && fl > found_len &&
          fl < sizeof(found)) {
        memcpy(found, field, fl + 1);
        found_len = fl;
      }
    }
    fclose(f);
    if (found_len == 0)
      break;
    if (umount2(found, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
      break;
    detached++;
  }
  DIR *dir = opendir_at(root_fd);
  if (dir == NULL)
    return detached;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    if (dir_entry_is_dot(de->d_name))
      continue;
    sandbox_remove_tree(root_fd, de->d_name);
  }
  closedir(dir);
  return detached;
}
