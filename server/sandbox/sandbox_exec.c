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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_text.h"
#include "sandbox.h"

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

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  size_t cap = 65536, n = 0;
  uint8_t *buf = malloc(cap);
  while (buf != NULL) {
    if (n == cap) {
      uint8_t *b = cap > (1u << 30) ? NULL : realloc(buf, cap * 2);
      if (b == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  fclose(f);
  *len = n;
  return buf;
}

static void print_json(const struct sandbox_result *r, const struct sandbox_report *rep) {
  printf("{\"killed_by\":\"%s\",\"exit_code\":%d,\"signal\":%d,", sandbox_killed_by_name(r->killed_by),
         r->exit_code, r->signal);
  printf("\"stdout\":");
  json_write_string(stdout, r->stdout_data, r->stdout_len);
  printf(",\"stdout_truncated\":%s,\"stderr\":", r->stdout_truncated ? "true" : "false");
  json_write_string(stdout, r->stderr_data, r->stderr_len);
  printf(",\"stderr_truncated\":%s,", r->stderr_truncated ? "true" : "false");
  printf("\"stdout_bytes\":%zu,\"stderr_bytes\":%zu,", r->stdout_len, r->stderr_len);
  printf("\"wall_time_ms\":%.3f,\"cpu_time_ms\":%.3f,\"peak_memory_bytes\":%" PRIu64 ",",
         (double)r->wall_time_us / 1000.0, (double)r->cpu_time_us / 1000.0, r->peak_memory_bytes);
  printf("\"backend\":\"%s\",\"memory_per_process\":%s,\"seccomp\":%s,", sandbox_backend_name(r->backend),
         r->memory_per_process ? "true" : "false", rep->seccomp ? "true" : "false");
  printf("\"limits\":{\"timeout_ms\":%" PRIu64 ",\"cpu_time_ms\":%" PRIu64
         ",\"memory_bytes\":%" PRIu64 ",\"output_bytes\":%" PRIu64 ",\"max_processes\":%" PRIu64
         "}}\n",
         r->limits.timeout_ms, r->limits.cpu_time_ms, r->limits.memory_bytes,
         r->limits.output_bytes, r->limits.max_processes);
}

static void print_human(const struct sandbox_result *r) {
  fwrite(r->stdout_data, 1, r->stdout_len, stdout);
  fflush(stdout);
  fwrite(r->stderr_data, 1, r->stderr_len, stderr);
  fprintf(stderr,
          "--- sandbox: killed_by=%s exit_code=%d signal=%d wall=%.1fms cpu=%.1fms "
          "peak=%.1fMiB backend=%s%s%s%s\n",
          sandbox_killed_by_name(r->killed_by), r->exit_code, r->signal,
          (double)r->wall_time_us / 1000.0, (double)r->cpu_time_us / 1000.0,
          (double)r->peak_memory_bytes / 1048576.0, sandbox_backend_name(r->backend),
          r->memory_per_process ? " (memory limited per process)" : "",
          r->stdout_truncated ? " stdout-truncated" : "",
          r->stderr_truncated ? " stderr-truncated" : "");
}

int main(int argc, char **argv) {
  enum {
    OPT_JSON = 256, OPT_TIMEOUT, OPT_CPU, OPT_MEMORY, OPT_OUTPUT_KB, OPT_OUTPUT_BYTES,
    OPT_PROCS, OPT_FSIZE, OPT_NOFILE, OPT_TMP, OPT_STDIN, OPT_ENV, OPT_MOUNT, OPT_WORKSPACE,
    OPT_STATE, OPT_BACKEND, OPT_UID, OPT_HELP,
  };
  static const struct option opts[] = {
      {"json", no_argument, NULL, OPT_JSON},
      {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
      {"cpu-ms", required_argument, NULL, OPT_CPU},
      {"memory-mb", required_argument, NULL, OPT_MEMORY},
      {"output-kb", required_argument, NULL, OPT_OUTPUT_KB},
      {"output-bytes", required_argument, NULL, OPT_OUTPUT_BYTES},
      {"max-procs", required_argument, NULL, OPT_PROCS},
      {"file-size-mb", required_argument, NULL, OPT_FSIZE},
      {"open-files", required_argument, NULL, OPT_NOFILE},
      {"tmp-mb", required_argument, NULL, OPT_TMP},
      {"stdin", required_argument, NULL, OPT_STDIN},
      {"env", required_argument, NULL, OPT_ENV},
      {"mount", required_argument, NULL, OPT_MOUNT},
      {"workspace", required_argument, NULL, OPT_WORKSPACE},
      {"state-dir", required_argument, NULL, OPT_STATE},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"uid-base", required_argument, NULL, OPT_UID},
      {"help", no_argument, NULL, OPT_HELP},
      {NULL, 0, NULL, 0},
  };
  bool json = false;
  struct sandbox_spec spec = {0};
  struct sandbox_engine_config config = {0};
  const char *env[65] = {0};
  size_t n_env = 0;
  struct sandbox_mount mounts[SANDBOX_MAX_EXTRA_MOUNTS];
  size_t n_mounts = 0;
  const char *stdin_path = NULL;
  const char *workspace = NULL;
  uint64_t v;
  int c;
  while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    switch (c) {
    case OPT_JSON:
      json = true;
      break;
    case OPT_TIMEOUT:
      if (parse_u64("--timeout-ms", optarg, 86400000, &spec.limits.timeout_ms) < 0)
        return 2;
      break;
    case OPT_CPU:
      if (parse_u64("--cpu-ms", optarg, 86400000, &spec.limits.cpu_time_ms) < 0)
        return 2;
      break;
    case OPT_MEMORY:
      if (parse_u64("--memory-mb", optarg, 1 << 20, &v) < 0)
        return 2;
      spec.limits.memory_bytes = v << 20;
      break;
    case OPT_OUTPUT_KB:
      if (parse_u64("--output-kb", optarg, 1 << 20, &v) < 0)
        return 2;
      spec.limits.output_bytes = v << 10;
      break;
    case OPT_OUTPUT_BYTES:
      if (parse_u64("--output-bytes", optarg, 1ULL << 30, &spec.limits.output_bytes) < 0)
        return 2;
      break;
    case OPT_PROCS:
      if (parse_u64("--max-procs", optarg, 100000, &spec.limits.max_processes) < 0)
        return 2;
      break;
    case OPT_FSIZE:
      if (parse_u64("--file-size-mb", optarg, 1 << 20, &v) < 0)
        return 2;
      spec.limits.file_size_bytes = v << 20;
      break;
    case OPT_NOFILE:
      if (parse_u64("--open-files", optarg, 1 << 20, &spec.limits.open_files) < 0)
        return 2;
      break;
    case OPT_TMP:
      if (parse_u64("--tmp-mb", optarg, 1 << 20, &v) < 0)
        return 2;
      spec.limits.tmp_bytes = v << 20;
      break;
    case OPT_STDIN:
      stdin_path = optarg;
      break;
    case OPT_ENV:
      if (n_env >= 64) {
        fprintf(stderr, "sandbox-exec: at most 64 --env\n");
        return 2;
      }
      env[n_env++] = optarg;
      break;
    case OPT_MOUNT: {
      char *colon = strchr(optarg, ':');
      if (colon == NULL || n_mounts >= SANDBOX_MAX_EXTRA_MOUNTS) {
        fprintf(stderr, "sandbox-exec: --mount SRC:DST (at most %d)\n", SANDBOX_MAX_EXTRA_MOUNTS);
        return 2;
      }
      *colon = '\0';
      mounts[n_mounts].source = optarg;
      mounts[n_mounts].target = colon + 1;
      n_mounts++;
      break;
    }
    case OPT_WORKSPACE:
      workspace = optarg;
      break;
    case OPT_STATE:
      config.state_dir = optarg;
      break;
    case OPT_BACKEND:
      if (strcmp(optarg, "auto") == 0)
        config.backend = SANDBOX_BACKEND_AUTO;
      else if (strcmp(optarg, "cgroup-v2") == 0)
        config.backend = SANDBOX_BACKEND_CGROUP_V2;
      else if (strcmp(optarg, "cgroup-v1") == 0)
        config.backend = SANDBOX_BACKEND_CGROUP_V1;
      else if (strcmp(optarg, "rlimit") == 0)
        config.backend = SANDBOX_BACKEND_RLIMIT;
      else {
        fprintf(stderr, "sandbox-exec: --backend is auto, cgroup-v2, cgroup-v1 or rlimit\n");
        return 2;
      }
      break;
    case OPT_UID:
      if (parse_u64("--uid-base", optarg, 65000, &v) < 0)
        return 2;
      config.uid_base = (uid_t)v;
      break;
    case OPT_HELP:
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  spec.argv = (const char *const *)&argv[optind];
  spec.env = env;
  spec.mounts = mounts;
  spec.n_mounts = n_mounts;
  size_t stdin_len = 0;
  uint8_t *stdin_data = NULL;
  if (stdin_path != NULL) {
    stdin_data = read_all(stdin_path, &stdin_len);
    if (stdin_data == NULL) {
      fprintf(stderr, "sandbox-exec: read %s: %s\n", stdin_path, strerror(errno));
      return 1;
    }
  }
  spec.stdin_data = stdin_data;
  spec.stdin_len = stdin_len;

  struct sandbox_error err = {0};
  struct sandbox_engine *engine;
  if (sandbox_engine_new(&config, &engine, &err) < 0) {
    fprintf(stderr, "sandbox-exec: %s\n", err.msg);
    free(stdin_data);
    return 1;
  }
  const struct sandbox_report *rep = sandbox_engine_report(engine);
  char made[4200] = "";
  int state_fd = -1;
  if (workspace == NULL) {
    const char *state = config.state_dir ? config.state_dir : "/var/lib/sandboxd";
    snprintf(made, sizeof made, "%s/exec-workspace.XXXXXX", state);
    if (mkdtemp(made) == NULL || chown(made, rep->uid_base, rep->uid_base) < 0) {
      fprintf(stderr, "sandbox-exec: workspace %s: %s\n", made, strerror(errno));
      sandbox_engine_free(engine);
      free(stdin_data);
      return 1;
    }
    chmod(made, 0700);
    workspace = made;
    state_fd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  spec.workspace_dir = workspace;

  struct sandbox_result result;
  int rc = sandbox_run(engine, 0, &spec, &result, &err);
  if (made[0] != '\0' && state_fd >= 0) {
    if (sandbox_remove_tree(state_fd, strrchr(made, '/') + 1) < 0)
      fprintf(stderr, "sandbox-exec: could not remove %s: %s\n", made, strerror(errno));
    close(state_fd);
  }
  if (rc < 0) {
    fprintf(stderr, "sandbox-exec: %s\n", err.msg);
    sandbox_engine_free(engine);
    free(stdin_data);
    return 1;
  }
  if (json)
    print_json(&result, rep);
  else
    print_human(&result);
  sandbox_result_free(&result);
  sandbox_engine_free(engine);
  free(stdin_data);
  return 0;
}
