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

sbx_code service_decode_request(const uint8_t *data, size_t len, struct sbx_bounded_alloc *alloc,
                                struct decoded_request *out, char *msg, size_t msglen) {
  const ProtobufCServiceDescriptor *desc = &sandbox__v1__sandbox__descriptor;
  memset(out, 0, sizeof(*out));
  msg[0] = '\0';

  struct sbx_bounded_alloc env_alloc;
  sbx_bounded_alloc_init(&env_alloc, decode_budget(len));
  Sandbox__V1__RequestEnvelope *env =
      sandbox__v1__request_envelope__unpack(&env_alloc.base, len, data);
  if (env == NULL) {
    snprintf(msg, msglen, "%s",
             env_alloc.exhausted ? "request needs more memory to decode than allowed"
                                 : "request is not a valid sandbox.v1.RequestEnvelope");
    return SBX_INVALID_ARGUMENT;
  }
  snprintf(out->request_id, sizeof(out->request_id), "%s", env->request_id);
  out->deadline_unix_ms = env->deadline_unix_ms;

  sbx_code status = SBX_OK;
  int index = sbx_method_index(env->method);
  const char *nul_field = NULL;
  if (env->method[0] == '\0') {
    /* An empty message decodes as an envelope with nothing set. */
    snprintf(msg, msglen, "the request envelope has no method (an empty or truncated message?)");
    status = SBX_INVALID_ARGUMENT;
  } else if (index < 0 || (unsigned)index >= desc->n_methods) {
    char name[128];
    text_printable(env->method, strlen(env->method), name, sizeof(name), false);
    snprintf(msg, msglen, "unknown method \"%s\"", name);
    status = SBX_UNIMPLEMENTED;
  } else if (wire_find_nul_string(desc->methods[index].input, env->payload.data,
                                  env->payload.len, &nul_field) == 1) {
    snprintf(msg, msglen, "%s: must not contain NUL bytes", nul_field);
    status = SBX_INVALID_ARGUMENT;
  } else {
    const ProtobufCMethodDescriptor *method = &desc->methods[index];
    sbx_bounded_alloc_init(alloc, decode_budget(env->payload.len));
    out->input =
        protobuf_c_message_unpack(method->input, &alloc->base, env->payload.len, env->payload.data);
    if (out->input == NULL) {
      if (alloc->exhausted)
        snprintf(msg, msglen, "request needs more memory to decode than allowed");
      else
        snprintf(msg, msglen, "payload is not a valid %s", method->input->name);
      status = SBX_INVALID_ARGUMENT;
    } else {
      out->method_index = (unsigned)index;
      out->method = method;
    }
  }
  sandbox__v1__request_envelope__free_unpacked(env, &env_alloc.base);
  return status;
}
