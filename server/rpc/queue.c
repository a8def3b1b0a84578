/* queue.c: see queue.h. Nodes and flows come from pools made at init, so
 * pushing never allocates; one mutex guards everything.
 *
 * The invariant that keeps "an idle worker takes a call at once" exact:
 * while a popper is idle and not yet handed an item (waiting > handed), no
 * flow in the round can start one (each is at its max_concurrent). Every
 * operation that could break it ends with hand_to_idle(). So a push knows
 * at once whether its item must wait, and only then does the item count
 * against the capacity and its tenant's max_queued. */
#include "queue.h"

#include <errno.h>
#include <stdlib.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

struct work_queue_node {
  struct work_queue_link at;    /* in its flow's FIFO, or in the hand-off list */
  struct work_queue_flow *flow; /* NULL: free */
  void *item;
  uint64_t age;
  uint64_t start; /* its start tag in virtual time */
  bool handed;
  struct work_queue_node *next_free;
};

/* A tenant with items queued or running. */
struct work_queue_flow {
  struct work_queue_link use, turn; /* in q->used; in q->round while listed */
  struct tenant *tenant;
  struct work_queue_list fifo;
  size_t listed, handed, running;
  uint32_t max_concurrent, max_queued;
  uint64_t cost;   /* of one call in virtual time: WORK_QUEUE_VTIME_UNIT / weight */
  uint64_t finish; /* the finish tag of its latest call */
  bool in_round;
  struct work_queue_flow *next_free;
};

static void list_append(struct work_queue_list *l, struct work_queue_link *k) {
  k->next = NULL;
  k->prev = l->tail;
  if (l->tail != NULL)
    l->tail->next = k;
  else
    l->head = k;
  l->tail = k;
}

static void list_unlink(struct work_queue_list *l, struct work_queue_link *k) {
  if (k->prev != NULL)
    k->prev->next = k->next;
  else
    l->head = k->next;
  if (k->next != NULL)
    k->next->prev = k->prev;
  else
    l->tail = k->prev;
  k->prev = k->next = NULL;
}

int work_queue_init(struct work_queue *q, size_t capacity, size_t poppers) {
  *q = (struct work_queue){.capacity = capacity};
  q->slots = capacity + poppers > 0 ? capacity + poppers : 1;
  q->n_flows = q->slots + poppers;
  q->nodes = calloc(q->slots, sizeof(*q->nodes));
  q->flows = calloc(q->n_flows, sizeof(*q->flows));
  if (q->nodes == NULL || q->flows == NULL) {
    free(q->nodes);
    free(q->flows);
    return -ENOMEM;
  }
  for (size_t i = q->slots; i-- > 0;) {
    q->nodes[i].next_free = q->free_nodes;
    q->free_nodes = &q->nodes[i];
  }
  for (size_t i = q->n_flows; i-- > 0;) {
    q->flows[i].next_free = q->free_flows;
    q->free_flows = &q->flows[i];
  }
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->nonempty, NULL);
  return 0;
}

void work_queue_destroy(struct work_queue *q) {
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->nonempty);
  free(q->nodes);
  free(q->flows);
  q->nodes = NULL;
  q->flows = NULL;
}

/* The tenant's counters, from its flow (the queue is their only writer). */
static void count_tenant(const struct work_queue_flow *f) {
  if (f->tenant == NULL)
    return;
  atomic_store(&f->tenant->queued, (unsigned)(f->listed + f->handed));
  atomic_store(&f->tenant->running, (unsigned)f->running);
}

static bool can_start(const struct work_queue_flow *f) {
  return f->max_concurrent == 0 || f->running + f->handed < f->max_concurrent;
}

static struct work_queue_flow *flow_find(struct work_queue *q, const struct tenant *tenant) {
  for (struct work_queue_link *k = q->used.head; k != NULL; k = k->next) {
    struct work_queue_flow *f = container_of(k, struct work_queue_flow, use);
    if (f->tenant == tenant)
      return f;
  }
  return NULL;
}

/* The tenant's flow, made when it has none; NULL when the pool is empty
 * (it is sized so that it cannot be: slots + poppers). */
static struct work_queue_flow *flow_get(struct work_queue *q, struct tenant *tenant) {
  struct work_queue_flow *f = flow_find(q, tenant);
  if (f != NULL || q->free_flows == NULL)
    return f;
  f = q->free_flows;
  q->free_flows = f->next_free;
  *f = (struct work_queue_flow){.tenant = tenant, .cost = WORK_QUEUE_VTIME_UNIT};
  list_append(&q->used, &f->use);
  return f;
}

/* Back to the pool once nothing of it is queued or running. */
static void flow_put_if_idle(struct work_queue *q, struct work_queue_flow *f) {
  if (f->listed > 0 || f->handed > 0 || f->running > 0)
    return;
  count_tenant(f);
  list_unlink(&q->used, &f->use);
  f->tenant = NULL;
  f->next_free = q->free_flows;
  q->free_flows = f;
}

static void flow_set_policy(struct work_queue_flow *f, const struct tenant_policy *policy) {
  uint32_t weight = policy != NULL && policy->weight > 0 ? policy->weight : 1;
  f->cost = WORK_QUEUE_VTIME_UNIT / weight;
  f->max_concurrent = policy != NULL ? policy->max_concurrent : 0;
  f->max_queued = policy != NULL ? policy->max_queued : 0;
}

static void round_leave(struct work_queue *q, struct work_queue_flow *f) {
  list_unlink(&q->round, &f->turn);
  f->in_round = false;
}

static struct work_queue_node *head_of(const struct work_queue_flow *f) {
  return container_of(f->fifo.head, struct work_queue_node, at);
}

/* Start-time fair queuing, every call costing one: the next call is the
 * one with the smallest start tag (the older on a tie) among the flows that
 * may start one (a flow at its max_concurrent is passed over). Returns it,
 * out of its flow's FIFO, and moves virtual time to its start; NULL when no
 * flow in the round can start one. A scan of the flows with calls waiting:
 * as many as tenants with a backlog, at most the capacity. */
static struct work_queue_node *pick(struct work_queue *q) {
  struct work_queue_node *best = NULL;
  for (struct work_queue_link *k = q->round.head; k != NULL; k = k->next) {
    struct work_queue_flow *f = container_of(k, struct work_queue_flow, turn);
    struct work_queue_node *n = head_of(f);
    if (can_start(f) &&
        (best == NULL || n->start < best->start || (n->start == best->start && n->age < best->age)))
      best = n;
  }
  if (best == NULL)
    return NULL;
  struct work_queue_flow *f = best->flow;
  list_unlink(&f->fifo, &best->at);
  f->listed--;
  q->listed--;
  if (f->listed == 0)
    round_leave(q, f);
  if (best->start > q->vtime)
    q->vtime = best->start;
  return best;
}

/* Restores the invariant (the top of the file): idle poppers are handed
 * what can start, in the round's order. */
static void hand_to_idle(struct work_queue *q) {
  while (q->waiting > q->handed) {
    struct work_queue_node *n = pick(q);
    if (n == NULL)
      return;
    n->handed = true;
    n->flow->handed++;
    q->handed++;
    list_append(&q->handoff, &n->at);
    count_tenant(n->flow);
    pthread_cond_signal(&q->nonempty);
  }
}

/* Into f's FIFO, under the lock; a free node is there (the caller's
 * bounds see to it). */
static void enqueue(struct work_queue *q, struct work_queue_flow *f, void *item) {
  struct work_queue_node *n = q->free_nodes;
  q->free_nodes = n->next_free;
  /* Its start: now in virtual time, or when the tenant's previous call
   * finishes when that is later (a backlog's calls are spaced by cost). */
  uint64_t start = f->finish > q->vtime ? f->finish : q->vtime;
  f->finish = start + f->cost;
  *n = (struct work_queue_node){.flow = f, .item = item, .age = q->pushes++, .start = start};
  list_append(&f->fifo, &n->at);
  f->listed++;
  q->listed++;
  if (!f->in_round) {
    list_append(&q->round, &f->turn);
    f->in_round = true;
  }
}

enum work_queue_push_result work_queue_push(struct work_queue *q, void *item, struct tenant *tenant,
                                            const struct tenant_policy *policy) {
  pthread_mutex_lock(&q->lock);
  enum work_queue_push_result r = WORK_QUEUE_FULL;
  struct work_queue_flow *f = q->closed ? NULL : flow_get(q, tenant);
  if (f != NULL) {
    flow_set_policy(f, policy);
    hand_to_idle(q); /* a raised max_concurrent may let queued items start */
    /* By the invariant, an idle popper left over takes it at once. */
    bool at_once = q->waiting > q->handed && can_start(f);
    if (!at_once && f->max_queued > 0 && f->listed >= f->max_queued)
      r = WORK_QUEUE_TENANT_FULL;
    else if ((!at_once && q->listed >= q->capacity) || q->free_nodes == NULL)
      r = WORK_QUEUE_FULL;
    else
      r = WORK_QUEUE_PUSHED;
    if (r == WORK_QUEUE_PUSHED) {
      enqueue(q, f, item);
      hand_to_idle(q);
      count_tenant(f);
    }
    flow_put_if_idle(q, f);
  }
  pthread_mutex_unlock(&q->lock);
  return r;
}

static void node_free(struct work_queue *q, struct work_queue_node *n) {
  n->flow = NULL;
  n->item = NULL;
  n->next_free = q->free_nodes;
  q->free_nodes = n;
}

void *work_queue_pop(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->waiting++;
  hand_to_idle(q);
  while (q->handoff.head == NULL && !(q->closed && q->listed == 0))
    pthread_cond_wait(&q->nonempty, &q->lock);
  q->waiting--;
  void *item = NULL;
  if (q->handoff.head != NULL) {
    struct work_queue_node *n = container_of(q->handoff.head, struct work_queue_node, at);
    struct work_queue_flow *f = n->flow;
    list_unlink(&q->handoff, &n->at);
    q->handed--;
    f->handed--;
    f->running++;
    q->running++;
    item = n->item;
    node_free(q, n);
    count_tenant(f);
  }
  pthread_mutex_unlock(&q->lock);
  return item;
}

void work_queue_done(struct work_queue *q, struct tenant *tenant) {
  pthread_mutex_lock(&q->lock);
  q->running--;
  struct work_queue_flow *f = flow_find(q, tenant);
  if (f != NULL && f->running > 0) {
    f->running--;
    count_tenant(f);
    hand_to_idle(q); /* it may have been at its max_concurrent */
    flow_put_if_idle(q, f);
  }
  pthread_mutex_unlock(&q->lock);
}

void work_queue_close(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->closed = true;
  pthread_cond_broadcast(&q->nonempty);
  pthread_mutex_unlock(&q->lock);
}

/* Out of the queue, never to be popped. Under the lock; the caller ends
 * with hand_to_idle (a handed node's popper is idle again). */
static void take_out(struct work_queue *q, struct work_queue_node *n) {
  struct work_queue_flow *f = n->flow;
  if (f == NULL)
    return; /* a free node: in no list */
  if (n->handed) {
    list_unlink(&q->handoff, &n->at);
    q->handed--;
    f->handed--;
  } else {
    list_unlink(&f->fifo, &n->at);
    q->listed--;
    f->listed--;
    if (f->listed == 0)
      round_leave(q, f);
  }
  node_free(q, n);
  count_tenant(f);
  flow_put_if_idle(q, f);
}

static struct work_queue_node *oldest(struct work_queue *q) {
  struct work_queue_node *best = NULL;
  for (struct work_queue_link *k = q->handoff.head; k != NULL; k = k->next) {
    struct work_queue_node *n = container_of(k, struct work_queue_node, at);
    if (best == NULL || n->age < best->age)
      best = n;
  }
  /* Each FIFO is oldest first: its head is its oldest. */
  for (struct work_queue_link *k = q->round.head; k != NULL; k = k->next) {
    struct work_queue_flow *f = container_of(k, struct work_queue_flow, turn);
    struct work_queue_node *n = head_of(f);
    if (best == NULL || n->age < best->age)
      best = n;
  }
  return best;
}

size_t work_queue_take_queued(struct work_queue *q, void **out, size_t max) {
  pthread_mutex_lock(&q->lock);
  size_t n = 0;
  for (struct work_queue_node *o; n < max && (o = oldest(q)) != NULL; n++) {
    out[n] = o->item;
    take_out(q, o);
  }
  hand_to_idle(q);
  pthread_mutex_unlock(&q->lock);
  return n;
}

bool work_queue_remove(struct work_queue *q, void *item) {
  pthread_mutex_lock(&q->lock);
  bool found = false;
  for (size_t i = 0; i < q->slots && !found; i++) {
    struct work_queue_node *n = &q->nodes[i];
    if (n->flow != NULL && n->item == item) {
      take_out(q, n);
      found = true;
    }
  }
  hand_to_idle(q);
  pthread_mutex_unlock(&q->lock);
  return found;
}

void work_queue_counts(struct work_queue *q, size_t *queued, size_t *running) {
  pthread_mutex_lock(&q->lock);
  *queued = q->listed + q->handed;
  *running = q->running;
  pthread_mutex_unlock(&q->lock);
}

bool work_queue_full(struct work_queue *q) {
  pthread_mutex_lock(&q->lock);
  bool full = q->closed || (q->waiting <= q->handed && q->listed >= q->capacity);
  pthread_mutex_unlock(&q->lock);
  return full;
}
