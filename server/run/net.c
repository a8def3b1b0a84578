/* net.c: a run's network (RunCodeRequest.allow_net, docs/EGRESS.md): its
 * door to the egress proxy opened before the engine runs it and closed
 * after, the proxy variables in its environment, and what the proxy saw in
 * the reply and its feedback. The policy itself was checked at validation
 * (rpc/validate.c); the proxy enforces it (fetch/egress.c). Must never give
 * a run a namespace other than its lease's, or keep a lease past the run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"

/* What every HTTP client in the sandbox honours (curl, urllib, requests,
 * pip, node's undici with a flag); anything that ignores them finds lo
 * empty but for the proxy. */
static const char *const proxy_env[] = {
    "HTTP_PROXY=" EGRESS_PROXY_URL, "HTTPS_PROXY=" EGRESS_PROXY_URL, "ALL_PROXY=" EGRESS_PROXY_URL,
    "http_proxy=" EGRESS_PROXY_URL, "https_proxy=" EGRESS_PROXY_URL, "all_proxy=" EGRESS_PROXY_URL,
};

/* The run reaches the proxy: its own list, or its INTERPRETER session's
 * (a later call leaves allow_net empty). */
static bool has_net(const struct run_call *call) {
  const struct session *s = call->session;
  return call->req->n_allow_net > 0 || (s != NULL && s->interpreter && s->egress_allow != NULL);
}

size_t run_net_env_count(const struct run_call *call) {
  return has_net(call) ? sizeof proxy_env / sizeof proxy_env[0] : 0;
}

int run_net_env(const struct run_call *call, struct run_scratch *sc, struct sbx_error *err) {
  for (size_t i = 0; i < run_net_env_count(call); i++)
    if ((sc->env[sc->n_env++] = strdup(proxy_env[i])) == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
  return 0;
}

/* The request's list, parsed again (validation checked it): malloc'd, or
 * NULL with err. */
static struct egress_allow *parse_allow(const Sandbox__V1__RunCodeRequest *req,
                                        struct sbx_error *err) {
  struct egress_allow *allow = calloc(1, sizeof *allow);
  if (allow == NULL) {
    sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
    return NULL;
  }
  for (size_t i = 0; i < req->n_allow_net && i < EGRESS_ALLOW_MAX; i++) {
    char why[200];
    if (egress_allow_parse(req->allow_net[i], &allow->e[allow->n], why, sizeof why) < 0) {
      free(allow);
      sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "allow_net[%zu] (\"%s\"): %s", i,
                    req->allow_net[i], why);
      return NULL;
    }
    allow->n++;
  }
  return allow;
}

/* The same entries in the same order (each in the parser's spelling). */
static bool same_allow(const struct egress_allow *a, const struct egress_allow *b) {
  if (a->n != b->n)
    return false;
  for (size_t i = 0; i < a->n; i++) {
    char x[EGRESS_ALLOW_ENTRY_MAX + 8], y[EGRESS_ALLOW_ENTRY_MAX + 8];
    egress_allow_format(&a->e[i], x, sizeof x);
    egress_allow_format(&b->e[i], y, sizeof y);
    if (strcmp(x, y) != 0)
      return false;
  }
  return true;
}

int run_net_session(const struct run_call *call, struct sbx_error *err) {
  struct session *s = call->session;
  if (call->req->n_allow_net == 0)
    return 0;
  struct egress_allow *allow = parse_allow(call->req, err);
  if (allow == NULL)
    return -1;
  if (call->session_created) { /* the session is this call's (reserved): no lock */
    s->egress_allow = allow;
    return 0;
  }
  bool same = s->egress_allow != NULL && same_allow(allow, s->egress_allow);
  free(allow);
  if (same)
    return 0;
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "allow_net: session %s's interpreter has the network of the call that "
                       "created it (%s); leave allow_net empty or repeat that list",
                       s->id, s->egress_allow != NULL ? "its allow_net" : "none");
}

int run_net_open(struct runner *r, const struct run_call *call, struct run_scratch *sc,
                 struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  if (req->n_allow_net == 0)
    return 0;
  struct egress_allow *allow = parse_allow(req, err);
  if (allow == NULL)
    return -1;
  int rc = egress_lease_open(&r->egress, allow, sc->run_id,
                             call->tenant != NULL ? call->tenant->name : "-",
                             call->tenant != NULL ? (int)call->tenant->index : -1, &sc->lease, err);
  free(allow);
  return rc;
}

void run_net_close(struct runner *r, struct run_scratch *sc) {
  if (sc->lease == NULL)
    return;
  egress_lease_close(&r->egress, sc->lease, &sc->egress);
  sc->lease = NULL;
  sc->has_egress = true;
}

void run_net_response(struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp) {
  if (!sc->has_egress)
    return;
  sandbox__v1__egress_summary__init(&sc->egress_msg);
  sc->egress_msg.connections = sc->egress.connections;
  sc->egress_msg.refused = sc->egress.refused;
  sc->egress_msg.bytes_up = sc->egress.up;
  sc->egress_msg.bytes_down = sc->egress.down;
  resp->egress = &sc->egress_msg;
}

void run_net_feedback(const struct run_scratch *sc, struct feedback *fb) {
  if (sc->zygote_as_cold)
    feedback_add(fb, "runtime python-zygote: a run with allow_net runs in a fresh interpreter "
                     "(a zygote's runs share its network namespace)");
  if (!sc->has_egress || sc->egress.refused == 0)
    return;
  if (sc->egress.refused == 1)
    feedback_add(fb, "network: %s", sc->egress.first_refusal);
  else
    feedback_add(fb, "network: %s (%u refusals in all)", sc->egress.first_refusal,
                 sc->egress.refused);
}
