/* interp.h: the living interpreters of INTERPRETER sessions
 * (docs/INTERPRETER.md). Each is a sandboxed Python (sandboxd_cell's kernel)
 * started like any run, in an engine slot of its own (so a uid, a cgroup
 * and a slot network namespace of its own), in its session's memory group
 * and over its session's workspace, living between the session's calls.
 * A call hands it a cell with the call's own stdin, stdout and stderr, and
 * waits for its answer under the call's limits.
 *
 * Each slot has a thread of its own for the server's life: it runs the
 * slot's interpreters one after another (one sandbox_run each) and owns
 * the slot's zygote, which must outlive no thread that started it.
 *
 * At most n interpreters live at once: a session that needs one when all
 * are taken ends the least recently used idle one (its session is told on
 * its next call). One ends too when idle past idle_ms, older than
 * lifetime_ms, at a timeout its KeyboardInterrupt did not end within the
 * grace, at its session's memory cap, or when its session ends.
 *
 * Locking: the table's lock guards which session owns which interpreter
 * and each session's interp and lost fields; a call uses its interpreter
 * without the lock (nothing else touches an interpreter marked busy). */
#ifndef SBX_INTERP_H
#define SBX_INTERP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "egress.h"
#include "error.h"
#include "sandbox/sandbox.h"

struct session;
struct interp;

struct interp_table {
  pthread_mutex_t lock;
  pthread_cond_t changed; /* an interpreter stopped being busy */
  struct sandbox_engine *engine;
  struct interp *items;
  unsigned n;
  unsigned first_slot;   /* engine slot of items[0] */
  uid_t uid_base;        /* the engine's: slot s runs as uid_base + s */
  struct egress *egress; /* the runs' proxy (runner.h), for sessions with allow_net */
  uint64_t idle_ms, lifetime_ms, grace_ms;
  /* Set when the engine has zygotes (--zygote; NULL: none). From the
   * first interpreter asked for with runtime python-zygote on
   * (zygotes_wanted), each slot keeps one ready: started by
   * warm_zygote(warm_arg, slot) on the slot's own thread, one slot at a
   * time (warm_lock), and again after each interpreter ends. A server whose
   * sessions never ask for one pays nothing for them. */
  void (*warm_zygote)(void *warm_arg, unsigned slot);
  void *warm_arg;
  atomic_bool zygotes_wanted;
  pthread_mutex_t warm_lock;
  bool ready;
  atomic_uint_fast64_t starts, evictions, lost;
};

/* What starts an interpreter: its session's workspace (a host directory),
 * extra read-only mounts (a requirements environment), and the limits of
 * the call that starts it (memory_bytes becomes the interpreter's cap,
 * the others apply to each process it starts). */
struct interp_start {
  const char *workspace_dir;
  const struct sandbox_mount *mounts;
  size_t n_mounts;
  const char *const *env; /* added to each cell's os.environ */
  size_t n_env;
  struct sandbox_limits limits;
  uint64_t group; /* the session's memory group */
  /* The session's allow list (NULL: no network): the interpreter gets a
   * door of its own to the egress proxy for its life; the call's run id and
   * tenant name its connections in the log. */
  const struct egress_allow *allow;
  const char *run_id, *tenant;
  int tenant_index;
  /* Fork the interpreter from its slot's zygote (runtime python-zygote,
   * docs/ZYGOTE.md): it starts with the preload imported. Not with allow
   * nor mounts (then it starts fresh, as such a run does). */
  bool zygote;
};

/* One cell: the code (valid UTF-8), argv after the script's name, the
 * environment ("K=V"), stdin, and the call's limits (timeout_ms, cpu,
 * output_bytes per stream). */
struct interp_cell {
  const char *code;
  size_t code_len;
  const char *const *args;
  size_t n_args;
  const char *const *env;
  size_t n_env;
  const uint8_t *stdin_data;
  size_t stdin_len;
  struct sandbox_limits limits;
  const struct sandbox_stream *stream; /* output as it comes, cancel; NULL: none */
};

/* How the call went for the session's state, for its feedback. */
struct interp_outcome {
  bool started;   /* this call started the interpreter */
  char lost[256]; /* "" or why the earlier state is gone (the call ran fresh) */
  bool ended;     /* this call ended the interpreter: the next one starts fresh */
  char ended_why[160];
  bool interrupted; /* KeyboardInterrupt was raised in the cell */
  bool has_result;
  char *result; /* text/plain of the last expression (malloc'd), when has_result */
  size_t result_len;
  bool result_truncated;
  /* The interpreter has a door: what went through it during this call. */
  bool has_egress;
  struct egress_summary egress;
};

int interp_table_init(struct interp_table *t, struct sandbox_engine *engine, unsigned first_slot,
                      unsigned n, uid_t uid_base, uint64_t idle_ms, uint64_t lifetime_ms,
                      uint64_t grace_ms);
/* Stops every interpreter, and the slots' threads. */
void interp_table_destroy(struct interp_table *t);

/* For a call of session s (reserved by the call): the engine slot its
 * interpreter lives in (its own, or one taken now, evicting the least
 * recently used idle one when all are taken), marked busy. -1 with err
 * RESOURCE_EXHAUSTED when every interpreter is running a call, or when s
 * needs one and its tenant already holds tenant_max (its max_interpreters;
 * 0: no cap of its own). A tenant holds an interpreter from the call that
 * takes it for one of its sessions until that session ends or another
 * session's call evicts it (tenant->interpreters counts them). out->lost
 * says why an earlier interpreter of s is gone, if one is. */
int interp_acquire(struct interp_table *t, struct session *s, uint32_t tenant_max, unsigned *slot,
                   struct interp_outcome *out, struct sbx_error *err);
/* Runs the cell in s's interpreter (acquired), starting it first when it
 * is not running; fills res like sandbox_run (output, how it ended, the
 * call's time and CPU, the session's memory). 0, or -1 with err when the
 * interpreter could not start (nothing ran). */
int interp_run(struct interp_table *t, struct session *s, const struct interp_start *start,
               const struct interp_cell *cell, struct sandbox_result *res,
               struct interp_outcome *out, struct sbx_error *err);
/* Ends the call's hold on s's interpreter. */
void interp_release(struct interp_table *t, struct session *s);
void interp_outcome_free(struct interp_outcome *out);

/* Stops s's interpreter, if it has one (the session is ending: before its
 * workspace and memory group go). Waits for a stop in progress. */
void interp_session_end(struct interp_table *t, struct session *s);
/* Ends interpreters idle past idle_ms or older than lifetime_ms (the main
 * thread's tick); their sessions are told on their next call. */
void interp_expire(struct interp_table *t);

/* Interpreters living now. */
unsigned interp_count(struct interp_table *t);

#endif
