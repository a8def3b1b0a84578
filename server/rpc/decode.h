/* decode.h: one request's bytes, as they came off the network, to a
 * decoded request message: the envelope (bounded allocator), the method
 * checked against the generated service descriptor, NUL bytes in string
 * fields refused, the method's request decoded (bounded allocator). Pure:
 * no I/O, no server state, so the fuzzer (tests/fuzz) drives exactly the
 * code the service runs. Never trusts a byte of its input. */
#ifndef SBX_DECODE_H
#define SBX_DECODE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "bounded_alloc.h"
#include "error.h"
#include "tenants.h"

/* What the envelope says of its caller (tenants.h), copied out of it: the
 * API key only as its SHA-256 digest. */
#define DECODE_FRONT_IDENTITIES_MAX 8
struct decoded_caller {
  bool has_key;
  bool key_too_long; /* over TENANT_KEY_MAX bytes: refused UNAUTHENTICATED */
  uint8_t key_digest[TENANT_DIGEST_BYTES];
  bool front; /* front_caller was set */
  bool front_loopback;
  size_t n_front_identities;
  char front_identities[DECODE_FRONT_IDENTITIES_MAX][TENANT_IDENTITY_MAX + 1];
};

struct decoded_request {
  char request_id[128];                    /* from the envelope, "" when it did not decode */
  uint64_t deadline_unix_ms;               /* from the envelope, 0 = none */
  unsigned method_index;                   /* checked against the descriptor's method count */
  const ProtobufCMethodDescriptor *method; /* set once the method is known, also when its
                                              payload then fails to decode; else NULL */
  ProtobufCMessage *input;                 /* the method's request, allocated from alloc */
  struct decoded_caller caller;            /* filled whenever the envelope decoded */
};

/* Budget for decoding a message of wire_len bytes: protobuf-c allocates a
 * struct per embedded message and repeated element. */
size_t decode_budget(size_t wire_len);

/* Decodes data[0..len). Returns 0 with out->input allocated from alloc
 * (free it with protobuf_c_message_free_unpacked(out->input, &alloc->base)),
 * or -1 with err INVALID_ARGUMENT/UNIMPLEMENTED (a printable message) and
 * nothing left allocated. out->request_id, out->deadline_unix_ms and
 * out->caller are filled whenever the envelope decoded, so errors can echo
 * the id. A front_caller with more than DECODE_FRONT_IDENTITIES_MAX
 * identities, or one longer than TENANT_IDENTITY_MAX, is INVALID_ARGUMENT. */
int decode_request(const uint8_t *data, size_t len, struct sbx_bounded_alloc *alloc,
                   struct decoded_request *out, struct sbx_error *err);

#endif
