/* sandbox_spawn.h: the engine's state and the steps of a sandbox child's
 * spawn (spawn.c), shared by a run (engine.c) and a zygote's start
 * (zygote.c), so that neither reaches into the other. Not part of the
 * engine's interface (sandbox.h). Not named spawn.h: server/sandbox is on
 * the include path of every user of the engine, and <spawn.h>
 * (posix_spawn) must stay the C library's. */
#ifndef SANDBOX_SPAWN_H
#define SANDBOX_SPAWN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#include "cgroup.h"
#include "fontlist.h"
#include "child.h"
#include "rootfs.h"
#include "sandbox.h"
#include "seccomp_policy.h"

/* What other threads may read of a slot's zygote (zygote_memory.c), under
 * mu: set by the slot's thread once the zygote is ready, its forks as they
 * are handed over, and cleared (pid 0) before the zygote is reaped, so
 * that a pid read here and still here after /proc/PID was opened is the
 * zygote's. generation tells a new zygote from an old one with the same
 * pid. */
struct zygote_shown {
  pthread_mutex_t mu;
  pid_t pid;
  uint64_t generation;
  uint64_t forks;
  uint64_t started_ms; /* sbx_monotonic_ms when it was ready */
  char environment[SANDBOX_ZYGOTE_ENVIRONMENT_MAX];
};

/* A slot's zygote (zygote.c); pid 0 when there is none. Only the slot's
 * own thread changes it; stats readers see pid through the atomic, the
 * rest through shown. */
struct zygote_slot {
  _Atomic pid_t pid;
  int pidfd;
  int ctl;        /* the control socket (SOCK_SEQPACKET) */
  uint64_t forks; /* runs forked from it */
  struct timespec started;
  char *mounts_key; /* the extra mounts it was built with ("" none) */
  /* The last start that failed (for which mounts, when, why): the same
   * start is not tried again for ZYGOTE_RETRY_MS, and runs meanwhile get
   * its message at once, so that a preload module that does not import
   * does not cost every request an interpreter's start. */
  char *failed_key;
  struct timespec failed_at;
  struct sandbox_error failed;
  struct zygote_shown shown;
};

struct sandbox_engine {
  struct sandbox_engine_config config;
  char state_dir[4096];
  struct cgroup_manager cgroups;
  struct seccomp_policy seccomp;
  struct seccomp_policy seccomp_network; /* spec.network INSTALLER: pip's profile */
  struct seccomp_policy seccomp_proxy;   /* spec.network PROXY: user code's, TCP only */
  struct seccomp_policy seccomp_zygote;  /* what a zygote loads before it imports anything */
  struct rootfs rootfs;
  struct fontlist fontlist; /* matplotlib's, made in <rootfs.lib>/matplotlib */
  struct sandbox_report report;
  int cap_last_cap;
  int init_fd;   /* sealed memfd with sandbox-init */
  int mntns_fd;  /* the template mount namespace (mnt_template.c) */
  int zygote_fd; /* sealed memfd with sandbox-zygote; -1 without zygotes */
  char zygote_preload[4096];
  char zygote_home[4200]; /* an empty directory: a zygote's /workspace */
  struct {
    atomic_uint_fast64_t starts, start_failures, forks, recycled;
  } zygote_counts;
  struct engine_slot {
    int netns_fd;      /* the slot's network namespace (only a down lo) */
    void *clone_stack; /* the vfork-style child's stack */
    struct zygote_slot zygote;
  } * slots;
};

/* The stack every slot's vfork-style child runs on (engine_slot). */
#define SPAWN_STACK_SIZE (256 * 1024)

/* The clone of a sandbox child from the calling thread, vfork-style on the
 * slot's stack: into cgroup_fd when >= 0 (CLONE_INTO_CGROUP), else born in
 * the thread's cgroup. Returns once the child has exec'd args' init (or
 * died): its pid, or -1 with err. */
pid_t spawn_clone(struct sandbox_engine *e, unsigned slot, struct child_args *args, int cgroup_fd,
                  int *pidfd, struct sandbox_error *err);
/* Waits (through EINTR) for the child behind pidfd to end and reaps it;
 * its rusage into ru when not NULL. */
void spawn_wait(int pidfd, struct rusage *ru);
/* A sealed, executable memfd holding an embedded program (sandbox-init,
 * sandbox-zygote); the fd, or -1 with err. */
int spawn_image_memfd(const char *name, const unsigned char *image, size_t len,
                      struct sandbox_error *err);
/* The child's environment: the engine's minimum, then extra (which wins
 * for the same name). Allocated (free it; the strings are not copied), or
 * NULL with err. */
const char **spawn_build_env(const char *const *extra, struct sandbox_error *err);
/* The engine's rlimits for a child with these limits, into a's rlimits;
 * zygote: the child is forked from the slot's zygote (one more process). */
void spawn_fill_rlimits(const struct sandbox_engine *e, const struct sandbox_limits *l, bool zygote,
                        struct child_args *a);
/* A setup error the child reported (its stage and errno) as err: "WHO
 * setup failed at <the step>", the step named from plan. Returns -1. */
int spawn_setup_error(const struct rootfs_plan *plan, int stage, int errnum, const char *who,
                      struct sandbox_error *err);

#endif
