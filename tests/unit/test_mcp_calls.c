/* Unit tests of the MCP calls in progress (client/mcp/calls.c), with a
 * notifier that keeps what it is given: a call registers only on a server
 * with a notifier; a progress notification carries the request's token, at
 * most 4 KiB of a chunk cut at a whole character, and progress counting
 * every byte; notifications/cancelled marks exactly the call of its
 * request id (ids of other calls, malformed cancellations and other
 * methods are not taken as cancelling anything); and once a cancellation
 * is taken, the call sends no more progress (a notification that raced it
 * would be written after the answers to messages read after it, which
 * failed a fresh-clone CI run of fronts_mcp_stdio). A call cancelled
 * before its run started is told so when the run is set. /mcp's streamed
 * calls (a message context) get progress on their own notifier and are
 * cancelled only from their own scope (caller and Mcp-Session-Id). */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcp_internal.h"

struct sink {
  json_t *lines; /* each notification, parsed */
};

static void keep(void *arg, const char *line) {
  struct sink *k = arg;
  json_t *m = json_loads(line, 0, NULL);
  assert_non_null(m);
  json_array_append_new(k->lines, m);
}

struct fixture {
  mcp_server *s;
  struct sink sink;
};

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof(*f));
  struct mcp_settings st;
  char err[128];
  mcp_settings_default(&st);
  f->s = mcp_server_new(NULL, &st, err, sizeof(err));
  assert_non_null(f->s);
  f->sink.lines = json_array();
  mcp_server_set_notify(f->s, keep, &f->sink);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  mcp_server_free(f->s);
  json_decref(f->sink.lines);
  free(f);
  return 0;
}

static json_t *params_with_token(const char *token) {
  return json_pack("{s:{s:s}}", "_meta", "progressToken", token);
}

static bool take(mcp_server *s, const char *text) {
  return mcp_take_cancel(s, text, strlen(text));
}

static void progress_carries_token_and_counts_bytes(void **state) {
  struct fixture *f = *state;
  json_t *id = json_integer(7), *params = params_with_token("tok");
  struct mcp_call c;
  mcp_call_begin(f->s, &c, NULL, id, params);
  assert_true(mcp_call_streams(f->s, &c));
  mcp_call_progress(f->s, &c, 1, (const uint8_t *)"hello\n", 6);
  /* 5000 two-byte characters: the message is cut to whole characters
   * within 4 KiB, progress counts all 10000 bytes. */
  size_t n = 10000;
  uint8_t *big = malloc(n);
  for (size_t i = 0; i < n; i += 2) {
    big[i] = 0xc3;
    big[i + 1] = 0xa9;
  }
  mcp_call_progress(f->s, &c, 1, big, n);
  free(big);
  assert_int_equal(json_array_size(f->sink.lines), 2);
  json_t *p0 = json_object_get(json_array_get(f->sink.lines, 0), "params");
  json_t *p1 = json_object_get(json_array_get(f->sink.lines, 1), "params");
  assert_string_equal(json_string_value(json_object_get(p0, "progressToken")), "tok");
  assert_string_equal(json_string_value(json_object_get(p0, "message")), "hello\n");
  assert_int_equal(json_integer_value(json_object_get(p0, "progress")), 6);
  assert_int_equal(json_integer_value(json_object_get(p1, "progress")), 10006);
  assert_int_equal(strlen(json_string_value(json_object_get(p1, "message"))), 4096);
  assert_false(mcp_call_end(f->s, &c));
  json_decref(id);
  json_decref(params);
}

static void no_token_no_progress(void **state) {
  struct fixture *f = *state;
  json_t *id = json_string("a"), *params = json_object();
  struct mcp_call c;
  mcp_call_begin(f->s, &c, NULL, id, params);
  mcp_call_progress(f->s, &c, 1, (const uint8_t *)"x", 1);
  assert_int_equal(json_array_size(f->sink.lines), 0);
  assert_false(mcp_call_end(f->s, &c));
  json_decref(id);
  json_decref(params);
}

static void cancel_stops_progress_of_that_call_only(void **state) {
  struct fixture *f = *state;
  json_t *id_a = json_string("long"), *id_b = json_integer(2);
  json_t *pa = params_with_token("pa"), *pb = params_with_token("pb");
  struct mcp_call a, b;
  mcp_call_begin(f->s, &a, NULL, id_a, pa);
  mcp_call_begin(f->s, &b, NULL, id_b, pb);
  /* Not cancellations of a or b. */
  assert_false(take(f->s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"));
  assert_true(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                         "\"params\":{\"requestId\":\"other\"}}"));
  assert_true(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                         "\"params\":{\"reason\":\"no id\"}}"));
  assert_true(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                         "\"params\":{\"requestId\":\"2\"}}")); /* a string, not 2 */
  /* A request (it has an id) named like the notification is not one. */
  assert_false(take(f->s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"notifications/cancelled\","
                          "\"params\":{\"requestId\":\"long\"}}"));
  mcp_call_progress(f->s, &a, 1, (const uint8_t *)"before", 6);
  assert_int_equal(json_array_size(f->sink.lines), 1);

  assert_true(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                         "\"params\":{\"requestId\":\"long\",\"reason\":\"user\"}}"));
  mcp_call_progress(f->s, &a, 1, (const uint8_t *)"after", 5);
  mcp_call_progress(f->s, &b, 1, (const uint8_t *)"other call", 10);
  assert_int_equal(json_array_size(f->sink.lines), 2);
  json_t *p = json_object_get(json_array_get(f->sink.lines, 1), "params");
  assert_string_equal(json_string_value(json_object_get(p, "progressToken")), "pb");

  /* Not started yet when cancelled: setting the run says so. */
  assert_false(mcp_call_set_run(f->s, &a, NULL));
  assert_true(mcp_call_set_run(f->s, &b, NULL));
  mcp_call_drop_run(f->s, &a);
  mcp_call_drop_run(f->s, &b);
  assert_false(mcp_call_end(f->s, &b));
  assert_true(mcp_call_end(f->s, &a));
  /* Ended: a late cancellation finds nothing. */
  assert_true(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                         "\"params\":{\"requestId\":\"long\"}}"));
  json_decref(id_a);
  json_decref(id_b);
  json_decref(pa);
  json_decref(pb);
}

static void without_notifier_nothing_registers(void **state) {
  struct fixture *f = *state;
  mcp_server_set_notify(f->s, NULL, NULL);
  json_t *id = json_integer(1), *params = params_with_token("t");
  struct mcp_call c;
  mcp_call_begin(f->s, &c, NULL, id, params);
  assert_false(mcp_call_streams(f->s, &c));
  assert_false(take(f->s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                          "\"params\":{\"requestId\":1}}"));
  mcp_call_progress(f->s, &c, 1, (const uint8_t *)"x", 1);
  assert_int_equal(json_array_size(f->sink.lines), 0);
  assert_false(mcp_call_end(f->s, &c));
  json_decref(id);
  json_decref(params);
}

static const char CANCEL_5[] =
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}";

static bool take_scoped(mcp_server *s, const char *scope) {
  return mcp_take_cancel_scoped(s, scope, CANCEL_5, strlen(CANCEL_5));
}

/* /mcp's calls (a message context): progress goes to the message's
 * notifier, and a cancellation reaches a call only from its own scope
 * (caller and session id), never from stdio's or another scope, and a call
 * without a scope never. */
static void scoped_cancel_reaches_only_its_scope(void **state) {
  struct fixture *f = *state;
  mcp_server_set_notify(f->s, NULL, NULL); /* as on sandboxd: no server notifier */
  struct sink own = {json_array()};
  struct mcp_message_context in_a = {keep, &own, "a\nS1"}, unscoped = {keep, &own, NULL};
  json_t *id = json_integer(5), *params = params_with_token("t");
  struct mcp_call c, d;
  mcp_call_begin(f->s, &c, &in_a, id, params);
  mcp_call_begin(f->s, &d, &unscoped, id, params);
  assert_true(mcp_call_streams(f->s, &c));
  assert_true(mcp_call_streams(f->s, &d));
  mcp_call_progress(f->s, &c, 1, (const uint8_t *)"x", 1);
  assert_int_equal(json_array_size(own.lines), 1);
  assert_int_equal(json_array_size(f->sink.lines), 0);

  assert_false(take_scoped(f->s, NULL));   /* no scope: not taken at all */
  assert_true(take_scoped(f->s, "b\nS1")); /* another caller, same session id: ignored */
  assert_true(take_scoped(f->s, "a\nS2")); /* same caller, another session: ignored */
  assert_true(take_scoped(f->s, "a\nS"));  /* a prefix of the scope: ignored */
  mcp_server_set_notify(f->s, keep, &f->sink);
  assert_true(take(f->s, CANCEL_5)); /* stdio's: ignored */
  mcp_server_set_notify(f->s, NULL, NULL);
  assert_true(mcp_call_set_run(f->s, &c, NULL));
  assert_true(mcp_call_set_run(f->s, &d, NULL));

  assert_true(take_scoped(f->s, "a\nS1"));
  mcp_call_progress(f->s, &c, 1, (const uint8_t *)"y", 1);
  assert_int_equal(json_array_size(own.lines), 1);
  mcp_call_drop_run(f->s, &c);
  mcp_call_drop_run(f->s, &d);
  assert_true(mcp_call_end(f->s, &c));
  assert_false(mcp_call_end(f->s, &d));
  json_decref(own.lines);
  json_decref(id);
  json_decref(params);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(progress_carries_token_and_counts_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(no_token_no_progress, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_stops_progress_of_that_call_only, setup, teardown),
      cmocka_unit_test_setup_teardown(without_notifier_nothing_registers, setup, teardown),
      cmocka_unit_test_setup_teardown(scoped_cancel_reaches_only_its_scope, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
