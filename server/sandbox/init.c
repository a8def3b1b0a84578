/* init.c: sandbox-init, PID 1 of every sandbox. A tiny static program the
 * engine carries inside itself (embedded, executed from a sealed memfd), so
 * that PID 1 does not hold a copy of the server's memory for the length of
 * the run and the server pays no copy-on-write faults meanwhile.
 *
 * It starts already confined (namespaces, new root, unprivileged uid, no
 * capabilities, no_new_privs, seccomp: see child.c). argv and envp are the
 * program's. Inherited: 0-2 the program's stdio, 3 the report pipe, 4 (if
 * open) the pipe on which the parent says the cgroup is ready.
 *
 * A zygote's run execs it as "sandbox-init -r" once its first process has
 * forked the program (PID 2): it then only reaps and reports, with fd 3 the
 * run's report socket.
 *
 * PID 1 matters: Python as PID 1 would ignore signals it has no handler for
 * (os.kill(os.getpid(), SIGSEGV) would do nothing) and would not reap
 * orphans. This init reaps, and when the program ends reports its wait
 * status and exits, which makes the kernel kill what is left in the
 * namespace. Never trusts the program: it reads nothing from it.
 *
 * No C library: its own _start and raw system calls. A static glibc spends
 * about 0.2 ms of every run in its start-up (CPU feature and cache detection
 * with CPUID, which traps to the hypervisor on a virtual machine, and
 * IRELATIVE relocations), more than the rest of this program's life. */
#include <errno.h>
#include <fcntl.h>
#include <linux/prctl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "child.h"

enum { FD_REPORT = 3, FD_SYNC = 4 };
#define INIT_WALL 0x40000000 /* __WALL: children of any kind */

/* Returns the result or -errno, as the kernel does. */
static long sys3(long nr, long a, long b, long c) {
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c)
                   : "rcx", "r11", "memory");
  return ret;
}

static long sys5(long nr, long a, long b, long c, long d, long e) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return ret;
}

static __attribute__((noreturn)) void sys_exit(int code) {
  for (;;)
    sys3(SYS_exit_group, code, 0, 0);
}

/* vfork returns twice on one stack: it must not be a C function with a
 * frame of its own. Pops its return address (the child would overwrite it
 * on the shared stack), makes the call, and jumps back. Returns the child's
 * pid, 0 in the child, or -errno. */
long init_vfork(void);
__asm__(".text\n"
        ".globl init_vfork\n"
        ".type init_vfork,@function\n"
        "init_vfork:\n"
        "  pop %rdx\n"
        "  mov $"
        "58"
        ", %eax\n" /* SYS_vfork on x86_64 */
        "  syscall\n"
        "  jmp *%rdx\n"
        ".size init_vfork, .-init_vfork\n");
_Static_assert(SYS_vfork == 58, "x86_64 vfork number");

static void report(int32_t kind, int32_t stage, int32_t errnum, int32_t status) {
  struct child_report r = {.kind = kind, .stage = stage, .errnum = errnum, .status = status};
  long n;
  do {
    n = sys3(SYS_write, FD_REPORT, (long)&r, sizeof r);
  } while (n == -EINTR);
}

static __attribute__((noreturn, used)) void init_main(long *sp) {
  int argc = (int)sp[0];
  char **argv = (char **)(sp + 1);
  char **envp = argv + argc + 1;
  /* exec made us dumpable again; the program runs as the same uid. */
  sys5(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc < 1 || argv[0] == NULL) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_EXEC, EINVAL, 0);
    sys_exit(127);
  }
  /* "sandbox-init -r": a zygote's run (zygote_main.c) whose first process
   * already forked the program, PID 2, and became this: only reap. */
  long program;
  if (argc == 2 && argv[1][0] == '-' && argv[1][1] == 'r' && argv[1][2] == '\0') {
    program = 2;
    goto reap;
  }
  if (sys3(SYS_fcntl, FD_SYNC, F_GETFD, 0) >= 0) {
    /* Wait until the parent has put us into the slot's cgroup. */
    char go;
    long n;
    do {
      n = sys3(SYS_read, FD_SYNC, (long)&go, 1);
    } while (n == -EINTR);
    if (n != 1) {
      report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_SYNC, n == 0 ? EPIPE : (int32_t)-n, 0);
      sys_exit(127);
    }
    sys3(SYS_close, FD_SYNC, 0, 0);
  }
  long rc = sys3(SYS_fcntl, FD_REPORT, F_SETFD, FD_CLOEXEC);
  if (rc < 0) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_FDS, (int32_t)-rc, 0);
    sys_exit(127);
  }
  program = init_vfork();
  if (program < 0) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_FORK, (int32_t)-program, 0);
    sys_exit(127);
  }
  if (program == 0) {
    /* On the parent's stack until execve: no stores to the frame's locals.
     * One write(2) to the report pipe on failure, from report's own frame
     * below ours; the parent waits for the exit. */
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_EXEC,
           (int32_t)-sys3(SYS_execve, (long)argv[0], (long)argv, (long)envp), 0);
    sys_exit(127);
  }
reap:
  sys3(SYS_close, 0, 0, 0);
  sys3(SYS_close, 1, 0, 0);
  sys3(SYS_close, 2, 0, 0);
  for (;;) {
    int status = 0;
    long pid = sys5(SYS_wait4, -1, (long)&status, INIT_WALL, 0, 0);
    if (pid == -EINTR)
      continue;
    if (pid < 0)
      sys_exit(1);
    if (pid == program) {
      report(CHILD_REPORT_EXIT, 0, 0, status);
      sys_exit(0);
    }
  }
}

/* The kernel starts us with argc at (%rsp); the ABI wants the stack 16-byte
 * aligned before a call. */
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  xor %ebp, %ebp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call init_main\n"
        "  hlt\n"
        ".size _start, .-_start\n");
