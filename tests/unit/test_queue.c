/* The bounded queue: never grows past capacity, drains after close; shared
 * by tenants by weight (start-time fair queuing), each held to its
 * max_concurrent and max_queued; one tenant alone is FIFO. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"

static void bounded(void **state) {
  struct work_queue q;
  int a, b, c;
  assert_int_equal(work_queue_init(&q, 2, 1), 0);
  assert_int_equal(work_queue_push(&q, &a, NULL, NULL), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &b, NULL, NULL), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &c, NULL, NULL),
                   WORK_QUEUE_FULL); /* full: caller answers RESOURCE_EXHAUSTED */
  size_t queued, running;
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(queued, 2);
  assert_ptr_equal(work_queue_pop(&q), &a); /* FIFO */
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(running, 1);
  assert_int_equal(work_queue_push(&q, &c, NULL, NULL), WORK_QUEUE_PUSHED);
  work_queue_done(&q, NULL);
  assert_ptr_equal(work_queue_pop(&q), &b);
  work_queue_done(&q, NULL);
  work_queue_close(&q);
  assert_int_equal(work_queue_push(&q, &a, NULL, NULL), WORK_QUEUE_FULL);
  assert_ptr_equal(work_queue_pop(&q), &c); /* still delivered after close */
  work_queue_done(&q, NULL);
  assert_null(work_queue_pop(&q));
  work_queue_destroy(&q);
}

static void *popper(void *arg) {
  return work_queue_pop(arg);
}

static void close_wakes_waiters(void **state) {
  struct work_queue q;
  pthread_t t;
  assert_int_equal(work_queue_init(&q, 1, 1), 0);
  pthread_create(&t, NULL, popper, &q);
  work_queue_close(&q);
  void *got = (void *)1;
  pthread_join(t, &got);
  assert_null(got);
  work_queue_destroy(&q);
}

static void wait_until_waiting(struct work_queue *q, size_t n) {
  for (;;) {
    pthread_mutex_lock(&q->lock);
    size_t w = q->waiting;
    pthread_mutex_unlock(&q->lock);
    if (w >= n)
      return;
    usleep(1000);
  }
}

/* A queue of 0 makes nothing wait, but an idle worker still takes a call. */
static void zero_capacity_hands_to_idle_workers(void **state) {
  struct work_queue q;
  pthread_t t[2];
  int a, b, c;
  assert_int_equal(work_queue_init(&q, 0, 2), 0);
  assert_int_equal(work_queue_push(&q, &a, NULL, NULL),
                   WORK_QUEUE_FULL); /* nobody idle: it would wait */
  pthread_create(&t[0], NULL, popper, &q);
  pthread_create(&t[1], NULL, popper, &q);
  wait_until_waiting(&q, 2);
  assert_int_equal(work_queue_push(&q, &a, NULL, NULL), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &b, NULL, NULL), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &c, NULL, NULL),
                   WORK_QUEUE_FULL); /* both idle workers are taken */
  void *got[2];
  pthread_join(t[0], &got[0]);
  pthread_join(t[1], &got[1]);
  assert_true((got[0] == &a && got[1] == &b) || (got[0] == &b && got[1] == &a));
  work_queue_destroy(&q);
}

/* Tenants for the tests below: a name, a policy, zeroed counters. */
struct tenant_case {
  struct tenant tn;
  struct tenant_policy policy;
};

static void tenant_case_init(struct tenant_case *c, const char *name, uint32_t weight) {
  memset(c, 0, sizeof(*c));
  snprintf(c->tn.name, sizeof(c->tn.name), "%s", name);
  c->policy.weight = weight;
}

/* Items are tagged with their tenant: items[i] of tenant t is &tags[t][i]. */
#define ITEMS 64
static char tags[3][ITEMS];

static int tenant_of(const void *item) {
  for (int t = 0; t < 3; t++)
    if ((const char *)item >= tags[t] && (const char *)item < tags[t] + ITEMS)
      return t;
  return -1;
}

static void push_ok(struct work_queue *q, int t, int i, struct tenant_case *c) {
  assert_int_equal(work_queue_push(q, &tags[t][i], &c->tn, &c->policy), WORK_QUEUE_PUSHED);
}

/* Pops one item and ends it (a worker that runs it at once). */
static void *pop_done_tenant(struct work_queue *q, struct tenant_case *cases) {
  void *item = work_queue_pop(q);
  assert_non_null(item);
  int t = tenant_of(item);
  assert_true(t >= 0);
  work_queue_done(q, &cases[t].tn);
  return item;
}

/* Weight 2 against weight 1, both always backlogged: exactly 2:1 in every
 * turn of three pops, over many pops. */
static void weights_honoured(void **state) {
  struct work_queue q;
  struct tenant_case c[2];
  tenant_case_init(&c[0], "heavy", 2);
  tenant_case_init(&c[1], "light", 1);
  assert_int_equal(work_queue_init(&q, 2 * ITEMS, 1), 0);
  for (int i = 0; i < ITEMS; i++) {
    push_ok(&q, 0, i, &c[0]);
    push_ok(&q, 1, i, &c[1]);
  }
  int got[2] = {0, 0};
  for (int turn = 0; turn < 30; turn++) {
    int in_turn[2] = {0, 0};
    for (int k = 0; k < 3; k++)
      in_turn[tenant_of(pop_done_tenant(&q, c))]++;
    assert_int_equal(in_turn[0], 2);
    assert_int_equal(in_turn[1], 1);
    got[0] += in_turn[0];
    got[1] += in_turn[1];
  }
  assert_int_equal(got[0], 60);
  assert_int_equal(got[1], 30);
  /* Then the light tenant's backlog alone: served in its own order. */
  size_t queued, running;
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(queued, 4 + 34);
  assert_int_equal(atomic_load(&c[0].tn.queued), 4);
  assert_int_equal(atomic_load(&c[1].tn.queued), 34);
  work_queue_destroy(&q);
}

/* A tenant with a backlog of 40 (weight 3) does not delay another's next
 * call: with nothing of its own queued or running, it gets the next free
 * worker; with its previous call still running, it waits at most one turn
 * of the backlog's weight (3 pops), not 40. */
static void flood_does_not_delay_another(void **state) {
  struct work_queue q;
  struct tenant_case c[2];
  tenant_case_init(&c[0], "flood", 3);
  tenant_case_init(&c[1], "single", 1);
  assert_int_equal(work_queue_init(&q, 2 * ITEMS, 2), 0);
  for (int i = 0; i < 60; i++)
    push_ok(&q, 0, i, &c[0]);
  for (int call = 0; call < 5; call++) {
    pop_done_tenant(&q, c); /* the flood is being served when the call arrives */
    push_ok(&q, 1, call, &c[1]);
    assert_ptr_equal(pop_done_tenant(&q, c), &tags[1][call]);
  }
  void *running = NULL;
  for (int call = 5; call < 10; call++) {
    push_ok(&q, 1, call, &c[1]);
    if (running != NULL)
      work_queue_done(&q, &c[1].tn); /* the previous one ends after */
    int before = 0;
    while (tenant_of(running = work_queue_pop(&q)) == 0) {
      work_queue_done(&q, &c[0].tn);
      before++;
    }
    assert_ptr_equal(running, &tags[1][call]);
    assert_true(before <= 3);
  }
  work_queue_destroy(&q);
}

struct popped {
  struct work_queue *q;
  void *item;
  atomic_bool done;
};

static void *popper_flag(void *arg) {
  struct popped *p = arg;
  p->item = work_queue_pop(p->q);
  atomic_store(&p->done, true);
  return NULL;
}

/* A tenant running its max_concurrent is passed over: the other tenant's
 * call runs; the held call starts when the tenant's run ends. A held call
 * must wait, so it counts against the capacity even with a worker idle. */
static void max_concurrent_holds_back_one_tenant(void **state) {
  struct work_queue q;
  struct tenant_case c[2];
  tenant_case_init(&c[0], "capped", 1);
  tenant_case_init(&c[1], "other", 1);
  c[0].policy.max_concurrent = 1;
  assert_int_equal(work_queue_init(&q, 2, 2), 0);
  push_ok(&q, 0, 0, &c[0]);
  push_ok(&q, 0, 1, &c[0]);
  assert_ptr_equal(work_queue_pop(&q), &tags[0][0]);
  assert_int_equal(atomic_load(&c[0].tn.running), 1);
  assert_int_equal(atomic_load(&c[0].tn.queued), 1);
  push_ok(&q, 1, 0, &c[1]);
  assert_ptr_equal(work_queue_pop(&q), &tags[1][0]); /* not the capped tenant's */
  work_queue_done(&q, &c[1].tn);
  /* An idle worker does not take the held call... */
  struct popped p = {.q = &q};
  pthread_t t;
  pthread_create(&t, NULL, popper_flag, &p);
  wait_until_waiting(&q, 1);
  assert_false(atomic_load(&p.done));
  /* ...so held calls wait, and fill the queue of 2 although a worker is
   * idle; the other tenant's next call would still start at once. */
  push_ok(&q, 0, 2, &c[0]);
  assert_int_equal(work_queue_push(&q, &tags[0][3], &c[0].tn, &c[0].policy), WORK_QUEUE_FULL);
  assert_false(work_queue_full(&q));
  push_ok(&q, 1, 1, &c[1]);
  pthread_join(t, NULL);
  assert_ptr_equal(p.item, &tags[1][1]);
  work_queue_done(&q, &c[1].tn);
  /* The capped tenant's run ends: its oldest held call starts. */
  p = (struct popped){.q = &q};
  pthread_create(&t, NULL, popper_flag, &p);
  wait_until_waiting(&q, 1);
  assert_false(atomic_load(&p.done));
  work_queue_done(&q, &c[0].tn);
  pthread_join(t, NULL);
  assert_ptr_equal(p.item, &tags[0][1]);
  assert_int_equal(atomic_load(&c[0].tn.running), 1);
  assert_int_equal(atomic_load(&c[0].tn.queued), 1);
  work_queue_done(&q, &c[0].tn);
  assert_int_equal(atomic_load(&c[0].tn.running), 0);
  assert_ptr_equal(work_queue_pop(&q), &tags[0][2]);
  work_queue_done(&q, &c[0].tn);
  work_queue_destroy(&q);
}

/* max_queued refuses that tenant's next waiting call and nobody else's. */
static void max_queued_refuses_only_that_tenant(void **state) {
  struct work_queue q;
  struct tenant_case c[2];
  tenant_case_init(&c[0], "bounded", 1);
  tenant_case_init(&c[1], "other", 1);
  c[0].policy.max_queued = 2;
  assert_int_equal(work_queue_init(&q, 10, 1), 0);
  push_ok(&q, 0, 0, &c[0]);
  push_ok(&q, 0, 1, &c[0]);
  assert_int_equal(work_queue_push(&q, &tags[0][2], &c[0].tn, &c[0].policy),
                   WORK_QUEUE_TENANT_FULL);
  assert_int_equal(atomic_load(&c[0].tn.queued), 2);
  for (int i = 0; i < 5; i++)
    push_ok(&q, 1, i, &c[1]);
  assert_false(work_queue_full(&q));
  /* Once one of its calls leaves the queue, it may queue one more. */
  assert_ptr_equal(pop_done_tenant(&q, c), &tags[0][0]);
  push_ok(&q, 0, 2, &c[0]);
  size_t queued, running;
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(queued, 7);
  work_queue_destroy(&q);
}

/* max_queued counts calls that wait: one an idle worker takes at once is
 * not refused. */
static void max_queued_counts_calls_that_wait(void **state) {
  struct work_queue q;
  struct tenant_case c;
  tenant_case_init(&c, "bounded", 1);
  c.policy.max_queued = 1;
  assert_int_equal(work_queue_init(&q, 10, 1), 0);
  struct popped p = {.q = &q};
  pthread_t t;
  pthread_create(&t, NULL, popper_flag, &p);
  wait_until_waiting(&q, 1);
  assert_int_equal(work_queue_push(&q, &tags[0][0], &c.tn, &c.policy), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &tags[0][1], &c.tn, &c.policy), WORK_QUEUE_PUSHED);
  assert_int_equal(work_queue_push(&q, &tags[0][2], &c.tn, &c.policy), WORK_QUEUE_TENANT_FULL);
  pthread_join(t, NULL);
  assert_ptr_equal(p.item, &tags[0][0]);
  work_queue_destroy(&q);
}

/* CancelRun (remove) and the drain (take_queued) across tenants: removed
 * items are never popped, the drain takes the oldest first whoever they
 * belong to, and every tenant's counters come back to 0. */
static void remove_and_drain_several_tenants(void **state) {
  struct work_queue q;
  struct tenant_case c[3];
  tenant_case_init(&c[0], "a", 1);
  tenant_case_init(&c[1], "b", 2);
  tenant_case_init(&c[2], "c", 1);
  assert_int_equal(work_queue_init(&q, 20, 1), 0);
  push_ok(&q, 0, 0, &c[0]);
  push_ok(&q, 1, 0, &c[1]);
  push_ok(&q, 0, 1, &c[0]);
  push_ok(&q, 2, 0, &c[2]);
  push_ok(&q, 1, 1, &c[1]);
  assert_true(work_queue_remove(&q, &tags[0][1]));
  assert_false(work_queue_remove(&q, &tags[0][1])); /* gone already */
  assert_true(work_queue_remove(&q, &tags[2][0]));  /* c's only call: c leaves the round */
  assert_int_equal(atomic_load(&c[2].tn.queued), 0);
  void *first = pop_done_tenant(&q, c);
  assert_ptr_equal(first, &tags[0][0]);
  assert_false(work_queue_remove(&q, first)); /* a worker had it */
  push_ok(&q, 2, 1, &c[2]);
  push_ok(&q, 0, 2, &c[0]);
  /* Queued now, oldest first: b0, b1, c1, a2. */
  void *out[8];
  assert_int_equal(work_queue_take_queued(&q, out, 2), 2);
  assert_ptr_equal(out[0], &tags[1][0]);
  assert_ptr_equal(out[1], &tags[1][1]);
  assert_int_equal(work_queue_take_queued(&q, out, 8), 2);
  assert_ptr_equal(out[0], &tags[2][1]);
  assert_ptr_equal(out[1], &tags[0][2]);
  assert_int_equal(work_queue_take_queued(&q, out, 8), 0);
  for (int t = 0; t < 3; t++) {
    assert_int_equal(atomic_load(&c[t].tn.queued), 0);
    assert_int_equal(atomic_load(&c[t].tn.running), 0);
  }
  size_t queued, running;
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(queued, 0);
  assert_int_equal(running, 0);
  /* Nothing left behind: the queue takes its full capacity again. */
  for (int i = 0; i < 20; i++)
    push_ok(&q, i % 3, 10 + i, &c[i % 3]);
  assert_int_equal(work_queue_push(&q, &tags[0][40], &c[0].tn, &c[0].policy), WORK_QUEUE_FULL);
  work_queue_destroy(&q);
}

/* A call handed to an idle worker and cancelled before the worker woke:
 * the worker keeps waiting and takes the next call. */
static void remove_handed_item(void **state) {
  struct work_queue q;
  struct tenant_case c;
  tenant_case_init(&c, "a", 1);
  assert_int_equal(work_queue_init(&q, 0, 1), 0);
  pthread_mutex_lock(&q.lock);
  q.waiting++; /* a worker about to wake: hand-off without its taking it */
  pthread_mutex_unlock(&q.lock);
  push_ok(&q, 0, 0, &c);
  assert_true(work_queue_remove(&q, &tags[0][0]));
  push_ok(&q, 0, 1, &c);
  pthread_mutex_lock(&q.lock);
  q.waiting--;
  pthread_mutex_unlock(&q.lock);
  assert_ptr_equal(work_queue_pop(&q), &tags[0][1]);
  work_queue_done(&q, &c.tn);
  work_queue_destroy(&q);
}

/* One tenant alone (no --tenants: everyone is "default") is first come
 * first served, whatever its weight, pushes and pops interleaved. */
static void single_tenant_is_fifo(void **state) {
  struct work_queue q;
  struct tenant_case c;
  tenant_case_init(&c, "default", 7);
  assert_int_equal(work_queue_init(&q, 32, 2), 0);
  int next_push = 0, next_pop = 0;
  for (int round = 0; round < 8; round++) {
    for (int k = 0; k < 5 && next_push < ITEMS; k++)
      push_ok(&q, 0, next_push++, &c);
    for (int k = 0; k < 3; k++)
      assert_ptr_equal(pop_done_tenant(&q, &c), &tags[0][next_pop++]);
  }
  while (next_pop < next_push)
    assert_ptr_equal(pop_done_tenant(&q, &c), &tags[0][next_pop++]);
  work_queue_destroy(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bounded),
      cmocka_unit_test(zero_capacity_hands_to_idle_workers),
      cmocka_unit_test(close_wakes_waiters),
      cmocka_unit_test(weights_honoured),
      cmocka_unit_test(flood_does_not_delay_another),
      cmocka_unit_test(max_concurrent_holds_back_one_tenant),
      cmocka_unit_test(max_queued_refuses_only_that_tenant),
      cmocka_unit_test(max_queued_counts_calls_that_wait),
      cmocka_unit_test(remove_and_drain_several_tenants),
      cmocka_unit_test(remove_handed_item),
      cmocka_unit_test(single_tenant_is_fifo),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
