/* engine_test.c: the sandbox engine against the real kernel, as root.
 *
 * One test per killed_by value, per isolation property and per limit. The
 * backend comes from SANDBOX_TEST_BACKEND (auto, cgroup-v1, cgroup-v2,
 * rlimit); every test prints the one that ran, and SANDBOX_TEST_EXPECT_BACKEND
 * (e.g. "cgroup v2") makes the whole group fail when another one was picked.
 * SANDBOX_TEST_TIME_SCALE (default 1) multiplies the wall-time bounds and the
 * timeouts they depend on, for slow machines such as the TCG-emulated VM of
 * tests/vm; it is never set on the host. Without root the tests skip loudly,
 * and fail when CI=true.
 *
 * SANDBOX_TEST_ZYGOTE=1 (ctest engine_zygote) runs the same tests with runs
 * forked from zygotes (docs/ZYGOTE.md): the engine is made with zygotes that
 * preload ZYGOTE_PRELOAD, and every Python program runs with spec.zygote as
 * "python3 -u /workspace/main.py" (a "-c CODE" is written there first), so
 * each property proven for a cold run is proven again for a zygote's. The
 * few tests whose program cannot be a zygote's say why and skip. Then the
 * zygote's own tests (what is fresh per run, what a zygote's end does to
 * the next run) and two more engines: one recycling every two runs, one
 * whose preload fails. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox.h"
#include "killed_by.h"

#define PY "/usr/bin/python3"
#define SLOTS 2
/* What the zygotes import: what sandboxd's default configuration preloads. */
#define ZYGOTE_PRELOAD "numpy,matplotlib.pyplot"
/* The script a "-c CODE" becomes in zygote mode, inside the sandbox. */
#define ZYGOTE_SCRIPT "main.py"

static struct sandbox_engine *engine;
static const char state_dir_template[] = "/tmp/sandboxd-engine-test.XXXXXX";
static char state_dir[sizeof state_dir_template];
static int state_fd = -1;
static enum sandbox_backend backend_wanted = SANDBOX_BACKEND_AUTO;
static uid_t uid_base = 61000;
static double time_scale = 1.0;
/* SANDBOX_TEST_ZYGOTE=1: Python programs run forked from zygotes. */
static bool zygote_mode;
/* The zygote configuration of the engine the next group makes. */
static struct sandbox_zygote_config zygote_config;

/* A wall-time bound or timeout of the tests, stretched on slow machines. */
static uint64_t scaled_ms(uint64_t ms) {
  return (uint64_t)((double)ms * time_scale + 0.5);
}

static bool is_cgroup(void) {
  return sandbox_engine_report(engine)->backend != SANDBOX_BACKEND_RLIMIT;
}

/* The environment: backend, uids, time scale, mode. Once, before any group. */
static int read_environment(void) {
  const char *b = getenv("SANDBOX_TEST_BACKEND");
  const char *z = getenv("SANDBOX_TEST_ZYGOTE");
  zygote_mode = z != NULL && strcmp(z, "1") == 0;
  if (b != NULL && strcmp(b, "rlimit") == 0) {
    backend_wanted = SANDBOX_BACKEND_RLIMIT;
    uid_base = 61100;
  } else if (b != NULL && strcmp(b, "cgroup-v1") == 0) {
    backend_wanted = SANDBOX_BACKEND_CGROUP_V1;
  } else if (b != NULL && strcmp(b, "cgroup-v2") == 0) {
    backend_wanted = SANDBOX_BACKEND_CGROUP_V2;
  }
  if (zygote_mode)
    uid_base = 61020;
  /* Engineers sharing a machine give each run its own uids. */
  const char *ub = getenv("SANDBOX_TEST_UID_BASE");
  if (ub != NULL && ub[0] != '\0')
    uid_base = (uid_t)strtoul(ub, NULL, 10);
  const char *scale = getenv("SANDBOX_TEST_TIME_SCALE");
  if (scale != NULL && scale[0] != '\0') {
    char *end;
    time_scale = strtod(scale, &end);
    if (*end != '\0' || !(time_scale >= 1.0 && time_scale <= 100.0)) {
      fprintf(stderr, "SANDBOX_TEST_TIME_SCALE=%s: want a number from 1 to 100\n", scale);
      return -1;
    }
  }
  return 0;
}

/* Makes the engine of a group, with zygote_config. */
static int engine_start(void) {
  memcpy(state_dir, state_dir_template, sizeof state_dir);
  if (mkdtemp(state_dir) == NULL)
    return -1;
  state_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct sandbox_engine_config cfg = {.state_dir = state_dir,
                                      .backend = backend_wanted,
                                      .slots = SLOTS,
                                      .uid_base = uid_base,
                                      .zygote = zygote_config};
  struct sandbox_error err = {0};
  if (sandbox_engine_new(&cfg, &engine, &err) < 0) {
    fprintf(stderr, "engine: %s\n", err.msg);
    engine = NULL;
    return -1;
  }
  const struct sandbox_report *r = sandbox_engine_report(engine);
  fprintf(stderr, "# isolation backend: %s (cgroups at %s, clone_into_cgroup=%d, cpu_share=%d)\n",
          r->backend_name, r->cgroup_path[0] ? r->cgroup_path : "-", r->clone_into_cgroup,
          r->cpu_share);
  if (r->zygote)
    fprintf(stderr, "# zygotes: preload '%s', recycled after %llu runs or %llu ms\n",
            zygote_config.preload, (unsigned long long)r->zygote_max_forks,
            (unsigned long long)r->zygote_max_age_ms);
  if (time_scale != 1.0)
    fprintf(stderr, "# time bounds scaled by %.2f\n", time_scale);
  const char *expect = getenv("SANDBOX_TEST_EXPECT_BACKEND");
  if (expect != NULL && expect[0] != '\0' && strcmp(expect, r->backend_name) != 0) {
    fprintf(stderr, "engine picked backend '%s', SANDBOX_TEST_EXPECT_BACKEND is '%s'\n",
            r->backend_name, expect);
    return -1;
  }
  return 0;
}

static int group_setup(void **state) {
  memset(&zygote_config, 0, sizeof zygote_config);
  if (zygote_mode)
    zygote_config = (struct sandbox_zygote_config){.enabled = true, .preload = ZYGOTE_PRELOAD};
  return engine_start();
}

static int group_teardown(void **state) {
  if (state_fd >= 0)
    close(state_fd);
  state_fd = -1;
  if (engine == NULL) {
    sandbox_remove_tree(AT_FDCWD, state_dir);
    return 0;
  }
  char cg[sizeof sandbox_engine_report(engine)->cgroup_path];
  snprintf(cg, sizeof cg, "%s", sandbox_engine_report(engine)->cgroup_path);
  sandbox_engine_free(engine);
  engine = NULL;
  int ret = 0;
  if (cg[0] != '\0' && access(cg, F_OK) == 0) {
    fprintf(stderr, "engine cgroup %s left behind\n", cg);
    ret = -1;
  }
  sandbox_remove_tree(AT_FDCWD, state_dir);
  return ret;
}

static int test_setup(void **state) {
  return engine == NULL ? -1 : 0;
}

struct run {
  struct sandbox_result r;
  int rc;
  struct sandbox_error err;
};

/* Processes on the host owned by uid: the zygote of the slot (a child of
 * this process: the engine started it) is told apart from everything else,
 * which must be gone once a run is over. */
struct uid_processes {
  int others, zygotes;
  pid_t zygote;
};

static struct uid_processes scan_uid_processes(uid_t uid) {
  struct uid_processes p = {0, 0, 0};
  DIR *d = opendir("/proc");
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9')
      continue;
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
    FILE *f = fopen(path, "re");
    if (f == NULL)
      continue;
    int ppid = -1;
    while (fgets(line, sizeof line, f) != NULL) {
      unsigned ruid;
      if (sscanf(line, "PPid:\t%d", &ppid) == 1)
        continue;
      if (sscanf(line, "Uid:\t%u", &ruid) == 1) {
        if (ruid == uid && ppid == getpid()) {
          p.zygotes++;
          p.zygote = (pid_t)atoi(de->d_name);
        } else if (ruid == uid) {
          p.others++;
        }
        break;
      }
    }
    fclose(f);
  }
  closedir(d);
  return p;
}

/* How a test wants its program run: as the mode says (a zygote's in zygote
 * mode, for a Python program), or always cold, or always from the zygote. */
enum run_kind { RUN_AS_MODE, RUN_COLD, RUN_ZYGOTE };

struct run_opts {
  const struct sandbox_limits *limits;
  const void *in;
  size_t in_len;
  const struct sandbox_mount *mounts;
  size_t n_mounts;
  const struct sandbox_stream *stream;
  enum run_kind kind;
  /* A host directory for /workspace, owned by the slot's uid, that the
   * caller made and removes; NULL: a fresh one, removed after the run. */
  const char *workspace;
};

static void write_text(const char *path, const char *text, uid_t owner) {
  FILE *f = fopen(path, "we");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chown(path, owner, owner), 0);
}

/* A fresh workspace for slot under state_dir; returns its path in buf. */
static const char *make_workspace(unsigned slot, char *buf, size_t size) {
  snprintf(buf, size, "%s/ws.XXXXXX", state_dir);
  assert_non_null(mkdtemp(buf));
  assert_int_equal(chown(buf, uid_base + slot, uid_base + slot), 0);
  return buf;
}

static void remove_workspace(const char *path) {
  assert_int_equal(sandbox_remove_tree(state_fd, strrchr(path, '/') + 1), 0);
}

/* The argv a zygote runs for "python3 [-I] [-u] -c CODE [ARGS]" or
 * "python3 [-I] [-u] SCRIPT [ARGS]": "python3 -u SCRIPT [ARGS]", CODE
 * written to the workspace as ZYGOTE_SCRIPT first. (-I only matters for a
 * cold interpreter: a zygote's runs never read PYTHON* variables but
 * PYTHONPATH, and none of the tests sets one.) */
static void zygote_argv(const char *const *argv, const char *ws, uid_t owner, const char **out,
                        size_t size) {
  size_t i = 1, n = 0;
  if (strcmp(argv[0], PY) != 0)
    fail_msg("%s is not a Python program: a zygote cannot run it (skip the test in zygote mode)",
             argv[0]);
  while (argv[i] != NULL && (strcmp(argv[i], "-I") == 0 || strcmp(argv[i], "-u") == 0))
    i++;
  out[n++] = PY;
  out[n++] = "-u";
  if (argv[i] != NULL && strcmp(argv[i], "-c") == 0 && argv[i + 1] != NULL) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", ws, ZYGOTE_SCRIPT);
    write_text(path, argv[i + 1], owner);
    out[n++] = "/workspace/" ZYGOTE_SCRIPT;
    i += 2;
  } else if (argv[i] == NULL || argv[i][0] != '/') {
    fail_msg("'%s' is not a script or -c: a zygote cannot run it", argv[i] ? argv[i] : "");
  }
  for (; argv[i] != NULL && n + 1 < size; i++)
    out[n++] = argv[i];
  assert_null(argv[i]);
  out[n] = NULL;
}

static void run_opts_in_slot(unsigned slot, const char *const *argv, const struct run_opts *o,
                             struct run *out) {
  char path[4200];
  const char *ws = o->workspace != NULL ? o->workspace : make_workspace(slot, path, sizeof path);
  bool zygote = o->kind == RUN_ZYGOTE || (o->kind == RUN_AS_MODE && zygote_mode);
  const char *zargv[32];
  if (zygote) {
    zygote_argv(argv, ws, uid_base + slot, zargv, sizeof zargv / sizeof zargv[0]);
    argv = zargv;
  }
  static const char *const env[] = {"USER_VAR=visible", NULL};
  struct sandbox_spec spec = {.argv = argv,
                              .env = env,
                              .workspace_dir = ws,
                              .stdin_data = o->in,
                              .stdin_len = o->in_len,
                              .mounts = o->mounts,
                              .n_mounts = o->n_mounts,
                              .stream = o->stream,
                              .zygote = zygote};
  if (o->limits != NULL)
    spec.limits = *o->limits;
  memset(out, 0, sizeof *out);
  out->rc = sandbox_run(engine, slot, &spec, &out->r, &out->err);
  if (out->rc < 0)
    fprintf(stderr, "sandbox_run: %s\n", out->err.msg);
  else
    fprintf(stderr, "# [%s%s] killed_by=%s exit=%d signal=%d wall=%.1fms cpu=%.1fms peak=%.1fMiB\n",
            sandbox_backend_name(out->r.backend), zygote ? ", zygote" : "",
            killed_by_name(out->r.killed_by), out->r.exit_code, out->r.signal,
            out->r.wall_time_us / 1000.0, out->r.cpu_time_us / 1000.0,
            out->r.peak_memory_bytes / 1048576.0);
  if (o->workspace == NULL)
    remove_workspace(ws);
  /* Whatever happened, nothing of the run survives it; at most the slot's
   * zygote is left. */
  struct uid_processes left = scan_uid_processes(uid_base + slot);
  assert_int_equal(left.others, 0);
  assert_true(left.zygotes <= (zygote_config.enabled ? 1 : 0));
}

static void run_in_slot(unsigned slot, const char *const *argv, const struct sandbox_limits *limits,
                        const void *in, size_t in_len, const struct sandbox_mount *mounts,
                        size_t n_mounts, struct run *out) {
  struct run_opts o = {
      .limits = limits, .in = in, .in_len = in_len, .mounts = mounts, .n_mounts = n_mounts};
  run_opts_in_slot(slot, argv, &o, out);
}

static void run_py_limits(const char *code, const struct sandbox_limits *limits, const void *in,
                          size_t in_len, struct run *out) {
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  run_in_slot(0, argv, limits, in, in_len, NULL, 0, out);
}

static void run_py(const char *code, struct run *out) {
  run_py_limits(code, NULL, NULL, 0, out);
}

static void assert_stdout(const struct run *run, const char *expected) {
  assert_int_equal(run->rc, 0);
  if (run->r.stdout_len != strlen(expected) ||
      memcmp(run->r.stdout_data, expected, run->r.stdout_len) != 0) {
    fprintf(stderr, "stdout: %.*s\nstderr: %.*s\n", (int)run->r.stdout_len,
            (const char *)run->r.stdout_data, (int)run->r.stderr_len,
            (const char *)run->r.stderr_data);
    fail_msg("stdout differs from '%s'", expected);
  }
}

/* A test whose program a zygote cannot run says why, then skips. */
static void skip_in_zygote_mode(const char *why) {
  if (!zygote_mode)
    return;
  fprintf(stderr, "# skipped in zygote mode: %s\n", why);
  skip();
}

/* Starts every slot's zygote (zygote mode), so that runs started side by
 * side start together, not one after a zygote's start. */
static void warm_zygotes(void) {
  for (unsigned i = 0; zygote_mode && i < SLOTS; i++) {
    struct sandbox_error err = {0};
    if (sandbox_zygote_warm(engine, i, &err) < 0)
      fail_msg("warm slot %u: %s", i, err.msg);
  }
}

/* ---- how a run ended ---- */

static void test_killed_by_none_exit_code(void **state) {
  struct run run;
  run_py("import sys; print('hello'); sys.exit(3)", &run);
  assert_stdout(&run, "hello\n");
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  assert_int_equal(run.r.exit_code, 3);
  assert_int_equal(run.r.signal, 0);
  assert_true(run.r.wall_time_us > 0);
  assert_true(run.r.cpu_time_us > 0);
  assert_true(run.r.peak_memory_bytes > 0);
  assert_int_equal(run.r.backend, sandbox_engine_report(engine)->backend);
  sandbox_result_free(&run.r);
}

static void test_killed_by_memory(void **state) {
  struct run run;
  run_py("b = bytearray(512 * 2**20); print('survived')", &run);
  assert_int_equal(run.rc, 0);
  if (is_cgroup()) {
    assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_MEMORY);
    assert_int_equal(run.r.signal, SIGKILL);
    assert_true(run.r.peak_memory_bytes <= SANDBOX_DEFAULT_MEMORY_BYTES);
    assert_true(run.r.peak_memory_bytes > SANDBOX_DEFAULT_MEMORY_BYTES / 2);
  } else {
    /* Per-process RLIMIT_AS: the allocation fails, the program exits. */
    assert_true(run.r.memory_per_process);
    assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
    assert_int_equal(run.r.exit_code, 1);
    assert_non_null(memmem(run.r.stderr_data, run.r.stderr_len, "MemoryError", 11));
  }
  assert_int_equal(run.r.stdout_len, 0);
  sandbox_result_free(&run.r);
}

static void test_memory_under_limit_runs(void **state) {
  struct run run;
  run_py("b = bytearray(64 * 2**20); print(len(b))", &run);
  assert_stdout(&run, "67108864\n");
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  if (is_cgroup())
    assert_true(run.r.peak_memory_bytes >= 64u << 20);
  sandbox_result_free(&run.r);
}

static void expect_timeout(const char *code, uint64_t timeout_ms, const void *in, size_t in_len) {
  struct sandbox_limits l = {.timeout_ms = timeout_ms};
  struct run run;
  run_py_limits(code, &l, in, in_len, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_TIMEOUT);
  /* SIGXCPU when the per-process CPU rlimit (rlimit backend) came first. */
  assert_true(run.r.signal == SIGKILL || run.r.signal == SIGXCPU);
  assert_true(run.r.wall_time_us < (timeout_ms + scaled_ms(1500)) * 1000);
  sandbox_result_free(&run.r);
}

static void test_timeout_busy_loop(void **state) {
  expect_timeout("while True: pass", 1000, NULL, 0);
}

static void test_timeout_spinning_thread(void **state) {
  expect_timeout("import threading\n"
                 "def spin():\n    while True: pass\n"
                 "threading.Thread(target=spin).start()\n"
                 "threading.Thread(target=spin).start()\n",
                 1000, NULL, 0);
}

static void test_raising_own_cpu_rlimit_gains_nothing(void **state) {
  if (!is_cgroup())
    skip(); /* with the rlimit backend RLIMIT_CPU is the limit itself */
  /* The hard limit is unlimited (programs may set their own, as CPython's
   * tests do); the supervisor's tree-wide check still ends the run. */
  struct sandbox_limits l = {.timeout_ms = 10000, .cpu_time_ms = 600};
  struct run run;
  run_py_limits("import resource, sys\n"
                "soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n"
                "print(hard == resource.RLIM_INFINITY, flush=True)\n"
                "resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))\n"
                "while True: pass\n",
                &l, NULL, 0, &run);
  assert_int_equal(run.rc, 0);
  assert_memory_equal(run.r.stdout_data, "True\n", 5);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_TIMEOUT);
  assert_true(run.r.cpu_time_exceeded);
  assert_true(run.r.cpu_time_us < 3000 * 1000);
  sandbox_result_free(&run.r);
}

static void test_timeout_sleep(void **state) {
  struct sandbox_limits l = {.timeout_ms = 1000};
  struct run run;
  run_py_limits("import time; time.sleep(60)", &l, NULL, 0, &run);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_TIMEOUT);
  assert_false(run.r.cpu_time_exceeded); /* the wall clock ended it */
  sandbox_result_free(&run.r);
}

static void test_timeout_program_never_reads_stdin(void **state) {
  /* 8 MiB of stdin that nobody reads must not block the supervisor. */
  size_t n = 8u << 20;
  char *in = malloc(n);
  memset(in, 'x', n);
  expect_timeout("import time; time.sleep(60)", 1000, in, n);
  free(in);
}

static void test_timeout_reading_stdin_forever(void **state) {
  /* A pipe that a child keeps open: the read never ends. */
  expect_timeout("import os, sys, time\n"
                 "r, w = os.pipe()\n"
                 "os.read(r, 1)\n",
                 1000, NULL, 0);
}

static void test_cpu_limit_counts_the_whole_tree(void **state) {
  /* Two spinning processes, 600 ms of CPU allowed, 10 s of wall time. */
  struct sandbox_limits l = {.timeout_ms = 10000, .cpu_time_ms = 600};
  struct run run;
  run_py_limits("import os\nos.fork()\nwhile True: pass\n", &l, NULL, 0, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_TIMEOUT);
  assert_true(run.r.cpu_time_exceeded); /* the CPU limit, not the wall clock */
  if (is_cgroup()) {
    /* Stopped near 600 ms of CPU for the two, long before the wall limit. */
    assert_true(run.r.cpu_time_us >= 600 * 1000);
    assert_true(run.r.cpu_time_us < 2000 * 1000);
  } else {
    /* rlimit backend: RLIMIT_CPU (1 s) per process, SIGXCPU. */
    assert_int_equal(run.r.signal, SIGXCPU);
  }
  sandbox_result_free(&run.r);
}

static void test_killed_by_output_limit(void **state) {
  struct sandbox_limits l = {.timeout_ms = scaled_ms(SANDBOX_DEFAULT_TIMEOUT_MS)};
  struct run run;
  run_py_limits("import sys\nwhile True: sys.stdout.write('y' * 65536)\n", &l, NULL, 0, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_OUTPUT_LIMIT);
  assert_true(run.r.stdout_truncated);
  assert_false(run.r.stderr_truncated);
  assert_int_equal(run.r.stdout_len, SANDBOX_DEFAULT_OUTPUT_BYTES);
  for (size_t i = 0; i < run.r.stdout_len; i++)
    assert_int_equal(run.r.stdout_data[i], 'y');
  /* Stopped at once, not at the 5 s timeout. */
  assert_true(run.r.wall_time_us < scaled_ms(1000) * 1000);
  sandbox_result_free(&run.r);
}

static void test_output_limit_on_stderr(void **state) {
  struct sandbox_limits l = {.output_bytes = 1000};
  struct run run;
  run_py_limits("import sys\nsys.stdout.write('ok')\nsys.stderr.write('e' * 5000)\n", &l, NULL, 0,
                &run);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_OUTPUT_LIMIT);
  assert_true(run.r.stderr_truncated);
  assert_int_equal(run.r.stderr_len, 1000);
  sandbox_result_free(&run.r);
}

static void test_output_exactly_at_limit_is_not_truncated(void **state) {
  struct sandbox_limits l = {.output_bytes = 1000};
  struct run run;
  run_py_limits("import sys\nsys.stdout.write('z' * 1000)\n", &l, NULL, 0, &run);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  assert_false(run.r.stdout_truncated);
  assert_int_equal(run.r.stdout_len, 1000);
  sandbox_result_free(&run.r);
}

static void test_killed_by_signal_segv(void **state) {
  struct run run;
  run_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", &run);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_SIGNAL);
  assert_int_equal(run.r.signal, SIGSEGV);
  sandbox_result_free(&run.r);
}

static void test_killed_by_signal_abort(void **state) {
  struct run run;
  run_py("import os; os.abort()", &run);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_SIGNAL);
  assert_int_equal(run.r.signal, SIGABRT);
  sandbox_result_free(&run.r);
}

/* ---- the tree ends with the run ---- */

static void test_children_do_not_survive(void **state) {
  struct run run;
  run_py("import os, subprocess, time\n"
         "subprocess.Popen(['/bin/sleep', '1000'], start_new_session=True)\n"
         "if os.fork() == 0:\n"
         "    os.setsid()\n"
         "    if os.fork() == 0:\n"
         "        time.sleep(1000)\n"
         "    os._exit(0)\n"
         "os.system('nohup /bin/sleep 1000 >/dev/null 2>&1 &')\n"
         "time.sleep(0.2)\n"
         "print(len([p for p in os.listdir('/proc') if p.isdigit()]))\n",
         &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  int seen = atoi((const char *)run.r.stdout_data);
  assert_true(seen >= 4); /* init, python and the sleepers were running */
  /* run_in_slot asserted that no process of the slot's uid is left. */
  sandbox_result_free(&run.r);
}

static void test_fork_bomb_is_contained(void **state) {
  struct sandbox_limits l = {.timeout_ms = scaled_ms(3000), .max_processes = 32};
  struct run run;
  run_py_limits("import os\n"
                "n = 0\n"
                "while True:\n"
                "    try:\n"
                "        os.fork()\n"
                "    except OSError:\n"
                "        n += 1\n",
                &l, NULL, 0, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_TIMEOUT);
  assert_true(run.r.wall_time_us < scaled_ms(5000) * 1000);
  /* The machine still answers: a normal run right after is quick. */
  struct run after;
  run_py("print('fine')", &after);
  assert_stdout(&after, "fine\n");
  assert_true(after.r.wall_time_us < scaled_ms(2000) * 1000);
  sandbox_result_free(&after.r);
  sandbox_result_free(&run.r);
}

static void test_pids_limit_refuses_fork(void **state) {
  struct sandbox_limits l = {.max_processes = 8};
  struct run run;
  run_py_limits("import os, time\n"
                "kids = 0\n"
                "for i in range(50):\n"
                "    try:\n"
                "        if os.fork() == 0:\n"
                "            time.sleep(5); os._exit(0)\n"
                "        kids += 1\n"
                "    except BlockingIOError:\n"
                "        break\n"
                "print(kids)\n",
                &l, NULL, 0, &run);
  assert_int_equal(run.rc, 0);
  int kids = atoi((const char *)run.r.stdout_data);
  fprintf(stderr, "# forks allowed under max_processes=8: %d\n", kids);
  assert_true(kids >= 1 && kids < 8);
  sandbox_result_free(&run.r);
}

/* ---- bytes in, bytes out ---- */

static void test_stdin_delivered_byte_exact(void **state) {
  size_t n = 1u << 20;
  uint8_t *in = malloc(n);
  for (size_t i = 0; i < n; i++)
    in[i] = (uint8_t)(i * 131 + (i >> 8));
  struct sandbox_limits l = {.output_bytes = 2u << 20};
  struct run run;
  run_py_limits("import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())", &l, in, n, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  assert_int_equal(run.r.stdout_len, n);
  assert_memory_equal(run.r.stdout_data, in, n);
  free(in);
  sandbox_result_free(&run.r);
}

static void test_non_utf8_output_preserved(void **state) {
  struct run run;
  run_py("import sys\n"
         "sys.stdout.buffer.write(bytes([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80]))\n"
         "sys.stderr.buffer.write(b'\\xed\\xa0\\x80')\n",
         &run);
  assert_int_equal(run.rc, 0);
  static const uint8_t out[] = {0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80};
  static const uint8_t err[] = {0xed, 0xa0, 0x80};
  assert_int_equal(run.r.stdout_len, sizeof out);
  assert_memory_equal(run.r.stdout_data, out, sizeof out);
  assert_int_equal(run.r.stderr_len, sizeof err);
  assert_memory_equal(run.r.stderr_data, err, sizeof err);
  sandbox_result_free(&run.r);
}

/* ---- isolation ---- */

static void test_network_connect_is_permission_error(void **state) {
  struct run run;
  run_py("import socket\n"
         "for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, "
         "socket.SOCK_DGRAM),\n"
         "                 (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_NETLINK, "
         "socket.SOCK_RAW)]:\n"
         "    try:\n"
         "        socket.socket(fam, typ).connect(('127.0.0.1', 7878))\n"
         "        print('connected')\n"
         "    except PermissionError:\n"
         "        print('blocked')\n"
         "socket.socket(socket.AF_UNIX).close(); print('unix ok')\n",
         &run);
  assert_stdout(&run, "blocked\nblocked\nblocked\nblocked\nunix ok\n");
  sandbox_result_free(&run.r);
}

static void test_network_namespace_has_only_lo(void **state) {
  struct run run;
  run_py("lines = open('/proc/net/dev').read().splitlines()[2:]\n"
         "print(','.join(sorted(l.split(':')[0].strip() for l in lines)))\n",
         &run);
  assert_stdout(&run, "lo\n");
  sandbox_result_free(&run.r);
}

static void test_dev_and_tmp_usable(void **state) {
  /* The devices, /tmp and /dev/shm work for the unprivileged program (the
   * template's nodes are 0666, the per-run tmpfs 1777), and what one run
   * mounts stays in its own copy of the template: a second run sees the
   * same mount table, not one more /tmp. */
  const char *code =
      "import os, stat, errno\n"
      "open('/dev/null', 'w').write('x'); print(len(open('/dev/zero', 'rb').read(8)))\n"
      "print(len(open('/dev/urandom', 'rb').read(8)))\n"
      "fd = os.open('/dev/full', os.O_WRONLY)\n"
      "try:\n    os.write(fd, b'x')\nexcept OSError as e:\n"
      "    print(e.errno == errno.ENOSPC)\n"
      "print(sorted(n for n in os.listdir('/dev')))\n"
      "print([oct(stat.S_IMODE(os.stat(p).st_mode)) for p in ('/dev/null', '/tmp', '/dev/shm')])\n"
      "open('/dev/shm/x', 'w').write('1'); open('/tmp/x', 'w').write('1')\n"
      "print(len(open('/proc/self/mountinfo').read().splitlines()))\n";
  struct run first, second;
  run_py(code, &first);
  run_py(code, &second);
  assert_int_equal(first.r.exit_code, 0);
  fprintf(stderr, "# %.*s", (int)first.r.stdout_len, first.r.stdout_data);
  const char *expect_prefix = "8\n8\nTrue\n['fd', 'full', 'null', 'ptmx', 'pts', 'random', "
                              "'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n['0o666', "
                              "'0o1777', '0o1777']\n";
  assert_true(first.r.stdout_len > strlen(expect_prefix));
  assert_memory_equal(first.r.stdout_data, expect_prefix, strlen(expect_prefix));
  assert_int_equal(first.r.stdout_len, second.r.stdout_len);
  assert_memory_equal(first.r.stdout_data, second.r.stdout_data, first.r.stdout_len);
  sandbox_result_free(&first.r);
  sandbox_result_free(&second.r);
}

static void test_root_is_read_only(void **state) {
  struct run run;
  run_py("import errno\n"
         "for p in ['/x', '/usr/x', '/etc/x', '/bin/x', '/dev/x', '/proc/sys/kernel/hostname']:\n"
         "    try:\n"
         "        open(p, 'w'); print('wrote', p)\n"
         "    except OSError as e:\n"
         "        print(e.errno in (errno.EROFS, errno.EACCES, errno.EPERM))\n"
         "open('/workspace/ok', 'w').write('1'); open('/tmp/ok', 'w').write('1'); print('rw')\n",
         &run);
  assert_stdout(&run, "True\nTrue\nTrue\nTrue\nTrue\nTrue\nrw\n");
  sandbox_result_free(&run.r);
}

static void test_unprivileged_uid_and_empty_caps(void **state) {
  struct run run;
  char code[1024];
  snprintf(
      code, sizeof code,
      "import os\n"
      "print(os.getresuid() == (%u,)*3, os.getresgid() == (%u,)*3, os.getuid() != 0)\n"
      "print(os.getgroups())\n"
      "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
      "print(set(caps))\n"
      "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])\n"
      /* EPERM; EINVAL in a zygote's user namespace, where uid 0 is not mapped. */
      "try:\n    os.setuid(0)\nexcept OSError:\n    print('setuid refused')\n",
      (unsigned)uid_base, (unsigned)uid_base);
  run_py(code, &run);
  assert_stdout(&run, "True True True\n[]\n{'0000000000000000'}\n['1']\nsetuid refused\n");
  sandbox_result_free(&run.r);
}

static void test_proc_shows_only_the_sandbox(void **state) {
  struct run run;
  run_py("import os\n"
         "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
         "print(pids, os.getpid())\n",
         &run);
  assert_stdout(&run, "[1, 2] 2\n");
  sandbox_result_free(&run.r);
}

static void test_no_host_secrets_in_etc(void **state) {
  struct run run;
  run_py(
      "import os\n"
      "print(os.path.exists('/etc/shadow'), os.path.exists('/root'), os.path.exists('/etc/ssh'))\n"
      "print(sorted(os.listdir('/etc')))\n",
      &run);
  assert_int_equal(run.rc, 0);
  assert_non_null(memmem(run.r.stdout_data, run.r.stdout_len, "False False False\n", 18));
  assert_null(memmem(run.r.stdout_data, run.r.stdout_len, "shadow", 6));
  sandbox_result_free(&run.r);
}

static void test_no_server_environment(void **state) {
  setenv("SANDBOXD_TEST_SECRET", "hunter2", 1);
  struct run run;
  run_py("import os; print(sorted(os.environ))", &run);
  assert_stdout(&run, "['HOME', 'LANG', 'MPLCONFIGDIR', 'PATH', 'TMPDIR', 'USER_VAR', "
                      "'XDG_CACHE_HOME']\n");
  unsetenv("SANDBOXD_TEST_SECRET");
  sandbox_result_free(&run.r);
}

static void test_only_stdio_fds_inherited(void **state) {
  int leak = open("/etc/hostname", O_RDONLY); /* not CLOEXEC on purpose */
  struct run run;
  run_py("import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))", &run);
  close(leak);
  /* 3 is the directory listdir itself opened. */
  assert_stdout(&run, "[0, 1, 2, 3]\n");
  sandbox_result_free(&run.r);
}

static void test_new_namespaces_and_hostname(void **state) {
  static const char *const ns[] = {"pid", "mnt", "net", "ipc", "uts", "cgroup"};
  struct run run;
  run_py("import socket, os\n"
         "print(socket.gethostname())\n"
         "for ns in ['pid', 'mnt', 'net', 'ipc', 'uts', 'cgroup']:\n"
         "    print(os.readlink('/proc/self/ns/' + ns))\n",
         &run);
  assert_int_equal(run.rc, 0);
  /* Every namespace link inside must differ from the host's. */
  char *saveptr = NULL;
  char *copy = strndup((const char *)run.r.stdout_data, run.r.stdout_len);
  char *line = strtok_r(copy, "\n", &saveptr);
  assert_string_equal(line, "sandbox");
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    line = strtok_r(NULL, "\n", &saveptr);
    assert_non_null(line);
    char path[64], host[128];
    snprintf(path, sizeof path, "/proc/self/ns/%s", ns[i]);
    ssize_t n = readlink(path, host, sizeof host - 1);
    host[n] = '\0';
    if (strcmp(line, host) == 0)
      fail_msg("namespace %s is the host's (%s)", ns[i], host);
  }
  free(copy);
  sandbox_result_free(&run.r);
}

static void test_seccomp_denies_dangerous_syscalls(void **state) {
  struct run run;
  run_py("import ctypes, os\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "nr = {'ptrace': 101, 'mount': 165, 'unshare': 272, 'setns': 308, 'bpf': 321,\n"
         "      'perf_event_open': 298, 'userfaultfd': 323, 'io_uring_setup': 425,\n"
         "      'keyctl': 250, 'add_key': 248, 'kexec_load': 246, 'init_module': 175,\n"
         "      'open_by_handle_at': 304, 'reboot': 169, 'settimeofday': 164,\n"
         "      'process_vm_readv': 310, 'pivot_root': 155, 'acct': 163, 'swapon': 167}\n"
         "bad = []\n"
         "for name, n in nr.items():\n"
         "    ctypes.set_errno(0)\n"
         "    r = libc.syscall(n, 0, 0, 0, 0, 0)\n"
         "    if r != -1 or ctypes.get_errno() not in (1, 13, 38):\n"
         "        bad.append((name, r, ctypes.get_errno()))\n"
         "# unshare(CLONE_NEWUSER) would give a fresh root inside: must fail\n"
         "r = libc.unshare(0x10000000)\n"
         "print(bad, r, ctypes.get_errno())\n"
         "# x32 ABI: getpid with the x32 bit\n"
         "print(libc.syscall(0x40000000 | 39) == -1)\n",
         &run);
  assert_stdout(&run, "[] -1 1\nTrue\n");
  sandbox_result_free(&run.r);
}

static void test_subprocess_and_threads_work(void **state) {
  struct run run;
  run_py("import subprocess, threading, json\n"
         "out = subprocess.run(['/bin/echo', 'child'], capture_output=True).stdout.decode()\n"
         "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
         "print(out.strip(), json.dumps({'a': 1}))\n",
         &run);
  assert_stdout(&run, "child {\"a\": 1}\n");
  sandbox_result_free(&run.r);
}

static void test_matplotlib_plots_without_setup(void **state) {
  /* What a data-analysis user does first: no environment variables, no
   * warnings on stderr, nothing but the plot left in the workspace. */
  if (access("/usr/lib/python3/dist-packages/matplotlib", F_OK) < 0) {
    /* The qemu VM's initramfs carries the standard library only. */
    fprintf(stderr, "# matplotlib is not installed here (scripts/install-deps installs it)\n");
    skip();
  }
  struct sandbox_limits l = {.timeout_ms = scaled_ms(20000)};
  struct run run;
  run_py_limits("import matplotlib\nmatplotlib.use('Agg')\n"
                "import matplotlib.pyplot as plt, os\n"
                "plt.plot([1, 2, 3]); plt.title('t'); plt.savefig('/workspace/p.png')\n"
                "print(sorted(os.listdir('/workspace')))\n",
                &l, NULL, 0, &run);
  if (run.r.stderr_len != 0)
    fprintf(stderr, "stderr: %.*s\n", (int)run.r.stderr_len, (const char *)run.r.stderr_data);
  /* In zygote mode the program is a script in the workspace. */
  assert_stdout(&run, zygote_mode ? "['" ZYGOTE_SCRIPT "', 'p.png']\n" : "['p.png']\n");
  assert_int_equal(run.r.stderr_len, 0);
  sandbox_result_free(&run.r);
}

static void test_file_size_limit(void **state) {
  struct sandbox_limits l = {.file_size_bytes = 1u << 20};
  struct run run;
  run_py_limits("import errno\n"
                "try:\n"
                "    open('/workspace/big', 'wb').write(b'x' * (2 << 20))\n"
                "    print('wrote')\n"
                "except OSError as e:\n"
                "    print(e.errno == errno.EFBIG)\n",
                &l, NULL, 0, &run);
  assert_stdout(&run, "True\n");
  sandbox_result_free(&run.r);
}

static void test_open_files_limit(void **state) {
  struct sandbox_limits l = {.open_files = 32};
  struct run run;
  run_py_limits("import resource, os\n"
                "print(resource.getrlimit(resource.RLIMIT_NOFILE))\n"
                "fds = []\n"
                "try:\n"
                "    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
                "except OSError as e:\n"
                "    print(len(fds) < 32, e.errno)\n",
                &l, NULL, 0, &run);
  assert_stdout(&run, "(32, 32)\nTrue 24\n");
  sandbox_result_free(&run.r);
}

static void test_tmp_is_size_limited(void **state) {
  struct sandbox_limits l = {.tmp_bytes = 4u << 20};
  struct run run;
  run_py_limits("import errno\n"
                "try:\n"
                "    open('/tmp/fill', 'wb').write(b'x' * (8 << 20))\n"
                "    print('wrote')\n"
                "except OSError as e:\n"
                "    print(e.errno == errno.ENOSPC)\n",
                &l, NULL, 0, &run);
  assert_stdout(&run, "True\n");
  sandbox_result_free(&run.r);
}

static void test_extra_mount_is_read_only(void **state) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/extra", state_dir);
  mkdir(dir, 0755);
  char file[4300];
  snprintf(file, sizeof file, "%s/mod.py", dir);
  FILE *f = fopen(file, "w");
  fputs("VALUE = 42\n", f);
  fclose(f);
  /* A zygote's runs take extra mounts under /usr/ only (the requirements
   * store's site directory): the same test there. */
  const char *target = zygote_mode ? "/usr/local/lib/python3.11/dist-packages" : "/opt/env/lib";
  struct sandbox_mount m = {.source = dir, .target = target};
  char code[512];
  snprintf(code, sizeof code,
           "import sys; sys.path.insert(0, '%s'); import mod\n"
           "print(mod.VALUE)\n"
           "try:\n    open('%s/x', 'w')\nexcept OSError as e:\n"
           "    print(e.errno)\n",
           target, target);
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, &m, 1, &run);
  assert_stdout(&run, "42\n30\n");
  sandbox_result_free(&run.r);
  unlink(file);
  rmdir(dir);
}

static void test_site_packages_mount_is_on_sys_path(void **state) {
  /* What the requirements store does: a read-only package directory over the
   * interpreter's /usr/local site directory, importable even with -I. */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/site", state_dir);
  mkdir(dir, 0755);
  char file[4300];
  snprintf(file, sizeof file, "%s/sbx_site_probe.py", dir);
  FILE *f = fopen(file, "w");
  fputs("VALUE = 'from the store'\n", f);
  fclose(f);
  struct sandbox_mount m = {.source = dir, .target = "/usr/local/lib/python3.11/dist-packages"};
  const char *argv[] = {PY, "-I", "-c", "import sbx_site_probe; print(sbx_site_probe.VALUE)", NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, &m, 1, &run);
  assert_stdout(&run, "from the store\n");
  sandbox_result_free(&run.r);
  /* Only over an existing directory there, never a new one under /usr. */
  struct sandbox_mount bad = {.source = dir, .target = "/usr/local/lib/no-such-dir"};
  run_in_slot(0, argv, NULL, NULL, 0, &bad, 1, &run);
  assert_int_equal(run.rc, -1);
  unlink(file);
  rmdir(dir);
}

static void *accept_one(void *arg) {
  int fd = *(int *)arg;
  int c = accept(fd, NULL, NULL);
  if (c >= 0) {
    (void)!write(c, "pong", 4);
    close(c);
  }
  return NULL;
}

static int loopback_listener(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  listen(fd, 4);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* accept_one on a non-blocking listener, giving up after 10 s: when the run
 * is not where it should be, the test fails instead of hanging. */
static void *accept_one_within(void *arg) {
  struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
  if (poll(&p, 1, 10000) == 1)
    accept_one(arg);
  return NULL;
}

/* The network profile runs in the namespace its caller made (here with a
 * listener inside), never in the host's: the run reaches the listener in
 * its namespace, not one on the host's loopback, and still opens no raw or
 * packet socket. Without a network namespace the profile is refused. */
static void test_network_profile_runs_in_the_given_namespace(void **state) {
  skip_in_zygote_mode("the network profile is the package installer's, never a zygote's "
                      "(test_zygote_refuses_what_it_cannot_run checks the refusal)");
  struct sandbox_error err = {0};
  int inner = -1;
  int ns = sandbox_netns_create(0, &inner, &err);
  assert_true(ns >= 0);
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  getsockname(inner, (struct sockaddr *)&sa, &sl);
  uint16_t host_port;
  int host = loopback_listener(&host_port);
  pthread_t th;
  pthread_create(&th, NULL, accept_one_within, &inner);
  char code[768];
  snprintf(
      code, sizeof code,
      "import socket\n"
      "s = socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
      "print(s.recv(4).decode())\n"
      "try:\n"
      "    socket.create_connection(('127.0.0.1', %d), timeout=3); print('host reached')\n"
      "except ConnectionRefusedError:\n"
      "    print('refused')\n"
      "for fam, typ in [(socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW)]:\n"
      "    try:\n"
      "        socket.socket(fam, typ); print('opened')\n"
      "    except PermissionError:\n"
      "        print('blocked')\n",
      ntohs(sa.sin_port), host_port);
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  char ws[4200];
  snprintf(ws, sizeof ws, "%s/netws", state_dir);
  mkdir(ws, 0755);
  struct sandbox_spec spec = {.argv = argv, .workspace_dir = ws, .network = true, .netns_fd = ns};
  struct sandbox_result r;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), 0);
  pthread_join(th, NULL);
  static const char want[] = "pong\nrefused\nblocked\nblocked\n";
  assert_int_equal(r.stdout_len, strlen(want));
  assert_memory_equal(r.stdout_data, want, r.stdout_len);
  sandbox_result_free(&r);
  /* No namespace of the caller's, or a descriptor that is not one: refused,
   * never the host's namespace instead. */
  spec.netns_fd = -1;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  spec.netns_fd = host;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  close(host);
  close(inner);
  close(ns);
  rmdir(ws);
}

static void test_bad_mount_target_refused(void **state) {
  static const char *const bad[] = {"/usr/lib/x", "/usr/local",  "/usr/local/../lib",
                                    "relative",   "/opt/../etc", "/",
                                    "/proc",      "/opt//x",     "/workspace/x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct sandbox_mount m = {.source = "/usr/share", .target = bad[i]};
    const char *argv[] = {PY, "-c", "print(1)", NULL};
    struct run run;
    run_in_slot(0, argv, NULL, NULL, 0, &m, 1, &run);
    assert_int_equal(run.rc, -1);
    assert_int_equal(run.err.errnum, EINVAL);
  }
}

static void test_missing_program_is_setup_error(void **state) {
  skip_in_zygote_mode("a zygote runs /usr/bin/python3 only; a missing script is "
                      "test_zygote_missing_script_like_cold");
  const char *argv[] = {"/usr/bin/no-such-interpreter", NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, NULL, 0, &run);
  assert_int_equal(run.rc, -1);
  assert_int_equal(run.err.errnum, ENOENT);
  assert_non_null(strstr(run.err.msg, "exec"));
}

struct thread_run {
  unsigned slot;
  struct run run;
};

static void *run_thread(void *arg) {
  struct thread_run *t = arg;
  char code[128];
  snprintf(code, sizeof code, "import time, os; time.sleep(%.3f); print(os.getuid())",
           scaled_ms(500) / 1000.0);
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  run_in_slot(t->slot, argv, NULL, NULL, 0, NULL, 0, &t->run);
  return NULL;
}

static void test_slots_run_concurrently(void **state) {
  struct thread_run t[SLOTS];
  pthread_t th[SLOTS];
  struct timespec t0, t1;
  warm_zygotes();
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = 0; i < SLOTS; i++) {
    t[i].slot = i;
    pthread_create(&th[i], NULL, run_thread, &t[i]);
  }
  for (unsigned i = 0; i < SLOTS; i++)
    pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double total_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  double sum_ms = (t[0].run.r.wall_time_us + t[1].run.r.wall_time_us) / 1e3;
  for (unsigned i = 0; i < SLOTS; i++) {
    char expect[32];
    snprintf(expect, sizeof expect, "%u\n", (unsigned)(uid_base + i));
    assert_stdout(&t[i].run, expect);
    sandbox_result_free(&t[i].run.r);
  }
  /* Two half-second sleeps side by side, not one after the other: the pair
   * took clearly less than the two runs' own wall times added up (one after
   * the other it would be at least the sum, however loaded the machine). */
  fprintf(stderr, "# two 0.5 s runs in two slots took %.0f ms in all, %.0f ms added up\n", total_ms,
          sum_ms);
  assert_true(total_ms < sum_ms - 300);
}

struct spin_run {
  unsigned slot;
  const char *code;
  uint64_t timeout_ms;
  struct run run;
};

static void *spin_thread(void *arg) {
  struct spin_run *t = arg;
  const char *argv[] = {PY, "-I", "-c", t->code, NULL};
  struct sandbox_limits l = {.timeout_ms = t->timeout_ms};
  run_in_slot(t->slot, argv, &l, NULL, 0, NULL, 0, &t->run);
  return NULL;
}

static void test_cpu_shared_fairly_between_slots(void **state) {
  /* Slot 0 spins 16 processes and slot 1 one process, side by side for the
   * same 1.5 s. With a CPU share per slot (v2 cpu.weight, v1 cpu.shares) the
   * two runs get about the same CPU time; counted per process the bomb would
   * get 16 times the probe's. A ratio from one window, so load from outside
   * the engine (ctest -j2 on a shared 2-CPU machine) scales both alike. */
  if (!is_cgroup())
    skip(); /* no per-slot CPU share without cgroups; spinning 16 would only load the host */
  struct spin_run bomb = {
      .slot = 0,
      .code = "import os, time\nt0 = time.monotonic()\nkids = []\nfor _ in range(15):\n"
              "    pid = os.fork()\n    if pid == 0: break\n    kids.append(pid)\n"
              "while time.monotonic() - t0 < 1.5: pass\n"
              "for k in kids: os.waitpid(k, 0)\n",
      .timeout_ms = scaled_ms(8000)};
  struct spin_run probe = {
      .slot = 1,
      .code = "import time\nt0 = time.monotonic()\nwhile time.monotonic() - t0 < 1.5: pass\n",
      .timeout_ms = scaled_ms(8000)};
  pthread_t a, b;
  warm_zygotes();
  pthread_create(&a, NULL, spin_thread, &bomb);
  pthread_create(&b, NULL, spin_thread, &probe);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  assert_int_equal(bomb.run.rc, 0);
  assert_int_equal(bomb.run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  assert_int_equal(probe.run.rc, 0);
  assert_int_equal(probe.run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  double bomb_ms = bomb.run.r.cpu_time_us / 1e3, probe_ms = probe.run.r.cpu_time_us / 1e3;
  fprintf(stderr,
          "# side by side for 1.5 s: 16 spinning processes in one slot got %.0f ms "
          "of CPU, one in another slot %.0f ms (ratio %.2f; per process it would be 16)\n",
          bomb_ms, probe_ms, probe_ms > 0 ? bomb_ms / probe_ms : 0.0);
  assert_true(probe_ms * 3 >= bomb_ms);
  sandbox_result_free(&bomb.run.r);
  sandbox_result_free(&probe.run.r);
}

static void test_concurrent_runs_see_only_their_own_tmp(void **state) {
  /* Runs share the template's read-only root; what each writes lives in its
   * own /tmp and /dev/shm. Slot 0 writes and waits; slot 1, while slot 0's
   * files exist, writes its own and looks: each sees only its own. */
  static const char code0[] =
      "import os, time\nopen('/tmp/secret-0', 'w').write('0'); open('/dev/shm/secret-0', 'w')\n"
      "time.sleep(1.5)\nprint(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))\n";
  static const char code1[] =
      "import os, time\ntime.sleep(0.5)\nopen('/tmp/secret-1', 'w').write('1')\n"
      "open('/dev/shm/secret-1', 'w')\n"
      "print(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))\n";
  struct spin_run a = {.slot = 0, .code = code0, .timeout_ms = scaled_ms(8000)};
  struct spin_run b = {.slot = 1, .code = code1, .timeout_ms = scaled_ms(8000)};
  pthread_t ta, tb;
  warm_zygotes();
  pthread_create(&ta, NULL, spin_thread, &a);
  pthread_create(&tb, NULL, spin_thread, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_stdout(&a.run, "['secret-0'] ['secret-0']\n");
  assert_stdout(&b.run, "['secret-1'] ['secret-1']\n");
  sandbox_result_free(&a.run.r);
  sandbox_result_free(&b.run.r);
}

int main(void) {
  if (geteuid() != 0) {
    const char *ci = getenv("CI");
    fprintf(stderr, "SKIP: engine tests need root (namespaces, mounts, cgroups)\n");
    if (ci != NULL && strcmp(ci, "true") == 0) {
      fprintf(stderr, "FAIL: CI=true and not root: a skipped root test is a failure\n");
      return 1;
    }
    return 77; /* ctest's SKIP_RETURN_CODE */
  }
  if (read_environment() < 0)
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_killed_by_none_exit_code, test_setup),
      cmocka_unit_test_setup(test_killed_by_memory, test_setup),
      cmocka_unit_test_setup(test_memory_under_limit_runs, test_setup),
      cmocka_unit_test_setup(test_timeout_busy_loop, test_setup),
      cmocka_unit_test_setup(test_timeout_spinning_thread, test_setup),
      cmocka_unit_test_setup(test_timeout_sleep, test_setup),
      cmocka_unit_test_setup(test_timeout_program_never_reads_stdin, test_setup),
      cmocka_unit_test_setup(test_timeout_reading_stdin_forever, test_setup),
      cmocka_unit_test_setup(test_cpu_limit_counts_the_whole_tree, test_setup),
      cmocka_unit_test_setup(test_killed_by_output_limit, test_setup),
      cmocka_unit_test_setup(test_output_limit_on_stderr, test_setup),
      cmocka_unit_test_setup(test_output_exactly_at_limit_is_not_truncated, test_setup),
      cmocka_unit_test_setup(test_killed_by_signal_segv, test_setup),
      cmocka_unit_test_setup(test_killed_by_signal_abort, test_setup),
      cmocka_unit_test_setup(test_children_do_not_survive, test_setup),
      cmocka_unit_test_setup(test_fork_bomb_is_contained, test_setup),
      cmocka_unit_test_setup(test_pids_limit_refuses_fork, test_setup),
      cmocka_unit_test_setup(test_stdin_delivered_byte_exact, test_setup),
      cmocka_unit_test_setup(test_non_utf8_output_preserved, test_setup),
      cmocka_unit_test_setup(test_network_connect_is_permission_error, test_setup),
      cmocka_unit_test_setup(test_network_namespace_has_only_lo, test_setup),
      cmocka_unit_test_setup(test_root_is_read_only, test_setup),
      cmocka_unit_test_setup(test_dev_and_tmp_usable, test_setup),
      cmocka_unit_test_setup(test_unprivileged_uid_and_empty_caps, test_setup),
      cmocka_unit_test_setup(test_proc_shows_only_the_sandbox, test_setup),
      cmocka_unit_test_setup(test_no_host_secrets_in_etc, test_setup),
      cmocka_unit_test_setup(test_no_server_environment, test_setup),
      cmocka_unit_test_setup(test_raising_own_cpu_rlimit_gains_nothing, test_setup),
      cmocka_unit_test_setup(test_only_stdio_fds_inherited, test_setup),
      cmocka_unit_test_setup(test_new_namespaces_and_hostname, test_setup),
      cmocka_unit_test_setup(test_seccomp_denies_dangerous_syscalls, test_setup),
      cmocka_unit_test_setup(test_subprocess_and_threads_work, test_setup),
      cmocka_unit_test_setup(test_matplotlib_plots_without_setup, test_setup),
      cmocka_unit_test_setup(test_file_size_limit, test_setup),
      cmocka_unit_test_setup(test_open_files_limit, test_setup),
      cmocka_unit_test_setup(test_tmp_is_size_limited, test_setup),
      cmocka_unit_test_setup(test_extra_mount_is_read_only, test_setup),
      cmocka_unit_test_setup(test_bad_mount_target_refused, test_setup),
      cmocka_unit_test_setup(test_site_packages_mount_is_on_sys_path, test_setup),
      cmocka_unit_test_setup(test_network_profile_runs_in_the_given_namespace, test_setup),
      cmocka_unit_test_setup(test_missing_program_is_setup_error, test_setup),
      cmocka_unit_test_setup(test_slots_run_concurrently, test_setup),
      cmocka_unit_test_setup(test_cpu_shared_fairly_between_slots, test_setup),
      cmocka_unit_test_setup(test_concurrent_runs_see_only_their_own_tmp, test_setup),
  };
  return cmocka_run_group_tests_name("engine", tests, group_setup, group_teardown);
}
