/* session.h: the table of sessions: which ids exist, which workspace tmpfs
 * each owns, which has a run in progress, and when each was last used.
 *
 * Rules (stated for clients in proto/sandbox.proto): an unknown id creates
 * the session; a session has at most one RunCode queued or running (a second
 * is refused, FAILED_PRECONDITION); it ends with CloseSession, after ttl
 * without a call, or when the table is full and a new one is needed (least
 * recently used idle session first). An ended session leaves the table at
 * once (a later run with the same id starts empty); its tmpfs is detached by
 * session_reap, outside the lock, from the main thread's tick or a worker.
 *
 * The lock is only held for table operations, never across I/O, so nng's
 * callbacks may call reserve/release/close without blocking. */
#ifndef SBX_SESSION_H
#define SBX_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "ids.h"
#include "status.h"

struct interp;
struct tenant;

struct egress_allow;

struct session {
  /* Its tenant's (tenants.h): another tenant's id, even the same string,
   * is another session, and is never found through this one's. */
  struct tenant *tenant;
  char id[ID_MAX + 1];
  char dir[32];   /* mount point name under the workspaces root: "s-<seq>" */
  int fd;         /* the tmpfs's root, -1 until the first run mounts it */
  uid_t uid;      /* owner of the tree now (the slot that ran last) */
  uint64_t quota; /* tmpfs size, fixed by the run that created it */
  /* The engine's accounting group its runs are placed in (sandbox.h), so
   * that the workspace's pages count against this session's runs and no
   * other's; 0 until the first run mounts the workspace. Freed by reap,
   * after the tmpfs, through the table's on_end. */
  uint64_t group;
  bool busy; /* a RunCode is queued or running */
  uint64_t last_used_ms;
  /* SESSION_MODE_INTERPRETER (docs/INTERPRETER.md): set by the run that
   * created it. Its living interpreter and, when one ended between calls,
   * why (told on the next call): under the interpreter table's lock. */
  bool interpreter;
  struct interp *interp;
  char lost[256];
  /* An INTERPRETER session's allow_net (docs/EGRESS.md), set by the run
   * that created it (malloc'd; NULL: no network): every interpreter it
   * starts has this door. */
  struct egress_allow *egress_allow;
  struct session *next_doomed;
};

struct session_table {
  pthread_mutex_t lock;
  struct session **items;
  size_t n, max;
  uint64_t ttl_ms;
  uint64_t seq;
  struct session *doomed;                    /* ended, waiting for session_reap */
  void (*on_end)(void *arg, uint64_t group); /* after the tmpfs is gone */
  void *on_end_arg;
  /* Before the tmpfs is detached: stops what lives in the session (its
   * interpreter). */
  void (*on_doomed)(void *arg, struct session *s);
  void *on_doomed_arg;
};

int session_table_init(struct session_table *t, size_t max, uint64_t ttl_ms);
/* Ends every session (detaching their tmpfs) and frees the table. */
void session_table_destroy(struct session_table *t, int root_fd, const char *root_path);

/* Marks the tenant's session id busy for a RunCode, creating it when
 * unknown (*created). SBX_FAILED_PRECONDITION when it already has a run;
 * SBX_RESOURCE_EXHAUSTED when the tenant has tenant_max sessions (0: no
 * cap of its own) or the table is full of busy sessions: -1 with err. A
 * full table evicts the least recently used idle session of the tenant
 * holding the most. */
int session_reserve(struct session_table *t, struct tenant *tenant, uint32_t tenant_max,
                    const char *id, struct session **out, bool *created, struct sbx_error *err);
/* Ends the reservation. A session whose first run never mounted its
 * workspace (nothing ran) is dropped again. */
void session_release(struct session_table *t, struct session *s);

/* Records the workspace the session's first run mounted (fd is owned by
 * the session from now on). */
void session_set_workspace(struct session_table *t, struct session *s, int fd, uid_t uid,
                           uint64_t quota);

/* A dup of the session's workspace fd for ListFiles/ReadFile (the tmpfs
 * stays alive while it is open, even if the session ends meanwhile), or -1
 * with err NOT_FOUND when there is no such session or it has no files yet. */
int session_open_workspace(struct session_table *t, const struct tenant *tenant, const char *id,
                           struct sbx_error *err);

/* Ends an idle session: 0, or -1 with err NOT_FOUND (unknown) or
 * FAILED_PRECONDITION (a run is queued or running). */
int session_close(struct session_table *t, const struct tenant *tenant, const char *id,
                  struct sbx_error *err);

/* Ends idle sessions unused for ttl; returns how many. */
size_t session_expire(struct session_table *t);

/* Detaches the tmpfs of ended sessions and frees them, calling on_end for
 * each one's group once its tmpfs is gone. */
size_t session_reap(struct session_table *t, int root_fd, const char *root_path);

size_t session_count(struct session_table *t);

#endif
