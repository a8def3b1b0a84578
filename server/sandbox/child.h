/* child.h: what the sandbox child needs, prepared in full by the parent
 * before the clone, and the messages it reports back.
 *
 * The child of a multi-threaded process may only make async-signal-safe
 * calls: everything here is plain data (paths, flags, argv, the compiled BPF
 * program), so the child does system calls and nothing else. */
#ifndef SANDBOX_CHILD_H
#define SANDBOX_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "seccomp_policy.h"

enum child_op_kind {
  CHILD_OP_MKDIR,   /* path, mode */
  CHILD_OP_SYMLINK, /* source = link target, path = link */
  CHILD_OP_MOUNT,   /* source, path, fstype, flags, data */
  CHILD_OP_BIND,    /* source, path, flags applied by a bind remount (MS_RDONLY...) */
  CHILD_OP_MKNOD,   /* path, mode, dev */
  CHILD_OP_REMOUNT, /* path, flags (tmpfs made read-only after it was filled) */
  CHILD_OP_MKFILE,  /* path, mode: an empty file to bind a file onto */
  /* Template runs only: source (a host path) is cloned with open_tree before
   * the child enters the template namespace, then attached at path with
   * move_mount and remounted with flags (MS_RDONLY...). */
  CHILD_OP_ATTACH,
};
#define CHILD_MAX_ATTACH 19 /* the workspace, passwd, group + SANDBOX_MAX_EXTRA_MOUNTS */

struct child_op {
  enum child_op_kind kind;
  const char *source;
  const char *path;
  const char *fstype;
  const char *data;
  unsigned long flags;
  mode_t mode;
  dev_t dev;
};

/* Stages before the mount operations; op i reports CHILD_STAGE_OPS + i. */
enum child_stage {
  CHILD_STAGE_FDS = 1,
  CHILD_STAGE_NETNS,
  CHILD_STAGE_SIGNALS,
  CHILD_STAGE_PRIVATE_MOUNTS,
  CHILD_STAGE_TEMPLATE,
  CHILD_STAGE_PIVOT_ROOT,
  CHILD_STAGE_REMOUNT_ROOT,
  CHILD_STAGE_HOSTNAME,
  CHILD_STAGE_CHDIR,
  CHILD_STAGE_RLIMITS,
  CHILD_STAGE_CAPS_BOUNDING,
  CHILD_STAGE_GROUPS,
  CHILD_STAGE_GID,
  CHILD_STAGE_UID,
  CHILD_STAGE_CAPS,
  CHILD_STAGE_NO_NEW_PRIVS,
  CHILD_STAGE_PDEATHSIG,
  CHILD_STAGE_DUMPABLE,
  CHILD_STAGE_SYNC,
  CHILD_STAGE_SECCOMP,
  CHILD_STAGE_FORK,
  CHILD_STAGE_EXEC,
  CHILD_STAGE_INIT_EXEC,
  CHILD_STAGE_ZYGOTE, /* a zygote's fork entering its run (zygote_main.c) */
  CHILD_STAGE_OPS = 1000,
};

enum child_report_kind {
  CHILD_REPORT_SETUP_ERROR = 1, /* stage, errnum: the program did not run */
  CHILD_REPORT_EXIT = 2,        /* status: wait status of the program */
  CHILD_REPORT_READY = 3,       /* the template namespace is built */
  /* A zygote's run, first message, sent with the sender's credentials:
   * the engine learns its pid and places it in the slot's cgroup. */
  CHILD_REPORT_HELLO = 4,
};

struct child_report {
  int32_t kind;
  int32_t stage;
  int32_t errnum;
  int32_t status;
};

#define CHILD_MAX_RLIMITS 8

struct child_args {
  const struct child_op *ops;
  size_t n_ops;
  const char *root; /* host path where the new root is built (no template) */
  /* The template mount namespace (rootfs.h), or -1. With it, the child joins
   * a copy of the prepared root and ops are the per-run mounts only, with
   * paths inside the sandbox; without it, ops build the whole root at root
   * and the child pivots into it. */
  int mntns_fd;
  const char *cwd; /* inside the sandbox */
  const char *hostname;
  const char *const *argv;
  const char *const *envp;
  uid_t uid;
  gid_t gid;
  int cap_last_cap;
  /* Parent's pipe ends for the child, moved to 0, 1, 2, 3 and 4. */
  int stdin_fd, stdout_fd, stderr_fd, report_fd, sync_fd; /* sync_fd -1: none */
  int netns_fd; /* the slot's network namespace or spec.netns_fd; joined then closed */
  int init_fd;  /* sealed memfd holding sandbox-init (init.c), exec'd last */
  struct {
    int resource;
    struct rlimit limit;
  } rlimits[CHILD_MAX_RLIMITS];
  size_t n_rlimits;
  const struct seccomp_policy *seccomp;
  /* The zygote's own start: init_fd is the zygote's image, exec'd as root
   * with no credential change and no seccomp filter (zygote_main.c). */
  bool zygote;
};

/* Runs in the clone child (PID 1 of the new PID namespace, sharing the
 * parent's memory until it execs sandbox-init; the parent thread waits).
 * Returns only by exiting. */
int child_main(void *args);

/* The template namespace's builder, in a helper forked at engine start: runs
 * a->ops in a new mount namespace, pivots into a->root, reports READY on
 * report_fd and waits to be killed. Returns only by exiting. */
__attribute__((noreturn)) void child_template_main(const struct child_args *a, int report_fd);

/* A run forked from a zygote (zygote_main.c), in its first process (PID 1
 * of the run's namespaces, in a mount namespace copied from the zygote's):
 * the per-run mounts (trees: the detached copies the engine made, for the
 * CHILD_OP_ATTACH ops), the hostname, the working directory. */
void child_zygote_enter(const struct child_args *a, const int *trees);
/* Then in the program's own process: rlimits, no capabilities,
 * no_new_privs, the parent-death signal, the seccomp filter. */
void child_zygote_confine(const struct child_args *a);

/* Confinement in one call, for the zygote itself (before it imports
 * anything) and for a zygote run's PID 1 (before it becomes sandbox-init):
 * an empty bounding and ambient set, no capability, no_new_privs, then the
 * filter. System calls only. -1 with errno, and the stage that failed. */
int child_confine(int cap_last_cap, const struct seccomp_policy *seccomp, int *stage);

/* Child side, on fd 3 (the report pipe or socket): one message; a setup
 * error at stage with errno, then _exit(127). Also zygote_main.c's. */
void child_report(int32_t kind, int32_t stage, int32_t errnum, int32_t status);
__attribute__((noreturn)) void child_fail(int stage);
/* Human name of a stage (parent side). */
const char *child_stage_name(int stage);

#endif
