/* mnt_template.c: the template mount namespace.
 *
 * Building a root per run costs about twenty mount operations, a copy of the
 * host's mount table, a pivot_root and the unmount of the old root, whose
 * RCU grace period leaves the CPU idle while the worker waits. The parts
 * every run shares (the read-only tmpfs root, the binds of /usr and /etc,
 * /dev with its nodes, the mount points) are the same each time, so they are
 * built once, here, into a namespace of their own. A run's child joins it,
 * unshares a private copy (about ten mounts) and adds only what is fresh:
 * /proc, /tmp, /dev/shm, the workspace and the extra mounts (child.c).
 *
 * Safe to share: every mount in it is read-only (the root's superblock
 * too), its propagation is private so a run's mounts stay in the run's
 * copy, and the fd that keeps it alive is close-on-exec and closed in the
 * child before anything runs. */
#include "mnt_template.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

int mnt_template_create(const struct rootfs *fs, struct sandbox_error *err) {
  struct rootfs_plan plan;
  if (rootfs_template_plan(fs, &plan, err) < 0)
    return -1;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) {
    rootfs_plan_free(&plan);
    return sandbox_error_set(err, errno, "pipe");
  }
  struct child_args a = {.ops = plan.ops, .n_ops = plan.n_ops, .root = fs->root, .mntns_fd = -1};
  /* The helper makes system calls only (the server may have threads). */
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    rootfs_plan_free(&plan);
    return sandbox_error_set(err, e, "fork the template builder");
  }
  if (pid == 0) {
    close(pipefd[0]);
    child_template_main(&a, pipefd[1]);
  }
  close(pipefd[1]);
  struct child_report r;
  memset(&r, 0, sizeof r);
  ssize_t n;
  do {
    n = read(pipefd[0], &r, sizeof r);
  } while (n < 0 && errno == EINTR);
  close(pipefd[0]);
  int fd = -1;
  if (n == (ssize_t)sizeof r && r.kind == CHILD_REPORT_READY) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      sandbox_error_set(err, errno, "open %s", path);
  } else if (n == (ssize_t)sizeof r && r.kind == CHILD_REPORT_SETUP_ERROR) {
    char what[512];
    if (r.stage >= CHILD_STAGE_OPS)
      rootfs_describe_op(&plan, (size_t)(r.stage - CHILD_STAGE_OPS), what, sizeof what);
    else
      snprintf(what, sizeof what, "%s", child_stage_name(r.stage));
    sandbox_error_set(err, r.errnum, "build the template root: %s", what);
  } else {
    sandbox_error_set(err, 0, "the template builder ended without a report");
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  rootfs_plan_free(&plan);
  return fd;
}
