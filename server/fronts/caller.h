/* caller.h: who an HTTP request to a front is, for the tenants
 * (docs/TENANTS.md). With --tenants, every front request establishes its
 * caller from what the connection proves: an "Authorization: Bearer KEY"
 * header, the URI subjectAltNames and CN of a verified client certificate
 * (https://), and whether the TCP peer is on loopback. The registry is
 * asked once, up front, so that a request without a valid credential is
 * 401 before anything is parsed or called (MCP's initialize and
 * tools/list call nothing); the calls the front then makes carry the same
 * caller in-process (sbxc_thread_caller_set), and the server decides again
 * on each (a key revoked meanwhile is refused there).
 *
 * Without --tenants nothing here applies: no header is read, no caller is
 * set, every request is the tenant "default" as before.
 *
 * Must never: take an identity from anything but the connection and the
 * Authorization header (X-Forwarded-*, X-Forwarded-Client-Cert and the like
 * are ignored), keep or log a key, or leave a caller set on a thread after
 * the request. */
#ifndef SBX_FRONTS_CALLER_H
#define SBX_FRONTS_CALLER_H

#include <stdbool.h>
#include <stddef.h>

#include "fronts_state.h"
#include "http.h"
#include "sandbox_client.h"
#include "tenants.h"

/* As many identities as the server takes from a front (decode.h). */
#define FRONT_CALLER_IDENTITIES_MAX 8

struct front_caller {
  bool active;                      /* --tenants: the caller is set around calls */
  char tenant[TENANT_NAME_MAX + 1]; /* whose the request is ("" without --tenants) */
  struct sbxc_caller caller;
  char key[TENANT_KEY_MAX + 1];
  char ids[FRONT_CALLER_IDENTITIES_MAX][HTTP_TLS_IDENTITY_MAX + 1];
  const char *id_ptrs[FRONT_CALLER_IDENTITIES_MAX];
};

/* Why a request was refused before anything ran: always 401, the message
 * (the server's, or the header's problem) and the WWW-Authenticate value. */
struct front_refusal {
  unsigned status;
  char message[256];
  const char *challenge;
};

/* Fills fc from req; 0, or -1 with r when the request is not let in (a
 * malformed Authorization header, or no tenant for what it proves; counted
 * and logged as event=auth_failed). Nothing to check without --tenants. */
int front_caller_establish(struct fronts *f, const struct http_request *req,
                           struct front_caller *fc, struct front_refusal *r);

/* A copy of src into dst (its pointers into itself made dst's), for a
 * thread that makes the request's calls in its place. */
void front_caller_copy(struct front_caller *dst, const struct front_caller *src);

/* Around each call of the client on the request's thread: the caller set
 * (nothing without --tenants), then cleared. */
void front_caller_enter(const struct front_caller *fc);
void front_caller_leave(void);

/* The WWW-Authenticate header of a 401 on resp; -1 when it does not fit. */
int front_refusal_header(struct http_response *resp, const struct front_refusal *r);

/* A 401 for a call the server refused UNAUTHENTICATED (message: its). */
void front_refusal_unauthenticated(struct front_refusal *r, const char *message);

#endif
