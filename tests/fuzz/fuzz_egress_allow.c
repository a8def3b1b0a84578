/* fuzz_egress_allow: libFuzzer harness over a run's allow list
 * (server/fetch/egress_allow.c), whose entries come from clients
 * (RunCodeRequest.allow_net), operators and tenants files. Any bytes are
 * parsed as an entry, from a NUL-terminated copy and, past
 * EGRESS_ALLOW_ENTRY_MAX, from a copy with no NUL (so ASan sees a read past
 * the bound). An accepted entry must format to text that parses back to the
 * same entry, lie within itself, and let its own spelling through as a
 * target when it is a host or an address; a refused one has a short,
 * printable reason. Built with clang, ASan and UBSan by scripts/fuzz; any
 * crash, sanitizer report or broken invariant aborts. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_allow.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_egress_allow: invariant broken: %s\n", what);
    abort();
  }
}

static void check_accepted(const struct egress_allow_entry *e) {
  char text[EGRESS_ALLOW_ENTRY_MAX + 1], why[256];
  struct egress_allow_entry back;
  egress_allow_format(e, text, sizeof text);
  require(strlen(text) > 0 && strlen(text) < EGRESS_ALLOW_ENTRY_MAX, "an entry formats to text");
  require(egress_allow_parse(text, &back, why, sizeof why) == 0, "a formatted entry parses");
  require(memcmp(&back, e, sizeof back) == 0, "format round-trips");
  require(egress_allow_entry_within(e, e), "an entry lies within itself");

  struct egress_allow list;
  memset(&list, 0, sizeof list);
  list.e[0] = *e;
  list.n = 1;
  require(egress_allow_within(e, &list), "an entry lies within a list of itself");
  uint16_t port = e->port != 0 ? e->port : 443;
  if (e->kind == EGRESS_ALLOW_HOST) {
    require(egress_allow_target(&list, e->name, port), "a host entry allows its name");
    require(e->any_port == egress_allow_target(&list, e->name, port == 1 ? 2 : 1),
            "only on its ports (every port with ':*')");
  }
  if (e->kind == EGRESS_ALLOW_CIDR) {
    char addr[INET6_ADDRSTRLEN];
    require(inet_ntop(e->family, e->addr, addr, sizeof addr) != NULL, "a CIDR's address formats");
    require(egress_allow_target(&list, addr, port), "a CIDR allows its network address");
    require(!egress_allow_target(&list, "example.com", port), "a CIDR allows no name");
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (e->family == AF_INET) {
      struct sockaddr_in *in = (struct sockaddr_in *)&ss;
      in->sin_family = AF_INET;
      memcpy(&in->sin_addr, e->addr, 4);
      len = sizeof *in;
    } else {
      struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
      in6->sin6_family = AF_INET6;
      memcpy(&in6->sin6_addr, e->addr, 16);
      len = sizeof *in6;
    }
    require(egress_allow_address(&list, (struct sockaddr *)&ss, len, port),
            "a CIDR allows its network address as a socket address");
  } else {
    require(!egress_allow_target(&list, "192.0.2.1", port), "a name entry allows no address");
  }
}

static void check_refused(const char *why) {
  size_t n = strlen(why);
  require(n > 0 && n < 160, "a reason has 1 to 159 bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  struct egress_allow_entry e;
  char why[256] = "";
  if (egress_allow_parse(text, &e, why, sizeof why) == 0) {
    require(strlen(text) <= EGRESS_ALLOW_ENTRY_MAX, "an accepted entry is short");
    check_accepted(&e);
  } else {
    check_refused(why);
  }
  /* The same bytes as a target, against a list of wide entries. */
  struct egress_allow wide;
  memset(&wide, 0, sizeof wide);
  static const char *const wide_texts[] = {"*", "0.0.0.0/0", "::/0"};
  for (size_t i = 0; i < 3; i++)
    require(egress_allow_parse(wide_texts[i], &wide.e[i], why, sizeof why) == 0, "wide entries");
  wide.n = 3;
  (void)egress_allow_target(&wide, text, 443);
  free(text);
  if (size > EGRESS_ALLOW_ENTRY_MAX) {
    /* No NUL within the bound: nothing past it may be read. */
    char *raw = malloc(EGRESS_ALLOW_ENTRY_MAX + 1);
    if (raw == NULL)
      return 0;
    memcpy(raw, data, EGRESS_ALLOW_ENTRY_MAX + 1);
    if (memchr(raw, '\0', EGRESS_ALLOW_ENTRY_MAX + 1) == NULL)
      require(egress_allow_parse(raw, &e, why, sizeof why) == -1, "past the bound is refused");
    free(raw);
  }
  return 0;
}
