/* status.h: gRPC's status vocabulary as used on the wire (sandbox.v1.Code). */
#ifndef SBX_STATUS_H
#define SBX_STATUS_H

#include "killed_by.h"
#include "sandbox.pb-c.h"

typedef Sandbox__V1__Code sbx_code;

#define SBX_OK SANDBOX__V1__CODE__OK
#define SBX_CANCELLED SANDBOX__V1__CODE__CANCELLED
#define SBX_INVALID_ARGUMENT SANDBOX__V1__CODE__INVALID_ARGUMENT
#define SBX_DEADLINE_EXCEEDED SANDBOX__V1__CODE__DEADLINE_EXCEEDED
#define SBX_NOT_FOUND SANDBOX__V1__CODE__NOT_FOUND
#define SBX_ALREADY_EXISTS SANDBOX__V1__CODE__ALREADY_EXISTS
#define SBX_RESOURCE_EXHAUSTED SANDBOX__V1__CODE__RESOURCE_EXHAUSTED
#define SBX_FAILED_PRECONDITION SANDBOX__V1__CODE__FAILED_PRECONDITION
#define SBX_UNIMPLEMENTED SANDBOX__V1__CODE__UNIMPLEMENTED
#define SBX_INTERNAL SANDBOX__V1__CODE__INTERNAL
#define SBX_UNAVAILABLE SANDBOX__V1__CODE__UNAVAILABLE
#define SBX_UNAUTHENTICATED SANDBOX__V1__CODE__UNAUTHENTICATED

_Static_assert(SANDBOX__V1__KILLED_BY__KILLED_BY_CANCELLED + 1 == KILLED_BY_N,
               "killed_by.c names every sandbox.v1.KilledBy value");

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN(<n>)" style names are not
 * produced: unknown values map to "UNKNOWN". */
const char *sbx_code_name(int code);

#endif
