/* calls.c: the tool calls in progress, for what a transport that keeps a
 * connection (sandbox-mcp's stdio) offers beyond a request and its answer:
 * progress notifications while a run runs (when the request carries
 * params._meta.progressToken) and notifications/cancelled, which cancels
 * the call's run (CancelRun) and drops its answer, as the MCP specification
 * asks. A server without a notifier (the stateless /mcp front) has neither:
 * its calls are never registered and a cancellation finds nothing.
 *
 * A cancellation is taken on the transport's reading thread (the worker
 * threads may all be busy with the calls it cancels) and sends CancelRun
 * from a short-lived thread of its own, so that reading goes on. The run's
 * handle stays valid while a cancel uses it: the call waits for its
 * cancellers before it frees the handle. What must never happen: a
 * cancellation reaching a call of another request id, an answer sent for a
 * cancelled call or a progress notification after its cancellation was
 * read, or a handle freed under a cancel. */
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

void mcp_call_begin(mcp_server *s, struct mcp_call *c, const json_t *id, const json_t *params) {
  memset(c, 0, sizeof(*c));
  if (s->notify == NULL || id == NULL)
    return;
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
  return s->notify != NULL && c != NULL && c->registered;
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

/* The call of request id (lock held), or NULL. */
static struct mcp_call *find_call(mcp_server *s, const json_t *id) {
  for (struct mcp_call *c = s->calls; c != NULL; c = c->next)
    if (json_equal(c->id, (json_t *)id))
      return c;
  return NULL;
}

bool mcp_take_cancel(mcp_server *s, const char *text, size_t len) {
  static const char needle[] = "notifications/cancelled";
  if (s->notify == NULL || memmem(text, len, needle, sizeof(needle) - 1) == NULL)
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
  struct mcp_call *c = find_call(s, id);
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
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, cancel_thread, j) != 0)
    cancel_thread(j); /* no thread: cancel here, reading waits for it */
  pthread_attr_destroy(&attr);
  return true;
}

void mcp_call_progress(mcp_server *s, struct mcp_call *c, int stream, const uint8_t *data,
                       size_t len) {
  if (c->progress_token == NULL || s->notify == NULL || len == 0)
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
    s->notify(s->notify_arg, line);
  pthread_mutex_unlock(&s->calls_lock);
  free(line);
  json_decref(msg);
}
