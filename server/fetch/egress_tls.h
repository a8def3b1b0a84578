/* egress_tls.h: the server name a TLS ClientHello asks for, read by the
 * egress proxy (egress.c) from the first bytes a program sends through a
 * CONNECT tunnel, so that a tunnel opened to an allowed host cannot speak
 * TLS to another name hosted at the same address (domain fronting). A pure
 * function over bytes from the sandbox (hostile): bounded, never reads past
 * len, unit-tested (tests/unit/test_egress_tls.c) and fuzzed
 * (tests/fuzz/fuzz_egress_tls.c). */
#ifndef SBX_EGRESS_TLS_H
#define SBX_EGRESS_TLS_H

#include <stddef.h>
#include <stdint.h>

/* The most the proxy reads before deciding: a ClientHello larger than this
 * (across records, counted on the wire with the record headers) is
 * refused, so len >= EGRESS_TLS_HELLO_MAX never gets MORE. */
#define EGRESS_TLS_HELLO_MAX 16384

enum egress_tls_sni {
  EGRESS_TLS_MORE,     /* not enough bytes yet: read more (up to EGRESS_TLS_HELLO_MAX) */
  EGRESS_TLS_SNI,      /* a ClientHello with a host_name: in sni, lower case */
  EGRESS_TLS_NO_SNI,   /* a whole ClientHello without server_name */
  EGRESS_TLS_NOT_TLS,  /* the first byte is not a TLS handshake record */
  EGRESS_TLS_MALFORMED /* a handshake record, but not a well-formed ClientHello */
};

/* Looks at the first len bytes of a connection. The ClientHello may span
 * several handshake records. sni gets a NUL-terminated name of at most 253
 * bytes (snilen >= 254); a server_name that is not a DNS name, or longer,
 * is MALFORMED. why (may be NULL) says what is wrong, for the log. */
enum egress_tls_sni egress_tls_sni(const uint8_t *buf, size_t len, char *sni, size_t snilen,
                                   char *why, size_t whylen);

#endif
