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
 * PID 1 matters: Python as PID 1 would ignore signals it has no handler for
 * (os.kill(os.getpid(), SIGSEGV) would do nothing) and would not reap
 * orphans. This init reaps, and when the program ends reports its wait
 * status and exits, which makes the kernel kill what is left in the
 * namespace. Never trusts the program: it reads nothing from it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

enum { FD_REPORT = 3, FD_SYNC = 4 };

static void report(int32_t kind, int32_t stage, int32_t errnum, int32_t status) {
  struct child_report r = {.kind = kind, .stage = stage, .errnum = errnum, .status = status};
  ssize_t n;
  do {
    n = write(FD_REPORT, &r, sizeof r);
  } while (n < 0 && errno == EINTR);
}

int main(int argc, char **argv, char **envp) {
  /* exec made us dumpable again; the program runs as the same uid. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc < 1 || argv[0] == NULL) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_EXEC, EINVAL, 0);
    return 127;
  }
  if (fcntl(FD_SYNC, F_GETFD) >= 0) {
    /* Wait until the parent has put us into the slot's cgroup. */
    char go;
    ssize_t n;
    do {
      n = read(FD_SYNC, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) {
      report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_SYNC, n == 0 ? EPIPE : errno, 0);
      return 127;
    }
    close(FD_SYNC);
  }
  if (fcntl(FD_REPORT, F_SETFD, FD_CLOEXEC) < 0) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_FDS, errno, 0);
    return 127;
  }
  pid_t program = vfork();
  if (program < 0) {
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_FORK, errno, 0);
    return 127;
  }
  if (program == 0) {
    execve(argv[0], argv, envp);
    /* One write(2) to the report pipe from the vfork child: async-signal-
     * safe, touches only its own stack, and the parent waits for the exit. */
    // NOLINTNEXTLINE(clang-analyzer-unix.Vfork)
    report(CHILD_REPORT_SETUP_ERROR, CHILD_STAGE_EXEC, errno, 0);
    _exit(127);
  }
  close(0);
  close(1);
  close(2);
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      return 1;
    }
    if (pid == program) {
      report(CHILD_REPORT_EXIT, 0, 0, status);
      return 0;
    }
  }
}
