/* spawn.c: the steps of a sandbox child's spawn that a run (engine.c) and
 * a zygote's start (zygote.c) share (sandbox_spawn.h): the clone itself,
 * the reap, the embedded programs' sealed memfds, the environment, the
 * rlimits, the limits' defaults and the words for a failed setup.
 *
 * The clone is a clone3 straight from the calling thread, vfork-style
 * (CLONE_VM | CLONE_VFORK, on the slot's own stack) with every per-run
 * namespace flag and, when given a cgroup, CLONE_INTO_CGROUP: no helper
 * process, no round trip, no copy of the server's memory. The child
 * (child.c) only makes system calls on data prepared before the clone.
 * Never passes the server's own environment, and never gives a child
 * anything a run's limits did not name. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "sandbox_spawn.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

long sandbox_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg);

#if defined(__SANITIZE_ADDRESS__)
#define SPAWN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPAWN_ASAN 1
#endif
#endif
#ifdef SPAWN_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* The network namespace is per slot (joined with setns), the others per run.
 * The mount namespace too, but a template run's child makes it itself, as a
 * copy of the template (child.c), rather than copying the host's here. */
static const uint64_t NS_FLAGS = CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

pid_t spawn_clone(struct sandbox_engine *e, unsigned slot, struct child_args *args, int cgroup_fd,
                  int *pidfd, struct sandbox_error *err) {
  struct clone_args ca;
  memset(&ca, 0, sizeof ca);
  ca.flags = NS_FLAGS | CLONE_PIDFD | CLONE_VM | CLONE_VFORK;
  if (args->mntns_fd < 0)
    ca.flags |= CLONE_NEWNS;
  ca.pidfd = (uint64_t)(uintptr_t)pidfd;
  ca.exit_signal = SIGCHLD;
#ifdef SPAWN_ASAN
  /* The child never returns (it execs or exits), so AddressSanitizer never
   * clears the poison of its frames; the next child on this stack would
   * trip over it. For ASan the stack is new each time. */
  ASAN_UNPOISON_MEMORY_REGION(e->slots[slot].clone_stack, SPAWN_STACK_SIZE);
#endif
  ca.stack = (uint64_t)(uintptr_t)e->slots[slot].clone_stack;
  ca.stack_size = SPAWN_STACK_SIZE;
  if (cgroup_fd >= 0) { /* else inherited, or attached after the clone */
    ca.flags |= CLONE_INTO_CGROUP;
    ca.cgroup = (uint64_t)cgroup_fd;
  }
  /* Returns once the child has exec'd sandbox-init or died. */
  long pid = sandbox_clone3(&ca, sizeof ca, child_main, args);
  if (pid < 0)
    return sandbox_error_set(err, (int)-pid, "clone3");
  return (pid_t)pid;
}

void spawn_wait(int pidfd, struct rusage *ru) {
  siginfo_t info;
  while (syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED | __WALL, ru) < 0 && errno == EINTR)
    ;
}

/* Puts an embedded program in a sealed, executable memfd: no file on disk
 * to find, replace or keep in step with the library. */
int spawn_image_memfd(const char *name, const unsigned char *image, size_t len,
                      struct sandbox_error *err) {
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
  cleanup_close int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) /* kernels before 6.3 have no MFD_EXEC */
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return sandbox_error_set(err, errno, "memfd for %s", name);
  if (sbx_write_all(fd, image, len) < 0)
    return sandbox_error_set(err, errno, "write %s", name);
  if (fchmod(fd, 0555) < 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
    return sandbox_error_set(err, errno, "seal %s", name);
  return steal_fd(&fd);
}

/* The environment: a documented minimum, then what the spec lists (which
 * wins for the same name). Nothing of the server's own environment. */
static const char *const env_minimum[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8", "TMPDIR=/tmp",
    /* Caches (matplotlib's font list and the like) go to /tmp, not into the
     * workspace, where they would count against its quota and persist. */
    "XDG_CACHE_HOME=/tmp/.cache", "MPLCONFIGDIR=/tmp/.config/matplotlib", NULL};

const char **spawn_build_env(const char *const *extra, struct sandbox_error *err) {
  size_t n_extra = 0;
  for (; extra != NULL && extra[n_extra] != NULL; n_extra++) {
    const char *eq = strchr(extra[n_extra], '=');
    if (eq == NULL || eq == extra[n_extra]) {
      sandbox_error_set(err, EINVAL, "environment entry without NAME=: '%.40s'", extra[n_extra]);
      return NULL;
    }
  }
  const char **env = calloc(n_extra + sizeof env_minimum / sizeof env_minimum[0], sizeof *env);
  if (env == NULL) {
    sandbox_error_set(err, ENOMEM, "environment");
    return NULL;
  }
  size_t n = 0;
  for (size_t i = 0; env_minimum[i] != NULL; i++) {
    size_t klen = (size_t)(strchr(env_minimum[i], '=') - env_minimum[i]) + 1;
    bool overridden = false;
    for (size_t j = 0; j < n_extra && !overridden; j++)
      overridden = strncmp(extra[j], env_minimum[i], klen) == 0;
    if (!overridden)
      env[n++] = env_minimum[i];
  }
  for (size_t j = 0; j < n_extra; j++)
    env[n++] = extra[j];
  env[n] = NULL;
  return env;
}

static void set_rlimit(struct child_args *a, int resource, uint64_t soft, uint64_t hard) {
  if (a->n_rlimits >= CHILD_MAX_RLIMITS)
    return;
  a->rlimits[a->n_rlimits].resource = resource;
  a->rlimits[a->n_rlimits].limit.rlim_cur = soft;
  a->rlimits[a->n_rlimits].limit.rlim_max = hard;
  a->n_rlimits++;
}

void spawn_fill_rlimits(const struct sandbox_engine *e, const struct sandbox_limits *l, bool zygote,
                        struct child_args *a) {
  uint64_t cpu_s = (l->cpu_time_ms + 999) / 1000;
  set_rlimit(a, RLIMIT_CORE, 0, 0);
  set_rlimit(a, RLIMIT_NOFILE, l->open_files, l->open_files);
  set_rlimit(a, RLIMIT_FSIZE, l->file_size_bytes, l->file_size_bytes);
  /* Counted per uid: each slot has its own uid, so this is per run. +1 for
   * the namespace's init, +1 for the zygote a run is forked from (same uid,
   * same user namespace). */
  uint64_t nproc = l->max_processes + 1 + (zygote ? 1 : 0);
  set_rlimit(a, RLIMIT_NPROC, nproc, nproc);
  set_rlimit(a, RLIMIT_STACK, 8u << 20, 8u << 20);
  if (e->cgroups.backend->kind == SANDBOX_BACKEND_RLIMIT) {
    /* No tree-wide figures: memory and CPU are limited per process. */
    set_rlimit(a, RLIMIT_CPU, cpu_s, cpu_s + 1);
    set_rlimit(a, RLIMIT_AS, l->memory_bytes, l->memory_bytes);
  } else {
    /* Per-process backstop for the supervisor's tree-wide CPU check, which
     * is the limit: the hard limit stays unlimited, so a program may set
     * its own RLIMIT_CPU (raising it gains nothing past the supervisor). */
    set_rlimit(a, RLIMIT_CPU, cpu_s + 1, RLIM_INFINITY);
  }
}

void sandbox_limits_fill_defaults(struct sandbox_limits *l) {
  if (l->timeout_ms == 0)
    l->timeout_ms = SANDBOX_DEFAULT_TIMEOUT_MS;
  if (l->cpu_time_ms == 0)
    l->cpu_time_ms = l->timeout_ms;
  if (l->memory_bytes == 0)
    l->memory_bytes = SANDBOX_DEFAULT_MEMORY_BYTES;
  if (l->output_bytes == 0)
    l->output_bytes = SANDBOX_DEFAULT_OUTPUT_BYTES;
  if (l->max_processes == 0)
    l->max_processes = SANDBOX_DEFAULT_MAX_PROCESSES;
  if (l->file_size_bytes == 0)
    l->file_size_bytes = SANDBOX_DEFAULT_FILE_SIZE_BYTES;
  if (l->open_files == 0)
    l->open_files = SANDBOX_DEFAULT_OPEN_FILES;
  if (l->tmp_bytes == 0)
    l->tmp_bytes = SANDBOX_DEFAULT_TMP_BYTES;
}

int spawn_setup_error(const struct rootfs_plan *plan, int stage, int errnum, const char *who,
                      struct sandbox_error *err) {
  char what[512];
  if (stage >= CHILD_STAGE_OPS)
    rootfs_describe_op(plan, (size_t)(stage - CHILD_STAGE_OPS), what, sizeof what);
  else
    snprintf(what, sizeof what, "%s", child_stage_name(stage));
  return sandbox_error_set(err, errnum, "%s setup failed at %s", who, what);
}
