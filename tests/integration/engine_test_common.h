/* engine_test_common.h: what the families of engine_test share (the engine
 * of a group, running a program in a slot, the checks every run gets).
 *
 * engine_test.c holds main and the meaning of the environment variables;
 * each engine_test_FAMILY.c holds one family of tests and exports its list
 * (struct engine_tests). The helpers assert with cmocka: they are called
 * from inside a test only. Nothing here may relax a check a test makes:
 * run_opts_in_slot asserts, after every run, that no process of the slot's
 * uid is left but its zygote. */
#ifndef SANDBOXD_ENGINE_TEST_COMMON_H
#define SANDBOXD_ENGINE_TEST_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <sys/types.h>
#include <time.h>

#include <cmocka.h>

#include "sandbox.h"

#define PY "/usr/bin/python3"
#define SLOTS 2
/* What the zygotes import: the data-analysis modules users start with. */
#define ZYGOTE_PRELOAD "numpy,matplotlib.pyplot"
/* The script a "-c CODE" becomes in zygote mode, inside the sandbox. */
#define ZYGOTE_SCRIPT "main.py"
/* The site directory a requirements store's packages are mounted over. */
#define SITE_DIR "/usr/local/lib/python3.11/dist-packages"
/* Room for a path under state_dir (a workspace and a file in it). */
#define WS_PATH 4200
#define FILE_PATH 4300

/* The start of a Python program that leaves sleepers behind the ways a
 * program may try to outlive its run: a new session, a double fork. */
#define PY_START_SLEEPERS                                                                          \
  "import os, subprocess, time\n"                                                                  \
  "subprocess.Popen(['/bin/sleep', '1000'], start_new_session=True)\n"                             \
  "if os.fork() == 0:\n"                                                                           \
  "    os.setsid()\n"                                                                              \
  "    if os.fork() == 0:\n"                                                                       \
  "        time.sleep(1000)\n"                                                                     \
  "    os._exit(0)\n"

/* One family's tests, for main to run in a group. */
struct engine_tests {
  const struct CMUnitTest *tests;
  size_t n;
};
#define ENGINE_TESTS(a)                                                                            \
  { (a), sizeof(a) / sizeof((a)[0]) }

extern const struct engine_tests engine_limits_tests, engine_io_tests, engine_net_tests,
    engine_isolation_tests, engine_fs_tests, engine_slots_tests, engine_zygote_off_tests,
    engine_zygote_tests, engine_zygote_recycle_tests, engine_zygote_bad_preload_tests;
int group_setup_recycle(void **state);
int group_setup_bad_preload(void **state);

/* The engine of the running group and what it was made with. */
extern struct sandbox_engine *engine;
extern char state_dir[];
extern int state_fd;
extern uid_t uid_base;
/* SANDBOX_TEST_ZYGOTE=1: Python programs run forked from zygotes. */
extern bool zygote_mode;
/* The zygote configuration of the engine the next group makes. */
extern struct sandbox_zygote_config zygote_config;

int read_environment(void);
int engine_start(void);
int group_setup(void **state);
int group_teardown(void **state);
int test_setup(void **state);

/* A wall-time bound or timeout of the tests, stretched on slow machines. */
uint64_t scaled_ms(uint64_t ms);
bool is_cgroup(void);

struct run {
  struct sandbox_result r;
  int rc;
  struct sandbox_error err;
};

/* Processes on the host owned by uid: the zygote of the slot (a child of
 * this process: the engine started it) is told apart from everything else,
 * which must be gone once a run is over. (While a cold run is under way,
 * its init is such a child too: count between runs only.) */
struct uid_processes {
  int others, zygotes;
  pid_t zygote;
};
struct uid_processes scan_uid_processes(uid_t uid);

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

void write_text(const char *path, const char *text, uid_t owner);
/* A fresh workspace for slot under state_dir; returns its path in buf. */
const char *make_workspace(unsigned slot, char *buf, size_t size);
/* A fresh workspace for slot holding code as main.py; its path in buf. */
const char *make_script_workspace(unsigned slot, const char *code, char *buf, size_t size);
void remove_workspace(const char *path);

void run_opts_in_slot(unsigned slot, const char *const *argv, const struct run_opts *o,
                      struct run *out);
void run_in_slot(unsigned slot, const char *const *argv, const struct sandbox_limits *limits,
                 const void *in, size_t in_len, const struct sandbox_mount *mounts, size_t n_mounts,
                 struct run *out);
/* "python3 -I -c code" in slot 0. */
void run_py_limits(const char *code, const struct sandbox_limits *limits, const void *in,
                   size_t in_len, struct run *out);
void run_py(const char *code, struct run *out);
void assert_stdout(const struct run *run, const char *expected);
/* run_py_limits, then its stdout is exactly expected. */
void expect_py_stdout(const char *code, const struct sandbox_limits *limits, const char *expected);

/* A test whose program a zygote cannot run says why, then skips. */
void skip_in_zygote_mode(const char *why);
/* Starts every slot's zygote (zygote mode), so that runs started side by
 * side start together, not one after a zygote's start. */
void warm_zygotes(void);

double ms_since(const struct timespec *t0);

/* What a run's on_output saw (stream_collect), and what it does on the way. */
struct stream_log {
  struct timespec start;
  uint8_t out[4096], err[4096];
  size_t out_len, err_len;
  int pieces;
  double first_ms; /* when the first piece of stdout came, since start */
  /* Written (an eventfd) when stdout shows cancel_on; -1: never. */
  int cancel_fd;
  const char *cancel_on;
  /* Killed (SIGKILL) when stdout shows kill_on; 0: never. */
  pid_t kill_pid;
  const char *kill_on;
};
/* sandbox_stream.on_output: on the run's thread, never blocking. */
void stream_collect(void *arg, int stream, const uint8_t *data, size_t len);

#endif
