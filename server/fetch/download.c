/* download.c: see download.h. Runs on a worker thread; every byte from the
 * remote end is hostile: bounded by max_bytes while it arrives. */
#include "download.h"

#include <errno.h>

#include <curl/curl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "buf.h"
#include "clock.h"
#include "netaddr.h"
#include "text.h"
#include "settings.h"

struct download_policy download_policy_from(const struct server_settings *s, uint64_t max_bytes) {
  return (struct download_policy){.allowed_hosts = s->download_hosts,
                                  .allow_private = s->download_allow_private != 0,
                                  .timeout_ms = (uint64_t)s->download_timeout_ms,
                                  .max_bytes = max_bytes};
}

int download_global_init(void) {
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

int download_url_syntax_ok(const char *url) {
  size_t len = strlen(url);
  if (len == 0 || len > DOWNLOAD_URL_MAX)
    return 0;
  if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
    return 0;
  return text_graphic_ascii(url);
}

static bool host_allowed(const char *allowed, const char *host) {
  if (allowed == NULL || allowed[0] == '\0')
    return true;
  size_t hl = strlen(host);
  for (const char *p = allowed; *p != '\0';) {
    while (*p == ',' || *p == ' ')
      p++;
    const char *e = p;
    while (*e != '\0' && *e != ',' && *e != ' ')
      e++;
    if ((size_t)(e - p) == hl && hl > 0 && strncasecmp(p, host, hl) == 0)
      return true;
    p = e;
  }
  return false;
}

int download_policy_host(const struct download_policy *policy, const char *host,
                         struct sbx_error *err) {
  if (!host_allowed(policy->allowed_hosts, host))
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "host %.200s is not in download-hosts",
                         host);
  return 0;
}

int download_policy_address(const struct download_policy *policy, const struct sockaddr *sa,
                            socklen_t salen, struct sbx_error *err) {
  /* Past download_policy_host, a non-empty allowlist means the operator
   * named this host: trusted wherever it resolves. */
  bool named = policy->allowed_hosts != NULL && policy->allowed_hosts[0] != '\0';
  const char *why = NULL;
  if (policy->allow_private || named || netaddr_is_public(sa, salen, &why))
    return 0;
  char text[64];
  netaddr_format(sa, salen, text, sizeof text);
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "address %s is %s", text, why);
}

/* Checks the scheme and host of url; fills err when refused. */
static int check_target(const struct download_policy *policy, const char *url,
                        struct sbx_error *err) {
  CURLU *u = curl_url();
  if (u == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "download");
  char *scheme = NULL, *host = NULL;
  int rv = 0;
  /* The scheme first: file:///x has no host, but is refused for its scheme. */
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK)
    rv = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "not a valid URL");
  else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)
    rv = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "scheme %s is not allowed (http and https only)", scheme);
  else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
    rv = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "not a valid URL (no host)");
  else
    rv = download_policy_host(policy, host, err);
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return rv;
}

/* The address guard: curl asks us for each socket it connects with. */
struct guard {
  const struct download_policy *policy;
  char refused[256]; /* "address 10.0.0.1 is private (10.0.0.0/8)" */
};

static curl_socket_t guard_open(void *arg, curlsocktype purpose, struct curl_sockaddr *addr) {
  struct guard *g = arg;
  if (purpose != CURLSOCKTYPE_IPCXN)
    return CURL_SOCKET_BAD;
  struct sbx_error why;
  if (download_policy_address(g->policy, &addr->addr, addr->addrlen, &why) < 0) {
    if (g->refused[0] == '\0') /* the first refusal: curl may try other addresses */
      snprintf(g->refused, sizeof g->refused, "%s", why.msg);
    return CURL_SOCKET_BAD;
  }
  return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

struct sink {
  struct sbx_buf buf;
  uint64_t max;
  bool too_big;
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *arg) {
  struct sink *s = arg;
  size_t n = size * nmemb;
  if (n == 0)
    return 0;
  if (s->buf.len + n > s->max) {
    s->too_big = true;
    return 0; /* makes curl fail with CURLE_WRITE_ERROR */
  }
  if (sbx_buf_append(&s->buf, ptr, n, s->max < SIZE_MAX ? (size_t)s->max : SIZE_MAX) < 0)
    return 0;
  return n;
}

/* Why curl failed, as the client is told. */
static int curl_failure(const struct download_policy *policy, CURLcode rc, const struct sink *sink,
                        const struct guard *guard, const char *errbuf, struct sbx_error *err) {
  char size_text[32];
  text_format_bytes(policy->max_bytes, size_text, sizeof(size_text));
  if (sink->too_big || rc == CURLE_FILESIZE_EXCEEDED)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "larger than %s (max-file-bytes)",
                         size_text);
  if (guard->refused[0] != '\0')
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "%s; downloads reach public addresses only (set download-hosts or "
                         "download-allow-private)",
                         guard->refused);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "timed out after %llu ms",
                         (unsigned long long)policy->timeout_ms);
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "%s",
                       errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
}

/* One request, no redirect followed. Returns 0 with sink holding the body,
 * 1 with next set to where it redirects, -1 with err. */
static int fetch_hop(const struct download_policy *policy, const char *url, uint64_t deadline,
                     struct sink *sink, char *next, size_t next_len, struct sbx_error *err) {
  uint64_t now = sbx_monotonic_ms();
  if (now >= deadline)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "timed out after %llu ms",
                         (unsigned long long)policy->timeout_ms);
  CURL *c = curl_easy_init();
  if (c == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "download");
  struct guard guard = {.policy = policy};
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* by hand, checked each hop */
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(deadline - now));
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)policy->max_bytes);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sandboxd/" SANDBOXD_VERSION);
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL); /* no decompression bombs */
  curl_easy_setopt(c, CURLOPT_PROXY, "");             /* never http_proxy & co. */
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, guard_open);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &guard);
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  char *location = NULL;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location);
  int ret = 0;
  if (rc != CURLE_OK)
    ret = curl_failure(policy, rc, sink, &guard, errbuf, err);
  else if (status >= 300 && status < 400 && location != NULL && strlen(location) >= next_len)
    ret = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "redirect target longer than %d bytes",
                        DOWNLOAD_URL_MAX);
  else if (status >= 300 && status < 400 && location != NULL) {
    snprintf(next, next_len, "%s", location);
    ret = 1;
  } else if (status < 200 || status >= 300)
    ret = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "HTTP status %ld", status);
  curl_easy_cleanup(c);
  return ret;
}

int download_fetch(const struct download_policy *policy, const char *url, uint8_t **body,
                   size_t *len, struct sbx_error *err) {
  *body = NULL;
  *len = 0;
  char current[DOWNLOAD_URL_MAX + 1];
  snprintf(current, sizeof(current), "%s", url);
  uint64_t deadline = sbx_monotonic_ms() + policy->timeout_ms;
  for (int hop = 0; hop <= DOWNLOAD_MAX_REDIRECTS; hop++) {
    if (check_target(policy, current, err) < 0)
      return hop > 0 ? sbx_error_wrap(err, "redirected to %.300s", current) : -1;
    struct sink sink = {.max = policy->max_bytes};
    char next[DOWNLOAD_URL_MAX + 1];
    int rc = fetch_hop(policy, current, deadline, &sink, next, sizeof(next), err);
    if (rc != 0) {
      sbx_buf_free(&sink.buf);
      if (rc < 0)
        return -1;
      snprintf(current, sizeof(current), "%s", next);
      continue;
    }
    *len = sink.buf.len;
    *body = sink.buf.data != NULL ? sbx_buf_steal(&sink.buf, NULL) : malloc(1);
    return *body != NULL ? 0 : sbx_error_set(err, SBX_INTERNAL, ENOMEM, "download");
  }
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0, "more than %d redirects",
                       DOWNLOAD_MAX_REDIRECTS);
}
