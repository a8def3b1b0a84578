/* sandbox-run: runs one script through sandboxd and prints what it printed.
 * Plain mode passes stdout and stderr through as bytes and exits with the
 * program's status (124 on timeout, 128+N for signal N, 125 when the call
 * itself failed); --json prints one object with text fields (invalid UTF-8
 * replaced). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "json.h"
#include "sandbox_client.h"

#define EXIT_CALL_FAILED 125

static void usage(FILE *out) {
  fprintf(out,
          "usage: sandbox-run [-e URL] [--timeout-ms N] [--cpu-time-ms N] [--memory-mb N]\n"
          "                   [--output-kb N] [--max-processes N] [--session ID] [--run-id ID]\n"
          "                   [--file LOCAL[:DEST]]... [--requirement SPEC]... [--stdin FILE]\n"
          "                   [--arg A]... [--env K=V]... [--artifacts-dir DIR] [--retries N]\n"
          "                   [--disk-mb N] [--open-files N] [--file-url DEST=URL]...\n"
          "                   [--max-request-bytes N]\n"
          "                   [--json] SCRIPT|-\n"
          "       sandbox-run [-e URL] --health | --info\n"
          "       sandbox-run [-e URL] --close-session ID\n"
          "       sandbox-run [-e URL] --session ID --list-files PATH|.\n"
          "       sandbox-run [-e URL] --session ID --read-file PATH [--offset N] [--length N]\n\n"
          "Runs SCRIPT (or code read from stdin for -) in sandboxd and prints its stdout and\n"
          "stderr. Exits with the program's status: 124 when it timed out, 128+N when signal\n"
          "N ended it, 125 when the call failed. Default URL: tcp://127.0.0.1:7878\n"
          "(or $SANDBOX_URL). Retries only answers that prove nothing ran.\n");
}

static int read_fd(int fd, uint8_t **out, size_t *len) {
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  if (buf == NULL)
    return -1;
  for (;;) {
    if (n == cap) {
      uint8_t *p = realloc(buf, cap *= 2);
      if (p == NULL) {
        free(buf);
        return -1;
      }
      buf = p;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(buf);
      return -1;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  *out = buf;
  *len = n;
  return 0;
}

/* Splits "A=B" in place at the first '=' and returns B, or NULL (with a
 * message naming the flag) when there is none. */
static const char *split_pair(char *arg, const char *flag, const char *form) {
  char *eq = strchr(arg, '=');
  if (eq == NULL) {
    fprintf(stderr, "sandbox-run: %s %s: expected %s\n", flag, arg, form);
    return NULL;
  }
  *eq = '\0';
  return eq + 1;
}

static int read_path(const char *path, uint8_t **out, size_t *len) {
  if (strcmp(path, "-") == 0)
    return read_fd(STDIN_FILENO, out, len);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rv = read_fd(fd, out, len);
  int saved = errno;
  close(fd);
  errno = saved;
  return rv;
}

static int parse_i64(const char *s, const char *flag, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') {
    fprintf(stderr, "sandbox-run: %s: \"%s\" is not an integer\n", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* N units -> bytes, keeping the sign so the server can name bad values. */
static int scaled(const char *s, const char *flag, int64_t unit, int64_t *out) {
  int64_t v;
  if (parse_i64(s, flag, &v) < 0)
    return -1;
  if (v > INT64_MAX / unit || v < INT64_MIN / unit) {
    fprintf(stderr, "sandbox-run: %s: %s is too large\n", flag, s);
    return -1;
  }
  *out = v * unit;
  return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Artifacts come from the sandbox: relative_path is hostile. Only plain
 * relative paths (no empty, "." or ".." component), created below dir and
 * never outside it: every directory opened with O_NOFOLLOW relative to the
 * one above, the file created with O_NOFOLLOW and O_NONBLOCK and checked to
 * be a regular file (a FIFO or symlink planted in DIR is never followed). */
static int save_artifact(int dir_fd, const struct sbxc_artifact *a) {
  const char *rel = a->relative_path;
  size_t len = strlen(rel);
  if (len == 0 || len >= PATH_MAX || rel[0] == '/') {
    errno = EINVAL;
    return -1;
  }
  char buf[PATH_MAX];
  memcpy(buf, rel, len + 1);
  int cur = dup(dir_fd);
  if (cur < 0)
    return -1;
  char *comp = buf;
  for (;;) {
    char *slash = strchr(comp, '/');
    if (slash != NULL)
      *slash = '\0';
    if (comp[0] == '\0' || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
      close(cur);
      errno = EINVAL;
      return -1;
    }
    if (slash == NULL)
      break;
    if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
      goto fail;
    int next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      goto fail;
    close(cur);
    cur = next;
    comp = slash + 1;
  }
  int fd = openat(cur, comp, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0)
    goto fail;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || ftruncate(fd, 0) < 0) {
    close(fd);
    errno = EINVAL;
    goto fail;
  }
  int rv = write_all(fd, a->content, a->content_len);
  int saved = errno;
  close(fd);
  close(cur);
  errno = saved;
  return rv;
fail : {
  int fail_errno = errno;
  close(cur);
  errno = fail_errno;
  return -1;
}
}

static int exit_status(const struct sbxc_result *r) {
  if (r->status != SBXC_OK)
    return EXIT_CALL_FAILED;
  if (r->killed_by == SBXC_KILLED_BY_TIMEOUT)
    return 124;
  if (r->signal != 0)
    return 128 + r->signal;
  return r->exit_code;
}

static void print_json(const struct sbxc_result *r) {
  char *text = sbxc_result_json(r);
  if (text != NULL) {
    puts(text);
    free(text);
  } else {
    fprintf(stderr, "sandbox-run: out of memory\n");
  }
}

enum {
  OPT_TIMEOUT = 256, OPT_CPU, OPT_MEMORY, OPT_OUTPUT, OPT_PROCS, OPT_SESSION, OPT_RUN_ID,
  OPT_FILE, OPT_REQ, OPT_STDIN, OPT_ARG, OPT_ENV, OPT_ARTIFACTS, OPT_JSON, OPT_HEALTH,
  OPT_INFO, OPT_RETRIES, OPT_MAX_REQUEST, OPT_HELP, OPT_DISK, OPT_OPEN_FILES, OPT_FILE_URL, OPT_CLOSE, OPT_LIST, OPT_READ,
  OPT_OFFSET, OPT_LENGTH,
};

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"endpoint", required_argument, NULL, 'e'},
      {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
      {"cpu-time-ms", required_argument, NULL, OPT_CPU},
      {"memory-mb", required_argument, NULL, OPT_MEMORY},
      {"output-kb", required_argument, NULL, OPT_OUTPUT},
      {"max-processes", required_argument, NULL, OPT_PROCS},
      {"session", required_argument, NULL, OPT_SESSION},
      {"run-id", required_argument, NULL, OPT_RUN_ID},
      {"file", required_argument, NULL, OPT_FILE},
      {"requirement", required_argument, NULL, OPT_REQ},
      {"stdin", required_argument, NULL, OPT_STDIN},
      {"arg", required_argument, NULL, OPT_ARG},
      {"env", required_argument, NULL, OPT_ENV},
      {"artifacts-dir", required_argument, NULL, OPT_ARTIFACTS},
      {"json", no_argument, NULL, OPT_JSON},
      {"health", no_argument, NULL, OPT_HEALTH},
      {"info", no_argument, NULL, OPT_INFO},
      {"retries", required_argument, NULL, OPT_RETRIES},
      {"max-request-bytes", required_argument, NULL, OPT_MAX_REQUEST},
      {"help", no_argument, NULL, OPT_HELP},
      {"disk-mb", required_argument, NULL, OPT_DISK},
      {"open-files", required_argument, NULL, OPT_OPEN_FILES},
      {"file-url", required_argument, NULL, OPT_FILE_URL},
      {"close-session", required_argument, NULL, OPT_CLOSE},
      {"list-files", required_argument, NULL, OPT_LIST},
      {"read-file", required_argument, NULL, OPT_READ},
      {"offset", required_argument, NULL, OPT_OFFSET},
      {"length", required_argument, NULL, OPT_LENGTH},
      {NULL, 0, NULL, 0},
  };
  const char *url = getenv("SANDBOX_URL");
  if (url == NULL || url[0] == '\0')
    url = "tcp://127.0.0.1:7878";
  const char *artifacts_dir = NULL, *stdin_path = NULL, *session = NULL;
  const char *close_session = NULL, *list_path = NULL, *read_path_arg = NULL;
  int64_t offset = 0, length = 0;
  bool json = false, health = false, info = false;
  int64_t retries = 3;
  int64_t max_request_bytes = 8LL << 20;
  struct sbxc_limits limits = {0};
  sbxc_request *req = sbxc_request_new();
  if (req == NULL) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    return EXIT_CALL_FAILED;
  }
  int c, bad = 0;
  while (!bad && (c = getopt_long(argc, argv, "e:h", opts, NULL)) != -1) {
    switch (c) {
    case 'e':
      url = optarg;
      break;
    case OPT_TIMEOUT:
      bad = parse_i64(optarg, "--timeout-ms", &limits.timeout_ms);
      break;
    case OPT_CPU:
      bad = parse_i64(optarg, "--cpu-time-ms", &limits.cpu_time_ms);
      break;
    case OPT_MEMORY:
      bad = scaled(optarg, "--memory-mb", 1 << 20, &limits.memory_bytes);
      break;
    case OPT_OUTPUT:
      bad = scaled(optarg, "--output-kb", 1 << 10, &limits.output_bytes);
      break;
    case OPT_PROCS:
      bad = parse_i64(optarg, "--max-processes", &limits.max_processes);
      break;
    case OPT_MAX_REQUEST:
      bad = parse_i64(optarg, "--max-request-bytes", &max_request_bytes);
      if (!bad && (max_request_bytes < 4096 || max_request_bytes > (1LL << 30))) {
        fprintf(stderr, "sandbox-run: --max-request-bytes: 4096 to 1073741824\n");
        bad = 1;
      }
      break;
    case OPT_RETRIES:
      bad = parse_i64(optarg, "--retries", &retries);
      if (!bad && (retries < 0 || retries > 100)) {
        fprintf(stderr, "sandbox-run: --retries: 0 to 100\n");
        bad = 1;
      }
      break;
    case OPT_SESSION:
      session = optarg;
      bad = sbxc_request_set_session_id(req, optarg);
      break;
    case OPT_DISK:
      bad = scaled(optarg, "--disk-mb", 1 << 20, &limits.disk_bytes);
      break;
    case OPT_OPEN_FILES:
      bad = parse_i64(optarg, "--open-files", &limits.open_files);
      break;
    case OPT_FILE_URL: {
      const char *source = split_pair(optarg, "--file-url", "DEST=URL");
      bad = source == NULL || sbxc_request_add_file_url(req, optarg, source);
      break;
    }
    case OPT_CLOSE:
      close_session = optarg;
      break;
    case OPT_LIST:
      list_path = optarg;
      break;
    case OPT_READ:
      read_path_arg = optarg;
      break;
    case OPT_OFFSET:
      bad = parse_i64(optarg, "--offset", &offset) || offset < 0;
      break;
    case OPT_LENGTH:
      bad = parse_i64(optarg, "--length", &length) || length < 0;
      break;
    case OPT_RUN_ID:
      bad = sbxc_request_set_run_id(req, optarg);
      break;
    case OPT_FILE: {
      char local[PATH_MAX];
      snprintf(local, sizeof(local), "%s", optarg);
      char *colon = strchr(local, ':');
      const char *dest;
      if (colon != NULL) {
        *colon = '\0';
        dest = colon + 1;
      } else {
        dest = strrchr(local, '/') != NULL ? strrchr(local, '/') + 1 : local;
      }
      uint8_t *data;
      size_t len;
      if (read_path(local, &data, &len) < 0) {
        fprintf(stderr, "sandbox-run: --file %s: %s\n", local, strerror(errno));
        bad = 1;
        break;
      }
      bad = sbxc_request_add_file(req, dest, data, len);
      free(data);
      break;
    }
    case OPT_REQ:
      bad = sbxc_request_add_requirement(req, optarg);
      break;
    case OPT_STDIN:
      stdin_path = optarg;
      break;
    case OPT_ARG:
      bad = sbxc_request_add_arg(req, optarg);
      break;
    case OPT_ENV: {
      const char *value = split_pair(optarg, "--env", "KEY=VALUE");
      bad = value == NULL || sbxc_request_add_env(req, optarg, value);
      break;
    }
    case OPT_ARTIFACTS:
      artifacts_dir = optarg;
      break;
    case OPT_JSON:
      json = true;
      break;
    case OPT_HEALTH:
      health = true;
      break;
    case OPT_INFO:
      info = true;
      break;
    case 'h':
    case OPT_HELP:
      usage(stdout);
      sbxc_request_free(req);
      return 0;
    default:
      bad = 1;
    }
  }
  if (bad) {
    usage(stderr);
    sbxc_request_free(req);
    return 2;
  }

  char err[512];
  sbxc_client *client;
  if (sbxc_client_open(&client, url, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-run: %s\n", err);
    sbxc_request_free(req);
    return EXIT_CALL_FAILED;
  }
  sbxc_client_set_retries(client, (unsigned)retries);
  sbxc_client_set_max_request_bytes(client, (size_t)max_request_bytes);

  int status = 0;
  if (close_session != NULL || list_path != NULL || read_path_arg != NULL) {
    int code = SBXC_OK;
    if (close_session != NULL) {
      if (sbxc_close_session(client, close_session, &code, err, sizeof(err)) < 0)
        goto session_call_failed;
      if (json)
        printf("{\"status\":\"OK\"}\n");
      goto out;
    }
    if (session == NULL) {
      fprintf(stderr, "sandbox-run: --list-files and --read-file need --session ID\n");
      status = 2;
      goto out;
    }
    if (list_path != NULL) {
      char *text;
      if (sbxc_list_files_json(client, session, strcmp(list_path, ".") == 0 ? "" : list_path,
                               &text, &code, err, sizeof(err)) < 0)
        goto session_call_failed;
      puts(text);
      free(text);
      goto out;
    }
    uint8_t *data;
    size_t len;
    uint64_t size;
    bool eof;
    if (sbxc_read_file(client, session, read_path_arg, (uint64_t)offset, (uint64_t)length, &data,
                       &len, &size, &eof, &code, err, sizeof(err)) < 0)
      goto session_call_failed;
    if (json) {
      struct json_buf j = {0};
      json_begin(&j, '{');
      json_key(&j, "status"), json_cstring(&j, "OK");
      json_key(&j, "content"), json_string(&j, (const char *)data, len);
      json_key(&j, "size"), json_uint(&j, size);
      json_key(&j, "eof"), json_bool(&j, eof);
      json_end(&j, '}');
      char *text = json_finish(&j);
      if (text != NULL)
        puts(text);
      free(text);
    } else {
      write_all(STDOUT_FILENO, data, len);
    }
    free(data);
    goto out;
  session_call_failed:
    if (json) {
      struct json_buf j = {0};
      json_begin(&j, '{');
      json_key(&j, "status"), json_cstring(&j, sbxc_status_name(code));
      json_key(&j, "error"), json_cstring(&j, err);
      json_end(&j, '}');
      char *text = json_finish(&j);
      if (text != NULL)
        puts(text);
      free(text);
    } else {
      fprintf(stderr, "sandbox-run: %s\n", err);
    }
    status = EXIT_CALL_FAILED;
    goto out;
  }
  if (health || info) {
    if (health) {
      bool serving;
      if (sbxc_health(client, &serving, err, sizeof(err)) < 0) {
        fprintf(stderr, "sandbox-run: health: %s\n", err);
        status = EXIT_CALL_FAILED;
      } else {
        printf(json ? "{\"status\":\"%s\"}\n" : "%s\n", serving ? "SERVING" : "NOT_SERVING");
        status = serving ? 0 : 1;
      }
    }
    if (info && status == 0) {
      char *text;
      if (sbxc_get_info_json(client, &text, err, sizeof(err)) < 0) {
        fprintf(stderr, "sandbox-run: info: %s\n", err);
        status = EXIT_CALL_FAILED;
      } else {
        puts(text);
        free(text);
      }
    }
    goto out;
  }

  if (optind != argc - 1) {
    usage(stderr);
    status = 2;
    goto out;
  }
  const char *script = argv[optind];
  uint8_t *code;
  size_t code_len;
  if (read_path(script, &code, &code_len) < 0) {
    fprintf(stderr, "sandbox-run: %s: %s\n", script, strerror(errno));
    status = 2;
    goto out;
  }
  int rv = sbxc_request_set_code(req, (const char *)code, code_len);
  free(code);
  if (rv == 0 && stdin_path != NULL) {
    uint8_t *in;
    size_t in_len;
    if (read_path(stdin_path, &in, &in_len) < 0) {
      fprintf(stderr, "sandbox-run: --stdin %s: %s\n", stdin_path, strerror(errno));
      status = 2;
      goto out;
    }
    rv = sbxc_request_set_stdin(req, in, in_len);
    free(in);
  }
  if (rv < 0) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    status = EXIT_CALL_FAILED;
    goto out;
  }
  sbxc_request_set_limits(req, &limits);

  struct sbxc_result result;
  sbxc_run_code(client, req, &result);
  if (json) {
    print_json(&result);
  } else if (result.status != SBXC_OK) {
    fprintf(stderr, "sandbox-run: %s: %s\n", sbxc_status_name(result.status), result.message);
  } else {
    fflush(stdout);
    write_all(STDOUT_FILENO, result.stdout_data, result.stdout_len);
    write_all(STDERR_FILENO, result.stderr_data, result.stderr_len);
    if (result.killed_by != SBXC_KILLED_BY_NONE)
      fprintf(stderr, "sandbox-run: killed (%s): %s\n", sbxc_killed_by_name(result.killed_by),
              result.n_feedback > 0 ? result.feedback[0] : "");
  }
  if (result.status == SBXC_OK && artifacts_dir != NULL) {
    int dir_fd = -1;
    if (mkdir(artifacts_dir, 0755) < 0 && errno != EEXIST)
      fprintf(stderr, "sandbox-run: --artifacts-dir %s: %s\n", artifacts_dir, strerror(errno));
    else if ((dir_fd = open(artifacts_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      fprintf(stderr, "sandbox-run: --artifacts-dir %s: %s\n", artifacts_dir, strerror(errno));
    for (size_t i = 0; dir_fd >= 0 && i < result.n_artifacts; i++) {
      const struct sbxc_artifact *a = &result.artifacts[i];
      if (a->content_omitted)
        fprintf(stderr, "sandbox-run: artifact %s (%llu bytes): content left out by the server, "
                        "not saved\n", a->relative_path, (unsigned long long)a->size);
      else if (save_artifact(dir_fd, a) < 0)
        fprintf(stderr, "sandbox-run: artifact %s: not saved: %s\n", a->relative_path,
                strerror(errno));
    }
    if (dir_fd >= 0)
      close(dir_fd);
  }
  status = exit_status(&result);
  sbxc_result_free(&result);
out:
  sbxc_client_close(client);
  sbxc_request_free(req);
  return status;
}
