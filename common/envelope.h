/* envelope.h: gRPC-style framing of sandbox.v1 calls over nng REQ/REP.
 *
 * A request is a RequestEnvelope naming the method by its full name
 * ("/sandbox.v1.Sandbox/RunCode") and carrying the packed request message; a
 * reply is a ReplyEnvelope with a status, a message and the packed response.
 * Messages are built with nng_msg_alloc and packed in place: never with
 * nng_msg_insert, which corrupts the heap for some sizes in nng < 1.9. */
#ifndef SBX_ENVELOPE_H
#define SBX_ENVELOPE_H

#include <nng/nng.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox.pb-c.h"
#include "status.h"

#define SBX_SERVICE_FULL_NAME "sandbox.v1.Sandbox"
#define SBX_METHOD_RUN_CODE "/sandbox.v1.Sandbox/RunCode"
#define SBX_METHOD_HEALTH "/sandbox.v1.Sandbox/Health"
#define SBX_METHOD_GET_INFO "/sandbox.v1.Sandbox/GetInfo"
#define SBX_METHOD_CLOSE_SESSION "/sandbox.v1.Sandbox/CloseSession"
#define SBX_METHOD_LIST_FILES "/sandbox.v1.Sandbox/ListFiles"
#define SBX_METHOD_READ_FILE "/sandbox.v1.Sandbox/ReadFile"

/* Index of full_name ("/sandbox.v1.Sandbox/<Method>") in the generated
 * service descriptor, checked against its method count; -1 when it is not a
 * method of this service. */
int sbx_method_index(const char *full_name);
/* The method's short name ("RunCode") by that index; "unknown" for -1 or
 * an index out of range. */
const char *sbx_method_name(int index);

/* Who a request says it is (docs/TENANTS.md). credential: an API key (NULL
 * or "": none). front: set only by sandboxd's own HTTP fronts, on the
 * server's in-process listener (the server refuses it from anywhere else):
 * the client certificate identities they verified and whether their HTTP
 * caller is on loopback. */
struct sbx_caller {
  const char *credential;
  bool front;
  const char *const *front_cert_identities;
  size_t n_front_cert_identities;
  bool front_loopback;
};

/* Packs payload (NULL = empty) into a new nng message holding an envelope;
 * caller may be NULL (no credential). Returns 0 or an nng error number. */
int sbx_request_msg_new(const char *full_method, const char *request_id, uint64_t deadline_unix_ms,
                        const struct sbx_caller *caller, const ProtobufCMessage *payload,
                        nng_msg **out);
int sbx_reply_msg_new(sbx_code status, const char *message, const char *request_id,
                      const ProtobufCMessage *payload, nng_msg **out);

#endif
