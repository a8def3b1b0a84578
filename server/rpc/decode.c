/* decode.c: see decode.h. */
#include "decode.h"

#include <stdio.h>
#include <string.h>

#include "envelope.h"
#include "text.h"
#include "wire_check.h"

size_t decode_budget(size_t wire_len) {
  return 8 * wire_len + (256u << 10);
}

/* The method's request, from the envelope's payload: NUL bytes in string
 * fields refused, then decoded with the bounded allocator. */
static int decode_payload(const Sandbox__V1__RequestEnvelope *env,
                          const ProtobufCMethodDescriptor *method, struct sbx_bounded_alloc *alloc,
                          struct decoded_request *out, struct sbx_error *err) {
  const char *nul_field = NULL;
  if (wire_find_nul_string(method->input, env->payload.data, env->payload.len, &nul_field) == 1)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: must not contain NUL bytes", nul_field);
  sbx_bounded_alloc_init(alloc, decode_budget(env->payload.len));
  out->input =
      protobuf_c_message_unpack(method->input, &alloc->base, env->payload.len, env->payload.data);
  if (out->input != NULL)
    return 0;
  if (alloc->exhausted)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "request needs more memory to decode than allowed");
  return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "payload is not a valid %s",
                       method->input->name);
}

/* The caller's proof, copied out of the envelope before it is freed. */
static int decode_caller(const Sandbox__V1__RequestEnvelope *env, struct decoded_caller *out,
                         struct sbx_error *err) {
  size_t klen = strlen(env->credential);
  if (klen > TENANT_KEY_MAX) {
    out->key_too_long = true;
  } else if (klen > 0) {
    out->has_key = true;
    tenants_key_digest(env->credential, klen, out->key_digest);
  }
  const Sandbox__V1__FrontCaller *f = env->front_caller;
  if (f == NULL)
    return 0;
  out->front = true;
  out->front_loopback = f->loopback;
  if (f->n_cert_identities > DECODE_FRONT_IDENTITIES_MAX)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "front_caller: at most %d certificate identities",
                         DECODE_FRONT_IDENTITIES_MAX);
  for (size_t i = 0; i < f->n_cert_identities; i++) {
    if (strlen(f->cert_identities[i]) > TENANT_IDENTITY_MAX)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "front_caller: a certificate identity is longer than %d bytes",
                           TENANT_IDENTITY_MAX);
    snprintf(out->front_identities[i], sizeof out->front_identities[i], "%s",
             f->cert_identities[i]);
  }
  out->n_front_identities = f->n_cert_identities;
  return 0;
}

int decode_request(const uint8_t *data, size_t len, struct sbx_bounded_alloc *alloc,
                   struct decoded_request *out, struct sbx_error *err) {
  const ProtobufCServiceDescriptor *desc = &sandbox__v1__sandbox__descriptor;
  memset(out, 0, sizeof(*out));

  struct sbx_bounded_alloc env_alloc;
  sbx_bounded_alloc_init(&env_alloc, decode_budget(len));
  Sandbox__V1__RequestEnvelope *env =
      sandbox__v1__request_envelope__unpack(&env_alloc.base, len, data);
  if (env == NULL) {
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s",
                         env_alloc.exhausted ? "request needs more memory to decode than allowed"
                                             : "request is not a valid sandbox.v1.RequestEnvelope");
  }
  snprintf(out->request_id, sizeof(out->request_id), "%s", env->request_id);
  out->deadline_unix_ms = env->deadline_unix_ms;

  int rc;
  int index = sbx_method_index(env->method);
  if (env->method[0] == '\0') {
    /* An empty message decodes as an envelope with nothing set. */
    rc = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "the request envelope has no method (an empty or truncated message?)");
  } else if (index < 0 || (unsigned)index >= desc->n_methods) {
    char name[128];
    text_printable(env->method, strlen(env->method), name, sizeof(name), false);
    rc = sbx_error_set(err, SBX_UNIMPLEMENTED, 0, "unknown method \"%s\"", name);
  } else {
    /* Known from here on, also when the payload does not decode. */
    out->method_index = (unsigned)index;
    out->method = &desc->methods[index];
    rc = decode_payload(env, out->method, alloc, out, err);
    if (rc == 0 && decode_caller(env, &out->caller, err) < 0) {
      protobuf_c_message_free_unpacked(out->input, &alloc->base);
      out->input = NULL;
      rc = -1;
    }
  }
  sandbox__v1__request_envelope__free_unpacked(env, &env_alloc.base);
  return rc;
}
