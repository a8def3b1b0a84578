/* cgroup.c: backend selection and the small file helpers the backends share.
 *
 * Runs with privileges: only ever writes below the engine's own directory,
 * sandboxd.<pid>, created inside our own cgroup or the configured parent. */
#include "cgroup.h"
#include "dirs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

int cgroup_write_at(int dirfd, const char *file, const char *value, struct sandbox_error *err) {
  cleanup_close int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return sandbox_error_set(err, errno, "open cgroup file %s", file);
  size_t len = strlen(value);
  ssize_t n = write(fd, value, len);
  if (n < 0)
    return sandbox_error_set(err, errno, "write '%s' to cgroup file %s", value, file);
  if ((size_t)n != len)
    return sandbox_error_set(err, EIO, "short write to cgroup file %s", file);
  return 0;
}

int cgroup_write_u64_at(int dirfd, const char *file, uint64_t value, struct sandbox_error *err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRIu64, value);
  return cgroup_write_at(dirfd, file, buf, err);
}

ssize_t cgroup_pread_fd(int fd, char *buf, size_t size) {
  size_t off = 0;
  while (off + 1 < size) {
    ssize_t n = pread(fd, buf + off, size - 1 - off, (off_t)off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (n == 0)
      break;
    off += (size_t)n;
  }
  buf[off] = '\0';
  return (ssize_t)off;
}

ssize_t cgroup_read_at(int dirfd, const char *file, char *buf, size_t size) {
  cleanup_close int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  return cgroup_pread_fd(fd, buf, size);
}

int cgroup_keyed_u64(const char *text, const char *key, uint64_t *value) {
  size_t klen = strlen(key);
  const char *p = text;
  while (p != NULL && *p != '\0') {
    if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
      *value = strtoull(p + klen + 1, NULL, 10);
      return 0;
    }
    p = strchr(p, '\n');
    if (p != NULL)
      p++;
  }
  return -1;
}

/* True when the comma-separated list has item. */
static bool list_has(const char *list, const char *item) {
  size_t len = strlen(item);
  for (const char *p = list; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, item, len) == 0)
      return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

int cgroup_self_path(const char *controller, char *out, size_t size, struct sandbox_error *err) {
  cleanup_fclose FILE *f = fopen("/proc/self/cgroup", "re");
  if (f == NULL)
    return sandbox_error_set(err, errno, "open /proc/self/cgroup");
  char line[4096];
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL)
      continue;
    /* "ID:CONTROLLERS:PATH": cut after ID too, or the v2 line "0::/x" would
     * read as hierarchy "0:" and never match. */
    *c1 = '\0';
    *c2 = '\0';
    const char *controllers = c1 + 1;
    const char *path = c2 + 1;
    bool match = controller == NULL ? (strcmp(line, "0") == 0 && *controllers == '\0')
                                    : list_has(controllers, controller);
    if (match) {
      if ((size_t)snprintf(out, size, "%s", path) >= size)
        return sandbox_error_set(err, ENAMETOOLONG, "own cgroup path");
      return 0;
    }
  }
  return sandbox_error_set(err, ENOENT, "no %s entry in /proc/self/cgroup",
                           controller ? controller : "cgroup v2");
}

int cgroup_find_mount(const char *controller, char *mnt, size_t mnt_size, char *root,
                      size_t root_size) {
  cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return -1;
  char line[4096];
  while (fgets(line, sizeof line, f) != NULL) {
    /* id parent major:minor root mountpoint opts [optional...] - fstype source superopts */
    char *sep = strstr(line, " - ");
    if (sep == NULL)
      continue;
    char fstype[64], source[256], superopts[1024];
    if (sscanf(sep + 3, "%63s %255s %1023s", fstype, source, superopts) != 3)
      continue;
    bool match = controller == NULL
                     ? strcmp(fstype, "cgroup2") == 0
                     : (strcmp(fstype, "cgroup") == 0 && list_has(superopts, controller));
    if (!match)
      continue;
    char mroot[4096], mpoint[4096];
    if (sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2)
      continue;
    if (strchr(mpoint, '\\') != NULL)
      continue; /* escaped characters in the path: not a mount we would use */
    snprintf(mnt, mnt_size, "%s", mpoint);
    snprintf(root, root_size, "%s", mroot);
    return 0;
  }
  errno = ENOENT;
  return -1;
}

const char *cgroup_next_id(const char *p, long *id) {
  while (*p == '\n')
    p++;
  char *end;
  *id = strtol(p, &end, 10);
  return end == p ? NULL : end;
}

void cgroup_kill_procs_except(int dirfd, pid_t spare) {
  char buf[65536];
  if (cgroup_read_at(dirfd, "cgroup.procs", buf, sizeof buf) <= 0)
    return;
  long pid;
  for (const char *p = buf; (p = cgroup_next_id(p, &pid)) != NULL;)
    if (pid > 1 && pid != getpid() && (spare == 0 || pid != spare))
      kill((pid_t)pid, SIGKILL);
}

void cgroup_kill_procs_at(int dirfd) {
  cgroup_kill_procs_except(dirfd, 0);
}

/* Waits (event-driven on v2, bounded) until dirfd's cgroup has no process. */
static bool cgroup_wait_empty(int dirfd, bool v2) {
  char buf[256];
  for (int attempt = 0; attempt < 50; attempt++) {
    if (v2) {
      if (cgroup_read_at(dirfd, "cgroup.events", buf, sizeof buf) < 0)
        return false;
      uint64_t populated = 1;
      if (cgroup_keyed_u64(buf, "populated", &populated) == 0 && populated == 0)
        return true;
      cleanup_close int fd = openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return false;
      struct pollfd pfd = {.fd = fd, .events = POLLPRI};
      poll(&pfd, 1, 100);
    } else {
      if (cgroup_read_at(dirfd, "cgroup.procs", buf, sizeof buf) < 0)
        return false;
      char self[32];
      snprintf(self, sizeof self, "%d\n", (int)getpid());
      if (buf[0] == '\0' || strcmp(buf, self) == 0)
        return true;
      cgroup_kill_procs_at(dirfd);
      /* v1 has no populated event on a file we can poll: dying tasks leave
       * within microseconds; a short bounded back-off suffices. */
      struct timespec ts = {0, 2 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return false;
}

int cgroup_remove_tree(const char *dir, bool v2) {
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return errno == ENOENT ? 0 : -1;
  DIR *d = opendir_at(dfd);
  if (d == NULL)
    return -1;
  struct dirent *de;
  int ret = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.')
      continue;
    char sub[4096];
    if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) >= sizeof sub)
      continue;
    if (cgroup_remove_tree(sub, v2) < 0)
      ret = -1;
  }
  closedir(d);
  if (v2)
    cgroup_write_at(dfd, "cgroup.kill", "1", NULL);
  else
    cgroup_kill_procs_at(dfd);
  cgroup_wait_empty(dfd, v2);
  if (rmdir(dir) < 0 && errno != ENOENT)
    ret = -1;
  return ret;
}

void cgroup_remove_stale(const char *base_dir, bool v2) {
  DIR *d = opendir(base_dir);
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, "sandboxd.", 9) != 0)
      continue;
    char *end;
    long pid = strtol(de->d_name + 9, &end, 10);
    if (*end != '\0' || pid <= 0)
      continue;
    if (pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue; /* its engine is alive */
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", base_dir, de->d_name) < sizeof path)
      cgroup_remove_tree(path, v2);
  }
  closedir(d);
}

static int zygotes_dir(const struct cgroup_manager *m, int c, char *out, size_t size) {
  if (m->engine_dir[c][0] == '\0')
    return -1;
  return (size_t)snprintf(out, size, "%s/zygotes", m->engine_dir[c]) < size ? 0 : -1;
}

/* The zygotes' limits: a zygote imports package code, so it is bounded as
 * a run is (docs/SECURITY.md, "Package code is user code"). Whichever of
 * the files this directory has (one controller per directory on v1). */
static int zygotes_limit(const struct cgroup_manager *m, int dfd, const char *path,
                         unsigned *written, struct sandbox_error *err) {
  const char *memory_file =
      m->backend->kind == SANDBOX_BACKEND_CGROUP_V2 ? "memory.max" : "memory.limit_in_bytes";
  if (faccessat(dfd, "pids.max", W_OK, 0) == 0) {
    if (cgroup_write_u64_at(dfd, "pids.max", (uint64_t)m->n_slots * CGROUP_ZYGOTE_PIDS, err) < 0)
      return sandbox_error_wrap(err, "%s", path);
    *written |= 1;
  }
  if (faccessat(dfd, memory_file, W_OK, 0) == 0) {
    if (cgroup_write_u64_at(dfd, memory_file, (uint64_t)m->n_slots * CGROUP_ZYGOTE_MEMORY_BYTES,
                            err) < 0)
      return sandbox_error_wrap(err, "%s", path);
    *written |= 2;
  }
  return 0;
}

int cgroup_zygotes_adopt(struct cgroup_manager *m, pid_t pid, struct sandbox_error *err) {
  int n = m->backend->kind == SANDBOX_BACKEND_CGROUP_V1 ? CGROUP_V1_CONTROLLERS : 1;
  char buf[32];
  snprintf(buf, sizeof buf, "%d", (int)pid);
  /* The limits first, in every hierarchy, then the zygote: it never runs
   * unbounded, and a cgroup without them is refused (fail closed). */
  unsigned written = 0;
  int dfds[CGROUP_V1_CONTROLLERS];
  for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++)
    dfds[c] = -1;
  int ret = 0;
  for (int c = 0; c < n && ret == 0; c++) {
    char path[4200];
    if (zygotes_dir(m, c, path, sizeof path) < 0)
      continue; /* an optional controller this host does not offer */
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
      ret = sandbox_error_set(err, errno, "mkdir %s", path);
    else if ((dfds[c] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      ret = sandbox_error_set(err, errno, "open %s", path);
    else
      ret = zygotes_limit(m, dfds[c], path, &written, err);
  }
  if (ret == 0 && written != 3)
    ret = sandbox_error_set(err, ENOTSUP, "the zygotes' cgroup offers no %s limit",
                            (written & 1) == 0 ? "pids" : "memory");
  for (int c = 0; c < n && ret == 0; c++)
    if (dfds[c] >= 0)
      ret = cgroup_write_at(dfds[c], "cgroup.procs", buf, err);
  for (int c = 0; c < n; c++)
    if (dfds[c] >= 0)
      close(dfds[c]);
  return ret;
}

int cgroup_zygotes_memory(struct cgroup_manager *m, uint64_t *bytes) {
  char path[4200], buf[64];
  if (m->backend == NULL || m->backend->kind == SANDBOX_BACKEND_RLIMIT ||
      zygotes_dir(m, 0, path, sizeof path) < 0)
    return -1;
  cleanup_close int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const char *file =
      m->backend->kind == SANDBOX_BACKEND_CGROUP_V2 ? "memory.current" : "memory.usage_in_bytes";
  if (dfd < 0 || cgroup_read_at(dfd, file, buf, sizeof buf) <= 0)
    return -1;
  *bytes = strtoull(buf, NULL, 10);
  return 0;
}

int cgroup_manager_init(struct cgroup_manager *m, enum sandbox_backend wanted, const char *parent,
                        unsigned n_slots, struct sandbox_error *err) {
  static const struct cgroup_backend *const order[] = {&cgroup_backend_v2, &cgroup_backend_v1,
                                                       &cgroup_backend_rlimit};
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->groups_lock, NULL);
  m->n_slots = n_slots;
  m->slots = calloc(n_slots, sizeof *m->slots);
  if (m->slots == NULL)
    return sandbox_error_set(err, ENOMEM, "cgroup slots");
  for (unsigned i = 0; i < n_slots; i++) {
    for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++)
      m->slots[i].dirfd[c] = -1;
    m->slots[i].cpu_fd = -1;
  }
  char reasons[1024] = "";
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const struct cgroup_backend *b = order[i];
    if (wanted != SANDBOX_BACKEND_AUTO && wanted != b->kind)
      continue;
    /* AUTO means real isolation: v2, then v1. The per-process rlimit
     * fallback is only ever used when asked for by name. */
    if (wanted == SANDBOX_BACKEND_AUTO && b->kind == SANDBOX_BACKEND_RLIMIT)
      continue;
    struct sandbox_error e = {0};
    m->backend = b;
    if (b->init(m, parent ? parent : "", &e) == 0)
      return 0;
    m->backend = NULL;
    size_t used = strlen(reasons);
    snprintf(reasons + used, sizeof reasons - used, "%s%s: %s", used ? "; " : "", b->name, e.msg);
    if (wanted != SANDBOX_BACKEND_AUTO)
      break;
  }
  free(m->slots);
  m->slots = NULL;
  return sandbox_error_set(err, 0,
                           "no usable cgroup backend (%s); the rlimit backend (memory limited "
                           "per process) runs only when asked for by name",
                           reasons);
}

void cgroup_manager_destroy(struct cgroup_manager *m) {
  for (size_t i = 0; i < m->n_groups; i++) {
    if (m->backend != NULL)
      m->backend->group_destroy(m, m->groups[i]);
    free(m->groups[i]);
  }
  free(m->groups);
  if (m->backend != NULL)
    m->backend->destroy(m);
  free(m->slots);
  pthread_mutex_destroy(&m->groups_lock);
  memset(m, 0, sizeof *m);
}

struct cgroup_group *cgroup_group_new(struct cgroup_manager *m, struct sandbox_error *err) {
  static _Atomic uint64_t next_id = 1;
  struct cgroup_group *g = calloc(1, sizeof *g);
  if (g == NULL) {
    sandbox_error_set(err, ENOMEM, "group");
    return NULL;
  }
  g->id = next_id++;
  g->dirfd = -1;
  if (m->backend->group_create(m, g, err) < 0) {
    free(g);
    return NULL;
  }
  pthread_mutex_lock(&m->groups_lock);
  if (m->n_groups == m->cap_groups) {
    size_t cap = m->cap_groups ? m->cap_groups * 2 : 16;
    struct cgroup_group **list = realloc(m->groups, cap * sizeof *list);
    if (list == NULL) {
      pthread_mutex_unlock(&m->groups_lock);
      m->backend->group_destroy(m, g);
      free(g);
      sandbox_error_set(err, ENOMEM, "group list");
      return NULL;
    }
    m->groups = list;
    m->cap_groups = cap;
  }
  m->groups[m->n_groups++] = g;
  pthread_mutex_unlock(&m->groups_lock);
  return g;
}

struct cgroup_group *cgroup_group_find(struct cgroup_manager *m, uint64_t id) {
  struct cgroup_group *g = NULL;
  pthread_mutex_lock(&m->groups_lock);
  for (size_t i = 0; i < m->n_groups && g == NULL; i++)
    if (m->groups[i]->id == id)
      g = m->groups[i];
  pthread_mutex_unlock(&m->groups_lock);
  return g;
}

void cgroup_group_free(struct cgroup_manager *m, uint64_t id) {
  struct cgroup_group *g = NULL;
  pthread_mutex_lock(&m->groups_lock);
  for (size_t i = 0; i < m->n_groups && g == NULL; i++)
    if (m->groups[i]->id == id) {
      g = m->groups[i];
      m->groups[i] = m->groups[--m->n_groups];
    }
  pthread_mutex_unlock(&m->groups_lock);
  if (g == NULL)
    return;
  m->backend->group_destroy(m, g);
  free(g);
}
