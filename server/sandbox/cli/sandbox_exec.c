/* sandbox_exec.c: runs one command in the sandbox, without the service, and
 * prints the result: for debugging the engine and for its tests.
 *
 *   sandbox-exec [options] -- /usr/bin/python3 -I -c 'print(1)'
 *
 * Without --workspace it makes a fresh one under the state directory and
 * removes it afterwards. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "cleanup.h"
#include "killed_by.h"
#include "sandbox.h"
#include "text.h"

struct exec_args {
  bool json;
  struct sandbox_spec spec;
  struct sandbox_engine_config config;
  const char *env[65];
  size_t n_env;
  struct sandbox_mount mounts[SANDBOX_MAX_EXTRA_MOUNTS];
  const char *stdin_path;
  const char *workspace;
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: sandbox-exec [options] -- COMMAND [ARG]...\n"
          "Runs COMMAND (an absolute path) in a fresh sandbox and reports how it ended.\n"
          "  --json              print the result as one JSON object on stdout\n"
          "  --timeout-ms N      wall-clock limit (default %d)\n"
          "  --cpu-ms N          CPU time of the whole tree (default: the timeout)\n"
          "  --memory-mb N       memory of the whole tree (default %llu)\n"
          "  --output-kb N       bytes per output stream, in KiB (default %llu)\n"
          "  --output-bytes N    bytes per output stream\n"
          "  --max-procs N       processes and threads (default %d)\n"
          "  --file-size-mb N    largest file the program may write (default %llu)\n"
          "  --open-files N      open file descriptors (default %d)\n"
          "  --tmp-mb N          size of /tmp and /dev/shm (default %llu)\n"
          "  --stdin FILE        bytes for the program's stdin (default: none)\n"
          "  --env NAME=VALUE    add to the environment (repeatable)\n"
          "  --mount SRC:DST     extra read-only bind mount (repeatable)\n"
          "  --workspace DIR     host directory for /workspace (default: a fresh one)\n"
          "  --state-dir DIR     engine state (default /var/lib/sandboxd)\n"
          "  --backend NAME      auto, cgroup-v2, cgroup-v1 or rlimit (default auto)\n"
          "  --zygote MODULES    fork the run from a zygote that imported MODULES\n"
          "                      (comma-separated, may be \"\"); argv: python3 [-u] SCRIPT\n"
          "  --uid-base N        sandbox uid (default %d)\n"
          "Exit status: 0 when the run happened (whatever the program did), 1 on a\n"
          "sandbox error, 2 on a usage error.\n",
          SANDBOX_DEFAULT_TIMEOUT_MS, SANDBOX_DEFAULT_MEMORY_BYTES >> 20,
          SANDBOX_DEFAULT_OUTPUT_BYTES >> 10, SANDBOX_DEFAULT_MAX_PROCESSES,
          SANDBOX_DEFAULT_FILE_SIZE_BYTES >> 20, SANDBOX_DEFAULT_OPEN_FILES,
          SANDBOX_DEFAULT_TMP_BYTES >> 20, SANDBOX_DEFAULT_UID_BASE);
}

static int parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || s[0] == '-' || s[0] == '\0' || v == 0 || v > max) {
    fprintf(stderr, "sandbox-exec: %s wants a whole number from 1 to %" PRIu64 "\n", opt, max);
    return -1;
  }
  *out = v;
  return 0;
}

/* The numeric options: where each goes, its largest value and its unit. */
enum {
  OPT_JSON = 256,
  OPT_STDIN,
  OPT_ENV,
  OPT_MOUNT,
  OPT_WORKSPACE,
  OPT_STATE,
  OPT_BACKEND,
  OPT_ZYGOTE,
  OPT_HELP,
  OPT_NUMBER
};
struct number_opt {
  const char *name;
  uint64_t max, scale;
  size_t offset; /* in struct sandbox_limits; SIZE_MAX: --uid-base */
};
static const struct number_opt number_opts[] = {
    {"timeout-ms", 86400000, 1, offsetof(struct sandbox_limits, timeout_ms)},
    {"cpu-ms", 86400000, 1, offsetof(struct sandbox_limits, cpu_time_ms)},
    {"memory-mb", 1 << 20, 1 << 20, offsetof(struct sandbox_limits, memory_bytes)},
    {"output-kb", 1 << 20, 1 << 10, offsetof(struct sandbox_limits, output_bytes)},
    {"output-bytes", 1ULL << 30, 1, offsetof(struct sandbox_limits, output_bytes)},
    {"max-procs", 100000, 1, offsetof(struct sandbox_limits, max_processes)},
    {"file-size-mb", 1 << 20, 1 << 20, offsetof(struct sandbox_limits, file_size_bytes)},
    {"open-files", 1 << 20, 1, offsetof(struct sandbox_limits, open_files)},
    {"tmp-mb", 1 << 20, 1 << 20, offsetof(struct sandbox_limits, tmp_bytes)},
    {"uid-base", 65000, 1, SIZE_MAX},
};
#define N_NUMBER_OPTS (sizeof number_opts / sizeof number_opts[0])

static int set_number(struct exec_args *a, const struct number_opt *o, const char *value) {
  char opt[32];
  uint64_t v;
  snprintf(opt, sizeof opt, "--%s", o->name);
  if (parse_u64(opt, value, o->max, &v) < 0)
    return -1;
  if (o->offset == SIZE_MAX)
    a->config.uid_base = (uid_t)v;
  else
    *(uint64_t *)((char *)&a->spec.limits + o->offset) = v * o->scale;
  return 0;
}

static int set_backend(struct exec_args *a, const char *name) {
  static const struct {
    const char *name;
    enum sandbox_backend backend;
  } names[] = {{"auto", SANDBOX_BACKEND_AUTO},
               {"cgroup-v2", SANDBOX_BACKEND_CGROUP_V2},
               {"cgroup-v1", SANDBOX_BACKEND_CGROUP_V1},
               {"rlimit", SANDBOX_BACKEND_RLIMIT}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].name) == 0) {
      a->config.backend = names[i].backend;
      return 0;
    }
  fprintf(stderr, "sandbox-exec: --backend is auto, cgroup-v2, cgroup-v1 or rlimit\n");
  return -1;
}

static int add_mount(struct exec_args *a, char *value) {
  char *colon = strchr(value, ':');
  if (colon == NULL || a->spec.n_mounts >= SANDBOX_MAX_EXTRA_MOUNTS) {
    fprintf(stderr, "sandbox-exec: --mount SRC:DST (at most %d)\n", SANDBOX_MAX_EXTRA_MOUNTS);
    return -1;
  }
  *colon = '\0';
  a->mounts[a->spec.n_mounts++] = (struct sandbox_mount){.source = value, .target = colon + 1};
  return 0;
}

/* One option; returns 0, -1 on a usage error, 1 for --help. */
static int take_option(struct exec_args *a, int c, char *value) {
  if (c >= OPT_NUMBER && c < OPT_NUMBER + (int)N_NUMBER_OPTS)
    return set_number(a, &number_opts[c - OPT_NUMBER], value);
  switch (c) {
  case OPT_JSON:
    a->json = true;
    return 0;
  case OPT_STDIN:
    a->stdin_path = value;
    return 0;
  case OPT_ENV:
    if (a->n_env >= 64) {
      fprintf(stderr, "sandbox-exec: at most 64 --env\n");
      return -1;
    }
    a->env[a->n_env++] = value;
    return 0;
  case OPT_MOUNT:
    return add_mount(a, value);
  case OPT_WORKSPACE:
    a->workspace = value;
    return 0;
  case OPT_STATE:
    a->config.state_dir = value;
    return 0;
  case OPT_BACKEND:
    return set_backend(a, value);
  case OPT_ZYGOTE:
    a->config.zygote.enabled = true;
    a->config.zygote.preload = value;
    a->spec.zygote = true;
    return 0;
  case OPT_HELP:
    return 1;
  default:
    return -1;
  }
}

/* Returns 0, 1 after --help, 2 on a usage error. */
static int parse_args(int argc, char **argv, struct exec_args *a) {
  struct option opts[N_NUMBER_OPTS + 10] = {
      {"json", no_argument, NULL, OPT_JSON},
      {"stdin", required_argument, NULL, OPT_STDIN},
      {"env", required_argument, NULL, OPT_ENV},
      {"mount", required_argument, NULL, OPT_MOUNT},
      {"workspace", required_argument, NULL, OPT_WORKSPACE},
      {"state-dir", required_argument, NULL, OPT_STATE},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"zygote", required_argument, NULL, OPT_ZYGOTE},
      {"help", no_argument, NULL, OPT_HELP},
  };
  for (size_t i = 0; i < N_NUMBER_OPTS; i++)
    opts[9 + i] =
        (struct option){number_opts[i].name, required_argument, NULL, OPT_NUMBER + (int)i};
  int c;
  while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    int rc = take_option(a, c, optarg);
    if (rc != 0) {
      usage(rc > 0 ? stdout : stderr);
      return rc > 0 ? 1 : 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  a->spec.argv = (const char *const *)&argv[optind];
  a->spec.env = a->env;
  a->spec.mounts = a->mounts;
  return 0;
}

/* A file the CLI reads whole (--stdin FILE): at most READ_ALL_MAX. */
#define READ_ALL_MAX ((size_t)2 << 30)

static uint8_t *read_all(const char *path, size_t *len) {
  cleanup_fclose FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  struct sbx_buf b = {0};
  for (;;) {
    if (sbx_buf_reserve(&b, 65536, READ_ALL_MAX) < 0) {
      sbx_buf_free(&b);
      return NULL;
    }
    size_t r = fread(b.data + b.len, 1, b.cap - b.len, f);
    b.len += r;
    if (r == 0)
      break;
  }
  return sbx_buf_steal(&b, len);
}

/* Output bytes as JSON text: invalid UTF-8 becomes U+FFFD. */
static json_t *text_json(const uint8_t *data, size_t len) {
  size_t n;
  cleanup_free char *text = text_utf8_repair(data, len, &n);
  return text != NULL ? json_stringn_nocheck(text, n) : NULL;
}

static void print_json(const struct sandbox_result *r, const struct sandbox_report *rep) {
  const struct sandbox_limits *l = &r->limits;
  json_t *o = json_pack(
      "{s:s, s:i, s:i, s:o, s:b, s:o, s:b, s:I, s:I, s:f, s:f, s:I, s:s, s:b, s:b, s:b,"
      " s:{s:I, s:I, s:I, s:I, s:I}}",
      "killed_by", killed_by_name(r->killed_by), "exit_code", r->exit_code, "signal", r->signal,
      "stdout", text_json(r->stdout_data, r->stdout_len), "stdout_truncated", r->stdout_truncated,
      "stderr", text_json(r->stderr_data, r->stderr_len), "stderr_truncated", r->stderr_truncated,
      "stdout_bytes", (json_int_t)r->stdout_len, "stderr_bytes", (json_int_t)r->stderr_len,
      "wall_time_ms", (double)r->wall_time_us / 1000.0, "cpu_time_ms",
      (double)r->cpu_time_us / 1000.0, "peak_memory_bytes", (json_int_t)r->peak_memory_bytes,
      "backend", sandbox_backend_name(r->backend), "memory_per_process", r->memory_per_process,
      "seccomp", rep->seccomp, "cpu_time_exceeded", r->cpu_time_exceeded, "limits", "timeout_ms",
      (json_int_t)l->timeout_ms, "cpu_time_ms", (json_int_t)l->cpu_time_ms, "memory_bytes",
      (json_int_t)l->memory_bytes, "output_bytes", (json_int_t)l->output_bytes, "max_processes",
      (json_int_t)l->max_processes);
  if (o == NULL || json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(12)) < 0)
    fprintf(stderr, "sandbox-exec: out of memory writing JSON\n");
  fputc('\n', stdout);
  json_decref(o);
}

static void print_human(const struct sandbox_result *r) {
  fwrite(r->stdout_data, 1, r->stdout_len, stdout);
  fflush(stdout);
  fwrite(r->stderr_data, 1, r->stderr_len, stderr);
  fprintf(stderr,
          "--- sandbox: killed_by=%s exit_code=%d signal=%d wall=%.1fms cpu=%.1fms "
          "peak=%.1fMiB backend=%s%s%s%s\n",
          killed_by_name(r->killed_by), r->exit_code, r->signal, (double)r->wall_time_us / 1000.0,
          (double)r->cpu_time_us / 1000.0, (double)r->peak_memory_bytes / 1048576.0,
          sandbox_backend_name(r->backend),
          r->memory_per_process ? " (memory limited per process)" : "",
          r->stdout_truncated ? " stdout-truncated" : "",
          r->stderr_truncated ? " stderr-truncated" : "");
}

/* A fresh workspace under the state directory, owned by the slot's uid.
 * Returns its state-dir fd (for removal), -1 on failure. */
static int make_workspace(const struct exec_args *a, uid_t uid, char *path, size_t len) {
  const char *state = a->config.state_dir ? a->config.state_dir : "/var/lib/sandboxd";
  snprintf(path, len, "%s/exec-workspace.XXXXXX", state);
  if (mkdtemp(path) == NULL || chown(path, uid, uid) < 0 || chmod(path, 0700) < 0) {
    fprintf(stderr, "sandbox-exec: workspace %s: %s\n", path, strerror(errno));
    return -1;
  }
  return open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Runs the command and prints the result; returns the exit status. */
static int run(const struct exec_args *a, struct sandbox_engine *engine) {
  const struct sandbox_report *rep = sandbox_engine_report(engine);
  char made[4200] = "";
  cleanup_close int state_fd = -1;
  struct sandbox_spec spec = a->spec;
  spec.workspace_dir = a->workspace;
  if (a->workspace == NULL) {
    if ((state_fd = make_workspace(a, rep->uid_base, made, sizeof made)) < 0)
      return 1;
    spec.workspace_dir = made;
  }
  struct sandbox_result result;
  struct sandbox_error err = {0};
  int rc = sandbox_run(engine, 0, &spec, &result, &err);
  if (made[0] != '\0' && sandbox_remove_tree(state_fd, strrchr(made, '/') + 1) < 0)
    fprintf(stderr, "sandbox-exec: could not remove %s: %s\n", made, strerror(errno));
  if (rc < 0) {
    fprintf(stderr, "sandbox-exec: %s\n", err.msg);
    return 1;
  }
  if (a->json)
    print_json(&result, rep);
  else
    print_human(&result);
  sandbox_result_free(&result);
  return 0;
}

int main(int argc, char **argv) {
  struct exec_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != 0)
    return rc == 1 ? 0 : 2;
  cleanup_free uint8_t *stdin_data = NULL;
  if (a.stdin_path != NULL) {
    stdin_data = read_all(a.stdin_path, &a.spec.stdin_len);
    if (stdin_data == NULL) {
      fprintf(stderr, "sandbox-exec: read %s: %s\n", a.stdin_path, strerror(errno));
      return 1;
    }
    a.spec.stdin_data = stdin_data;
  }
  struct sandbox_error err = {0};
  struct sandbox_engine *engine;
  if (sandbox_engine_new(&a.config, &engine, &err) < 0) {
    fprintf(stderr, "sandbox-exec: %s\n", err.msg);
    return 1;
  }
  rc = run(&a, engine);
  sandbox_engine_free(engine);
  return rc;
}
