/* settings.c: the table of settings and the four layers that fill them.
 * See settings.h. Never reads anything but its own file, the environment
 * and argv. */
#include "settings.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "text.h"

/* SETTING_BOOL: a bool field; 1/0, true/false, yes/no, on/off, and the
 * flag alone (--zygote) means 1. */
enum setting_type { SETTING_LISTEN, SETTING_STRING, SETTING_INT, SETTING_BOOL };

/* One setting: where it goes, its range and its default, written once for
 * the defaults and for --help alike. */
struct setting_def {
  const char *name;
  enum setting_type type;
  size_t offset;
  size_t size; /* SETTING_STRING: buffer size */
  int64_t min, max;
  int64_t def;          /* SETTING_INT; SETTING_BOOL: 0 or 1 */
  const char *def_str;  /* SETTING_STRING, SETTING_LISTEN; NULL: "" */
  const char *def_text; /* a default computed at start, said in words */
  const char *help;
};

#define OFF(field) offsetof(struct server_settings, field)
#define STR(field) OFF(field), sizeof(((struct server_settings *)0)->field)

static const struct setting_def setting_defs[] = {
    {"listen", SETTING_LISTEN, 0, 0, 0, 0, .def_str = "tcp://127.0.0.1:7878",
     .help = "nng URL to listen on (tcp://, tls+tcp:// or ipc://); repeatable"},
    {"workers", SETTING_INT, OFF(workers), 0, 1, 1024, .def_text = "number of CPUs",
     .help = "worker slots"},
    {"queue", SETTING_INT, OFF(queue), 0, 0, 65536, .def = 64,
     .help = "calls that may wait for a worker; past it RESOURCE_EXHAUSTED"},
    {"contexts", SETTING_INT, OFF(contexts), 0, 0, 65536,
     .def_text = "workers + queue + 16 + max-watchers", .help = "nng contexts receiving at once"},
    {"state-dir", SETTING_STRING, STR(state_dir), 0, 0, .def_str = "/var/lib/sandboxd",
     .help = "state directory"},
    {"backend", SETTING_STRING, STR(backend), 0, 0, .def_str = "auto",
     .help = "resource backend: auto, v2, v1, rlimit"},
    {"cgroup-parent", SETTING_STRING, STR(cgroup_parent), 0, 0, .def_text = "the engine's choice",
     .help = "cgroup to create slot cgroups under"},
    {"uid-base", SETTING_INT, OFF(uid_base), 0, SETTINGS_UID_MIN, SETTINGS_UID_END - 1,
     .def = 60000,
     .help = "slot i runs as uid and gid uid-base + i, interpreter i as uid-base + workers + i; "
             "from 1000, and uid-base + workers + max-interpreters at most 65534 (nobody): "
             "65528 with 2 workers and 4 interpreters"},
    {"max-message-bytes", SETTING_INT, OFF(max_message_bytes), 0, 4096, 1LL << 30, .def = 8LL << 20,
     .help = "largest request accepted, NNG_OPT_RECVMAXSZ"},
    {"max-connections", SETTING_INT, OFF(max_connections), 0, 1, 65536, .def = 1024,
     .help =
         "client connections per listener; past it a new connection is closed at once and logged"},
    {"idle-timeout-ms", SETTING_INT, OFF(idle_timeout_ms), 0, 100, 86400000, .def = 300000,
     .help = "a connection with no call in progress that sent nothing (or only part of a message) "
             "for this long is closed"},
    {"max-files", SETTING_INT, OFF(max_files), 0, 0, 4096, .def = 64, .help = "files per request"},
    {"max-args", SETTING_INT, OFF(max_args), 0, 0, 4096, .def = 256, .help = "args per request"},
    {"max-env", SETTING_INT, OFF(max_env), 0, 0, 4096, .def = 128,
     .help = "env entries per request"},
    {"max-code-bytes", SETTING_INT, OFF(max_code_bytes), 0, 1, 1LL << 30, .def = 1LL << 20,
     .help = "size of code"},
    {"default-timeout-ms", SETTING_INT, OFF(default_limits.v[LIMIT_TIMEOUT_MS]), 0, 1, 86400000,
     .def = 5000, .help = "wall-clock limit when the request has none"},
    {"max-timeout-ms", SETTING_INT, OFF(max_limits.v[LIMIT_TIMEOUT_MS]), 0, 1, 86400000,
     .def = 60000, .help = "largest timeout_ms a request may ask for"},
    {"default-cpu-time-ms", SETTING_INT, OFF(default_limits.v[LIMIT_CPU_TIME_MS]), 0, 1, 86400000,
     .def = 5000, .help = "CPU-time limit when the request has none"},
    {"max-cpu-time-ms", SETTING_INT, OFF(max_limits.v[LIMIT_CPU_TIME_MS]), 0, 1, 86400000,
     .def = 60000, .help = "largest cpu_time_ms"},
    {"default-memory-bytes", SETTING_INT, OFF(default_limits.v[LIMIT_MEMORY_BYTES]), 0, 1LL << 20,
     1LL << 40, .def = 128LL << 20, .help = "memory limit when the request has none"},
    {"max-memory-bytes", SETTING_INT, OFF(max_limits.v[LIMIT_MEMORY_BYTES]), 0, 1LL << 20,
     1LL << 40, .def = 1LL << 30, .help = "largest memory_bytes"},
    {"default-output-bytes", SETTING_INT, OFF(default_limits.v[LIMIT_OUTPUT_BYTES]), 0, 1,
     1LL << 30, .def = 64LL << 10, .help = "stdout and stderr cap each, when the request has none"},
    {"max-output-bytes", SETTING_INT, OFF(max_limits.v[LIMIT_OUTPUT_BYTES]), 0, 1, 1LL << 30,
     .def = 4LL << 20, .help = "largest output_bytes"},
    {"default-max-processes", SETTING_INT, OFF(default_limits.v[LIMIT_MAX_PROCESSES]), 0, 1, 65536,
     .def = 64, .help = "process limit when the request has none"},
    {"max-max-processes", SETTING_INT, OFF(max_limits.v[LIMIT_MAX_PROCESSES]), 0, 1, 65536,
     .def = 256, .help = "largest max_processes"},
    {"default-disk-bytes", SETTING_INT, OFF(default_limits.v[LIMIT_DISK_BYTES]), 0, 4096, 1LL << 40,
     .def = 64LL << 20,
     .help = "workspace quota, /tmp and /dev/shm size when the request has none"},
    {"max-disk-bytes", SETTING_INT, OFF(max_limits.v[LIMIT_DISK_BYTES]), 0, 4096, 1LL << 40,
     .def = 1LL << 30, .help = "largest disk_bytes"},
    {"default-open-files", SETTING_INT, OFF(default_limits.v[LIMIT_OPEN_FILES]), 0, 16, 1 << 20,
     .def = 1024, .help = "open files per process when the request has none"},
    {"max-open-files", SETTING_INT, OFF(max_limits.v[LIMIT_OPEN_FILES]), 0, 16, 1 << 20,
     .def = 65536, .help = "largest open_files"},
    {"workspace-inodes", SETTING_INT, OFF(workspace_inodes), 0, 64, 1LL << 22, .def = 32768,
     .help = "files and directories a workspace may hold"},
    {"max-sessions", SETTING_INT, OFF(max_sessions), 0, 0, 65536, .def = 64,
     .help = "sessions kept; past it the least recently used idle one ends"},
    {"max-started-runs", SETTING_INT, OFF(max_started_runs), 0, 1, 65536, .def = 32,
     .help = "StartRun runs kept at once (queued, running, or ended with the outcome not yet "
             "read); past it StartRun is RESOURCE_EXHAUSTED"},
    {"run-result-ttl-s", SETTING_INT, OFF(run_result_ttl_s), 0, 1, 86400, .def = 60,
     .help = "a started run's outcome nobody read is dropped this long after the run ended"},
    {"max-watchers", SETTING_INT, OFF(max_watchers), 0, 1, 4096, .def = 64,
     .help = "WatchRun and CancelRun calls waiting at once (each holds an nng context; the "
             "server opens this many more)"},
    {"session-ttl-s", SETTING_INT, OFF(session_ttl_s), 0, 1, 86400 * 30, .def = 1800,
     .help = "a session unused this long ends"},
    {"max-interpreters", SETTING_INT, OFF(max_interpreters), 0, 0, 256, .def = 4,
     .help = "living interpreters of INTERPRETER sessions at once, each in an engine slot of its "
             "own (uid uid-base + workers + i); past it the least recently used idle one ends "
             "(0: the mode is off)"},
    {"interpreter-idle-s", SETTING_INT, OFF(interpreter_idle_s), 0, 1, 86400, .def = 600,
     .help = "an interpreter without a call this long ends (its session keeps its files)"},
    {"interpreter-max-lifetime-s", SETTING_INT, OFF(interpreter_max_lifetime_s), 0, 1, 86400 * 7,
     .def = 3600,
     .help = "an interpreter ends this long after its start (at most; its session is told)"},
    {"interpreter-grace-ms", SETTING_INT, OFF(interpreter_grace_ms), 0, 1, 60000, .def = 2000,
     .help = "after a cell's timeout raised KeyboardInterrupt, how long it may take to end before "
             "the interpreter is killed (its state lost)"},
    {"max-file-bytes", SETTING_INT, OFF(max_file_bytes), 0, 1, 1LL << 40, .def = 64LL << 20,
     .help = "size of each input file, inline or downloaded"},
    {"download-timeout-ms", SETTING_INT, OFF(download_timeout_ms), 0, 1, 3600000, .def = 10000,
     .help = "time for each download, redirects included"},
    {"download-hosts", SETTING_STRING, STR(download_hosts), 0, 0,
     .def_text = "any host with a public address",
     .help = "comma-separated hosts files may be downloaded from, wherever they resolve"},
    {"download-allow-private", SETTING_INT, OFF(download_allow_private), 0, 0, 1, .def = 0,
     .help = "1: downloads may also reach loopback, private and link-local addresses"},
    {"artifact-bytes", SETTING_INT, OFF(artifact_bytes), 0, 0, 1LL << 30, .def = 1LL << 20,
     .help = "artifact content sent inline per file, and ReadFile's largest read"},
    {"artifacts-total-bytes", SETTING_INT, OFF(artifacts_total_bytes), 0, 0, 1LL << 30,
     .def = 8LL << 20, .help = "artifact content sent inline per response"},
    {"max-artifacts", SETTING_INT, OFF(max_artifacts), 0, 0, 1 << 20, .def = 16384,
     .help = "artifacts per response and entries per ListFiles"},
    {"artifact-depth", SETTING_INT, OFF(artifact_depth), 0, 1, 256, .def = 32,
     .help = "directory levels below output/ searched for artifacts"},
    {"mime-types", SETTING_STRING, STR(mime_types), 0, 0, .def_str = "/etc/mime.types",
     .help = "mime.types database for artifact types"},
    {"runtimes-dir", SETTING_STRING, STR(runtimes_dir), 0, 0,
     .def_text = "share/sandboxd/runtimes beside the binary's directory, when it exists",
     .help = "directory of runtime manifests (docs/RUNTIMES.md), one *.json per runtime beside "
             "the built-in python; each is checked at start"},
    {"wheelhouse", SETTING_STRING, STR(wheelhouse), 0, 0, .def_text = "none",
     .help = "directory of wheels (and sdists) pip may install requirements from, besides the "
             "index (--find-links; with offline = 1 the only source)"},
    {"index-url", SETTING_STRING, STR(index_url), 0, 0, .def_str = SETTINGS_DEFAULT_INDEX_URL,
     .help = "package index (PEP 503) for requirements; pip reaches it only through the server's "
             "egress proxy, under the download-hosts and public-address policy"},
    {"offline", SETTING_INT, OFF(offline), 0, 0, 1, .def = 0,
     .help = "1: no package index: pip installs from the wheelhouse (and URL requirements) only, "
             "with no network at all"},
    {"pip-proxy", SETTING_STRING, STR(pip_proxy), 0, 0, .def_text = "none",
     .help = "http://host:port of an upstream proxy the egress proxy hands pip's checked requests "
             "to, instead of connecting itself"},
    {"pip-tunnels", SETTING_INT, OFF(pip_tunnels), 0, 1, 256, .def = 8,
     .help = "connections one build may hold open through the egress proxy at once; past it 503"},
    {"pip-idle-timeout-ms", SETTING_INT, OFF(pip_idle_timeout_ms), 0, 100, 3600000, .def = 30000,
     .help =
         "a connection through the egress proxy with no byte either way for this long is closed"},
    {"egress-allow", SETTING_STRING, STR(egress_allow), 0, 0, .def_text = "none",
     .help = "comma-separated allow entries (host, *.domain, *, CIDR, each with an optional "
             ":port) a run's allow_net may ask for; none: runs get no network (docs/EGRESS.md)"},
    {"egress-dns", SETTING_STRING, STR(egress_dns), 0, 0, .def_text = "the system's resolver",
     .help = "IP[:port] of the DNS server the egress proxy asks for runs' and pip's names"},
    {"egress-connections", SETTING_INT, OFF(egress_connections), 0, 1, 1024, .def = 32,
     .help = "connections one run may hold open through the egress proxy at once; past it 503"},
    {"egress-bytes", SETTING_INT, OFF(egress_bytes), 0, 1, 1LL << 40, .def = 1LL << 30,
     .help = "bytes one run may move through the egress proxy, both ways; past it the "
             "connection is cut (the run goes on)"},
    {"piston-allow-net", SETTING_STRING, STR(piston_allow_net), 0, 0, .def_text = "none",
     .help = "allow_net of every run of the Piston front (Piston's API has no such field), "
             "comma-separated; within egress-allow"},
    {"requirements-allow-urls", SETTING_INT, OFF(requirements_allow_urls), 0, 0, 1, .def = 0,
     .help =
         "1: also accept \"name @ https://.../name-1.0-py3-none-any.whl\"; the server downloads "
         "the wheel (download-hosts, download-allow-private apply) and pip installs it offline"},
    {"max-concurrent-builds", SETTING_INT, OFF(max_concurrent_builds), 0, 0, 1024,
     .def_text = "half the workers, at least 1",
     .help = "new requirement sets built at once; past it a request for another new set is refused "
             "with RESOURCE_EXHAUSTED, so builds cannot hold every worker"},
    {"requirements-store-bytes", SETTING_INT, OFF(requirements_store_bytes), 0, 1 << 20, 1LL << 50,
     .def = 4LL << 30,
     .help = "disk the requirements store may use; least recently used idle environments are "
             "evicted past it"},
    {"max-requirements", SETTING_INT, OFF(max_requirements), 0, 0, 1024, .def = 32,
     .help = "requirements per request"},
    {"max-requirement-bytes", SETTING_INT, OFF(max_requirement_bytes), 0, 1, 1024, .def = 200,
     .help = "length of each requirement"},
    {"pip-timeout-ms", SETTING_INT, OFF(pip_timeout_ms), 0, 1000, 86400000, .def = 300000,
     .help = "time one environment's pip install may take"},
    {"pip-memory-bytes", SETTING_INT, OFF(pip_memory_bytes), 0, 64LL << 20, 1LL << 40,
     .def = 1LL << 30, .help = "memory of pip's processes; the build's disk comes on top"},
    {"pip-disk-bytes", SETTING_INT, OFF(pip_disk_bytes), 0, 1 << 20, 1LL << 40, .def = 1LL << 30,
     .help = "the build directory's size (a tmpfs) and the largest file"},
    {"tls-cert", SETTING_STRING, STR(tls_cert), 0, 0, .def_text = "none",
     .help = "PEM certificate (then its chain) of the tls+tcp:// listeners; needed by them"},
    {"tls-key", SETTING_STRING, STR(tls_key), 0, 0, .def_text = "none",
     .help = "PEM private key of --tls-cert"},
    {"tls-key-password-file", SETTING_STRING, STR(tls_key_password_file), 0, 0,
     .def_text = "none (the key is not encrypted)",
     .help = "file whose first line is the password of an encrypted --tls-key"},
    {"tls-ca", SETTING_STRING, STR(tls_ca), 0, 0, .def_text = "none",
     .help = "PEM CA bundle that client certificates must chain to"},
    {"tls-client-auth", SETTING_STRING, STR(tls_client_auth), 0, 0,
     .def_text = "required with --tls-ca, else none",
     .help = "none, optional (asked for, verified when given, served either way and logged) "
             "or required (a certificate from --tls-ca, or no connection)"},
    {"tenants", SETTING_STRING, STR(tenants), 0, 0, .def_text = "none (one tenant, default)",
     .help = "JSON file of the tenants (docs/TENANTS.md): each call then proves which it is "
             "with an API key or a client certificate, and gets its own sessions, runs, quotas "
             "and share of the queue; read again on SIGHUP (a bad file keeps the old one)"},
    {"anonymous-tenant", SETTING_STRING, STR(anonymous_tenant), 0, 0, .def_text = "none",
     .help = "with --tenants: the tenant of calls from loopback (127.0.0.0/8, ::1, ipc://) "
             "that carry no credential; without it such calls are UNAUTHENTICATED"},
    {"metrics-auth", SETTING_BOOL, OFF(metrics_auth), 0, 0, 1, .def = 0,
     .help = "with --tenants: /metrics answers only to Authorization: Bearer KEY of a tenant"},
    {"http-listen", SETTING_STRING, STR(http_listen), 0, 0, .def_text = "off",
     .help = "http://host:port or https://host:port (with --tls-cert, --tls-key and, for "
             "client certificates, --tls-ca) of the HTTP listener: /metrics (Prometheus), "
             "/healthz, /readyz, and the fronts of --http-fronts"},
    {"http-fronts", SETTING_STRING, STR(http_fronts), 0, 0, .def_text = "none",
     .help = "comma-separated fronts served on --http-listen, each onto RunCode: piston (the "
             "Piston API v2 at /api/v2/), mcp (the Model Context Protocol, Streamable HTTP at "
             "/mcp); they run code for anyone who reaches the listener (over https:// with "
             "--tls-client-auth required: only for clients with a certificate from --tls-ca)"},
    {"http-allowed-hosts", SETTING_STRING, STR(http_allowed_hosts), 0, 0, .def_text = "none",
     .help = "comma-separated host names or IP addresses the HTTP listener also answers to in "
             "the Host header (a proxy's, an ingress', a Service's name); besides these it "
             "answers only to the host of --http-listen, localhost, the machine's hostname and "
             "addresses, and refuses any other Host with 421 (DNS rebinding); ports are not "
             "compared"},
    {"http-max-connections", SETTING_INT, OFF(http_max_connections), 0, 1, 65536, .def = 64,
     .help = "connections the HTTP listener holds at once (each a thread); past it new ones are "
             "closed"},
    {"http-max-connections-per-ip", SETTING_INT, OFF(http_max_connections_per_ip), 0, 1, 65536,
     .def = 16, .help = "connections to the HTTP listener from one address"},
    {"http-timeout-s", SETTING_INT, OFF(http_timeout_s), 0, 1, 3600, .def = 10,
     .help = "an HTTP connection with no byte received or sent for this long (a stalled "
             "request, an idle keep-alive) is closed"},
    {"http-max-request-bytes", SETTING_INT, OFF(http_max_request_bytes), 0, 4096, 1 << 20,
     .def = 16384,
     .help = "request line and headers an HTTP request may have (414 or 431 past it)"},
    {"http-max-body-bytes", SETTING_INT, OFF(http_max_body_bytes), 0, 1024, 1LL << 30,
     .def = 2LL << 20,
     .help = "a request body a front takes (413 past it, before it is read); routes of "
             "operations take none"},
    {"http-request-timeout-s", SETTING_INT, OFF(http_request_timeout_s), 0, 1, 3600, .def = 30,
     .help = "a request's line, headers and body must all arrive within this long of the "
             "connection's opening or its previous response; a slower client is cut off"},
    {"log-format", SETTING_STRING, STR(log_format), 0, 0, .def_str = "logfmt",
     .help = "the log on stderr: logfmt (key=value) or json (one object per line)"},
    {"zygote", SETTING_BOOL, OFF(zygote), 0, 0, 1, .def = 0,
     .help = "1 (or the flag alone): runs may ask for runtime \"python-zygote\" and are then "
             "forked from their slot's zygote, a sandboxed Python that imported --zygote-preload "
             "at start (docs/ZYGOTE.md); runtime \"python\" stays the default"},
    {"zygote-preload", SETTING_STRING, STR(zygote_preload), 0, 0,
     .def_str = SETTINGS_DEFAULT_ZYGOTE_PRELOAD,
     .help = "comma-separated modules (dotted names, no spaces) each zygote imports once; one "
             "that fails to import fails the zygote's start (logged; python-zygote runs are then "
             "refused, python runs go on)"},
    {"zygote-max-forks", SETTING_INT, OFF(zygote_max_forks), 0, 1, 1000000, .def = 1000,
     .help = "runs forked from one zygote before it is replaced by a fresh one (every fork shares "
             "its address-space layout and hash seed)"},
    {"zygote-max-age-s", SETTING_INT, OFF(zygote_max_age_s), 0, 1, 86400, .def = 600,
     .help = "seconds after its start a zygote is replaced (at the next run)"},
};
#define N_SETTINGS (sizeof(setting_defs) / sizeof(setting_defs[0]))

const struct limit_def limit_defs[LIMITS_N] = {
    [LIMIT_TIMEOUT_MS] = {"timeout_ms", 1, offsetof(Sandbox__V1__Limits, timeout_ms)},
    [LIMIT_CPU_TIME_MS] = {"cpu_time_ms", 1, offsetof(Sandbox__V1__Limits, cpu_time_ms)},
    [LIMIT_MEMORY_BYTES] = {"memory_bytes", 8 << 20, offsetof(Sandbox__V1__Limits, memory_bytes)},
    [LIMIT_OUTPUT_BYTES] = {"output_bytes", 1, offsetof(Sandbox__V1__Limits, output_bytes)},
    [LIMIT_MAX_PROCESSES] = {"max_processes", 1, offsetof(Sandbox__V1__Limits, max_processes)},
    [LIMIT_DISK_BYTES] = {"disk_bytes", 4096, offsetof(Sandbox__V1__Limits, disk_bytes)},
    [LIMIT_OPEN_FILES] = {"open_files", 16, offsetof(Sandbox__V1__Limits, open_files)},
};

void limits_from_proto(const Sandbox__V1__Limits *in, int64_t out[LIMITS_N]) {
  for (size_t i = 0; i < LIMITS_N; i++)
    out[i] = in != NULL ? *(const int64_t *)((const char *)in + limit_defs[i].proto_offset) : 0;
}

void limits_to_proto(const struct settings_limits *in, Sandbox__V1__Limits *out) {
  for (size_t i = 0; i < LIMITS_N; i++)
    *(int64_t *)((char *)out + limit_defs[i].proto_offset) = in->v[i];
}

void settings_defaults(struct server_settings *s) {
  memset(s, 0, sizeof(*s));
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const struct setting_def *d = &setting_defs[i];
    char *field = (char *)s + d->offset;
    if (d->type == SETTING_INT)
      *(int64_t *)field = d->def;
    else if (d->type == SETTING_BOOL)
      *(bool *)field = d->def != 0;
    else if (d->type == SETTING_STRING && d->def_str != NULL)
      snprintf(field, d->size, "%s", d->def_str);
  }
  snprintf(s->listen[0], sizeof(s->listen[0]), "%s", setting_defs[0].def_str);
  s->n_listen = 1;
  /* The defaults said in words (def_text): computed here, or at start. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->workers = cpus > 0 ? cpus : 1;
}

static const struct setting_def *find_def(const char *name, size_t len) {
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (strlen(setting_defs[i].name) == len && strncmp(setting_defs[i].name, name, len) == 0)
      return &setting_defs[i];
  return NULL;
}

static bool parse_bool(const char *value, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no",
                                                                              "off"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
    if (strcasecmp(value, yes[i]) == 0) {
      *out = true;
      return true;
    }
    if (strcasecmp(value, no[i]) == 0) {
      *out = false;
      return true;
    }
  }
  return false;
}

/* Each layer that names "listen" replaces the lists of the layers before it;
 * repeated within one layer, it adds. */
static int apply(struct server_settings *s, const struct setting_def *d, const char *value,
                 bool *listen_replaced, const char *where, struct sbx_error *err) {
  switch (d->type) {
  case SETTING_LISTEN:
    if (!*listen_replaced) {
      s->n_listen = 0;
      *listen_replaced = true;
    }
    if (s->n_listen >= SETTINGS_MAX_LISTEN)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: listen: at most %d URLs", where,
                           SETTINGS_MAX_LISTEN);
    if (strncmp(value, "tcp://", 6) != 0 && strncmp(value, "ipc://", 6) != 0 &&
        !settings_url_is_tls(value))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "%s: listen: \"%s\" is not a tcp://, tls+tcp:// or ipc:// URL", where,
                           value);
    if (strlen(value) >= SETTINGS_URL_MAX)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: listen: URL longer than %d bytes",
                           where, SETTINGS_URL_MAX - 1);
    snprintf(s->listen[s->n_listen++], SETTINGS_URL_MAX, "%s", value);
    return 0;
  case SETTING_STRING: {
    if (strlen(value) >= d->size)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: %s: value longer than %zu bytes",
                           where, d->name, d->size - 1);
    memcpy((char *)s + d->offset, value, strlen(value) + 1);
    return 0;
  }
  case SETTING_INT: {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < d->min || v > d->max)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "%s: %s: \"%s\" is not an integer between %" PRId64 " and %" PRId64,
                           where, d->name, value, d->min, d->max);
    *(int64_t *)((char *)s + d->offset) = v;
    return 0;
  }
  case SETTING_BOOL: {
    bool v;
    if (!parse_bool(value, &v))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "%s: %s: \"%s\" is not one of 1, 0, true, false, yes, no, on, off",
                           where, d->name, value);
    *(bool *)((char *)s + d->offset) = v;
    return 0;
  }
  }
  return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: %s: unknown setting type", where,
                       d->name);
}

static char *trim(char *p) {
  while (isspace((unsigned char)*p))
    p++;
  char *e = p + strlen(p);
  while (e > p && isspace((unsigned char)e[-1]))
    *--e = '\0';
  return p;
}

int settings_load_file(struct server_settings *s, const char *path, struct sbx_error *err) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, errno, "config %s", path);
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
      rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: expected \"name = value\"", where);
      break;
    }
    *eq = '\0';
    char *key = trim(p), *value = trim(eq + 1);
    const struct setting_def *d = find_def(key, strlen(key));
    if (d == NULL) {
      rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: unknown setting \"%s\"", where, key);
      break;
    }
    rv = apply(s, d, value, &listen_replaced, where, err);
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

int settings_load_env(struct server_settings *s, struct sbx_error *err) {
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
        if (apply(s, &setting_defs[i], trim(tok), &listen_replaced, name, err) < 0)
          return -1;
      continue;
    }
    if (apply(s, &setting_defs[i], value, &listen_replaced, name, err) < 0)
      return -1;
  }
  return 0;
}

bool settings_url_is_tls(const char *url) {
  return strncmp(url, "tls+tcp://", 10) == 0;
}

bool settings_http_listen_is_tls(const char *url) {
  return strncmp(url, "https://", 8) == 0;
}

enum tls_client_auth settings_tls_client_auth(const struct server_settings *s) {
  if (strcmp(s->tls_client_auth, "required") == 0)
    return TLS_CLIENT_AUTH_REQUIRED;
  if (strcmp(s->tls_client_auth, "optional") == 0)
    return TLS_CLIENT_AUTH_OPTIONAL;
  if (strcmp(s->tls_client_auth, "none") == 0)
    return TLS_CLIENT_AUTH_NONE;
  return s->tls_ca[0] != '\0' ? TLS_CLIENT_AUTH_REQUIRED : TLS_CLIENT_AUTH_NONE;
}

const char *tls_client_auth_name(enum tls_client_auth mode) {
  switch (mode) {
  case TLS_CLIENT_AUTH_OPTIONAL:
    return "optional";
  case TLS_CLIENT_AUTH_REQUIRED:
    return "required";
  case TLS_CLIENT_AUTH_NONE:
    break;
  }
  return "none";
}

/* The TLS settings among themselves and with the listeners. Files are read
 * at start (server/tls/tls_files.c), not here. */
static int check_tls(const struct server_settings *s, struct sbx_error *err) {
  const char *mode = s->tls_client_auth;
  if (mode[0] != '\0' && strcmp(mode, "none") != 0 && strcmp(mode, "optional") != 0 &&
      strcmp(mode, "required") != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-client-auth: \"%s\" is not one of none, optional, required", mode);
  for (unsigned i = 0; i < s->n_listen; i++)
    if (settings_url_is_tls(s->listen[i]) && (s->tls_cert[0] == '\0' || s->tls_key[0] == '\0'))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "listen %s: a tls+tcp:// listener needs --tls-cert FILE and --tls-key "
                           "FILE (PEM)",
                           s->listen[i]);
  if (settings_http_listen_is_tls(s->http_listen) &&
      (s->tls_cert[0] == '\0' || s->tls_key[0] == '\0'))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "http-listen %s: https:// needs --tls-cert FILE and --tls-key FILE (PEM)",
                         s->http_listen);
  if ((s->tls_cert[0] == '\0') != (s->tls_key[0] == '\0'))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-cert and tls-key: set both (the certificate and its key) or neither");
  if (s->tls_key_password_file[0] != '\0' && s->tls_key[0] == '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-key-password-file: set, but there is no --tls-key");
  if (settings_tls_client_auth(s) != TLS_CLIENT_AUTH_NONE && s->tls_ca[0] == '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-client-auth %s: needs --tls-ca FILE, the CA bundle client "
                         "certificates are verified against",
                         mode);
  return 0;
}

int settings_http_listen_parts(const char *url, char *host, size_t host_len, unsigned *port,
                               struct sbx_error *err) {
  bool tls = settings_http_listen_is_tls(url);
  if (!tls && strncmp(url, "http://", 7) != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "\"%s\" is not an http:// or https://host:port URL", url);
  const char *h = url + (tls ? 8 : 7), *end;
  if (*h == '[') { /* an IPv6 literal */
    end = strchr(h, ']');
    h++;
    if (end == NULL || end[1] != ':')
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "\"%s\": expected [address]:port", url);
  } else {
    end = strrchr(h, ':');
    if (end == NULL || end == h || strcspn(h, "/@") < (size_t)(end - h))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "\"%s\": expected http[s]://host:port",
                           url);
  }
  if (end == h)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "\"%s\": no host", url);
  if ((size_t)(end - h) >= host_len)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "\"%s\": host too long", url);
  memcpy(host, h, (size_t)(end - h));
  host[end - h] = '\0';
  const char *p = end + (*end == ']' ? 2 : 1);
  char *after;
  errno = 0;
  unsigned long v = strtoul(p, &after, 10);
  if (errno != 0 || after == p || !isdigit((unsigned char)*p) || v > 65535 ||
      !(*after == '\0' || strcmp(after, "/") == 0))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "\"%s\": expected a port (0-65535) and no path after the host", url);
  if (!text_graphic_ascii(host))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "\"%s\": bad host", url);
  *port = (unsigned)v;
  return 0;
}

/* The fronts sandboxd knows (server/fronts/fronts.c serves them). */
static const char *const known_fronts[] = {"piston", "mcp"};

static int check_http_fronts(const struct server_settings *s, struct sbx_error *err) {
  if (s->http_fronts[0] != '\0' && s->http_listen[0] == '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "http-fronts: \"%s\" needs --http-listen to be served on", s->http_fronts);
  const char *p = s->http_fronts;
  while (*p != '\0') {
    size_t n = strcspn(p, ","), k = 0;
    while (k < sizeof(known_fronts) / sizeof(known_fronts[0]) &&
           !(strlen(known_fronts[k]) == n && strncmp(known_fronts[k], p, n) == 0))
      k++;
    if (k == sizeof(known_fronts) / sizeof(known_fronts[0]))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "http-fronts: \"%.*s\" is not a front (known: piston, mcp)", (int)n, p);
    p += n + (p[n] == ',');
  }
  return 0;
}

/* --http-allowed-hosts: names (letters, digits, '-', '.', '_') or IP
 * addresses (an IPv6 one with or without brackets), without a port. */
static int check_http_allowed_hosts(const struct server_settings *s, struct sbx_error *err) {
  const char *list = s->http_allowed_hosts;
  for (const char *p = list; *list != '\0'; p++) { /* every entry, an empty last one too */
    size_t n = strcspn(p, ",");
    char entry[256] = "";
    bool ok = n > 0 && n < sizeof(entry);
    if (ok) {
      memcpy(entry, p, n);
      entry[n] = '\0';
    }
    char *e = entry;
    if (ok && entry[0] == '[' && entry[n - 1] == ']') {
      entry[n - 1] = '\0';
      e++;
    }
    unsigned char addr[16];
    if (ok && inet_pton(AF_INET6, e, addr) != 1)
      ok = e == entry && strspn(e, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789-._") == n;
    if (!ok)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "http-allowed-hosts: \"%.*s\" is not a host name or an IP address "
                           "(comma-separated, no port: ports are not compared)",
                           (int)n, p);
    p += n;
    if (*p == '\0')
      break;
  }
  if (list[0] != '\0' && s->http_listen[0] == '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "http-allowed-hosts: \"%s\" needs --http-listen to be served on",
                         s->http_allowed_hosts);
  return 0;
}

/* The operations listener and the log format. */
static int check_operations(const struct server_settings *s, struct sbx_error *err) {
  if (strcmp(s->log_format, "logfmt") != 0 && strcmp(s->log_format, "json") != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "log-format: \"%s\" is not one of logfmt, json", s->log_format);
  char host[SETTINGS_URL_MAX];
  unsigned port;
  if (s->http_listen[0] != '\0' &&
      settings_http_listen_parts(s->http_listen, host, sizeof(host), &port, err) < 0)
    return sbx_error_wrap(err, "http-listen");
  if (check_http_allowed_hosts(s, err) < 0)
    return -1;
  return check_http_fronts(s, err);
}

static bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

int settings_check_module_list(const char *what, const char *list, struct sbx_error *err) {
  const char *p = list;
  while (*p != '\0') {
    size_t n = strcspn(p, ",");
    /* One dotted name: parts that start like an identifier and go on with
     * [A-Za-z0-9_]. Nothing else reaches the zygote's importlib. */
    bool ok = n > 0 && ident_start(p[0]) && p[n - 1] != '.';
    for (size_t i = 1; ok && i < n; i++)
      ok = p[i] == '.' ? p[i - 1] != '.' && i + 1 < n && ident_start(p[i + 1])
                       : ident_start(p[i]) || (p[i] >= '0' && p[i] <= '9');
    if (!ok)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "%s: \"%.*s\" is not a module name: dotted Python identifiers "
                           "(ASCII) separated by commas, no spaces, e.g. numpy,matplotlib.pyplot",
                           what, (int)(n < 80 ? n : 80), p);
    p += n;
    if (*p == ',' && *++p == '\0')
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: ends with a comma", what);
  }
  return 0;
}

/* The zygote settings: the preload list is checked whether or not --zygote
 * is on, so a bad one is found before someone turns zygotes on. */
static int check_zygote(const struct server_settings *s, struct sbx_error *err) {
  if (settings_check_module_list("zygote-preload", s->zygote_preload, err) < 0)
    return -1;
  if (s->zygote && strcmp(s->backend, "rlimit") == 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "zygote: needs a cgroup backend (v2 or v1) for the zygotes' own cgroup; "
                         "--backend rlimit has none");
  return 0;
}

/* The engine runs slot i as uid and gid uid-base + i, for every worker and
 * interpreter, below nobody (65534): say so here, with the range, rather
 * than let it refuse "uid/gid range 410000+6" at start. */
static int check_uids(const struct server_settings *s, struct sbx_error *err) {
  int64_t n = s->workers + s->max_interpreters;
  if (s->uid_base + n <= SETTINGS_UID_END)
    return 0;
  return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "uid-base: %" PRId64 " + %" PRId64 " workers + %" PRId64
                       " interpreters passes uid %d: the sandboxes' uids and gids lie in %d..%d, "
                       "so uid-base is from %d to %" PRId64 " with these (or fewer workers or "
                       "max-interpreters)",
                       s->uid_base, s->workers, s->max_interpreters, SETTINGS_UID_END - 1,
                       SETTINGS_UID_MIN, SETTINGS_UID_END - 1, SETTINGS_UID_MIN,
                       SETTINGS_UID_END - n);
}

int settings_check(const struct server_settings *s, struct sbx_error *err) {
  if (check_tls(s, err) < 0 || check_zygote(s, err) < 0 || check_uids(s, err) < 0)
    return -1;
  for (size_t i = 0; i < LIMITS_N; i++)
    if (s->default_limits.v[i] > s->max_limits.v[i])
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "default %s (%" PRId64 ") is above its maximum (%" PRId64 ")",
                           limit_defs[i].name, s->default_limits.v[i], s->max_limits.v[i]);
  if (s->n_listen == 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "listen: at least one URL is needed");
  if (strcmp(s->backend, "auto") != 0 && strcmp(s->backend, "v2") != 0 &&
      strcmp(s->backend, "v1") != 0 && strcmp(s->backend, "rlimit") != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "backend: \"%s\" is not one of auto, v2, v1, rlimit", s->backend);
  if (s->state_dir[0] != '/')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "state-dir: \"%s\" is not an absolute path",
                         s->state_dir);
  /* A reply carries both streams; it must fit in what a client accepts. */
  if (s->max_limits.v[LIMIT_OUTPUT_BYTES] > (1LL << 30) / 2)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "max-output-bytes: at most 512 MiB");
  /* Both streams and the artifacts must fit in what a client accepts. */
  if (2 * s->max_limits.v[LIMIT_OUTPUT_BYTES] + s->artifacts_total_bytes >
      (1LL << 30) - (1LL << 20))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "artifacts-total-bytes: with two streams of max-output-bytes, "
                         "a reply would exceed 1 GiB");
  if (s->wheelhouse[0] != '\0' && s->wheelhouse[0] != '/')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "wheelhouse: \"%s\" is not an absolute path",
                         s->wheelhouse);
  if (s->offline == 0 && s->index_url[0] == '\0')
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "index-url: empty; set offline = 1 to install without an index");
  if (s->index_url[0] != '\0' && strncmp(s->index_url, "http://", 7) != 0 &&
      strncmp(s->index_url, "https://", 8) != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "index-url: \"%s\" is not an http:// or https:// URL", s->index_url);
  if (!text_graphic_ascii(s->index_url))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "index-url: spaces and control characters are not allowed");
  if (s->pip_proxy[0] != '\0' && s->offline != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "pip-proxy: set, but offline = 1 gives pip no network to use it");
  if (s->pip_proxy[0] != '\0' &&
      (strncmp(s->pip_proxy, "http://", 7) != 0 || strchr(s->pip_proxy, '@') != NULL))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "pip-proxy: \"%s\" is not http://host:port (no credentials)",
                         s->pip_proxy);
  if (!text_graphic_ascii(s->pip_proxy))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "pip-proxy: spaces and control characters are not allowed");
  if (check_operations(s, err) < 0)
    return -1;
  if (s->artifact_bytes > s->artifacts_total_bytes)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "artifact-bytes (%" PRId64 ") is above artifacts-total-bytes (%" PRId64
                         ")",
                         s->artifact_bytes, s->artifacts_total_bytes);
  return 0;
}

/* A setting's default as --help says it: the value (with its size in
 * words for byte counts), or the words of a computed default. */
static void default_text(const struct setting_def *d, char *buf, size_t len) {
  if (d->def_text != NULL) {
    snprintf(buf, len, "%s", d->def_text);
  } else if (d->type == SETTING_BOOL) {
    snprintf(buf, len, "%s", d->def != 0 ? "1, on" : "0, off");
  } else if (d->type != SETTING_INT) {
    snprintf(buf, len, "%s", d->def_str != NULL && d->def_str[0] != '\0' ? d->def_str : "none");
  } else if (strstr(d->name, "-bytes") != NULL && d->def >= 1024) {
    char size[32];
    text_format_bytes((uint64_t)d->def, size, sizeof(size));
    snprintf(buf, len, "%" PRId64 " = %s", d->def, size);
  } else {
    snprintf(buf, len, "%" PRId64, d->def);
  }
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
    const struct setting_def *d = &setting_defs[i];
    char flag[64], env[64], def[64];
    snprintf(flag, sizeof(flag), "--%s %s", d->name,
             d->type == SETTING_INT    ? "N"
             : d->type == SETTING_BOOL ? "[0|1]"
                                       : "VALUE");
    env_name(d, env, sizeof(env));
    default_text(d, def, sizeof(def));
    fprintf(out, "  %-29s %s (default %s)\n  %-29s   env %s\n", flag, d->help, def, "", env);
  }
}

int settings_load(struct server_settings *s, int argc, char **argv, struct sbx_error *err) {
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
  if (config != NULL && config[0] != '\0' && settings_load_file(s, config, err) < 0)
    return -1;
  if (settings_load_env(s, err) < 0)
    return -1;

  struct option opts[N_SETTINGS + 4];
  for (size_t i = 0; i < N_SETTINGS; i++)
    opts[i] = (struct option){setting_defs[i].name,
                              setting_defs[i].type == SETTING_BOOL ? optional_argument
                                                                   : required_argument,
                              NULL, (int)(256 + i)};
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
      const struct setting_def *d = &setting_defs[c - 256];
      char where[80];
      snprintf(where, sizeof(where), "--%s", d->name);
      const char *value = optarg;
      bool ignored;
      /* A bool flag alone is 1; "--zygote 0" is read like "--zygote=0". */
      if (d->type == SETTING_BOOL && value == NULL)
        value = optind < argc && parse_bool(argv[optind], &ignored) ? argv[optind++] : "1";
      if (apply(s, d, value, &listen_replaced, where, err) < 0)
        return -1;
      continue;
    }
    if (c == ':' || (c == '?' && optopt != 0))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "option needs a value or is unknown (see --help)");
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "unknown option %s (see --help)",
                         argv[optind - 1]);
  }
  if (optind < argc)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "unexpected argument \"%s\" (see --help)",
                         argv[optind]);
  return settings_check(s, err);
}
