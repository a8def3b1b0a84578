/* install.h: building a requirements environment with pip, inside the
 * sandbox (installing a package runs its code), and what the server learns
 * about the interpreter at start to key environments by. The installer owns
 * the store of environments and the egress proxy, pip's only way out. */
#ifndef SBX_INSTALL_H
#define SBX_INSTALL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "egress.h"
#include "envstore.h"
#include "error.h"
#include "requirements.h"
#include "sandbox/sandbox.h"
#include "settings.h"
#include "stats.h"

/* The interpreter runs use and pip builds for: Debian's, outside and inside. */
#define INSTALL_PYTHON "/usr/bin/python3"

struct install_info {
  char python_version[32]; /* "3.11.2", whatever the package sources; "" unknown */
  bool available;
  char why_unavailable[256];
  /* The interpreter's own /usr/local site directory, on sys.path: every
   * environment is mounted over it. */
  char site_dir[PATH_MAX];
  /* What, besides the requirements, decides what pip installs: interpreter,
   * platform, pip, the package source. Hashed into every key. */
  char key_context[1024];
};

/* What a build needs, and nothing of the transport or the runs. */
struct installer {
  const struct server_settings *settings;
  struct sandbox_engine *engine;
  int workspace_root_fd; /* builds mount their tmpfs there: build-<slot> */
  const char *workspace_root;
  struct install_info info;
  struct envstore store;             /* open when info.available */
  struct egress egress;              /* running when an index is in force */
  struct stats_histogram build_time; /* each build's duration, failed ones too */
};

/* At start, before any thread: asks /usr/bin/python3 (unsandboxed: the host's
 * own interpreter, no input from requests) for its version (always: GetInfo
 * reports it), platform, pip and site directory; fingerprints the
 * wheelhouse. Never fails the start:
 * without pip or a package source, info->available is false and says why. */
void install_probe(const struct server_settings *s, struct install_info *info);

/* At start, before any thread, with settings, engine and the workspace root
 * set: probes, opens the store and starts the egress proxy (when an index
 * is in force, with egress_cfg). Without pip or a package source the server
 * still runs code: info.available is false, logged, and 0 is returned.
 * -1 with err when the store or the proxy cannot start; installer_stop
 * undoes a partial start too. */
int installer_start(struct installer *in, const struct egress_config *egress_cfg, unsigned slots,
                    struct sbx_error *err);
void installer_stop(struct installer *in);

/* Runs pip for set in the slot's sandbox, on a fresh tmpfs, and commits the
 * result to the store as env (held by the caller afterwards). On failure
 * the env is failed for the waiters and err holds what to answer:
 * FAILED_PRECONDITION with a "could not install" line and pip's output
 * tail, or INTERNAL. Returns 0 or -1. */
int install_build(struct installer *in, unsigned slot, const struct requirement_set *set,
                  struct envstore_env *env, const char *material, struct sbx_error *err);

/* The index in force for GetInfo and logs: "" when offline, credentials in
 * the URL replaced by "***". */
void install_describe_index(const struct server_settings *s, char *out, size_t len);

/* The one-line hint for a failed install, from pip's output. */
void install_failure_hint(const char *output, const struct server_settings *s, char *hint,
                          size_t len);

#endif
