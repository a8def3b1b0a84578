/* worker.h: the worker threads, one per engine slot for its whole life:
 * each takes a run from the queue, runs it (run/runner.h) and ends it in
 * the run table, which answers the RunCode call and the watchers. */
#ifndef SBX_WORKER_H
#define SBX_WORKER_H

struct server;

struct worker_start {
  struct server *srv;
  unsigned slot;
};

/* The thread's body; arg is a malloc'd struct worker_start it frees. */
void *worker_main(void *arg);

/* The drain: every call still queued is answered UNAVAILABLE (it never
 * ran), without waiting for the runs in progress. */
void worker_refuse_queued(struct server *srv);

#endif
