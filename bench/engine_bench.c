/* engine_bench.c: the sandbox engine's overhead over the bare interpreter.
 *
 * Runs `/usr/bin/python3 -I hello.py` bare (posix_spawn, output to a pipe)
 * and through sandbox_run, interleaved so that the noise of a shared machine
 * hits both alike, and prints the medians and their ratio. Also times the
 * bare namespace creation (clone with the same flags, child exits at once).
 *
 *   build/bin/engine-bench [--runs N] [--json] [--zygote MODULES] [--code PYTHON] [--cell]
 *
 * --zygote: the sandboxed runs are forked from a zygote that imported
 * MODULES (docs/ZYGOTE.md); --code: the program instead of print('hello')
 * (the same for both sides); --cell: also runs the script the way sandboxd
 * does (through sandboxd_cell, docs/INTERPRETER.md: "python3 -u -c
 * SANDBOX_CELL_LOADER script hello.py"), interleaved, and prints its ratios
 * to the bare interpreter and to the plain sandboxed run (with --json: cell_ms
 * and cell_ratio).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"

extern char **environ;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time (ms) of this process and its reaped children: counts the kernel's
 * work for namespaces, mounts and exit too, and unlike wall time it hardly
 * moves when other processes load the machine. */
static double cpu_ms(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  double us = 0;
  struct rusage *r[2] = {&self, &kids};
  for (int i = 0; i < 2; i++)
    us += (double)(r[i]->ru_utime.tv_sec + r[i]->ru_stime.tv_sec) * 1e6 +
          (double)(r[i]->ru_utime.tv_usec + r[i]->ru_stime.tv_usec);
  return us / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double bare_run(const char *script) {
  int p[2];
  if (pipe(p) < 0)
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  char *argv[] = {"/usr/bin/python3", "-I", (char *)script, NULL};
  double t0 = now_ms();
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0)
    return -1;
  close(p[1]);
  char buf[4096];
  while (read(p[0], buf, sizeof buf) > 0)
    ;
  int st;
  waitpid(pid, &st, 0);
  double t = now_ms() - t0;
  close(p[0]);
  posix_spawn_file_actions_destroy(&fa);
  return t;
}

static double ns_only(void) {
  double t0 = now_ms();
  pid_t pid = (pid_t)syscall(SYS_clone,
                             CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                                 CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                             NULL, NULL, NULL, NULL);
  if (pid == 0)
    _exit(0);
  int st;
  waitpid(pid, &st, 0);
  return now_ms() - t0;
}

int main(int argc, char **argv) {
  int runs = 40;
  int json = 0;
  int only_sandbox = 0; /* for profilers: no bare runs */
  const char *zygote = NULL, *code = "print('hello')\n";
  bool cell = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--only-sandbox") == 0)
      only_sandbox = 1;
    else if (strcmp(argv[i], "--zygote") == 0 && i + 1 < argc)
      zygote = argv[++i];
    else if (strcmp(argv[i], "--code") == 0 && i + 1 < argc)
      code = argv[++i];
    else if (strcmp(argv[i], "--cell") == 0)
      cell = true;
    else {
      fprintf(stderr, "usage: engine-bench [--runs N] [--json] [--only-sandbox] [--zygote MODULES]"
                      " [--code PYTHON] [--cell]\n");
      return 2;
    }
  }
  if (runs < 3)
    runs = 3;
  char state[] = "/tmp/sandboxd-bench.XXXXXX";
  if (mkdtemp(state) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  struct sandbox_engine_config cfg = {.state_dir = state, .slots = 1, .uid_base = 61200};
  cfg.zygote.enabled = zygote != NULL;
  cfg.zygote.preload = zygote;
  cfg.zygote.max_forks = 1000000;
  cfg.zygote.max_age_ms = 3600 * 1000;
  struct sandbox_engine *engine;
  struct sandbox_error err = {0};
  if (sandbox_engine_new(&cfg, &engine, &err) < 0) {
    fprintf(stderr, "engine-bench: %s\n", err.msg);
    return 1;
  }
  char ws[4200], script[4300];
  snprintf(ws, sizeof ws, "%s/ws", state);
  mkdir(ws, 0755);
  snprintf(script, sizeof script, "%s/hello.py", ws);
  FILE *f = fopen(script, "w");
  fputs(code, f);
  fclose(f);
  const char *sargv[] = {"/usr/bin/python3", "-I", "/workspace/hello.py", NULL};
  const char *zargv[] = {"/usr/bin/python3", "-u", "/workspace/hello.py", NULL};
  struct sandbox_spec spec = {
      .argv = zygote ? zargv : sargv, .workspace_dir = ws, .zygote = zygote != NULL};
  const char *cargv[] = {"/usr/bin/python3",    "-u", "-c", SANDBOX_CELL_LOADER, "script",
                         "/workspace/hello.py", NULL};
  struct sandbox_spec cell_spec = {
      .argv = zygote ? zargv : cargv, .workspace_dir = ws, .zygote = zygote != NULL};
  double *cells = calloc((size_t)runs, sizeof(double));

  double *bare = calloc((size_t)runs, sizeof(double));
  double *sbx = calloc((size_t)runs, sizeof(double));
  double *ns = calloc((size_t)runs, sizeof(double));
  double cpu_bare = 0, cpu_sbx = 0;
  /* Warm the page cache and the slot's cgroup once. */
  bare_run(script);
  struct sandbox_result r;
  if (sandbox_run(engine, 0, &spec, &r, &err) < 0) {
    fprintf(stderr, "engine-bench: %s\n", err.msg);
    return 1;
  }
  sandbox_result_free(&r);
  if (only_sandbox) {
    for (int i = 0; i < runs; i++) {
      if (sandbox_run(engine, 0, &spec, &r, &err) < 0) {
        fprintf(stderr, "engine-bench: %s\n", err.msg);
        return 1;
      }
      sandbox_result_free(&r);
    }
    sandbox_engine_free(engine);
    return 0;
  }
  for (int i = 0; i < runs; i++) {
    double c0 = cpu_ms();
    bare[i] = bare_run(script);
    double c1 = cpu_ms();
    double t0 = now_ms();
    if (sandbox_run(engine, 0, &spec, &r, &err) < 0) {
      fprintf(stderr, "engine-bench: %s\n", err.msg);
      return 1;
    }
    sbx[i] = now_ms() - t0;
    double c2 = cpu_ms();
    cpu_bare += c1 - c0;
    cpu_sbx += c2 - c1;
    if (r.exit_code != 0 || (strcmp(code, "print('hello')\n") == 0 &&
                             (r.stdout_len != 6 || memcmp(r.stdout_data, "hello\n", 6) != 0))) {
      fprintf(stderr, "engine-bench: unexpected output: %.*s\n", (int)r.stderr_len,
              (const char *)r.stderr_data);
      return 1;
    }
    sandbox_result_free(&r);
    ns[i] = ns_only();
    if (cell) {
      t0 = now_ms();
      if (sandbox_run(engine, 0, &cell_spec, &r, &err) < 0) {
        fprintf(stderr, "engine-bench: %s\n", err.msg);
        return 1;
      }
      cells[i] = now_ms() - t0;
      if (r.exit_code != 0) {
        fprintf(stderr, "engine-bench: --cell: %.*s\n", (int)r.stderr_len,
                (const char *)r.stderr_data);
        return 1;
      }
      sandbox_result_free(&r);
    }
  }
  double mb = median(bare, runs), ms = median(sbx, runs), mn = median(ns, runs);
  const char *backend = sandbox_engine_report(engine)->backend_name;
  double cb = cpu_bare / runs, cs = cpu_sbx / runs;
  double mc = cell ? median(cells, runs) : 0;
  if (json) {
    printf("{\"runs\":%d,\"backend\":\"%s\",\"bare_ms\":%.3f,\"sandbox_ms\":%.3f,"
           "\"namespaces_ms\":%.3f,\"ratio\":%.4f,\"bare_cpu_ms\":%.3f,\"sandbox_cpu_ms\":%.3f,"
           "\"cpu_ratio\":%.4f",
           runs, backend, mb, ms, mn, ms / mb, cb, cs, cs / cb);
    if (cell)
      printf(",\"cell_ms\":%.3f,\"cell_ratio\":%.4f", mc, mc / mb);
    printf("}\n");
  } else
    printf("engine-bench: %d interleaved runs of python3 -I hello.py (%s)\n"
           "  bare interpreter     median %7.2f ms wall, mean %6.2f ms CPU\n"
           "  through the sandbox  median %7.2f ms wall, mean %6.2f ms CPU\n"
           "  namespaces alone     median %7.2f ms wall\n"
           "  ratio sandbox/bare   %.3f wall (goal <= 1.10), %.3f CPU\n",
           runs, backend, mb, cb, ms, cs, mn, ms / mb, cs / cb);
  if (cell && !json)
    printf("  through sandboxd_cell median %7.2f ms wall: ratio %.3f to bare, %.3f to the plain "
           "sandboxed run\n",
           mc, mc / mb, mc / ms);
  unlink(script);
  rmdir(ws);
  sandbox_engine_free(engine);
  sandbox_remove_tree(AT_FDCWD, state);
  free(bare);
  free(sbx);
  free(ns);
  free(cells);
  return 0;
}
