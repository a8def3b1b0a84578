/* runner.h: one RunCode call, from a validated request to the response to
 * answer with, and what every run needs (the engine, the workspaces, the
 * sessions, the installer), owned by the server and shared by its workers.
 * Knows nothing of nng or of calls: results flow up, and the worker that
 * took the call from the queue answers it (rpc/worker.c). */
#ifndef SBX_RUNNER_H
#define SBX_RUNNER_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "egress.h"
#include "error.h"
#include "install.h"
#include "interp.h"
#include "mime.h"
#include "runtimes.h"
#include "sandbox.pb-c.h"
#include "sandbox/sandbox.h"
#include "session.h"
#include "settings.h"
#include "stats.h"
#include "tenant_counts.h"

/* One persistent tmpfs per worker slot for runs without a session, emptied
 * after each run (docs/WORKSPACES.md). */
struct slot_workspace {
  char name[16]; /* "slot-N" under the workspaces root */
  int fd;
  uint64_t size;
};

/* What the runs count, for operations (server/ops/ reads it): one relaxed
 * atomic add per figure, on the worker that ran the call. */
struct run_stats {
  atomic_uint_fast64_t by_killed_by[KILLED_BY_N]; /* runs of no tenant the engine carried out */
  struct tenant_counts by_tenant;    /* each tenant's runs, by killed_by (rows of KILLED_BY_N) */
  struct stats_histogram wall;       /* the run's wall-clock time */
  struct stats_histogram cpu;        /* its CPU time, every process of it */
  struct stats_histogram queue_wait; /* from arrival to a worker taking it */
  /* Runs' connections through the egress proxy (allow_net), by tenant:
   * rows of EGRESS_COUNTS_N; the unlabelled ones for runs of no tenant. */
  struct tenant_counts egress_by_tenant;
  atomic_uint_fast64_t egress[4];
};

/* The columns of run_stats.egress_by_tenant and .egress. */
enum egress_count {
  EGRESS_COUNT_ALLOWED,
  EGRESS_COUNT_REFUSED,
  EGRESS_COUNT_BYTES_UP,
  EGRESS_COUNT_BYTES_DOWN,
  EGRESS_COUNTS_N
};

struct runner {
  const struct server_settings *settings;
  struct sandbox_engine *engine;
  int workspace_root_fd; /* <state_dir>/workspaces */
  char workspace_root[PATH_MAX];
  bool made_workspace_root; /* by this start: removed again when it fails */
  struct slot_workspace *slot_ws;
  unsigned n_slots;
  struct session_table sessions;
  bool sessions_ready;
  struct installer installer;  /* requirements: probe, store, egress proxy */
  struct interp_table interps; /* INTERPRETER sessions' living interpreters */
  /* Runs' doors to the network (allow_net, docs/EGRESS.md): running when
   * --egress-allow is set; one lease per run that has a list. */
  struct egress egress;
  struct mime_db mime;
  /* The runtimes (runtimes.h): loaded and checked by runner_start, before
   * any worker; read-only after. */
  struct runtime_table *runtimes;
  atomic_uint_fast64_t runs_total; /* runs the engine carried out */
  struct run_stats stats;
  bool fontlist_logged; /* the engine's matplotlib font list ended: said once (runner_tick) */
};

/* A validated RunCode call, as the worker hands it over. */
struct run_call {
  const Sandbox__V1__RunCodeRequest *req;
  const char *run_id;                   /* the request's, or the one the server made */
  const char *method;                   /* "RunCode" or "StartRun", for the log */
  struct sandbox_limits limits;         /* validated, defaults applied */
  const struct runtime *runtime;        /* validated: available, from the runner's table */
  struct sandbox_limits compile_limits; /* a compiled runtime's compile stage's, validated */
  struct session *session;              /* reserved at dispatch, NULL without session_id */
  bool session_created;
  uint64_t received_ms;        /* monotonic, when the request arrived */
  const char *request_id;      /* the caller's, for the log ("" when none) */
  const char *peer;            /* the caller's address, for the log */
  const struct tenant *tenant; /* the caller's (its name for the log), NULL: none */
  uint32_t max_interpreters;   /* the tenant's max_interpreters (0: no cap of its own) */
  /* Output as it comes and the cancel fd (the run table's); NULL: none. A
   * cancel before the code starts ends the call with CANCELLED. */
  const struct sandbox_stream *stream;
  /* At start only (runtime_check.c), not counted as runs: a manifest
   * runtime's version command instead of its program, or its self-test. */
  enum run_check { RUN_CHECK_NONE = 0, RUN_CHECK_VERSION, RUN_CHECK_SELF_TEST } check;
};

/* Whether a call's run is python-zygote's (runtimes.h). */
static inline bool run_runtime_is_zygote(const struct run_call *call) {
  return call->runtime->kind == RUNTIME_KIND_PYTHON_ZYGOTE;
}
/* Whether the run is forked from the slot's zygote: python-zygote without
 * allow_net (a zygote's runs share its network namespace, so a run with a
 * network of its own is a fresh interpreter). */
static inline bool run_forks_zygote(const struct run_call *call) {
  return run_runtime_is_zygote(call) && call->req->n_allow_net == 0;
}

struct run_scratch;

/* What to answer: ok with resp (whose pointers stay valid until
 * run_outcome_free), or err (nothing ran: the code never started). */
struct run_outcome {
  bool ok;
  struct sbx_error err;
  Sandbox__V1__RunCodeResponse resp;
  struct run_scratch *scratch; /* owns what resp points to */
};

/* Runs call on the worker's slot. Logs one line (event=run), run_id its
 * first field: tests and benches find runs by "event=run run_id=". */
void run_code(struct runner *r, unsigned slot, const struct run_call *call,
              struct run_outcome *out);
void run_outcome_free(struct run_outcome *out);
/* The event=run line of a run that ended before its code ran (run_code
 * writes it for its own failures): slot -1 when no worker took it. */
void run_log_failure(const struct run_call *call, int slot, const struct sbx_error *err);

/* At start, after the engine, before any thread (runner.c): the workspace
 * root (what a crashed server left there detached), one workspace per slot,
 * the session table, the MIME database, the installer. 0, or -1 with err;
 * runner_stop undoes a partial start too, and after a failed one (failed)
 * also removes the workspace root it made. */
int runner_start(struct runner *r, const struct server_settings *s, struct sandbox_engine *engine,
                 const struct egress_config *egress_cfg, struct sbx_error *err);
/* Before runner_start, at the start's first checks: the runtimes (the
 * built-in Pythons, and the manifests of --runtimes-dir, which must exist
 * when given, or of share/sandboxd/runtimes beside the binary's directory
 * when it exists: /usr/sbin/sandboxd reads /usr/share/sandboxd/runtimes,
 * build/bin's build/share/sandboxd/runtimes). 0, or -1 with err naming the
 * manifest (a configuration error). runner_free_runtimes frees them, after
 * runner_stop. */
int runner_load_runtimes(struct runner *r, const struct server_settings *s, struct sbx_error *err);
void runner_free_runtimes(struct runner *r);
void runner_stop(struct runner *r, bool failed);

/* Every tick of the main thread: ends sessions idle past their TTL and
 * detaches the workspaces of ended ones. */
void runner_tick(struct runner *r);

/* Each ready zygote's memory (sandbox_zygote_memory) into *out, malloc'd
 * (NULL when there is none, or no memory for it): the count. For GetInfo
 * and /metrics. */
size_t runner_zygote_memory(struct runner *r, struct sandbox_zygote_memory **out);

/* With --zygote, on the slot's own thread (a worker's as it starts, an
 * interpreter slot's between its interpreters): the slot's zygote started
 * when it is not ready, with one log line (event=zygote_warm with how long
 * it took, or event=zygote_warm_failed with the engine's reason). 0 or -1;
 * never fatal: python runs do not need it. */
int runner_warm_zygote(struct runner *r, unsigned slot);

#endif
