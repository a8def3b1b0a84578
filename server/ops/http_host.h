/* http_host.h: the names the HTTP listener answers to, for its check of
 * the Host header against DNS rebinding: a web page whose own name the
 * attacker re-points at this machine's address reaches the listener with
 * that name in Host, and is refused (421) unless the name is one of ours.
 *
 * Ours are: the host of --http-listen (unless it is a wildcard address),
 * localhost, the machine's hostname, the names of --http-allowed-hosts, and
 * every IP address that reaches this machine: loopback, and the addresses
 * of its interfaces, read when a Host asks for one (a pod's IP, which a
 * kubelet's probes and a Prometheus scrape put in Host, is not known
 * before the pod starts). The port of Host is not compared: a port mapping
 * (docker -p, kubectl port-forward, a Service's port) changes it, and the
 * name is what a rebinding page cannot choose. No HTTP library here: the
 * listener (http.c) reads the header and passes its value. */
#ifndef SBX_OPS_HTTP_HOST_H
#define SBX_OPS_HTTP_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define HTTP_HOST_NAME_MAX 256   /* a name (253) or an address, NUL included */
#define HTTP_HOST_NAMES_MAX 2048 /* the list of names, comma-separated */

struct http_host_names {
  char list[HTTP_HOST_NAMES_MAX]; /* normalized (http_host_normalize), comma-separated */
};

/* The names a listener on listen_host (settings_http_listen_parts' host,
 * without brackets) answers to, with extra (--http-allowed-hosts:
 * comma-separated names or addresses, "" for none). 0, or -1 with err
 * (an entry that is not a name or an address, or too many). */
int http_host_names_init(struct http_host_names *n, const char *listen_host, const char *extra,
                         struct sbx_error *err);

/* A name as compared: lowercase, one final '.' dropped (an absolute name),
 * an IP address in its canonical text without brackets ("::1",
 * "127.0.0.1"). False when it is neither a name (letters, digits, '-', '.',
 * '_') nor an address. */
bool http_host_normalize(const char *in, size_t in_len, char *out, size_t out_len);

/* The name of a Host header value (uri-host [":" port], RFC 9110 7.2),
 * normalized, into name; false when the value is not of that form (a
 * client error: 400). */
bool http_host_parse(const char *value, char *name, size_t len);

/* Whether a normalized name is one of the listener's: on the list, or an
 * address of this machine (loopback, or one of its interfaces now). */
bool http_host_allowed(const struct http_host_names *n, const char *name);

#endif
