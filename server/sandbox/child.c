/* child.c: the sandbox child, from the clone to the exec of sandbox-init, in
 * one straight sequence (bubblewrap's order): file descriptors, signals,
 * network namespace, mounts, pivot_root, rlimits, credentials,
 * no-new-privs, seccomp, exec. sandbox-init (init.c) then starts the
 * program and stays as PID 1.
 *
 * Runs as a vfork-style child (CLONE_VM | CLONE_VFORK) of a multi-threaded
 * process, on a stack of its own, while the parent thread waits for the
 * exec: only async-signal-safe calls, nothing written but its own stack. No
 * malloc, no stdio, and raw system calls for the credential changes
 * (glibc's setresuid/setgroups broadcast to the parent's threads and would
 * deadlock). Any failure is reported on fd 3 and the child exits before
 * exec: the program never runs with less isolation. */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
  FD_STDIN = 0,
  FD_STDOUT = 1,
  FD_STDERR = 2,
  FD_REPORT = 3,
  FD_SYNC = 4,
  FD_NETNS = 5,
  FD_INIT = 6,
  FD_MNTNS = 7
};
enum { N_KEPT_FDS = 8 };

void child_report(int32_t kind, int32_t stage, int32_t errnum, int32_t status) {
  struct child_report r = {.kind = kind, .stage = stage, .errnum = errnum, .status = status};
  ssize_t n;
  do {
    n = write(FD_REPORT, &r, sizeof r);
  } while (n < 0 && errno == EINTR);
}

void child_fail(int stage) {
  child_report(CHILD_REPORT_SETUP_ERROR, stage, errno, 0);
  _exit(127);
}

/* Moves the descriptors the child keeps to 0..5 and closes the rest: the
 * server's sockets, other runs' pipes, everything it had open. */
static void setup_fds(const struct child_args *a) {
  int want[N_KEPT_FDS] = {a->stdin_fd, a->stdout_fd, a->stderr_fd, a->report_fd,
                          a->sync_fd,  a->netns_fd,  a->init_fd,   a->mntns_fd};
  int tmp[N_KEPT_FDS];
  for (int i = 0; i < N_KEPT_FDS; i++) {
    tmp[i] = -1;
    if (want[i] >= 0 && (tmp[i] = fcntl(want[i], F_DUPFD, 16)) < 0)
      _exit(126); /* cannot even report: the report fd is one of these */
  }
  for (int i = 0; i < N_KEPT_FDS; i++) {
    if (tmp[i] >= 0 && dup2(tmp[i], i) < 0)
      _exit(126);
  }
  if (syscall(SYS_close_range, (unsigned)N_KEPT_FDS, ~0U, 0U) < 0)
    child_fail(CHILD_STAGE_FDS);
  if (a->sync_fd < 0)
    close(FD_SYNC);
  if (a->netns_fd < 0)
    close(FD_NETNS);
  if (a->mntns_fd < 0)
    close(FD_MNTNS);
  /* The report and sync pipes go on to sandbox-init; its own image not. */
  if (fcntl(FD_INIT, F_SETFD, FD_CLOEXEC) < 0)
    child_fail(CHILD_STAGE_FDS);
}

/* Handlers and ignored signals are inherited from the server; SIG_IGN would
 * even survive exec. Start from the defaults with nothing blocked. */
static void reset_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP)
      continue;
    sigaction(sig, &sa, NULL); /* fails harmlessly for glibc's reserved ones */
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
    child_fail(CHILD_STAGE_SIGNALS);
}

/* trees: the detached copies for the CHILD_OP_ATTACH ops, in their order. */
static void run_ops(const struct child_args *a, const int *trees) {
  size_t next_tree = 0;
  for (size_t i = 0; i < a->n_ops; i++) {
    const struct child_op *op = &a->ops[i];
    int stage = CHILD_STAGE_OPS + (int)i;
    switch (op->kind) {
    case CHILD_OP_MKDIR:
      if (mkdir(op->path, op->mode) < 0 && errno != EEXIST)
        child_fail(stage);
      break;
    case CHILD_OP_SYMLINK:
      if (symlink(op->source, op->path) < 0)
        child_fail(stage);
      break;
    case CHILD_OP_MOUNT:
      if (mount(op->source, op->path, op->fstype, op->flags, op->data) < 0)
        child_fail(stage);
      break;
    case CHILD_OP_BIND:
      if (mount(op->source, op->path, NULL, MS_BIND | MS_REC, NULL) < 0)
        child_fail(stage);
      if (mount(NULL, op->path, NULL, MS_BIND | MS_REMOUNT | op->flags, NULL) < 0)
        child_fail(stage);
      break;
    case CHILD_OP_MKNOD:
      if (mknod(op->path, op->mode, op->dev) < 0)
        child_fail(stage);
      break;
    case CHILD_OP_MKFILE: {
      int fd = open(op->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, op->mode);
      if (fd < 0)
        child_fail(stage);
      close(fd);
      break;
    }
    case CHILD_OP_REMOUNT:
      if (mount(NULL, op->path, NULL, MS_REMOUNT | op->flags, NULL) < 0)
        child_fail(stage);
      break;
    case CHILD_OP_ATTACH: {
      if (trees == NULL) { /* only planned for template runs */
        errno = EINVAL;
        child_fail(stage);
      }
      int tree = trees[next_tree++];
      if (syscall(SYS_move_mount, tree, "", AT_FDCWD, op->path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        child_fail(stage);
      close(tree);
      if (mount(NULL, op->path, NULL, MS_BIND | MS_REMOUNT | op->flags, NULL) < 0)
        child_fail(stage);
      break;
    }
    }
  }
}

/* The per-run mounts, the hostname and the working directory, in a mount
 * namespace of the run's own whose root is already there. */
static void finish_root(const struct child_args *a, const int *trees) {
  run_ops(a, trees);
  if (sethostname(a->hostname, strlen(a->hostname)) < 0)
    child_fail(CHILD_STAGE_HOSTNAME);
  if (chdir(a->cwd) < 0)
    child_fail(CHILD_STAGE_CHDIR);
}

/* The fast way in: a private copy of the template namespace, whose root is
 * already built, read-only and pivoted into (rootfs.h). Host directories
 * for this run are cloned as detached trees first, while their paths still
 * resolve, and attached inside the copy. No pivot_root and no unmount of an
 * old root, which costs an RCU grace period (the CPU idles meanwhile). */
static void enter_template(const struct child_args *a) {
  int trees[CHILD_MAX_ATTACH];
  size_t n_trees = 0;
  for (size_t i = 0; i < a->n_ops; i++) {
    if (a->ops[i].kind != CHILD_OP_ATTACH)
      continue;
    if (n_trees == CHILD_MAX_ATTACH) {
      errno = E2BIG;
      child_fail(CHILD_STAGE_OPS + (int)i);
    }
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, a->ops[i].source,
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
      child_fail(CHILD_STAGE_OPS + (int)i);
    trees[n_trees++] = tree;
  }
  if (setns(FD_MNTNS, CLONE_NEWNS) < 0)
    child_fail(CHILD_STAGE_TEMPLATE);
  close(FD_MNTNS);
  /* Our own copy: what this run mounts stays in it (the template's mounts
   * are private, so nothing propagates back) and goes with its last process. */
  if (unshare(CLONE_NEWNS) < 0)
    child_fail(CHILD_STAGE_TEMPLATE);
  finish_root(a, trees);
}

/* In a mount namespace of our own: builds the root at a->root, pivots into
 * it, detaches the old root and makes the new one read-only. */
static void build_root(const struct child_args *a) {
  /* Nothing we mount may propagate back to the host. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    child_fail(CHILD_STAGE_PRIVATE_MOUNTS);
  run_ops(a, NULL);
  /* pivot_root(".", "."): the old root ends up stacked under the new one and
   * is detached at once, so no path leads back to the host's tree. */
  if (chdir(a->root) < 0)
    child_fail(CHILD_STAGE_PIVOT_ROOT);
  if (syscall(SYS_pivot_root, ".", ".") < 0)
    child_fail(CHILD_STAGE_PIVOT_ROOT);
  if (umount2(".", MNT_DETACH) < 0)
    child_fail(CHILD_STAGE_PIVOT_ROOT);
  if (chdir("/") < 0)
    child_fail(CHILD_STAGE_PIVOT_ROOT);
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
    child_fail(CHILD_STAGE_REMOUNT_ROOT);
}

void child_template_main(const struct child_args *a, int report_fd) {
  if (dup2(report_fd, FD_REPORT) < 0)
    _exit(126);
  if (unshare(CLONE_NEWNS) < 0)
    child_fail(CHILD_STAGE_TEMPLATE);
  umask(0); /* the plan's modes as they are: /dev/null 0666, /tmp 1777 */
  build_root(a);
  child_report(CHILD_REPORT_READY, 0, 0, 0);
  for (;;)
    pause();
}

static void enter_root(const struct child_args *a) {
  build_root(a);
  if (sethostname(a->hostname, strlen(a->hostname)) < 0)
    child_fail(CHILD_STAGE_HOSTNAME);
  if (chdir(a->cwd) < 0)
    child_fail(CHILD_STAGE_CHDIR);
}

static void set_rlimits(const struct child_args *a) {
  for (size_t i = 0; i < a->n_rlimits; i++)
    if (setrlimit(a->rlimits[i].resource, &a->rlimits[i].limit) < 0)
      child_fail(CHILD_STAGE_RLIMITS);
}

/* The bounding set can only shrink while we still hold CAP_SETPCAP. */
static int bounding_set_drop(int cap_last_cap) {
  for (int cap = 0; cap <= cap_last_cap; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
      return -1;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
    return -1;
  return 0;
}

static void drop_bounding_set(const struct child_args *a) {
  if (bounding_set_drop(a->cap_last_cap) < 0)
    child_fail(CHILD_STAGE_CAPS_BOUNDING);
}

/* Permitted, effective and inheritable all zero. */
static int capabilities_clear(void) {
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  return (int)syscall(SYS_capset, &hdr, data);
}

/* ... and no way back. */
static void clear_capabilities(void) {
  if (capabilities_clear() < 0)
    child_fail(CHILD_STAGE_CAPS);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_NO_NEW_PRIVS);
}

int child_confine(int cap_last_cap, const struct seccomp_policy *seccomp, int *stage) {
  *stage = CHILD_STAGE_CAPS_BOUNDING;
  if (bounding_set_drop(cap_last_cap) < 0)
    return -1;
  *stage = CHILD_STAGE_CAPS;
  if (capabilities_clear() < 0)
    return -1;
  *stage = CHILD_STAGE_NO_NEW_PRIVS;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return -1;
  *stage = CHILD_STAGE_SECCOMP;
  return seccomp_policy_load(seccomp);
}

static void drop_privileges(const struct child_args *a) {
  set_rlimits(a);
  drop_bounding_set(a);
  if (syscall(SYS_setgroups, 0, NULL) < 0)
    child_fail(CHILD_STAGE_GROUPS);
  if (syscall(SYS_setresgid, a->gid, a->gid, a->gid) < 0)
    child_fail(CHILD_STAGE_GID);
  if (syscall(SYS_setresuid, a->uid, a->uid, a->uid) < 0)
    child_fail(CHILD_STAGE_UID);
  /* setresuid away from 0 cleared permitted and effective; inheritable is
   * cleared here so that all sets read zero. */
  clear_capabilities();
  /* Changing credentials cleared the parent-death signal: set it now. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_PDEATHSIG);
  /* The program runs as the same uid: keep it out of init's memory. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_DUMPABLE);
}

void child_zygote_enter(const struct child_args *a, const int *trees) {
  umask(0);
  finish_root(a, trees);
  umask(022);
}

void child_zygote_confine(const struct child_args *a) {
  set_rlimits(a);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_PDEATHSIG);
  /* Already the slot's uid and gid (the run's user namespace maps only
   * those) and no supplementary group (dropped before the zygote's was
   * made). The capabilities it holds there go; with no_new_privs and an
   * empty bounding set nothing executed gets any back. */
  int stage;
  if (child_confine(a->cap_last_cap, a->seccomp, &stage) < 0)
    child_fail(stage);
}

int child_main(void *arg) {
  const struct child_args *a = arg;
  setup_fds(a);
  reset_signals();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_PDEATHSIG);
  if (a->netns_fd >= 0) {
    /* The slot's own network namespace, made at engine start: creating one
     * per run costs ~0.6 ms and a deferred teardown. It holds only a down lo,
     * and the slot runs one program at a time, so nothing carries over. */
    if (setns(FD_NETNS, CLONE_NEWNET) < 0)
      child_fail(CHILD_STAGE_NETNS);
    close(FD_NETNS);
  }
  umask(0);
  if (a->mntns_fd >= 0)
    enter_template(a);
  else
    enter_root(a);
  if (a->zygote) {
    /* A zygote (zygote_main.c) starts as root in the namespaces built
     * here, makes its user namespace and drops to the slot's uid itself;
     * it never runs user code. Its runs are confined by
     * child_zygote_confine. */
    set_rlimits(a);
    umask(022);
    syscall(SYS_execveat, FD_INIT, "", (char *const *)a->argv, (char *const *)a->envp,
            AT_EMPTY_PATH);
    child_fail(CHILD_STAGE_INIT_EXEC);
  }
  drop_privileges(a);
  /* Last: from here on every system call, the exec included, is filtered. */
  if (seccomp_policy_load(a->seccomp) < 0)
    child_fail(CHILD_STAGE_SECCOMP);
  umask(022);
  syscall(SYS_execveat, FD_INIT, "", (char *const *)a->argv, (char *const *)a->envp, AT_EMPTY_PATH);
  child_fail(CHILD_STAGE_INIT_EXEC);
}

const char *child_stage_name(int stage) {
  static const char *const names[] = {
      [CHILD_STAGE_FDS] = "file descriptors",
      [CHILD_STAGE_NETNS] = "network namespace",
      [CHILD_STAGE_SIGNALS] = "signal dispositions",
      [CHILD_STAGE_PRIVATE_MOUNTS] = "private mount propagation",
      [CHILD_STAGE_TEMPLATE] = "entering a copy of the template mount namespace",
      [CHILD_STAGE_PIVOT_ROOT] = "pivot_root",
      [CHILD_STAGE_REMOUNT_ROOT] = "read-only root",
      [CHILD_STAGE_HOSTNAME] = "hostname",
      [CHILD_STAGE_CHDIR] = "working directory",
      [CHILD_STAGE_RLIMITS] = "rlimits",
      [CHILD_STAGE_CAPS_BOUNDING] = "capability bounding set",
      [CHILD_STAGE_GROUPS] = "supplementary groups",
      [CHILD_STAGE_GID] = "setresgid",
      [CHILD_STAGE_UID] = "setresuid",
      [CHILD_STAGE_CAPS] = "capabilities",
      [CHILD_STAGE_NO_NEW_PRIVS] = "no_new_privs",
      [CHILD_STAGE_PDEATHSIG] = "parent-death signal",
      [CHILD_STAGE_DUMPABLE] = "dumpable",
      [CHILD_STAGE_SYNC] = "cgroup placement",
      [CHILD_STAGE_SECCOMP] = "seccomp filter",
      [CHILD_STAGE_FORK] = "fork of the program",
      [CHILD_STAGE_INIT_EXEC] = "exec of sandbox-init",
      [CHILD_STAGE_EXEC] = "exec of the program",
      [CHILD_STAGE_ZYGOTE] = "the zygote's fork entering the run's namespaces",
  };
  if (stage > 0 && stage < (int)(sizeof names / sizeof names[0]) && names[stage] != NULL)
    return names[stage];
  return "setup";
}
