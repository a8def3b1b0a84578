/* fontlist.c: matplotlib's font list, made once per engine for every run.
 *
 * matplotlib scans the system's fonts on its first import under a config
 * directory and keeps the list there (fontlist-vNNN.json). A run's config
 * directory is its fresh /tmp, so every cold run that plotted paid that
 * scan again: about half a second, most of what a cold plot cost over a
 * bare interpreter whose user has the list cached. At engine start the
 * system's /usr/bin/python3 makes the list once, in the background, into
 * <lib>/matplotlib (bound read-only at SANDBOX_LIB_DIR/matplotlib in every
 * run); sandboxd_cell copies it into the run's config directory when the
 * run first imports matplotlib, and matplotlib reads it instead of scanning.
 * matplotlib checks the list's version itself and makes its own when it
 * does not match (an environment's other matplotlib).
 *
 * What runs here is the system's Python and matplotlib (as pylib.c runs
 * the system's Python), never a request's code or package: -I, an
 * environment of its own (HOME and MPLCONFIGDIR a fresh 0700 directory, so
 * neither root's config nor root's fonts enter the list), stdout to
 * /dev/null. Runs read the list as data. Must never delay the engine's
 * start or a run: the engine does not wait for it, and a run that starts
 * before it is ready scans the fonts as before. */
#include "fontlist.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "cleanup.h"

#define FONTLIST_PYTHON "/usr/bin/python3"
/* Exit status of the maker when matplotlib is not installed. */
#define FONTLIST_EXIT_ABSENT 3

/* Nice 10: against a busy CPU's other tasks it gets about a tenth, so the
 * list is made within seconds even when runs keep every CPU busy
 * (SCHED_IDLE could wait minutes: its weight is 3 to their 1024). */
static const char make_py[] =
    "import os, sys\n"
    "os.nice(10)\n"
    "try:\n"
    "    import matplotlib\n"
    "except ModuleNotFoundError:\n"
    "    sys.exit(3)\n"
    "import matplotlib.font_manager as fm\n"
    "name = 'fontlist-v%d.json' % fm.FontManager.__version__\n"
    "os.rename(os.path.join(os.environ['MPLCONFIGDIR'], name), os.path.join(sys.argv[1], name))\n";

static void failed(struct fontlist *f, const char *what, const char *path, int e) {
  f->state = SANDBOX_FONTLIST_FAILED;
  snprintf(f->why, sizeof f->why, "%s %s: %s", what, path, strerror(e));
}

void fontlist_start(struct fontlist *f, const char *lib_dir) {
  memset(f, 0, sizeof *f);
  f->state = SANDBOX_FONTLIST_PENDING;
  if ((size_t)snprintf(f->out, sizeof f->out, "%s/matplotlib", lib_dir) >= sizeof f->out ||
      (size_t)snprintf(f->build, sizeof f->build, "%s/matplotlib.build", lib_dir) >=
          sizeof f->build) {
    failed(f, "path under", lib_dir, ENAMETOOLONG);
    return;
  }
  if (mkdir(f->out, 0755) < 0 && errno != EEXIST) {
    failed(f, "mkdir", f->out, errno);
    return;
  }
  if (mkdir(f->build, 0700) < 0 && errno != EEXIST) {
    failed(f, "mkdir", f->build, errno);
    return;
  }
  char err_path[4300];
  snprintf(err_path, sizeof err_path, "%s/stderr", f->build);
  char home[4300], config[4300];
  snprintf(home, sizeof home, "HOME=%s", f->build);
  snprintf(config, sizeof config, "MPLCONFIGDIR=%s", f->build);
  char *argv[] = {FONTLIST_PYTHON, "-I", "-c", (char *)make_py, f->out, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", home, config, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  f->started_ms = sbx_monotonic_ms();
  int e = posix_spawn(&f->pid, FONTLIST_PYTHON, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) {
    f->pid = 0;
    failed(f, "run", FONTLIST_PYTHON, e);
  }
}

/* The last line of the maker's stderr (Python's error), printable. */
static void read_why(struct fontlist *f) {
  char path[4300], buf[4096];
  snprintf(path, sizeof path, "%s/stderr", f->build);
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0) {
    snprintf(f->why, sizeof f->why, "no message");
    return;
  }
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
    buf[--n] = '\0';
  char *line = strrchr(buf, '\n');
  line = line != NULL ? line + 1 : buf;
  size_t i = 0;
  for (; line[i] != '\0' && i + 1 < sizeof f->why; i++)
    f->why[i] = line[i] >= 0x20 && line[i] < 0x7f && line[i] != '"' ? line[i] : '?';
  f->why[i] = '\0';
}

static void remove_build(struct fontlist *f) {
  char parent[4200];
  snprintf(parent, sizeof parent, "%s", f->build);
  char *slash = strrchr(parent, '/');
  if (slash == NULL)
    return;
  *slash = '\0';
  cleanup_close int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    sandbox_remove_tree(fd, slash + 1);
}

static void ended(struct fontlist *f, int status) {
  f->reaped = true;
  f->ms = sbx_monotonic_ms() - f->started_ms;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    f->state = SANDBOX_FONTLIST_READY;
  else if (WIFEXITED(status) && WEXITSTATUS(status) == FONTLIST_EXIT_ABSENT)
    f->state = SANDBOX_FONTLIST_ABSENT;
  else {
    f->state = SANDBOX_FONTLIST_FAILED;
    if (WIFSIGNALED(status))
      snprintf(f->why, sizeof f->why, "killed by signal %d", WTERMSIG(status));
    else
      read_why(f);
  }
  remove_build(f);
}

enum sandbox_fontlist_state fontlist_poll(struct fontlist *f) {
  if (f->pid > 0 && !f->reaped) {
    int status = 0;
    pid_t r = waitpid(f->pid, &status, WNOHANG);
    if (r == f->pid)
      ended(f, status);
  }
  return f->state;
}

void fontlist_stop(struct fontlist *f) {
  if (f->pid <= 0 || f->reaped)
    return;
  kill(f->pid, SIGKILL);
  int status = 0;
  while (waitpid(f->pid, &status, 0) < 0 && errno == EINTR) {
  }
  ended(f, status);
}
