/* One request's bytes to a decoded request: every way the bytes can be
 * wrong gets its status and a message, and nothing stays allocated. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <nng/nng.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "envelope.h"

struct decoded {
  sbx_code status;
  struct decoded_request req;
  struct sbx_bounded_alloc alloc;
  struct sbx_error err;
  const char *msg;
};

static void decode_bytes(const void *data, size_t len, struct decoded *d) {
  memset(&d->err, 0, sizeof(d->err));
  d->status = decode_request(data, len, &d->alloc, &d->req, &d->err) == 0 ? SBX_OK : d->err.code;
  d->msg = d->err.msg;
}

/* An envelope for method whose payload is the packed message m (or none). */
static void decode_call(const char *method, const ProtobufCMessage *m, struct decoded *d) {
  nng_msg *msg;
  assert_int_equal(sbx_request_msg_new(method, "req-7", 1234, NULL, m, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), d);
  nng_msg_free(msg);
}

static void release(struct decoded *d) {
  if (d->req.input != NULL)
    protobuf_c_message_free_unpacked(d->req.input, &d->alloc.base);
}

static void valid_run_code(void **state) {
  Sandbox__V1__RunCodeRequest r = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  r.code = "print(1)";
  struct decoded d;
  decode_call(SBX_METHOD_RUN_CODE, &r.base, &d);
  assert_int_equal(d.status, SBX_OK);
  assert_string_equal(d.req.request_id, "req-7");
  assert_int_equal(d.req.deadline_unix_ms, 1234);
  assert_string_equal(d.req.method->name, "RunCode");
  assert_string_equal(((Sandbox__V1__RunCodeRequest *)d.req.input)->code, "print(1)");
  release(&d);
}

static void no_method(void **state) {
  struct decoded d;
  decode_bytes("", 0, &d); /* an empty message decodes as an empty envelope */
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(d.msg, "no method"));
  assert_null(d.req.input);
  decode_call("", NULL, &d);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_string_equal(d.req.request_id, "req-7"); /* the error can echo the id */
}

static void unknown_method(void **state) {
  struct decoded d;
  decode_call("/sandbox.v1.Sandbox/Nope\x01\"x", NULL, &d);
  assert_int_equal(d.status, SBX_UNIMPLEMENTED);
  /* The name is echoed printable: no control byte or quote reaches a log. */
  assert_string_equal(d.msg, "unknown method \"/sandbox.v1.Sandbox/Nope??x\"");
  assert_null(d.req.input);
}

static void garbage_and_bad_payload(void **state) {
  struct decoded d;
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
  decode_bytes(junk, sizeof(junk), &d);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(d.msg, "not a valid sandbox.v1.RequestEnvelope"));

  Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
  env.method = SBX_METHOD_RUN_CODE;
  env.request_id = "r";
  env.payload = (ProtobufCBinaryData){sizeof(junk), (uint8_t *)junk};
  uint8_t buf[256];
  size_t n = sandbox__v1__request_envelope__pack(&env, buf);
  decode_bytes(buf, n, &d);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(d.msg, "payload is not a valid"));
  assert_null(d.req.input);
}

static void nul_in_a_string(void **state) {
  Sandbox__V1__RunCodeRequest r = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  r.code = "print(1)";
  char *args[] = {"ok", "bad"};
  r.n_args = 2;
  r.args = args;
  uint8_t buf[256];
  size_t n = sandbox__v1__run_code_request__pack(&r, buf);
  /* Turn the 'a' of "bad" into a NUL on the wire. */
  uint8_t *p = memmem(buf, n, "bad", 3);
  assert_non_null(p);
  p[1] = '\0';
  Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
  env.method = SBX_METHOD_RUN_CODE;
  env.request_id = "r";
  env.payload = (ProtobufCBinaryData){n, buf};
  uint8_t wire[512];
  size_t wn = sandbox__v1__request_envelope__pack(&env, wire);
  struct decoded d;
  decode_bytes(wire, wn, &d);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(d.msg, "args"));
  assert_non_null(strstr(d.msg, "NUL"));
  assert_null(d.req.input);
}

static void decode_budget_holds(void **state) {
  /* 20000 empty args: a few bytes each on the wire, a pointer and an
   * allocation each decoded; the budget is proportional to the wire size. */
  size_t count = 20000;
  Sandbox__V1__RunCodeRequest r = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  r.code = "x";
  r.args = calloc(count, sizeof(char *));
  for (size_t i = 0; i < count; i++)
    r.args[i] = "";
  r.n_args = count;
  struct decoded d;
  decode_call(SBX_METHOD_RUN_CODE, &r.base, &d);
  /* Either it fits the budget and decodes whole, or it is refused cleanly. */
  if (d.status == SBX_OK) {
    assert_int_equal(((Sandbox__V1__RunCodeRequest *)d.req.input)->n_args, count);
    release(&d);
  } else {
    assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
    assert_non_null(strstr(d.msg, "more memory"));
  }
  free(r.args);
  assert_true(decode_budget(100) >= 800);
}

/* The caller's proof: the key kept only as its digest, a key over 512
 * bytes flagged (refused UNAUTHENTICATED by auth.c), a front_caller's
 * identities copied and bounded. */
static void caller_proof(void **state) {
  Sandbox__V1__HealthRequest h = SANDBOX__V1__HEALTH_REQUEST__INIT;
  nng_msg *msg;
  struct decoded d;
  struct sbx_caller c = {.credential = "key-a"};
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_HEALTH, "r", 0, &c, &h.base, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), &d);
  nng_msg_free(msg);
  assert_int_equal(d.status, SBX_OK);
  uint8_t want[TENANT_DIGEST_BYTES];
  tenants_key_digest("key-a", 5, want);
  assert_true(d.req.caller.has_key);
  assert_memory_equal(d.req.caller.key_digest, want, sizeof want);
  assert_false(d.req.caller.front);
  release(&d);

  char long_key[TENANT_KEY_MAX + 2];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  c.credential = long_key;
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_HEALTH, "r", 0, &c, &h.base, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), &d);
  nng_msg_free(msg);
  assert_int_equal(d.status, SBX_OK);
  assert_false(d.req.caller.has_key);
  assert_true(d.req.caller.key_too_long);
  release(&d);

  const char *ids[DECODE_FRONT_IDENTITIES_MAX + 1];
  for (size_t i = 0; i <= DECODE_FRONT_IDENTITIES_MAX; i++)
    ids[i] = "CN=x";
  c = (struct sbx_caller){.front = true,
                          .front_cert_identities = ids,
                          .n_front_cert_identities = 2,
                          .front_loopback = true};
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_HEALTH, "r", 0, &c, &h.base, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), &d);
  nng_msg_free(msg);
  assert_int_equal(d.status, SBX_OK);
  assert_true(d.req.caller.front && d.req.caller.front_loopback);
  assert_int_equal(d.req.caller.n_front_identities, 2);
  assert_string_equal(d.req.caller.front_identities[1], "CN=x");
  release(&d);

  c.n_front_cert_identities = DECODE_FRONT_IDENTITIES_MAX + 1;
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_HEALTH, "r", 0, &c, &h.base, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), &d);
  nng_msg_free(msg);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_string_equal(d.msg, "front_caller: at most 8 certificate identities");
  assert_null(d.req.input);

  char long_id[TENANT_IDENTITY_MAX + 2];
  memset(long_id, 'x', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  ids[0] = long_id;
  c.n_front_cert_identities = 1;
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_HEALTH, "r", 0, &c, &h.base, &msg), 0);
  decode_bytes(nng_msg_body(msg), nng_msg_len(msg), &d);
  nng_msg_free(msg);
  assert_int_equal(d.status, SBX_INVALID_ARGUMENT);
  assert_string_equal(d.msg, "front_caller: a certificate identity is longer than 512 bytes");
  assert_null(d.req.input);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_run_code),
      cmocka_unit_test(no_method),
      cmocka_unit_test(caller_proof),
      cmocka_unit_test(unknown_method),
      cmocka_unit_test(garbage_and_bad_payload),
      cmocka_unit_test(nul_in_a_string),
      cmocka_unit_test(decode_budget_holds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
