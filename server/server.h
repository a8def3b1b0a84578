/* server.h: the one context struct of sandboxd. All mutable state of the
 * server lives here or in the calls it owns; no other globals. */
#ifndef SBX_SERVER_H
#define SBX_SERVER_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "bounded_alloc.h"
#include "conns.h"
#include "egress.h"
#include "envstore.h"
#include "install.h"
#include "mime.h"
#include "queue.h"
#include "sandbox.pb-c.h"
#include "sandbox/sandbox.h"
#include "session.h"
#include "settings.h"
#include "status.h"

enum call_state { CALL_IDLE, CALL_RECV, CALL_BUSY, CALL_SEND };

/* One nng context and what it is doing: receiving, being worked on (queued
 * or running) or sending its reply. Owned by exactly one party at a time:
 * the aio callback, or the worker that popped it. */
struct server_call {
  struct server *srv;
  nng_ctx ctx;
  nng_aio *aio;
  _Atomic int state;
  char request_id[128];
  uint32_t pipe_id; /* the connection the request came on (conns.h) */
  uint64_t deadline_unix_ms;
  struct sbx_bounded_alloc alloc;
  ProtobufCMessage *input; /* the decoded request, freed through alloc */
  struct sandbox_limits limits; /* RunCode: validated, defaults applied */
  struct session *session;      /* RunCode with session_id: reserved at dispatch */
  bool session_created;
  struct timespec received;
  nng_msg *reply;
};

struct server {
  struct server_settings settings;
  struct sandbox_engine *engine;
  Sandbox__V1__Sandbox_Service service; /* handlers, see service.c */
  nng_socket sock;
  struct conns conns;
  struct server_call *calls;
  size_t n_calls;
  struct work_queue queue;
  pthread_t *workers;
  unsigned n_workers;
  int workspace_root_fd;
  char workspace_root[PATH_MAX];
  /* One persistent tmpfs per worker slot for runs without a session,
   * emptied after each run (docs/WORKSPACES.md). */
  struct slot_workspace {
    char name[16]; /* "slot-N" under workspace_root */
    int fd;
    uint64_t size;
  } *slot_ws;
  struct session_table sessions;
  /* Requirements: what the interpreter probe found, and the store
   * (docs/REQUIREMENTS.md). The store is open only when install.available. */
  struct install_info install;
  struct envstore store;
  /* The installer's only way out when an index is in force (egress.h);
   * zeroed, and never started, otherwise. */
  struct egress egress;
  struct mime_db mime;
  atomic_bool draining;
  /* Our own counters: nng's socket statistics stay 0 for REQ/REP. */
  atomic_uint_fast64_t requests_total, runs_total, rejected_total;
};

/* service.c */
void service_init(struct server *srv);
int server_start(struct server *srv, char *err, size_t errlen);
void server_drain_and_stop(struct server *srv);
/* Builds call->reply; on failure to build it, a minimal INTERNAL reply. */
void call_set_reply(struct server_call *call, sbx_code status, const char *message,
                    const ProtobufCMessage *payload);

/* run.c: runs a validated RunCode call in slot and sets its reply. */
void run_code_execute(struct server *srv, unsigned slot, struct server_call *call);
/* run.c: the slot workspaces, mounted at start and detached at exit. */
int run_slots_mount(struct server *srv, char *err, size_t errlen);
void run_slots_unmount(struct server *srv);

#endif
