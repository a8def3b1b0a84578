/* cgroup_v2.c: the production backend, on a delegated cgroup v2 subtree.
 *
 * Layout under our own cgroup (or the configured parent) P, named relative
 * to the cgroup2 mount's root (a P outside it is refused):
 *   P/leaf/                 the processes that were in P (us included): the
 *                           no-internal-processes rule forbids enabling
 *                           controllers for P's children while P has members;
 *                           not made when P is the kernel's root cgroup (no
 *                           cgroup.type), which a container's "/" is not
 *   P/sandboxd.<pid>/       this engine, +memory +pids (+cpu) for children
 *   P/sandboxd.<pid>/slot-N one cgroup per run, made before the clone and
 *                           entered with clone3(CLONE_INTO_CGROUP)
 * A cgroup per run gives exact figures on every kernel: memory.peak cannot be
 * reset before Linux 6.12, and a fresh memory.events needs no baseline.
 * Never writes outside P. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"

static bool has_word(const char *text, const char *word) {
  size_t len = strlen(word);
  for (const char *p = text; (p = strstr(p, word)) != NULL; p += len) {
    bool start = p == text || p[-1] == ' ' || p[-1] == '\n';
    bool end = p[len] == '\0' || p[len] == ' ' || p[len] == '\n';
    if (start && end)
      return true;
  }
  return false;
}

/* Opens the cgroup dir and reads its file into buf: the dir's fd, or -1
 * with err. */
static int v2_open_read(const char *dir, const char *file, char *buf, size_t size,
                        struct sandbox_error *err) {
  cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return sandbox_error_set(err, errno, "open %s", dir);
  if (cgroup_read_at(fd, file, buf, size) < 0)
    return sandbox_error_set(err, errno, "read %s/%s", dir, file);
  return steal_fd(&fd);
}

/* Moves every process of base into base/leaf so that base may delegate. */
static int v2_move_members_to_leaf(const char *base, struct sandbox_error *err) {
  char procs[65536] = "";
  cleanup_close int bfd = v2_open_read(base, "cgroup.procs", procs, sizeof procs, err);
  if (bfd < 0)
    return -1;
  if (procs[0] == '\0')
    return 0;
  if (mkdirat(bfd, "leaf", 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s/leaf", base);
  cleanup_close int lfd = openat(bfd, "leaf", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lfd < 0)
    return sandbox_error_set(err, errno, "open %s/leaf", base);
  /* Members may fork while we move them: repeat until the list is empty. */
  for (int round = 0; round < 20 && procs[0] != '\0'; round++) {
    long pid;
    for (const char *p = procs; (p = cgroup_next_id(p, &pid)) != NULL;) {
      char buf[32];
      snprintf(buf, sizeof buf, "%ld", pid);
      struct sandbox_error ignored;
      cgroup_write_at(lfd, "cgroup.procs", buf, &ignored); /* it may have exited */
    }
    if (cgroup_read_at(bfd, "cgroup.procs", procs, sizeof procs) < 0)
      return sandbox_error_set(err, errno, "read %s/cgroup.procs", base);
  }
  if (procs[0] != '\0')
    return sandbox_error_set(err, EBUSY, "could not empty %s into its leaf", base);
  return 0;
}

static int v2_enable(const char *dir, const char *controllers_avail, struct sandbox_error *err) {
  char enabled[512] = "";
  cleanup_close int fd = v2_open_read(dir, "cgroup.subtree_control", enabled, sizeof enabled, err);
  if (fd < 0)
    return -1;
  static const char *const wanted[] = {"memory", "pids", "cpu"};
  for (size_t i = 0; i < 3; i++) {
    if (has_word(enabled, wanted[i]) || !has_word(controllers_avail, wanted[i]))
      continue;
    char buf[32];
    snprintf(buf, sizeof buf, "+%s", wanted[i]);
    if (cgroup_write_at(fd, "cgroup.subtree_control", buf, err) < 0)
      return sandbox_error_wrap(err, "enable %s in %s", wanted[i], dir);
  }
  return 0;
}

static void v2_destroy(struct cgroup_manager *m) {
  for (unsigned i = 0; i < m->n_slots; i++) {
    struct cgroup_slot *s = &m->slots[i];
    if (s->dirfd[0] >= 0)
      close(s->dirfd[0]);
    if (s->cpu_fd >= 0)
      close(s->cpu_fd);
    s->dirfd[0] = s->cpu_fd = -1;
  }
  if (m->engine_dir[0][0] != '\0')
    cgroup_remove_tree(m->engine_dir[0], true);
}

/* The directory of P (parent, or our own cgroup when parent is "") under
 * the cgroup2 mount. */
static int v2_base_path(const char *parent, char *base, size_t size, struct sandbox_error *err) {
  char mnt[4096], root[4096], self[4096];
  if (cgroup_find_mount(NULL, mnt, sizeof mnt, root, sizeof root) < 0)
    return sandbox_error_set(err, 0, "no cgroup2 mount");
  const char *rel = parent;
  if (rel[0] == '\0') {
    if (cgroup_self_path(NULL, self, sizeof self, err) < 0)
      return -1;
    rel = self;
  }
  if (strstr(rel, "/..") != NULL || rel[0] != '/')
    return sandbox_error_set(err, EINVAL, "cgroup path %s", rel);
  /* The mount may show only a part of the hierarchy (a bind mount of a
   * subtree, or the host's cgroupfs seen from a cgroup namespace, whose root
   * then reads "/.."): paths are relative to the mount's root, and a cgroup
   * outside it cannot be reached through it. */
  if (strcmp(root, "/") != 0) {
    size_t rlen = strlen(root);
    if (strncmp(rel, root, rlen) != 0 || (rel[rlen] != '/' && rel[rlen] != '\0'))
      return sandbox_error_set(err, 0, "cgroup %s is not below the cgroup2 mount's root %s", rel,
                               root);
    rel += rlen;
    if (rel[0] == '\0')
      rel = "/";
  }
  if ((size_t)snprintf(base, size, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) >= size)
    return sandbox_error_set(err, ENAMETOOLONG, "cgroup path");
  return 0;
}

/* Reads the controllers P offers into avail; P must offer memory and pids
 * and let us enable them for its children. */
static int v2_check_delegated(int bfd, const char *base, char *avail, size_t size,
                              struct sandbox_error *err) {
  if (cgroup_read_at(bfd, "cgroup.controllers", avail, size) < 0)
    return sandbox_error_set(err, errno, "read %s/cgroup.controllers", base);
  if (!has_word(avail, "memory") || !has_word(avail, "pids"))
    return sandbox_error_set(err, 0, "%s has no memory and pids controllers (not delegated)", base);
  if (faccessat(bfd, "cgroup.subtree_control", W_OK, 0) < 0)
    return sandbox_error_set(err, errno, "%s is not writable", base);
  return 0;
}

/* P/sandboxd.<pid>, with the controllers enabled for the slots. */
static int v2_make_engine_dir(struct cgroup_manager *m, const char *base, const char *avail,
                              struct sandbox_error *err) {
  snprintf(m->engine_dir[0], sizeof m->engine_dir[0], "%s/sandboxd.%d", base, (int)getpid());
  if (mkdir(m->engine_dir[0], 0700) < 0 && errno != EEXIST) {
    sandbox_error_set(err, errno, "mkdir %s", m->engine_dir[0]);
    m->engine_dir[0][0] = '\0';
    return -1;
  }
  if (v2_enable(m->engine_dir[0], avail, err) < 0) {
    v2_destroy(m);
    return -1;
  }
  return 0;
}

/* clone3(CLONE_INTO_CGROUP) came with Linux 5.7. */
static bool v2_kernel_has_clone_into_cgroup(void) {
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) == 0)
    sscanf(u.release, "%d.%d", &major, &minor);
  return major > 5 || (major == 5 && minor >= 7);
}

static int v2_init(struct cgroup_manager *m, const char *parent, struct sandbox_error *err) {
  char base[4096];
  if (v2_base_path(parent, base, sizeof base, err) < 0)
    return -1;
  cleanup_close int bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (bfd < 0)
    return sandbox_error_set(err, errno, "open %s", base);
  char avail[512];
  if (v2_check_delegated(bfd, base, avail, sizeof avail, err) < 0)
    return -1;
  /* Only the kernel's root cgroup may have members and enable controllers
   * for its children; it is the one without cgroup.type. "/" of a cgroup
   * namespace (a container's view) is not it. */
  bool kernel_root = faccessat(bfd, "cgroup.type", F_OK, 0) < 0 && errno == ENOENT;
  if (!kernel_root && v2_move_members_to_leaf(base, err) < 0)
    return -1;
  if (v2_enable(base, avail, err) < 0)
    return -1;
  cgroup_remove_stale(base, true);
  if (v2_make_engine_dir(m, base, avail, err) < 0)
    return -1;
  m->cpu_share = has_word(avail, "cpu");
  m->clone_into_cgroup = v2_kernel_has_clone_into_cgroup();
  return 0;
}

/* A run's cgroup: P/sandboxd.<pid>/slot-N, or group-<id>/run inside its
 * group, whose own memory.max then also counts what earlier runs left. */
static int v2_run_path(struct cgroup_manager *m, unsigned slot, struct cgroup_slot *s,
                       struct sandbox_error *err) {
  int n = s->group != NULL
              ? snprintf(s->run_path, sizeof s->run_path, "%s/group-%" PRIu64 "/run",
                         m->engine_dir[0], s->group->id)
              : snprintf(s->run_path, sizeof s->run_path, "%s/slot-%u", m->engine_dir[0], slot);
  if (n < 0 || (size_t)n >= sizeof s->run_path)
    return sandbox_error_set(err, ENAMETOOLONG, "cgroup path");
  return 0;
}

static int v2_prepare(struct cgroup_manager *m, unsigned slot, const struct sandbox_limits *l,
                      struct cgroup_group *group, struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  s->group = group;
  if (v2_run_path(m, slot, s, err) < 0)
    return -1;
  if (group != NULL && group->memory_limit != l->memory_bytes) {
    if (cgroup_write_u64_at(group->dirfd, "memory.max", l->memory_bytes, err) < 0)
      return -1;
    group->memory_limit = l->memory_bytes;
  }
  const char *path = s->run_path;
  if (mkdir(path, 0700) < 0) {
    if (errno != EEXIST)
      return sandbox_error_set(err, errno, "mkdir %s", path);
    /* Left over from a failed run of this slot: start clean. */
    cgroup_remove_tree(path, true);
    if (mkdir(path, 0700) < 0)
      return sandbox_error_set(err, errno, "mkdir %s", path);
  }
  s->dirfd[0] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->dirfd[0] < 0)
    return sandbox_error_set(err, errno, "open %s", path);
  int fd = s->dirfd[0];
  if (cgroup_write_u64_at(fd, "memory.max", l->memory_bytes, err) < 0 ||
      cgroup_write_u64_at(fd, "pids.max", l->max_processes, err) < 0)
    return -1;
  if (faccessat(fd, "memory.swap.max", F_OK, 0) == 0 &&
      cgroup_write_at(fd, "memory.swap.max", "0", err) < 0)
    return -1;
  /* One OOM kill ends the whole run, like the timeout does. */
  if (cgroup_write_at(fd, "memory.oom.group", "1", err) < 0)
    return -1;
  s->cpu_fd = openat(fd, "cpu.stat", O_RDONLY | O_CLOEXEC);
  if (s->cpu_fd < 0)
    return sandbox_error_set(err, errno, "open %s/cpu.stat", path);
  return 0;
}

static int v2_clone_fd(struct cgroup_manager *m, unsigned slot) {
  return m->clone_into_cgroup ? m->slots[slot].dirfd[0] : CGROUP_ATTACH_AFTER_CLONE;
}

static int v2_attach(struct cgroup_manager *m, unsigned slot, pid_t pid,
                     struct sandbox_error *err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", (int)pid);
  return cgroup_write_at(m->slots[slot].dirfd[0], "cgroup.procs", buf, err);
}

static int v2_cpu_usage_ns(struct cgroup_manager *m, unsigned slot, uint64_t *ns) {
  char buf[512];
  uint64_t usec;
  if (cgroup_pread_fd(m->slots[slot].cpu_fd, buf, sizeof buf) <= 0 ||
      cgroup_keyed_u64(buf, "usage_usec", &usec) < 0)
    return -1;
  *ns = usec * 1000;
  return 0;
}

static void v2_kill_all(struct cgroup_manager *m, unsigned slot) {
  if (m->slots[slot].dirfd[0] >= 0)
    cgroup_write_at(m->slots[slot].dirfd[0], "cgroup.kill", "1", NULL);
}

static int v2_finish(struct cgroup_manager *m, unsigned slot, struct cgroup_run_stats *st,
                     struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  if (s->dirfd[0] < 0)
    return 0;
  char buf[1024];
  uint64_t v;
  if (cgroup_read_at(s->dirfd[0], "memory.events", buf, sizeof buf) > 0 &&
      cgroup_keyed_u64(buf, "oom_kill", &v) == 0)
    st->oom_killed = v > 0;
  if (v2_cpu_usage_ns(m, slot, &st->cpu_ns) == 0)
    st->have_cpu = true;
  if (cgroup_read_at(s->dirfd[0], "memory.peak", buf, sizeof buf) > 0) {
    st->peak_bytes = strtoull(buf, NULL, 10);
    st->have_peak = true;
  }
  close(s->cpu_fd);
  close(s->dirfd[0]);
  s->cpu_fd = s->dirfd[0] = -1;
  s->group = NULL;
  /* A group's files stay charged to the removed cgroup, which still counts
   * in its parent, the group. */
  if (rmdir(s->run_path) < 0 && cgroup_remove_tree(s->run_path, true) < 0)
    return sandbox_error_set(err, errno, "remove %s", s->run_path);
  return 0;
}

static int v2_group_create(struct cgroup_manager *m, struct cgroup_group *g,
                           struct sandbox_error *err) {
  char path[4200], avail[512];
  snprintf(path, sizeof path, "%s/group-%" PRIu64, m->engine_dir[0], g->id);
  if (mkdir(path, 0700) < 0)
    return sandbox_error_set(err, errno, "mkdir %s", path);
  g->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g->dirfd < 0) {
    sandbox_error_set(err, errno, "open %s", path);
  } else if (cgroup_read_at(g->dirfd, "cgroup.controllers", avail, sizeof avail) < 0) {
    sandbox_error_set(err, errno, "read %s/cgroup.controllers", path);
  } else if (v2_enable(path, avail, err) == 0 &&
             (faccessat(g->dirfd, "memory.swap.max", F_OK, 0) < 0 ||
              cgroup_write_at(g->dirfd, "memory.swap.max", "0", err) == 0)) {
    return 0;
  }
  if (g->dirfd >= 0)
    close(g->dirfd);
  g->dirfd = -1;
  rmdir(path);
  return -1;
}

static void v2_group_destroy(struct cgroup_manager *m, struct cgroup_group *g) {
  if (g->dirfd >= 0)
    close(g->dirfd);
  g->dirfd = -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/group-%" PRIu64, m->engine_dir[0], g->id);
  cgroup_remove_tree(path, true);
}

static int v2_group_memory(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *bytes) {
  char buf[64];
  if (cgroup_read_at(g->dirfd, "memory.current", buf, sizeof buf) <= 0)
    return -1;
  *bytes = strtoull(buf, NULL, 10);
  return 0;
}

/* memory.events counts the group's whole subtree (its runs' cgroups). */
static int v2_group_oom_kills(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *kills) {
  char buf[1024];
  if (cgroup_read_at(g->dirfd, "memory.events", buf, sizeof buf) <= 0)
    return -1;
  return cgroup_keyed_u64(buf, "oom_kill", kills);
}

const struct cgroup_backend cgroup_backend_v2 = {
    .kind = SANDBOX_BACKEND_CGROUP_V2,
    .name = "cgroup v2",
    .init = v2_init,
    .destroy = v2_destroy,
    .prepare = v2_prepare,
    .clone_fd = v2_clone_fd,
    .attach = v2_attach,
    .adopt = v2_attach,
    .cpu_usage_ns = v2_cpu_usage_ns,
    .kill_all = v2_kill_all,
    .finish = v2_finish,
    .group_create = v2_group_create,
    .group_destroy = v2_group_destroy,
    .group_memory = v2_group_memory,
    .group_oom_kills = v2_group_oom_kills,
};
