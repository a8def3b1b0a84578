/* auth.c: see auth.h. */
#include "auth.h"

#include <stdio.h>
#include <string.h>

#include "envelope.h"
#include "tls_engine.h"

_Static_assert(TLS_PEER_ID_MAX == TENANT_IDENTITY_MAX, "a certificate identity fits the file's");
_Static_assert(TLS_PEER_IDS_MAX == DECODE_FRONT_IDENTITIES_MAX, "one bound for both paths");

#define AUTH_LOG_PER_SECOND 10

/* The refusal's one line (call.c writes none for a call marked logged). */
static void log_failure(struct log_limit *log, struct server_call *call, const char *reason) {
  call->logged = true;
  uint64_t suppressed = 0;
  if (!log_limit_take(log, AUTH_LOG_PER_SECOND, &suppressed))
    return;
  log_line("auth_failed", "reason=%s method=%s peer=%s lines_suppressed=%llu", reason,
           sbx_method_name(call->method), call->peer, (unsigned long long)suppressed);
}

int auth_call(struct tenants *tenants, struct log_limit *log, struct server_call *call,
              const struct decoded_caller *dc, enum conns_origin origin, struct sbx_error *err) {
  call->tenant = NULL;
  if (dc->front && origin != CONNS_INPROC) {
    log_failure(log, call, "front_caller_from_network");
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "front_caller is set only by sandboxd's own HTTP fronts, in-process");
  }
  if (dc->key_too_long && tenants->enabled) {
    atomic_fetch_add(&tenants->auth_failures[TENANT_AUTH_UNKNOWN_KEY], 1);
    log_failure(log, call, "key_too_long");
    return sbx_error_set(err, SBX_UNAUTHENTICATED, 0, "the API key is longer than %d bytes",
                         TENANT_KEY_MAX);
  }
  /* The identities: a front's verified caller (in-process only, above),
   * or the verified client certificate of this call's tls+tcp://
   * connection, read from it now (tls_engine.h); none from anything else. */
  const char *ids[DECODE_FRONT_IDENTITIES_MAX];
  size_t n_ids = 0;
  struct tls_peer peer; /* 4 KiB, not cleared: tls_engine_pipe_peer sets peer.n */
  bool verified = false;
  if (dc->front) {
    for (size_t i = 0; i < dc->n_front_identities; i++)
      ids[n_ids++] = dc->front_identities[i];
  } else if (tenants->enabled && call->pipe_id != 0) {
    nng_pipe pipe = NNG_PIPE_INITIALIZER;
    pipe.id = call->pipe_id;
    if (tls_engine_pipe_peer(pipe, &verified, &peer) && verified)
      for (unsigned i = 0; i < peer.n; i++)
        ids[n_ids++] = peer.ids[i];
  }
  struct tenant_proof proof = {
      .has_key = dc->has_key,
      .cert_identities = ids,
      .n_cert_identities = n_ids,
      .loopback = origin == CONNS_LOOPBACK || (origin == CONNS_INPROC && dc->front_loopback),
  };
  memcpy(proof.key_digest, dc->key_digest, sizeof proof.key_digest);
  enum tenant_auth_failure why;
  struct tenant *tn = tenants_authenticate(tenants, &proof, &why, err);
  if (tn == NULL) {
    log_failure(log, call, tenant_auth_failure_name(why));
    return -1;
  }
  call->tenant = tn;
  tenant_policy_read(tenants, tn, &call->policy);
  return 0;
}
