/* zygote_main.c: sandbox-zygote, a Python interpreter that has imported
 * the configured modules and forks a run for each request (docs/ZYGOTE.md).
 *
 * The engine starts it like a run (zygote.c, child.c): in the slot's
 * network namespace and a PID, mount, IPC, UTS and cgroup namespace of its
 * own, in a copy of the template root, exec'd from a sealed memfd as root
 * with nothing but: fd 0 the control socket, 1 and 2 /dev/null, 3 the
 * report pipe, 4 the sync pipe. It then, before anything else:
 *   - waits until the engine has placed it in the zygotes' cgroup (fd 4);
 *   - drops the supplementary groups (host root's would follow it into the
 *     user namespace, unmapped but still honoured by permission checks);
 *   - makes a user namespace that maps only the slot's uid and gid to
 *     themselves (the engine writes the maps) and becomes that uid and gid;
 *   - confines itself as a run: no capability, no_new_privs, its own
 *     filter (SECCOMP_PROFILE_ZYGOTE). What it imports next is package
 *     code (the preload, an environment's .pth files and site hooks) and
 *     is treated as user code (docs/SECURITY.md, "Package code is user
 *     code");
 *   - imports the modules, freezes the garbage collector's objects (so
 *     that forks share them untouched), ends whatever the imports left
 *     (processes; refuses threads, shared mappings, sockets) and says READY.
 * Per run (ZYGOTE_MSG_RUN) it clones with a new user namespace and PID,
 * mount, IPC and UTS namespaces owned by it; that process (PID 1 of the
 * run, C code only) writes its maps, says HELLO with its credentials on
 * the report socket, waits until the engine has put it in the slot's
 * cgroup, enters a cgroup namespace, forks the program's process, drops
 * every capability, loads the runs' filter and becomes sandbox-init -r,
 * which reaps until the program ends. The program's process makes the
 * run's mounts, drops every capability, loads the runs' filter, closes
 * all but its stdio, reseeds the random generators and runs the script. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "sandbox.h"
#include "seccomp_policy.h"
#include "zygote_wire.h"

enum { FD_CTL_START = 0, FD_REPORT = 3, FD_SYNC = 4 };

/* The Python half: preload and run. Kept out of sys.modules: user code
 * cannot reach it (it runs in the program's own process anyway). */
static const char bootstrap[] =
    "import os, sys\n"
    "cell = None\n"
    "def preload(names):\n"
    "    import importlib, traceback, gc\n"
    "    global cell\n"
    /* How every run's script runs: the engine's sandboxd_cell (pylib.c),
     * as in a cold run, with the rich results. First: its import hooks
     * (matplotlib's font list) serve the preload too. */
    "    sys.path.insert(0, '" SANDBOX_LIB_DIR "')\n"
    "    try:\n"
    "        import sandboxd_cell as cell\n"
    "    except BaseException:\n"
    "        return 'import sandboxd_cell failed:\\n' + traceback.format_exc()\n"
    "    finally:\n"
    "        del sys.path[0]\n"
    "    for name in names:\n"
    "        try:\n"
    "            importlib.import_module(name)\n"
    "        except BaseException:\n"
    /* The exception first: the engine's message is cut at 511 bytes. */
    "            e = traceback.format_exception_only(*sys.exc_info()[:2])[-1].strip()\n"
    "            return 'import %s failed: %s\\n%s' % (name, e, traceback.format_exc())\n"
    "    cell.warm()\n"
    "    gc.collect()\n"
    "    gc.freeze()\n"
    "    return ''\n"
    /* argv: [SCRIPT, ARGS...], or ['-c', loader, 'kernel'] for
     * sandboxd_cell's kernel over /workspace (an interpreter session). */
    "def run(argv, env):\n"
    "    kernel = argv[0] == '-c'\n"
    "    script = '/workspace/main.py' if kernel else argv[0]\n"
    "    os.environ.clear()\n"
    "    for kv in env:\n"
    "        k, _, v = kv.partition('=')\n"
    "        os.environ[k] = v\n"
    "    sys.path.insert(0, os.path.dirname(script))\n"
    "    extra = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]\n"
    "    sys.path[1:1] = extra\n"
    "    if 'random' in sys.modules:\n"
    "        sys.modules['random'].seed()\n"
    "    if 'numpy.random' in sys.modules:\n"
    "        sys.modules['numpy.random'].seed()\n"
    /* Argv, __main__, the exit status, tracebacks and SystemExit as
     * python3 SCRIPT has them; -2: an uncaught KeyboardInterrupt. */
    "    if kernel:\n"
    "        return cell.kernel()\n"
    "    return cell.script(list(argv))\n";

#define FIRST_STACK_SIZE (256 * 1024)

struct zygote {
  char *first_stack; /* where each run's first process runs (CLONE_VM) */
  int ctl;
  int init_fd;                   /* sandbox-init's memfd: each run's first process becomes it */
  struct seccomp_policy seccomp; /* every run's (and its PID 1's) */
  struct seccomp_policy zygote_seccomp; /* ours, loaded before Python starts */
  int cap_last_cap;                     /* the engine's reading, for dropping the bounding set */
  /* A run's user namespace maps the slot's ids to themselves, written by
   * its first process (made here: it may only make system calls). */
  char uid_map[32], gid_map[32];
  PyObject *ns; /* the bootstrap's globals */
};

/* A failed start: the message on the control socket, then exit. */
__attribute__((noreturn, format(printf, 2, 3))) static void fail_start(int ctl, const char *fmt,
                                                                       ...) {
  char msg[ZYGOTE_MAX_ERROR];
  msg[0] = ZYGOTE_MSG_FAILED;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg + 1, sizeof msg - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    n = 0;
  if ((size_t)n > sizeof msg - 2)
    n = (int)sizeof msg - 2;
  ssize_t w = send(ctl, msg, (size_t)n + 1, MSG_NOSIGNAL);
  (void)w;
  _exit(1);
}

/* One write of text to path, by system calls only (a run's first process). */
static int write_map(const char *path, const char *text) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t len = strlen(text);
  long n = syscall(SYS_write, fd, text, len);
  int e = errno;
  syscall(SYS_close, fd);
  errno = e;
  return n == (long)len ? 0 : -1;
}

static ssize_t recv_msg(int sock, char *kind, int *fds, size_t max_fds, size_t *n_fds) {
  char cbuf[CMSG_SPACE(sizeof(int) * ZYGOTE_MAX_FDS)];
  struct iovec iov = {.iov_base = kind, .iov_len = 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  *n_fds = 0;
  if (n <= 0)
    return n;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int *in = (int *)(void *)CMSG_DATA(c);
    for (size_t i = 0; i < k; i++) {
      if (*n_fds < max_fds)
        fds[(*n_fds)++] = in[i];
      else
        close(in[i]);
    }
  }
  if (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

/* From root in the engine's namespaces to the slot's uid in a user
 * namespace of its own, configured by the engine. */
static void become_unprivileged(struct zygote *z, char **preload, size_t *preload_len) {
  char go;
  ssize_t n;
  do {
    n = read(FD_SYNC, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1)
    _exit(126);
  close(FD_SYNC);
  if (syscall(SYS_setgroups, 0, NULL) < 0)
    fail_start(z->ctl, "setgroups: %s", strerror(errno));
  if (unshare(CLONE_NEWUSER) < 0)
    fail_start(z->ctl, "user namespace: %s", strerror(errno));
  char msg = ZYGOTE_MSG_USERNS;
  if (send(z->ctl, &msg, 1, MSG_NOSIGNAL) != 1)
    _exit(1);
  int cfg_fds[2] = {-1, -1};
  size_t n_fds = 0;
  if (recv_msg(z->ctl, &msg, cfg_fds, 2, &n_fds) != 1 || msg != ZYGOTE_MSG_MAPPED || n_fds != 2)
    fail_start(z->ctl, "no configuration from the engine");
  int fd = cfg_fds[0];
  z->init_fd = cfg_fds[1];
  struct stat st;
  struct zygote_config cfg;
  if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof cfg || st.st_size > (16 << 20))
    fail_start(z->ctl, "bad configuration");
  char *buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
    fail_start(z->ctl, "read configuration: %s", strerror(errno));
  close(fd);
  memcpy(&cfg, buf, sizeof cfg);
  size_t insns = (size_t)cfg.n_seccomp * sizeof(struct sock_filter);
  size_t zinsns = (size_t)cfg.n_zygote_seccomp * sizeof(struct sock_filter);
  if (cfg.magic != ZYGOTE_MAGIC || cfg.n_seccomp == 0 || cfg.n_seccomp > 65535 ||
      cfg.n_zygote_seccomp == 0 || cfg.n_zygote_seccomp > 65535 ||
      sizeof cfg + insns + zinsns + cfg.preload_len != (size_t)st.st_size)
    fail_start(z->ctl, "bad configuration");
  z->seccomp.insns = malloc(insns);
  z->zygote_seccomp.insns = malloc(zinsns);
  if (z->seccomp.insns == NULL || z->zygote_seccomp.insns == NULL)
    fail_start(z->ctl, "out of memory");
  memcpy(z->seccomp.insns, buf + sizeof cfg, insns);
  z->seccomp.prog.len = (unsigned short)cfg.n_seccomp;
  z->seccomp.prog.filter = z->seccomp.insns;
  memcpy(z->zygote_seccomp.insns, buf + sizeof cfg + insns, zinsns);
  z->zygote_seccomp.prog.len = (unsigned short)cfg.n_zygote_seccomp;
  z->zygote_seccomp.prog.filter = z->zygote_seccomp.insns;
  z->cap_last_cap = (int)cfg.cap_last_cap;
  snprintf(z->uid_map, sizeof z->uid_map, "%u %u 1\n", cfg.uid, cfg.uid);
  snprintf(z->gid_map, sizeof z->gid_map, "%u %u 1\n", cfg.gid, cfg.gid);
  *preload = buf + sizeof cfg + insns + zinsns;
  (*preload)[cfg.preload_len] = '\0';
  *preload_len = cfg.preload_len;
  /* The maps hold the slot's ids only. Keep the namespace's capabilities
   * across the change of uid, for the bounding set's drop below. */
  if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) < 0)
    fail_start(z->ctl, "securebits: %s", strerror(errno));
  if (syscall(SYS_setresgid, cfg.gid, cfg.gid, cfg.gid) < 0 ||
      syscall(SYS_setresuid, cfg.uid, cfg.uid, cfg.uid) < 0)
    fail_start(z->ctl, "become uid %u: %s", cfg.uid, strerror(errno));
  /* Changing credentials cleared these. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    fail_start(z->ctl, "prctl: %s", strerror(errno));
  /* From here on we are confined as a run is, before a byte of Python or
   * package code (site hooks, .pth files, the preload's import-time code)
   * runs: no capability anywhere, no_new_privs, our own filter (the runs'
   * deny list, plus what a run's first process needs in a user namespace
   * of its own: SECCOMP_PROFILE_ZYGOTE). */
  int stage;
  if (child_confine(z->cap_last_cap, &z->zygote_seccomp, &stage) < 0)
    fail_start(z->ctl, "confine the zygote (%s): %s", child_stage_name(stage), strerror(errno));
}

/* What the preload may have left that a run could share, or that could
 * reach our control socket: every other process in our PID namespace (we
 * are its init: they are killed and reaped), other threads, shared memory
 * mappings (a fork shares them with the zygote and every other run),
 * sockets. Nothing of Python runs in this process after this. */
static void check_preload_left_nothing(struct zygote *z) {
  signal(SIGCHLD, SIG_IGN); /* whatever the preload set: runs are reaped by the kernel */
  while (kill(-1, SIGKILL) == 0) {
    /* With SIGCHLD ignored, wait returns once every child is gone. */
    while (waitpid(-1, NULL, __WALL) > 0 || errno == EINTR)
      ;
  }
  if (errno != ESRCH)
    fail_start(z->ctl, "end the preload's processes: %s", strerror(errno));
  int threads = 0;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL)
    fail_start(z->ctl, "read /proc/self/task: %s", strerror(errno));
  for (struct dirent *de; (de = readdir(d)) != NULL;)
    threads += de->d_name[0] != '.';
  closedir(d);
  if (threads != 1)
    fail_start(z->ctl,
               "the preload left %d threads running: a zygote forks from one thread only "
               "(a module that starts threads at import cannot be preloaded)",
               threads);
  /* A shared mapping of a file under the read-only /usr that is not
   * writable now cannot become so (no descriptor of it can be open for
   * writing): glibc maps its gconv cache that way. */
  FILE *maps = fopen("/proc/self/maps", "re");
  if (maps == NULL)
    fail_start(z->ctl, "read /proc/self/maps: %s", strerror(errno));
  char *line = NULL; /* whole lines: a path's " (deleted)" is at the end */
  size_t cap = 0;
  while (getline(&line, &cap, maps) > 0) {
    char perms[8] = "";
    int path_at = 0;
    line[strcspn(line, "\n")] = '\0';
    if (sscanf(line, "%*s %7s %*s %*s %*s %n", perms, &path_at) < 1 || perms[3] != 's')
      continue;
    const char *path = path_at > 0 ? line + path_at : "";
    bool usr_file_read_only =
        perms[1] != 'w' && strncmp(path, "/usr/", 5) == 0 && strstr(path, " (deleted)") == NULL;
    if (!usr_file_read_only) {
      fail_start(z->ctl,
                 "the preload left a shared memory mapping (%.200s): every run would share it",
                 line);
    }
  }
  /* getline's -1 is also a read error or no memory: only the end of the
   * file means every mapping was seen (fail closed). */
  int read_errno = errno;
  bool read_all = feof(maps) != 0;
  free(line);
  fclose(maps);
  if (!read_all)
    fail_start(z->ctl, "read /proc/self/maps: %s", strerror(read_errno));
  d = opendir("/proc/self/fd");
  if (d == NULL)
    fail_start(z->ctl, "read /proc/self/fd: %s", strerror(errno));
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    char link[64];
    ssize_t n = readlinkat(dirfd(d), de->d_name, link, sizeof link - 1);
    if (n <= 0 || atoi(de->d_name) == z->ctl)
      continue;
    link[n] = '\0';
    if (strncmp(link, "socket:", 7) == 0)
      fail_start(z->ctl, "the preload left a socket open (fd %s): a zygote holds none", de->d_name);
  }
  closedir(d);
}

static void start_python(struct zygote *z, char *preload) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.buffered_stdio = 0; /* as "python3 -u" */
  config.parse_argv = 0;
  config.safe_path = 1; /* each run puts its script's directory first */
  config.user_site_directory = 0;
  PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, "/usr/bin/python3");
  if (!PyStatus_Exception(st))
    st = PyConfig_SetBytesString(&config, &config.executable, "/usr/bin/python3");
  if (!PyStatus_Exception(st))
    st = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(st))
    fail_start(z->ctl, "Python: %s", st.err_msg ? st.err_msg : "initialization failed");
  z->ns = PyDict_New();
  if (z->ns == NULL || PyDict_SetItemString(z->ns, "__builtins__", PyEval_GetBuiltins()) < 0)
    fail_start(z->ctl, "Python: no namespace");
  PyObject *r = PyRun_String(bootstrap, Py_file_input, z->ns, z->ns);
  if (r == NULL)
    fail_start(z->ctl, "Python: the bootstrap failed");
  Py_DECREF(r);
  PyObject *names = PyList_New(0);
  for (char *save = NULL, *tok = strtok_r(preload, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    PyObject *s = PyUnicode_FromString(tok);
    if (s == NULL || PyList_Append(names, s) < 0)
      fail_start(z->ctl, "Python: preload list");
    Py_DECREF(s);
  }
  PyObject *fn = PyDict_GetItemString(z->ns, "preload");
  PyObject *res = fn != NULL ? PyObject_CallOneArg(fn, names) : NULL;
  Py_DECREF(names);
  if (res == NULL) {
    PyErr_Clear();
    fail_start(z->ctl, "Python: preload raised");
  }
  const char *msg = PyUnicode_AsUTF8(res);
  if (msg == NULL || msg[0] != '\0')
    fail_start(z->ctl, "%s", msg != NULL ? msg : "preload failed");
  Py_DECREF(res);
}

/* The program's process: confined, then the script. */
__attribute__((noreturn)) static void run_program(struct zygote *z, const struct child_args *a,
                                                  const struct zygote_run *run) {
  child_zygote_confine(a);
  /* Only its stdio: not the report socket, not the run's memfd. */
  if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
    child_fail(CHILD_STAGE_FDS);
  /* Python again, after the confinement: its at-fork handlers are code
   * of the preload's packages (os.register_at_fork). */
  PyOS_AfterFork_Child();
  /* argv is "/usr/bin/python3 [-u] SCRIPT [ARGS...]" or "... -c LOADER
   * kernel" (checked by the engine, zygote_check_spec). */
  size_t i = 1;
  while (run->argv[i] != NULL && strcmp(run->argv[i], "-u") == 0)
    i++;
  PyObject *argv = PyList_New(0), *env = PyList_New(0);
  for (; run->argv[i] != NULL; i++) {
    PyObject *s = PyUnicode_DecodeFSDefault(run->argv[i]);
    PyList_Append(argv, s);
    Py_XDECREF(s);
  }
  for (size_t j = 0; run->envp[j] != NULL; j++) {
    PyObject *s = PyUnicode_DecodeFSDefault(run->envp[j]);
    PyList_Append(env, s);
    Py_XDECREF(s);
  }
  PyObject *fn = PyDict_GetItemString(z->ns, "run");
  PyObject *res = fn != NULL ? PyObject_CallFunctionObjArgs(fn, argv, env, NULL) : NULL;
  long code = 1;
  if (res == NULL)
    PyErr_Print();
  else
    code = PyLong_AsLong(res);
  if (code == -2) { /* an uncaught KeyboardInterrupt: die of SIGINT, as python does */
    signal(SIGINT, SIG_DFL);
    kill(getpid(), SIGINT);
  }
  _exit((int)(code & 0xff));
}

/* The program's process, a copy of the zygote of its own (forked by the
 * run's first process): the run's setup that needs the namespaces'
 * capabilities, then the confinement, then the script. Its setup errors
 * go to the report socket (fd 3), like the cold path's child's. */
__attribute__((noreturn)) static void program_main(struct zygote *z, size_t n_fds) {
  /* The run, not the zygote that lives in the same slot (cgroup.h,
   * host_zygote), is the OOM killer's first pick: raising needs no
   * privilege (lowering the zygote's would need CAP_SYS_RESOURCE), only
   * our own /proc files, which a non-dumpable process does not own. */
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (adj < 0 || write(adj, "1000", 4) != 4)
    child_fail(CHILD_STAGE_ZYGOTE);
  close(adj);
  struct zygote_run run;
  if (zygote_wire_unpack(4, &run) < 0)
    child_fail(CHILD_STAGE_ZYGOTE);
  if (run.n_trees != n_fds - ZYGOTE_RUN_FDS) {
    errno = EBADMSG;
    child_fail(CHILD_STAGE_ZYGOTE);
  }
  int trees[CHILD_MAX_ATTACH];
  for (size_t i = 0; i < run.n_trees; i++)
    trees[i] = (int)(ZYGOTE_RUN_FDS + i);
  struct child_args a = {.ops = run.ops,
                         .n_ops = run.n_ops,
                         .cwd = run.cwd,
                         .hostname = run.hostname,
                         .argv = run.argv,
                         .envp = run.envp,
                         .cap_last_cap = z->cap_last_cap,
                         .report_fd = FD_REPORT,
                         .seccomp = &z->seccomp};
  for (size_t i = 0; i < run.n_rlimits; i++) {
    a.rlimits[i].resource = run.rlimits[i].resource;
    a.rlimits[i].limit = run.rlimits[i].limit;
  }
  a.n_rlimits = run.n_rlimits;
  child_zygote_enter(&a, trees);
  run_program(z, &a, &run);
}

/* The run's first process: PID 1 of its namespaces. fds: the memfd,
 * stdin, stdout, stderr, the report socket, then the trees.
 *
 * It shares the zygote's memory (CLONE_VM | CLONE_VFORK, serve) until it
 * execs, and may be killed at any instant (a run's limits kill its whole
 * tree): so it makes system calls only, on its own stack. No heap, no
 * lock, no Python, no glibc fork (its handlers take locks in that memory):
 * a kill in the middle leaves the zygote exactly as it was. */
__attribute__((noreturn)) static void run_first(struct zygote *z, int *fds, size_t n_fds) {
  /* Into place: 0-2 stdio, 3 report, 4 memfd, 5... trees. */
  int order[ZYGOTE_MAX_FDS + 1];
  order[0] = fds[ZYGOTE_FD_STDIN];
  order[1] = fds[ZYGOTE_FD_STDOUT];
  order[2] = fds[ZYGOTE_FD_STDERR];
  order[3] = fds[ZYGOTE_FD_REPORT];
  order[4] = fds[ZYGOTE_FD_MEMFD];
  for (size_t i = ZYGOTE_RUN_FDS; i < n_fds; i++)
    order[i] = fds[i];
  order[n_fds] = z->init_fd; /* last: what this process becomes */
  int tmp[ZYGOTE_MAX_FDS + 1];
  for (size_t i = 0; i <= n_fds; i++)
    if ((tmp[i] = (int)syscall(SYS_fcntl, order[i], F_DUPFD_CLOEXEC, 64)) < 0)
      _exit(126);
  for (size_t i = 0; i <= n_fds; i++)
    if (syscall(SYS_dup3, tmp[i], (int)i, i < 3 ? 0 : O_CLOEXEC) != (long)i)
      _exit(126);
  int init_fd = (int)n_fds;
  if (syscall(SYS_close_range, (unsigned)n_fds + 1, ~0U, 0U) < 0)
    child_fail(CHILD_STAGE_FDS);
  struct sigaction dfl = {.sa_handler = SIG_DFL}; /* a table of its own (no CLONE_SIGHAND) */
  sigaction(SIGCHLD, &dfl, NULL);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_PDEATHSIG);
  /* Our user namespace's maps: the slot's ids to themselves, as an
   * unprivileged process may write for itself. Our /proc files belong to
   * root while the memory (the zygote's) is not dumpable: dumpable for
   * the instant of the writes (the zygote sets it back after the clone). */
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 || write_map("/proc/self/uid_map", z->uid_map) < 0 ||
      write_map("/proc/self/setgroups", "deny") < 0 ||
      write_map("/proc/self/gid_map", z->gid_map) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    child_fail(CHILD_STAGE_ZYGOTE);
  /* HELLO: the engine reads our pid from the credentials the kernel adds,
   * places us in the slot's cgroup and says go. */
  child_report(CHILD_REPORT_HELLO, 0, 0, 0);
  char go;
  ssize_t n;
  do {
    n = read(FD_REPORT, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) {
    errno = n == 0 ? EPIPE : errno;
    child_fail(CHILD_STAGE_SYNC);
  }
  /* Placed in the slot's cgroup: a cgroup namespace rooted there, for
   * this process and the program. */
  if (unshare(CLONE_NEWCGROUP) < 0)
    child_fail(CHILD_STAGE_ZYGOTE);
  /* The program: a copy of the zygote (the only one a run makes), by the
   * raw system call. It does the rest of the setup itself. */
  long program = syscall(SYS_clone, (long)SIGCHLD, 0L, NULL, NULL, 0L);
  if (program == 0)
    program_main(z, n_fds);
  if (program < 0)
    child_fail(CHILD_STAGE_FORK);
  /* Become sandbox-init, which only reaps and reports (its own small
   * image), confined as a cold run's PID 1 is: no capability, an empty
   * bounding set, no_new_privs and the runs' filter. */
  int stage = 0;
  if (child_confine(z->cap_last_cap, &z->seccomp, &stage) < 0) {
    int e = errno;
    syscall(SYS_kill, program, SIGKILL);
    errno = e;
    child_fail(stage);
  }
  if (syscall(SYS_fcntl, FD_REPORT, F_SETFD, 0) == 0) {
    static const char *const init_argv[] = {"sandbox-init", "-r", NULL};
    static const char *const init_env[] = {NULL};
    syscall(SYS_execveat, init_fd, "", init_argv, init_env, AT_EMPTY_PATH);
  }
  /* Sharing the zygote's memory, this process cannot stay as the run's
   * init: the run fails. */
  int e = errno;
  syscall(SYS_kill, program, SIGKILL);
  errno = e;
  child_fail(CHILD_STAGE_INIT_EXEC);
}

struct first_args {
  struct zygote *z;
  int *fds;
  size_t n_fds;
};

static int first_main(void *arg) {
  struct first_args *fa = arg;
  run_first(fa->z, fa->fds, fa->n_fds);
}

static void serve(struct zygote *z) {
  for (;;) {
    char kind = 0;
    int fds[ZYGOTE_MAX_FDS];
    size_t n_fds = 0;
    ssize_t n = recv_msg(z->ctl, &kind, fds, ZYGOTE_MAX_FDS, &n_fds);
    if (n == 0)
      _exit(0); /* the engine let go of us */
    if (n < 0 && errno != EMSGSIZE)
      _exit(1);
    if (n < 0 || kind != ZYGOTE_MSG_RUN || n_fds < ZYGOTE_RUN_FDS) {
      for (size_t i = 0; i < n_fds; i++)
        close(fds[i]);
      continue;
    }
    /* The run's first process shares our memory until it becomes
     * sandbox-init (vfork-style: we wait meanwhile), so that only the
     * program's process pays a copy of the zygote's address space. */
    struct first_args fa = {.z = z, .fds = fds, .n_fds = n_fds};
    pid_t pid = clone(first_main, z->first_stack + FIRST_STACK_SIZE, SECCOMP_ZYGOTE_RUN_CLONE, &fa);
    /* Its map writes made our memory dumpable for an instant: not past
     * its death in between. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (pid < 0) {
      struct child_report r = {
          .kind = CHILD_REPORT_SETUP_ERROR, .stage = CHILD_STAGE_ZYGOTE, .errnum = errno};
      ssize_t w = write(fds[ZYGOTE_FD_REPORT], &r, sizeof r);
      (void)w;
    }
    for (size_t i = 0; i < n_fds; i++)
      close(fds[i]);
  }
}

int main(void) {
  struct zygote z = {.ctl = -1, .init_fd = -1};
  z.first_stack = mmap(NULL, FIRST_STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (z.first_stack == MAP_FAILED)
    _exit(126);
  /* The control socket off fd 0: Python's sys.stdin must not be it. */
  z.ctl = fcntl(FD_CTL_START, F_DUPFD_CLOEXEC, 5);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (z.ctl < 0 || null < 0 || dup2(null, 0) < 0)
    _exit(126);
  close(null);
  close(FD_REPORT);
  char *preload = NULL;
  size_t preload_len = 0;
  become_unprivileged(&z, &preload, &preload_len);
  /* Finished runs are reaped by the kernel: the engine watches them by
   * pidfd, and their first process resets this. */
  signal(SIGCHLD, SIG_IGN);
  /* One thread for the preload (checked after it): a BLAS library would
   * start a pool at import, and a fork takes only the calling thread. */
  static const char *const one_thread[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                           "MKL_NUM_THREADS"};
  for (size_t i = 0; i < sizeof one_thread / sizeof one_thread[0]; i++)
    setenv(one_thread[i], "1", 1);
  start_python(&z, preload);
  check_preload_left_nothing(&z);
  char ready = ZYGOTE_MSG_READY;
  if (send(z.ctl, &ready, 1, MSG_NOSIGNAL) != 1)
    _exit(1);
  serve(&z);
}
