/* settings.c: the table of settings and the four layers that fill them.
 * See settings.h. Never reads anything but its own file, the environment
 * and argv. */
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

enum setting_type { SETTING_LISTEN, SETTING_STRING, SETTING_INT };

struct setting_def {
  const char *name;
  enum setting_type type;
  size_t offset;
  size_t size; /* SETTING_STRING: buffer size */
  int64_t min, max;
  const char *help;
};

#define OFF(field) offsetof(struct server_settings, field)
#define STR(field) OFF(field), sizeof(((struct server_settings *)0)->field)

static const struct setting_def setting_defs[] = {
    {"listen", SETTING_LISTEN, 0, 0, 0, 0,
     "nng URL to listen on (tcp:// or ipc://); repeatable (default tcp://127.0.0.1:7878)"},
    {"workers", SETTING_INT, OFF(workers), 0, 1, 1024, "worker slots (default: number of CPUs)"},
    {"queue", SETTING_INT, OFF(queue), 0, 0, 65536,
     "calls that may wait for a worker; past it RESOURCE_EXHAUSTED (default 64)"},
    {"contexts", SETTING_INT, OFF(contexts), 0, 0, 65536,
     "nng contexts receiving at once (default workers + queue + 16)"},
    {"state-dir", SETTING_STRING, STR(state_dir), 0, 0, "state directory (default /var/lib/sandboxd)"},
    {"backend", SETTING_STRING, STR(backend), 0, 0,
     "resource backend: auto, v2, v1, rlimit (default auto)"},
    {"cgroup-parent", SETTING_STRING, STR(cgroup_parent), 0, 0,
     "cgroup to create slot cgroups under (default: the engine's choice)"},
    {"uid-base", SETTING_INT, OFF(uid_base), 0, 1000, 4000000000LL,
     "slot i runs as uid and gid uid-base + i (default 60000)"},
    {"max-message-bytes", SETTING_INT, OFF(max_message_bytes), 0, 4096, 1LL << 30,
     "largest request accepted, NNG_OPT_RECVMAXSZ (default 8 MiB)"},
    {"max-connections", SETTING_INT, OFF(max_connections), 0, 1, 65536,
     "client connections per listener; past it a new connection is closed at once and "
     "logged (default 1024)"},
    {"idle-timeout-ms", SETTING_INT, OFF(idle_timeout_ms), 0, 100, 86400000,
     "a connection with no call in progress that sent nothing (or only part of a "
     "message) for this long is closed (default 300000)"},
    {"max-files", SETTING_INT, OFF(max_files), 0, 0, 4096, "files per request (default 64)"},
    {"max-args", SETTING_INT, OFF(max_args), 0, 0, 4096, "args per request (default 256)"},
    {"max-env", SETTING_INT, OFF(max_env), 0, 0, 4096, "env entries per request (default 128)"},
    {"max-code-bytes", SETTING_INT, OFF(max_code_bytes), 0, 1, 1LL << 30,
     "size of code (default 1 MiB)"},
    {"default-timeout-ms", SETTING_INT, OFF(default_limits.timeout_ms), 0, 1, 86400000,
     "wall-clock limit when the request has none (default 5000)"},
    {"max-timeout-ms", SETTING_INT, OFF(max_limits.timeout_ms), 0, 1, 86400000,
     "largest timeout_ms a request may ask for (default 60000)"},
    {"default-cpu-time-ms", SETTING_INT, OFF(default_limits.cpu_time_ms), 0, 1, 86400000,
     "CPU-time limit when the request has none (default 5000)"},
    {"max-cpu-time-ms", SETTING_INT, OFF(max_limits.cpu_time_ms), 0, 1, 86400000,
     "largest cpu_time_ms (default 60000)"},
    {"default-memory-bytes", SETTING_INT, OFF(default_limits.memory_bytes), 0, 1LL << 20,
     1LL << 40, "memory limit when the request has none (default 128 MiB)"},
    {"max-memory-bytes", SETTING_INT, OFF(max_limits.memory_bytes), 0, 1LL << 20, 1LL << 40,
     "largest memory_bytes (default 1 GiB)"},
    {"default-output-bytes", SETTING_INT, OFF(default_limits.output_bytes), 0, 1, 1LL << 30,
     "stdout and stderr cap each, when the request has none (default 64 KiB)"},
    {"max-output-bytes", SETTING_INT, OFF(max_limits.output_bytes), 0, 1, 1LL << 30,
     "largest output_bytes (default 4 MiB)"},
    {"default-max-processes", SETTING_INT, OFF(default_limits.max_processes), 0, 1, 65536,
     "process limit when the request has none (default 64)"},
    {"max-max-processes", SETTING_INT, OFF(max_limits.max_processes), 0, 1, 65536,
     "largest max_processes (default 256)"},
    {"default-disk-bytes", SETTING_INT, OFF(default_limits.disk_bytes), 0, 4096, 1LL << 40,
     "largest file and /tmp size when the request has none (default 64 MiB)"},
    {"max-disk-bytes", SETTING_INT, OFF(max_limits.disk_bytes), 0, 4096, 1LL << 40,
     "largest disk_bytes (default 1 GiB)"},
    {"default-open-files", SETTING_INT, OFF(default_limits.open_files), 0, 16, 1 << 20,
     "open files per process when the request has none (default 1024)"},
    {"max-open-files", SETTING_INT, OFF(max_limits.open_files), 0, 16, 1 << 20,
     "largest open_files (default 65536)"},
    {"workspace-inodes", SETTING_INT, OFF(workspace_inodes), 0, 64, 1LL << 22,
     "files and directories a workspace may hold (default 32768)"},
    {"max-sessions", SETTING_INT, OFF(max_sessions), 0, 0, 65536,
     "sessions kept; past it the least recently used idle one ends (default 64)"},
    {"session-ttl-s", SETTING_INT, OFF(session_ttl_s), 0, 1, 86400 * 30,
     "a session unused this long ends (default 1800)"},
    {"max-file-bytes", SETTING_INT, OFF(max_file_bytes), 0, 1, 1LL << 40,
     "size of each input file, inline or downloaded (default 64 MiB)"},
    {"download-timeout-ms", SETTING_INT, OFF(download_timeout_ms), 0, 1, 3600000,
     "time for each download, redirects included (default 10000)"},
    {"download-hosts", SETTING_STRING, STR(download_hosts), 0, 0,
     "comma-separated hosts files may be downloaded from, wherever they resolve (default: "
     "any host with a public address)"},
    {"download-allow-private", SETTING_INT, OFF(download_allow_private), 0, 0, 1,
     "1: downloads may also reach loopback, private and link-local addresses (default 0)"},
    {"artifact-bytes", SETTING_INT, OFF(artifact_bytes), 0, 0, 1LL << 30,
     "artifact content sent inline per file, and ReadFile's largest read (default 1 MiB)"},
    {"artifacts-total-bytes", SETTING_INT, OFF(artifacts_total_bytes), 0, 0, 1LL << 30,
     "artifact content sent inline per response (default 8 MiB)"},
    {"max-artifacts", SETTING_INT, OFF(max_artifacts), 0, 0, 1 << 20,
     "artifacts per response and entries per ListFiles (default 16384)"},
    {"artifact-depth", SETTING_INT, OFF(artifact_depth), 0, 1, 256,
     "directory levels below output/ searched for artifacts (default 32)"},
    {"mime-types", SETTING_STRING, STR(mime_types), 0, 0,
     "mime.types database for artifact types (default /etc/mime.types)"},
    {"wheelhouse", SETTING_STRING, STR(wheelhouse), 0, 0,
     "directory of wheels (and sdists) pip may install requirements from, besides the index "
     "(--find-links; with offline = 1 the only source) (default: none)"},
    {"index-url", SETTING_STRING, STR(index_url), 0, 0,
     "package index (PEP 503) for requirements; pip reaches it only through the server's egress "
     "proxy, under the download-hosts and public-address policy (default "
     SETTINGS_DEFAULT_INDEX_URL ")"},
    {"offline", SETTING_INT, OFF(offline), 0, 0, 1,
     "1: no package index: pip installs from the wheelhouse (and URL requirements) only, with no "
     "network at all (default 0)"},
    {"pip-proxy", SETTING_STRING, STR(pip_proxy), 0, 0,
     "http://host:port of an upstream proxy the egress proxy hands pip's checked requests to, "
     "instead of connecting itself (default: none)"},
    {"pip-tunnels", SETTING_INT, OFF(pip_tunnels), 0, 1, 256,
     "connections one build may hold open through the egress proxy at once; past it 503 "
     "(default 8)"},
    {"pip-idle-timeout-ms", SETTING_INT, OFF(pip_idle_timeout_ms), 0, 100, 3600000,
     "a connection through the egress proxy with no byte either way for this long is closed "
     "(default 30000)"},
    {"requirements-allow-urls", SETTING_INT, OFF(requirements_allow_urls), 0, 0, 1,
     "1: also accept \"name @ https://.../name-1.0-py3-none-any.whl\"; the server downloads the "
     "wheel (download-hosts, download-allow-private apply) and pip installs it offline "
     "(default 0)"},
    {"max-concurrent-builds", SETTING_INT, OFF(max_concurrent_builds), 0, 0, 1024,
     "new requirement sets built at once; past it a request for another new set is refused "
     "with RESOURCE_EXHAUSTED, so builds cannot hold every worker (default: half the workers, "
     "at least 1)"},
    {"requirements-store-bytes", SETTING_INT, OFF(requirements_store_bytes), 0, 1 << 20,
     1LL << 50, "disk the requirements store may use; least recently used idle environments "
                "are evicted past it (default 4 GiB)"},
    {"max-requirements", SETTING_INT, OFF(max_requirements), 0, 0, 1024,
     "requirements per request (default 32)"},
    {"max-requirement-bytes", SETTING_INT, OFF(max_requirement_bytes), 0, 1, 1024,
     "length of each requirement (default 200)"},
    {"pip-timeout-ms", SETTING_INT, OFF(pip_timeout_ms), 0, 1000, 86400000,
     "time one environment's pip install may take (default 300000)"},
    {"pip-memory-bytes", SETTING_INT, OFF(pip_memory_bytes), 0, 64LL << 20, 1LL << 40,
     "memory of pip's processes; the build's disk comes on top (default 1 GiB)"},
    {"pip-disk-bytes", SETTING_INT, OFF(pip_disk_bytes), 0, 1 << 20, 1LL << 40,
     "the build directory's size (a tmpfs) and the largest file (default 1 GiB)"},
};
#define N_SETTINGS (sizeof(setting_defs) / sizeof(setting_defs[0]))

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                       ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

void settings_defaults(struct server_settings *s) {
  memset(s, 0, sizeof(*s));
  snprintf(s->listen[0], sizeof(s->listen[0]), "tcp://127.0.0.1:7878");
  s->n_listen = 1;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->workers = cpus > 0 ? cpus : 1;
  s->queue = 64;
  s->contexts = 0;
  snprintf(s->state_dir, sizeof(s->state_dir), "/var/lib/sandboxd");
  snprintf(s->backend, sizeof(s->backend), "auto");
  s->uid_base = SANDBOX_DEFAULT_UID_BASE;
  s->max_message_bytes = 8LL << 20;
  s->max_connections = 1024;
  s->idle_timeout_ms = 300000;
  s->max_files = 64;
  s->max_args = 256;
  s->max_env = 128;
  s->max_code_bytes = 1LL << 20;
  s->default_limits = (struct settings_limits){
      .timeout_ms = SANDBOX_DEFAULT_TIMEOUT_MS,
      .cpu_time_ms = SANDBOX_DEFAULT_TIMEOUT_MS,
      .memory_bytes = (int64_t)SANDBOX_DEFAULT_MEMORY_BYTES,
      .output_bytes = (int64_t)SANDBOX_DEFAULT_OUTPUT_BYTES,
      .max_processes = SANDBOX_DEFAULT_MAX_PROCESSES,
      .disk_bytes = (int64_t)SANDBOX_DEFAULT_FILE_SIZE_BYTES,
      .open_files = 1024,
  };
  s->max_limits = (struct settings_limits){
      .timeout_ms = 60000,
      .cpu_time_ms = 60000,
      .memory_bytes = 1LL << 30,
      .output_bytes = 4LL << 20,
      .max_processes = 256,
      .disk_bytes = 1LL << 30,
      .open_files = 65536,
  };
  s->workspace_inodes = 32768;
  s->max_sessions = 64;
  s->session_ttl_s = 1800;
  s->max_file_bytes = 64LL << 20;
  s->download_timeout_ms = 10000;
  s->artifact_bytes = 1LL << 20;
  s->artifacts_total_bytes = 8LL << 20;
  s->max_artifacts = 16384;
  s->artifact_depth = 32;
  snprintf(s->mime_types, sizeof(s->mime_types), "/etc/mime.types");
  s->requirements_store_bytes = 4LL << 30;
  s->max_requirements = 32;
  s->max_requirement_bytes = 200;
  s->pip_timeout_ms = 300000;
  s->pip_memory_bytes = 1LL << 30;
  s->pip_disk_bytes = 1LL << 30;
  snprintf(s->index_url, sizeof(s->index_url), "%s", SETTINGS_DEFAULT_INDEX_URL);
  s->pip_tunnels = 8;
  s->pip_idle_timeout_ms = 30000;
}

static const struct setting_def *find_def(const char *name, size_t len) {
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (strlen(setting_defs[i].name) == len && strncmp(setting_defs[i].name, name, len) == 0)
      return &setting_defs[i];
  return NULL;
}

/* Each layer that names "listen" replaces the lists of the layers before it;
 * repeated within one layer, it adds. */
static int apply(struct server_settings *s, const struct setting_def *d, const char *value,
                 bool *listen_replaced, const char *where, char *err, size_t errlen) {
  switch (d->type) {
  case SETTING_LISTEN:
    if (!*listen_replaced) {
      s->n_listen = 0;
      *listen_replaced = true;
    }
    if (s->n_listen >= SETTINGS_MAX_LISTEN)
      return fail(err, errlen, "%s: listen: at most %d URLs", where, SETTINGS_MAX_LISTEN);
    if (strncmp(value, "tcp://", 6) != 0 && strncmp(value, "ipc://", 6) != 0)
      return fail(err, errlen, "%s: listen: \"%s\" is not a tcp:// or ipc:// URL", where, value);
    if (strlen(value) >= SETTINGS_URL_MAX)
      return fail(err, errlen, "%s: listen: URL longer than %d bytes", where, SETTINGS_URL_MAX - 1);
    snprintf(s->listen[s->n_listen++], SETTINGS_URL_MAX, "%s", value);
    return 0;
  case SETTING_STRING: {
    if (strlen(value) >= d->size)
      return fail(err, errlen, "%s: %s: value longer than %zu bytes", where, d->name, d->size - 1);
    memcpy((char *)s + d->offset, value, strlen(value) + 1);
    return 0;
  }
  case SETTING_INT: {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < d->min || v > d->max)
      return fail(err, errlen, "%s: %s: \"%s\" is not an integer between %" PRId64 " and %" PRId64,
                  where, d->name, value, d->min, d->max);
    *(int64_t *)((char *)s + d->offset) = v;
    return 0;
  }
  }
  return fail(err, errlen, "%s: %s: unknown setting type", where, d->name);
}

static char *trim(char *p) {
  while (isspace((unsigned char)*p))
    p++;
  char *e = p + strlen(p);
  while (e > p && isspace((unsigned char)e[-1]))
    *--e = '\0';
  return p;
}

int settings_load_file(struct server_settings *s, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return fail(err, errlen, "config %s: %s", path, strerror(errno));
  char line[4096];
  unsigned lineno = 0;
  bool listen_replaced = false;
  int rv = 0;
  while (rv == 0 && fgets(line, sizeof(line), f) != NULL) {
    lineno++;
    char where[PATH_MAX + 32];
    snprintf(where, sizeof(where), "%s:%u", path, lineno);
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = '\0';
    char *p = trim(line);
    if (*p == '\0')
      continue;
    char *eq = strchr(p, '=');
    if (eq == NULL) {
      rv = fail(err, errlen, "%s: expected \"name = value\"", where);
      break;
    }
    *eq = '\0';
    char *key = trim(p), *value = trim(eq + 1);
    const struct setting_def *d = find_def(key, strlen(key));
    if (d == NULL) {
      rv = fail(err, errlen, "%s: unknown setting \"%s\"", where, key);
      break;
    }
    rv = apply(s, d, value, &listen_replaced, where, err, errlen);
  }
  fclose(f);
  return rv;
}

static void env_name(const struct setting_def *d, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "SANDBOXD_");
  for (const char *c = d->name; *c != '\0' && n + 1 < len; c++)
    buf[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
  buf[n] = '\0';
}

int settings_load_env(struct server_settings *s, char *err, size_t errlen) {
  for (size_t i = 0; i < N_SETTINGS; i++) {
    char name[64];
    env_name(&setting_defs[i], name, sizeof(name));
    const char *value = getenv(name);
    if (value == NULL)
      continue;
    bool listen_replaced = false;
    if (setting_defs[i].type == SETTING_LISTEN) {
      /* SANDBOXD_LISTEN holds one or more URLs separated by commas. */
      char buf[SETTINGS_MAX_LISTEN * SETTINGS_URL_MAX];
      snprintf(buf, sizeof(buf), "%s", value);
      char *save = NULL;
      for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
        if (apply(s, &setting_defs[i], trim(tok), &listen_replaced, name, err, errlen) < 0)
          return -1;
      continue;
    }
    if (apply(s, &setting_defs[i], value, &listen_replaced, name, err, errlen) < 0)
      return -1;
  }
  return 0;
}

int settings_check(const struct server_settings *s, char *err, size_t errlen) {
  static const char *names[] = {"timeout-ms", "cpu-time-ms", "memory-bytes",
                                "output-bytes", "max-processes", "disk-bytes"};
  int64_t def[SETTINGS_N_LIMITS], max[SETTINGS_N_LIMITS];
  settings_limits_array(&s->default_limits, def);
  settings_limits_array(&s->max_limits, max);
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (def[i] > max[i])
      return fail(err, errlen, "default-%s (%" PRId64 ") is above max-%s (%" PRId64 ")", names[i],
                  def[i], names[i], max[i]);
  if (s->n_listen == 0)
    return fail(err, errlen, "listen: at least one URL is needed");
  if (strcmp(s->backend, "auto") != 0 && strcmp(s->backend, "v2") != 0 &&
      strcmp(s->backend, "v1") != 0 && strcmp(s->backend, "rlimit") != 0)
    return fail(err, errlen, "backend: \"%s\" is not one of auto, v2, v1, rlimit", s->backend);
  if (s->state_dir[0] != '/')
    return fail(err, errlen, "state-dir: \"%s\" is not an absolute path", s->state_dir);
  /* A reply carries both streams; it must fit in what a client accepts. */
  if (s->max_limits.output_bytes > (1LL << 30) / 2)
    return fail(err, errlen, "max-output-bytes: at most 512 MiB");
  /* Both streams and the artifacts must fit in what a client accepts. */
  if (2 * s->max_limits.output_bytes + s->artifacts_total_bytes > (1LL << 30) - (1LL << 20))
    return fail(err, errlen, "artifacts-total-bytes: with two streams of max-output-bytes, "
                             "a reply would exceed 1 GiB");
  if (s->wheelhouse[0] != '\0' && s->wheelhouse[0] != '/')
    return fail(err, errlen, "wheelhouse: \"%s\" is not an absolute path", s->wheelhouse);
  if (s->offline == 0 && s->index_url[0] == '\0')
    return fail(err, errlen, "index-url: empty; set offline = 1 to install without an index");
  if (s->index_url[0] != '\0' && strncmp(s->index_url, "http://", 7) != 0 &&
      strncmp(s->index_url, "https://", 8) != 0)
    return fail(err, errlen, "index-url: \"%s\" is not an http:// or https:// URL", s->index_url);
  for (const char *c = s->index_url; *c != '\0'; c++)
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
      return fail(err, errlen, "index-url: spaces and control characters are not allowed");
  if (s->pip_proxy[0] != '\0' && s->offline != 0)
    return fail(err, errlen, "pip-proxy: set, but offline = 1 gives pip no network to use it");
  if (s->pip_proxy[0] != '\0' &&
      (strncmp(s->pip_proxy, "http://", 7) != 0 || strchr(s->pip_proxy, '@') != NULL))
    return fail(err, errlen, "pip-proxy: \"%s\" is not http://host:port (no credentials)",
                s->pip_proxy);
  for (const char *c = s->pip_proxy; *c != '\0'; c++)
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
      return fail(err, errlen, "pip-proxy: spaces and control characters are not allowed");
  if (s->artifact_bytes > s->artifacts_total_bytes)
    return fail(err, errlen, "artifact-bytes (%" PRId64 ") is above artifacts-total-bytes (%" PRId64 ")",
                s->artifact_bytes, s->artifacts_total_bytes);
  return 0;
}

void settings_usage(FILE *out, const char *prog) {
  fprintf(out,
          "usage: %s [--config FILE] [--NAME VALUE]...\n\n"
          "Runs untrusted Python code in a sandbox, served over nng REQ/REP (sandbox.v1).\n"
          "Settings are read from defaults, then --config FILE (or SANDBOXD_CONFIG), then\n"
          "environment variables SANDBOXD_NAME, then flags; later wins. The config file\n"
          "holds \"name = value\" lines with the names below; # starts a comment.\n\n"
          "  --config FILE                 config file to read\n"
          "  --help                        print this and exit\n"
          "  --version                     print the version and exit\n",
          prog);
  for (size_t i = 0; i < N_SETTINGS; i++) {
    char flag[64], env[64];
    snprintf(flag, sizeof(flag), "--%s %s", setting_defs[i].name,
             setting_defs[i].type == SETTING_INT ? "N" : "VALUE");
    env_name(&setting_defs[i], env, sizeof(env));
    fprintf(out, "  %-29s %s\n  %-29s   env %s\n", flag, setting_defs[i].help, "", env);
  }
}

int settings_load(struct server_settings *s, int argc, char **argv, char *err, size_t errlen) {
  settings_defaults(s);

  /* The config file comes before the environment and the flags, so find it
   * first; the flags are parsed for real afterwards. */
  const char *config = getenv("SANDBOXD_CONFIG");
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      config = argv[i + 1];
    else if (strncmp(argv[i], "--config=", 9) == 0)
      config = argv[i] + 9;
  }
  if (config != NULL && config[0] != '\0' && settings_load_file(s, config, err, errlen) < 0)
    return -1;
  if (settings_load_env(s, err, errlen) < 0)
    return -1;

  struct option opts[N_SETTINGS + 4];
  for (size_t i = 0; i < N_SETTINGS; i++)
    opts[i] = (struct option){setting_defs[i].name, required_argument, NULL, (int)(256 + i)};
  opts[N_SETTINGS] = (struct option){"config", required_argument, NULL, 'c'};
  opts[N_SETTINGS + 1] = (struct option){"help", no_argument, NULL, 'h'};
  opts[N_SETTINGS + 2] = (struct option){"version", no_argument, NULL, 'V'};
  opts[N_SETTINGS + 3] = (struct option){NULL, 0, NULL, 0};

  bool listen_replaced = false;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'c')
      continue;
    if (c == 'h') {
      settings_usage(stdout, argv[0]);
      return 1;
    }
    if (c == 'V') {
      printf("sandboxd %s\n", SANDBOXD_VERSION);
      return 1;
    }
    if (c >= 256 && (size_t)(c - 256) < N_SETTINGS) {
      char where[80];
      snprintf(where, sizeof(where), "--%s", setting_defs[c - 256].name);
      if (apply(s, &setting_defs[c - 256], optarg, &listen_replaced, where, err, errlen) < 0)
        return -1;
      continue;
    }
    if (c == ':' || (c == '?' && optopt != 0))
      return fail(err, errlen, "option needs a value or is unknown (see --help)");
    return fail(err, errlen, "unknown option %s (see --help)", argv[optind - 1]);
  }
  if (optind < argc)
    return fail(err, errlen, "unexpected argument \"%s\" (see --help)", argv[optind]);
  return settings_check(s, err, errlen);
}
