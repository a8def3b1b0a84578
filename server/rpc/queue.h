/* queue.h: the bounded queue between the nng callbacks and the workers.
 * Pushing never blocks (a full queue is the caller's RESOURCE_EXHAUSTED);
 * popping blocks until an item arrives or the queue is closed and empty.
 * capacity counts calls that must wait: a call an idle worker takes at
 * once does not, so a queue of 0 still hands calls to idle workers. */
#ifndef SBX_QUEUE_H
#define SBX_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct work_queue {
  pthread_mutex_t lock;
  pthread_cond_t nonempty;
  void **items;
  size_t capacity, head, len;
  size_t slots;   /* the ring's size: capacity + the poppers that may wait */
  size_t waiting; /* poppers blocked in pop: each takes an item at once */
  size_t running; /* popped and not yet done: for GetInfo and draining */
  bool closed;
};

/* poppers: how many threads pop (the workers). */
int work_queue_init(struct work_queue *q, size_t capacity, size_t poppers);
void work_queue_destroy(struct work_queue *q);
/* false when more than capacity calls would wait, or closed: nothing was
 * queued. */
bool work_queue_push(struct work_queue *q, void *item);
/* NULL once closed and empty. Counts the item as running until done(). */
void *work_queue_pop(struct work_queue *q);
void work_queue_done(struct work_queue *q);
/* Later pushes fail; poppers get what is still queued, then NULL. */
void work_queue_close(struct work_queue *q);
/* Removes up to max queued items (oldest first) into out, without counting
 * them as running; returns how many. */
size_t work_queue_take_queued(struct work_queue *q, void **out, size_t max);
/* Takes item out of the queue when it is still there (it will not be
 * popped); false when a popper has it already. */
bool work_queue_remove(struct work_queue *q, void *item);
void work_queue_counts(struct work_queue *q, size_t *queued, size_t *running);
/* Whether a push now would fail (the queue is full, or closed). */
bool work_queue_full(struct work_queue *q);

#endif
