/* seccomp_policy.h: compile the sandbox's syscall policy once, load it in the
 * child with one async-signal-safe system call. */
#ifndef SANDBOX_SECCOMP_POLICY_H
#define SANDBOX_SECCOMP_POLICY_H

#include <linux/filter.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>

#include "sandbox_error.h"

struct seccomp_policy {
  struct sock_fprog prog;
  struct sock_filter *insns;
};

enum seccomp_profile {
  /* Every run's program (and its PID 1): the deny list below. */
  SECCOMP_PROFILE_RUN,
  /* The package installer when an index is configured: also AF_INET,
   * AF_INET6 and NETLINK_ROUTE sockets; never for user code. */
  SECCOMP_PROFILE_INSTALLER,
  /* User code with an allow list (docs/EGRESS.md): also AF_INET and
   * AF_INET6 stream sockets (TCP), nothing else; its namespace holds only
   * the egress proxy. */
  SECCOMP_PROFILE_PROXY,
  /* A zygote (zygote_main.c), which imports package code: the run's
   * profile but for what a run's first process needs before it loads the
   * run's own filter on top: clone with exactly SECCOMP_ZYGOTE_RUN_CLONE's
   * flags (a user namespace of the run's own with its PID, mount, IPC and
   * UTS namespaces; any other namespace flag is refused), unshare of a
   * cgroup namespace only, mount and move_mount. The zygote holds no
   * capability: those work only inside such a nested user namespace. */
  SECCOMP_PROFILE_ZYGOTE,
};

/* The flags of the clone that makes a zygote run's first process; the only
 * namespace-making clone the zygote profile lets through. */
#define SECCOMP_ZYGOTE_RUN_CLONE                                                                   \
  (CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |            \
   CLONE_NEWUTS | SIGCHLD)

int seccomp_policy_compile(struct seccomp_policy *policy, enum seccomp_profile profile,
                           struct sandbox_error *err);
void seccomp_policy_free(struct seccomp_policy *policy);
/* Child side: returns -1 with errno on failure. NO_NEW_PRIVS must be set. */
int seccomp_policy_load(const struct seccomp_policy *policy);

#endif
