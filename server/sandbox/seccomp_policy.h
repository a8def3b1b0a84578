/* seccomp_policy.h: compile the sandbox's syscall policy once, load it in the
 * child with one async-signal-safe system call. */
#ifndef SANDBOX_SECCOMP_POLICY_H
#define SANDBOX_SECCOMP_POLICY_H

#include <linux/filter.h>

#include "sandbox_error.h"

struct seccomp_policy {
  struct sock_fprog prog;
  struct sock_filter *insns;
};

int seccomp_policy_compile(struct seccomp_policy *policy, struct sandbox_error *err);
void seccomp_policy_free(struct seccomp_policy *policy);
/* Child side: returns -1 with errno on failure. NO_NEW_PRIVS must be set. */
int seccomp_policy_load(const struct seccomp_policy *policy);

#endif
