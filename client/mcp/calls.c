/* calls.c: the tool calls in progress, for what a transport offers beyond
 * a request and its answer: progress notifications while a run runs (when
 * the request carries params._meta.progressToken) and
 * notifications/cancelled, which cancels the call's run (CancelRun) and
 * drops its answer, as the MCP specification asks. Two transports have
 * them: sandbox-mcp's stdio (the server's notifier; one client, so a
 * request id names a call) and /mcp's streamed calls (http_stream.c: each
 * message's own notifier, and a scope, its caller and Mcp-Session-Id,
 * without which no cancellation reaches it). A call with neither is never
 * registered and a cancellation finds nothing.
 *
 * On stdio a cancellation is taken on the transport's reading thread (the
 * worker threads may all be busy with the calls it cancels) and sends
 * CancelRun from a short-lived thread of its own, so that reading goes on;
 * over HTTP it is a request of its own and cancels on its thread. The
 * run's handle stays valid while a cancel uses it: the call waits for its
 * cancellers before it frees the handle. What must never happen: a
 * cancellation reaching a call of another request id or another scope, an
 * answer sent for a cancelled call or a progress notification after its
 * cancellation was taken, or a handle freed under a cancel. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"

/* One progress notification's text: at most this much of a chunk. */
#define PROGRESS_TEXT_MAX 4096

void mcp_server_set_notify(mcp_server *s, void (*notify)(void *arg, const char *line), void *arg) {
  s->notify = notify;
  s->notify_arg = arg;
}

void mcp_call_begin(mcp_server *s, struct mcp_call *c, const struct mcp_message_context *ctx,
                    const json_t *id, const json_t *params) {
  memset(c, 0, sizeof(*c));
  c->notify = ctx != NULL && ctx->notify != NULL ? ctx->notify : s->notify;
  c->notify_arg = ctx != NULL && ctx->notify != NULL ? ctx->notify_arg : s->notify_arg;
  if (c->notify == NULL || id == NULL)
    return;
  /* stdio's calls: its one client's; a message's: its scope's, if any. */
  c->scope = ctx != NULL ? ctx->scope : NULL;
  c->cancellable = ctx == NULL || ctx->scope != NULL;
  const json_t *meta = json_object_get(params, "_meta");
  const json_t *token = json_object_get(meta, "progressToken");
  c->id = json_incref((json_t *)id);
  if (json_is_string(token) || json_is_integer(token))
    c->progress_token = json_incref((json_t *)token);
  pthread_mutex_lock(&s->calls_lock);
  c->next = s->calls;
  s->calls = c;
  c->registered = true;
  pthread_mutex_unlock(&s->calls_lock);
}

bool mcp_call_end(mcp_server *s, struct mcp_call *c) {
  bool cancelled = false;
  if (c->registered) {
    pthread_mutex_lock(&s->calls_lock);
    for (struct mcp_call **p = &s->calls; *p != NULL; p = &(*p)->next)
      if (*p == c) {
        *p = c->next;
        break;
      }
    cancelled = c->cancelled;
    pthread_mutex_unlock(&s->calls_lock);
  }
  json_decref(c->id);
  json_decref(c->progress_token);
  c->id = c->progress_token = NULL;
  return cancelled;
}

bool mcp_call_streams(const mcp_server *s, const struct mcp_call *c) {
  (void)s;
  return c != NULL && c->registered;
}

bool mcp_call_set_run(mcp_server *s, struct mcp_call *c, sbxc_run *run) {
  pthread_mutex_lock(&s->calls_lock);
  c->run = run;
  bool cancelled = c->cancelled;
  pthread_mutex_unlock(&s->calls_lock);
  return !cancelled;
}

void mcp_call_drop_run(mcp_server *s, struct mcp_call *c) {
  pthread_mutex_lock(&s->calls_lock);
  c->run = NULL;
  while (c->cancellers > 0)
    pthread_cond_wait(&s->calls_changed, &s->calls_lock);
  pthread_mutex_unlock(&s->calls_lock);
}

struct cancel_job {
  mcp_server *s;
  struct mcp_call *c;
  sbxc_run *run;
};

static void *cancel_thread(void *arg) {
  struct cancel_job *j = arg;
  char err[256];
  int status = 0;
  if (sbxc_cancel_run(j->s->client, j->run, NULL, &status, err, sizeof(err)) < 0)
    fprintf(stderr, "sandbox-mcp: notifications/cancelled: CancelRun of %s failed: %s\n",
            sbxc_run_id(j->run), err);
  pthread_mutex_lock(&j->s->calls_lock);
  j->c->cancellers--;
  pthread_cond_broadcast(&j->s->calls_changed);
  pthread_mutex_unlock(&j->s->calls_lock);
  free(j);
  return NULL;
}

/* Whether a cancellation of scope (NULL: stdio's) may reach c. */
static bool same_scope(const struct mcp_call *c, const char *scope) {
  if (!c->cancellable)
    return false;
  if (c->scope == NULL || scope == NULL)
    return c->scope == scope;
  return strcmp(c->scope, scope) == 0;
}

/* The call of request id and scope (lock held), or NULL. */
static struct mcp_call *find_call(mcp_server *s, const char *scope, const json_t *id) {
  for (struct mcp_call *c = s->calls; c != NULL; c = c->next)
    if (same_scope(c, scope) && json_equal(c->id, (json_t *)id))
      return c;
  return NULL;
}

/* A notifications/cancelled of scope: true when text was one. Its
 * CancelRun is sent from a thread of its own (detached) or, when wait, on
 * this one. */
static bool take_cancel(mcp_server *s, const char *scope, const char *text, size_t len, bool wait) {
  static const char needle[] = "notifications/cancelled";
  if (memmem(text, len, needle, sizeof(needle) - 1) == NULL)
    return false;
  json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
  const json_t *method = json_object_get(msg, "method");
  const json_t *params = json_object_get(msg, "params");
  const json_t *id = json_object_get(params, "requestId");
  bool is_cancel = json_object_get(msg, "id") == NULL && json_is_string(method) &&
                   strcmp(json_string_value(method), needle) == 0;
  if (!is_cancel || !(json_is_string(id) || json_is_integer(id))) {
    json_decref(msg);
    return is_cancel; /* a malformed cancellation is ignored, as the spec allows */
  }
  pthread_mutex_lock(&s->calls_lock);
  struct mcp_call *c = find_call(s, scope, id);
  struct cancel_job *j = NULL;
  if (c != NULL && !c->cancelled) {
    c->cancelled = true;
    if (c->run != NULL && (j = malloc(sizeof(*j))) != NULL) {
      *j = (struct cancel_job){s, c, c->run};
      c->cancellers++;
    }
  }
  pthread_mutex_unlock(&s->calls_lock);
  json_decref(msg);
  if (j == NULL)
    return true; /* unknown or finished (ignored), or not started yet (cancelled at its start) */
  if (wait) {
    cancel_thread(j);
    return true;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, cancel_thread, j) != 0)
    cancel_thread(j); /* no thread: cancel here, reading waits for it */
  pthread_attr_destroy(&attr);
  return true;
}

bool mcp_take_cancel(mcp_server *s, const char *text, size_t len) {
  return s->notify != NULL && take_cancel(s, NULL, text, len, false);
}

bool mcp_take_cancel_scoped(mcp_server *s, const char *scope, const char *text, size_t len) {
  return scope != NULL && take_cancel(s, scope, text, len, true);
}

void mcp_call_progress(mcp_server *s, struct mcp_call *c, int stream, const uint8_t *data,
                       size_t len) {
  if (c->progress_token == NULL || c->notify == NULL || len == 0)
    return;
  /* The chunk as text: cut at a whole character, invalid bytes replaced by
   * jansson's refusal (we send only valid UTF-8: the rest is counted). */
  size_t n = len < PROGRESS_TEXT_MAX ? len : PROGRESS_TEXT_MAX;
  n -= mcp_utf8_cut(data, n);
  c->progress += len;
  json_t *text = json_stringn((const char *)data, n);
  json_t *msg = json_pack("{s:s, s:s, s:{s:O, s:I, s:o}}", "jsonrpc", "2.0", "method",
                          "notifications/progress", "params", "progressToken", c->progress_token,
                          "progress", (json_int_t)c->progress, "message",
                          text != NULL ? text
                                       : json_sprintf("(%zu bytes of %s that are not UTF-8)", len,
                                                      stream == SBXC_STDERR ? "stderr" : "stdout"));
  char *line = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;
  /* Nothing more once the call is cancelled. The check and the write are
   * one step under the lock that a cancellation takes on the reading
   * thread, so a notification is written before the cancellation is taken
   * or not at all: never after the answer to a message read after it. */
  pthread_mutex_lock(&s->calls_lock);
  if (line != NULL && !c->cancelled)
    c->notify(c->notify_arg, line);
  pthread_mutex_unlock(&s->calls_lock);
  free(line);
  json_decref(msg);
}
