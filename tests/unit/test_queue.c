/* The bounded queue: never grows past capacity, drains after close. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <unistd.h>

#include "queue.h"

static void bounded(void **state) {
  struct work_queue q;
  int a, b, c;
  assert_int_equal(work_queue_init(&q, 2, 1), 0);
  assert_true(work_queue_push(&q, &a));
  assert_true(work_queue_push(&q, &b));
  assert_false(work_queue_push(&q, &c)); /* full: caller answers RESOURCE_EXHAUSTED */
  size_t queued, running;
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(queued, 2);
  assert_ptr_equal(work_queue_pop(&q), &a); /* FIFO */
  work_queue_counts(&q, &queued, &running);
  assert_int_equal(running, 1);
  assert_true(work_queue_push(&q, &c));
  work_queue_done(&q);
  assert_ptr_equal(work_queue_pop(&q), &b);
  work_queue_done(&q);
  work_queue_close(&q);
  assert_false(work_queue_push(&q, &a));
  assert_ptr_equal(work_queue_pop(&q), &c); /* still delivered after close */
  work_queue_done(&q);
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
  assert_false(work_queue_push(&q, &a)); /* nobody idle: it would wait */
  pthread_create(&t[0], NULL, popper, &q);
  pthread_create(&t[1], NULL, popper, &q);
  wait_until_waiting(&q, 2);
  assert_true(work_queue_push(&q, &a));
  assert_true(work_queue_push(&q, &b));
  assert_false(work_queue_push(&q, &c)); /* both idle workers are taken */
  void *got[2];
  pthread_join(t[0], &got[0]);
  pthread_join(t[1], &got[1]);
  assert_true((got[0] == &a && got[1] == &b) || (got[0] == &b && got[1] == &a));
  work_queue_destroy(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bounded),
      cmocka_unit_test(zero_capacity_hands_to_idle_workers),
      cmocka_unit_test(close_wakes_waiters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
