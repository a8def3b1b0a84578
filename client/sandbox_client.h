/* sandbox_client.h: C client for sandboxd (sandbox.v1 over nng REQ/REP).
 *
 * Build a request, call sbxc_run_code, read the result. One client may be
 * used from several threads at once: each call opens its own nng context.
 *
 * At-most-once: nng's REQ would resend a request after 60 s by default and so
 * run code twice; this client turns resend off, waits for the reply for the
 * request's own timeout plus the queue budget plus a margin, and retries only
 * replies that prove nothing ran (RESOURCE_EXHAUSTED, UNAVAILABLE), with
 * exponential backoff. A call that times out is reported as
 * DEADLINE_EXCEEDED and never retried: the code may have run.
 *
 * Fleets: a client may have several endpoints (sbxc_client_open_many). Each
 * server address has its own socket, so a call that may have run on one
 * server is never sent to another; only the retries above move a call, to
 * an endpoint it has not tried when one is connected. Calls of a session go
 * to the endpoint holding it (docs/CLIENTS.md, "The session rule"). */
#ifndef SANDBOX_CLIENT_H
#define SANDBOX_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* gRPC's status codes, as on the wire. */
enum sbxc_status {
  SBXC_OK = 0,
  /* The run was cancelled (sbxc_cancel_run) before it started: nothing
   * ran. */
  SBXC_CANCELLED = 1,
  /* The call may or may not have run: the connection broke after the
   * request was sent. Never retried, and never means "nothing ran". */
  SBXC_UNKNOWN = 2,
  SBXC_INVALID_ARGUMENT = 3,
  SBXC_DEADLINE_EXCEEDED = 4,
  SBXC_NOT_FOUND = 5,
  SBXC_ALREADY_EXISTS = 6,
  SBXC_RESOURCE_EXHAUSTED = 8,
  SBXC_FAILED_PRECONDITION = 9,
  SBXC_UNIMPLEMENTED = 12,
  SBXC_INTERNAL = 13,
  SBXC_UNAVAILABLE = 14,
  /* The server has --tenants and the call's API key (or certificate) is
   * missing or belongs to no tenant: nothing ran (docs/TENANTS.md). */
  SBXC_UNAUTHENTICATED = 16,
};

enum sbxc_killed_by {
  SBXC_KILLED_BY_NONE = 0,
  SBXC_KILLED_BY_TIMEOUT = 1,
  SBXC_KILLED_BY_MEMORY = 2,
  SBXC_KILLED_BY_OUTPUT_LIMIT = 3,
  SBXC_KILLED_BY_SIGNAL = 4,
  SBXC_KILLED_BY_CANCELLED = 5, /* sbxc_cancel_run killed the whole tree */
};

/* 0 = the server's default. Signed: the server names bad values. */
struct sbxc_limits {
  int64_t timeout_ms;
  int64_t cpu_time_ms;
  int64_t memory_bytes;
  int64_t output_bytes;
  int64_t max_processes;
  int64_t disk_bytes;
  int64_t open_files;
};

struct sbxc_artifact {
  const char *name;
  const char *relative_path;
  uint64_t size;
  const char *mime;
  const uint8_t *content;
  size_t content_len;
  bool content_omitted; /* over a cap of the server: metadata only */
};

/* What a run with allow_net did on the network, as the server's egress
 * proxy saw it (docs/EGRESS.md). */
struct sbxc_egress {
  uint32_t connections; /* requests and tunnels the program opened */
  uint32_t refused;     /* of them, refused by the policy or a cap */
  uint64_t bytes_up;    /* relayed from the program */
  uint64_t bytes_down;  /* relayed to the program */
};

/* A compiled runtime's compile stage (RunCodeResponse.compile,
 * docs/RUNTIMES.md). failed: the program did not run (the result's
 * killed_by, exit_code and signal are then the compiler's). */
struct sbxc_compile {
  const uint8_t *stdout_data;
  size_t stdout_len;
  bool stdout_truncated;
  const uint8_t *stderr_data;
  size_t stderr_len;
  bool stderr_truncated;
  int killed_by; /* enum sbxc_killed_by */
  int exit_code;
  int signal;
  uint64_t wall_time_ms;
  uint64_t cpu_time_ms;
  uint64_t peak_memory_bytes;
  bool failed;
};

struct sbxc_result {
  int status;          /* enum sbxc_status */
  const char *message; /* why, when status != SBXC_OK; "" otherwise */
  unsigned attempts;   /* calls made, retries included */
  /* Valid when status == SBXC_OK: */
  const char *run_id;
  const char *session_id;
  const uint8_t *stdout_data;
  size_t stdout_len;
  bool stdout_truncated;
  const uint8_t *stderr_data;
  size_t stderr_len;
  bool stderr_truncated;
  int killed_by; /* enum sbxc_killed_by */
  int exit_code;
  int signal;
  uint64_t wall_time_ms;
  uint64_t cpu_time_ms;
  uint64_t peak_memory_bytes;
  const struct sbxc_artifact *artifacts;
  size_t n_artifacts;
  const char *const *feedback;
  size_t n_feedback;
  bool session_created;
  /* The last expression's value as text/plain ("" when none), and for
   * INTERPRETER sessions what happened to the state (docs/INTERPRETER.md). */
  const char *result;
  bool result_truncated;
  bool state_lost;        /* this call ran in a fresh interpreter: the old one's state is gone */
  bool interpreter_ended; /* this call ended the interpreter: the next one starts fresh */
  int session_mode;       /* enum sbxc_session_mode */
  /* A run with allow_net: its egress summary; NULL when the reply has none
   * (a run without network, or a server that predates it). */
  const struct sbxc_egress *egress;
  /* A compiled runtime's compile stage; NULL for the others. */
  const struct sbxc_compile *compile;
  void *internal_; /* owned storage; freed by sbxc_result_free */
};

typedef struct sbxc_client sbxc_client;
typedef struct sbxc_request sbxc_request;

/* A client of the servers at urls (n >= 1): tcp://HOST:PORT (HOST an IPv4
 * address, [IPv6] or a host name), ipc://PATH, or inproc://NAME (a server in
 * the same process: sandboxd's HTTP fronts reach it so) (tls+tcp://: see
 * sbxc_client_open_tls). A host name counts as one
 * endpoint per address it resolves to (a Kubernetes headless Service),
 * looked up again every 30 s at call time; a failed look-up keeps the
 * addresses it had. Every address is dialed in the background and redialed
 * (100 ms to 2 s apart) when its connection is lost; a server that is down
 * is not an error here: calls skip it. Returns 0, or -1 with err filled (a
 * malformed URL). */
int sbxc_client_open_many(sbxc_client **out, const char *const *urls, size_t n, char *err,
                          size_t errlen);
/* TLS for tls+tcp://HOST:PORT endpoints: nng's TLS transport, TLS 1.2
 * through mbedTLS on Debian. Paths of PEM files, read when the client opens
 * (NULL or "": not given). The client always verifies the server. */
struct sbxc_tls {
  /* The CA bundle the server's certificate must chain to. Required: nng
   * reads no system CA store. */
  const char *ca_file;
  /* This client's certificate (then its chain) and its unencrypted key,
   * for a server with --tls-client-auth required or optional: both or
   * neither; one file holding both may be given as both. */
  const char *cert_file;
  const char *key_file;
  /* The name the server's certificate must carry; NULL: each URL's host as
   * written ("sandboxd.default.svc", "10.0.0.7"). mbedTLS 2.28 compares it
   * with the certificate's subjectAltName DNS entries (or, without any, its
   * CN), never with IP entries: a server dialed by address needs that
   * address as a DNS entry too, or a server_name it carries. */
  const char *server_name;
};
/* sbxc_client_open_many for tls+tcp:// URLs, every one of them (a plain
 * endpoint beside them would be a silent downgrade). One nng TLS
 * configuration per server name, shared by the dialers of every address.
 * A server that refuses this client's certificate, or whose certificate
 * does not verify, never connects: calls fail UNAVAILABLE ("nothing was
 * sent"), saying how many TLS handshakes failed. Returns 0, or -1 with err
 * (a malformed URL, a file that cannot be read or that nng cannot use). */
int sbxc_client_open_tls(sbxc_client **out, const char *const *urls, size_t n,
                         const struct sbxc_tls *tls, char *err, size_t errlen);
/* sbxc_client_open_many with one URL. */
int sbxc_client_open(sbxc_client **out, const char *url, char *err, size_t errlen);
/* Closes every connection. No call of this client may be in flight. */
void sbxc_client_close(sbxc_client *client);
/* Retries of RESOURCE_EXHAUSTED/UNAVAILABLE (default 3; 0 = never). */
void sbxc_client_set_retries(sbxc_client *client, unsigned retries);
/* How long a call may wait in the server's queue before it must start
 * (default 30000 ms); the server answers DEADLINE_EXCEEDED past it. */
void sbxc_client_set_queue_wait_ms(sbxc_client *client, uint64_t ms);
/* The largest request the client sends (default 8 MiB, sandboxd's default
 * --max-message-bytes). nng drops a larger message at the server together
 * with its connection, with no answer; the client refuses it instead with
 * INVALID_ARGUMENT, and nothing is sent. */
void sbxc_client_set_max_request_bytes(sbxc_client *client, size_t bytes);
/* How long a call waits for a connected endpoint (for a session: for the
 * endpoint holding it) when there is none, before it fails UNAVAILABLE with
 * "no endpoint connected within N ms ... nothing was sent". Default
 * SBXC_CONNECT_TIMEOUT_DEFAULT_MS, the connect timeout of every client (the
 * CLIs' --connect-timeout-ms, Python's connect_timeout_s, TypeScript's
 * connectTimeoutMs: docs/CLIENTS.md); SBXC_CONNECT_TIMEOUT_CALL: as long as
 * the call may take (queue wait + the run's timeout + 5 s). */
#define SBXC_CONNECT_TIMEOUT_DEFAULT_MS 5000
#define SBXC_CONNECT_TIMEOUT_CALL UINT64_MAX
void sbxc_client_set_connect_timeout_ms(sbxc_client *client, uint64_t ms);
/* The API key every call of this client carries (RequestEnvelope.credential)
 * for a server with --tenants (docs/TENANTS.md): copied; NULL or "" clears
 * it. At most SBXC_API_KEY_MAX bytes of printable ASCII. Returns 0, or -1
 * with errno EINVAL (a bad key) or ENOMEM. Call before the first call: a
 * different key forgets where the client's sessions live (a session id
 * names a session of the key's tenant). */
#define SBXC_API_KEY_MAX 512
int sbxc_client_set_api_key(sbxc_client *client, const char *key);
/* For sandboxd's own HTTP fronts, which call their server in-process on
 * behalf of many HTTP callers through one client: the caller the calls made
 * by this thread carry until it is cleared (NULL), in place of the client's
 * API key. The server accepts cert_identities and loopback only on its
 * in-process listener. Nothing is copied: keep it alive while it is set. */
struct sbxc_caller {
  const char *api_key;                /* a Bearer key, or NULL */
  const char *const *cert_identities; /* a verified client certificate's, or NULL */
  size_t n_cert_identities;
  bool loopback; /* the HTTP caller is on 127.0.0.0/8 or ::1 */
};
void sbxc_thread_caller_set(const struct sbxc_caller *caller);
/* How often host names are looked up again (default 30000 ms). */
void sbxc_client_set_resolve_interval_ms(sbxc_client *client, uint64_t ms);
/* Waits until at least count endpoints are connected (0: every one), for
 * at most timeout_ms. Returns 0, or -1 when they were not in time. */
int sbxc_client_wait_connected(sbxc_client *client, size_t count, uint64_t timeout_ms);
/* Every endpoint address and whether it is connected now, as a malloc'd JSON
 * object {"tcp://10.0.0.7:7878": true, ...}. Returns 0 or -1 (err). */
int sbxc_client_endpoints_json(sbxc_client *client, char **json, char *err, size_t errlen);

sbxc_request *sbxc_request_new(void);
void sbxc_request_free(sbxc_request *req);
/* Each returns 0, or -1 when out of memory. Data is copied. */
int sbxc_request_set_code(sbxc_request *req, const char *code, size_t len);
int sbxc_request_set_stdin(sbxc_request *req, const void *data, size_t len);
int sbxc_request_add_arg(sbxc_request *req, const char *arg);
int sbxc_request_add_file(sbxc_request *req, const char *path, const void *data, size_t len);
int sbxc_request_add_file_url(sbxc_request *req, const char *path, const char *url);
int sbxc_request_add_requirement(sbxc_request *req, const char *spec);
int sbxc_request_add_env(sbxc_request *req, const char *key, const char *value);
int sbxc_request_set_run_id(sbxc_request *req, const char *run_id);
int sbxc_request_set_session_id(sbxc_request *req, const char *session_id);
int sbxc_request_set_runtime(sbxc_request *req, const char *runtime);
/* Instead of a runtime, Piston's way (docs/RUNTIMES.md): a language (name
 * or alias) and a version range ("", "*" or NULL: any); clears the runtime. */
int sbxc_request_set_language(sbxc_request *req, const char *language, const char *version);
/* A compiled runtime's compile-stage limits (RunCodeRequest.compile_limits);
 * zeros: its defaults. disk_bytes must be 0 (the run's workspace). */
void sbxc_request_set_compile_limits(sbxc_request *req, const struct sbxc_limits *limits);
/* What a new session keeps (docs/INTERPRETER.md); the wire's values. */
enum sbxc_session_mode {
  SBXC_SESSION_MODE_UNSPECIFIED = 0,
  SBXC_SESSION_MODE_FILES = 1,
  SBXC_SESSION_MODE_INTERPRETER = 2,
};
void sbxc_request_set_session_mode(sbxc_request *req, int mode);
void sbxc_request_set_limits(sbxc_request *req, const struct sbxc_limits *limits);
/* One host the run's code may reach (RunCodeRequest.allow_net, docs/EGRESS.md):
 * "host", "*.domain", "*", "CIDR", each optionally ":port" (IPv6 in
 * brackets); without a port 80 and 443. Call once per entry; none: no
 * network. The server checks each against its --egress-allow (and the
 * tenant's egress_allow) and refuses the run with INVALID_ARGUMENT naming
 * the entry. Returns 0, or -1 when out of memory. */
int sbxc_request_add_allow_net(sbxc_request *req, const char *entry);

/* Calls RunCode. Always fills result (free it with sbxc_result_free);
 * returns 0 when status == SBXC_OK, -1 otherwise. */
int sbxc_run_code(sbxc_client *client, const sbxc_request *req, struct sbxc_result *result);
void sbxc_result_free(struct sbxc_result *result);
/* The endpoint the call's last attempt went to ("tcp://10.0.0.7:7878"), also
 * when it failed; "" when it went nowhere. Valid until sbxc_result_free. */
const char *sbxc_result_endpoint(const struct sbxc_result *result);

/* Artifacts come from the sandbox: their relative_path is hostile. These
 * write them below dir and never outside it, as the Python client's
 * Artifact.save and the TypeScript client's saveTo do: only a plain
 * relative path (no empty, "." or ".." component, not absolute, shorter
 * than PATH_MAX, no component over 255 bytes); every directory below dir
 * made if missing and opened without following a symlink; the file
 * created or truncated only when it is a regular file with no other hard
 * link (a symlink, a FIFO or a directory at its name is refused, and
 * nothing blocks). dir itself is the caller's: it is made (with its
 * parents) when missing, and may be a symlink. */
/* Writes a's content to dir/a->relative_path. Returns 0, or -1 with err
 * ("artifact \"PATH\": why", the path made printable) and errno: EINVAL a
 * path or a file refused as unsafe, ENODATA content the server left out,
 * else the system's. */
int sbxc_artifact_save(const struct sbxc_artifact *artifact, const char *dir, char *err,
                       size_t errlen);
/* Saves every artifact of result whose content came back, in order;
 * stops at the first that cannot be saved (-1 with err and errno as
 * above), as the Python client's save_artifacts does. Returns 0 or -1. */
int sbxc_artifacts_save(const struct sbxc_result *result, const char *dir, char *err,
                        size_t errlen);

/* Calls Health on one connected endpoint: *serving is true for SERVING.
 * Returns 0 or -1 (message in err). */
int sbxc_health(sbxc_client *client, bool *serving, char *err, size_t errlen);
/* Calls GetInfo and returns it as a malloc'd JSON object in *json. */
int sbxc_get_info_json(sbxc_client *client, char **json, char *err, size_t errlen);

/* Sessions, each on the endpoint holding the session. Each returns 0, or
 * -1 with the status in *status (when not NULL) and the reason in err. */
int sbxc_close_session(sbxc_client *client, const char *session_id, int *status, char *err,
                       size_t errlen);
/* ListFiles as a malloc'd JSON object {"entries":[{name, relative_path,
 * type, size}], "truncated": bool}. */
int sbxc_list_files_json(sbxc_client *client, const char *session_id, const char *path, char **json,
                         int *status, char *err, size_t errlen);
/* ReadFile: *data (malloc'd) holds up to length bytes at offset; *size is
 * the file's size, *eof whether data reaches its end. */
int sbxc_read_file(sbxc_client *client, const char *session_id, const char *path, uint64_t offset,
                   uint64_t length, uint8_t **data, size_t *len, uint64_t *size, bool *eof,
                   int *status, char *err, size_t errlen);

/* ---- Streaming and cancel (docs/STREAMING.md) ----
 *
 * sbxc_start_run queues a run and answers at once with a handle; the run's
 * output is read while it runs with sbxc_watch_run (a long poll), or with
 * sbxc_follow_run (the whole loop); sbxc_cancel_run stops it, from any
 * thread, also while a watch of it waits.
 *
 * A run lives on the server that started it: the handle remembers that
 * endpoint, and its watches and cancels go there and nowhere else (they
 * wait for it to connect, up to the connect timeout, and are retried there
 * only). It keeps that endpoint's connection open even when a host name no
 * longer resolves to it. The handle is immutable: calls with it may be made
 * from several threads at once. Free it with sbxc_run_free after its last
 * call, and before sbxc_client_close. */
typedef struct sbxc_run sbxc_run;

enum sbxc_run_state {
  SBXC_RUN_QUEUED = 1,  /* waiting for a worker */
  SBXC_RUN_RUNNING = 2, /* preparing (requirements, files) or running */
  SBXC_RUN_DONE = 3,    /* ended: its outcome can be read */
};

/* Calls StartRun: the request is validated and queued like sbxc_run_code's
 * (same endpoint choice, session rule and retries of answers that prove
 * nothing ran). Returns 0 with *run, or -1 with *run NULL. result (NULL:
 * not wanted) is filled either way, free it with sbxc_result_free: status,
 * message, attempts and sbxc_result_endpoint as sbxc_run_code fills them
 * for a call that was refused or failed; on success status SBXC_OK and
 * run_id, nothing else. A reply lost after the request left (UNKNOWN,
 * DEADLINE_EXCEEDED) means the run may have started: with a run_id of your
 * own in the request it can still be found (sbxc_run_attach). */
int sbxc_start_run(sbxc_client *client, const sbxc_request *req, sbxc_run **run,
                   struct sbxc_result *result);
/* A handle of a run started elsewhere (another process, or a RunCode call
 * with a run_id set: it can be watched and cancelled while it runs), on
 * endpoint (a key as sbxc_result_endpoint spells it), or with endpoint NULL
 * on the client's only endpoint. Nothing is sent. Returns 0, or -1 with err
 * (no such endpoint; endpoint NULL with several). */
int sbxc_run_attach(sbxc_client *client, const char *run_id, const char *endpoint, sbxc_run **run,
                    char *err, size_t errlen);
const char *sbxc_run_id(const sbxc_run *run);
/* The endpoint the run lives on ("tcp://10.0.0.7:7878"). */
const char *sbxc_run_endpoint(const sbxc_run *run);
void sbxc_run_free(sbxc_run *run);

/* One WatchRun answer. */
struct sbxc_watch {
  int status;          /* of the WatchRun call: SBXC_OK, or NOT_FOUND, ... */
  const char *message; /* why, when status != SBXC_OK; "" otherwise */
  /* Valid when status == SBXC_OK: */
  int state; /* enum sbxc_run_state */
  /* The output past the offsets asked for (at most 256 KiB of each stream
   * per answer: ask again from the new offsets), as raw bytes (a UTF-8
   * sequence may be split between two answers), and where each starts. */
  const uint8_t *stdout_data;
  size_t stdout_len;
  uint64_t stdout_offset;
  const uint8_t *stderr_data;
  size_t stderr_len;
  uint64_t stderr_offset;
  bool stdout_truncated; /* the stream reached the run's output limit */
  bool stderr_truncated;
  /* The run is done and the caller has all of its output: result holds
   * its outcome exactly as sbxc_run_code would have filled it (status
   * SBXC_CANCELLED when it was cancelled before it started; killed_by
   * SBXC_KILLED_BY_CANCELLED when it was cancelled while running), with
   * the run's endpoint as sbxc_result_endpoint. It is freed with the watch;
   * to keep it, copy the struct and zero w.result. */
  bool complete;
  struct sbxc_result result;
  void *internal_; /* owned storage; freed by sbxc_watch_free */
};

/* Calls WatchRun on the run's endpoint: answers as soon as the run has
 * output past the offsets, has ended, or wait_ms (at most 60000; 0: at
 * once) has passed. The call waits for the reply wait_ms + 5 s. Always
 * fills out (free it with sbxc_watch_free); returns 0 when out->status ==
 * SBXC_OK, -1 otherwise (NOT_FOUND: an unknown run id, or its outcome was
 * read more than 5 s ago or expired). Watching changes nothing on the
 * server: a failed watch may be made again. */
int sbxc_watch_run(sbxc_client *client, const sbxc_run *run, uint64_t stdout_offset,
                   uint64_t stderr_offset, uint32_t wait_ms, struct sbxc_watch *out);
void sbxc_watch_free(struct sbxc_watch *w);

/* Calls CancelRun on the run's endpoint: a queued run never starts, a
 * running one's whole process tree is killed. The answer comes once the
 * run has ended (the server waits up to 10 s for that; the call waits 15
 * s); *state (NULL: not wanted) is then SBXC_RUN_DONE. Cancelling a run that
 * has ended changes nothing. Returns 0, or -1 with *status (NULL: not
 * wanted; NOT_FOUND for an unknown run) and err. Safe from another thread
 * while a watch of the run waits. */
int sbxc_cancel_run(sbxc_client *client, const sbxc_run *run, int *state, int *status, char *err,
                    size_t errlen);

/* Which stream an output chunk is of. */
enum sbxc_stream { SBXC_STDOUT = 1, SBXC_STDERR = 2 };
/* Called with each chunk of output as it arrives, in order per stream. */
typedef void (*sbxc_output_fn)(void *user, int stream, const uint8_t *data, size_t len);

/* The client's loop of docs/STREAMING.md: watches run (each watch waiting
 * up to wait_ms) until it is complete, calling on_output (NULL: none) with
 * every chunk, then fills result as sbxc_run_code would have (its stdout
 * and stderr hold the whole output again). A watch call that fails ends the
 * loop with its status and message in result (the run itself may go on).
 * Returns 0 when result->status == SBXC_OK, -1 otherwise. */
int sbxc_follow_run(sbxc_client *client, const sbxc_run *run, uint32_t wait_ms,
                    sbxc_output_fn on_output, void *user, struct sbxc_result *result);

/* "OK", "RESOURCE_EXHAUSTED", ...; "none", "timeout", ... */
const char *sbxc_status_name(int status);
const char *sbxc_killed_by_name(int killed_by);

#ifdef __cplusplus
}
#endif
#endif
