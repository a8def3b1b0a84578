/* engine_test_common.c: the engine of a group and running a program in a
 * slot, for every family of engine_test (engine_test_common.h says what
 * each helper is for). Every run is checked here the same way: whatever
 * happened, no process of the slot's uid survives it but its zygote. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_test_common.h"
#include "killed_by.h"

struct sandbox_engine *engine;
static const char state_dir_template[] = "/tmp/sandboxd-engine-test.XXXXXX";
char state_dir[sizeof state_dir_template];
int state_fd = -1;
static enum sandbox_backend backend_wanted = SANDBOX_BACKEND_AUTO;
uid_t uid_base = 61000;
static double time_scale = 1.0;
bool zygote_mode;
struct sandbox_zygote_config zygote_config;

uint64_t scaled_ms(uint64_t ms) {
  return (uint64_t)((double)ms * time_scale + 0.5);
}

bool is_cgroup(void) {
  return sandbox_engine_report(engine)->backend != SANDBOX_BACKEND_RLIMIT;
}

/* The environment: backend, uids, time scale, mode. Once, before any group. */
int read_environment(void) {
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
int engine_start(void) {
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

int group_setup(void **state) {
  memset(&zygote_config, 0, sizeof zygote_config);
  if (zygote_mode)
    zygote_config = (struct sandbox_zygote_config){.enabled = true, .preload = ZYGOTE_PRELOAD};
  return engine_start();
}

int group_teardown(void **state) {
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

int test_setup(void **state) {
  return engine == NULL ? -1 : 0;
}

struct uid_processes scan_uid_processes(uid_t uid) {
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

void write_text(const char *path, const char *text, uid_t owner) {
  FILE *f = fopen(path, "we");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chown(path, owner, owner), 0);
}

const char *make_workspace(unsigned slot, char *buf, size_t size) {
  snprintf(buf, size, "%s/ws.XXXXXX", state_dir);
  assert_non_null(mkdtemp(buf));
  assert_int_equal(chown(buf, uid_base + slot, uid_base + slot), 0);
  return buf;
}

const char *make_script_workspace(unsigned slot, const char *code, char *buf, size_t size) {
  char path[FILE_PATH];
  make_workspace(slot, buf, size);
  snprintf(path, sizeof path, "%s/main.py", buf);
  write_text(path, code, uid_base + slot);
  return buf;
}

void remove_workspace(const char *path) {
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
    char path[FILE_PATH];
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

void run_opts_in_slot(unsigned slot, const char *const *argv, const struct run_opts *o,
                      struct run *out) {
  char path[WS_PATH];
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

void run_in_slot(unsigned slot, const char *const *argv, const struct sandbox_limits *limits,
                 const void *in, size_t in_len, const struct sandbox_mount *mounts, size_t n_mounts,
                 struct run *out) {
  struct run_opts o = {
      .limits = limits, .in = in, .in_len = in_len, .mounts = mounts, .n_mounts = n_mounts};
  run_opts_in_slot(slot, argv, &o, out);
}

void run_py_limits(const char *code, const struct sandbox_limits *limits, const void *in,
                   size_t in_len, struct run *out) {
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  run_in_slot(0, argv, limits, in, in_len, NULL, 0, out);
}

void run_py(const char *code, struct run *out) {
  run_py_limits(code, NULL, NULL, 0, out);
}

void assert_stdout(const struct run *run, const char *expected) {
  assert_int_equal(run->rc, 0);
  if (run->r.stdout_len != strlen(expected) ||
      memcmp(run->r.stdout_data, expected, run->r.stdout_len) != 0) {
    fprintf(stderr, "stdout: %.*s\nstderr: %.*s\n", (int)run->r.stdout_len,
            (const char *)run->r.stdout_data, (int)run->r.stderr_len,
            (const char *)run->r.stderr_data);
    fail_msg("stdout differs from '%s'", expected);
  }
}

void expect_py_stdout(const char *code, const struct sandbox_limits *limits, const char *expected) {
  struct run run;
  run_py_limits(code, limits, NULL, 0, &run);
  assert_stdout(&run, expected);
  sandbox_result_free(&run.r);
}

void skip_in_zygote_mode(const char *why) {
  if (!zygote_mode)
    return;
  fprintf(stderr, "# skipped in zygote mode: %s\n", why);
  skip();
}

void warm_zygotes(void) {
  for (unsigned i = 0; zygote_mode && i < SLOTS; i++) {
    struct sandbox_error err = {0};
    if (sandbox_zygote_warm(engine, i, &err) < 0)
      fail_msg("warm slot %u: %s", i, err.msg);
  }
}

double ms_since(const struct timespec *t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

void stream_collect(void *arg, int stream, const uint8_t *data, size_t len) {
  struct stream_log *log = arg;
  uint8_t *buf = stream == 1 ? log->out : log->err;
  size_t *n = stream == 1 ? &log->out_len : &log->err_len;
  if (stream == 1 && log->out_len == 0)
    log->first_ms = ms_since(&log->start);
  size_t take = len < sizeof log->out - *n ? len : sizeof log->out - *n;
  memcpy(buf + *n, data, take);
  *n += take;
  log->pieces++;
  if (stream != 1)
    return;
  if (log->cancel_on != NULL && memmem(log->out, log->out_len, log->cancel_on, 3) != NULL) {
    uint64_t one = 1;
    assert_int_equal(write(log->cancel_fd, &one, sizeof one), sizeof one);
    log->cancel_on = NULL;
  }
  if (log->kill_on != NULL && memmem(log->out, log->out_len, log->kill_on, 2) != NULL) {
    kill(log->kill_pid, SIGKILL);
    log->kill_on = NULL;
  }
}
