/* etc.c: the sandbox's /etc, written once at engine start under the state
 * directory: etc.<pid>/ (bound read-only at /etc in every run) and
 * users.<pid>/ (one passwd and group per slot, bound over /etc/passwd and
 * /etc/group in that slot's runs, so that the name "sandbox" is the run's
 * own uid in every slot). Only what the interpreter needs from the host's
 * /etc is copied: never shadow, ssh keys, or the server's configuration.
 * Runs with privileges; every path here comes from the engine's
 * configuration, none from a request or a sandbox. */
#include "etc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "dirs.h"
#include "io.h"

int etc_write_file(const char *path, const void *data, size_t len, struct sandbox_error *err) {
  cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return sandbox_error_set(err, errno, "create %s", path);
  if (sbx_write_all(fd, data, len) < 0)
    return sandbox_error_set(err, errno, "write %s", path);
  return 0;
}

static int write_file(const char *dir, const char *name, const char *data, size_t len,
                      struct sandbox_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return etc_write_file(path, data, len, err);
}

/* Copies a host file (following symlinks, e.g. /etc/localtime) if it exists. */
static int copy_host_file(const char *src, const char *dir, const char *name,
                          struct sandbox_error *err) {
  cleanup_close int fd = open(src, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : sandbox_error_set(err, errno, "open %s", src);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sandbox_error_set(err, errno, "stat %s", src);
  if (!S_ISREG(st.st_mode) || st.st_size > (16 << 20))
    return sandbox_error_set(err, EINVAL, "%s is not a small regular file", src);
  cleanup_free char *buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL)
    return sandbox_error_set(err, ENOMEM, "copy %s", src);
  size_t off = 0;
  while (off < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    off += (size_t)n;
  }
  return write_file(dir, name, buf, off, err);
}

/* Recreates the symlinks of Debian's /etc/alternatives that point into /usr
 * (bound read-only in the sandbox): shared libraries such as libblas.so.3,
 * which numpy and matplotlib load, are reached through them. Links to
 * anywhere else are left out: their targets are not in the sandbox. */
static int copy_alternatives(const char *etc, struct sandbox_error *err) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/alternatives", etc);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", dir);
  DIR *d = opendir("/etc/alternatives");
  if (d == NULL)
    return 0;
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    closedir(d);
    return sandbox_error_set(err, errno, "open %s", dir);
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
    if (n <= 0)
      continue;
    target[n] = '\0';
    if (strncmp(target, "/usr/", 5) != 0 || strstr(target, "/../") != NULL)
      continue;
    if (symlinkat(target, dfd, de->d_name) < 0 && errno != EEXIST) {
      int e = errno;
      closedir(d);
      return sandbox_error_set(err, e, "symlink %s/%s", dir, de->d_name);
    }
  }
  closedir(d);
  return 0;
}

/* fontconfig's main file (its conf.d is optional), so that libraries that
 * render text do not complain on every run. */
static int copy_fontconfig(const char *etc, struct sandbox_error *err) {
  if (access("/etc/fonts/fonts.conf", R_OK) < 0)
    return 0;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/fonts", etc);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", dir);
  return copy_host_file("/etc/fonts/fonts.conf", dir, "fonts.conf", err);
}

/* Removes etc.<pid> and users.<pid> directories of engines that are gone. */
void etc_remove_stale(const char *state_dir) {
  static const char *const prefixes[] = {"etc.", "users.", "lib."};
  cleanup_dir DIR *d = opendir(state_dir);
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
      size_t n = strlen(prefixes[i]);
      if (strncmp(de->d_name, prefixes[i], n) != 0)
        continue;
      char *end;
      long pid = strtol(de->d_name + n, &end, 10);
      if (*end != '\0' || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        continue;
      sandbox_remove_tree(dirfd(d), de->d_name); /* with ssl/ and alternatives/ */
    }
  }
}

/* The user and group databases of one slot: root, the sandbox user as that
 * slot's uid, nobody. */
static int write_slot_users(const char *users, unsigned slot, uid_t uid, gid_t gid,
                            struct sandbox_error *err) {
  char passwd[512], group[256], name[32];
  int p = snprintf(passwd, sizeof passwd,
                   "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                   "sandbox:x:%u:%u:sandbox:/workspace:/usr/sbin/nologin\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                   (unsigned)uid, (unsigned)gid);
  int g =
      snprintf(group, sizeof group, "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)gid);
  snprintf(name, sizeof name, "passwd.%u", slot);
  if (write_file(users, name, passwd, (size_t)p, err) < 0)
    return -1;
  snprintf(name, sizeof name, "group.%u", slot);
  return write_file(users, name, group, (size_t)g, err);
}

/* The files of /etc written here; the per-slot users replace passwd and
 * group, which hold the users every slot shares (for the installer's root
 * build before its own are bound). */
static int write_generated(const char *etc, struct sandbox_error *err) {
  static const char passwd[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
  static const char group[] = "root:x:0:\nnogroup:x:65534:\n";
  /* The hostname resolves, as on a Debian host (127.0.1.1), for code that
   * asks for its own address. */
  static const char hosts[] = "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n"
                              "::1\tlocalhost ip6-localhost ip6-loopback\n";
  static const char nss[] =
      "passwd: files\ngroup: files\nhosts: files\nservices: files\nprotocols: files\n";
  static const char hostname[] = "sandbox\n";
  char ssl[PATH_MAX];
  snprintf(ssl, sizeof ssl, "%s/ssl", etc);
  if (mkdir(ssl, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", ssl);
  /* Empty: runs resolve no names (the installer's egress proxy resolves
   * them). */
  if (write_file(etc, "resolv.conf", "", 0, err) < 0 ||
      write_file(etc, "passwd", passwd, sizeof passwd - 1, err) < 0 ||
      write_file(etc, "group", group, sizeof group - 1, err) < 0 ||
      write_file(etc, "hosts", hosts, sizeof hosts - 1, err) < 0 ||
      write_file(etc, "nsswitch.conf", nss, sizeof nss - 1, err) < 0 ||
      write_file(etc, "hostname", hostname, sizeof hostname - 1, err) < 0)
    return -1;
  return 0;
}

/* What the interpreter needs from the host's /etc, and nothing else. */
static int copy_from_host(const char *etc, struct sandbox_error *err) {
  if (copy_host_file("/etc/ld.so.cache", etc, "ld.so.cache", err) < 0 ||
      copy_host_file("/etc/localtime", etc, "localtime", err) < 0 ||
      copy_host_file("/etc/mime.types", etc, "mime.types", err) < 0 ||
      /* Service and protocol names: getservbyname, getaddrinfo(host, "http"). */
      copy_host_file("/etc/services", etc, "services", err) < 0 ||
      copy_host_file("/etc/protocols", etc, "protocols", err) < 0 ||
      /* Debian's matplotlib reads its defaults from here; without it every
       * plot fails with "Could not find matplotlibrc file". */
      copy_host_file("/etc/matplotlibrc", etc, "matplotlibrc", err) < 0 ||
      copy_fontconfig(etc, err) < 0 || copy_alternatives(etc, err) < 0)
    return -1;
  return 0;
}

int etc_write(const char *etc, const char *users, uid_t uid_base, gid_t gid_base, unsigned slots,
              struct sandbox_error *err) {
  if (mkdir(etc, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", etc);
  if (mkdir(users, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", users);
  if (write_generated(etc, err) < 0 || copy_from_host(etc, err) < 0)
    return -1;
  for (unsigned i = 0; i < slots; i++)
    if (write_slot_users(users, i, uid_base + i, gid_base + i, err) < 0)
      return -1;
  return 0;
}

static void remove_dir(const char *path) {
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (slash == NULL || slash == parent)
    return;
  *slash = '\0';
  cleanup_close int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    sandbox_remove_tree(fd, slash + 1);
}

void etc_remove(const char *etc, const char *users) {
  if (etc[0] != '\0')
    remove_dir(etc);
  if (users[0] != '\0')
    remove_dir(users);
}
