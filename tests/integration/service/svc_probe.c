/* svc-probe: sends hand-made, often malformed, messages to sandboxd and
 * prints the reply's status name, or NO_REPLY. The service tests use it for
 * what the real client never sends: garbage, oversized messages, unknown
 * methods, undecodable payloads.
 *   svc-probe URL garbage | oversize N | method NAME | badpayload | nulpath
 * nulpath: a RunCode whose file path holds a NUL byte ("a\0/../../x"). */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"

static int send_and_print(nng_socket sock, nng_msg *msg) {
  int rv = nng_sendmsg(sock, msg, 0);
  if (rv != 0) {
    nng_msg_free(msg);
    printf("NO_REPLY send: %s\n", nng_strerror(rv));
    return 0;
  }
  nng_msg *reply;
  if ((rv = nng_recvmsg(sock, &reply, 0)) != 0) {
    printf("NO_REPLY %s\n", nng_strerror(rv));
    return 0;
  }
  Sandbox__V1__ReplyEnvelope *env =
      sandbox__v1__reply_envelope__unpack(NULL, nng_msg_len(reply), nng_msg_body(reply));
  nng_msg_free(reply);
  if (env == NULL) {
    printf("BAD_REPLY\n");
    return 1;
  }
  printf("%s %s\n", sbx_code_name(env->status), env->message);
  sandbox__v1__reply_envelope__free_unpacked(env, NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: svc-probe URL garbage|oversize N|method NAME|badpayload\n");
    return 2;
  }
  nng_socket sock;
  int rv;
  if ((rv = nng_req0_open(&sock)) != 0 ||
      (rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
      (rv = nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 3000)) != 0 ||
      (rv = nng_dial(sock, argv[1], NULL, 0)) != 0) {
    fprintf(stderr, "svc-probe: %s: %s\n", argv[1], nng_strerror(rv));
    return 2;
  }
  nng_msg *msg = NULL;
  const char *mode = argv[2];
  if (strcmp(mode, "garbage") == 0) {
    static const char junk[] = "\xff\xff\xff\xff garbage, not a protobuf \x01\x02";
    nng_msg_alloc(&msg, sizeof(junk));
    memcpy(nng_msg_body(msg), junk, sizeof(junk));
  } else if (strcmp(mode, "empty") == 0) {
    nng_msg_alloc(&msg, 0); /* zero bytes: an envelope with nothing set */
  } else if (strcmp(mode, "oversize") == 0 && argc > 3) {
    size_t n = strtoull(argv[3], NULL, 10);
    nng_msg_alloc(&msg, n);
    memset(nng_msg_body(msg), 'A', n);
  } else if (strcmp(mode, "method") == 0 && argc > 3) {
    sbx_request_msg_new(argv[3], "probe", 0, NULL, NULL, &msg);
  } else if (strcmp(mode, "badpayload") == 0) {
    /* A valid envelope for RunCode whose payload is not a RunCodeRequest. */
    Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
    static uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    env.method = SBX_METHOD_RUN_CODE;
    env.request_id = "probe";
    env.payload.data = junk;
    env.payload.len = sizeof(junk);
    nng_msg_alloc(&msg, protobuf_c_message_get_packed_size(&env.base));
    protobuf_c_message_pack(&env.base, nng_msg_body(msg));
  } else if (strcmp(mode, "nulpath") == 0) {
    /* Packed with a placeholder, then the placeholder's bytes replaced:
     * the C API cannot express a string with a NUL in it. */
    Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
    Sandbox__V1__File f = SANDBOX__V1__FILE__INIT, *files[] = {&f};
    static uint8_t content[] = "x";
    f.path = "aQ/../../x";
    f.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
    f.content = (ProtobufCBinaryData){1, content};
    req.code = "print(1)";
    req.n_files = 1;
    req.files = files;
    uint8_t buf[256];
    size_t len = sandbox__v1__run_code_request__pack(&req, buf);
    uint8_t *q = memchr(buf, 'Q', len);
    if (q != NULL)
      *q = 0;
    Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
    env.method = SBX_METHOD_RUN_CODE;
    env.request_id = "probe";
    env.payload = (ProtobufCBinaryData){len, buf};
    nng_msg_alloc(&msg, protobuf_c_message_get_packed_size(&env.base));
    protobuf_c_message_pack(&env.base, nng_msg_body(msg));
  } else {
    fprintf(stderr, "svc-probe: unknown mode %s\n", mode);
    return 2;
  }
  int status = send_and_print(sock, msg);
  nng_close(sock);
  return status;
}
