/* queue.h: the bounded queue between the nng callbacks and the workers,
 * shared by tenants by weight (docs/DESIGN.md, "The queue").
 *
 * Each item belongs to a tenant; each tenant with items queued or running
 * is a flow with a FIFO of its own. Workers take from the flows by
 * start-time fair queuing: a call is stamped, as it is queued, with a start
 * in virtual time (now, or when its tenant's previous call finishes, each
 * call costing 1/weight), and the call with the smallest start goes next.
 * Backlogged tenants share the workers in the ratio of their weights, and
 * a tenant with nothing queued gets the next free worker for its call even
 * beside another tenant's backlog of 30, not after it. One tenant alone (no
 * --tenants: everyone is "default") is served first come first served,
 * exactly as before tenants existed.
 *
 * Pushing never blocks (a full queue is the caller's RESOURCE_EXHAUSTED).
 * capacity counts calls that must wait: a call an idle worker takes at
 * once does not, so a queue of 0 still hands calls to idle workers. A
 * tenant's max_queued bounds its calls that must wait (0: no bound of its
 * own); a tenant running max_concurrent calls is skipped: its calls wait,
 * held up, while other tenants' calls run. The queue keeps each tenant's
 * queued and running counters (tenants.h) for GetInfo and /metrics.
 *
 * Must never: lose or duplicate an item, hand a worker an item of a tenant
 * at its max_concurrent, or let a tenant's flood grow past the capacity. */
#ifndef SBX_QUEUE_H
#define SBX_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tenants.h"

/* One call of weight 1 in virtual time (weight w: UNIT / w; 1..1000). */
#define WORK_QUEUE_VTIME_UNIT ((uint64_t)1 << 32)

struct work_queue_node;
struct work_queue_flow;

/* Intrusive doubly linked lists: of nodes (a flow's FIFO, the hand-off
 * list) and of flows (the round, the flows in use). */
struct work_queue_link {
  struct work_queue_link *prev, *next;
};
struct work_queue_list {
  struct work_queue_link *head, *tail;
};

struct work_queue {
  pthread_mutex_t lock;
  pthread_cond_t nonempty;
  size_t capacity;
  size_t slots;    /* nodes: capacity + the poppers that may wait */
  size_t n_flows;  /* flows: slots + the poppers that may run */
  size_t listed;   /* items in the flows' FIFOs: the ones that wait */
  size_t handed;   /* items handed to idle poppers, not yet taken */
  size_t waiting;  /* poppers blocked in pop */
  size_t running;  /* popped and not yet done: for GetInfo and draining */
  uint64_t pushes; /* the age of the next item (take_queued: oldest first) */
  uint64_t vtime;  /* virtual time: the start of the latest call popped */
  bool closed;
  struct work_queue_node *nodes;
  struct work_queue_node *free_nodes;
  struct work_queue_flow *flows;
  struct work_queue_flow *free_flows;
  struct work_queue_list used;    /* flows with items queued or running */
  struct work_queue_list round;   /* flows with items listed */
  struct work_queue_list handoff; /* nodes an idle popper takes next */
};

enum work_queue_push_result {
  WORK_QUEUE_PUSHED,
  WORK_QUEUE_FULL,        /* more than capacity calls would wait, or closed */
  WORK_QUEUE_TENANT_FULL, /* the tenant has max_queued calls waiting */
};

/* poppers: how many threads pop (the workers). */
int work_queue_init(struct work_queue *q, size_t capacity, size_t poppers);
void work_queue_destroy(struct work_queue *q);
/* Queues item for tenant (NULL: a tenant of its own) under policy, the
 * tenant's as the call saw it (NULL: weight 1, no bounds); the latest push
 * of a tenant sets its weight and bounds. Anything but PUSHED: nothing was
 * queued. */
enum work_queue_push_result work_queue_push(struct work_queue *q, void *item, struct tenant *tenant,
                                            const struct tenant_policy *policy);
/* NULL once closed and empty. Counts the item as running (for its tenant
 * too) until done(). */
void *work_queue_pop(struct work_queue *q);
/* The end of a popped item of tenant. */
void work_queue_done(struct work_queue *q, struct tenant *tenant);
/* Later pushes fail; poppers get what is still queued, then NULL. */
void work_queue_close(struct work_queue *q);
/* Removes up to max queued items (oldest first, of any tenant) into out,
 * without counting them as running; returns how many. */
size_t work_queue_take_queued(struct work_queue *q, void **out, size_t max);
/* Takes item out of the queue when it is still there (it will not be
 * popped); false when a popper has it already. */
bool work_queue_remove(struct work_queue *q, void *item);
void work_queue_counts(struct work_queue *q, size_t *queued, size_t *running);
/* Whether a push now would fail for every tenant (the queue is full, or
 * closed). */
bool work_queue_full(struct work_queue *q);

#endif
