/* sandbox-run: runs one script through sandboxd and prints what it printed.
 * Plain mode passes stdout and stderr through as bytes and exits with the
 * program's status (124 on timeout, 128+N for signal N, 125 when the call
 * itself failed, 130 when it was cancelled); --json prints one object with
 * text fields (invalid UTF-8 replaced). --stream writes the output as it
 * arrives, and Ctrl-C or SIGTERM cancels the run: the signals are taken by
 * a thread of ours with sigwait (blocked everywhere else, before nng starts
 * its threads), which sends the CancelRun while the main thread's watch
 * waits. No nng call is ever made from a signal handler. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cleanup.h"
#include "cli_endpoints.h"
#include "visible.h"
#include "client_internal.h"
#include "io.h"
#include "json.h"
#include "sandbox_client.h"

#define EXIT_CALL_FAILED 125
/* A cancelled run, as a shell reports a command ended by Ctrl-C. */
#define EXIT_CANCELLED 130
/* How long each of --stream's watches waits for news. A cancel does not
 * wait for it: it goes from the signal thread at once. */
#define STREAM_WAIT_MS 10000

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: sandbox-run [-e URL]... [--timeout-ms N] [--cpu-time-ms N] [--memory-mb N]\n"
      "                   [--output-kb N] [--max-processes N] [--session ID] [--run-id ID]\n"
      "                   [--runtime NAME | --language L [--version RANGE]]\n"
      "                   [--session-mode files|interpreter]\n"
      "                   [--file LOCAL[:DEST]]... [--requirement SPEC]... [--stdin FILE]\n"
      "                   [--arg A]... [--env K=V]... [--artifacts-dir DIR] [--retries N]\n"
      "                   [--disk-mb N] [--open-files N] [--file-url DEST=URL]...\n"
      "                   [--max-request-bytes N] [--connect-timeout-ms N]\n"
      "                   [--allow-net ENTRY]...\n"
      "                   [--tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
      "                    [--tls-server-name NAME]] [--api-key KEY] [--json] [--stream]\n"
      "                   [--raw] SCRIPT|-\n"
      "       sandbox-run [-e URL] --watch RUN_ID | --cancel RUN_ID\n"
      "       sandbox-run [-e URL]... --health | --info | --endpoints\n"
      "       sandbox-run [-e URL]... --close-session ID\n"
      "       sandbox-run [-e URL]... --session ID --list-files PATH|.\n"
      "       sandbox-run [-e URL]... --session ID --read-file PATH [--offset N] [--length N]\n\n"
      "Runs SCRIPT (or code read from stdin for -) in sandboxd and prints its stdout and\n"
      "stderr. Exits with the program's status: 124 when it timed out, 128+N when signal\n"
      "N ended it, 125 when the call failed, 130 when the run was cancelled.\n"
      "On a terminal the program's control characters are shown as cat -v shows them\n"
      "(ESC as ^[; newlines and tabs as they are), so that its escape sequences cannot\n"
      "retitle the terminal, write the clipboard or move the cursor; --raw writes them\n"
      "as they are. Pipes and files always get the bytes unchanged.\n"
      "--stream writes the output as it arrives (raw bytes; with --json one JSON line per\n"
      "chunk, then the result object); Ctrl-C or SIGTERM cancels the run (exit 130), a\n"
      "second one exits at once without waiting for the cancel's answer. --watch RUN_ID\n"
      "follows a run started elsewhere (a RunCode with --run-id while it runs) the same\n"
      "way (Ctrl-C just stops watching); --cancel RUN_ID cancels it. Both need the one\n"
      "endpoint the run lives on. Default URL: tcp://127.0.0.1:7878\n"
      "(or $SANDBOX_URL, a comma-separated list); --endpoint URL is -e URL. Several -e\n"
      "form a fleet: a call goes to a connected endpoint, a session's to the endpoint\n"
      "holding it. Retries only answers that prove nothing ran. --endpoints prints\n"
      "each endpoint address and whether it connected within --connect-timeout-ms\n"
      "(default 5000); exit 1 when one did not.\n"
      "tls+tcp://HOST:PORT endpoints need --tls-ca, the PEM CA bundle the server's\n"
      "certificate must chain to; --tls-cert/--tls-key: this client's PEM certificate and\n"
      "unencrypted key, for servers that ask for one; --tls-server-name: the name the\n"
      "server's certificate must carry (default: the URL's host).\n"
      "--api-key KEY (else $SANDBOX_API_KEY, which ps does not show): the API key of a\n"
      "server with --tenants (docs/TENANTS.md).\n"
      "--allow-net ENTRY: a host the run's code may reach through the server's egress\n"
      "proxy (docs/EGRESS.md): host, *.domain, *, or a CIDR, each with an optional :PORT\n"
      "(IPv6 in brackets; without a port 80 and 443). One entry per flag (repeat it; a\n"
      "comma is not a separator). Without it the run has no network. An entry outside\n"
      "the server's --egress-allow refuses the run (INVALID_ARGUMENT, nothing ran).\n"
      "--json shows what a run with it did on the network as \"egress\": {connections,\n"
      "refused, bytes_up, bytes_down}.\n"
      "--runtime NAME runs the code with that runtime (default python; --info lists them\n"
      "in runtime_info); --language L [--version RANGE] picks one as Piston does: a\n"
      "language, name or alias (python, py, bash, c++) and a node-semver range (3.x,\n"
      "^20; default any). --runtime with --language, or --version alone, is a usage\n"
      "error. A compiled runtime's compile stage is \"compile\" in --json: {stdout,\n"
      "stderr, killed_by, exit_code, failed, ...}; when it failed nothing ran and the\n"
      "compiler's output is on stderr.\n");
}

/* Everything fd holds until its end: a script, stdin, a --file. No
 * ceiling of its own: the request's size is checked when it is sent. */
static int read_fd(int fd, uint8_t **out, size_t *len) {
  struct sbx_buf b = {0};
  for (;;) {
    if (sbx_buf_reserve(&b, 4096, SIZE_MAX) < 0) {
      sbx_buf_free(&b);
      return -1;
    }
    ssize_t r = read(fd, b.data + b.len, b.cap - b.len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int saved = errno;
      sbx_buf_free(&b);
      errno = saved;
      return -1;
    }
    if (r == 0)
      break;
    b.len += (size_t)r;
  }
  *out = sbx_buf_steal(&b, len);
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

/* A program's output to fd: as it is, or when visible (fd is a terminal and
 * no --raw) with its control characters shown as cat -v shows them, so
 * that escape sequences from the sandbox never reach the terminal. st holds
 * a character cut between chunks until the next one, or until final. */
static void write_program_output(int fd, bool visible, struct visible *st, const uint8_t *data,
                                 size_t len, bool final) {
  if (!visible) {
    sbx_write_all(fd, data, len);
    return;
  }
  size_t n;
  cleanup_free char *text = visible_encode(st, data, len, final, &n);
  if (text == NULL) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    return;
  }
  sbx_write_all(fd, text, n);
}

/* Artifacts come from the sandbox: their paths are hostile. The library
 * saves each below dir or refuses it (sbxc_artifact_save); each one not
 * saved is reported, once. */
static void save_artifacts(const char *dir, const struct sbxc_result *r) {
  for (size_t i = 0; i < r->n_artifacts; i++) {
    char err[512];
    if (sbxc_artifact_save(&r->artifacts[i], dir, err, sizeof(err)) < 0)
      fprintf(stderr, "sandbox-run: not saved: %s\n", err);
  }
}

static int exit_status(const struct sbxc_result *r) {
  if (r->status == SBXC_CANCELLED) /* cancelled before it started */
    return EXIT_CANCELLED;
  if (r->status != SBXC_OK)
    return EXIT_CALL_FAILED;
  if (r->killed_by == SBXC_KILLED_BY_CANCELLED)
    return EXIT_CANCELLED;
  if (r->killed_by == SBXC_KILLED_BY_TIMEOUT)
    return 124;
  if (r->signal != 0)
    return 128 + r->signal;
  return r->exit_code;
}

/* Prints text (taken and freed) as a line; NULL means it could not be made. */
static void print_text(char *text) {
  if (text == NULL) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    return;
  }
  puts(text);
  free(text);
}

/* Prints one JSON document (taken and released). */
static void print_json(json_t *value) {
  print_text(sbxc_json_dump(value));
}

/* Everything the command line asked for. */
struct cli {
  struct cli_endpoints ep; /* -e, $SANDBOX_URL, the TLS flags */
  struct sbxc_limits limits;
  sbxc_request *req;
  const char *artifacts_dir, *stdin_path, *session, *script;
  const char *close_session, *list_path, *read_path;
  const char *watch_id, *cancel_id;         /* --watch, --cancel */
  const char *runtime, *language, *version; /* --runtime, --language, --version */
  int64_t offset, length, retries, max_request_bytes, connect_timeout_ms;
  bool json, health, info, endpoints, stream;
  bool raw;        /* --raw: a terminal gets the program's bytes unchanged */
  bool visible[2]; /* stdout, stderr: a terminal, shown as cat -v (visible.h) */
};

enum {
  OPT_TIMEOUT = 256,
  OPT_CPU,
  OPT_MEMORY,
  OPT_OUTPUT,
  OPT_PROCS,
  OPT_SESSION,
  OPT_RUNTIME,
  OPT_SESSION_MODE,
  OPT_RUN_ID,
  OPT_FILE,
  OPT_REQ,
  OPT_STDIN,
  OPT_ARG,
  OPT_ENV,
  OPT_ARTIFACTS,
  OPT_JSON,
  OPT_HEALTH,
  OPT_INFO,
  OPT_RETRIES,
  OPT_MAX_REQUEST,
  OPT_HELP,
  OPT_DISK,
  OPT_OPEN_FILES,
  OPT_FILE_URL,
  OPT_CLOSE,
  OPT_LIST,
  OPT_READ,
  OPT_OFFSET,
  OPT_LENGTH,
  OPT_ENDPOINTS,
  OPT_CONNECT_TIMEOUT,
  OPT_STREAM,
  OPT_RAW,
  OPT_WATCH,
  OPT_CANCEL,
  OPT_ALLOW_NET,
  OPT_LANGUAGE,
  OPT_VERSION,
};

static const struct option cli_options[] = {
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"cpu-time-ms", required_argument, NULL, OPT_CPU},
    {"memory-mb", required_argument, NULL, OPT_MEMORY},
    {"output-kb", required_argument, NULL, OPT_OUTPUT},
    {"max-processes", required_argument, NULL, OPT_PROCS},
    {"disk-mb", required_argument, NULL, OPT_DISK},
    {"open-files", required_argument, NULL, OPT_OPEN_FILES},
    {"session", required_argument, NULL, OPT_SESSION},
    {"runtime", required_argument, NULL, OPT_RUNTIME},
    {"language", required_argument, NULL, OPT_LANGUAGE},
    {"version", required_argument, NULL, OPT_VERSION},
    {"session-mode", required_argument, NULL, OPT_SESSION_MODE},
    {"run-id", required_argument, NULL, OPT_RUN_ID},
    {"file", required_argument, NULL, OPT_FILE},
    {"file-url", required_argument, NULL, OPT_FILE_URL},
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
    {"close-session", required_argument, NULL, OPT_CLOSE},
    {"list-files", required_argument, NULL, OPT_LIST},
    {"read-file", required_argument, NULL, OPT_READ},
    {"offset", required_argument, NULL, OPT_OFFSET},
    {"length", required_argument, NULL, OPT_LENGTH},
    {"endpoints", no_argument, NULL, OPT_ENDPOINTS},
    {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"stream", no_argument, NULL, OPT_STREAM},
    {"raw", no_argument, NULL, OPT_RAW},
    {"watch", required_argument, NULL, OPT_WATCH},
    {"cancel", required_argument, NULL, OPT_CANCEL},
    {"allow-net", required_argument, NULL, OPT_ALLOW_NET},
    CLI_ENDPOINT_LONG_OPTIONS,
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* --file LOCAL[:DEST]: DEST defaults to LOCAL's last component. */
static int add_local_file(sbxc_request *req, const char *arg) {
  char local[PATH_MAX];
  snprintf(local, sizeof(local), "%s", arg);
  char *colon = strchr(local, ':');
  const char *dest;
  if (colon != NULL) {
    *colon = '\0';
    dest = colon + 1;
  } else {
    dest = strrchr(local, '/') != NULL ? strrchr(local, '/') + 1 : local;
  }
  cleanup_free uint8_t *data = NULL;
  size_t len;
  if (read_path(local, &data, &len) < 0) {
    fprintf(stderr, "sandbox-run: --file %s: %s\n", local, strerror(errno));
    return -1;
  }
  return sbxc_request_add_file(req, dest, data, len);
}

static int bounded(int64_t v, int64_t lo, int64_t hi, const char *flag) {
  if (v >= lo && v <= hi)
    return 0;
  fprintf(stderr, "sandbox-run: %s: %lld to %lld\n", flag, (long long)lo, (long long)hi);
  return -1;
}

/* The options that fill the request's limits. */
static int take_limit(struct cli *c, int opt, const char *v) {
  struct sbxc_limits *l = &c->limits;
  switch (opt) {
  case OPT_TIMEOUT:
    return parse_i64(v, "--timeout-ms", &l->timeout_ms);
  case OPT_CPU:
    return parse_i64(v, "--cpu-time-ms", &l->cpu_time_ms);
  case OPT_MEMORY:
    return scaled(v, "--memory-mb", 1 << 20, &l->memory_bytes);
  case OPT_OUTPUT:
    return scaled(v, "--output-kb", 1 << 10, &l->output_bytes);
  case OPT_PROCS:
    return parse_i64(v, "--max-processes", &l->max_processes);
  case OPT_DISK:
    return scaled(v, "--disk-mb", 1 << 20, &l->disk_bytes);
  case OPT_OPEN_FILES:
    return parse_i64(v, "--open-files", &l->open_files);
  }
  return 1; /* not a limit */
}

/* The options that add to the request. */
static int take_request_part(struct cli *c, int opt, char *v) {
  const char *value;
  switch (opt) {
  case OPT_SESSION:
    c->session = v;
    return sbxc_request_set_session_id(c->req, v);
  case OPT_RUNTIME: /* set after the loop: language_or_runtime */
    c->runtime = v;
    return 0;
  case OPT_LANGUAGE:
    c->language = v;
    return 0;
  case OPT_VERSION:
    c->version = v;
    return 0;
  case OPT_SESSION_MODE: /* a new session's: files (default) or interpreter */
    if (strcmp(v, "files") == 0)
      sbxc_request_set_session_mode(c->req, SBXC_SESSION_MODE_FILES);
    else if (strcmp(v, "interpreter") == 0)
      sbxc_request_set_session_mode(c->req, SBXC_SESSION_MODE_INTERPRETER);
    else {
      fprintf(stderr, "sandbox-run: --session-mode: \"%s\" is not files or interpreter\n", v);
      return -2;
    }
    return 0;
  case OPT_RUN_ID:
    return sbxc_request_set_run_id(c->req, v);
  case OPT_FILE:
    return add_local_file(c->req, v);
  case OPT_FILE_URL:
    value = split_pair(v, "--file-url", "DEST=URL");
    return value == NULL || sbxc_request_add_file_url(c->req, v, value) < 0 ? -1 : 0;
  case OPT_REQ:
    return sbxc_request_add_requirement(c->req, v);
  case OPT_ARG:
    return sbxc_request_add_arg(c->req, v);
  case OPT_ALLOW_NET: /* one entry per flag: the server names a bad one */
    return sbxc_request_add_allow_net(c->req, v);
  case OPT_ENV:
    value = split_pair(v, "--env", "KEY=VALUE");
    return value == NULL || sbxc_request_add_env(c->req, v, value) < 0 ? -1 : 0;
  }
  return 1; /* not a part of the request */
}

/* The remaining options: how to call and what to print. */
static int take_mode(struct cli *c, int opt, char *v) {
  switch (opt) {
  case OPT_ENDPOINTS:
    c->endpoints = true;
    return 0;
  case OPT_CONNECT_TIMEOUT:
    return parse_i64(v, "--connect-timeout-ms", &c->connect_timeout_ms) < 0
               ? -1
               : bounded(c->connect_timeout_ms, 0, 86400000, "--connect-timeout-ms");
  case OPT_STDIN:
    c->stdin_path = v;
    return 0;
  case OPT_ARTIFACTS:
    c->artifacts_dir = v;
    return 0;
  case OPT_JSON:
    c->json = true;
    return 0;
  case OPT_RAW:
    c->raw = true;
    return 0;
  case OPT_STREAM:
    c->stream = true;
    return 0;
  case OPT_WATCH:
    c->watch_id = v;
    return 0;
  case OPT_CANCEL:
    c->cancel_id = v;
    return 0;
  case OPT_HEALTH:
    c->health = true;
    return 0;
  case OPT_INFO:
    c->info = true;
    return 0;
  case OPT_RETRIES:
    return parse_i64(v, "--retries", &c->retries) < 0 ? -1
                                                      : bounded(c->retries, 0, 100, "--retries");
  case OPT_MAX_REQUEST:
    return parse_i64(v, "--max-request-bytes", &c->max_request_bytes) < 0
               ? -1
               : bounded(c->max_request_bytes, 4096, 1LL << 30, "--max-request-bytes");
  case OPT_CLOSE:
    c->close_session = v;
    return 0;
  case OPT_LIST:
    c->list_path = v;
    return 0;
  case OPT_READ:
    c->read_path = v;
    return 0;
  case OPT_OFFSET:
    return parse_i64(v, "--offset", &c->offset) < 0 ? -1
                                                    : bounded(c->offset, 0, INT64_MAX, "--offset");
  case OPT_LENGTH:
    return parse_i64(v, "--length", &c->length) < 0 ? -1
                                                    : bounded(c->length, 0, INT64_MAX, "--length");
  }
  return -1;
}

/* --runtime NAME, or --language L [--version RANGE], into the request:
 * 0, -1 out of memory, -2 a usage error (said). */
static int language_or_runtime(struct cli *c) {
  if (c->runtime != NULL && c->language != NULL) {
    fprintf(stderr, "sandbox-run: --runtime and --language: give one of them\n");
    return -2;
  }
  if (c->version != NULL && c->language == NULL) {
    fprintf(stderr, "sandbox-run: --version needs --language\n");
    return -2;
  }
  if (c->language != NULL)
    return sbxc_request_set_language(c->req, c->language, c->version ? c->version : "");
  return c->runtime != NULL ? sbxc_request_set_runtime(c->req, c->runtime) : 0;
}

/* Returns 0, 1 after --help, 2 on a usage error. */
static int parse_args(int argc, char **argv, struct cli *c) {
  int opt;
  while ((opt = getopt_long(argc, argv, "e:h", cli_options, NULL)) != -1) {
    if (opt == 'h' || opt == OPT_HELP) {
      usage(stdout);
      return 1;
    }
    int rc = take_limit(c, opt, optarg);
    if (rc > 0)
      rc = take_request_part(c, opt, optarg);
    if (rc > 0)
      rc = cli_endpoints_option(&c->ep, "sandbox-run", opt, optarg);
    if (rc > 0)
      rc = take_mode(c, opt, optarg);
    if (rc != 0) {
      usage(stderr);
      return 2;
    }
  }
  if (language_or_runtime(c) != 0) {
    usage(stderr);
    return 2;
  }
  bool session_call = c->close_session != NULL || c->list_path != NULL || c->read_path != NULL;
  bool run_call = c->watch_id != NULL || c->cancel_id != NULL;
  if (!session_call && !run_call && !c->health && !c->info && !c->endpoints) {
    if (optind != argc - 1) {
      usage(stderr);
      return 2;
    }
    c->script = argv[optind];
  }
  return 0;
}

static int session_call_failed(const struct cli *c, int code, const char *err) {
  if (c->json)
    print_json(
        json_pack("{s:s, s:o}", "status", sbxc_status_name(code), "error", sbxc_json_cstring(err)));
  else
    fprintf(stderr, "sandbox-run: %s\n", err);
  return EXIT_CALL_FAILED;
}

static int read_session_file(sbxc_client *client, const struct cli *c) {
  char err[512];
  int code = SBXC_OK;
  cleanup_free uint8_t *data = NULL;
  size_t len;
  uint64_t size;
  bool eof;
  if (sbxc_read_file(client, c->session, c->read_path, (uint64_t)c->offset, (uint64_t)c->length,
                     &data, &len, &size, &eof, &code, err, sizeof(err)) < 0)
    return session_call_failed(c, code, err);
  if (c->json)
    print_json(json_pack("{s:s, s:o, s:I, s:b}", "status", "OK", "content",
                         sbxc_json_text(data, len), "size", (json_int_t)size, "eof", eof));
  else
    sbx_write_all(STDOUT_FILENO, data, len);
  return 0;
}

/* --close-session, --list-files, --read-file. */
static int session_call(sbxc_client *client, const struct cli *c) {
  char err[512];
  int code = SBXC_OK;
  if (c->close_session != NULL) {
    if (sbxc_close_session(client, c->close_session, &code, err, sizeof(err)) < 0)
      return session_call_failed(c, code, err);
    if (c->json)
      printf("{\"status\":\"OK\"}\n");
    return 0;
  }
  if (c->session == NULL) {
    fprintf(stderr, "sandbox-run: --list-files and --read-file need --session ID\n");
    return 2;
  }
  if (c->read_path != NULL)
    return read_session_file(client, c);
  char *text;
  if (sbxc_list_files_json(client, c->session, strcmp(c->list_path, ".") == 0 ? "" : c->list_path,
                           &text, &code, err, sizeof(err)) < 0)
    return session_call_failed(c, code, err);
  print_text(text);
  return 0;
}

static int health_and_info(sbxc_client *client, const struct cli *c) {
  char err[512];
  int status = 0;
  if (c->health) {
    bool serving;
    if (sbxc_health(client, &serving, err, sizeof(err)) < 0) {
      fprintf(stderr, "sandbox-run: health: %s\n", err);
      return EXIT_CALL_FAILED;
    }
    printf(c->json ? "{\"status\":\"%s\"}\n" : "%s\n", serving ? "SERVING" : "NOT_SERVING");
    status = serving ? 0 : 1;
  }
  if (c->info && status == 0) {
    char *text;
    if (sbxc_get_info_json(client, &text, err, sizeof(err)) < 0) {
      fprintf(stderr, "sandbox-run: info: %s\n", err);
      return EXIT_CALL_FAILED;
    }
    print_text(text);
  }
  return status;
}

/* --endpoints: waits for every endpoint to connect (up to the connect
 * timeout), then prints each and whether it is connected. */
static int show_endpoints(sbxc_client *client, const struct cli *c) {
  char err[512];
  char *text;
  int all = sbxc_client_wait_connected(client, 0, (uint64_t)c->connect_timeout_ms);
  if (sbxc_client_endpoints_json(client, &text, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-run: endpoints: %s\n", err);
    return EXIT_CALL_FAILED;
  }
  print_text(text);
  return all == 0 ? 0 : 1;
}

/* The script's code and the request's stdin, read into the request. */
static int load_inputs(const struct cli *c) {
  cleanup_free uint8_t *code = NULL;
  size_t len;
  if (read_path(c->script, &code, &len) < 0) {
    fprintf(stderr, "sandbox-run: %s: %s\n", c->script, strerror(errno));
    return 2;
  }
  if (sbxc_request_set_code(c->req, (const char *)code, len) < 0)
    return EXIT_CALL_FAILED;
  if (c->stdin_path != NULL) {
    cleanup_free uint8_t *in = NULL;
    if (read_path(c->stdin_path, &in, &len) < 0) {
      fprintf(stderr, "sandbox-run: --stdin %s: %s\n", c->stdin_path, strerror(errno));
      return 2;
    }
    if (sbxc_request_set_stdin(c->req, in, len) < 0)
      return EXIT_CALL_FAILED;
  }
  sbxc_request_set_limits(c->req, &c->limits);
  return 0;
}

/* Plain mode's lines on stderr, after the program's output: why the call
 * failed, or the server's hints (the response's feedback: why the program
 * was killed, "add 'requests' to requirements", the state an interpreter
 * lost), one line each, the first after "killed (reason): " when it was. */
static void print_summary(const struct sbxc_result *r) {
  if (r->status != SBXC_OK) {
    fprintf(stderr, "sandbox-run: %s: %s\n", sbxc_status_name(r->status), r->message);
    return;
  }
  size_t i = 0;
  if (r->killed_by != SBXC_KILLED_BY_NONE)
    fprintf(stderr, "sandbox-run: killed (%s): %s\n", sbxc_killed_by_name(r->killed_by),
            r->n_feedback > 0 ? r->feedback[i++] : "");
  /* "exited with status N; see stderr" restates what plain mode's own exit
   * status says: the program's stderr stays its own then. */
  static const char restated[] = "exited with status ";
  if (r->killed_by == SBXC_KILLED_BY_NONE && r->signal == 0 && r->exit_code != 0 &&
      i < r->n_feedback && strncmp(r->feedback[i], restated, sizeof restated - 1) == 0)
    i++;
  for (; i < r->n_feedback; i++)
    fprintf(stderr, "sandbox-run: %s\n", r->feedback[i]);
}

/* An interpreter session's call, as a notebook shows it: the last
 * expression's value after the output (what became of the state is in the
 * feedback, which print_summary prints). */
static void print_cell_end(const struct cli *c, const struct sbxc_result *r) {
  if (r->status != SBXC_OK || r->session_mode != SBXC_SESSION_MODE_INTERPRETER)
    return;
  fflush(stdout);
  if (r->result != NULL && r->result[0] != '\0') {
    struct visible st = {0};
    write_program_output(STDOUT_FILENO, c->visible[0], &st, (const uint8_t *)r->result,
                         strlen(r->result), true);
    sbx_write_all(STDOUT_FILENO, "\n", 1);
  }
}

static void print_plain(const struct cli *c, const struct sbxc_result *r) {
  if (r->status == SBXC_OK) {
    struct visible st[2] = {{0}, {0}};
    fflush(stdout);
    if (r->compile != NULL && r->compile->failed) { /* the program never ran: why */
      write_program_output(STDERR_FILENO, c->visible[1], &st[1], r->compile->stdout_data,
                           r->compile->stdout_len, true);
      write_program_output(STDERR_FILENO, c->visible[1], &st[1], r->compile->stderr_data,
                           r->compile->stderr_len, true);
    }
    write_program_output(STDOUT_FILENO, c->visible[0], &st[0], r->stdout_data, r->stdout_len, true);
    write_program_output(STDERR_FILENO, c->visible[1], &st[1], r->stderr_data, r->stderr_len, true);
  }
  print_cell_end(c, r);
  print_summary(r);
}

/* The end of a run in every mode: --json's object, else plain mode's
 * output (unless it was streamed already) and summary; the artifacts; the
 * exit status. Frees result. */
static int finish_run(const struct cli *c, struct sbxc_result *result, bool streamed) {
  if (c->json)
    print_text(sbxc_result_json(result));
  else if (streamed) {
    print_cell_end(c, result);
    print_summary(result);
  } else
    print_plain(c, result);
  fflush(stdout);
  if (result->status == SBXC_OK && c->artifacts_dir != NULL)
    save_artifacts(c->artifacts_dir, result);
  int status = exit_status(result);
  sbxc_result_free(result);
  return status;
}

/* ---- --stream, --watch, --cancel ---- */

/* The output as it arrives: raw bytes to our own stdout and stderr, or
 * with --json one line per chunk, {"stdout": text} or {"stderr": text},
 * each stream decoded across chunks (a character split between two is
 * held back, not replaced). */
struct stream_out {
  bool json;
  uint8_t held[2][4];
  size_t n_held[2];
  bool visible[2];       /* plain: shown as cat -v (the cli's visible) */
  struct visible vis[2]; /* plain: a character cut between chunks */
};

static void print_chunk_json(int stream, const uint8_t *data, size_t len) {
  print_json(
      json_pack("{s:o}", stream == SBXC_STDOUT ? "stdout" : "stderr", sbxc_json_text(data, len)));
  fflush(stdout);
}

static void on_output(void *user, int stream, const uint8_t *data, size_t len) {
  struct stream_out *o = user;
  if (!o->json) {
    int i = stream == SBXC_STDOUT ? 0 : 1;
    write_program_output(i == 0 ? STDOUT_FILENO : STDERR_FILENO, o->visible[i], &o->vis[i], data,
                         len, false);
    return;
  }
  int i = stream == SBXC_STDOUT ? 0 : 1;
  size_t total = o->n_held[i] + len;
  cleanup_free uint8_t *buf = malloc(total);
  if (buf == NULL) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    return;
  }
  memcpy(buf, o->held[i], o->n_held[i]);
  memcpy(buf + o->n_held[i], data, len);
  size_t tail = sbxc_utf8_incomplete_tail(buf, total);
  if (total > tail)
    print_chunk_json(stream, buf, total - tail);
  memcpy(o->held[i], buf + total - tail, tail);
  o->n_held[i] = tail;
}

/* The end of the streams: what was held back is not going to complete. */
static void flush_held(struct stream_out *o) {
  for (int i = 0; i < 2; i++) {
    if (o->json && o->n_held[i] > 0)
      print_chunk_json(i == 0 ? SBXC_STDOUT : SBXC_STDERR, o->held[i], o->n_held[i]);
    if (!o->json && o->vis[i].n_held > 0)
      write_program_output(i == 0 ? STDOUT_FILENO : STDERR_FILENO, true, &o->vis[i], NULL, 0, true);
  }
}

/* --stream: the run and the signals that cancel it. SIGINT and SIGTERM are
 * blocked in every thread; signal_thread takes them with sigwait. The
 * first sends the CancelRun (from that thread, while the main thread's
 * watch waits; or from the main thread when StartRun has not answered
 * yet); from then on a second ends sandbox-run at once. */
struct stream_ctl {
  sbxc_client *client;
  sigset_t signals; /* SIGINT, SIGTERM */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t lock;
  const sbxc_run *run; /* NULL until StartRun has answered */
  int signal;          /* the first SIGINT or SIGTERM; 0 before */
  bool cancelling;     /* the CancelRun is on its way (or sent) */
  bool done;           /* the run's result is in: the thread ends */
};

/* The only signal handler, installed after the first signal: nothing but
 * async-signal-safe calls. */
static void exit_at_once(int sig) {
  (void)sig;
  static const char msg[] =
      "sandbox-run: interrupted again: exiting without waiting for the cancel's answer\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)w;
  _exit(EXIT_CANCELLED);
}

/* Blocks SIGINT, SIGTERM and SIGUSR1 (the main thread's "done" to
 * signal_thread) in this thread and every thread made after it: called
 * before the client opens. */
static void block_stream_signals(struct stream_ctl *s) {
  sigemptyset(&s->signals);
  sigaddset(&s->signals, SIGINT);
  sigaddset(&s->signals, SIGTERM);
  sigset_t all = s->signals;
  sigaddset(&all, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void send_cancel(struct stream_ctl *s, const sbxc_run *run) {
  fprintf(stderr, "sandbox-run: %s: cancelling run %s (once more to exit at once)\n",
          s->signal == SIGINT ? "SIGINT" : "SIGTERM", sbxc_run_id(run));
  char err[512];
  if (sbxc_cancel_run(s->client, run, NULL, NULL, err, sizeof(err)) < 0)
    fprintf(stderr, "sandbox-run: cancel: %s\n", err);
}

/* The run to cancel now, when there is one and nobody cancels it yet. */
static const sbxc_run *claim_cancel(struct stream_ctl *s) {
  pthread_mutex_lock(&s->lock);
  const sbxc_run *run = s->signal != 0 && !s->cancelling ? s->run : NULL;
  if (run != NULL)
    s->cancelling = true;
  pthread_mutex_unlock(&s->lock);
  return run;
}

/* sigwait on set until a signal of it other than SIGUSR1 comes (returned),
 * or done is set (0). */
static int wait_signal(struct stream_ctl *s, const sigset_t *set) {
  for (;;) {
    int sig;
    if (sigwait(set, &sig) != 0)
      return 0;
    pthread_mutex_lock(&s->lock);
    bool done = s->done;
    if (!done && sig != SIGUSR1 && s->signal == 0)
      s->signal = sig;
    pthread_mutex_unlock(&s->lock);
    if (done)
      return 0;
    if (sig != SIGUSR1)
      return sig;
  }
}

static void *signal_thread(void *arg) {
  struct stream_ctl *s = arg;
  sigset_t set = s->signals, usr1;
  sigaddset(&set, SIGUSR1);
  if (wait_signal(s, &set) == 0)
    return NULL;
  struct sigaction sa = {.sa_handler = exit_at_once};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  pthread_sigmask(SIG_UNBLOCK, &s->signals, NULL); /* in this thread: the next one exits */
  const sbxc_run *run = claim_cancel(s);
  if (run != NULL)
    send_cancel(s, run);
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  wait_signal(s, &usr1);
  return NULL;
}

static void stop_signal_thread(struct stream_ctl *s) {
  if (!s->thread_started)
    return;
  pthread_mutex_lock(&s->lock);
  s->done = true;
  pthread_mutex_unlock(&s->lock);
  pthread_kill(s->thread, SIGUSR1);
  pthread_join(s->thread, NULL); /* after a cancel in flight has its answer */
}

/* --stream: StartRun, then the output as it arrives, then the end as the
 * other modes print it. */
static int stream_script(sbxc_client *client, const struct cli *c, struct stream_ctl *s) {
  s->client = client;
  if (pthread_mutex_init(&s->lock, NULL) != 0 ||
      pthread_create(&s->thread, NULL, signal_thread, s) != 0) {
    fprintf(stderr, "sandbox-run: cannot start the thread that cancels on Ctrl-C\n");
    return EXIT_CALL_FAILED;
  }
  s->thread_started = true;
  struct sbxc_result result;
  sbxc_run *run;
  if (sbxc_start_run(client, c->req, &run, &result) < 0) {
    stop_signal_thread(s);
    return finish_run(c, &result, true);
  }
  if (c->json) {
    print_json(json_pack("{s:{s:o, s:o}}", "started", "run_id", sbxc_json_cstring(result.run_id),
                         "endpoint", sbxc_json_cstring(sbxc_run_endpoint(run))));
    fflush(stdout);
  }
  sbxc_result_free(&result);
  pthread_mutex_lock(&s->lock);
  s->run = run;
  pthread_mutex_unlock(&s->lock);
  const sbxc_run *now = claim_cancel(s); /* a signal came during StartRun */
  if (now != NULL)
    send_cancel(s, now);
  struct stream_out out = {.json = c->json, .visible = {c->visible[0], c->visible[1]}};
  sbxc_follow_run(client, run, STREAM_WAIT_MS, on_output, &out, &result);
  flush_held(&out);
  stop_signal_thread(s);
  sbxc_run_free(run);
  return finish_run(c, &result, true);
}

/* --watch RUN_ID: a run started elsewhere, followed like --stream's (a
 * signal ends sandbox-run as it would any program: watching changes
 * nothing on the server). --cancel RUN_ID: cancels it. */
static int run_call(sbxc_client *client, const struct cli *c) {
  char err[512];
  sbxc_run *run;
  const char *id = c->watch_id != NULL ? c->watch_id : c->cancel_id;
  if (sbxc_run_attach(client, id, NULL, &run, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-run: %s: %s\n", c->watch_id != NULL ? "--watch" : "--cancel", err);
    return 2;
  }
  int rc = 0;
  if (c->watch_id != NULL) {
    struct stream_out out = {.json = c->json, .visible = {c->visible[0], c->visible[1]}};
    struct sbxc_result result;
    sbxc_follow_run(client, run, STREAM_WAIT_MS, on_output, &out, &result);
    flush_held(&out);
    rc = finish_run(c, &result, true);
  } else {
    int code = SBXC_OK, state = 0;
    if (sbxc_cancel_run(client, run, &state, &code, err, sizeof(err)) < 0)
      rc = session_call_failed(c, code, err);
    else if (c->json)
      printf("{\"status\":\"OK\",\"state\":\"%s\"}\n", state == SBXC_RUN_DONE ? "done" : "running");
  }
  sbxc_run_free(run);
  return rc;
}

static int run_script(sbxc_client *client, const struct cli *c, struct stream_ctl *s) {
  int rc = load_inputs(c);
  if (rc != 0) {
    if (rc == EXIT_CALL_FAILED)
      fprintf(stderr, "sandbox-run: out of memory\n");
    return rc;
  }
  if (c->stream)
    return stream_script(client, c, s);
  struct sbxc_result result;
  sbxc_run_code(client, c->req, &result);
  return finish_run(c, &result, false);
}

static sbxc_client *open_client(const struct cli *c) {
  char err[512];
  sbxc_client *client;
  if (cli_endpoints_open(&c->ep, &client, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-run: %s\n", err);
    return NULL;
  }
  sbxc_client_set_retries(client, (unsigned)c->retries);
  sbxc_client_set_max_request_bytes(client, (size_t)c->max_request_bytes);
  sbxc_client_set_connect_timeout_ms(client, (uint64_t)c->connect_timeout_ms);
  return client;
}

static void free_cli(struct cli *c) {
  sbxc_request_free(c->req);
  cli_endpoints_free(&c->ep);
}

int main(int argc, char **argv) {
  struct cli c = {.retries = 3,
                  .max_request_bytes = 8LL << 20,
                  .connect_timeout_ms = SBXC_CONNECT_TIMEOUT_DEFAULT_MS};
  c.req = sbxc_request_new();
  if (c.req == NULL) {
    fprintf(stderr, "sandbox-run: out of memory\n");
    return EXIT_CALL_FAILED;
  }
  int rc = parse_args(argc, argv, &c);
  if (rc == 0 && cli_endpoints_finish(&c.ep, "sandbox-run") < 0)
    rc = 2;
  if (rc != 0) {
    free_cli(&c);
    return rc == 1 ? 0 : 2;
  }
  /* A terminal shows a program's control characters as cat -v does (its
   * escape sequences could retitle it, write the clipboard, move the
   * cursor); pipes and files get the bytes. */
  c.visible[0] = !c.raw && isatty(STDOUT_FILENO);
  c.visible[1] = !c.raw && isatty(STDERR_FILENO);
  struct stream_ctl stream = {0};
  bool streams = c.stream && !c.endpoints && !c.health && !c.info && c.close_session == NULL &&
                 c.list_path == NULL && c.read_path == NULL && c.watch_id == NULL &&
                 c.cancel_id == NULL;
  if (streams)
    block_stream_signals(&stream); /* before nng makes its threads */
  sbxc_client *client = open_client(&c);
  if (client == NULL) {
    free_cli(&c);
    return EXIT_CALL_FAILED;
  }
  if (c.endpoints)
    rc = show_endpoints(client, &c);
  else if (c.close_session != NULL || c.list_path != NULL || c.read_path != NULL)
    rc = session_call(client, &c);
  else if (c.health || c.info)
    rc = health_and_info(client, &c);
  else if (c.watch_id != NULL || c.cancel_id != NULL)
    rc = run_call(client, &c);
  else
    rc = run_script(client, &c, &stream);
  sbxc_client_close(client);
  free_cli(&c);
  return rc;
}
