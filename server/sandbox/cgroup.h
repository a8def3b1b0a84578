/* cgroup.h: the resource-control front. One interface, three backends in
 * files of their own (cgroup_v2.c, cgroup_v1.c, cgroup_rlimit.c), chosen once
 * at start and reported, never switched silently.
 *
 * Runs with privileges: every path written here is built from the kernel's
 * own view of our cgroup (/proc/self/cgroup) or from the configured parent,
 * never from a request. Nothing is created or changed outside that subtree. */
#ifndef SANDBOX_CGROUP_H
#define SANDBOX_CGROUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sandbox.h"

#define CGROUP_V1_CONTROLLERS 4 /* memory, pids, cpuacct, cpu (optional) */

/* An accounting group (sandbox.h, sandbox_group_new): a memory cgroup (v1)
 * or a cgroup (v2) that outlives runs, so that memory a run leaves charged
 * (files in a tmpfs that lives on, as a session's workspace) counts against
 * the later runs placed in it and against no other run. One run at a time
 * per group (the caller's rule). */
struct cgroup_group {
  uint64_t id;
  int dirfd;                 /* -1 with the rlimit backend */
  uint64_t memory_limit;     /* last limit written */
  uint64_t oom_kills_before; /* v1: counter at prepare */
};

struct cgroup_slot {
  int dirfd[CGROUP_V1_CONTROLLERS]; /* v1: persistent per slot; v2: dirfd[0], per run */
  int cpu_fd;                       /* v1 cpuacct.usage / v2 cpu.stat, kept open */
  uint64_t oom_kills_before;        /* v1: counter at prepare (slot reuse) */
  uint64_t memory_limit;            /* v1: last limit written, to skip rewrites */
  uint64_t pids_limit;
  pid_t thread;                  /* v1: the thread that sits in the slot */
  uint64_t thread_cpu_before_ns; /* v1: its CPU time at prepare */
  struct cgroup_group *group;    /* the run's group, NULL = none */
  pid_t resident;                /* v1: the slot's zygote, which lives in the slot (0: none) */
  char run_path[4200];           /* v2: the run's cgroup */
};

/* clone_fd() results besides a cgroup fd. */
#define CGROUP_ATTACH_AFTER_CLONE (-1) /* write the pid, then release the child */
#define CGROUP_INHERITED (-2)          /* the child inherits the calling thread's */

struct cgroup_manager {
  const struct cgroup_backend *backend;
  /* v1: one directory per controller; v2: engine_dir[0]. Holds the slots. */
  char engine_dir[CGROUP_V1_CONTROLLERS][4096];
  bool has_memsw;
  bool clone_into_cgroup;
  bool cpu_share; /* the cpu controller gives each slot an equal share */
  unsigned n_slots;
  struct cgroup_slot *slots;
  pthread_mutex_t groups_lock; /* the list; a group's fields belong to its run */
  struct cgroup_group **groups;
  size_t n_groups, cap_groups;
};

struct cgroup_run_stats {
  uint64_t cpu_ns;
  uint64_t peak_bytes;
  bool oom_killed;
  bool have_cpu, have_peak;
};

struct cgroup_backend {
  enum sandbox_backend kind;
  const char *name;
  /* Returns 0 when the backend can be used under parent ("" = own cgroup). */
  int (*init)(struct cgroup_manager *m, const char *parent, struct sandbox_error *err);
  void (*destroy)(struct cgroup_manager *m);
  /* Before a run: limits in place, counters reset or baselined; the run's
   * memory goes to group when not NULL (its limit is the run's). */
  int (*prepare)(struct cgroup_manager *m, unsigned slot, const struct sandbox_limits *limits,
                 struct cgroup_group *group, struct sandbox_error *err);
  /* fd for clone3(CLONE_INTO_CGROUP), CGROUP_ATTACH_AFTER_CLONE or
   * CGROUP_INHERITED. */
  int (*clone_fd)(struct cgroup_manager *m, unsigned slot);
  int (*attach)(struct cgroup_manager *m, unsigned slot, pid_t pid, struct sandbox_error *err);
  /* Places a process not born in the slot (a zygote's fork) in every
   * cgroup of the slot (and its group's memory cgroup): NULL when the
   * backend cannot (rlimit). */
  int (*adopt)(struct cgroup_manager *m, unsigned slot, pid_t pid, struct sandbox_error *err);
  /* Makes a zygote, its imports done, the slot's resident (pid 0: none):
   * its runs are then born in the slot, as on v1 a worker thread's are,
   * with no move (each costs an RCU grace period, ~10 ms here). Its pages
   * stay charged where they were allocated (the zygotes' cgroup), it is
   * never killed as a run's leftover, and counts once against pids.max.
   * NULL where the slot's cgroup is made per run (v2). */
  int (*host_zygote)(struct cgroup_manager *m, unsigned slot, pid_t pid, struct sandbox_error *err);
  int (*cpu_usage_ns)(struct cgroup_manager *m, unsigned slot, uint64_t *ns);
  void (*kill_all)(struct cgroup_manager *m, unsigned slot);
  /* After the run's init was reaped: read the figures, leave the slot empty. */
  int (*finish)(struct cgroup_manager *m, unsigned slot, struct cgroup_run_stats *stats,
                struct sandbox_error *err);
  /* Groups: made empty, removed once no run is in them, and the memory
   * charged to one now (its runs' leftovers). */
  int (*group_create)(struct cgroup_manager *m, struct cgroup_group *g, struct sandbox_error *err);
  void (*group_destroy)(struct cgroup_manager *m, struct cgroup_group *g);
  int (*group_memory)(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *bytes);
  /* Processes the kernel's OOM killer killed in the group so far. */
  int (*group_oom_kills)(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *kills);
};

extern const struct cgroup_backend cgroup_backend_v2;
extern const struct cgroup_backend cgroup_backend_v1;
extern const struct cgroup_backend cgroup_backend_rlimit;

/* Picks the backend (AUTO: v2, then v1, then rlimit) and creates the slots. */
int cgroup_manager_init(struct cgroup_manager *m, enum sandbox_backend wanted, const char *parent,
                        unsigned n_slots, struct sandbox_error *err);
void cgroup_manager_destroy(struct cgroup_manager *m);
/* A new group with a fresh id, NULL with err on failure. */
struct cgroup_group *cgroup_group_new(struct cgroup_manager *m, struct sandbox_error *err);
/* The group of that id, or NULL. */
struct cgroup_group *cgroup_group_find(struct cgroup_manager *m, uint64_t id);
void cgroup_group_free(struct cgroup_manager *m, uint64_t id);

/* The zygotes' cgroup: <engine dir>/zygotes in each hierarchy, made on
 * first use, removed with the engine's. Zygotes live there, out of the
 * slots (whose leftovers are killed after each run) and counted apart,
 * with at most CGROUP_ZYGOTE_PIDS tasks and CGROUP_ZYGOTE_MEMORY_BYTES per
 * slot (a zygote imports package code: it is bounded like a run). */
#define CGROUP_ZYGOTE_PIDS 64
#define CGROUP_ZYGOTE_MEMORY_BYTES (2ULL << 30)
int cgroup_zygotes_adopt(struct cgroup_manager *m, pid_t pid, struct sandbox_error *err);
/* Memory charged to the zygotes' cgroup now; -1 when there is none yet. */
int cgroup_zygotes_memory(struct cgroup_manager *m, uint64_t *bytes);

/* Helpers shared by the backends (cgroup.c). */
int cgroup_write_at(int dirfd, const char *file, const char *value, struct sandbox_error *err);
int cgroup_write_u64_at(int dirfd, const char *file, uint64_t value, struct sandbox_error *err);
/* Reads a whole small file; returns bytes read or -1 with errno. */
ssize_t cgroup_read_at(int dirfd, const char *file, char *buf, size_t size);
ssize_t cgroup_pread_fd(int fd, char *buf, size_t size);
/* Value of "key N" in a flat-keyed file such as memory.events; -1 if absent. */
int cgroup_keyed_u64(const char *text, const char *key, uint64_t *value);
/* Own cgroup path for a v1 controller, or for v2 when controller is NULL. */
int cgroup_self_path(const char *controller, char *out, size_t size, struct sandbox_error *err);
/* Mount point and mount root of the hierarchy holding controller (v1), or of
 * cgroup2 when controller is NULL. */
int cgroup_find_mount(const char *controller, char *mnt, size_t mnt_size, char *root,
                      size_t root_size);
/* Walks a list of ids as cgroup.procs and tasks give them, one per line:
 *   for (const char *p = text; (p = cgroup_next_id(p, &id)) != NULL;) ...
 * Returns the position after the id, or NULL at the end. */
const char *cgroup_next_id(const char *p, long *id);
/* Kill every process listed in dirfd's cgroup.procs, except ourselves
 * (and spare, when not 0). */
void cgroup_kill_procs_at(int dirfd);
void cgroup_kill_procs_except(int dirfd, pid_t spare);
/* Remove engine directories (sandboxd.<pid>) left by engines that died. */
void cgroup_remove_stale(const char *base_dir, bool v2);
/* Remove one directory of slots recursively (slots first), killing tasks. */
int cgroup_remove_tree(const char *dir, bool v2);

#endif
