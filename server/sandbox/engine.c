/* engine.c: the engine's front: creation (privileges, cgroup backend,
 * seccomp program, /etc, sandbox-init) and one run from spec to result,
 * in steps named spawn_* (prepare, execute, finish, release).
 *
 * The spawn (spawn.c) is a clone3 straight from the calling thread,
 * vfork-style (CLONE_VM | CLONE_VFORK, on the slot's own stack) with every
 * per-run namespace flag and, on cgroup v2, CLONE_INTO_CGROUP: no helper
 * process, no round trip, no copy of the server's memory. The child
 * (child.c) only makes system calls on data prepared here, then execs
 * sandbox-init (init.c) from a sealed memfd; this thread waits until that
 * exec. A helper process would
 * add an IPC hop to the hot path and a second place to fail; a fork-like
 * clone would leave PID 1 holding a copy-on-write image of the server (and
 * of other requests' data) for the whole run. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "child.h"
#include "cleanup.h"
#include "mnt_template.h"
#include "rootfs.h"
#include "sandbox.h"
#include "sandbox_spawn.h"
#include "seccomp_policy.h"
#include "supervise.h"
#include "zygote.h"

/* sandbox-init, embedded at build time (sandbox_init_blob.S). */
extern const unsigned char sandbox_init_blob[];
extern const unsigned char sandbox_init_blob_end[];

const char *sandbox_backend_name(enum sandbox_backend b) {
  switch (b) {
  case SANDBOX_BACKEND_AUTO:
    return "auto";
  case SANDBOX_BACKEND_CGROUP_V2:
    return "cgroup v2";
  case SANDBOX_BACKEND_CGROUP_V1:
    return "cgroup v1";
  case SANDBOX_BACKEND_RLIMIT:
    return "rlimit";
  }
  return "unknown";
}

static int read_cap_last_cap(void) {
  char buf[16];
  cleanup_close int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 63;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  if (n <= 0)
    return 63;
  buf[n] = '\0';
  return atoi(buf);
}

/* Makes one empty network namespace per slot, from this (still single)
 * thread: unshare, keep an fd, step back into the host's. */
static int make_slot_netns(struct sandbox_engine *e, struct sandbox_error *err) {
  cleanup_close int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0)
    return sandbox_error_set(err, errno, "open own network namespace");
  for (unsigned i = 0; i < e->config.slots; i++) {
    if (unshare(CLONE_NEWNET) < 0)
      return sandbox_error_set(err, errno, "create a network namespace");
    e->slots[i].netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int saved = errno;
    if (setns(host, CLONE_NEWNET) < 0)
      return sandbox_error_set(err, errno, "return to the host network namespace");
    if (e->slots[i].netns_fd < 0)
      return sandbox_error_set(err, saved, "open a slot network namespace");
  }
  return 0;
}

static void free_slots(struct sandbox_engine *e) {
  if (e->slots == NULL)
    return;
  for (unsigned i = 0; i < e->config.slots; i++) {
    if (e->slots[i].netns_fd >= 0)
      close(e->slots[i].netns_fd);
    free(e->slots[i].clone_stack);
  }
  free(e->slots);
  e->slots = NULL;
}

static int make_slots(struct sandbox_engine *e, struct sandbox_error *err) {
  e->slots = calloc(e->config.slots, sizeof *e->slots);
  if (e->slots == NULL)
    return sandbox_error_set(err, ENOMEM, "slots");
  for (unsigned i = 0; i < e->config.slots; i++) {
    e->slots[i].netns_fd = -1;
    e->slots[i].clone_stack = aligned_alloc(64, SPAWN_STACK_SIZE);
    if (e->slots[i].clone_stack == NULL)
      return sandbox_error_set(err, ENOMEM, "slot stacks");
  }
  return make_slot_netns(e, err);
}

/* Fills in the defaults and checks the uid/gid range; reads cap_last_cap. */
static int engine_configure(struct sandbox_engine *e, const struct sandbox_engine_config *config,
                            struct sandbox_error *err) {
  e->config = *config;
  if (e->config.slots == 0)
    e->config.slots = 1;
  if (e->config.uid_base == 0)
    e->config.uid_base = SANDBOX_DEFAULT_UID_BASE;
  if (e->config.gid_base == 0)
    e->config.gid_base = e->config.uid_base;
  if (e->config.uid_base + e->config.slots > 65534 || e->config.gid_base + e->config.slots > 65534)
    return sandbox_error_set(err, EINVAL, "uid/gid range %u+%u is out of bounds",
                             (unsigned)e->config.uid_base, e->config.slots);
  snprintf(e->state_dir, sizeof e->state_dir, "%s",
           config->state_dir ? config->state_dir : "/var/lib/sandboxd");
  e->config.state_dir = e->state_dir;
  e->config.cgroup_parent = NULL; /* not kept: only used below */
  e->cap_last_cap = read_cap_last_cap();
  e->zygote_fd = -1;
  return 0;
}

/* What engine_acquire has acquired so far, in its order. */
enum engine_stage {
  ENGINE_HAS_SLOTS,   /* the slots (possibly partly made) */
  ENGINE_HAS_INIT_FD, /* + the sandbox-init memfd */
  ENGINE_HAS_ROOTFS,  /* + the synthesized /etc and user databases */
  ENGINE_HAS_MNTNS,   /* + the template mount namespace */
  ENGINE_HAS_SECCOMP, /* + the seccomp programs (possibly partly compiled) */
};

/* Releases everything up to stage, in one order for every failure and for
 * sandbox_engine_free. The cgroups are not in it: they come last and are
 * released by cgroup_manager_destroy. */
static void engine_release(struct sandbox_engine *e, enum engine_stage stage) {
  if (stage >= ENGINE_HAS_SECCOMP) {
    seccomp_policy_free(&e->seccomp);
    seccomp_policy_free(&e->seccomp_network);
    seccomp_policy_free(&e->seccomp_proxy);
    seccomp_policy_free(&e->seccomp_zygote);
  }
  if (stage >= ENGINE_HAS_MNTNS)
    close(e->mntns_fd);
  if (stage >= ENGINE_HAS_ROOTFS) {
    fontlist_stop(&e->fontlist);
    rootfs_destroy(&e->rootfs);
  }
  free_slots(e);
  if (stage >= ENGINE_HAS_INIT_FD)
    close(e->init_fd);
}

/* Makes the slots, sandbox-init's memfd, the sandbox's filesystem, the
 * template namespace, the seccomp programs and the cgroups, in that order.
 * On failure, releases what it made. */
static int engine_acquire(struct sandbox_engine *e, const struct sandbox_engine_config *config,
                          struct sandbox_error *err) {
  if (make_slots(e, err) < 0) {
    engine_release(e, ENGINE_HAS_SLOTS);
    return -1;
  }
  e->init_fd = spawn_image_memfd("sandbox-init", sandbox_init_blob,
                                 (size_t)(sandbox_init_blob_end - sandbox_init_blob), err);
  if (e->init_fd < 0) {
    engine_release(e, ENGINE_HAS_SLOTS);
    return -1;
  }
  if (rootfs_init(&e->rootfs, e->state_dir, e->config.uid_base, e->config.gid_base, e->config.slots,
                  err) < 0) {
    engine_release(e, ENGINE_HAS_INIT_FD);
    return sandbox_error_wrap(err, "prepare sandbox filesystem");
  }
  fontlist_start(&e->fontlist, e->rootfs.lib);
  e->mntns_fd = mnt_template_create(&e->rootfs, err);
  if (e->mntns_fd < 0) {
    engine_release(e, ENGINE_HAS_ROOTFS);
    return sandbox_error_wrap(err, "prepare the template mount namespace");
  }
  if (seccomp_policy_compile(&e->seccomp, SECCOMP_PROFILE_RUN, err) < 0 ||
      seccomp_policy_compile(&e->seccomp_network, SECCOMP_PROFILE_INSTALLER, err) < 0 ||
      seccomp_policy_compile(&e->seccomp_proxy, SECCOMP_PROFILE_PROXY, err) < 0 ||
      seccomp_policy_compile(&e->seccomp_zygote, SECCOMP_PROFILE_ZYGOTE, err) < 0) {
    engine_release(e, ENGINE_HAS_SECCOMP);
    return sandbox_error_wrap(err, "compile seccomp policy");
  }
  if (cgroup_manager_init(&e->cgroups, config->backend, config->cgroup_parent, e->config.slots,
                          err) < 0) {
    engine_release(e, ENGINE_HAS_SECCOMP);
    return -1;
  }
  if (zygote_engine_init(e, err) < 0) {
    zygote_engine_release(e);
    cgroup_manager_destroy(&e->cgroups);
    engine_release(e, ENGINE_HAS_SECCOMP);
    return -1;
  }
  return 0;
}

static void engine_fill_report(struct sandbox_engine *e) {
  struct sandbox_report *r = &e->report;
  r->backend = e->cgroups.backend->kind;
  r->backend_name = e->cgroups.backend->name;
  snprintf(r->cgroup_path, sizeof r->cgroup_path, "%s", e->cgroups.engine_dir[0]);
  r->seccomp = true;
  r->namespaces = "pid,mount,ipc,uts,cgroup per run; net per slot";
  r->uid_base = e->config.uid_base;
  r->slots = e->config.slots;
  r->clone_into_cgroup = e->cgroups.clone_into_cgroup;
  r->cpu_share = e->cgroups.cpu_share;
  r->zygote = e->zygote_fd >= 0;
  r->zygote_max_forks = e->config.zygote.max_forks;
  r->zygote_max_age_ms = e->config.zygote.max_age_ms;
}

/* The capabilities the engine and its runs use. A container may give root
 * fewer than all (deploy/k8s/deployment.yaml), and a missing one does not
 * always fail where it is used: without CAP_KILL the SIGKILL at a run's
 * timeout fails (the run is another uid's) and the run, still running past
 * its limit, holds its worker for good; without CAP_SYS_CHROOT, CAP_SETUID,
 * CAP_SETGID or CAP_SETPCAP every run fails its setup while the server looks
 * healthy. So a short set refuses the start and names what is missing. */
static const struct {
  int cap;
  const char *name;
} engine_caps[] = {
    {CAP_SYS_ADMIN, "CAP_SYS_ADMIN"},       /* namespaces, mounts */
    {CAP_SYS_CHROOT, "CAP_SYS_CHROOT"},     /* setns into the template mount namespace */
    {CAP_SETUID, "CAP_SETUID"},             /* each run's slot uid */
    {CAP_SETGID, "CAP_SETGID"},             /* its gid, setgroups */
    {CAP_SETPCAP, "CAP_SETPCAP"},           /* dropping the bounding set */
    {CAP_KILL, "CAP_KILL"},                 /* killing a run (another uid) */
    {CAP_CHOWN, "CAP_CHOWN"},               /* handing a workspace to the slot uid */
    {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"}, /* reading and removing what runs left */
    {CAP_MKNOD, "CAP_MKNOD"},               /* the device nodes of each run's /dev */
};

static int check_capabilities(struct sandbox_error *err) {
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capget, &hdr, data) < 0)
    return sandbox_error_set(err, errno, "capget");
  char missing[256] = "";
  size_t len = 0;
  for (size_t i = 0; i < sizeof engine_caps / sizeof engine_caps[0]; i++) {
    int cap = engine_caps[i].cap;
    if ((data[cap / 32].effective & (1u << (cap % 32))) == 0)
      len += (size_t)snprintf(missing + len, len < sizeof missing ? sizeof missing - len : 0,
                              "%s%s", len > 0 ? " " : "", engine_caps[i].name);
  }
  if (len > 0)
    return sandbox_error_set(err, EPERM,
                             "the sandbox engine needs capabilities it does not have: %s "
                             "(containers: docs/OPERATIONS.md, \"Container and Kubernetes\")",
                             missing);
  return 0;
}

int sandbox_engine_new(const struct sandbox_engine_config *config, struct sandbox_engine **out,
                       struct sandbox_error *err) {
  if (geteuid() != 0)
    return sandbox_error_set(err, EPERM,
                             "the sandbox engine needs root (namespaces, mounts, uid switch)");
  if (check_capabilities(err) < 0)
    return -1;
  cleanup_free struct sandbox_engine *e = calloc(1, sizeof *e);
  if (e == NULL)
    return sandbox_error_set(err, ENOMEM, "engine");
  if (engine_configure(e, config, err) < 0)
    return -1;

  /* A write to a program that closed its stdin must fail with EPIPE, not
   * kill the server: the engine ignores SIGPIPE for the process. */
  signal(SIGPIPE, SIG_IGN);

  if (engine_acquire(e, config, err) < 0)
    return -1;
  engine_fill_report(e);
  *out = steal_pointer(&e);
  return 0;
}

void sandbox_engine_free(struct sandbox_engine *e) {
  if (e == NULL)
    return;
  zygote_engine_release(e);
  cgroup_manager_destroy(&e->cgroups);
  engine_release(e, ENGINE_HAS_SECCOMP);
  free(e);
}

int sandbox_group_new(struct sandbox_engine *e, uint64_t *id, struct sandbox_error *err) {
  struct cgroup_group *g = cgroup_group_new(&e->cgroups, err);
  if (g == NULL)
    return -1;
  *id = g->id;
  return 0;
}

int sandbox_group_memory(struct sandbox_engine *e, uint64_t id, uint64_t *bytes,
                         struct sandbox_error *err) {
  struct cgroup_group *g = cgroup_group_find(&e->cgroups, id);
  if (g == NULL)
    return sandbox_error_set(err, ENOENT, "no group %llu", (unsigned long long)id);
  if (e->cgroups.backend->group_memory(&e->cgroups, g, bytes) < 0)
    return sandbox_error_set(err, errno, "memory of group %llu", (unsigned long long)id);
  return 0;
}

int sandbox_group_oom_kills(struct sandbox_engine *e, uint64_t id, uint64_t *kills,
                            struct sandbox_error *err) {
  struct cgroup_group *g = cgroup_group_find(&e->cgroups, id);
  if (g == NULL)
    return sandbox_error_set(err, ENOENT, "no group %llu", (unsigned long long)id);
  if (e->cgroups.backend->group_oom_kills(&e->cgroups, g, kills) < 0)
    return sandbox_error_set(err, errno, "OOM kills of group %llu", (unsigned long long)id);
  return 0;
}

void sandbox_group_free(struct sandbox_engine *e, uint64_t id) {
  cgroup_group_free(&e->cgroups, id);
}

const struct sandbox_report *sandbox_engine_report(const struct sandbox_engine *e) {
  return &e->report;
}

enum sandbox_fontlist_state sandbox_fontlist_poll(struct sandbox_engine *e, uint64_t *ms,
                                                  const char **why) {
  enum sandbox_fontlist_state st = fontlist_poll(&e->fontlist);
  *ms = e->fontlist.ms;
  *why = e->fontlist.why;
  return st;
}

void sandbox_result_free(struct sandbox_result *r) {
  free(r->stdout_data);
  free(r->stderr_data);
  r->stdout_data = r->stderr_data = NULL;
}

static int validate_spec(const struct sandbox_spec *spec, struct sandbox_error *err) {
  if (spec->argv == NULL || spec->argv[0] == NULL || spec->argv[0][0] != '/')
    return sandbox_error_set(err, EINVAL, "argv[0] must be an absolute path");
  if (spec->workspace_dir == NULL || spec->workspace_dir[0] != '/')
    return sandbox_error_set(err, EINVAL, "workspace directory must be an absolute path");
  struct stat st;
  if (stat(spec->workspace_dir, &st) < 0)
    return sandbox_error_set(err, errno, "workspace %s", spec->workspace_dir);
  if (!S_ISDIR(st.st_mode))
    return sandbox_error_set(err, ENOTDIR, "workspace %s", spec->workspace_dir);
  if (spec->cwd != NULL && spec->cwd[0] != '/')
    return sandbox_error_set(err, EINVAL, "cwd must be an absolute path inside the sandbox");
  if (spec->n_mounts > SANDBOX_MAX_EXTRA_MOUNTS)
    return sandbox_error_set(err, E2BIG, "at most %d extra mounts", SANDBOX_MAX_EXTRA_MOUNTS);
  if (spec->stdin_fd > 0 && spec->stdin_len > 0)
    return sandbox_error_set(err, EINVAL, "stdin_fd: not with stdin_data");
  /* The network profile never falls back to the host's namespace: without
   * a namespace of the caller's, it is refused. */
  if (spec->network > SANDBOX_NETWORK_PROXY)
    return sandbox_error_set(err, EINVAL, "network: unknown profile %d", (int)spec->network);
  if (spec->network && (spec->netns_fd < 0 || ioctl(spec->netns_fd, NS_GET_NSTYPE) != CLONE_NEWNET))
    return sandbox_error_set(err, EINVAL, "the network profile needs a network namespace");
  return 0;
}

struct spawn_pipes {
  int fds[5][2]; /* stdin, stdout, stderr, report, sync: [0] read, [1] write */
};

static void spawn_pipes_close(struct spawn_pipes *p) {
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 2; j++)
      if (p->fds[i][j] >= 0) {
        close(p->fds[i][j]);
        p->fds[i][j] = -1;
      }
}

/* p's fds are all -1 on entry. */
static int spawn_pipes_open(struct spawn_pipes *p, bool need_sync, struct sandbox_error *err) {
  for (int i = 0; i < 5; i++) {
    if (i == 4 && !need_sync)
      break;
    if (pipe2(p->fds[i], O_CLOEXEC) < 0) {
      int e = errno;
      spawn_pipes_close(p);
      return sandbox_error_set(err, e, "pipe");
    }
  }
  /* The parent's ends never block the supervisor. */
  int parent_ends[4] = {p->fds[0][1], p->fds[1][0], p->fds[2][0], p->fds[3][0]};
  for (int i = 0; i < 4; i++)
    fcntl(parent_ends[i], F_SETFL, O_NONBLOCK);
  return 0;
}

static void classify(const struct supervise *s, const struct cgroup_run_stats *st,
                     const struct sandbox_limits *l, struct sandbox_result *r) {
  r->exit_code = -1;
  r->signal = 0;
  if (s->have_exit) {
    if (WIFEXITED(s->exit_status))
      r->exit_code = WEXITSTATUS(s->exit_status);
    else if (WIFSIGNALED(s->exit_status))
      r->signal = WTERMSIG(s->exit_status);
  } else {
    r->signal = SIGKILL; /* the namespace was killed before the program ended */
  }
  /* Precedence (docs/ENGINE.md): what the supervisor acted on first, then an
   * OOM kill in the run's cgroup, then a signal, then a normal exit. */
  r->cpu_time_exceeded = false;
  if (s->cause == SUPERVISE_CAUSE_WALL_TIMEOUT || s->cause == SUPERVISE_CAUSE_CPU_TIMEOUT) {
    r->killed_by = SANDBOX_KILLED_BY_TIMEOUT;
    r->cpu_time_exceeded = s->cause == SUPERVISE_CAUSE_CPU_TIMEOUT;
  } else if (s->cause == SUPERVISE_CAUSE_OUTPUT_LIMIT)
    r->killed_by = SANDBOX_KILLED_BY_OUTPUT_LIMIT;
  else if (s->cause == SUPERVISE_CAUSE_CANCELLED)
    r->killed_by = SANDBOX_KILLED_BY_CANCELLED;
  else if (st->oom_killed)
    r->killed_by = SANDBOX_KILLED_BY_MEMORY;
  else if (r->signal == SIGXCPU ||
           (r->signal == SIGKILL && r->cpu_time_us / 1000 >= l->cpu_time_ms)) {
    r->killed_by = SANDBOX_KILLED_BY_TIMEOUT; /* RLIMIT_CPU of one process */
    r->cpu_time_exceeded = true;
  } else if (r->signal != 0)
    r->killed_by = SANDBOX_KILLED_BY_SIGNAL;
  else
    r->killed_by = SANDBOX_KILLED_BY_NONE;
}

/* One run's state, from the plan to the reaped init: what the steps below
 * hand to each other and what spawn_release gives back. */
struct engine_run {
  struct sandbox_engine *e;
  unsigned slot;
  const struct sandbox_spec *spec;
  struct sandbox_limits limits; /* the spec's, defaults filled in */
  bool template;
  bool zygote; /* forked from the slot's zygote (zygote.c) */
  struct rootfs_plan plan;
  const char **env;
  bool need_sync;
  struct spawn_pipes p;
  int pidfd;
  pid_t pid;
  struct supervise sv;
  struct cgroup_run_stats stats;
  struct rusage ru;
};

/* Nothing acquired yet: every fd -1, so spawn_release can run at any point. */
static void spawn_state_init(struct engine_run *r) {
  r->pidfd = -1;
  r->pid = -1;
  memset(&r->sv, 0, sizeof r->sv);
  r->sv.stdin_fd = r->sv.stdout_fd = r->sv.stderr_fd = r->sv.report_fd = -1;
  memset(&r->stats, 0, sizeof r->stats);
  for (int i = 0; i < 5; i++)
    r->p.fds[i][0] = r->p.fds[i][1] = -1;
}

/* The run's cgroup (in its group, if any) and its pipes. */
static int spawn_prepare(struct engine_run *r, struct sandbox_error *err) {
  struct sandbox_engine *e = r->e;
  const struct cgroup_backend *cg = e->cgroups.backend;
  struct cgroup_group *group = NULL;
  if (r->spec->group != 0 && (group = cgroup_group_find(&e->cgroups, r->spec->group)) == NULL)
    return sandbox_error_set(err, ENOENT, "no group %llu", (unsigned long long)r->spec->group);
  if (cg->prepare(&e->cgroups, r->slot, &r->limits, group, err) < 0)
    return sandbox_error_wrap(err, "%s slot %u", cg->name, r->slot);
  /* Prepare may have created the per-run cgroup: the clone fd is known now,
   * and with it whether the child must wait to be attached (a sync pipe). */
  r->need_sync = !r->zygote && cg->clone_fd(&e->cgroups, r->slot) == CGROUP_ATTACH_AFTER_CLONE;
  if (spawn_pipes_open(&r->p, r->need_sync, err) < 0)
    return -1;
  if (r->zygote) {
    /* The report channel is a socket: its first message carries the
     * sender's credentials (its pid in our namespace), and the go comes
     * back on it. */
    close(r->p.fds[3][0]);
    close(r->p.fds[3][1]);
    r->p.fds[3][0] = r->p.fds[3][1] = -1;
    int one = 1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, r->p.fds[3]) < 0 ||
        setsockopt(r->p.fds[3][0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) {
      int en = errno;
      spawn_pipes_close(&r->p);
      return sandbox_error_set(err, en, "report socket");
    }
    fcntl(r->p.fds[3][0], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

/* Everything the child needs, as plain data (child.h). */
static void spawn_child_args(const struct engine_run *r, struct child_args *args) {
  const struct sandbox_engine *e = r->e;
  const struct sandbox_spec *spec = r->spec;
  *args = (struct child_args){
      .ops = r->plan.ops,
      .n_ops = r->plan.n_ops,
      .root = e->rootfs.root,
      .mntns_fd = r->template ? e->mntns_fd : -1,
      .cwd = spec->cwd ? spec->cwd : "/workspace",
      .hostname = "sandbox",
      .argv = spec->argv,
      .envp = r->env,
      .uid = e->config.uid_base + r->slot,
      .gid = e->config.gid_base + r->slot,
      .cap_last_cap = e->cap_last_cap,
      .stdin_fd = spec->stdin_fd > 0 ? spec->stdin_fd : r->p.fds[0][0],
      .stdout_fd = r->p.fds[1][1],
      .stderr_fd = r->p.fds[2][1],
      .report_fd = r->p.fds[3][1],
      .sync_fd = r->need_sync ? r->p.fds[4][0] : -1,
      .netns_fd = spec->network ? spec->netns_fd : e->slots[r->slot].netns_fd,
      .init_fd = e->init_fd,
      .seccomp = spec->network == SANDBOX_NETWORK_INSTALLER ? &e->seccomp_network
                 : spec->network == SANDBOX_NETWORK_PROXY   ? &e->seccomp_proxy
                                                            : &e->seccomp,
  };
  spawn_fill_rlimits(e, &r->limits, r->zygote, args);
}

/* The child's ends belong to it once it is cloned. */
static void spawn_pipes_close_child_ends(struct spawn_pipes *p) {
  int child_ends[5][2] = {{0, 0}, {1, 1}, {2, 1}, {3, 1}, {4, 0}};
  for (int i = 0; i < 5; i++) {
    int *fd = &p->fds[child_ends[i][0]][child_ends[i][1]];
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
  }
}

/* Without CLONE_INTO_CGROUP the child waits on the sync pipe: it is placed
 * in its cgroup, then let go. On failure it is killed (the caller still
 * reaps it). */
static int spawn_attach_child(struct engine_run *r, struct sandbox_error *err) {
  if (!r->need_sync)
    return 0;
  if (r->e->cgroups.backend->attach(&r->e->cgroups, r->slot, r->pid, err) < 0) {
    syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
    return sandbox_error_wrap(err, "place the run in its cgroup");
  }
  /* EPIPE here means the child already failed its setup: supervision
   * below collects its report. */
  ssize_t w = write(r->p.fds[4][1], "g", 1);
  (void)w;
  close(r->p.fds[4][1]);
  r->p.fds[4][1] = -1;
  return 0;
}

/* Hands the parent's pipe ends to the supervisor and runs it. */
static int spawn_supervise(struct engine_run *r, struct sandbox_error *err) {
  struct supervise *sv = &r->sv;
  struct spawn_pipes *p = &r->p;
  sv->stdin_fd = p->fds[0][1];
  sv->stdout_fd = p->fds[1][0];
  sv->stderr_fd = p->fds[2][0];
  sv->report_fd = p->fds[3][0];
  p->fds[0][1] = p->fds[1][0] = p->fds[2][0] = p->fds[3][0] = -1; /* owned by sv now */
  sv->pidfd = r->pidfd;
  sv->stdin_data = r->spec->stdin_data;
  sv->stdin_len = r->spec->stdin_len;
  sv->output_limit = r->limits.output_bytes;
  sv->timeout_ms = r->limits.timeout_ms;
  sv->cpu_limit_ms = r->limits.cpu_time_ms;
  sv->cgroups = &r->e->cgroups;
  sv->slot = r->slot;
  const struct sandbox_stream *st = r->spec->stream;
  sv->on_output = st != NULL ? st->on_output : NULL;
  sv->output_arg = st != NULL ? st->arg : NULL;
  sv->cancel_fd = st != NULL ? st->cancel_fd : -1;
  return supervise_run(sv, err);
}

static void spawn_reap(struct engine_run *r, struct sandbox_result *result) {
  memset(&r->ru, 0, sizeof r->ru);
  if (r->zygote) {
    /* The zygote's child, not ours: the kernel reaps it (the zygote
     * ignores SIGCHLD); its end is the pidfd becoming readable. Its
     * figures come from the slot's cgroup. */
    struct pollfd p = {.fd = r->pidfd, .events = POLLIN};
    while (r->pidfd >= 0 && poll(&p, 1, -1) < 0 && errno == EINTR)
      ;
    result->wall_time_us = supervise_elapsed_us(&r->sv.start);
    return;
  }
  spawn_wait(r->pidfd, &r->ru);
  result->wall_time_us = supervise_elapsed_us(&r->sv.start);
}

/* A run forked from the slot's zygote: handed over with its fds, its first
 * process taken into the slot's cgroup when it says HELLO, then supervised
 * like any run. */
static int spawn_execute_zygote(struct engine_run *r, struct child_args *args,
                                struct sandbox_result *result, struct sandbox_error *err) {
  clock_gettime(CLOCK_MONOTONIC, &r->sv.start);
  if (zygote_send_run(r->e, r->slot, args, r->p.fds[3][1], err) < 0)
    return -1;
  spawn_pipes_close_child_ends(&r->p);
  struct child_report setup;
  r->pid = zygote_take_run(r->e, r->slot, r->p.fds[3][0], &r->pidfd, &setup, err);
  if (r->pid < 0) {
    if (setup.kind != CHILD_REPORT_SETUP_ERROR)
      return -1;
    r->sv.have_setup_error = true;
    r->sv.setup_error.stage = setup.stage;
    r->sv.setup_error.errnum = setup.errnum;
    return 0; /* spawn_finish describes it */
  }
  int ret = spawn_supervise(r, err) == 0 ? 0 : -1;
  spawn_reap(r, result);
  return ret;
}

/* From the cgroup to the reaped init. Returns 0 when the run was supervised
 * to its end; -1 with err otherwise (the init, if it was cloned, is reaped). */
static int spawn_execute(struct engine_run *r, struct sandbox_result *result,
                         struct sandbox_error *err) {
  if (spawn_prepare(r, err) < 0)
    return -1;
  struct child_args args;
  spawn_child_args(r, &args);

  clock_gettime(CLOCK_MONOTONIC, &r->sv.start);
  if (r->zygote)
    return spawn_execute_zygote(r, &args, result, err);
  r->pid = spawn_clone(r->e, r->slot, &args,
                       r->e->cgroups.backend->clone_fd(&r->e->cgroups, r->slot), &r->pidfd, err);
  if (r->pid < 0)
    return -1;
  spawn_pipes_close_child_ends(&r->p);
  int ret = -1;
  if (spawn_attach_child(r, err) == 0 && spawn_supervise(r, err) == 0)
    ret = 0;
  spawn_reap(r, result);
  return ret;
}

/* The figures of a run that happened: times, memory, how it ended, output. */
static void spawn_fill_result(struct engine_run *r, struct sandbox_result *result) {
  const struct cgroup_backend *cg = r->e->cgroups.backend;
  const struct cgroup_run_stats *stats = &r->stats;
  const struct rusage *ru = &r->ru;
  result->backend = cg->kind;
  result->memory_per_process = cg->kind == SANDBOX_BACKEND_RLIMIT;
  result->limits = r->limits;
  if (stats->have_cpu)
    result->cpu_time_us = stats->cpu_ns / 1000;
  else
    result->cpu_time_us = (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000u +
                          (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
  result->peak_memory_bytes = stats->have_peak ? stats->peak_bytes : (uint64_t)ru->ru_maxrss * 1024;
  classify(&r->sv, stats, &r->limits, result);
  result->stdout_data = steal_pointer(&r->sv.out.data);
  result->stdout_len = r->sv.out.len;
  result->stdout_truncated = r->sv.out.truncated;
  result->stderr_data = steal_pointer(&r->sv.err.data);
  result->stderr_len = r->sv.err.len;
  result->stderr_truncated = r->sv.err.truncated;
}

/* Empties the slot's cgroup whatever happened before, then decides whether
 * the run counts (ret 0) and fills result if so. */
static int spawn_finish(struct engine_run *r, int ret, struct sandbox_result *result,
                        struct sandbox_error *err) {
  const struct cgroup_backend *cg = r->e->cgroups.backend;
  struct sandbox_error finish_err = {0};
  if (cg->finish(&r->e->cgroups, r->slot, &r->stats, &finish_err) < 0 && ret == 0) {
    /* Figures are still valid; the leftover was killed. Report it loudly. */
    fprintf(stderr, "sandbox: slot %u: %s\n", r->slot, finish_err.msg);
  }
  if (ret == 0 && r->sv.have_setup_error) {
    spawn_setup_error(&r->plan, r->sv.setup_error.stage, r->sv.setup_error.errnum, "sandbox", err);
    ret = -1;
  } else if (ret == 0 && !r->sv.have_exit && r->sv.cause == SUPERVISE_CAUSE_NONE &&
             !r->stats.oom_killed) {
    /* init died without a word and nobody killed it. */
    sandbox_error_set(err, 0, "the sandbox's init ended without reporting the program's status");
    ret = -1;
  }
  if (ret == 0)
    spawn_fill_result(r, result);
  return ret;
}

static void spawn_release(struct engine_run *r) {
  free(r->sv.out.data);
  free(r->sv.err.data);
  int sv_fds[4] = {r->sv.stdin_fd, r->sv.stdout_fd, r->sv.stderr_fd, r->sv.report_fd};
  for (int i = 0; i < 4; i++)
    if (sv_fds[i] >= 0)
      close(sv_fds[i]);
  if (r->pidfd >= 0)
    close(r->pidfd);
  spawn_pipes_close(&r->p);
  rootfs_plan_free(&r->plan);
}

int sandbox_run(struct sandbox_engine *e, unsigned slot, const struct sandbox_spec *spec,
                struct sandbox_result *result, struct sandbox_error *err) {
  memset(result, 0, sizeof *result);
  if (slot >= e->config.slots)
    return sandbox_error_set(err, EINVAL, "slot %u out of range (%u slots)", slot, e->config.slots);
  if (validate_spec(spec, err) < 0)
    return -1;
  struct engine_run r = {.e = e, .slot = slot, .spec = spec, .limits = spec->limits};
  sandbox_limits_fill_defaults(&r.limits);
  if (spec->zygote && zygote_check_spec(e, spec, err) < 0)
    return -1;
  r.zygote = spec->zygote;

  r.template = rootfs_template_fits(spec);
  if (rootfs_plan_build(&e->rootfs, slot, spec, &r.limits, r.template, &r.plan, err) < 0)
    return -1;
  /* Only a spec whose mounts hold up gets to the zygote: one that does not
   * must not stop the slot's zygote for other mounts. */
  if (spec->zygote && zygote_ensure(e, slot, spec, err) < 0) {
    rootfs_plan_free(&r.plan);
    return -1;
  }
  cleanup_free const char **env = spawn_build_env(spec->env, err);
  if (env == NULL) {
    rootfs_plan_free(&r.plan);
    return -1;
  }
  r.env = env;
  spawn_state_init(&r);

  int ret = spawn_execute(&r, result, err);
  ret = spawn_finish(&r, ret, result, err);
  spawn_release(&r);
  return ret;
}
