/* The connection table (server/rpc/conns.c) on a real REP socket over
 * inproc://: the cap per listener, the idle sweep that spares connections
 * with a call in progress and the fronts' own listener, whether a call's
 * client is still there, and the counts operations read. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conns.h"

struct fx {
  nng_socket rep;
  struct conns conns;
  uint32_t listener_a, listener_b;
  nng_socket clients[4];
  size_t n_clients;
};

/* Never freed: nng may still deliver a pipe event of a closed socket to
 * its table while the next test runs. */
static struct fx fixtures[8];
static size_t n_fixtures;

static uint32_t listen_on(struct fx *f, const char *url) {
  nng_listener l;
  assert_int_equal(nng_listener_create(&l, f->rep, url), 0);
  assert_int_equal(nng_listener_start(l, 0), 0);
  return (uint32_t)nng_listener_id(l);
}

/* One per listener at most; idle after 50 ms. Each test its own URLs. */
static int setup(void **state) {
  assert_true(n_fixtures < 8);
  struct fx *f = &fixtures[n_fixtures++];
  char url[64];
  assert_int_equal(nng_rep0_open(&f->rep), 0);
  assert_int_equal(conns_init(&f->conns, 1, 50), 0);
  assert_int_equal(conns_watch(&f->conns, f->rep), 0);
  snprintf(url, sizeof(url), "inproc://conns-a%zu", n_fixtures);
  f->listener_a = listen_on(f, url);
  snprintf(url, sizeof(url), "inproc://conns-b%zu", n_fixtures);
  f->listener_b = listen_on(f, url);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  for (size_t i = 0; i < f->n_clients; i++)
    nng_close(f->clients[i]);
  nng_close(f->rep);
  return 0;
}

/* A client of listener a or b. nng redials a connection the table closed
 * (at once when it was refused): the tests follow pipes, not clients. */
static void dial(struct fx *f, char which) {
  nng_socket s;
  char url[64];
  snprintf(url, sizeof(url), "inproc://conns-%c%zu", which, (size_t)(f - fixtures) + 1);
  assert_int_equal(nng_req0_open(&s), 0);
  assert_int_equal(nng_dial(s, url, NULL, 0), 0);
  f->clients[f->n_clients++] = s;
}

static struct conns_stats_read stats(struct fx *f) {
  struct conns_stats_read st;
  conns_stats_read(&f->conns, &st);
  return st;
}

/* Pipe events arrive on nng's threads: wait (2 s at most) until the table
 * holds n connections. */
static void wait_open(struct fx *f, size_t n) {
  for (int i = 0; i < 400 && stats(f).open != n; i++)
    usleep(5000);
  assert_int_equal(stats(f).open, n);
}

static void wait_gone(struct fx *f, uint32_t pipe) {
  for (int i = 0; i < 400 && conns_alive(&f->conns, pipe); i++)
    usleep(5000);
  assert_false(conns_alive(&f->conns, pipe));
}

/* The pipe of listener's connection in the table (white box: the ids are
 * nng's, and only the table has them); 0 when none. */
static uint32_t pipe_of(struct fx *f, uint32_t listener) {
  uint32_t id = 0;
  pthread_mutex_lock(&f->conns.lock);
  for (size_t i = 0; i < f->conns.n; i++)
    if (f->conns.items[i].listener_id == listener)
      id = f->conns.items[i].pipe_id;
  pthread_mutex_unlock(&f->conns.lock);
  return id;
}

static void cap_per_listener(void **state) {
  struct fx *f = *state;
  dial(f, 'a');
  wait_open(f, 1);
  uint32_t first = pipe_of(f, f->listener_a);
  dial(f, 'a'); /* past the cap of a: closed at once, each time it comes */
  for (int i = 0; i < 400 && stats(f).refused_total == 0; i++)
    usleep(5000);
  assert_true(stats(f).refused_total >= 1);
  dial(f, 'b'); /* b has its own cap */
  wait_open(f, 2);
  assert_int_equal(conns_count(&f->conns), 2);
  assert_int_equal(pipe_of(f, f->listener_a), first); /* the one let in stays */
}

static void idle_sweep_spares_calls_in_progress(void **state) {
  struct fx *f = *state;
  dial(f, 'a');
  dial(f, 'b');
  wait_open(f, 2);
  uint32_t busy = pipe_of(f, f->listener_a), quiet = pipe_of(f, f->listener_b);
  assert_true(conns_alive(&f->conns, busy));
  assert_true(conns_alive(&f->conns, quiet));
  assert_int_equal(conns_close_idle(&f->conns), 0); /* not quiet long enough */
  conns_call_begin(&f->conns, busy);
  usleep(80 * 1000);
  assert_int_equal(conns_close_idle(&f->conns), 1);
  wait_gone(f, quiet); /* a worker drops a call queued from it */
  assert_true(conns_alive(&f->conns, busy));
  assert_int_equal(stats(f).idle_closed_total, 1);
  /* The reply left: quiet from then on, closed after the timeout. */
  conns_call_end(&f->conns, busy);
  assert_true(conns_alive(&f->conns, busy));
  usleep(80 * 1000);
  assert_true(conns_close_idle(&f->conns) >= 1);
  wait_gone(f, busy);
  assert_true(stats(f).idle_closed_total >= 2);
}

static void the_fronts_listener_is_never_idle_closed(void **state) {
  struct fx *f = *state;
  conns_set_internal_listener(&f->conns, f->listener_b);
  dial(f, 'b');
  dial(f, 'a');
  wait_open(f, 2);
  uint32_t fronts = pipe_of(f, f->listener_b), other = pipe_of(f, f->listener_a);
  usleep(80 * 1000);
  assert_int_equal(conns_close_idle(&f->conns), 1); /* a's only */
  wait_gone(f, other);
  usleep(80 * 1000);
  conns_close_idle(&f->conns);
  assert_true(conns_alive(&f->conns, fronts));
}

/* A pipe the table never saw: no call counts, and it is not alive. */
static void unknown_pipes_are_ignored(void **state) {
  struct fx *f = *state;
  conns_call_begin(&f->conns, 12345);
  conns_call_end(&f->conns, 12345);
  conns_call_begin(&f->conns, 0);
  assert_false(conns_alive(&f->conns, 12345));
  assert_int_equal(stats(f).open, 0);
}

static void peer_names(void **state) {
  char name[64];
  nng_pipe none = NNG_PIPE_INITIALIZER;
  conns_peer_name(none, name, sizeof(name));
  assert_string_equal(name, "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(cap_per_listener, setup, teardown),
      cmocka_unit_test_setup_teardown(idle_sweep_spares_calls_in_progress, setup, teardown),
      cmocka_unit_test_setup_teardown(the_fronts_listener_is_never_idle_closed, setup, teardown),
      cmocka_unit_test_setup_teardown(unknown_pipes_are_ignored, setup, teardown),
      cmocka_unit_test(peer_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
