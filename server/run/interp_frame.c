/* interp_frame.c: see interp_frame.h. Bytes from the kernel are hostile:
 * every length is checked before it is used, and nothing is allocated past
 * one frame's bytes. */
#include "interp_frame.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io.h"

#define RECV_CHUNK 65536

int interp_frame_parse(struct sbx_buf *in, json_t **obj) {
  *obj = NULL;
  if (in->len < INTERP_FRAME_HEAD)
    return 0;
  uint64_t n = 0;
  for (int i = INTERP_FRAME_HEAD - 1; i >= 0; i--)
    n = (n << 8) | in->data[i];
  if (n > INTERP_FRAME_MAX)
    return -1;
  size_t whole = INTERP_FRAME_HEAD + (size_t)n;
  if (in->len < whole)
    return 0;
  json_error_t je;
  json_t *o = json_loadb((const char *)in->data + INTERP_FRAME_HEAD, (size_t)n, 0, &je);
  memmove(in->data, in->data + whole, in->len - whole);
  in->len -= whole;
  if (o == NULL || !json_is_object(o)) {
    json_decref(o); /* valid JSON, but not a frame's object */
    return -1;
  }
  *obj = o;
  return 1;
}

/* The control messages that came with the bytes: the first credentials
 * of want_uid give the pid; any fd passed is closed, never kept. */
static void take_control(struct msghdr *m, pid_t *pid, uid_t want_uid) {
  for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h != NULL; h = CMSG_NXTHDR(m, h)) {
    if (h->cmsg_level != SOL_SOCKET)
      continue;
    if (h->cmsg_type == SCM_RIGHTS) {
      size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
        close(fd);
      }
    } else if (h->cmsg_type == SCM_CREDENTIALS && pid != NULL && *pid == 0 &&
               h->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
      struct ucred cr;
      memcpy(&cr, CMSG_DATA(h), sizeof cr);
      if (cr.uid == want_uid)
        *pid = cr.pid;
    }
  }
}

/* One recvmsg into in's free room: 1 with bytes, 0 when none are there
 * now, -1 at the peer's end or an error. */
static int recv_some(int sock, struct sbx_buf *in, pid_t *pid, uid_t want_uid) {
  size_t max = INTERP_FRAME_HEAD + INTERP_FRAME_MAX;
  size_t room = max - in->len < RECV_CHUNK ? max - in->len : RECV_CHUNK;
  if (room == 0 || sbx_buf_reserve(in, room, max) < 0)
    return -1;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
  } c;
  struct iovec iov = {in->data + in->len, room};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  m.msg_control = c.buf;
  m.msg_controllen = sizeof c.buf;
  ssize_t got = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (got < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  take_control(&m, pid, want_uid);
  if (got == 0)
    return -1;
  in->len += (size_t)got;
  return 1;
}

int interp_frame_recv(int sock, struct sbx_buf *in, json_t **obj, pid_t *pid, uid_t want_uid) {
  for (;;) {
    int fr = interp_frame_parse(in, obj);
    if (fr != 0)
      return fr;
    int got = recv_some(sock, in, pid, want_uid);
    if (got <= 0)
      return got;
  }
}

enum interp_recv interp_frame_recv_done(int sock, struct sbx_buf *in, uint64_t seq, json_t **done) {
  *done = NULL;
  for (int i = 0; i < INTERP_FRAMES_PER_READ; i++) {
    json_t *obj = NULL;
    int fr = interp_frame_recv(sock, in, &obj, NULL, 0);
    if (fr < 0)
      return INTERP_RECV_GONE;
    if (fr == 0)
      return INTERP_RECV_NONE;
    if (interp_frame_is_done(obj, seq)) {
      *done = obj;
      return INTERP_RECV_DONE;
    }
    json_decref(obj);
  }
  return INTERP_RECV_MORE;
}

int interp_frame_send(int sock, const char *json, size_t len, const int *fds, size_t n_fds) {
  uint8_t head[INTERP_FRAME_HEAD];
  for (int i = 0; i < INTERP_FRAME_HEAD; i++)
    head[i] = (uint8_t)((uint64_t)len >> (8 * i));
  if (sbx_send_with_fds(sock, head, sizeof head, fds, n_fds, INTERP_FRAME_SEND_STALL_MS) < 0)
    return -1;
  if (len == 0)
    return 0;
  return sbx_send_with_fds(sock, json, len, NULL, 0, INTERP_FRAME_SEND_STALL_MS);
}

char *interp_frame_cell(const struct interp_cell *c, uint64_t seq) {
  json_t *o = json_object();
  json_t *args = json_array(), *env = json_object();
  json_object_set_new(o, "code", json_stringn(c->code, c->code_len));
  for (size_t i = 0; i < c->n_args; i++)
    json_array_append_new(args, json_string(c->args[i]));
  for (size_t i = 0; i < c->n_env; i++) {
    const char *eq = strchr(c->env[i], '=');
    if (eq == NULL)
      continue;
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - c->env[i]), c->env[i]);
    json_object_set_new(env, key, json_string(eq + 1));
  }
  json_object_set_new(o, "args", args);
  json_object_set_new(o, "env", env);
  json_object_set_new(o, "cpu_s", json_integer((json_int_t)((c->limits.cpu_time_ms + 999) / 1000)));
  json_object_set_new(o, "seq", json_integer((json_int_t)seq));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

static bool op_is(const json_t *obj, const char *want) {
  const char *op = json_string_value(json_object_get(obj, "op"));
  return op != NULL && strcmp(op, want) == 0;
}

bool interp_frame_is_ready(const json_t *obj) {
  return op_is(obj, "ready");
}

bool interp_frame_is_done(const json_t *obj, uint64_t seq) {
  const json_t *jseq = json_object_get(obj, "seq");
  return op_is(obj, "done") && json_is_integer(jseq) && (uint64_t)json_integer_value(jseq) == seq;
}

/* The result, cut to INTERP_RESULT_MAX, never within a character. */
static void take_result(const json_t *obj, struct interp_outcome *out) {
  const json_t *result = json_object_get(obj, "result");
  if (!json_is_string(result))
    return;
  const char *text = json_string_value(result);
  size_t len = json_string_length(result);
  out->result_truncated = json_is_true(json_object_get(obj, "truncated"));
  if (len > INTERP_RESULT_MAX) {
    len = INTERP_RESULT_MAX;
    while (len > 0 && ((uint8_t)text[len] & 0xc0) == 0x80)
      len--; /* never half a character */
    out->result_truncated = true;
  }
  len = strnlen(text, len); /* no NUL past here: json_loadb refuses \u0000 */
  out->result = strndup(text, len);
  if (out->result != NULL) {
    out->has_result = true;
    out->result_len = len;
  }
}

void interp_frame_take_done(const json_t *obj, struct sandbox_result *res,
                            struct interp_outcome *out) {
  const json_t *code = json_object_get(obj, "exit_code");
  res->exit_code = json_is_integer(code) ? (int)(json_integer_value(code) & 0xff) : 1;
  const json_t *cpu = json_object_get(obj, "cpu_us");
  if (json_is_integer(cpu) && json_integer_value(cpu) > 0)
    res->cpu_time_us = (uint64_t)json_integer_value(cpu);
  const char *status = json_string_value(json_object_get(obj, "status"));
  out->interrupted = status != NULL && strcmp(status, "interrupted") == 0;
  take_result(obj, out);
}
