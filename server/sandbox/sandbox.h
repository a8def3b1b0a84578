/* sandbox.h: the isolation engine's public interface.
 *
 * Plain C structs in (a spec) and out (a result). The engine knows nothing of
 * nng or protobuf. One engine per process, created before any thread is
 * started; sandbox_run() may then be called from several threads at once as
 * long as each call uses a different slot (a slot owns a uid, a cgroup and a
 * mount point for its lifetime; a run borrows them).
 *
 * Result vocabulary (documented once, used everywhere): see docs/ENGINE.md.
 */
#ifndef SANDBOX_SANDBOX_H
#define SANDBOX_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox_error.h"

#define SANDBOX_DEFAULT_TIMEOUT_MS 5000
#define SANDBOX_DEFAULT_MEMORY_BYTES (128ULL << 20)
#define SANDBOX_DEFAULT_OUTPUT_BYTES (64ULL << 10)
#define SANDBOX_DEFAULT_MAX_PROCESSES 64
#define SANDBOX_DEFAULT_FILE_SIZE_BYTES (64ULL << 20)
#define SANDBOX_DEFAULT_OPEN_FILES 256
#define SANDBOX_DEFAULT_TMP_BYTES (64ULL << 20)
#define SANDBOX_DEFAULT_UID_BASE 60000
#define SANDBOX_MAX_EXTRA_MOUNTS 16
#define SANDBOX_UNLIMITED UINT64_MAX /* RLIM_INFINITY */
/* Where every run finds the engine's Python helpers, read-only (pylib.c):
 * sandboxd_cell, which runs a script as python3 does and adds the rich
 * results, or serves an interpreter session's cells (docs/INTERPRETER.md).
 * SANDBOX_CELL_LOADER is the -c program that runs it ("python3 -u -c
 * SANDBOX_CELL_LOADER script /workspace/main.py ARGS..." or "... kernel"). */
#define SANDBOX_LIB_DIR "/run/sandboxd"
#define SANDBOX_CELL_LOADER                                                                        \
  "import sys; sys.path[0] = '" SANDBOX_LIB_DIR "'; import sandboxd_cell; sandboxd_cell.main()"

enum sandbox_killed_by {
  SANDBOX_KILLED_BY_NONE = 0,
  SANDBOX_KILLED_BY_TIMEOUT = 1,
  SANDBOX_KILLED_BY_MEMORY = 2,
  SANDBOX_KILLED_BY_OUTPUT_LIMIT = 3,
  SANDBOX_KILLED_BY_SIGNAL = 4,
  SANDBOX_KILLED_BY_CANCELLED = 5, /* the caller's cancel_fd became readable */
};

enum sandbox_backend {
  SANDBOX_BACKEND_AUTO = 0, /* only as a request: pick the best available */
  SANDBOX_BACKEND_CGROUP_V2,
  SANDBOX_BACKEND_CGROUP_V1,
  SANDBOX_BACKEND_RLIMIT,
};

struct sandbox_limits {
  uint64_t timeout_ms;      /* wall clock; 0 = default */
  uint64_t cpu_time_ms;     /* whole tree; 0 = same as timeout_ms */
  uint64_t memory_bytes;    /* whole tree (cgroup) or per process (rlimit) */
  uint64_t output_bytes;    /* per stream: stdout and stderr each */
  uint64_t max_processes;   /* pids.max and RLIMIT_NPROC */
  uint64_t file_size_bytes; /* RLIMIT_FSIZE; SANDBOX_UNLIMITED: none */
  uint64_t open_files;      /* RLIMIT_NOFILE */
  uint64_t tmp_bytes;       /* size of the /tmp and /dev/shm tmpfs each */
};

struct sandbox_mount {
  const char *source; /* host path, absolute */
  const char *target; /* path inside the sandbox, absolute, no "..", not "/" */
};

/* Watching a run as it goes (docs/STREAMING.md). on_output is called on
 * the thread in sandbox_run with each piece of output as it is read, after
 * the output limit is applied (stream 1 = stdout, 2 = stderr); it must not
 * block. When cancel_fd (an eventfd or a pipe's read end) becomes readable,
 * the whole tree is killed at once and the result says
 * SANDBOX_KILLED_BY_CANCELLED; a cancel_fd already readable at the start
 * kills the run before its program can do anything of note. */
struct sandbox_stream {
  void (*on_output)(void *arg, int stream, const uint8_t *data, size_t len);
  void *arg;
  int cancel_fd; /* -1: none */
};

enum sandbox_network {
  SANDBOX_NETWORK_NONE = 0,  /* the slot's empty namespace: no network at all */
  SANDBOX_NETWORK_INSTALLER, /* pip, through the egress proxy */
  SANDBOX_NETWORK_PROXY,     /* user code, through the egress proxy: TCP only */
};

struct sandbox_spec {
  const char *const *argv;   /* NULL-terminated; argv[0] is an absolute path */
  const char *const *env;    /* NULL-terminated "K=V" added to the minimum */
  const char *workspace_dir; /* host directory, mounted read-write at /workspace */
  const char *cwd;           /* inside the sandbox; NULL = /workspace */
  const uint8_t *stdin_data;
  size_t stdin_len;
  const struct sandbox_mount *mounts; /* extra read-only binds */
  size_t n_mounts;
  struct sandbox_limits limits; /* zeros take the defaults */
  /* The network profiles: the run joins netns_fd, a network namespace the
   * caller made (sandbox_netns_create), instead of the slot's empty one, and
   * the host's CA certificates are bound in. INSTALLER (pip): its seccomp
   * profile allows IPv4/IPv6 sockets and route netlink. PROXY (user code
   * with an allow list, docs/EGRESS.md): IPv4/IPv6 stream sockets only (no
   * UDP, raw, packet or netlink). Either namespace must hold nothing but
   * the server's egress proxy. The engine never gives a run the host's
   * network namespace. */
  enum sandbox_network network;
  /* An accounting group (sandbox_group_new), 0 = none: the run's memory,
   * and what it leaves charged, counts in the group. */
  uint64_t group;
  int netns_fd; /* with network only; anything but a network namespace is EINVAL */
  const struct sandbox_stream *stream; /* NULL: output only in the result, no cancel */
  /* Fork the run from the slot's zygote (docs/ZYGOTE.md): a Python that
   * has imported the engine's preload list. argv must then be
   * "/usr/bin/python3 [-u] SCRIPT [ARGS...]" (that script run by the
   * zygote's interpreter) or "/usr/bin/python3 [-u] -c
   * SANDBOX_CELL_LOADER kernel" (sandboxd_cell's kernel, an interpreter
   * session's: docs/INTERPRETER.md); the same isolation. Needs an engine
   * made with zygote.enabled; never with network. */
  bool zygote;
  /* > 0: the program's stdin is this descriptor (a socket for a
   * conversation with a long-lived program, docs/INTERPRETER.md) instead
   * of a pipe fed stdin_data, which must then be empty. */
  int stdin_fd;
  /* With zygote and mounts: what the mounts are (a requirements
   * environment's id), shown with the zygote started for them
   * (sandbox_zygote_memory); NULL or "": nothing to show. */
  const char *environment;
};

struct sandbox_result {
  enum sandbox_killed_by killed_by;
  /* With killed_by TIMEOUT: the CPU-time limit ended the run (not the wall
   * clock), whichever was lower. */
  bool cpu_time_exceeded;
  int exit_code; /* valid when the program exited (signal == 0) */
  int signal;    /* terminating signal, 0 if it exited */
  uint8_t *stdout_data;
  size_t stdout_len;
  bool stdout_truncated;
  uint8_t *stderr_data;
  size_t stderr_len;
  bool stderr_truncated;
  uint64_t wall_time_us;
  uint64_t cpu_time_us;       /* whole process tree */
  uint64_t peak_memory_bytes; /* whole tree (cgroup) or largest process (rlimit) */
  enum sandbox_backend backend;
  bool memory_per_process;      /* rlimit backend: memory is limited per process */
  struct sandbox_limits limits; /* the limits in force, defaults filled in */
};

/* Zygotes (docs/ZYGOTE.md): one per slot, started on the first run that
 * asks for one, replaced after max_forks runs or max_age_ms, or when a run
 * needs other extra mounts (a requirements environment). */
struct sandbox_zygote_config {
  bool enabled;
  const char *preload; /* module names, comma-separated: imported once per zygote */
  uint64_t max_forks;  /* 0: SANDBOX_DEFAULT_ZYGOTE_FORKS */
  uint64_t max_age_ms; /* 0: SANDBOX_DEFAULT_ZYGOTE_AGE_MS */
};
#define SANDBOX_DEFAULT_ZYGOTE_FORKS 1000
#define SANDBOX_DEFAULT_ZYGOTE_AGE_MS (600ULL * 1000)

struct sandbox_engine_config {
  const char *state_dir;        /* default /var/lib/sandboxd */
  const char *cgroup_parent;    /* absolute cgroup path to work under; NULL = own */
  enum sandbox_backend backend; /* AUTO: v2, then v1, else fail; RLIMIT only by name */
  unsigned slots;               /* number of concurrent runs; default 1 */
  uid_t uid_base;               /* slot i runs as uid_base + i; default 60000 */
  gid_t gid_base;               /* slot i runs as gid_base + i; default uid_base */
  struct sandbox_zygote_config zygote;
};

/* What the engine isolates with, for GetInfo and logs. */
struct sandbox_report {
  enum sandbox_backend backend;
  const char *backend_name; /* "cgroup v2", "cgroup v1", "rlimit" */
  char cgroup_path[512];    /* where the slot cgroups live ("" for rlimit) */
  bool seccomp;
  const char *namespaces; /* "pid,mount,net,ipc,uts,cgroup" */
  uid_t uid_base;
  unsigned slots;
  bool clone_into_cgroup;
  bool cpu_share; /* each slot has its own CPU share (v2 cpu, v1 cpu) */
  bool zygote;    /* runs may be forked from zygotes */
  uint64_t zygote_max_forks, zygote_max_age_ms;
};

/* The zygotes now and since the start, for GetInfo and metrics. */
struct sandbox_zygote_stats {
  unsigned running;
  bool have_memory;
  uint64_t memory_bytes; /* charged to the zygotes' cgroup: what their imports hold */
  uint64_t starts, start_failures, forks, recycled;
};

/* One running zygote's memory (sandbox_zygote_memory), as the kernel
 * counts it for the zygote's process (/proc/PID/smaps_rollup). Pages it
 * shares (with the runs forked from it, the other slots' zygotes and any
 * process mapping the same files) count whole in rss_bytes and divided
 * among their mappers in pss_bytes. */
#define SANDBOX_ZYGOTE_ENVIRONMENT_MAX 64
struct sandbox_zygote_memory {
  unsigned slot;
  char environment[SANDBOX_ZYGOTE_ENVIRONMENT_MAX]; /* spec.environment it was started for, "" none
                                                     */
  uint64_t rss_bytes, pss_bytes;
  uint64_t forks;  /* runs handed to it */
  uint64_t age_ms; /* since it became ready */
};

struct sandbox_engine;

/* Creates the engine: checks privileges, picks and prepares the cgroup backend,
 * compiles the seccomp policy, writes the sandbox's /etc under state_dir and
 * removes slot cgroups left by a crashed earlier engine. Call before starting
 * threads. */
int sandbox_engine_new(const struct sandbox_engine_config *config, struct sandbox_engine **out,
                       struct sandbox_error *err);
void sandbox_engine_free(struct sandbox_engine *engine);
const struct sandbox_report *sandbox_engine_report(const struct sandbox_engine *engine);

/* Runs spec in slot (0 <= slot < slots). Returns 0 when the run happened (how
 * it ended is in result), or a negative value with err filled when the
 * sandbox could not be set up (the code never ran with less isolation). */
int sandbox_run(struct sandbox_engine *engine, unsigned slot, const struct sandbox_spec *spec,
                struct sandbox_result *result, struct sandbox_error *err);
void sandbox_result_free(struct sandbox_result *result);

/* Zygotes (docs/ZYGOTE.md). warm starts the slot's zygote for runs
 * without extra mounts, if it is not running (or is due for replacement),
 * on the slot's thread: 1 when it started one, 0 when one was ready, -1
 * with err. stats may be called from any thread. */
int sandbox_zygote_warm(struct sandbox_engine *engine, unsigned slot, struct sandbox_error *err);
void sandbox_zygote_stats(struct sandbox_engine *engine, struct sandbox_zygote_stats *out);
/* Each ready zygote's memory, by slot, into out (at most max entries; one
 * per slot is enough): the count filled. A zygote that ends or is replaced
 * while it is read is left out, never mistaken for another process. Reads
 * /proc once per zygote: the kernel walks the zygote's page tables, about
 * 3 ms for a numpy and matplotlib process on a busy 2-CPU host here, so
 * a call costs that per ready zygote (a fork of the zygote waits at most
 * for one mapping's walk: the kernel steps aside between mappings for a
 * waiting writer of the address space). Takes each slot's zygote lock
 * only to copy a few fields. Any thread. */
size_t sandbox_zygote_memory(struct sandbox_engine *engine, struct sandbox_zygote_memory *out,
                             size_t max);

/* matplotlib's font list, made by the engine once in the background for
 * every run (fontlist.c). */
enum sandbox_fontlist_state {
  SANDBOX_FONTLIST_PENDING = 0, /* being made */
  SANDBOX_FONTLIST_READY,       /* runs read it */
  SANDBOX_FONTLIST_ABSENT,      /* matplotlib is not installed: nothing to make */
  SANDBOX_FONTLIST_FAILED,      /* runs scan the fonts themselves, as without it */
};
/* The state now, and once it ended, how long the making took (ms) and,
 * FAILED, why (NUL-terminated, printable). Never blocks; call from one
 * thread (the server's tick). */
enum sandbox_fontlist_state sandbox_fontlist_poll(struct sandbox_engine *engine, uint64_t *ms,
                                                  const char **why);

/* Accounting groups. Memory a run leaves charged after it ends (pages of
 * files it wrote into a tmpfs that lives on, as a session's workspace) stays
 * charged to the cgroup the run was in. A group is a cgroup (v2) or memory
 * cgroup (v1) that lives until freed: runs placed in it (spec.group, one at a
 * time) have their memory limit over the group, so what earlier runs of the
 * group left counts against later ones, and against no run outside it. With
 * the rlimit backend a group is only an id. */
int sandbox_group_new(struct sandbox_engine *engine, uint64_t *id, struct sandbox_error *err);
/* Memory charged to the group now (0 with the rlimit backend). */
int sandbox_group_memory(struct sandbox_engine *engine, uint64_t id, uint64_t *bytes,
                         struct sandbox_error *err);
/* Processes the OOM killer killed in the group since it was made (0 with
 * the rlimit backend): a run that lives on (an interpreter session's,
 * docs/INTERPRETER.md) learns that a cell's process was killed. */
int sandbox_group_oom_kills(struct sandbox_engine *engine, uint64_t id, uint64_t *kills,
                            struct sandbox_error *err);
/* Removes the group; free what its runs left charged first (unmount the
 * tmpfs), or it stays charged to the engine's cgroup until freed. */
void sandbox_group_free(struct sandbox_engine *engine, uint64_t id);
/* Makes a network namespace for spec.netns_fd: only lo, brought up, and,
 * when listen_fd is not NULL, a TCP socket listening on 127.0.0.1:port
 * inside it (non-blocking, close-on-exec; port 0 picks one). Safe with
 * threads around: a short-lived thread of its own unshares and exits, so no
 * thread of the caller changes namespace. Returns the namespace's fd, or -1
 * with err filled. */
int sandbox_netns_create(uint16_t port, int *listen_fd, struct sandbox_error *err);

/* Removes name (relative to parent_fd) and everything below it, without
 * following symlinks, whatever the depth. For trees a finished sandbox wrote. */
int sandbox_remove_tree(int parent_fd, const char *name);

/* Fills zero fields with the engine defaults. */
void sandbox_limits_fill_defaults(struct sandbox_limits *limits);

const char *sandbox_backend_name(enum sandbox_backend backend);

#endif
