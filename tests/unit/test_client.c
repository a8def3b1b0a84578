/* The C client's handling of a reply's bytes (what sbxc_run_code does after
 * the call): the server's message whole, however long, and the result. And
 * the fleet's pure parts: endpoint URLs and their keys, the cross-client
 * session rule (docs/CLIENTS.md) on the vectors the Python and TypeScript
 * clients' tests hold too, and the bounded session memory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <stdio.h>

#include "calls.h"
#include "client_internal.h"
#include "endpoint.h"
#include "fleet.h"
#include "sandbox.pb-c.h"
#include "session_pins.h"

static size_t pack_reply(Sandbox__V1__Code status, const char *message,
                         const ProtobufCMessage *payload, uint8_t **out) {
  Sandbox__V1__ReplyEnvelope env = SANDBOX__V1__REPLY_ENVELOPE__INIT;
  env.status = status;
  env.message = (char *)message;
  env.request_id = "r";
  uint8_t *body = NULL;
  if (payload != NULL) {
    body = malloc(protobuf_c_message_get_packed_size(payload));
    env.payload.len = protobuf_c_message_pack(payload, body);
    env.payload.data = body;
  }
  *out = malloc(sandbox__v1__reply_envelope__get_packed_size(&env));
  size_t n = sandbox__v1__reply_envelope__pack(&env, *out);
  free(body);
  return n;
}

static void long_server_message_kept_whole(void **state) {
  /* A failed install's message carries pip's output tail (2 KiB). */
  char *msg = malloc(3001);
  memset(msg, 'p', 3000);
  msg[3000] = '\0';
  uint8_t *wire;
  size_t n = pack_reply(SANDBOX__V1__CODE__FAILED_PRECONDITION, msg, NULL, &wire);
  struct sbxc_result r;
  assert_int_equal(sbxc_result_from_reply_bytes(wire, n, &r), -1);
  assert_int_equal(r.status, SBXC_FAILED_PRECONDITION);
  assert_int_equal(strlen(r.message), 3000);
  assert_memory_equal(r.message, msg, 3000);
  sbxc_result_free(&r);
  free(wire);
  free(msg);
}

static void ok_reply(void **state) {
  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  resp.run_id = "run-1";
  resp.stdout = (ProtobufCBinaryData){3, (uint8_t *)"hi\n"};
  resp.killed_by = SANDBOX__V1__KILLED_BY__KILLED_BY_TIMEOUT;
  uint8_t *wire;
  size_t n = pack_reply(SANDBOX__V1__CODE__OK, "", &resp.base, &wire);
  struct sbxc_result r;
  assert_int_equal(sbxc_result_from_reply_bytes(wire, n, &r), 0);
  assert_string_equal(r.run_id, "run-1");
  assert_int_equal(r.stdout_len, 3);
  assert_int_equal(r.killed_by, SBXC_KILLED_BY_TIMEOUT);
  assert_string_equal(r.message, "");
  sbxc_result_free(&r);
  free(wire);
}

/* RunCodeResponse.egress (a run with allow_net): in the result and in
 * sandbox-run --json's object only when the reply carries it. */
static void egress_summary_only_when_sent(void **state) {
  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  resp.run_id = "run-2";
  uint8_t *wire;
  size_t n = pack_reply(SANDBOX__V1__CODE__OK, "", &resp.base, &wire);
  struct sbxc_result r;
  assert_int_equal(sbxc_result_from_reply_bytes(wire, n, &r), 0);
  assert_null(r.egress);
  char *json = sbxc_result_json(&r);
  assert_non_null(json);
  assert_null(strstr(json, "egress"));
  free(json);
  sbxc_result_free(&r);
  free(wire);

  Sandbox__V1__EgressSummary egress = SANDBOX__V1__EGRESS_SUMMARY__INIT;
  egress.connections = 3;
  egress.refused = 1;
  egress.bytes_up = 517;
  egress.bytes_down = UINT64_C(5000000000);
  resp.egress = &egress;
  n = pack_reply(SANDBOX__V1__CODE__OK, "", &resp.base, &wire);
  assert_int_equal(sbxc_result_from_reply_bytes(wire, n, &r), 0);
  assert_non_null(r.egress);
  assert_int_equal(r.egress->connections, 3);
  assert_int_equal(r.egress->refused, 1);
  assert_int_equal(r.egress->bytes_up, 517);
  assert_true(r.egress->bytes_down == UINT64_C(5000000000));
  json = sbxc_result_json(&r);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"egress\":{\"connections\":3,\"refused\":1,\"bytes_up\":517,"
                               "\"bytes_down\":5000000000}"));
  free(json);
  sbxc_result_free(&r);
  free(wire);
}

static void fnv1a32_vectors(void **state) {
  assert_int_equal(sbxc_fnv1a32("", 0), 0x811c9dc5u);
  assert_int_equal(sbxc_fnv1a32("a", 1), 0xe40c292cu);
  assert_int_equal(sbxc_fnv1a32("foobar", 6), 0xbf9cf968u);
  /* The score hashes session id, one NUL byte, key: nothing else. */
  assert_int_equal(sbxc_session_score("s1", "tcp://127.0.0.2:7878"), 0x305f6990u);
  assert_int_equal(sbxc_session_score("fleet-s", "tcp://[::1]:7878"), 0x4fc52943u);
  assert_int_equal(sbxc_session_score("ab", "c"), sbxc_fnv1a32("ab\0c", 4));
}

static const char *const SESSION_KEYS[] = {"tcp://127.0.0.2:7878", "tcp://127.0.0.3:7878",
                                           "tcp://127.0.0.4:7878", "tcp://[::1]:7878",
                                           "ipc:///run/sandboxd.sock"};

static void session_rule_vectors(void **state) {
  assert_string_equal(SESSION_KEYS[sbxc_session_home("s1", SESSION_KEYS, 3)],
                      "tcp://127.0.0.4:7878");
  assert_string_equal(SESSION_KEYS[sbxc_session_home("s1", SESSION_KEYS, 5)],
                      "ipc:///run/sandboxd.sock");
  assert_string_equal(SESSION_KEYS[sbxc_session_home("fleet-s", SESSION_KEYS, 5)],
                      "tcp://127.0.0.2:7878");
  assert_string_equal(SESSION_KEYS[sbxc_session_home("notebook-42", SESSION_KEYS, 5)],
                      "tcp://127.0.0.3:7878");
  /* The order the keys come in does not matter. */
  const char *reversed[5];
  for (size_t i = 0; i < 5; i++)
    reversed[i] = SESSION_KEYS[4 - i];
  assert_string_equal(reversed[sbxc_session_home("notebook-42", reversed, 5)],
                      "tcp://127.0.0.3:7878");
}

static void session_rule_ties_go_to_the_smallest_key(void **state) {
  /* Two keys with the same score for session "tie" (found by search). */
  const char *keys[] = {"tcp://10.5.200.16:7878", "tcp://10.4.185.158:7878"};
  assert_int_equal(sbxc_session_score("tie", keys[0]), 0x9e9eab07u);
  assert_int_equal(sbxc_session_score("tie", keys[1]), 0x9e9eab07u);
  assert_int_equal(sbxc_session_home("tie", keys, 2), 1);
  const char *swapped[] = {keys[1], keys[0]};
  assert_int_equal(sbxc_session_home("tie", swapped, 2), 0);
}

static void parse_ok(const char *url, bool is_name, const char *key) {
  struct sbxc_target t;
  char err[256] = "";
  assert_int_equal(sbxc_target_parse(url, &t, err, sizeof(err)), 0);
  assert_int_equal(t.is_name, is_name);
  if (key != NULL)
    assert_string_equal(t.fixed_key, key);
}

static void parse_bad(const char *url, const char *why) {
  struct sbxc_target t;
  char err[256] = "";
  assert_int_equal(sbxc_target_parse(url, &t, err, sizeof(err)), -1);
  if (strstr(err, why) == NULL)
    fail_msg("%s: error \"%s\" does not say \"%s\"", url, err, why);
}

static void endpoint_urls_and_keys(void **state) {
  parse_ok("tcp://127.0.0.2:7878", false, "tcp://127.0.0.2:7878");
  parse_ok("tcp://127.0.0.2:07878", false, "tcp://127.0.0.2:7878");
  parse_ok("tcp://[::1]:7878", false, "tcp://[::1]:7878");
  parse_ok("tcp://[0:0:0::1]:7878", false, "tcp://[::1]:7878");
  parse_ok("tcp://[FE80::A]:1", false, "tcp://[fe80::a]:1");
  parse_ok("ipc:///run/sandboxd.sock", false, "ipc:///run/sandboxd.sock");
  parse_ok("ipc://relative.sock", false, "ipc://relative.sock");
  parse_ok("inproc://sandboxd-fronts", false, "inproc://sandboxd-fronts");
  parse_ok("tcp://sandboxd.default.svc.cluster.local:7878", true, NULL);
  parse_ok("tcp://localhost:1", true, NULL);
  /* tls+tcp://: the scheme is part of the key (every client spells it so),
   * the host is kept as written for the server name. */
  parse_ok("tls+tcp://127.0.0.2:07878", false, "tls+tcp://127.0.0.2:7878");
  parse_ok("tls+tcp://[0::1]:7878", false, "tls+tcp://[::1]:7878");
  parse_ok("tls+tcp://sandboxd.mesh.test:7878", true, NULL);
  struct sbxc_target t;
  char err[256];
  assert_int_equal(sbxc_target_parse("tls+tcp://[0::1]:7878", &t, err, sizeof(err)), 0);
  assert_true(t.tls);
  assert_string_equal(t.host, "0::1");
  assert_int_equal(sbxc_target_parse("tcp://10.1.2.3:7878", &t, err, sizeof(err)), 0);
  assert_false(t.tls);
  assert_string_equal(t.host, "10.1.2.3");
  assert_int_equal(sbxc_target_parse("tcp://sbx-a_1.test:65535", &t, err, sizeof(err)), 0);
  assert_string_equal(t.host, "sbx-a_1.test");
  assert_int_equal(t.port, 65535);

  parse_bad("tcp://127.0.0.1", "expected tcp://HOST:PORT");
  parse_bad("tcp://127.0.0.1:0", "port");
  parse_bad("tcp://127.0.0.1:65536", "port");
  parse_bad("tcp://127.0.0.1:78x", "port");
  parse_bad("tcp://:7878", "expected tcp://HOST:PORT");
  parse_bad("tcp://[::1]", "expected tcp://[IPv6]:PORT");
  parse_bad("tcp://[not-v6]:1", "is not an IPv6 address");
  parse_bad("tcp://a/b:1", "expected tcp://HOST:PORT");
  parse_bad("tcp://user@host:1", "expected tcp://HOST:PORT");
  parse_bad("ipc://", "needs a socket path");
  parse_bad("inproc://", "needs a socket path or name");
  parse_bad("tls+tcp://127.0.0.1", "expected tls+tcp://HOST:PORT");
  parse_bad("tls+tcp://[::1]", "expected tls+tcp://[IPv6]:PORT");
  parse_bad("http://127.0.0.1:7878",
            "tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc://PATH or inproc://NAME only");
  char huge[400];
  memset(huge, 'a', sizeof(huge));
  memcpy(huge, "ipc:///", 7);
  huge[sizeof(huge) - 1] = '\0';
  parse_bad(huge, "longer than");
}

static void address_keys(void **state) {
  char key[SBXC_KEY_MAX];
  struct in_addr a4;
  struct in6_addr a6;
  assert_int_equal(inet_pton(AF_INET, "10.0.0.7", &a4), 1);
  assert_int_equal(sbxc_address_key("tcp", AF_INET, &a4, 7878, key, sizeof(key)), 0);
  assert_string_equal(key, "tcp://10.0.0.7:7878");
  assert_int_equal(sbxc_address_key("tls+tcp", AF_INET, &a4, 7878, key, sizeof(key)), 0);
  assert_string_equal(key, "tls+tcp://10.0.0.7:7878");
  assert_int_equal(inet_pton(AF_INET6, "2001:db8:0:0:0:0:0:1", &a6), 1);
  assert_int_equal(sbxc_address_key("tcp", AF_INET6, &a6, 7878, key, sizeof(key)), 0);
  assert_string_equal(key, "tcp://[2001:db8::1]:7878");
  assert_int_equal(sbxc_address_key("tls+tcp", AF_INET6, &a6, 7878, key, sizeof(key)), 0);
  assert_string_equal(key, "tls+tcp://[2001:db8::1]:7878");
  assert_int_equal(sbxc_address_key("tcp", AF_INET6, &a6, 7878, key, 10), -1);
}

static void key_sets(void **state) {
  struct sbxc_key_set s = {0};
  assert_false(sbxc_key_set_has(&s, "a"));
  assert_false(sbxc_key_set_has(NULL, "a"));
  assert_int_equal(sbxc_key_set_add(&s, "a"), 0);
  assert_int_equal(sbxc_key_set_add(&s, "b"), 0);
  assert_int_equal(sbxc_key_set_add(&s, "a"), 0);
  assert_int_equal(s.n, 2);
  assert_true(sbxc_key_set_has(&s, "b"));
  sbxc_key_set_free(&s);
  assert_int_equal(s.n, 0);
}

static void session_pins_forget_the_least_recent(void **state) {
  struct sbxc_pins *p = sbxc_pins_new(3);
  assert_non_null(p);
  assert_int_equal(sbxc_pins_put(p, "s1", "k1"), 0);
  assert_int_equal(sbxc_pins_put(p, "s2", "k2"), 0);
  assert_int_equal(sbxc_pins_put(p, "s3", "k3"), 0);
  assert_string_equal(sbxc_pins_get(p, "s1"), "k1"); /* s1 is now the most recent */
  assert_int_equal(sbxc_pins_put(p, "s4", "k4"), 0); /* s2 goes */
  assert_int_equal(sbxc_pins_count(p), 3);
  assert_null(sbxc_pins_get(p, "s2"));
  assert_string_equal(sbxc_pins_get(p, "s1"), "k1");
  assert_int_equal(sbxc_pins_put(p, "s3", "k3b"), 0); /* moved, not added */
  assert_int_equal(sbxc_pins_count(p), 3);
  assert_string_equal(sbxc_pins_get(p, "s3"), "k3b");
  sbxc_pins_remove(p, "s3");
  assert_null(sbxc_pins_get(p, "s3"));
  assert_int_equal(sbxc_pins_count(p), 2);
  sbxc_pins_free(p);

  /* The client's own cap: 4096 session ids, then the oldest is forgotten. */
  p = sbxc_pins_new(SBXC_MAX_REMEMBERED_SESSIONS);
  char sid[32];
  for (int i = 0; i < SBXC_MAX_REMEMBERED_SESSIONS + 10; i++) {
    snprintf(sid, sizeof(sid), "s-%d", i);
    assert_int_equal(sbxc_pins_put(p, sid, "k"), 0);
  }
  assert_int_equal(sbxc_pins_count(p), SBXC_MAX_REMEMBERED_SESSIONS);
  assert_null(sbxc_pins_get(p, "s-9"));
  assert_non_null(sbxc_pins_get(p, "s-10"));
  sbxc_pins_clear(p);
  assert_int_equal(sbxc_pins_count(p), 0);
  assert_null(sbxc_pins_get(p, "s-10"));
  assert_int_equal(sbxc_pins_put(p, "s-10", "k2"), 0);
  assert_string_equal(sbxc_pins_get(p, "s-10"), "k2");
  sbxc_pins_free(p);
}

/* sbxc_client_set_api_key (docs/CLIENTS.md, "API keys"): at most 512 bytes
 * of printable ASCII without spaces, else EINVAL and the key it had is
 * kept; NULL and "" clear it. */
static void api_key_validation(void **state) {
  (void)state;
  char err[256];
  sbxc_client *c = NULL;
  assert_int_equal(sbxc_client_open(&c, "tcp://127.0.0.1:9", err, sizeof(err)), 0);
  assert_null(c->api_key);
  assert_int_equal(sbxc_client_set_api_key(c, "sbx-key_1.~!"), 0);
  assert_string_equal(c->api_key, "sbx-key_1.~!");
  char largest[SBXC_API_KEY_MAX + 2];
  memset(largest, 'k', SBXC_API_KEY_MAX);
  largest[SBXC_API_KEY_MAX] = '\0';
  assert_int_equal(sbxc_client_set_api_key(c, largest), 0);
  assert_int_equal(strlen(c->api_key), SBXC_API_KEY_MAX);
  assert_int_equal(sbxc_client_set_api_key(c, "kept"), 0);
  largest[SBXC_API_KEY_MAX] = 'k';
  largest[SBXC_API_KEY_MAX + 1] = '\0';
  const char *bad[] = {largest,   "has space",   "newline\n", "tab\t",
                       "del\x7f", "caf\xc3\xa9", "\x80",      "\x01"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    errno = 0;
    assert_int_equal(sbxc_client_set_api_key(c, bad[i]), -1);
    assert_int_equal(errno, EINVAL);
    assert_string_equal(c->api_key, "kept");
  }
  assert_int_equal(sbxc_client_set_api_key(c, ""), 0);
  assert_null(c->api_key);
  assert_int_equal(sbxc_client_set_api_key(c, "again"), 0);
  assert_int_equal(sbxc_client_set_api_key(c, NULL), 0);
  assert_null(c->api_key);
  sbxc_client_close(c);
}

/* Two clients of one fleet in one process, with different keys: a session
 * one of them pinned is not the other's (a session id is a session of the
 * caller's tenant). And a client whose key changes forgets its pins. */
static void session_pins_are_each_clients_own(void **state) {
  (void)state;
  const char *urls[] = {"tcp://127.0.0.2:9", "tcp://127.0.0.3:9", "tcp://127.0.0.4:9"};
  char err[256], home[SBXC_KEY_MAX], key[SBXC_KEY_MAX];
  sbxc_client *a = NULL, *b = NULL;
  assert_int_equal(sbxc_client_open_many(&a, urls, 3, err, sizeof(err)), 0);
  assert_int_equal(sbxc_client_open_many(&b, urls, 3, err, sizeof(err)), 0);
  assert_int_equal(sbxc_client_set_api_key(a, "key-a"), 0);
  assert_int_equal(sbxc_client_set_api_key(b, "key-b"), 0);
  assert_int_equal(sbxc_fleet_session_home(a->fleet, "nb", home, sizeof(home)), 0);
  /* A pins nb somewhere else than the rendezvous home (as after a fleet
   * change); B still goes to the rendezvous home. */
  const char *other = strcmp(home, urls[0]) == 0 ? urls[1] : urls[0];
  assert_int_equal(sbxc_fleet_remember_session(a->fleet, "nb", other), 0);
  assert_int_equal(sbxc_fleet_session_home(a->fleet, "nb", key, sizeof(key)), 0);
  assert_string_equal(key, other);
  assert_int_equal(sbxc_fleet_session_home(b->fleet, "nb", key, sizeof(key)), 0);
  assert_string_equal(key, home);
  /* The same key again keeps the pins; another key drops them. */
  assert_int_equal(sbxc_client_set_api_key(a, "key-a"), 0);
  assert_int_equal(sbxc_fleet_session_home(a->fleet, "nb", key, sizeof(key)), 0);
  assert_string_equal(key, other);
  assert_int_equal(sbxc_client_set_api_key(a, "key-b"), 0);
  assert_int_equal(sbxc_fleet_session_home(a->fleet, "nb", key, sizeof(key)), 0);
  assert_string_equal(key, home);
  assert_int_equal(sbxc_fleet_remember_session(a->fleet, "nb", other), 0);
  assert_int_equal(sbxc_client_set_api_key(a, NULL), 0);
  assert_int_equal(sbxc_fleet_session_home(a->fleet, "nb", key, sizeof(key)), 0);
  assert_string_equal(key, home);
  sbxc_client_close(a);
  sbxc_client_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(long_server_message_kept_whole),
      cmocka_unit_test(ok_reply),
      cmocka_unit_test(egress_summary_only_when_sent),
      cmocka_unit_test(fnv1a32_vectors),
      cmocka_unit_test(session_rule_vectors),
      cmocka_unit_test(session_rule_ties_go_to_the_smallest_key),
      cmocka_unit_test(endpoint_urls_and_keys),
      cmocka_unit_test(address_keys),
      cmocka_unit_test(key_sets),
      cmocka_unit_test(session_pins_forget_the_least_recent),
      cmocka_unit_test(api_key_validation),
      cmocka_unit_test(session_pins_are_each_clients_own),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
