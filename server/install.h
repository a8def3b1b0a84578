/* install.h: building a requirements environment with pip, inside the
 * sandbox (installing a package runs its code), and what the server learns
 * about the interpreter at start to key environments by. */
#ifndef SBX_INSTALL_H
#define SBX_INSTALL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "requirements.h"
#include "settings.h"
#include "status.h"

struct server;
struct envstore_env;

struct install_info {
  bool available;
  char why_unavailable[256];
  /* The interpreter's own /usr/local site directory, on sys.path even with
   * -I: environments are mounted over it. */
  char site_dir[PATH_MAX];
  /* What, besides the requirements, decides what pip installs: interpreter,
   * platform, pip, the package source. Hashed into every key. */
  char key_context[1024];
};

/* At start, before any thread: asks /usr/bin/python3 (unsandboxed: the host's
 * own interpreter, no input from requests) for its version, platform, pip
 * and site directory; fingerprints the wheelhouse. Never fails the start:
 * without pip or a package source, info->available is false and says why. */
void install_probe(const struct server_settings *s, struct install_info *info);

/* Runs pip for set in the slot's sandbox, on a fresh tmpfs, and commits the
 * result to the store as env (held by the caller afterwards). On failure the
 * env is failed for the waiters and msg holds what to answer:
 * FAILED_PRECONDITION with pip's output tail and a "could not install" line, or
 * INTERNAL. */
sbx_code install_build(struct server *srv, unsigned slot,
                       const struct requirement_set *set,
                       struct envstore_env *env, const char *material,
                       char *msg, size_t msglen);

/* The index in force for GetInfo and logs: "" when offline, credentials in
 * the URL replaced by "***". */
void install_describe_index(const struct server_settings *s, char *out, size_t len);

/* The one-line hint for a failed install, from pip's output. */
void install_failure_hint(const char *output, const struct server_settings *s,
                          char *hint, size_t len);

#endif
