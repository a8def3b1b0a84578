/* seccomp_policy.h: compile the sandbox's syscall policy once, load it in the
 * child with one async-signal-safe system call. */
#ifndef SANDBOX_SECCOMP_POLICY_H
#define SANDBOX_SECCOMP_POLICY_H

#include <linux/filter.h>
#include <stdbool.h>

#include "sandbox_error.h"

struct seccomp_policy {
  struct sock_fprog prog;
  struct sock_filter *insns;
};

/* network: also allow AF_INET, AF_INET6 and NETLINK_ROUTE sockets (for the
 * package installer when an index is configured); never for user code. */
int seccomp_policy_compile(struct seccomp_policy *policy, bool network, struct sandbox_error *err);
void seccomp_policy_free(struct seccomp_policy *policy);
/* Child side: returns -1 with errno on failure. NO_NEW_PRIVS must be set. */
int seccomp_policy_load(const struct seccomp_policy *policy);

#endif
