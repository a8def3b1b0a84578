/* stream.c: streaming and cancel (docs/STREAMING.md, sandbox_client.h):
 * StartRun, WatchRun, CancelRun and the watch loop. A run handle holds the
 * endpoint its StartRun was answered by; every later call of the run is
 * pinned there (calls.h) and never goes through the fleet's choice: the
 * run table is per server. What this file must never do: send a WatchRun or
 * CancelRun anywhere else, or let a watch's reply timeout be shorter than
 * its wait_ms. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "client_internal.h"
#include "fleet.h"
#include "sandbox.pb-c.h"
#include "sandbox_client.h"

#define SBXC_METHOD_START_RUN "/sandbox.v1.Sandbox/StartRun"
#define SBXC_METHOD_WATCH_RUN "/sandbox.v1.Sandbox/WatchRun"
#define SBXC_METHOD_CANCEL_RUN "/sandbox.v1.Sandbox/CancelRun"

/* StartRun is answered once the run is queued, never after the run. */
#define SBXC_START_REPLY_MS 30000
/* A WatchRun's reply may take its whole wait_ms; past it, this much for
 * the transport and a busy server. */
#define SBXC_WATCH_MARGIN_MS 5000
/* The server answers a CancelRun once the run has ended, waiting up to
 * 10 s for that (RUNS_CANCEL_WAIT_MS); then this margin. */
#define SBXC_CANCEL_REPLY_MS 15000
/* sbxc_follow_run's wait when given 0. */
#define SBXC_FOLLOW_WAIT_MS 10000

struct sbxc_run {
  sbxc_client *client;
  struct sbxc_endpoint *ep; /* held until sbxc_run_free */
  unsigned attempts;        /* of its StartRun; 0 when attached */
  char id[];
};

/* A handle of run_id on ep, which the caller holds and hands over. */
static sbxc_run *run_new(sbxc_client *c, struct sbxc_endpoint *ep, const char *run_id,
                         unsigned attempts) {
  size_t len = strlen(run_id);
  sbxc_run *run = malloc(sizeof(*run) + len + 1);
  if (run == NULL)
    return NULL;
  run->client = c;
  run->ep = ep;
  run->attempts = attempts;
  memcpy(run->id, run_id, len + 1);
  return run;
}

const char *sbxc_run_id(const sbxc_run *run) {
  return run->id;
}

const char *sbxc_run_endpoint(const sbxc_run *run) {
  return sbxc_endpoint_key(run->ep);
}

void sbxc_run_free(sbxc_run *run) {
  if (run == NULL)
    return;
  sbxc_fleet_unhold(run->client->fleet, run->ep);
  free(run);
}

int sbxc_run_attach(sbxc_client *c, const char *run_id, const char *endpoint, sbxc_run **run,
                    char *err, size_t errlen) {
  struct sbxc_endpoint *ep;
  *run = NULL;
  if (sbxc_fleet_hold_key(c->fleet, endpoint, &ep, err, errlen) < 0)
    return -1;
  if ((*run = run_new(c, ep, run_id, 0)) == NULL) {
    sbxc_fleet_unhold(c->fleet, ep);
    return sbxc_fail(err, errlen, "out of memory");
  }
  return 0;
}

/* The OK answer of a StartRun: the handle, which takes the held endpoint. */
static int started(sbxc_client *c, struct call *call, struct result_storage *st,
                   struct sbxc_result *out, sbxc_run **run) {
  Sandbox__V1__StartRunResponse *resp = sandbox__v1__start_run_response__unpack(
      NULL, st->reply->payload.len, st->reply->payload.data);
  out->status = SBXC_INTERNAL;
  if (resp == NULL || resp->run_id[0] == '\0' || call->held == NULL) {
    snprintf(st->message, sizeof(st->message),
             "the StartRun reply from %s carries no run id; the run may have started",
             call->endpoint);
  } else if ((*run = run_new(c, call->held, resp->run_id, call->attempts)) == NULL) {
    snprintf(st->message, sizeof(st->message), "out of memory; the run %s has started on %s",
             resp->run_id, call->endpoint);
  } else {
    call->held = NULL; /* the handle's now */
    st->text = strdup(resp->run_id);
    out->run_id = st->text != NULL ? st->text : "";
    out->status = SBXC_OK;
  }
  if (resp != NULL)
    sandbox__v1__start_run_response__free_unpacked(resp, NULL);
  return out->status == SBXC_OK ? 0 : -1;
}

int sbxc_start_run(sbxc_client *c, const sbxc_request *req, sbxc_run **run,
                   struct sbxc_result *result) {
  struct sbxc_result local;
  struct sbxc_result *out = result != NULL ? result : &local;
  *run = NULL;
  struct result_storage *st = sbxc_result_init(out);
  if (st == NULL)
    return -1;
  struct call call = {.method = SBXC_METHOD_START_RUN,
                      .payload = &req->msg.base,
                      .reply_ms = SBXC_START_REPLY_MS,
                      .session_id = req->msg.session_id,
                      .keep_endpoint = true,
                      .code = SBXC_INTERNAL,
                      .err = st->message,
                      .errlen = sizeof(st->message)};
  st->reply = sbxc_call_method(c, &call);
  out->attempts = call.attempts;
  snprintf(st->endpoint, sizeof(st->endpoint), "%s", call.endpoint);
  int rv = -1;
  if (st->reply == NULL) {
    out->status = call.code;
  } else if (st->reply->status != SANDBOX__V1__CODE__OK) {
    out->status = st->reply->status;
    out->message = st->reply->message;
  } else {
    rv = started(c, &call, st, out, run);
  }
  if (call.held != NULL)
    sbxc_fleet_unhold(c->fleet, call.held);
  if (result == NULL)
    sbxc_result_free(&local);
  return rv;
}

/* What a struct sbxc_watch points into. */
struct watch_storage {
  Sandbox__V1__ReplyEnvelope *reply;
  Sandbox__V1__WatchRunResponse *resp;
  char message[512];
};

/* The outcome of a complete answer from endpoint into out, as
 * sbxc_run_code fills it; the RunCodeResponse moves from resp to out's
 * storage. */
static void outcome(Sandbox__V1__WatchRunResponse *resp, const char *endpoint, unsigned attempts,
                    struct sbxc_result *out) {
  struct result_storage *st = sbxc_result_init(out);
  if (st == NULL)
    return;
  out->attempts = attempts;
  snprintf(st->endpoint, sizeof(st->endpoint), "%s", endpoint);
  if (resp->status != SANDBOX__V1__CODE__OK) {
    out->status = resp->status;
    st->text = strdup(resp->message);
    if (st->text != NULL)
      out->message = st->text;
    else
      snprintf(st->message, sizeof(st->message), "out of memory");
    return;
  }
  if (resp->result == NULL) {
    out->status = SBXC_INTERNAL;
    snprintf(st->message, sizeof(st->message),
             "the complete WatchRun reply from %s carries no result", st->endpoint);
    return;
  }
  st->resp = resp->result;
  resp->result = NULL; /* a submessage is an allocation of its own */
  sbxc_result_fill(st, out);
}

/* The reply envelope in ws (its status, else its WatchRunResponse) into
 * out. Every byte of it came from the network: a malformed payload is an
 * error, never a crash (tests/fuzz/fuzz_reply.c). */
static int watch_answer(struct watch_storage *ws, const char *endpoint, unsigned attempts,
                        struct sbxc_watch *out) {
  if (ws->reply->status != SANDBOX__V1__CODE__OK) {
    out->status = ws->reply->status;
    out->message = ws->reply->message;
    return -1;
  }
  ws->resp = sandbox__v1__watch_run_response__unpack(NULL, ws->reply->payload.len,
                                                     ws->reply->payload.data);
  if (ws->resp == NULL) {
    out->status = SBXC_INTERNAL;
    snprintf(ws->message, sizeof(ws->message), "the reply from %s is not a valid WatchRunResponse",
             endpoint);
    return -1;
  }
  Sandbox__V1__WatchRunResponse *r = ws->resp;
  SBXC_COPY_OUTPUT(out, r);
  out->state = r->state;
  out->stdout_offset = r->stdout_offset;
  out->stderr_offset = r->stderr_offset;
  out->complete = r->complete;
  if (r->complete)
    outcome(r, endpoint, attempts, &out->result);
  return 0;
}

/* Zeroes out and gives it its storage; NULL (out says why) when out of
 * memory. */
static struct watch_storage *watch_init(struct sbxc_watch *out) {
  struct watch_storage *ws = sbxc_answer_init(out, sizeof(*out), sizeof(*ws), &out->status,
                                              &out->message, &out->internal_);
  if (ws != NULL)
    out->message = ws->message;
  return ws;
}

int sbxc_watch_from_reply_bytes(const uint8_t *buf, size_t len, struct sbxc_watch *out) {
  struct watch_storage *ws = watch_init(out);
  if (ws == NULL)
    return -1;
  ws->reply = sandbox__v1__reply_envelope__unpack(NULL, len, buf);
  if (ws->reply == NULL) {
    out->status = SBXC_INTERNAL;
    return sbxc_fail(ws->message, sizeof(ws->message),
                     "the reply is not a valid sandbox.v1.ReplyEnvelope");
  }
  return watch_answer(ws, "", 0, out);
}

int sbxc_watch_run(sbxc_client *c, const sbxc_run *run, uint64_t stdout_offset,
                   uint64_t stderr_offset, uint32_t wait_ms, struct sbxc_watch *out) {
  struct watch_storage *ws = watch_init(out);
  if (ws == NULL)
    return -1;
  if (run->client != c) {
    out->status = SBXC_INVALID_ARGUMENT;
    return sbxc_fail(ws->message, sizeof(ws->message), "the run's handle is of another client");
  }
  Sandbox__V1__WatchRunRequest req = SANDBOX__V1__WATCH_RUN_REQUEST__INIT;
  req.run_id = (char *)run->id;
  req.stdout_offset = stdout_offset;
  req.stderr_offset = stderr_offset;
  req.wait_ms = wait_ms;
  struct call call = {.method = SBXC_METHOD_WATCH_RUN,
                      .payload = &req.base,
                      .reply_ms = (uint64_t)wait_ms + SBXC_WATCH_MARGIN_MS,
                      .pinned = run->ep,
                      .code = SBXC_INTERNAL,
                      .err = ws->message,
                      .errlen = sizeof(ws->message)};
  ws->reply = sbxc_call_method(c, &call);
  if (ws->reply == NULL) {
    out->status = call.code;
    return -1;
  }
  return watch_answer(ws, sbxc_endpoint_key(run->ep), run->attempts, out);
}

void sbxc_watch_free(struct sbxc_watch *w) {
  struct watch_storage *ws = w->internal_;
  sbxc_result_free(&w->result);
  if (ws != NULL) {
    if (ws->resp != NULL)
      sandbox__v1__watch_run_response__free_unpacked(ws->resp, NULL);
    if (ws->reply != NULL)
      sandbox__v1__reply_envelope__free_unpacked(ws->reply, NULL);
    free(ws);
  }
  memset(w, 0, sizeof(*w));
}

int sbxc_cancel_run(sbxc_client *c, const sbxc_run *run, int *state, int *status, char *err,
                    size_t errlen) {
  int code = SBXC_INVALID_ARGUMENT;
  Sandbox__V1__ReplyEnvelope *reply = NULL;
  if (run->client != c) {
    sbxc_fail(err, errlen, "the run's handle is of another client");
  } else {
    Sandbox__V1__CancelRunRequest req = SANDBOX__V1__CANCEL_RUN_REQUEST__INIT;
    req.run_id = (char *)run->id;
    struct call call = {.method = SBXC_METHOD_CANCEL_RUN,
                        .payload = &req.base,
                        .reply_ms = SBXC_CANCEL_REPLY_MS,
                        .pinned = run->ep,
                        .code = SBXC_INTERNAL,
                        .err = err,
                        .errlen = errlen};
    reply = sbxc_call_method(c, &call);
    code = reply != NULL ? (int)reply->status : call.code;
  }
  Sandbox__V1__CancelRunResponse *resp = NULL;
  if (reply != NULL && code != SBXC_OK) {
    sbxc_fail(err, errlen, "%s: %s", sbxc_status_name(code), reply->message);
  } else if (reply != NULL && (resp = sandbox__v1__cancel_run_response__unpack(
                                   NULL, reply->payload.len, reply->payload.data)) == NULL) {
    code = SBXC_INTERNAL;
    sbxc_fail(err, errlen, "the reply from %s is not a valid CancelRunResponse",
              sbxc_endpoint_key(run->ep));
  }
  if (resp != NULL && state != NULL)
    *state = resp->state;
  if (status != NULL)
    *status = code;
  if (resp != NULL)
    sandbox__v1__cancel_run_response__free_unpacked(resp, NULL);
  if (reply != NULL)
    sandbox__v1__reply_envelope__free_unpacked(reply, NULL);
  return code == SBXC_OK ? 0 : -1;
}

/* Hands the part of one stream's chunk past *offset to on_output. */
static void deliver(sbxc_output_fn on_output, void *user, int stream, const uint8_t *data,
                    size_t len, uint64_t start, uint64_t *offset) {
  uint64_t skip = *offset > start ? *offset - start : 0; /* already had */
  if (skip < len) {
    if (on_output != NULL)
      on_output(user, stream, data + skip, len - (size_t)skip);
    *offset = start + len;
  }
}

/* A watch that failed ends the loop: its status, the run's endpoint. */
static void watch_failed(const sbxc_run *run, const struct sbxc_watch *w,
                         struct sbxc_result *result) {
  struct result_storage *st = sbxc_result_init(result);
  if (st == NULL)
    return;
  result->status = w->status;
  result->attempts = run->attempts;
  snprintf(st->endpoint, sizeof(st->endpoint), "%s", sbxc_endpoint_key(run->ep));
  snprintf(st->message, sizeof(st->message), "watching run %s on %s: %s", run->id, st->endpoint,
           w->message);
}

int sbxc_follow_run(sbxc_client *c, const sbxc_run *run, uint32_t wait_ms, sbxc_output_fn on_output,
                    void *user, struct sbxc_result *result) {
  uint64_t out_off = 0, err_off = 0;
  unsigned lost = 0; /* replies lost in a row */
  if (wait_ms == 0)
    wait_ms = SBXC_FOLLOW_WAIT_MS;
  for (;;) {
    struct sbxc_watch w;
    if (sbxc_watch_run(c, run, out_off, err_off, wait_ms, &w) < 0) {
      /* A lost reply changed nothing on the server: watch again. */
      bool again =
          (w.status == SBXC_UNKNOWN || w.status == SBXC_DEADLINE_EXCEEDED) && lost++ < c->retries;
      if (!again)
        watch_failed(run, &w, result);
      sbxc_watch_free(&w);
      if (again)
        continue;
      return -1;
    }
    lost = 0;
    deliver(on_output, user, SBXC_STDOUT, w.stdout_data, w.stdout_len, w.stdout_offset, &out_off);
    deliver(on_output, user, SBXC_STDERR, w.stderr_data, w.stderr_len, w.stderr_offset, &err_off);
    if (w.complete) {
      *result = w.result;
      memset(&w.result, 0, sizeof(w.result));
      sbxc_watch_free(&w);
      return result->status == SBXC_OK ? 0 : -1;
    }
    sbxc_watch_free(&w);
  }
}
