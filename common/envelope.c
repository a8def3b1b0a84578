/* envelope.c: see envelope.h. */
#include "envelope.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int sbx_method_index(const char *full_name) {
  const ProtobufCServiceDescriptor *desc = &sandbox__v1__sandbox__descriptor;
  static const char prefix[] = "/" SBX_SERVICE_FULL_NAME "/";
  if (full_name == NULL || strncmp(full_name, prefix, sizeof(prefix) - 1) != 0)
    return -1;
  const ProtobufCMethodDescriptor *m =
      protobuf_c_service_descriptor_get_method_by_name(desc, full_name + sizeof(prefix) - 1);
  if (m == NULL)
    return -1;
  ptrdiff_t index = m - desc->methods;
  if (index < 0 || (size_t)index >= desc->n_methods)
    return -1;
  return (int)index;
}

const char *sbx_method_name(int index) {
  const ProtobufCServiceDescriptor *desc = &sandbox__v1__sandbox__descriptor;
  if (index < 0 || (size_t)index >= desc->n_methods)
    return "unknown";
  return desc->methods[index].name;
}

/* Packs payload into a malloc'd buffer; *buf stays NULL for an empty one. */
static int pack_payload(const ProtobufCMessage *payload, ProtobufCBinaryData *out) {
  out->len = 0;
  out->data = NULL;
  if (payload == NULL)
    return 0;
  size_t len = protobuf_c_message_get_packed_size(payload);
  if (len == 0)
    return 0;
  out->data = malloc(len);
  if (out->data == NULL)
    return NNG_ENOMEM;
  out->len = protobuf_c_message_pack(payload, out->data);
  return 0;
}

static int pack_to_msg(const ProtobufCMessage *envelope, nng_msg **out) {
  size_t len = protobuf_c_message_get_packed_size(envelope);
  nng_msg *msg;
  int rv = nng_msg_alloc(&msg, len);
  if (rv != 0)
    return rv;
  protobuf_c_message_pack(envelope, nng_msg_body(msg));
  *out = msg;
  return 0;
}

/* env with payload packed into its payload field, into a new message. */
static int pack_envelope(ProtobufCMessage *env, ProtobufCBinaryData *slot,
                         const ProtobufCMessage *payload, nng_msg **out) {
  int rv = pack_payload(payload, slot);
  if (rv != 0)
    return rv;
  rv = pack_to_msg(env, out);
  free(slot->data);
  slot->data = NULL;
  return rv;
}

int sbx_request_msg_new(const char *full_method, const char *request_id, uint64_t deadline_unix_ms,
                        const struct sbx_caller *caller, const ProtobufCMessage *payload,
                        nng_msg **out) {
  Sandbox__V1__RequestEnvelope env = SANDBOX__V1__REQUEST_ENVELOPE__INIT;
  Sandbox__V1__FrontCaller front = SANDBOX__V1__FRONT_CALLER__INIT;
  env.method = (char *)full_method;
  env.request_id = (char *)(request_id != NULL ? request_id : "");
  env.deadline_unix_ms = deadline_unix_ms;
  if (caller != NULL && caller->credential != NULL)
    env.credential = (char *)caller->credential;
  if (caller != NULL && caller->front) {
    front.cert_identities = (char **)caller->front_cert_identities;
    front.n_cert_identities = caller->n_front_cert_identities;
    front.loopback = caller->front_loopback;
    env.front_caller = &front;
  }
  return pack_envelope(&env.base, &env.payload, payload, out);
}

int sbx_reply_msg_new(sbx_code status, const char *message, const char *request_id,
                      const ProtobufCMessage *payload, nng_msg **out) {
  Sandbox__V1__ReplyEnvelope env = SANDBOX__V1__REPLY_ENVELOPE__INIT;
  env.status = status;
  env.message = (char *)(message != NULL ? message : "");
  env.request_id = (char *)(request_id != NULL ? request_id : "");
  return pack_envelope(&env.base, &env.payload, payload, out);
}
