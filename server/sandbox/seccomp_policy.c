/* seccomp_policy.c: the sandbox's system call policy, in one place.
 *
 * The policy is a deny list on top of "allow": Python, its standard library,
 * C extensions and subprocess must keep working, while every system call that
 * reaches the network, another namespace, the kernel's attack surface or the
 * host's clock is refused with an errno (never a kill, so programs see a clean
 * OSError). It is compiled to classic BPF once, in the parent, because the
 * child of a threaded process may not call libseccomp (it allocates); the
 * child only hands the finished program to the kernel.
 */
#include "seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"

/* Syscalls denied with EPERM, whatever their arguments. */
static const struct {
  const char *name;
  const char *why;
} denied[] = {
    {"ptrace", "inspect or control other processes"},
    {"process_vm_readv", "read another process's memory"},
    {"process_vm_writev", "write another process's memory"},
    {"mount", "change the mount table"},
    {"umount2", "change the mount table"},
    {"pivot_root", "change the root"},
    {"move_mount", "new mount API"},
    {"open_tree", "new mount API"},
    {"fsopen", "new mount API"},
    {"fsconfig", "new mount API"},
    {"fsmount", "new mount API"},
    {"fspick", "new mount API"},
    {"mount_setattr", "new mount API"},
    {"unshare", "new namespaces"},
    {"setns", "join other namespaces"},
    {"keyctl", "kernel keyring"},
    {"add_key", "kernel keyring"},
    {"request_key", "kernel keyring"},
    {"bpf", "eBPF programs"},
    {"perf_event_open", "performance counters, a frequent kernel attack surface"},
    {"userfaultfd", "used to win kernel races"},
    {"io_uring_setup", "bypasses seccomp for the operations it submits"},
    {"io_uring_enter", "bypasses seccomp for the operations it submits"},
    {"io_uring_register", "bypasses seccomp for the operations it submits"},
    {"kexec_load", "load a new kernel"},
    {"kexec_file_load", "load a new kernel"},
    {"init_module", "kernel modules"},
    {"finit_module", "kernel modules"},
    {"delete_module", "kernel modules"},
    {"open_by_handle_at", "opens files by handle, escaping a bind mount"},
    {"name_to_handle_at", "pairs with open_by_handle_at"},
    {"acct", "process accounting"},
    {"swapon", "swap devices"},
    {"swapoff", "swap devices"},
    {"reboot", "reboot the host"},
    {"settimeofday", "set the host clock"},
    {"clock_settime", "set the host clock"},
    {"clock_adjtime", "set the host clock"},
    {"adjtimex", "set the host clock"},
    {"syslog", "read the kernel log"},
    {"lookup_dcookie", "kernel profiling"},
    {"quotactl", "filesystem quotas"},
    {"quotactl_fd", "filesystem quotas"},
    {"vhangup", "terminal control"},
    {"pidfd_getfd", "steal file descriptors of other processes"},
    {"kcmp", "compare kernel objects of other processes"},
    {"fanotify_init", "filesystem-wide monitoring"},
    {"uselib", "obsolete loader interface"},
    {"ustat", "obsolete"},
    {"sysfs", "obsolete"},
    {"nfsservctl", "obsolete"},
    {"iopl", "raw I/O port access"},
    {"ioperm", "raw I/O port access"},
    {"create_module", "obsolete module interface"},
    {"get_kernel_syms", "obsolete module interface"},
    {"query_module", "obsolete module interface"},
};

/* clone flags that create namespaces: any one of them denies the call. */
static const unsigned long namespace_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

/* User code with an allow list (docs/EGRESS.md): local sockets, and IPv4
 * and IPv6 stream sockets with protocol 0 or TCP, to reach the egress
 * proxy; no datagrams (no DNS of its own, no QUIC), raw, packet, netlink,
 * SCTP or MPTCP sockets. The type is compared without SOCK_NONBLOCK and
 * SOCK_CLOEXEC. libseccomp compares each argument once per rule, so the
 * refused families, types and protocols are listed. */
static int add_proxy_socket_rules(scmp_filter_ctx ctx, struct sandbox_error *err) {
  const scmp_datum_t inet[] = {AF_INET, AF_INET6};
  int rc = 0;
  for (int family = 0; family <= AF_MAX && rc == 0; family++)
    if (family != AF_UNIX && family != AF_INET && family != AF_INET6)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family));
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                          SCMP_A0(SCMP_CMP_GT, AF_MAX));
  for (size_t f = 0; f < 2; f++) {
    for (int type = 0; type <= 0xf && rc == 0; type++)
      if (type != SOCK_STREAM)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2,
                              SCMP_A0(SCMP_CMP_EQ, inet[f]),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)type));
    for (int proto = 1; proto < IPPROTO_TCP && rc == 0; proto++)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2,
                            SCMP_A0(SCMP_CMP_EQ, inet[f]),
                            SCMP_A2(SCMP_CMP_EQ, (scmp_datum_t)proto));
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2,
                            SCMP_A0(SCMP_CMP_EQ, inet[f]), SCMP_A2(SCMP_CMP_GT, IPPROTO_TCP));
  }
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1,
                          SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for socket (proxy profile)");
  return 0;
}

static int add_socket_rules(scmp_filter_ctx ctx, enum seccomp_profile profile,
                            struct sandbox_error *err) {
  int rc;
  if (profile == SECCOMP_PROFILE_PROXY)
    return add_proxy_socket_rules(ctx, err);
  if (profile == SECCOMP_PROFILE_INSTALLER) {
    /* The installer's profile: local, IPv4, IPv6 and route-netlink sockets
     * (glibc's getaddrinfo asks netlink for the host's addresses); raw and
     * packet sockets and every other family stay out. One comparison per
     * argument and rule, so the families are listed. */
    rc = 0;
    for (int family = 0; family <= AF_NETLINK && rc == 0; family++) {
      if (family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK)
        continue;
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family));
    }
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                            SCMP_A0(SCMP_CMP_GT, AF_NETLINK));
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2,
                            SCMP_A0(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2(SCMP_CMP_NE, 0));
    for (int i = 0; i < 2 && rc == 0; i++) /* no crafted packets */
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2,
                            SCMP_A0(SCMP_CMP_EQ, i == 0 ? AF_INET : AF_INET6),
                            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW));
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1,
                            SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    if (rc < 0)
      return sandbox_error_set(err, -rc, "seccomp rule for socket (network profile)");
    return 0;
  }
  /* Network: only local (AF_UNIX) sockets; everything else reads as
   * "Permission denied", which Python raises as PermissionError. The network
   * namespace has no interface but a down lo anyway; this keeps raw, packet
   * and netlink sockets (kernel attack surface) out too. */
  rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                        SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for socket");
  rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1,
                        SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for socketpair");
  return 0;
}

/* What a zygote's run's first process does before it loads the run's
 * filter, in a user namespace of its own (zygote_main.c): not denied in the
 * zygote's profile, and useless without that namespace's capabilities. */
static bool zygote_needs(const char *name) {
  return strcmp(name, "mount") == 0 || strcmp(name, "move_mount") == 0 ||
         strcmp(name, "unshare") == 0;
}

static int add_rules(scmp_filter_ctx ctx, enum seccomp_profile profile, struct sandbox_error *err) {
  int rc;
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
    if (profile == SECCOMP_PROFILE_ZYGOTE && zygote_needs(denied[i].name))
      continue;
    int nr = seccomp_syscall_resolve_name(denied[i].name);
    if (nr == __NR_SCMP_ERROR)
      continue; /* not a syscall on this architecture */
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc < 0)
      return sandbox_error_set(err, -rc, "seccomp rule for %s", denied[i].name);
  }

  if (add_socket_rules(ctx, profile, err) < 0)
    return -1;

  if (profile == SECCOMP_PROFILE_ZYGOTE) {
    /* A cgroup namespace only (the run's first process, once the engine
     * placed it); clone's namespace flags are checked by zygote_guard. */
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                          SCMP_A0(SCMP_CMP_NE, CLONE_NEWCGROUP));
    if (rc < 0)
      return sandbox_error_set(err, -rc, "seccomp rule for unshare");
  }
  /* clone with a namespace flag would give the program a fresh namespace
   * where it is root: denied flag by flag. */
  for (size_t i = 0;
       profile != SECCOMP_PROFILE_ZYGOTE && i < sizeof namespace_flags / sizeof namespace_flags[0];
       i++) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i]));
    if (rc < 0)
      return sandbox_error_set(err, -rc, "seccomp rule for clone");
  }
  /* clone3 passes its flags in memory, which BPF cannot read: ENOSYS makes
   * glibc fall back to clone, where the flags are checked above. */
  rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for clone3");

  /* personality: switching the execution domain (READ_IMPLIES_EXEC,
   * ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO for what it execs) is denied; the
   * query, personality(0xffffffff), is harmless and used by programs. The
   * kernel reads only the low 32 bits (callers often sign-extend -1), and
   * libseccomp takes one comparison per argument and rule: "not the query"
   * is "one of the low 32 bits is clear", a rule per bit. */
  rc = 0;
  for (unsigned bit = 0; bit < 32 && rc == 0; bit++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, 1ull << bit, 0));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for personality");

  /* ioctl(TIOCSTI) pushes input into a terminal: only the run's own
   * pseudo-terminals are there, but the rule costs nothing. */
  rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                        SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0x5412 /* TIOCSTI */));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp rule for ioctl");
  return 0;
}

static int set_filter_attributes(scmp_filter_ctx ctx, struct sandbox_error *err) {
  /* Only the native ABI: i386 (int 0x80) and x32 calls get ENOSYS, since a
   * deny list written for x86_64 numbers means nothing for them. The x86_64
   * filter built by libseccomp also refuses syscall numbers with the x32 bit. */
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp bad-arch action");
  /* NO_NEW_PRIVS is set by the child itself, before the filter is loaded. */
  rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp nnp attribute");
  /* A binary tree over the syscall numbers instead of a linear chain: the
   * kernel runs the filter once per syscall number when it is loaded (to
   * cache the always-allowed ones), so the chain cost about 0.2 ms a run. */
  rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp optimize attribute");
  return 0;
}

/* Reads the exported program from fd into policy, after checking its size. */
static int read_program(int fd, struct seccomp_policy *policy, struct sandbox_error *err) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sandbox_error_set(err, errno, "fstat seccomp program");
  if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
      st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS)
    return sandbox_error_set(err, EINVAL, "seccomp program has a bad size (%lld bytes)",
                             (long long)st.st_size);
  policy->insns = malloc((size_t)st.st_size);
  if (policy->insns == NULL)
    return sandbox_error_set(err, ENOMEM, "seccomp program");
  if (pread(fd, policy->insns, (size_t)st.st_size, 0) != st.st_size) {
    sandbox_error_set(err, errno, "read seccomp program");
    free(policy->insns);
    policy->insns = NULL;
    return -1;
  }
  policy->prog.len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
  policy->prog.filter = policy->insns;
  return 0;
}

/* libseccomp exports to a file descriptor only: through a memfd. */
static int export_program(scmp_filter_ctx ctx, struct seccomp_policy *policy,
                          struct sandbox_error *err) {
  cleanup_close int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
  if (fd < 0)
    return sandbox_error_set(err, errno, "memfd_create");
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc < 0)
    return sandbox_error_set(err, -rc, "seccomp_export_bpf");
  return read_program(fd, policy, err);
}

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "the zygote's clone guard needs this architecture's AUDIT_ARCH"
#endif
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the zygote's clone guard reads the low half of clone's flags first"
#endif

/* clone with any namespace flag is refused unless its flags are exactly
 * SECCOMP_ZYGOTE_RUN_CLONE's. libseccomp takes one comparison per argument
 * and rule, and "some namespace flag and not that word" needs two, so this
 * is written by hand and put in front of libseccomp's program: every path
 * but the refusal falls through to it. The kernel reads the low 32 bits of
 * clone's flags only. */
static const struct sock_filter zygote_guard[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 6),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K,
             CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                 CLONE_NEWNET | CLONE_NEWCGROUP,
             0, 2),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)SECCOMP_ZYGOTE_RUN_CLONE, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
};

static int prepend_zygote_guard(struct seccomp_policy *policy, struct sandbox_error *err) {
  size_t n_guard = sizeof zygote_guard / sizeof zygote_guard[0];
  size_t n = n_guard + policy->prog.len;
  if (n > BPF_MAXINSNS)
    return sandbox_error_set(err, E2BIG, "seccomp program too long (%zu instructions)", n);
  struct sock_filter *insns = malloc(n * sizeof *insns);
  if (insns == NULL)
    return sandbox_error_set(err, ENOMEM, "seccomp program");
  memcpy(insns, zygote_guard, sizeof zygote_guard);
  memcpy(insns + n_guard, policy->insns, policy->prog.len * sizeof *insns);
  free(policy->insns);
  policy->insns = insns;
  policy->prog.filter = insns;
  policy->prog.len = (unsigned short)n;
  return 0;
}

int seccomp_policy_compile(struct seccomp_policy *policy, enum seccomp_profile profile,
                           struct sandbox_error *err) {
  memset(policy, 0, sizeof *policy);
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == NULL)
    return sandbox_error_set(err, ENOMEM, "seccomp_init");
  int ret = -1;
  if (set_filter_attributes(ctx, err) == 0 && add_rules(ctx, profile, err) == 0 &&
      export_program(ctx, policy, err) == 0)
    ret = 0;
  seccomp_release(ctx);
  if (ret == 0 && profile == SECCOMP_PROFILE_ZYGOTE && prepend_zygote_guard(policy, err) < 0) {
    seccomp_policy_free(policy);
    ret = -1;
  }
  return ret;
}

void seccomp_policy_free(struct seccomp_policy *policy) {
  free(policy->insns);
  memset(policy, 0, sizeof *policy);
}

int seccomp_policy_load(const struct seccomp_policy *policy) {
  /* Async-signal-safe: one system call on memory prepared in the parent. */
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &policy->prog);
}
