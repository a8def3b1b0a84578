/* interp_internal.h: what the interpreter table (interp.c) and a cell's
 * steps (interp_cell.c) share: one interpreter's state and its process's
 * start and stop. Not for any other file. */
#ifndef SBX_INTERP_INTERNAL_H
#define SBX_INTERP_INTERNAL_H

#include <limits.h>
#include <pthread.h>

#include "buf.h"
#include "interp.h"

#define INTERP_DRAIN_MS 100     /* output still coming after done (children) */
#define INTERP_CTL_GONE_MS 1000 /* from the channel's end to the process's */

struct interp {
  struct interp_table *t;
  unsigned slot;
  /* Under t->lock. */
  struct session *owner;
  bool busy;
  atomic_bool alive; /* a process was started and not yet stopped */
  uint64_t started_ms, last_used_ms;
  /* The slot's thread (interp.c, slot_thread): under mu, go hands it a
   * process to run, ran says that run is over (rc, result and err are
   * then complete), warm asks for the slot's zygote, quit ends it. */
  pthread_t thread;
  bool thread_up;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool go, ran, warm, quit;
  /* The process, while alive (the busy holder's, or the stopper's). */
  int ctl, child_end, cancel, done, pidfd;
  int rc;
  bool joined; /* its run is over: stopping only frees */
  struct sandbox_result result;
  struct sandbox_error err;
  struct sandbox_spec spec;
  const char *argv[8];
  char **env;
  size_t n_env;
  char workspace_dir[PATH_MAX];
  struct sandbox_mount mounts[SANDBOX_MAX_EXTRA_MOUNTS];
  struct sandbox_stream stream;
  uint64_t seq;               /* the last cell's number, echoed in its done */
  struct sbx_buf frame;       /* bytes received on ctl not yet parsed */
  struct egress_lease *lease; /* its door to the egress proxy, while alive; NULL: none */
};

/* Before a cell (ip acquired): stops a process that ended on its own or
 * outlived the lifetime (out->lost says why), starts one when none lives
 * (out->started). 0, or -1 with err when it could not start. */
int interp_ready(struct interp *ip, const struct interp_start *st, struct interp_outcome *out,
                 struct sbx_error *err);
/* Whether the process has ended on its own (sandbox_run came back). */
bool interp_process_ended(const struct interp *ip);
/* Joins the process's thread, killing the process first when kill. */
void interp_process_join(struct interp *ip, bool kill);
/* Kills the process (if still running) and frees what it held. */
void interp_process_stop(struct interp *ip);
/* Why a process that ended on its own did, in words for the session. */
void interp_ended_reason(const struct interp *ip, char *out, size_t len);

#endif
