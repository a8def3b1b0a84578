/* pylib.c: the engine's Python helpers, written once at engine start under
 * the state directory (lib.<pid>/, removed with etc.<pid>/) and bound
 * read-only at SANDBOX_LIB_DIR in every run: sandboxd_cell.py (embedded,
 * cell_py.S), which runs a run's script and an interpreter session's cells
 * (docs/INTERPRETER.md), and its .pyc, compiled here by the interpreter
 * the runs use. Python compiles a -c program or a script on every start
 * (several milliseconds for this one); a module with an up-to-date .pyc
 * only unmarshals. The .pyc is "unchecked-hash": the read-only source
 * beside it is never compared. Runs with privileges at engine start; no
 * path or byte here comes from a request. */
#include "pylib.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etc.h"

extern const char sandbox_cell_py[];

#define PYLIB_PYTHON "/usr/bin/python3"

static const char compile_py[] =
    "import importlib.util, py_compile, sys\n"
    "src = sys.argv[1]\n"
    "py_compile.compile(src, cfile=importlib.util.cache_from_source(src), dfile=sys.argv[2],\n"
    "                   doraise=True,\n"
    "                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\n";

int pylib_write(const char *dir, struct sandbox_error *err) {
  if (mkdir(dir, 0755) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", dir);
  char src[4200];
  if ((size_t)snprintf(src, sizeof src, "%s/sandboxd_cell.py", dir) >= sizeof src)
    return sandbox_error_set(err, ENAMETOOLONG, "%s", dir);
  if (etc_write_file(src, sandbox_cell_py, strlen(sandbox_cell_py), err) < 0)
    return -1;
  /* -I: nothing of the server's environment or working directory. */
  char *argv[] = {
      PYLIB_PYTHON, "-I", "-c", (char *)compile_py, src, SANDBOX_LIB_DIR "/sandboxd_cell.py", NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
  mode_t old = umask(022);
  pid_t pid;
  int e = posix_spawn(&pid, PYLIB_PYTHON, NULL, NULL, argv, envp);
  umask(old);
  if (e != 0)
    return sandbox_error_set(err, e, "run %s to compile %s", PYLIB_PYTHON, src);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return sandbox_error_set(err, errno, "wait for %s", PYLIB_PYTHON);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return sandbox_error_set(err, EIO, "%s could not compile %s (status 0x%x)", PYLIB_PYTHON, src,
                             (unsigned)status);
  return 0;
}
