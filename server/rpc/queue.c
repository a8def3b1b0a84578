/* queue.c: see queue.h. A ring buffer under one mutex. */
#include "queue.h"

#include <errno.h>
#include <stdlib.h>

int work_queue_init(struct work_queue *q, size_t capacity, size_t poppers) {
  q->slots = capacity + poppers > 0 ? capacity + poppers : 1;
  q->items = calloc(q->slots, sizeof(void *));
  if (q->items == NULL)
    return -ENOMEM;
  q->capacity = capacity;
  q->head = q->len = q->running = q->waiting = 0;
  q->closed = false;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->nonempty, NULL);
  return 0;
}

void work_queue_destroy(struct work_queue *q) {
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->nonempty);
  free(q->items);
  q->items = NULL;
}

/* Items beyond the waiting poppers are the ones that wait. Under the lock. */
static bool has_room(const struct work_queue *q) {
  return !q->closed && q->len < q->capacity + q->waiting && q->len < q->slots;
}

bool work_queue_push(struct work_queue *q, void *item) {
  pthread_mutex_lock(&q->lock);
  bool ok = has_room(q);
  if (ok) {
    q->items[(q->head + q->len) % q->slots] = item;
    q->len++;
    pthread_cond_signal(&q->nonempty);
  }
  pthread_mutex_unlock(&q->lock);
  return ok;
}

void *work_queue_pop(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->waiting++;
  while (q->len == 0 && !q->closed)
    pthread_cond_wait(&q->nonempty, &q->lock);
  q->waiting--;
  void *item = NULL;
  if (q->len > 0) {
    item = q->items[q->head];
    q->head = (q->head + 1) % q->slots;
    q->len--;
    q->running++;
  }
  pthread_mutex_unlock(&q->lock);
  return item;
}

void work_queue_done(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->running--;
  pthread_mutex_unlock(&q->lock);
}

void work_queue_close(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->closed = true;
  pthread_cond_broadcast(&q->nonempty);
  pthread_mutex_unlock(&q->lock);
}

size_t work_queue_take_queued(struct work_queue *q, void **out, size_t max) {
  pthread_mutex_lock(&q->lock);
  size_t n = 0;
  for (; n < max && q->len > 0; n++) {
    out[n] = q->items[q->head];
    q->head = (q->head + 1) % q->slots;
    q->len--;
  }
  pthread_mutex_unlock(&q->lock);
  return n;
}

bool work_queue_remove(struct work_queue *q, void *item) {
  pthread_mutex_lock(&q->lock);
  bool found = false;
  for (size_t i = 0; i < q->len; i++) {
    if (!found && q->items[(q->head + i) % q->slots] == item)
      found = true;
    if (found && i + 1 < q->len)
      q->items[(q->head + i) % q->slots] = q->items[(q->head + i + 1) % q->slots];
  }
  if (found)
    q->len--;
  pthread_mutex_unlock(&q->lock);
  return found;
}

void work_queue_counts(struct work_queue *q, size_t *queued, size_t *running) {
  pthread_mutex_lock(&q->lock);
  *queued = q->len;
  *running = q->running;
  pthread_mutex_unlock(&q->lock);
}

bool work_queue_full(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  bool full = !has_room(q);
  pthread_mutex_unlock(&q->lock);
  return full;
}
