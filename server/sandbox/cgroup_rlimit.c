/* cgroup_rlimit.c: the fallback when no cgroup can be written. Memory is
 * limited per process with RLIMIT_AS and processes per uid with RLIMIT_NPROC
 * (set in the child); CPU and peak come from the reaped init's rusage. The
 * result says memory_per_process so nobody mistakes this for a tree cap. */
#include "cgroup.h"

static int rlimit_init(struct cgroup_manager *m, const char *parent, struct sandbox_error *err) {
  m->clone_into_cgroup = false;
  m->cpu_share = false;
  return 0;
}
static void rlimit_destroy(struct cgroup_manager *m) {
}
static int rlimit_prepare(struct cgroup_manager *m, unsigned slot, const struct sandbox_limits *l,
                          struct cgroup_group *g, struct sandbox_error *err) {
  return 0;
}
static int rlimit_clone_fd(struct cgroup_manager *m, unsigned slot) {
  return CGROUP_INHERITED;
}
static int rlimit_attach(struct cgroup_manager *m, unsigned slot, pid_t pid,
                         struct sandbox_error *err) {
  return 0;
}
static int rlimit_cpu_usage_ns(struct cgroup_manager *m, unsigned slot, uint64_t *ns) {
  return -1; /* no live tree figure: RLIMIT_CPU per process is the backstop */
}
static void rlimit_kill_all(struct cgroup_manager *m, unsigned slot) {
}
static int rlimit_finish(struct cgroup_manager *m, unsigned slot, struct cgroup_run_stats *st,
                         struct sandbox_error *err) {
  return 0;
}

/* No tree-wide memory to account: a group is only an id. */
static int rlimit_group_create(struct cgroup_manager *m, struct cgroup_group *g,
                               struct sandbox_error *err) {
  return 0;
}
static void rlimit_group_destroy(struct cgroup_manager *m, struct cgroup_group *g) {
}
static int rlimit_group_memory(struct cgroup_manager *m, struct cgroup_group *g, uint64_t *bytes) {
  *bytes = 0;
  return 0;
}

static int rlimit_group_oom_kills(struct cgroup_manager *m, struct cgroup_group *g,
                                  uint64_t *kills) {
  *kills = 0; /* no cgroup: RLIMIT_AS makes allocations fail instead */
  return 0;
}

const struct cgroup_backend cgroup_backend_rlimit = {
    .kind = SANDBOX_BACKEND_RLIMIT,
    .name = "rlimit",
    .init = rlimit_init,
    .destroy = rlimit_destroy,
    .prepare = rlimit_prepare,
    .clone_fd = rlimit_clone_fd,
    .attach = rlimit_attach,
    .cpu_usage_ns = rlimit_cpu_usage_ns,
    .kill_all = rlimit_kill_all,
    .finish = rlimit_finish,
    .group_create = rlimit_group_create,
    .group_destroy = rlimit_group_destroy,
    .group_memory = rlimit_group_memory,
    .group_oom_kills = rlimit_group_oom_kills,
};
