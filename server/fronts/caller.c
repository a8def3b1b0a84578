/* caller.c: see caller.h. The Authorization header is read here and only
 * here: "Bearer" (any case), spaces, then a token of 1..TENANT_KEY_MAX
 * printable ASCII bytes; anything else is refused at once, since a client
 * that sends a credential the server cannot read should hear so rather
 * than fall through to what its address alone would give it. */
#include "caller.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "text.h"

#define CALLER_LOG_PER_SECOND 10

/* RFC 6750, 3: a request without credentials gets the bare challenge, one
 * whose credentials are not good error="invalid_token", one that cannot be
 * read error="invalid_request". */
#define CHALLENGE_NONE "Bearer realm=\"sandboxd\""
#define CHALLENGE_INVALID_TOKEN "Bearer realm=\"sandboxd\", error=\"invalid_token\""
#define CHALLENGE_INVALID_REQUEST "Bearer realm=\"sandboxd\", error=\"invalid_request\""

_Static_assert(HTTP_TLS_IDENTITY_MAX == TENANT_IDENTITY_MAX,
               "a certificate identity the listener gives fits the registry's");

static void log_refusal(struct fronts *f, const struct http_request *req, const char *reason) {
  uint64_t suppressed = 0;
  if (!log_limit_take(&f->auth_log, CALLER_LOG_PER_SECOND, &suppressed))
    return;
  char path[80]; /* a route's path, but the client's bytes: made printable */
  text_printable(req->path, strlen(req->path), path, sizeof(path), false);
  log_line("auth_failed", "reason=%s front=http path=\"%s\" loopback=%s lines_suppressed=%llu",
           reason, path, http_request_loopback(req) ? "true" : "false",
           (unsigned long long)suppressed);
}

/* The key of an Authorization header into fc->key; -1 when the header is
 * not "Bearer <token>" with a token the server can take. */
static int bearer_token(const char *value, struct front_caller *fc) {
  static const char scheme[] = "Bearer";
  size_t n = sizeof(scheme) - 1;
  if (strncasecmp(value, scheme, n) != 0 || value[n] != ' ')
    return -1;
  const char *token = value + n + strspn(value + n, " ");
  size_t len = strlen(token);
  if (len == 0 || len > TENANT_KEY_MAX)
    return -1;
  if (!text_graphic_ascii(token))
    return -1;
  memcpy(fc->key, token, len + 1);
  fc->caller.api_key = fc->key;
  return 0;
}

int front_caller_establish(struct fronts *f, const struct http_request *req,
                           struct front_caller *fc, struct front_refusal *r) {
  memset(&fc->caller, 0, sizeof(fc->caller));
  fc->tenant[0] = '\0';
  fc->active = f->tenants != NULL && f->tenants->enabled;
  if (!fc->active)
    return 0;
  *r = (struct front_refusal){.status = 401, .challenge = CHALLENGE_INVALID_REQUEST};
  const char *auth = http_request_header(req, "Authorization");
  if (auth != NULL && bearer_token(auth, fc) < 0) {
    atomic_fetch_add(&f->tenants->auth_failures[TENANT_AUTH_UNKNOWN_KEY], 1);
    log_refusal(f, req, "malformed_authorization");
    snprintf(r->message, sizeof(r->message),
             "the Authorization header is not \"Bearer <API key>\" (a key of 1 to %d printable "
             "ASCII characters)",
             TENANT_KEY_MAX);
    return -1;
  }
  size_t n = http_request_client_identities(req, fc->ids, FRONT_CALLER_IDENTITIES_MAX);
  for (size_t i = 0; i < n; i++)
    fc->id_ptrs[i] = fc->ids[i];
  fc->caller.cert_identities = n > 0 ? fc->id_ptrs : NULL;
  fc->caller.n_cert_identities = n;
  fc->caller.loopback = http_request_loopback(req);
  struct tenant_proof proof = {
      .has_key = fc->caller.api_key != NULL,
      .cert_identities = fc->caller.cert_identities,
      .n_cert_identities = n,
      .loopback = fc->caller.loopback,
  };
  if (proof.has_key)
    tenants_key_digest(fc->key, strlen(fc->key), proof.key_digest);
  enum tenant_auth_failure why;
  struct sbx_error err = {0};
  const struct tenant *tn = tenants_authenticate(f->tenants, &proof, &why, &err);
  if (tn != NULL) {
    snprintf(fc->tenant, sizeof(fc->tenant), "%s", tn->name);
    return 0;
  }
  log_refusal(f, req, tenant_auth_failure_name(why));
  r->challenge = why == TENANT_AUTH_NO_CREDENTIAL ? CHALLENGE_NONE : CHALLENGE_INVALID_TOKEN;
  snprintf(r->message, sizeof(r->message), "%s", err.msg);
  return -1;
}

void front_caller_copy(struct front_caller *dst, const struct front_caller *src) {
  *dst = *src;
  if (src->caller.api_key != NULL)
    dst->caller.api_key = dst->key;
  for (size_t i = 0; i < src->caller.n_cert_identities; i++)
    dst->id_ptrs[i] = dst->ids[i];
  if (src->caller.cert_identities != NULL)
    dst->caller.cert_identities = dst->id_ptrs;
}

void front_caller_enter(const struct front_caller *fc) {
  sbxc_thread_caller_set(fc->active ? &fc->caller : NULL);
}

void front_caller_leave(void) {
  sbxc_thread_caller_set(NULL);
}

int front_refusal_header(struct http_response *resp, const struct front_refusal *r) {
  return http_response_header(resp, "WWW-Authenticate", r->challenge);
}

void front_refusal_unauthenticated(struct front_refusal *r, const char *message) {
  *r = (struct front_refusal){.status = 401, .challenge = CHALLENGE_INVALID_TOKEN};
  snprintf(r->message, sizeof(r->message), "%s", message);
}
