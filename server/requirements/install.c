/* install.c: see install.h. pip runs as any run does (the slot's uid,
 * namespaces, seccomp, cgroup limits), with its own limits, a fresh tmpfs of
 * --pip-disk-bytes as its only writable directory besides /tmp, the
 * wheelhouse bound read-only, and, when an index is in force, the network
 * profile in the slot's installer namespace, whose only way out is the
 * egress proxy (egress.h): never the host's network. Its argv is built here
 * from canonical requirement strings (requirements.c) after "--": no request
 * byte reaches pip otherwise. What it wrote is hostile and is copied out by
 * envstore.c. */
#include "install.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "download.h"
#include "log.h"
#include "safefs.h"
#include "text.h"
#include "workspace.h"

#define WHEELHOUSE_TARGET "/wheelhouse"
#define URL_WHEELS "url-wheels" /* in the build workspace: wheels fetched by URL */
#define PIP_OUTPUT_BYTES (256u << 10)
#define PIP_MAX_PROCESSES 128
#define PIP_INODES (1u << 18)
#define TAIL_BYTES 2048

/* Bytes of untrusted output as printable lines: at most the last
 * TAIL_BYTES, starting at a line. */
static void tail_text(const uint8_t *data, size_t len, char *out, size_t outlen) {
  size_t start = len > TAIL_BYTES ? len - TAIL_BYTES : 0;
  if (start > 0)
    while (start < len && data[start - 1] != '\n')
      start++;
  text_printable((const char *)data + start, len - start, out, outlen, true);
  size_t n = strlen(out);
  while (n > 0 && out[n - 1] == '\n')
    out[--n] = '\0';
}

void install_failure_hint(const char *output, const struct server_settings *s, char *hint,
                          size_t len) {
  static const char *const patterns[] = {
      "No matching distribution found for ",
      "Could not find a version that satisfies the requirement "};
  char where[700], index[SETTINGS_URL_MAX];
  install_describe_index(s, index, sizeof index);
  if (index[0] != '\0' && s->wheelhouse[0] != '\0')
    snprintf(where, sizeof(where), "index %.300s, wheelhouse %.300s", index, s->wheelhouse);
  else if (index[0] != '\0')
    snprintf(where, sizeof(where), "index %.300s", index);
  else
    snprintf(where, sizeof(where), "wheelhouse %.300s", s->wheelhouse);
  for (size_t p = 0; p < sizeof(patterns) / sizeof(patterns[0]); p++) {
    const char *at = strstr(output, patterns[p]);
    if (at == NULL)
      continue;
    at += strlen(patterns[p]);
    char name[101];
    size_t n = 0;
    while (n < sizeof(name) - 1 && at[n] != '\0' && at[n] != ' ' && at[n] != '\n')
      name[n] = at[n], n++;
    name[n] = '\0';
    snprintf(hint, len,
             "could not install '%s': no matching distribution in the configured "
             "index (%s)",
             name, where);
    return;
  }
  if (strstr(output, "ResolutionImpossible") != NULL ||
      strstr(output, "conflicting dependencies") != NULL) {
    snprintf(hint, len, "could not install the requirements: they conflict with each other");
    return;
  }
  snprintf(hint, len, "could not install the requirements: pip failed (its output follows)");
}

/* The wheel of one "name @ URL" requirement, fetched through the server's
 * downloader (http(s) only, download-hosts and the public-address guard,
 * redirects checked, --pip-disk-bytes), checked against its pin, stored as
 * url-wheels/<i>/<file> in the build workspace. local gets what pip is
 * given: "name[extras] @ file:///workspace/url-wheels/<i>/<file>". */
static int fetch_url_wheel(const struct server_settings *s, int ws_fd, uid_t uid, size_t i,
                           const char *item, const char *url, char *local, size_t local_len,
                           struct sbx_error *err) {
  char fetch[REQUIREMENT_MAX + 1], file[256], pinned[65];
  if (requirement_url_parts(url, fetch, sizeof(fetch), file, sizeof(file), pinned) < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "requirements: '%s': URL too long", item);
  struct download_policy policy = download_policy_from(s, (uint64_t)s->pip_disk_bytes);
  cleanup_free uint8_t *body = NULL;
  size_t len = 0;
  if (download_fetch(&policy, fetch, &body, &len, err) < 0)
    return sbx_error_wrap(err, "requirements: could not download '%s'", item);
  if (pinned[0] != '\0') {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    char got[65] = "";
    if (EVP_Digest(body, len, digest, &dlen, EVP_sha256(), NULL) == 1 && dlen == 32)
      for (unsigned k = 0; k < dlen; k++)
        snprintf(got + 2 * k, 3, "%02x", digest[k]);
    if (strcmp(got, pinned) != 0)
      return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                           "requirements: the wheel of '%s' has SHA-256 %s, not the pinned one",
                           item, got[0] != '\0' ? got : "(not computed)");
  }
  /* One directory per requirement: two URLs may name the same file. */
  char path[300];
  snprintf(path, sizeof(path), "%s/%zu/%s", URL_WHEELS, i, file);
  if (workspace_write_file(ws_fd, path, body, len, uid, uid, err) < 0) {
    if (err->errnum == ENOSPC)
      return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                           "requirements: could not store the wheel of '%s': larger than "
                           "--pip-disk-bytes",
                           item);
    return sbx_error_wrap(err, "requirements: could not store the wheel of '%s'", item);
  }
  snprintf(local, local_len, "%.*s@ file:///workspace/%s", (int)(url - 2 - item), item, path);
  return 0;
}

/* What pip is given for each requirement: its canonical string, or for a
 * URL requirement the wheel fetched into the build workspace. */
static int pip_requirements(const struct server_settings *s, int ws_fd, uid_t uid,
                            const struct requirement_set *set, char (*local)[REQUIREMENT_MAX + 96],
                            struct sbx_error *err) {
  for (size_t i = 0; i < set->n; i++) {
    const char *url = requirement_url(set->items[i]);
    if (url == NULL)
      snprintf(local[i], sizeof(local[i]), "%s", set->items[i]);
    else if (fetch_url_wheel(s, ws_fd, uid, i, set->items[i], url, local[i], sizeof(local[i]),
                             err) < 0)
      return -1;
  }
  return 0;
}

/* host[:port] of an http:// index URL, without credentials; false for any
 * other URL. */
static bool http_index_authority(const char *url, char *out, size_t len) {
  if (strncmp(url, "http://", 7) != 0)
    return false;
  const char *a = url + 7;
  size_t n = strcspn(a, "/?#");
  const char *at = memchr(a, '@', n);
  if (at != NULL) {
    n -= (size_t)(at + 1 - a);
    a = at + 1;
  }
  snprintf(out, len, "%.*s", (int)n, a);
  return n > 0;
}

/* Where pip may install from: the wheelhouse, and the index through the
 * egress proxy, or --no-index. At most 9 arguments; trusted holds one. */
static size_t add_source_args(const struct server_settings *s, const char **argv, size_t n,
                              char *trusted, size_t len) {
  const char *index = settings_index_url(s);
  if (index[0] == '\0')
    argv[n++] = "--no-index";
  if (s->wheelhouse[0] != '\0') {
    argv[n++] = "--find-links";
    argv[n++] = WHEELHOUSE_TARGET;
  }
  if (index[0] == '\0')
    return n;
  argv[n++] = "--index-url";
  argv[n++] = index;
  argv[n++] = "--proxy";
  argv[n++] = EGRESS_PROXY_URL;
  /* pip ignores a plain-http index on any host but localhost unless told to
   * trust it; the operator named it, so it is. */
  if (http_index_authority(index, trusted, len)) {
    argv[n++] = "--trusted-host";
    argv[n++] = trusted;
  }
  return n;
}

/* The hint for a pip that did not succeed. */
static void pip_hint(const struct server_settings *s, const struct sandbox_result *r,
                     const char *tail, char *hint, size_t len) {
  switch (r->killed_by) {
  case SANDBOX_KILLED_BY_TIMEOUT:
    snprintf(hint, len,
             "could not install the requirements: pip did not finish within %" PRId64
             " ms (--pip-timeout-ms)",
             s->pip_timeout_ms);
    return;
  case SANDBOX_KILLED_BY_MEMORY:
    snprintf(hint, len,
             "could not install the requirements: pip ran out of memory "
             "(--pip-memory-bytes, --pip-disk-bytes)");
    return;
  case SANDBOX_KILLED_BY_OUTPUT_LIMIT:
    snprintf(hint, len, "could not install the requirements: pip wrote more than %u KiB of output",
             PIP_OUTPUT_BYTES >> 10);
    return;
  case SANDBOX_KILLED_BY_SIGNAL:
    snprintf(hint, len, "could not install the requirements: pip was killed by signal %d",
             r->signal);
    return;
  case SANDBOX_KILLED_BY_CANCELLED: /* an install has no cancel fd */
  case SANDBOX_KILLED_BY_NONE:
    break;
  }
  install_failure_hint(tail, s, hint, len);
  if (strstr(tail, "No space left on device") != NULL)
    snprintf(hint, len,
             "could not install the requirements: they need more than %" PRId64
             " bytes (--pip-disk-bytes)",
             s->pip_disk_bytes);
}

/* The answer to a failed pip: a hint, the egress proxy's refusals, the
 * end of pip's output. */
static int pip_failure(struct installer *in, unsigned slot, const struct sandbox_result *r,
                       struct sbx_error *err) {
  /* pip writes its errors to stderr; stdout only when stderr is empty. */
  char tail[TAIL_BYTES + 1], hint[600];
  if (r->stderr_len > 0)
    tail_text(r->stderr_data, r->stderr_len, tail, sizeof(tail));
  else
    tail_text(r->stdout_data, r->stdout_len, tail, sizeof(tail));
  pip_hint(in->settings, r, tail, hint, sizeof(hint));
  /* The proxy's own record, not pip's output: pip does not show every
   * refusal (a refused GET only at debug level), and the build's output
   * is the package's to forge. */
  char first[320], refused[400] = "";
  unsigned n_refused = egress_build_refusals(&in->egress, slot, first, sizeof first);
  if (n_refused > 0)
    snprintf(refused, sizeof refused, "; the egress proxy refused %u request%s, the first: %s",
             n_refused, n_refused == 1 ? "" : "s", first);
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "requirements: %s%s\npip's output (the end):\n%s", hint, refused, tail);
}

#define BUILD_TARGET ("/workspace/" ENVSTORE_SITE) /* where pip installs to */

/* pip's argv: the fixed options, the package source, "--", then one
 * argument per requirement. NULL-terminated, malloc'd. */
static const char **pip_argv(const struct server_settings *s, const struct requirement_set *set,
                             char (*reqs)[REQUIREMENT_MAX + 96], char *trusted, size_t len) {
  static const char *const fixed[] = {INSTALL_PYTHON,
                                      "-I",
                                      "-m",
                                      "pip",
                                      "install",
                                      "--isolated",
                                      "--no-cache-dir",
                                      "--disable-pip-version-check",
                                      "--no-input",
                                      "--no-color",
                                      "--progress-bar",
                                      "off",
                                      "--quiet",
                                      "--no-warn-script-location",
                                      "--target",
                                      BUILD_TARGET};
  const size_t n_fixed = sizeof(fixed) / sizeof(fixed[0]);
  const char **argv = calloc(n_fixed + 10 + set->n + 1, sizeof(*argv));
  if (argv == NULL)
    return NULL;
  size_t n = 0;
  for (; n < n_fixed; n++)
    argv[n] = fixed[n];
  n = add_source_args(s, argv, n, trusted, len);
  argv[n++] = "--"; /* and defensively: nothing after this is an option */
  for (size_t i = 0; i < set->n; i++)
    argv[n++] = reqs[i];
  return argv;
}

/* Runs pip in the slot's sandbox on the build workspace ws_name. With an
 * index, pip's only route is the egress proxy in its namespace (the
 * operator's --pip-proxy, if any, is the proxy's upstream, not pip's). */
static int run_pip(struct installer *in, unsigned slot, const struct requirement_set *set,
                   char (*reqs)[REQUIREMENT_MAX + 96], const char *ws_name, uint64_t *pip_ms,
                   struct sbx_error *err) {
  const struct server_settings *s = in->settings;
  bool network = settings_index_url(s)[0] != '\0';
  int netns_fd = network ? egress_netns_fd(&in->egress, slot) : -1;
  if (network && netns_fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "requirements: the egress proxy is not running");
  char trusted[SETTINGS_URL_MAX], workspace_dir[PATH_MAX + 64];
  cleanup_free const char **argv = pip_argv(s, set, reqs, trusted, sizeof trusted);
  if (argv == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements");
  snprintf(workspace_dir, sizeof(workspace_dir), "%s/%s", in->workspace_root, ws_name);
  static const char *const env[] = {"TMPDIR=/workspace/tmp", NULL};
  struct sandbox_mount wheelhouse = {.source = s->wheelhouse, .target = WHEELHOUSE_TARGET};
  struct sandbox_spec spec = {
      .argv = argv,
      .env = env,
      .workspace_dir = workspace_dir,
      .mounts = s->wheelhouse[0] != '\0' ? &wheelhouse : NULL,
      .n_mounts = s->wheelhouse[0] != '\0' ? 1 : 0,
      .network = network ? SANDBOX_NETWORK_INSTALLER : SANDBOX_NETWORK_NONE,
      .netns_fd = netns_fd,
      .limits = {.timeout_ms = (uint64_t)s->pip_timeout_ms,
                 .cpu_time_ms = (uint64_t)s->pip_timeout_ms,
                 /* The tmpfs's pages are charged to pip's cgroup too. */
                 .memory_bytes = (uint64_t)(s->pip_memory_bytes + s->pip_disk_bytes),
                 .output_bytes = PIP_OUTPUT_BYTES,
                 .max_processes = PIP_MAX_PROCESSES,
                 .file_size_bytes = (uint64_t)s->pip_disk_bytes,
                 .tmp_bytes = 64u << 20,
                 .open_files = 1024},
  };
  struct sandbox_result r = {0};
  struct sandbox_error se = {0};
  egress_build_begin(&in->egress, slot);
  if (sandbox_run(in->engine, slot, &spec, &r, &se) < 0)
    return sbx_error_from_engine(err, SBX_INTERNAL, &se,
                                 "requirements: the installer's sandbox could not be set up");
  *pip_ms = r.wall_time_us / 1000;
  int rc = r.killed_by != SANDBOX_KILLED_BY_NONE || r.exit_code != 0
               ? pip_failure(in, slot, &r, err)
               : 0;
  sandbox_result_free(&r);
  return rc;
}

/* The build tmpfs's layout: site/ (pip's --target) and tmp/, the slot's. */
static int prepare_build_dir(int ws_fd, uid_t uid, struct sbx_error *err) {
  if (mkdirat(ws_fd, ENVSTORE_SITE, 0755) < 0 || fchownat(ws_fd, ENVSTORE_SITE, uid, uid, 0) < 0 ||
      mkdirat(ws_fd, "tmp", 0700) < 0 || fchownat(ws_fd, "tmp", uid, uid, 0) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "requirements: build directory");
  return 0;
}

/* Fetches, installs and commits, on the build tmpfs open as ws_fd. On
 * failure *committed says whether the store already failed env. */
static int build_in(struct installer *in, unsigned slot, const struct requirement_set *set,
                    struct envstore_env *env, const char *material, int ws_fd, const char *ws_name,
                    uint64_t *pip_ms, struct sbx_error *err) {
  uid_t uid = (uid_t)(in->settings->uid_base + slot);
  cleanup_free char(*reqs)[REQUIREMENT_MAX + 96] = calloc(set->n > 0 ? set->n : 1, sizeof(*reqs));
  if (reqs == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements");
  if (prepare_build_dir(ws_fd, uid, err) < 0 ||
      pip_requirements(in->settings, ws_fd, uid, set, reqs, err) < 0 ||
      run_pip(in, slot, set, reqs, ws_name, pip_ms, err) < 0)
    return -1;
  /* Every process of pip's run is dead: the tree is final, and hostile. */
  cleanup_close int site_fd = safefs_open_dir(ws_fd, ENVSTORE_SITE, err);
  if (site_fd < 0)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "requirements: pip left no %s directory",
                         ENVSTORE_SITE);
  if (envstore_commit(&in->store, env, site_fd, material, err) < 0) {
    sbx_error_wrap(err, "requirements: the environment could not be stored");
    err->code = SBX_FAILED_PRECONDITION;
    return 1; /* the commit failed env for the waiters */
  }
  return 0;
}

static void log_build(struct installer *in, unsigned slot, const char *key, size_t n,
                      const struct sbx_error *err, bool ok, uint64_t pip_ms, uint64_t ms) {
  char first[200], refusal[8];
  text_printable(err->msg, strcspn(err->msg, "\n"), first, sizeof(first), false);
  unsigned refused = egress_build_refusals(&in->egress, slot, refusal, sizeof refusal);
  log_line("env_build",
           "key=%.64s slot=%u requirements=%zu status=%s pip_ms=%" PRIu64 " duration_ms=%" PRIu64
           " egress_refusals=%u%s%s%s",
           key, slot, n, sbx_code_name(ok ? SBX_OK : err->code), pip_ms, ms, refused,
           ok ? "" : " error=\"", ok ? "" : first, ok ? "" : "\"");
}

int install_build(struct installer *in, unsigned slot, const struct requirement_set *set,
                  struct envstore_env *env, const char *material, struct sbx_error *err) {
  const struct server_settings *s = in->settings;
  uid_t uid = (uid_t)(s->uid_base + slot);
  char ws_name[32], key[REQUIREMENT_KEY_HEX + 1];
  snprintf(ws_name, sizeof(ws_name), "build-%u", slot);
  snprintf(key, sizeof(key), "%s", env->key); /* env may be gone when the build failed */
  uint64_t t0 = sbx_monotonic_ms(), pip_ms = 0;
  int rc = -1;
  err->msg[0] = '\0';
  int ws_fd = workspace_mount(in->workspace_root_fd, in->workspace_root, ws_name,
                              (uint64_t)s->pip_disk_bytes, PIP_INODES, uid, (gid_t)uid, err);
  if (ws_fd < 0) {
    sbx_error_wrap(err, "requirements: build directory");
  } else {
    rc = build_in(in, slot, set, env, material, ws_fd, ws_name, &pip_ms, err);
    close(ws_fd);
    struct sbx_error unmount;
    if (workspace_unmount(in->workspace_root_fd, in->workspace_root, ws_name, &unmount) < 0)
      log_line("workspace_unmount_failed", "name=%s error=\"%s\"", ws_name, unmount.msg);
  }
  if (rc < 0) /* rc 1: the store failed env already */
    envstore_fail(&in->store, env, err);
  uint64_t ms = sbx_monotonic_ms() - t0;
  stats_histogram_observe_us(&in->build_time, ms * 1000u);
  log_build(in, slot, key, set->n, err, rc == 0, pip_ms, ms);
  return rc == 0 ? 0 : -1;
}
