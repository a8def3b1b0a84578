/* The C client's handling of a reply's bytes (what sbxc_run_code does after
 * the call): the server's message whole, however long, and the result. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "sandbox.pb-c.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(long_server_message_kept_whole),
                                     cmocka_unit_test(ok_reply)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
