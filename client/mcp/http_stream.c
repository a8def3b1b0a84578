/* http_stream.c: the SSE response of a streamed /mcp call (Streamable
 * HTTP: a POST answered with text/event-stream). One message, run to its
 * end by mcp_http_stream_run on a thread of the host's, with a notifier of
 * its own: each notifications/progress becomes an event in a buffer, then
 * the response does (none when the call was cancelled), and the
 * connection's thread takes the buffer's bytes with mcp_http_stream_read.
 *
 * Memory stays bounded whatever the client does: progress waiting to be
 * sent is capped (MCP_HTTP_STREAM_PENDING_MAX; past it a notification is
 * dropped, the next one's progress counts the bytes), and the response is
 * the one a JSON answer would be. Events carry no id: the stream cannot be
 * resumed (the server keeps nothing), so the SDK does not try. Must never:
 * send anything after the response, or an event of another request. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "mcp_internal.h"

struct mcp_http_stream {
  mcp_server *s;
  char *message; /* the request's body (a copy) */
  size_t len;
  char scope[MCP_HTTP_SCOPE_MAX]; /* the caller and its session id */
  bool has_scope;
  pthread_mutex_t lock; /* what follows */
  pthread_cond_t changed;
  struct sbx_buf pending; /* events not read yet, from offset sent */
  size_t sent;
  bool done; /* the call ended: pending holds all there will be */
};

static const char KEEP_ALIVE[] = ":\n\n";
/* Bytes read from the front of the buffer before it is moved down. */
#define COMPACT_AFTER ((size_t)16 << 10)

/* "event: message\ndata: LINE\n\n" appended (line: one JSON text, no
 * newline); over max, nothing. */
static void append_event(struct mcp_http_stream *st, const char *line, size_t max) {
  static const char head[] = "event: message\ndata: ", tail[] = "\n\n";
  size_t n = strlen(line), need = sizeof(head) - 1 + n + sizeof(tail) - 1;
  if (sbx_buf_reserve(&st->pending, need, max) < 0)
    return;
  sbx_buf_append(&st->pending, head, sizeof(head) - 1, max);
  sbx_buf_append(&st->pending, line, n, max);
  sbx_buf_append(&st->pending, tail, sizeof(tail) - 1, max);
  pthread_cond_broadcast(&st->changed);
}

/* The call's notifier (calls.c calls it under the server's calls_lock). */
static void stream_notify(void *arg, const char *line) {
  struct mcp_http_stream *st = arg;
  pthread_mutex_lock(&st->lock);
  /* Only what is unread counts against the cap. */
  append_event(st, line, st->sent + MCP_HTTP_STREAM_PENDING_MAX);
  pthread_mutex_unlock(&st->lock);
}

struct mcp_http_stream *mcp_http_stream_new(mcp_server *s, const char *scope, const char *message,
                                            size_t len) {
  struct mcp_http_stream *st = calloc(1, sizeof(*st));
  if (st == NULL || (st->message = malloc(len + 1)) == NULL) {
    free(st);
    return NULL;
  }
  memcpy(st->message, message, len);
  st->message[len] = '\0';
  st->len = len;
  st->s = s;
  if (scope != NULL) {
    snprintf(st->scope, sizeof(st->scope), "%s", scope);
    st->has_scope = true;
  }
  pthread_mutex_init(&st->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&st->changed, &ca);
  pthread_condattr_destroy(&ca);
  return st;
}

void mcp_http_stream_run(struct mcp_http_stream *st) {
  struct mcp_message_context ctx = {
      .notify = stream_notify,
      .notify_arg = st,
      .scope = st->has_scope ? st->scope : NULL,
  };
  char *response = NULL;
  enum mcp_outcome outcome;
  if (mcp_handle_message_in(st->s, &ctx, st->message, st->len, &response, &outcome) < 0)
    response = mcp_error_text(MCP_INTERNAL_ERROR, "out of memory");
  pthread_mutex_lock(&st->lock);
  if (response != NULL) /* none: cancelled */
    append_event(st, response, SIZE_MAX);
  st->done = true;
  pthread_cond_broadcast(&st->changed);
  pthread_mutex_unlock(&st->lock);
  free(response);
}

ssize_t mcp_http_stream_read(struct mcp_http_stream *st, char *buf, size_t max, unsigned wait_ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += wait_ms / 1000;
  until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&st->lock);
  int rc = 0;
  while (st->sent == st->pending.len && !st->done && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&st->changed, &st->lock, &until);
  ssize_t n;
  if (st->sent < st->pending.len) {
    size_t left = st->pending.len - st->sent;
    n = (ssize_t)(left < max ? left : max);
    memcpy(buf, st->pending.data + st->sent, (size_t)n);
    st->sent += (size_t)n;
    if (st->sent == st->pending.len) { /* all read: the room is used again */
      st->sent = st->pending.len = 0;
    } else if (st->sent >= COMPACT_AFTER) { /* a reader that never quite catches up */
      memmove(st->pending.data, st->pending.data + st->sent, st->pending.len - st->sent);
      st->pending.len -= st->sent;
      st->sent = 0;
    }
  } else if (st->done) {
    n = -1;
  } else {
    n = sizeof(KEEP_ALIVE) - 1 <= max ? (ssize_t)(sizeof(KEEP_ALIVE) - 1) : 0;
    memcpy(buf, KEEP_ALIVE, (size_t)n);
  }
  pthread_mutex_unlock(&st->lock);
  return n;
}

void mcp_http_stream_free(struct mcp_http_stream *st) {
  if (st == NULL)
    return;
  sbx_buf_free(&st->pending);
  pthread_mutex_destroy(&st->lock);
  pthread_cond_destroy(&st->changed);
  free(st->message);
  free(st);
}
