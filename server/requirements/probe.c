/* probe.c: what the server learns about the interpreter at start (the
 * environment key's context, the site directory environments are mounted
 * over), and the installer's start and stop: the store of environments and
 * the egress proxy. See install.h. */
#include "install.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "safefs.h"

static const char probe_code[] =
    "import sys, sysconfig\n"
    "try:\n"
    "    import pip; pv = pip.__version__\n"
    "except Exception:\n"
    "    pv = ''\n"
    "site = '/usr/local/lib/python%d.%d/dist-packages' % sys.version_info[:2]\n"
    "print(sys.version.split()[0], sysconfig.get_platform(), "
    "sys.implementation.cache_tag)\n"
    "print(pv)\n"
    "print(site if site in sys.path else '')\n";

/* Runs the probe; out gets its stdout (NUL-terminated). */
static int run_probe(char *out, size_t len) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  char *argv[] = {INSTALL_PYTHON, "-I", "-c", (char *)probe_code, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, INSTALL_PYTHON, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    errno = rc;
    return -1;
  }
  size_t n = 0;
  for (;;) {
    ssize_t k = read(pipefd[0], out + n, len - 1 - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0 || (n += (size_t)k) == len - 1)
      break;
  }
  out[n] = '\0';
  close(pipefd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* SHA-256 over the wheelhouse's top-level names, sizes and mtimes, so that
 * a changed wheelhouse gives new keys after a restart. */
static int wheelhouse_fingerprint(const char *dir, char *hex, size_t len) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  char **names;
  size_t n;
  bool truncated;
  struct sbx_error ignored;
  if (safefs_read_names(fd, 1u << 20, &names, &n, &truncated, &ignored) < 0) {
    close(fd);
    return -1;
  }
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int rv = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? 0 : -1;
  for (size_t i = 0; i < n && rv == 0; i++) {
    struct stat st;
    char line[600];
    if (fstatat(fd, names[i], &st, 0) < 0)
      continue;
    int k = snprintf(line, sizeof(line), "%.500s %lld %lld.%09ld\n", names[i],
                     (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    if (EVP_DigestUpdate(ctx, line, (size_t)k) != 1)
      rv = -1;
  }
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  if (rv == 0 && (EVP_DigestFinal_ex(ctx, d, &dl) != 1 || dl * 2 + 1 > len))
    rv = -1;
  for (unsigned i = 0; rv == 0 && i < dl; i++)
    snprintf(hex + 2 * i, 3, "%02x", d[i]);
  EVP_MD_CTX_free(ctx);
  safefs_free_names(names, n);
  close(fd);
  return rv;
}

static void unavailable(struct install_info *info, const char *why) {
  info->available = false;
  snprintf(info->why_unavailable, sizeof(info->why_unavailable), "%s", why);
}

void install_describe_index(const struct server_settings *s, char *out, size_t len) {
  const char *url = settings_index_url(s);
  const char *scheme_end = strstr(url, "://");
  const char *at = scheme_end != NULL ? strchr(scheme_end + 3, '@') : NULL;
  const char *slash = scheme_end != NULL ? strchr(scheme_end + 3, '/') : NULL;
  if (at != NULL && (slash == NULL || at < slash)) /* credentials: never shown */
    snprintf(out, len, "%.*s***%s", (int)(scheme_end + 3 - url), url, at);
  else
    snprintf(out, len, "%s", url);
}

void install_probe(const struct server_settings *s, struct install_info *info) {
  memset(info, 0, sizeof(*info));
  char out[1024];
  bool asked = run_probe(out, sizeof(out)) == 0;
  if (asked) /* the first word: "3.11.2 linux-x86_64 cpython-311" */
    snprintf(info->python_version, sizeof(info->python_version), "%.*s", (int)strcspn(out, " \n"),
             out);
  if (s->offline != 0 && s->wheelhouse[0] == '\0' && s->requirements_allow_urls == 0) {
    unavailable(info, "no package source is configured (offline = 1, and no --wheelhouse or "
                      "--requirements-allow-urls)");
    return;
  }
  if (!asked) {
    unavailable(info, "/usr/bin/python3 could not be asked for its version");
    return;
  }
  char *line2 = strchr(out, '\n');
  char *line3 = line2 != NULL ? strchr(line2 + 1, '\n') : NULL;
  if (line2 == NULL || line3 == NULL) {
    unavailable(info, "/usr/bin/python3 gave an unexpected answer");
    return;
  }
  *line2++ = '\0';
  *line3++ = '\0';
  line3[strcspn(line3, "\n")] = '\0';
  if (line2[0] == '\0') {
    unavailable(info, "pip is not installed for /usr/bin/python3 (Debian: python3-pip)");
    return;
  }
  struct stat st;
  if (line3[0] == '\0' || stat(line3, &st) < 0 || !S_ISDIR(st.st_mode)) {
    unavailable(info, "the interpreter has no /usr/local site directory on its path");
    return;
  }
  snprintf(info->site_dir, sizeof(info->site_dir), "%s", line3);
  char fp[65] = "none";
  if (s->wheelhouse[0] != '\0' && wheelhouse_fingerprint(s->wheelhouse, fp, sizeof(fp)) < 0) {
    unavailable(info, "the wheelhouse cannot be read");
    return;
  }
  /* The index in force, not the proxy: a proxy changes the path, not what
   * is installed. Offline keys are what they were before the index became
   * the default. */
  const char *index = settings_index_url(s);
  snprintf(info->key_context, sizeof(info->key_context),
           "python=%.100s\npip=%.40s\nsource=%s\nwheelhouse=%.300s "
           "%s\nindex-url=%.300s",
           out, line2, index[0] != '\0' ? "network" : "offline", s->wheelhouse, fp, index);
  info->available = true;
}

/* With an index in force, pip's only way out: the egress proxy, serving
 * one installer namespace per worker slot. Logs what requirements use. */
static int start_egress(struct installer *in, const struct egress_config *cfg, unsigned slots,
                        struct sbx_error *err) {
  const struct server_settings *s = in->settings;
  char index[SETTINGS_URL_MAX], upstream[SETTINGS_URL_MAX + 16] = "";
  install_describe_index(s, index, sizeof index);
  if (index[0] != '\0') {
    if (egress_start(&in->egress, cfg, slots, err) < 0)
      return sbx_error_wrap(err, "egress proxy");
    if (s->pip_proxy[0] != '\0')
      snprintf(upstream, sizeof upstream, " upstream=%s", s->pip_proxy);
  }
  log_line("requirements",
           "available=true site_dir=%s offline=%s index_url=%s wheelhouse=%s urls=%s egress=%s%s",
           in->info.site_dir, index[0] != '\0' ? "false" : "true", index[0] != '\0' ? index : "-",
           s->wheelhouse[0] != '\0' ? s->wheelhouse : "-",
           s->requirements_allow_urls != 0 ? "true" : "false",
           index[0] != '\0' ? EGRESS_PROXY_URL : "-", upstream);
  return 0;
}

int installer_start(struct installer *in, const struct egress_config *egress_cfg, unsigned slots,
                    struct sbx_error *err) {
  const struct server_settings *s = in->settings;
  in->store.dir_fd = -1;
  stats_histogram_init(&in->build_time, stats_bounds_build_us, stats_bounds_build_n);
  install_probe(s, &in->info);
  if (!in->info.available) {
    log_line("requirements", "available=false reason=\"%s\"", in->info.why_unavailable);
    return 0;
  }
  char envs[PATH_MAX + 16];
  snprintf(envs, sizeof(envs), "%s/envs", s->state_dir);
  if (envstore_open(&in->store, envs, (uint64_t)s->requirements_store_bytes, err) < 0)
    return sbx_error_wrap(err, "requirements store");
  in->store.max_building = s->max_concurrent_builds > 0 ? (unsigned)s->max_concurrent_builds
                           : s->workers >= 2            ? (unsigned)s->workers / 2
                                                        : 1;
  return start_egress(in, egress_cfg, slots, err);
}

void installer_stop(struct installer *in) {
  egress_stop(&in->egress); /* no build runs any more; safe when it never started */
  envstore_close(&in->store);
}
