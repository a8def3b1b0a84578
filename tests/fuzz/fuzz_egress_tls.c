/* fuzz_egress_tls: libFuzzer harness over the ClientHello parser
 * (server/fetch/egress_tls.c), the first bytes a sandboxed program sends
 * through a CONNECT tunnel. Seeds: real hellos (tests/fuzz/corpus_egress_tls,
 * written by tests/unit/make_tls_hellos.py). Checks, besides ASan and UBSan
 * on a copy of exactly the input's length: a server name given is a lower
 * case DNS name; 16384 bytes or more always get an answer (never MORE);
 * NOT_TLS exactly when the first byte is not 22; a refusal says why; and a
 * prefix of the input never gets a different answer than MORE or the
 * input's own (MORE means "valid so far"). Any broken invariant aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_tls.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_egress_tls: invariant broken: %s\n", what);
    abort();
  }
}

static enum egress_tls_sni run(const uint8_t *data, size_t size, char *sni, size_t snilen,
                               char *why, size_t whylen) {
  uint8_t *copy = malloc(size > 0 ? size : 1);
  if (copy == NULL)
    abort();
  memcpy(copy, data, size);
  enum egress_tls_sni r = egress_tls_sni(copy, size, sni, snilen, why, whylen);
  free(copy);
  return r;
}

static void check_name(const char *sni) {
  size_t n = strlen(sni), label = 0;
  require(n >= 1 && n <= 253, "a server name has 1 to 253 bytes");
  for (size_t i = 0; i < n; i++) {
    char c = sni[i];
    if (c == '.') {
      require(label > 0, "no empty label");
      label = 0;
      continue;
    }
    require((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_',
            "a server name is lower case [a-z0-9._-]");
    label++;
    require(label <= 63, "labels of at most 63 bytes");
  }
  require(label > 0, "no trailing dot");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char sni[254], why[256];
  enum egress_tls_sni r = run(data, size, sni, sizeof sni, why, sizeof why);
  require(r == EGRESS_TLS_MORE || r == EGRESS_TLS_SNI || r == EGRESS_TLS_NO_SNI ||
              r == EGRESS_TLS_NOT_TLS || r == EGRESS_TLS_MALFORMED,
          "a known answer");
  require((r == EGRESS_TLS_NOT_TLS) == (size > 0 && data[0] != 22),
          "NOT_TLS exactly when the first byte is not a handshake record's");
  if (size >= EGRESS_TLS_HELLO_MAX)
    require(r != EGRESS_TLS_MORE, "EGRESS_TLS_HELLO_MAX bytes always get an answer");
  if (r == EGRESS_TLS_SNI)
    check_name(sni);
  else
    require(sni[0] == '\0', "no server name unless SNI");
  if (r == EGRESS_TLS_MALFORMED)
    require(why[0] != '\0', "a refusal says why");
  /* Prefixes: half, and all but the last byte. */
  const size_t cuts[2] = {size / 2, size > 0 ? size - 1 : 0};
  for (int i = 0; i < 2; i++) {
    char psni[254];
    enum egress_tls_sni p = run(data, cuts[i], psni, sizeof psni, NULL, 0);
    require(p == EGRESS_TLS_MORE || p == r, "a prefix gets MORE or the input's answer");
    if (p == EGRESS_TLS_SNI)
      require(strcmp(psni, sni) == 0, "a prefix names the same server");
  }
  return 0;
}
