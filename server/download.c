/* download.c: see download.h. Runs on a worker thread; every byte from the
 * remote end is hostile: bounded by max_bytes while it arrives. */
#include "download.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "feedback.h"
#include "netaddr.h"
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
  for (const char *c = url; *c != '\0'; c++)
    if ((unsigned char)*c <= 0x20 || *c == 0x7f)
      return 0;
  return 1;
}

__attribute__((format(printf, 3, 4))) static int reason_set(char *reason, size_t len,
                                                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, len, fmt, ap);
  va_end(ap);
  return -1;
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

int download_policy_host(const struct download_policy *policy, const char *host, char *reason,
                         size_t reasonlen) {
  if (!host_allowed(policy->allowed_hosts, host))
    return reason_set(reason, reasonlen, "host %.200s is not in download-hosts", host);
  return 0;
}

int download_policy_address(const struct download_policy *policy, const struct sockaddr *sa,
                            socklen_t salen, char *reason, size_t reasonlen) {
  /* Past download_policy_host, a non-empty allowlist means the operator
   * named this host: trusted wherever it resolves. */
  bool named = policy->allowed_hosts != NULL && policy->allowed_hosts[0] != '\0';
  const char *why = NULL;
  if (policy->allow_private || named || netaddr_is_public(sa, salen, &why))
    return 0;
  char text[64];
  netaddr_format(sa, salen, text, sizeof text);
  return reason_set(reason, reasonlen, "address %s is %s", text, why);
}

/* Checks the scheme and host of url; fills reason when refused. */
static int check_target(const struct download_policy *policy, const char *url, char *reason,
                        size_t reasonlen) {
  CURLU *u = curl_url();
  if (u == NULL)
    return reason_set(reason, reasonlen, "out of memory");
  char *scheme = NULL, *host = NULL;
  int rv = 0;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
    rv = reason_set(reason, reasonlen, "not a valid URL");
  } else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0) {
    rv = reason_set(reason, reasonlen, "scheme %s is not allowed (http and https only)", scheme);
  } else {
    rv = download_policy_host(policy, host, reason, reasonlen);
  }
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return rv;
}

/* The address guard: curl asks us for each socket it connects with. */
struct guard {
  const struct download_policy *policy;
  char refused[256];  /* "address 10.0.0.1 is private (10.0.0.0/8)" */
};

static curl_socket_t guard_open(void *arg, curlsocktype purpose, struct curl_sockaddr *addr) {
  struct guard *g = arg;
  if (purpose != CURLSOCKTYPE_IPCXN)
    return CURL_SOCKET_BAD;
  char why[256];
  if (download_policy_address(g->policy, &addr->addr, addr->addrlen, why, sizeof why) < 0) {
    if (g->refused[0] == '\0') /* the first refusal: curl may try other addresses */
      snprintf(g->refused, sizeof g->refused, "%s", why);
    return CURL_SOCKET_BAD;
  }
  return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

struct sink {
  uint8_t *data;
  size_t len, cap;
  uint64_t max;
  bool too_big;
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *arg) {
  struct sink *s = arg;
  size_t n = size * nmemb;
  if (n == 0)
    return 0;
  if (s->len + n > s->max) {
    s->too_big = true;
    return 0; /* makes curl fail with CURLE_WRITE_ERROR */
  }
  if (s->len + n > s->cap) {
    size_t ncap = s->cap != 0 ? s->cap : 16384;
    while (ncap < s->len + n)
      ncap *= 2;
    if (ncap > s->max)
      ncap = (size_t)s->max;
    uint8_t *p = realloc(s->data, ncap);
    if (p == NULL)
      return 0;
    s->data = p;
    s->cap = ncap;
  }
  memcpy(s->data + s->len, ptr, n);
  s->len += n;
  return n;
}

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int download_fetch(const struct download_policy *policy, const char *url, uint8_t **body,
                   size_t *len, char *reason, size_t reasonlen) {
  *body = NULL;
  *len = 0;
  char current[DOWNLOAD_URL_MAX + 1];
  snprintf(current, sizeof(current), "%s", url);
  uint64_t deadline = mono_ms() + policy->timeout_ms;
  char size_text[32];
  feedback_format_bytes(policy->max_bytes, size_text, sizeof(size_text));

  for (int hop = 0; hop <= DOWNLOAD_MAX_REDIRECTS; hop++) {
    if (check_target(policy, current, reason, reasonlen) < 0) {
      if (hop > 0) {
        char inner[256];
        snprintf(inner, sizeof(inner), "%s", reason);
        reason_set(reason, reasonlen, "redirected to %.300s: %s", current, inner);
      }
      return -1;
    }
    uint64_t now = mono_ms();
    if (now >= deadline)
      return reason_set(reason, reasonlen, "timed out after %llu ms",
                        (unsigned long long)policy->timeout_ms);
    CURL *c = curl_easy_init();
    if (c == NULL)
      return reason_set(reason, reasonlen, "out of memory");
    struct sink sink = {.max = policy->max_bytes};
    struct guard guard = {.policy = policy};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, current);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* by hand, checked each hop */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(deadline - now));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)policy->max_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sandboxd/" SANDBOXD_VERSION);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL); /* no decompression bombs */
    curl_easy_setopt(c, CURLOPT_PROXY, "");             /* never http_proxy & co. */
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, guard_open);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &guard);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    char *location = NULL;
    curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location);
    char next[DOWNLOAD_URL_MAX + 1] = "";
    bool next_too_long = false;
    if (location != NULL) {
      if (strlen(location) > DOWNLOAD_URL_MAX)
        next_too_long = true;
      else
        snprintf(next, sizeof(next), "%s", location);
    }
    curl_easy_cleanup(c);

    if (rc != CURLE_OK) {
      free(sink.data);
      if (sink.too_big || rc == CURLE_FILESIZE_EXCEEDED)
        return reason_set(reason, reasonlen, "larger than %s (max-file-bytes)", size_text);
      if (guard.refused[0] != '\0')
        return reason_set(reason, reasonlen,
                          "%s; downloads reach public addresses only (set download-hosts or "
                          "download-allow-private)",
                          guard.refused);
      if (rc == CURLE_OPERATION_TIMEDOUT)
        return reason_set(reason, reasonlen, "timed out after %llu ms",
                          (unsigned long long)policy->timeout_ms);
      return reason_set(reason, reasonlen, "%s", errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
    }
    if (status >= 300 && status < 400 && (next[0] != '\0' || next_too_long)) {
      free(sink.data);
      if (next_too_long)
        return reason_set(reason, reasonlen, "redirect target longer than %d bytes",
                          DOWNLOAD_URL_MAX);
      snprintf(current, sizeof(current), "%s", next);
      continue;
    }
    if (status < 200 || status >= 300) {
      free(sink.data);
      return reason_set(reason, reasonlen, "HTTP status %ld", status);
    }
    *body = sink.data != NULL ? sink.data : malloc(1);
    *len = sink.len;
    if (*body == NULL)
      return reason_set(reason, reasonlen, "out of memory");
    return 0;
  }
  return reason_set(reason, reasonlen, "more than %d redirects", DOWNLOAD_MAX_REDIRECTS);
}
