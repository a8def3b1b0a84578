/* settings.h: the server's settings, in one struct filled in one place.
 *
 * Order (later wins): built-in defaults, an optional config file
 * (--config FILE or SANDBOXD_CONFIG), environment variables (SANDBOXD_<NAME>),
 * command-line flags (--<name>). One table in settings.c declares every
 * setting once, so the file keys, the variables, the flags and --help can
 * never disagree. */
#ifndef SBX_SETTINGS_H
#define SBX_SETTINGS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "sandbox.pb-c.h"

#define SETTINGS_MAX_LISTEN 8
#define SETTINGS_URL_MAX 256
/* The sandboxes' uids and gids: uid-base .. uid-base + workers +
 * max-interpreters - 1 lie in SETTINGS_UID_MIN .. SETTINGS_UID_END - 1
 * (below nobody, 65534, as the engine requires). */
#define SETTINGS_UID_MIN 1000
#define SETTINGS_UID_END 65534

/* The limits of a run, as sandbox.v1.Limits has them, indexed by one enum
 * everywhere in the server (settings, validation, GetInfo): signed so bad
 * input can be named. limit_defs (settings.c) holds each one's name, its
 * smallest meaningful value and its place in the proto's message. */
enum limit_index {
  LIMIT_TIMEOUT_MS,
  LIMIT_CPU_TIME_MS,
  LIMIT_MEMORY_BYTES,
  LIMIT_OUTPUT_BYTES,
  LIMIT_MAX_PROCESSES,
  LIMIT_DISK_BYTES,
  LIMIT_OPEN_FILES,
  LIMITS_N
};

struct settings_limits {
  int64_t v[LIMITS_N];
};

struct limit_def {
  const char *name;    /* the proto's field name: "timeout_ms" */
  int64_t min;         /* smallest value that makes sense; 0 always means the default */
  size_t proto_offset; /* of the int64 field in Sandbox__V1__Limits */
};
extern const struct limit_def limit_defs[LIMITS_N];

/* Between the proto's message and the array (a NULL message is all zeros,
 * "the defaults"). */
void limits_from_proto(const Sandbox__V1__Limits *in, int64_t out[LIMITS_N]);
void limits_to_proto(const struct settings_limits *in, Sandbox__V1__Limits *out);

struct server_settings {
  char listen[SETTINGS_MAX_LISTEN][SETTINGS_URL_MAX];
  unsigned n_listen;
  int64_t workers;  /* worker slots, each owning one engine slot */
  int64_t queue;    /* calls waiting for a worker; past it RESOURCE_EXHAUSTED */
  int64_t contexts; /* nng contexts receiving; 0 = workers + queue + 16 + max_watchers */
  char state_dir[PATH_MAX];
  char backend[16]; /* auto, v2, v1, rlimit */
  char cgroup_parent[PATH_MAX];
  int64_t uid_base;
  int64_t max_message_bytes; /* NNG_OPT_RECVMAXSZ on each listener */
  int64_t max_connections;   /* per listener; past it new connections are closed */
  int64_t idle_timeout_ms;   /* a connection without a call quiet this long is closed */
  int64_t max_files;
  int64_t max_args;
  int64_t max_env;
  int64_t max_code_bytes;
  struct settings_limits default_limits;
  struct settings_limits max_limits;
  /* Workspaces, sessions, input files, artifacts (docs/WORKSPACES.md). */
  int64_t workspace_inodes;        /* nr_inodes of each workspace tmpfs */
  int64_t max_sessions;            /* past it the least recently used idle one ends */
  int64_t session_ttl_s;           /* idle time after which a session ends */
  int64_t max_started_runs;        /* StartRun runs in the run table at once */
  int64_t run_result_ttl_s;        /* an unread outcome is kept this long */
  int64_t max_watchers;            /* WatchRun/CancelRun calls waiting at once */
  int64_t max_file_bytes;          /* each input file, inline or downloaded */
  int64_t download_timeout_ms;     /* each download, redirects included */
  char download_hosts[1024];       /* comma-separated allowlist; "" = any host */
  int64_t download_allow_private;  /* 1: also loopback, private, link-local addresses */
  int64_t requirements_allow_urls; /* 1: "name @ https://.../x.whl", fetched by the server */
  int64_t max_concurrent_builds;   /* new environments built at once; 0: half the workers */
  int64_t artifact_bytes;          /* content inline per artifact; ReadFile's largest read */
  int64_t artifacts_total_bytes;   /* content inline per response */
  int64_t max_artifacts;           /* artifacts per response, entries per ListFiles */
  int64_t artifact_depth;          /* directory levels below output/ */
  char mime_types[PATH_MAX];       /* the mime.types database */
  char runtimes_dir[PATH_MAX];     /* runtime manifests; "" = beside the binary */
  /* Requirements (docs/REQUIREMENTS.md). */
  char wheelhouse[PATH_MAX];        /* wheels pip installs from (--find-links); "" = none */
  char index_url[SETTINGS_URL_MAX]; /* package index, through the egress proxy */
  int64_t offline;                  /* 1: no index (pip --no-index), no egress proxy */
  char pip_proxy[SETTINGS_URL_MAX]; /* upstream proxy of the egress proxy; "" = direct */
  int64_t pip_tunnels;              /* connections one build may hold through the proxy */
  int64_t pip_idle_timeout_ms;      /* a proxied connection idle this long is closed */
  int64_t requirements_store_bytes; /* the store's cap; LRU eviction past it */
  int64_t max_requirements;         /* requirements per request */
  int64_t max_requirement_bytes;    /* length of each */
  int64_t pip_timeout_ms;           /* one environment's build */
  int64_t pip_memory_bytes;         /* pip's processes (the build tmpfs comes on top) */
  int64_t pip_disk_bytes;           /* the build tmpfs, and the largest file */
  /* Runs' own network (RunCodeRequest.allow_net, docs/EGRESS.md). */
  char egress_allow[4096];     /* entries any run may ask for, comma-separated; "" = none */
  char egress_dns[80];         /* IP[:port] of the DNS server the proxy asks; "" = the system's */
  int64_t egress_connections;  /* one run's connections through the proxy at once */
  int64_t egress_bytes;        /* one run's bytes through the proxy, both ways */
  char piston_allow_net[1024]; /* allow_net of every Piston front run; "" = no network */
  /* TLS of tls+tcp:// listeners (server/tls/tls_files.h, docs/SECURITY.md). */
  char tls_cert[PATH_MAX];              /* PEM certificate (chain); "" = none */
  char tls_key[PATH_MAX];               /* its PEM private key */
  char tls_key_password_file[PATH_MAX]; /* first line: the key's password; "" = none */
  char tls_ca[PATH_MAX];                /* PEM CA bundle client certificates chain to */
  char tls_client_auth[16];             /* none, optional, required; "" = by tls_ca */
  /* Operations (docs/OPERATIONS.md, "Metrics and probes"). */
  /* Tenants (server/tenant/tenants.h, docs/TENANTS.md). */
  char tenants[PATH_MAX];             /* the tenants file; "" = one tenant, default */
  char anonymous_tenant[65];          /* loopback callers without a credential; "" = refused */
  bool metrics_auth;                  /* /metrics wants a tenant's Bearer key */
  char http_listen[SETTINGS_URL_MAX]; /* http://host:port for /metrics and probes; "" = none */
  int64_t http_max_connections;       /* open at once; past it new ones are closed */
  int64_t http_max_connections_per_ip;
  int64_t http_timeout_s;         /* a connection idle (or a request stalled) this long closes */
  int64_t http_max_request_bytes; /* request line and headers */
  int64_t http_max_body_bytes;    /* a POST body to a front; past it 413 */
  int64_t http_request_timeout_s; /* a whole request (line, headers, body) must arrive in this */
  char http_fronts[64]; /* comma-separated fronts on http_listen: "piston", "mcp"; "" = none */
  char http_allowed_hosts[1024]; /* Host names besides the listener's own, comma-separated */
  char log_format[16];           /* logfmt or json */
  /* Zygotes (docs/ZYGOTE.md): runtime "python-zygote". */
  bool zygote;               /* runs may ask to be forked from the slot's zygote */
  char zygote_preload[1024]; /* dotted module names, comma-separated: imported once */
  int64_t zygote_max_forks;  /* a zygote is replaced after this many runs */
  int64_t zygote_max_age_s;  /* or this long after its start */
  /* Interpreter sessions (docs/INTERPRETER.md). */
  int64_t max_interpreters;
  int64_t interpreter_idle_s, interpreter_max_lifetime_s, interpreter_grace_ms;
};

/* Whether clients of a TLS listener must show a certificate. */
enum tls_client_auth {
  TLS_CLIENT_AUTH_NONE,     /* not asked for */
  TLS_CLIENT_AUTH_OPTIONAL, /* asked for; verified when given; served either way (logged) */
  TLS_CLIENT_AUTH_REQUIRED, /* a certificate from tls_ca, or no connection */
};

/* tls_client_auth in force: as set, else required with a CA, none without. */
enum tls_client_auth settings_tls_client_auth(const struct server_settings *s);
const char *tls_client_auth_name(enum tls_client_auth mode);
/* Whether a listen URL is a TLS one (tls+tcp://). */
bool settings_url_is_tls(const char *url);
/* Whether an --http-listen URL is https://. */
bool settings_http_listen_is_tls(const char *url);

/* The host (brackets removed from an IPv6 literal) and port of an
 * http://host:port[/] URL, as --http-listen takes it. 0, or -1 with err. */
int settings_http_listen_parts(const char *url, char *host, size_t host_len, unsigned *port,
                               struct sbx_error *err);

/* The package index in force: index_url, or "" when offline. */
static inline const char *settings_index_url(const struct server_settings *s) {
  return s->offline != 0 ? "" : s->index_url;
}

#define SETTINGS_DEFAULT_INDEX_URL "https://pypi.org/simple" /* pip's own default */
/* What Debian's python3-numpy and python3-matplotlib provide: what most
 * plotting code imports first. */
#define SETTINGS_DEFAULT_ZYGOTE_PRELOAD "numpy,matplotlib.pyplot"

/* Whether list is "" or module names ("a.b", [A-Za-z_][A-Za-z0-9_]* parts)
 * separated by single commas. When not, why into err (INVALID_ARGUMENT). */
int settings_check_module_list(const char *what, const char *list, struct sbx_error *err);

/* Fills s from defaults, the config file, the environment and argv, in that
 * order. Returns 0, 1 when --help or --version was printed (exit 0), or -1
 * with err (INVALID_ARGUMENT, naming the setting and where it came from). */
int settings_load(struct server_settings *s, int argc, char **argv, struct sbx_error *err);

/* The defaults, from the table that also writes them in --help. */
void settings_defaults(struct server_settings *s);
int settings_load_file(struct server_settings *s, const char *path, struct sbx_error *err);
int settings_load_env(struct server_settings *s, struct sbx_error *err);
/* Checks cross-field rules (defaults within maxima, ...). */
int settings_check(const struct server_settings *s, struct sbx_error *err);
void settings_usage(FILE *out, const char *prog);

#endif
