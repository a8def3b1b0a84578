/* The bounded queue: never grows past capacity, drains after close. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "queue.h"

static void bounded(void **state) {
  struct work_queue q;
  int a, b, c;
  assert_int_equal(work_queue_init(&q, 2), 0);
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
  assert_int_equal(work_queue_init(&q, 1), 0);
  pthread_create(&t, NULL, popper, &q);
  work_queue_close(&q);
  void *got = (void *)1;
  pthread_join(t, &got);
  assert_null(got);
  work_queue_destroy(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bounded),
      cmocka_unit_test(close_wakes_waiters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
