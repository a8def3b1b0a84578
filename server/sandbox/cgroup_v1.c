/* cgroup_v1.c: the backend for hybrid hosts, where the memory, pids and
 * cpuacct controllers are mounted as separate v1 hierarchies.
 *
 * A slot's three cgroups are created once and reused run after run: limits
 * are rewritten only when they change, the peak and CPU counters are reset
 * before each run and the OOM-kill counter is read as a delta.
 *
 * Entering: v1 has no CLONE_INTO_CGROUP, and moving a process into a v1
 * cgroup waits for an RCU grace period (measured here: 50 us to 12 ms per
 * write, three writes per run). Instead the worker thread that owns the slot
 * moves itself into the slot's cgroups once (v1 places threads, not only
 * processes), and every child it clones is born there. That is safe: memory
 * is charged to the mm's owner, so the server's memory stays with the server;
 * the OOM killer only picks thread-group leaders in the cgroup, never the
 * server; the thread counts once against pids.max (added to the limit) and
 * its own CPU time is subtracted from cpuacct.usage.
 * Never writes outside <own cgroup or parent>/sandboxd.<pid>. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"

/* cpu gives each slot an equal CPU share whatever its number of processes,
 * so that a fork bomb spinning 64 processes in one run does not starve the
 * runs beside it. Optional: without it runs still work, without fairness. */
static const char *const v1_controllers[CGROUP_V1_CONTROLLERS] = {"memory", "pids", "cpuacct",
                                                                  "cpu"};
enum { V1_MEMORY = 0, V1_PIDS = 1, V1_CPUACCT = 2, V1_CPU = 3 };

static int v1_engine_dir(const char *controller, const char *parent, char *out, size_t size,
                         struct sandbox_error *err) {
  char mnt[4096], root[4096], self[4096];
  if (cgroup_find_mount(controller, mnt, sizeof mnt, root, sizeof root) < 0)
    return sandbox_error_set(err, 0, "no v1 hierarchy with the %s controller", controller);
  const char *rel;
  if (parent[0] != '\0') {
    rel = parent;
  } else {
    if (cgroup_self_path(controller, self, sizeof self, err) < 0)
      return -1;
    rel = self;
  }
  /* The mount may show only a part of the hierarchy (root != "/"). */
  size_t rlen = strlen(root);
  if (strcmp(root, "/") != 0) {
    if (strncmp(rel, root, rlen) != 0 || (rel[rlen] != '/' && rel[rlen] != '\0'))
      return sandbox_error_set(err, 0, "%s cgroup %s is not below the mount root %s", controller,
                               rel, root);
    rel += rlen;
  }
  if (strstr(rel, "/..") != NULL)
    return sandbox_error_set(err, EINVAL, "cgroup path %s", rel);
  char base[4096];
  if ((size_t)snprintf(base, sizeof base, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) >=
      sizeof base)
    return sandbox_error_set(err, ENAMETOOLONG, "cgroup path");
  if (access(base, W_OK) < 0)
    return sandbox_error_set(err, errno, "cgroup %s is not writable", base);
  cgroup_remove_stale(base, false);
  if ((size_t)snprintf(out, size, "%s/sandboxd.%d", base, (int)getpid()) >= size)
    return sandbox_error_set(err, ENAMETOOLONG, "cgroup path");
  return 0;
}

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Moves our own threads out of a slot (back to the engine's parent) so that
 * the slot can be removed. Other tasks are the sandbox's: cgroup_remove_tree
 * kills them. */
static void v1_release_threads(struct cgroup_manager *m) {
  for (unsigned i = 0; i < m->n_slots; i++) {
    for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++) {
      if (m->slots[i].dirfd[c] < 0)
        continue;
      char parent[4200];
      snprintf(parent, sizeof parent, "%s/..", m->engine_dir[c]);
      cleanup_close int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      char tasks[65536];
      if (pfd < 0 || cgroup_read_at(m->slots[i].dirfd[c], "tasks", tasks, sizeof tasks) <= 0)
        continue;
      long tid;
      for (const char *p = tasks; (p = cgroup_next_id(p, &tid)) != NULL;) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%ld", tid);
        if (access(path, F_OK) == 0) {
          char buf[32];
          snprintf(buf, sizeof buf, "%ld", tid);
          cgroup_write_at(pfd, "tasks", buf, NULL);
        }
      }
    }
    m->slots[i].thread = 0;
  }
}

static void v1_destroy(struct cgroup_manager *m) {
  v1_release_threads(m);
  for (unsigned i = 0; i < m->n_slots; i++) {
    struct cgroup_slot *s = &m->slots[i];
    for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++) {
      if (s->dirfd[c] >= 0)
        close(s->dirfd[c]);
      s->dirfd[c] = -1;
    }
    if (s->cpu_fd >= 0)
      close(s->cpu_fd);
    s->cpu_fd = -1;
  }
  for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++)
    if (m->engine_dir[c][0] != '\0')
      cgroup_remove_tree(m->engine_dir[c], false);
}

static int v1_init(struct cgroup_manager *m, const char *parent, struct sandbox_error *err) {
  for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++) {
    struct sandbox_error optional;
    if (v1_engine_dir(v1_controllers[c], parent, m->engine_dir[c], sizeof m->engine_dir[c],
                      c == V1_CPU ? &optional : err) < 0) {
      m->engine_dir[c][0] = '\0';
      if (c == V1_CPU)
        continue;
      goto fail;
    }
    if (mkdir(m->engine_dir[c], 0700) < 0 && errno != EEXIST) {
      sandbox_error_set(err, errno, "mkdir %s", m->engine_dir[c]);
      m->engine_dir[c][0] = '\0';
      goto fail;
    }
  }
  for (unsigned i = 0; i < m->n_slots; i++) {
    struct cgroup_slot *s = &m->slots[i];
    for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++) {
      if (m->engine_dir[c][0] == '\0')
        continue; /* an optional controller this host does not offer */
      char path[4200];
      snprintf(path, sizeof path, "%s/slot-%u", m->engine_dir[c], i);
      if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        sandbox_error_set(err, errno, "mkdir %s", path);
        goto fail;
      }
      s->dirfd[c] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (s->dirfd[c] < 0) {
        sandbox_error_set(err, errno, "open %s", path);
        goto fail;
      }
    }
    s->cpu_fd = openat(s->dirfd[V1_CPUACCT], "cpuacct.usage", O_RDWR | O_CLOEXEC);
    if (s->cpu_fd < 0) {
      sandbox_error_set(err, errno, "open cpuacct.usage");
      goto fail;
    }
  }
  m->has_memsw =
      faccessat(m->slots[0].dirfd[V1_MEMORY], "memory.memsw.limit_in_bytes", W_OK, 0) == 0;
  m->clone_into_cgroup = false;
  m->cpu_share = m->engine_dir[V1_CPU][0] != '\0';
  return 0;
fail:
  v1_destroy(m);
  return -1;
}

/* Writes a memory limit to a memory cgroup whose last limit was *current
 * (0: unknown, a fresh cgroup: unlimited). */
static int v1_set_memory(int fd, bool memsw, uint64_t *current, uint64_t limit,
                         struct sandbox_error *err) {
  if (*current == limit)
    return 0;
  uint64_t before = *current != 0 ? *current : UINT64_MAX;
  *current = 0; /* unknown state until both writes succeed */
  if (!memsw) {
    if (cgroup_write_u64_at(fd, "memory.limit_in_bytes", limit, err) < 0)
      return -1;
  } else if (limit > before) { /* memsw must stay >= the memory limit at every step */
    if (cgroup_write_u64_at(fd, "memory.memsw.limit_in_bytes", limit, err) < 0 ||
        cgroup_write_u64_at(fd, "memory.limit_in_bytes", limit, err) < 0)
      return -1;
  } else {
    if (cgroup_write_u64_at(fd, "memory.limit_in_bytes", limit, err) < 0 ||
        cgroup_write_u64_at(fd, "memory.memsw.limit_in_bytes", limit, err) < 0)
      return -1;
  }
  *current = limit;
  return 0;
}

static int v1_read_oom_kills(int memory_fd, uint64_t *out) {
  char buf[512];
  if (cgroup_read_at(memory_fd, "memory.oom_control", buf, sizeof buf) < 0)
    return -1;
  return cgroup_keyed_u64(buf, "oom_kill", out);
}

/* The memory cgroup a run's memory is charged to: its group's, or the
 * slot's. */
static int v1_memory_fd(const struct cgroup_slot *s) {
  return s->group != NULL ? s->group->dirfd : s->dirfd[V1_MEMORY];
}

static int v1_prepare_memory(struct cgroup_manager *m, struct cgroup_slot *s,
                             const struct sandbox_limits *l, struct sandbox_error *err) {
  uint64_t *current = s->group != NULL ? &s->group->memory_limit : &s->memory_limit;
  uint64_t *oom_before = s->group != NULL ? &s->group->oom_kills_before : &s->oom_kills_before;
  int fd = v1_memory_fd(s);
  if (v1_set_memory(fd, m->has_memsw, current, l->memory_bytes, err) < 0)
    return -1;
  /* A group's peak then starts at what its earlier runs left (files). */
  if (cgroup_write_at(fd, "memory.max_usage_in_bytes", "0", err) < 0)
    return -1;
  if (v1_read_oom_kills(fd, oom_before) < 0)
    return sandbox_error_set(err, errno, "read memory.oom_control (no oom_kill counter?)");
  return 0;
}

static int v1_prepare(struct cgroup_manager *m, unsigned slot, const struct sandbox_limits *l,
                      struct cgroup_group *group, struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  s->group = group;
  if (v1_prepare_memory(m, s, l, err) < 0)
    return -1;
  /* + the namespace's init + the worker thread that sits in the slot (+ the
   * zygote that lives there). */
  uint64_t pids = l->max_processes + 2 + (s->resident != 0 ? 1 : 0);
  if (s->pids_limit != pids) {
    if (cgroup_write_u64_at(s->dirfd[V1_PIDS], "pids.max", pids, err) < 0)
      return -1;
    s->pids_limit = pids;
  }
  pid_t tid = gettid();
  if (s->thread != tid) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", (int)tid);
    for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++)
      if (s->dirfd[c] >= 0 && cgroup_write_at(s->dirfd[c], "tasks", buf, err) < 0)
        return sandbox_error_wrap(err, "move worker thread into the %s slot", v1_controllers[c]);
    s->thread = tid;
  }
  if (pwrite(s->cpu_fd, "0", 1, 0) != 1)
    return sandbox_error_set(err, errno, "reset cpuacct.usage");
  s->thread_cpu_before_ns = thread_cpu_ns();
  return 0;
}

/* Born in the slot (see the top of this file); a run in a group is then
 * moved into the group's memory cgroup before it may start: one move, for
 * runs in a group only. */
static int v1_clone_fd(struct cgroup_manager *m, unsigned slot) {
  return m->slots[slot].group != NULL ? CGROUP_ATTACH_AFTER_CLONE : CGROUP_INHERITED;
}

static int v1_attach(struct cgroup_manager *m, unsigned slot, pid_t pid,
                     struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  if (s->group == NULL)
    return 0;
  char buf[32];
  snprintf(buf, sizeof buf, "%d", (int)pid);
  return cgroup_write_at(s->group->dirfd, "cgroup.procs", buf, err);
}

/* A zygote's run is born in the slot (the zygote is its resident): only a
 * run in a group moves, into the group's memory cgroup. */
static int v1_adopt(struct cgroup_manager *m, unsigned slot, pid_t pid, struct sandbox_error *err) {
  return v1_attach(m, slot, pid, err);
}

static int v1_host_zygote(struct cgroup_manager *m, unsigned slot, pid_t pid,
                          struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  s->resident = pid;
  if (pid == 0)
    return 0;
  char buf[32];
  snprintf(buf, sizeof buf, "%d", (int)pid);
  for (int c = 0; c < CGROUP_V1_CONTROLLERS; c++)
    if (s->dirfd[c] >= 0 && cgroup_write_at(s->dirfd[c], "cgroup.procs", buf, err) < 0) {
      s->resident = 0;
      return sandbox_error_wrap(err, "move the zygote into the %s slot", v1_controllers[c]);
    }
  return 0;
}

/* The tree's CPU time: the slot's counter less the worker thread's share. */
static int v1_cpu_usage_ns(struct cgroup_manager *m, unsigned slot, uint64_t *ns) {
  struct cgroup_slot *s = &m->slots[slot];
  char buf[64];
  if (cgroup_pread_fd(s->cpu_fd, buf, sizeof buf) <= 0)
    return -1;
  uint64_t total = strtoull(buf, NULL, 10);
  uint64_t own = thread_cpu_ns() - s->thread_cpu_before_ns;
  *ns = total > own ? total - own : 0;
  return 0;
}

static void v1_kill_all(struct cgroup_manager *m, unsigned slot) {
  cgroup_kill_procs_except(m->slots[slot].dirfd[V1_PIDS], m->slots[slot].resident);
}

static int v1_finish(struct cgroup_manager *m, unsigned slot, struct cgroup_run_stats *st,
                     struct sandbox_error *err) {
  struct cgroup_slot *s = &m->slots[slot];
  char buf[64];
  uint64_t kills = 0;
  int memory_fd = v1_memory_fd(s);
  uint64_t before = s->group != NULL ? s->group->oom_kills_before : s->oom_kills_before;
  s->group = NULL;
  if (v1_read_oom_kills(memory_fd, &kills) == 0)
    st->oom_killed = kills > before;
  if (v1_cpu_usage_ns(m, slot, &st->cpu_ns) == 0)
    st->have_cpu = true;
  if (cgroup_read_at(memory_fd, "memory.max_usage_in_bytes", buf, sizeof buf) > 0) {
    st->peak_bytes = strtoull(buf, NULL, 10);
    st->have_peak = true;
  }
  /* The PID namespace is gone once its init was reaped; anything still in the
   * slot would be a process that escaped it: kill it and say so. */
  char procs[4096];
  bool left = false;
  long id;
  if (cgroup_read_at(s->dirfd[V1_PIDS], "cgroup.procs", procs, sizeof procs) > 0)
    for (const char *p = procs; (p = cgroup_next_id(p, &id)) != NULL;)
      left |= id != getpid() && id != s->resident;
  if (left) {
    cgroup_kill_procs_except(s->dirfd[V1_PIDS], s->resident);
    return sandbox_error_set(err, 0, "processes were left in the slot cgroup after the run");
  }
  return 0;
}

static int v1_group_create(struct cgroup_manager *m, struct cgroup_group *g,
                           struct sandbox_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/group-%" PRIu64, m->engine_dir[V1_MEMORY], g->id);
  if (mkdir(path, 0700) < 0)
    return sandbox_error_set(err, errno, "mkdir %s", path);
  g->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g->dirfd < 0) {
    int e = errno;
    rmdir(path);
    return sandbox_error_set(err, e, "open %s", path);
  }
  return 0;
}

static void v1_group_destroy(struct cgroup_manager *m, struct cgroup_group *g) {
  if (g->dirfd >= 0)
    close(g->dirfd);
  g->dirfd = -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/group-%" PRIu64, m->engine_dir[V1_MEMORY], g->id);
  cgroup_remove_tree(path, false);
}

static int v1_group_memory(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *bytes) {
  char buf[64];
  if (cgroup_read_at(g->dirfd, "memory.usage_in_bytes", buf, sizeof buf) <= 0)
    return -1;
  *bytes = strtoull(buf, NULL, 10);
  return 0;
}

static int v1_group_oom_kills(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *kills) {
  return v1_read_oom_kills(g->dirfd, kills);
}

const struct cgroup_backend cgroup_backend_v1 = {
    .kind = SANDBOX_BACKEND_CGROUP_V1,
    .name = "cgroup v1",
    .init = v1_init,
    .destroy = v1_destroy,
    .prepare = v1_prepare,
    .clone_fd = v1_clone_fd,
    .attach = v1_attach,
    .adopt = v1_adopt,
    .host_zygote = v1_host_zygote,
    .cpu_usage_ns = v1_cpu_usage_ns,
    .kill_all = v1_kill_all,
    .finish = v1_finish,
    .group_create = v1_group_create,
    .group_destroy = v1_group_destroy,
    .group_memory = v1_group_memory,
    .group_oom_kills = v1_group_oom_kills,
};
