/* runtime_check.h: at start, before any worker or listener, each manifest
 * runtime (docs/RUNTIMES.md) is asked for its version (its version command,
 * in the sandbox) and runs its self-test through the whole run path; it is
 * offered only when both pass, else listed unavailable with the reason
 * (GetInfo's runtime_info, the log's event=runtime_unavailable). Never
 * fails the start: a broken runtime is the operator's to mend, and the
 * others serve meanwhile. */
#ifndef SBX_RUNTIME_CHECK_H
#define SBX_RUNTIME_CHECK_H

#include "server_state.h"

void runtime_check_all(struct server *srv);

#endif
