/* breakout-tool: what the breakout suite needs beyond the real client.
 *
 *   breakout-tool truncated URL
 *     sends every proper prefix of a valid, fully populated RunCode envelope
 *     and prints one line "prefixes=N <STATUS>=n ..." with the reply statuses.
 *   breakout-tool mutate URL N SEED
 *     sends N copies of that envelope with random bytes flipped, inserted or
 *     cut, plus N messages of random bytes, and prints the statuses the same
 *     way (NO_REPLY when nng dropped the message or the reply timed out).
 *   breakout-tool fake-server URL
 *     a hostile server: answers one RunCode with artifacts whose paths try to
 *     leave the client's --artifacts-dir (../, absolute, empty components),
 *     plus one harmless artifact "good.txt", then exits.
 * Never used against anything but the test's own server. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"

enum { MAX_STATUS = 32 };

struct tally {
  unsigned counts[MAX_STATUS + 2]; /* + NO_REPLY, BAD_REPLY */
  unsigned total;
};

static int dial(const char *url, nng_socket *sock) {
  int rv;
  if ((rv = nng_req0_open(sock)) != 0 ||
      (rv = nng_socket_set_ms(*sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
      (rv = nng_socket_set_ms(*sock, NNG_OPT_RECVTIMEO, 5000)) != 0 ||
      (rv = nng_dial(*sock, url, NULL, 0)) != 0) {
    fprintf(stderr, "breakout-tool: %s: %s\n", url, nng_strerror(rv));
    return -1;
  }
  return 0;
}

/* Sends len bytes as one message and counts the reply's status. A dropped
 * message closes nothing on our side but may stall the REQ socket, so a
 * fresh socket is used after every NO_REPLY. */
static void send_one(const char *url, nng_socket *sock, const uint8_t *data, size_t len,
                     struct tally *t) {
  nng_msg *msg;
  t->total++;
  if (nng_msg_alloc(&msg, len) != 0) {
    t->counts[MAX_STATUS]++;
    return;
  }
  if (len > 0)
    memcpy(nng_msg_body(msg), data, len);
  nng_msg *reply = NULL;
  if (nng_sendmsg(*sock, msg, 0) != 0) {
    nng_msg_free(msg);
  } else if (nng_recvmsg(*sock, &reply, 0) == 0) {
    Sandbox__V1__ReplyEnvelope *env =
        sandbox__v1__reply_envelope__unpack(NULL, nng_msg_len(reply), nng_msg_body(reply));
    nng_msg_free(reply);
    if (env == NULL) {
      t->counts[MAX_STATUS + 1]++;
      return;
    }
    int st = (int)env->status;
    t->counts[st >= 0 && st < MAX_STATUS ? st : MAX_STATUS + 1]++;
    sandbox__v1__reply_envelope__free_unpacked(env, NULL);
    return;
  }
  t->counts[MAX_STATUS]++;
  nng_close(*sock);
  if (dial(url, sock) < 0)
    exit(2);
}

static void print_tally(const char *what, const struct tally *t) {
  printf("%s=%u", what, t->total);
  for (int i = 0; i < MAX_STATUS; i++)
    if (t->counts[i] > 0)
      printf(" %s=%u", sbx_code_name(i), t->counts[i]);
  if (t->counts[MAX_STATUS] > 0)
    printf(" NO_REPLY=%u", t->counts[MAX_STATUS]);
  if (t->counts[MAX_STATUS + 1] > 0)
    printf(" BAD_REPLY=%u", t->counts[MAX_STATUS + 1]);
  printf("\n");
}

/* A RunCode envelope using every field of the request. The code exits at
 * once; the suite checks the server's run counter to see whether it ran. */
static size_t valid_envelope(uint8_t **out) {
  Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  Sandbox__V1__File f = SANDBOX__V1__FILE__INIT, *files[] = {&f};
  Sandbox__V1__RunCodeRequest__EnvEntry e = SANDBOX__V1__RUN_CODE_REQUEST__ENV_ENTRY__INIT;
  Sandbox__V1__RunCodeRequest__EnvEntry *envs[] = {&e};
  Sandbox__V1__Limits lim = SANDBOX__V1__LIMITS__INIT;
  static char *args[] = {"a1", "a2"};
  static uint8_t content[] = "file content";
  static uint8_t input[] = "stdin bytes";
  req.code = "import sys\nsys.exit(0)\n";
  f.path = "dir/f.txt";
  f.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  f.content = (ProtobufCBinaryData){sizeof content - 1, content};
  req.n_files = 1;
  req.files = files;
  req.run_id = "truncation-probe";
  req.stdin = (ProtobufCBinaryData){sizeof input - 1, input};
  req.n_args = 2;
  req.args = args;
  e.key = "KEY";
  e.value = "value";
  req.n_env = 1;
  req.env = envs;
  lim.timeout_ms = 2000;
  lim.memory_bytes = 64 << 20;
  lim.output_bytes = 1024;
  req.limits = &lim;
  req.runtime = "python";
  size_t plen = sandbox__v1__run_code_request__get_packed_size(&req);
  uint8_t *payload = malloc(plen);
  sandbox__v1__run_code_request__pack(&req, payload);
  Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
  env.method = SBX_METHOD_RUN_CODE;
  env.request_id = "probe";
  env.payload = (ProtobufCBinaryData){plen, payload};
  size_t len = sandbox__v1__request_envelope__get_packed_size(&env);
  *out = malloc(len);
  sandbox__v1__request_envelope__pack(&env, *out);
  free(payload);
  return len;
}

static int cmd_truncated(const char *url) {
  nng_socket sock;
  if (dial(url, &sock) < 0)
    return 2;
  uint8_t *full;
  size_t len = valid_envelope(&full);
  struct tally t = {0};
  for (size_t n = 0; n < len; n++)
    send_one(url, &sock, full, n, &t);
  print_tally("prefixes", &t);
  free(full);
  nng_close(sock);
  return 0;
}

static int cmd_mutate(const char *url, unsigned n, unsigned seed) {
  nng_socket sock;
  if (dial(url, &sock) < 0)
    return 2;
  srandom(seed);
  uint8_t *full;
  size_t len = valid_envelope(&full);
  uint8_t *buf = malloc(len + 64);
  struct tally mutated = {0}, random_bytes = {0};
  for (unsigned i = 0; i < n; i++) {
    size_t blen = len;
    memcpy(buf, full, len);
    int edits = 1 + (int)(random() % 4);
    for (int k = 0; k < edits; k++) {
      size_t at = (size_t)random() % blen;
      switch (random() % 3) {
      case 0:
        buf[at] = (uint8_t)random();
        break;
      case 1: /* insert a byte */
        memmove(buf + at + 1, buf + at, blen - at);
        buf[at] = (uint8_t)random();
        blen++;
        break;
      default: /* cut a byte */
        memmove(buf + at, buf + at + 1, blen - at - 1);
        blen--;
        break;
      }
      if (blen + 1 >= len + 64 || blen < 2)
        break;
    }
    send_one(url, &sock, buf, blen, &mutated);
    size_t rlen = (size_t)random() % 200;
    for (size_t k = 0; k < rlen; k++)
      buf[k] = (uint8_t)random();
    send_one(url, &sock, buf, rlen, &random_bytes);
  }
  print_tally("mutated", &mutated);
  print_tally("random", &random_bytes);
  free(buf);
  free(full);
  nng_close(sock);
  return 0;
}

static int cmd_fake_server(const char *url) {
  nng_socket sock;
  int rv;
  if ((rv = nng_rep0_open(&sock)) != 0 || (rv = nng_listen(sock, url, NULL, 0)) != 0) {
    fprintf(stderr, "breakout-tool: listen %s: %s\n", url, nng_strerror(rv));
    return 2;
  }
  printf("listening\n");
  fflush(stdout);
  for (;;) {
    nng_msg *msg;
    if ((rv = nng_recvmsg(sock, &msg, 0)) != 0) {
      fprintf(stderr, "breakout-tool: recv: %s\n", nng_strerror(rv));
      return 2;
    }
    Sandbox__V1__RequestEnvelope *env =
        sandbox__v1__request_envelope__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    if (env == NULL)
      continue;
    bool run = strcmp(env->method, SBX_METHOD_RUN_CODE) == 0;
    nng_msg *reply;
    if (!run) {
      sbx_reply_msg_new(SBX_UNIMPLEMENTED, "fake server", env->request_id, NULL, &reply);
      sandbox__v1__request_envelope__free_unpacked(env, NULL);
      nng_sendmsg(sock, reply, 0);
      continue;
    }
    static const char *const paths[] = {
        "../escape-dotdot.txt",
        "/tmp/escape-absolute.txt",
        "sub/../../escape-sub.txt",
        "a//b.txt",
        "./dot.txt",
        "",
        "..",
        "sub/..",
        "good.txt",
    };
    enum { N = sizeof paths / sizeof paths[0] };
    Sandbox__V1__Artifact arts[N], *ptrs[N];
    static uint8_t content[] = "written by a hostile server\n";
    for (size_t i = 0; i < N; i++) {
      sandbox__v1__artifact__init(&arts[i]);
      const char *slash = strrchr(paths[i], '/');
      arts[i].name = (char *)(slash != NULL ? slash + 1 : paths[i]);
      arts[i].relative_path = (char *)paths[i];
      arts[i].size = sizeof content - 1;
      arts[i].mime = "text/plain";
      arts[i].content = (ProtobufCBinaryData){sizeof content - 1, content};
      ptrs[i] = &arts[i];
    }
    Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
    resp.run_id = "fake";
    resp.n_artifacts = N;
    resp.artifacts = ptrs;
    sbx_reply_msg_new(SBX_OK, "", env->request_id, &resp.base, &reply);
    sandbox__v1__request_envelope__free_unpacked(env, NULL);
    nng_sendmsg(sock, reply, 0);
    nng_msleep(200); /* let the reply reach the client before closing */
    nng_close(sock);
    return 0;
  }
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "truncated") == 0)
    return cmd_truncated(argv[2]);
  if (argc >= 5 && strcmp(argv[1], "mutate") == 0)
    return cmd_mutate(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
                      (unsigned)strtoul(argv[4], NULL, 10));
  if (argc >= 3 && strcmp(argv[1], "fake-server") == 0)
    return cmd_fake_server(argv[2]);
  fprintf(stderr, "usage: breakout-tool truncated URL | mutate URL N SEED | fake-server URL\n");
  return 2;
}
