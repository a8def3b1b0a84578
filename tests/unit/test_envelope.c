/* Envelope framing, method checks and the bounded allocator. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "bounded_alloc.h"
#include "envelope.h"

static void method_index_accepts_only_this_service(void **state) {
  assert_int_equal(sbx_method_index(SBX_METHOD_RUN_CODE),
                   (int)(protobuf_c_service_descriptor_get_method_by_name(
                             &sandbox__v1__sandbox__descriptor, "RunCode") -
                         sandbox__v1__sandbox__descriptor.methods));
  assert_true(sbx_method_index(SBX_METHOD_HEALTH) >= 0);
  assert_true(sbx_method_index(SBX_METHOD_GET_INFO) >= 0);
  assert_true(sbx_method_index(SBX_METHOD_CLOSE_SESSION) >= 0);
  assert_int_equal(sbx_method_index("/sandbox.v1.Sandbox/Nope"), -1);
  assert_int_equal(sbx_method_index("/other.v1.Sandbox/RunCode"), -1);
  assert_int_equal(sbx_method_index("RunCode"), -1);
  assert_int_equal(sbx_method_index(""), -1);
  assert_int_equal(sbx_method_index(NULL), -1);
  assert_int_equal(sbx_method_index("/sandbox.v1.Sandbox/"), -1);
}

static void request_round_trip(void **state) {
  Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  req.code = "print(1)";
  nng_msg *msg;
  assert_int_equal(sbx_request_msg_new(SBX_METHOD_RUN_CODE, "id-1", 1234, NULL, &req.base, &msg),
                   0);
  Sandbox__V1__RequestEnvelope *env =
      sandbox__v1__request_envelope__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
  assert_non_null(env);
  assert_string_equal(env->method, SBX_METHOD_RUN_CODE);
  assert_string_equal(env->request_id, "id-1");
  assert_int_equal(env->deadline_unix_ms, 1234);
  Sandbox__V1__RunCodeRequest *back =
      sandbox__v1__run_code_request__unpack(NULL, env->payload.len, env->payload.data);
  assert_non_null(back);
  assert_string_equal(back->code, "print(1)");
  sandbox__v1__run_code_request__free_unpacked(back, NULL);
  sandbox__v1__request_envelope__free_unpacked(env, NULL);
  nng_msg_free(msg);
}

static void reply_carries_status_and_message(void **state) {
  nng_msg *msg;
  assert_int_equal(sbx_reply_msg_new(SBX_RESOURCE_EXHAUSTED, "full", "r", NULL, &msg), 0);
  Sandbox__V1__ReplyEnvelope *env =
      sandbox__v1__reply_envelope__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
  assert_non_null(env);
  assert_int_equal(env->status, SBX_RESOURCE_EXHAUSTED);
  assert_string_equal(env->message, "full");
  assert_int_equal(env->payload.len, 0);
  sandbox__v1__reply_envelope__free_unpacked(env, NULL);
  nng_msg_free(msg);
  assert_string_equal(sbx_code_name(SBX_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  assert_string_equal(sbx_code_name(SBX_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  assert_string_equal(killed_by_name(3), "output_limit");
}

static void bounded_allocator_refuses_past_budget(void **state) {
  /* 10000 empty args: a few bytes each on the wire, a struct each decoded. */
  static char *args[10000];
  for (size_t i = 0; i < 10000; i++)
    args[i] = "";
  Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  req.n_args = 10000;
  req.args = args;
  size_t len = protobuf_c_message_get_packed_size(&req.base);
  uint8_t *buf = malloc(len);
  protobuf_c_message_pack(&req.base, buf);

  struct sbx_bounded_alloc small;
  sbx_bounded_alloc_init(&small, 4 * len);
  assert_null(sandbox__v1__run_code_request__unpack(&small.base, len, buf));
  assert_true(small.exhausted);
  assert_int_equal(small.used, 0); /* everything given back on failure */

  struct sbx_bounded_alloc big;
  sbx_bounded_alloc_init(&big, 1 << 20);
  Sandbox__V1__RunCodeRequest *ok = sandbox__v1__run_code_request__unpack(&big.base, len, buf);
  assert_non_null(ok);
  assert_int_equal(ok->n_args, 10000);
  assert_true(big.used > 0);
  sandbox__v1__run_code_request__free_unpacked(ok, &big.base);
  assert_int_equal(big.used, 0);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(method_index_accepts_only_this_service),
      cmocka_unit_test(request_round_trip),
      cmocka_unit_test(reply_carries_status_and_message),
      cmocka_unit_test(bounded_allocator_refuses_past_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
