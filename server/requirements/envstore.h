/* envstore.h: the requirements store. Each distinct requirement set (in
 * context: interpreter, pip, package source) gets one environment, a
 * directory made by `pip install --target`, built once and then bound
 * read-only over the interpreter's /usr/local site directory in every run
 * that asks for the same set (docs/REQUIREMENTS.md).
 *
 *   <state>/envs/<key>/meta    key, size, the key's material (requirements)
 *   <state>/envs/<key>/site/   the environment (root-owned, read-only mount)
 *   <state>/envs/tmp-*         a build being committed: removed at start
 *   <state>/envs/trash-*       an evicted environment being removed
 *
 * A build fills a tmp- directory, writes meta, syncs the filesystem and
 * renames it to <key> (RENAME_NOREPLACE): a directory named by a key is
 * always complete, and whatever a crash leaves under another name is
 * removed at start. The table (under one mutex) coalesces concurrent
 * requests for one key into one build: the first caller builds on its own
 * worker slot, the others wait on a condition variable for the outcome. A
 * build never needs another worker, so waiting callers cannot starve it,
 * whatever the pool's size. Environments in use are never evicted; past the
 * byte cap, the least recently used idle ones are, when a build commits and
 * when a run releases one.
 *
 * Commit copies a tree the sandbox wrote (hostile): only regular files and
 * directories, opened O_NOFOLLOW relative to fds, never following a
 * symlink; the copy is owned by root with modes 0644/0755. */
#ifndef SBX_ENVSTORE_H
#define SBX_ENVSTORE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "requirements.h"
#include "error.h"
#include "status.h"

#define ENVSTORE_SITE "site"
#define ENVSTORE_META "meta"

enum envstore_state { ENVSTORE_BUILDING, ENVSTORE_READY, ENVSTORE_FAILED };

struct envstore_env {
  char key[REQUIREMENT_KEY_HEX + 1];
  enum envstore_state state;
  unsigned refs;      /* runs holding it, plus the builder and the waiters while
                         building */
  uint64_t bytes;     /* READY: disk use (4 KiB per file and directory, rounded up) */
  uint64_t last_used; /* ms since the epoch: persisted as meta's mtime */
  sbx_code failure_code;
  char *failure; /* FAILED: the message every waiter gets */
  struct envstore_env *next;
};

struct envstore {
  pthread_mutex_t mu;
  pthread_cond_t changed; /* a build finished (READY or FAILED) */
  int dir_fd;
  char dir[PATH_MAX];
  uint64_t cap_bytes;
  uint64_t total_bytes; /* READY environments */
  size_t n_ready;
  uint64_t seq; /* names of tmp- and trash- directories */
  struct envstore_env *envs;
  /* Builds in progress, and the most allowed at once (0: no limit): a build
   * holds a worker for up to --pip-timeout-ms, so new sets past the cap are
   * refused (RESOURCE_EXHAUSTED) rather than allowed to hold every worker. */
  unsigned n_building, max_building;
  atomic_uint_fast64_t builds_total, build_failures_total, evictions_total;
};

/* Opens (creating, mode 0711) dir, removes tmp-/trash- leftovers and
 * incomplete entries, loads every complete environment (recency from meta's
 * mtime) and evicts down to cap_bytes. Returns 0 or -1 with err. */
int envstore_open(struct envstore *s, const char *dir, uint64_t cap_bytes, struct sbx_error *err);
void envstore_close(struct envstore *s);

enum envstore_outcome {
  ENVSTORE_USE,   /* *env is READY and held: mount it, then envstore_release */
  ENVSTORE_BUILD, /* *env is BUILDING and yours: envstore_commit or
                     envstore_fail */
  ENVSTORE_ERROR, /* the build this call waited for failed: err */
};

/* Finds key; waits while another caller builds it. A key nobody builds
 * yet is this caller's to build, unless max_building builds are running:
 * then ENVSTORE_ERROR with RESOURCE_EXHAUSTED. */
enum envstore_outcome envstore_acquire(struct envstore *s, const char *key,
                                       struct envstore_env **env, struct sbx_error *err);

/* Copies the tree open as src_fd (not consumed) into the store as env's
 * environment with meta holding material, makes it READY (still held by the
 * caller), wakes the waiters and evicts past the cap. On failure the env is
 * failed for the waiters too and err says why; the caller holds nothing. */
int envstore_commit(struct envstore *s, struct envstore_env *env, int src_fd, const char *material,
                    struct sbx_error *err);

/* The build failed: every waiter gets why (its code and message). The
 * caller holds nothing afterwards. */
void envstore_fail(struct envstore *s, struct envstore_env *env, const struct sbx_error *why);

/* Drops a hold from ENVSTORE_USE or a committed build. */
void envstore_release(struct envstore *s, struct envstore_env *env);

/* <dir>/<key>/site, the host path to mount. */
void envstore_site_path(const struct envstore *s, const struct envstore_env *env, char *buf,
                        size_t len);

void envstore_counts(struct envstore *s, size_t *ready, uint64_t *bytes);

#endif
