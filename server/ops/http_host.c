/* http_host.c: see http_host.h. Parses and compares names; reads the
 * machine's hostname at start and its interface addresses when a Host asks
 * for an address. Never resolves a name: what a name resolves to is what a
 * rebinding attacker controls. */
#include "http_host.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "text.h"

static bool name_char(char c) {
  return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

bool http_host_normalize(const char *in, size_t in_len, char *out, size_t out_len) {
  char buf[HTTP_HOST_NAME_MAX];
  if (in_len >= 2 && in[0] == '[' && in[in_len - 1] == ']') {
    in++;
    in_len -= 2;
  }
  if (in_len == 0 || in_len >= sizeof(buf))
    return false;
  memcpy(buf, in, in_len);
  buf[in_len] = '\0';
  unsigned char addr[sizeof(struct in6_addr)];
  int family = inet_pton(AF_INET, buf, addr) == 1    ? AF_INET
               : inet_pton(AF_INET6, buf, addr) == 1 ? AF_INET6
                                                     : 0;
  if (family != 0)
    return inet_ntop(family, addr, out, (socklen_t)out_len) != NULL;
  if (in_len > 1 && buf[in_len - 1] == '.')
    buf[--in_len] = '\0';
  for (size_t i = 0; i < in_len; i++) {
    if (!name_char(buf[i]))
      return false;
    buf[i] = (char)tolower((unsigned char)buf[i]);
  }
  if (in_len >= out_len)
    return false;
  memcpy(out, buf, in_len + 1);
  return true;
}

bool http_host_parse(const char *value, char *name, size_t len) {
  size_t n = strlen(value), host_len = n;
  const char *port = NULL;
  if (value[0] == '[') {
    const char *close = strchr(value, ']');
    if (close == NULL)
      return false;
    host_len = (size_t)(close - value) + 1;
    if (close[1] == ':')
      port = close + 2;
    else if (close[1] != '\0')
      return false;
  } else {
    const char *colon = strrchr(value, ':');
    if (colon != NULL) {
      host_len = (size_t)(colon - value);
      port = colon + 1;
    }
  }
  if (port != NULL) { /* port = *DIGIT (RFC 3986), within 16 bits */
    size_t digits = strspn(port, "0123456789");
    if (port[digits] != '\0' || digits > 5 || (digits > 0 && strtol(port, NULL, 10) > 65535))
      return false;
  }
  return value[0] != '[' ? memchr(value, ':', host_len) == NULL &&
                               http_host_normalize(value, host_len, name, len)
                         : http_host_normalize(value, host_len, name, len) && strchr(name, ':');
}

/* Appends a normalized name to the list; -1 with err when it is full. */
static int add_name(struct http_host_names *n, const char *name, struct sbx_error *err) {
  size_t used = strlen(n->list), len = strlen(name);
  if (used + len + 2 > sizeof(n->list))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "http-allowed-hosts: more names than fit in %zu bytes", sizeof(n->list));
  snprintf(n->list + used, sizeof(n->list) - used, "%s%s", used > 0 ? "," : "", name);
  return 0;
}

/* A wildcard address (0.0.0.0, ::) is no name a client sends. */
static bool wildcard(const char *name) {
  return strcmp(name, "0.0.0.0") == 0 || strcmp(name, "::") == 0;
}

int http_host_names_init(struct http_host_names *n, const char *listen_host, const char *extra,
                         struct sbx_error *err) {
  char name[HTTP_HOST_NAME_MAX];
  n->list[0] = '\0';
  if (add_name(n, "localhost", err) < 0)
    return -1;
  if (http_host_normalize(listen_host, strlen(listen_host), name, sizeof(name)) &&
      !wildcard(name) && add_name(n, name, err) < 0)
    return -1;
  char hostname[HTTP_HOST_NAME_MAX] = "";
  if (gethostname(hostname, sizeof(hostname) - 1) == 0 &&
      http_host_normalize(hostname, strlen(hostname), name, sizeof(name)) &&
      add_name(n, name, err) < 0)
    return -1;
  for (const char *p = extra; *p != '\0';) {
    size_t len = strcspn(p, ",");
    if (!http_host_normalize(p, len, name, sizeof(name)))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "http-allowed-hosts: \"%.*s\" is not a host name or an IP address "
                           "(no port: ports are not compared)",
                           (int)len, p);
    if (add_name(n, name, err) < 0)
      return -1;
    p += len + (p[len] == ',');
  }
  return 0;
}

/* Whether addr (family's binary form) is loopback or on an interface. */
static bool own_address(int family, const unsigned char *addr) {
  if (family == AF_INET && addr[0] == 127)
    return true; /* 127.0.0.0/8: all of it is this machine */
  if (family == AF_INET6 && memcmp(addr, &in6addr_loopback, sizeof(in6addr_loopback)) == 0)
    return true;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) < 0)
    return false;
  bool found = false;
  for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
    const struct sockaddr *sa = i->ifa_addr;
    if (sa == NULL || sa->sa_family != family)
      continue;
    const void *a = family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    found = memcmp(a, addr, family == AF_INET ? 4 : 16) == 0;
  }
  freeifaddrs(ifs);
  return found;
}

bool http_host_allowed(const struct http_host_names *n, const char *name) {
  if (text_list_has(n->list, name))
    return true;
  unsigned char addr[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, name, addr) == 1)
    return own_address(AF_INET, addr);
  if (inet_pton(AF_INET6, name, addr) == 1)
    return own_address(AF_INET6, addr);
  return false;
}
